#!/bin/sh
# What `microbatches auto;` chooses (docs/language.md "microbatches"): a step of B
# sequences cut into m microbatches, each count compiled by hand under `stages auto;` and
# `schedule auto;`, against the count pipecc chooses itself, and that compile's time.
#
# Models as bench/bench_part.sh's (Llama-3-8B-like, GPT-2-XL-like; bf16 on h100,
# `recompute *`, 4096-token sequences) at pp = 4 and 8 with a step of 4 x pp sequences.
# Steps are pipesim's overlap model, in ms.  Figures only.
# Env: BIN (tools folder).
: "${BIN:=bin}"
for tool in pipecc pipesim; do
	if [ ! -x "$BIN/$tool" ]; then
		echo "bench_batch: skipped: $BIN/$tool not built"
		exit 0
	fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. bench/models.sh

# prog PP MICROBATCHES SEQUENCES
prog() {
	cat <<EOF
pipeline b;
mesh pp=$1;
microbatches $2;
input tokens ${3}x4096 vocab=$VOCAB;
device h100;
precision bf16;
optimizer adamw lr=3e-4;
recompute *;
block layer {
$BLOCK
}
model { $EMBED layer x $L; $FINAL }
stages auto;
schedule auto;
EOF
}

run_model() {
	for pp in 4 8; do
		b=$((4 * pp)) line=
		for m in $pp $((2 * pp)) $b; do
			prog $pp $m $((b / m)) >"$dir/m.pipe"
			s=$(step "$dir/m.pipe")
			line="$line  m=$m: ${s:--}"
		done
		prog $pp auto $b >"$dir/a.pipe"
		s0=$(date +%s%N)
		"$BIN/pipecc" "$dir/a.pipe" -o "$dir/x.plan" 2>/dev/null
		s1=$(date +%s%N)
		a=$(step "$dir/a.pipe")
		m=$(sed -n 's/^microbatches //p' "$dir/x.plan")
		printf "%-10s pp=%d batch %2d |%s | auto: m=%s %s ms, compile %.2f s\n" "$NAME" $pp $b \
			"$line" "$m" "$a" "$(echo $((s1 - s0)) | awk '{ print $1 / 1e9 }')"
	done
}

echo "predicted step, ms (pipesim overlap model), a step of 4 x pp 4096-token sequences cut"
echo "into m microbatches (stages auto, schedule auto), and what microbatches auto chooses"
llama3_8b
run_model
gpt2_xl
run_model
