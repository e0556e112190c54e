#!/bin/sh
# What pipecc's automatic partitioning (`model { ... }` with `stages auto;`,
# docs/schedules.md "Partitioning") gains over a hand-written uniform split.
#
# Method: for a Llama-3-8B-like model (32 layers, d 4096, GQA 32/8 heads, SwiGLU 14336,
# vocabulary 128256, untied head) and a GPT-2-XL-like one (48 layers, d 1600, 25 heads,
# MLP 6400, vocabulary 50257, tied head), bf16 on h100, at pp = 4 and 8, 4 x pp
# microbatches of one 4096-token sequence:
#   - uniform: the split people write by hand (examples/llama2-7b.pipe): the same number
#     of transformer layers on every stage, the embedding on the first and the final
#     norm, head and loss on the last; every registry schedule that runs pp stages (one
#     a rank) and, for those with two a rank (interleaved, loopedbfs, zbv, dualpipev),
#     2 pp stages; the best predicted step;
#   - auto: the same model written once, cut by pipecc for each registry schedule
#     (stages auto: pp or 2 pp stages) and for `schedule auto` (cut for pp and for 2 pp
#     stages, each searched, the faster kept, its cut then moved where a confirmed step is
#     shorter); the best predicted step.
# Steps are pipesim's overlap model (what schedule auto confirms with), in ms.  Then the
# time pipecc takes to cut an 80-layer model into 16 stages (front end only: --dump
# parse), the median of 5, and the whole compile of it at pp=16 (1f1b; schedule auto),
# the least of 5, with the search's evaluations.  Figures only, no target here: the goal
# (>= 10 % on the large-vocabulary model, never slower, cutting and searching in < 1 s)
# is judged by reading them.
# Env: BIN (tools folder), M (microbatches per pp rank, default 4), BIG_ONLY=1 (the
# 80-layer figures alone).
: "${BIN:=bin}"
: "${M:=4}"
for tool in pipecc pipesim; do
	if [ ! -x "$BIN/$tool" ]; then
		echo "bench_part: skipped: $BIN/$tool not built"
		exit 0
	fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. bench/models.sh
scheds=$("$BIN/pipecc" --list-schedules | grep -v -e custom -e csv -e auto)

# head NAME PP: the statements before the layers
head() {
	cat <<EOF
pipeline $1;
mesh pp=$2;
microbatches $(($2 * M));
input tokens 1x4096 vocab=$VOCAB;
device h100;
precision bf16;
optimizer adamw lr=3e-4;
recompute *;
block layer {
$BLOCK
}
EOF
}

# uniform PP K SCHED: K stages of L / K layers (K must divide L)
uniform() {
	head u "$1"
	per=$((L / $2))
	j=0
	while [ $j -lt "$2" ]; do
		pre= post=
		[ $j -eq 0 ] && pre="$EMBED "
		[ $j -eq $(($2 - 1)) ] && post=" $FINAL"
		echo "stage s$j { ${pre}layer x $per;$post }"
		j=$((j + 1))
	done
	echo "schedule $3;"
}

# auto PP SCHED
auto() {
	head a "$1"
	echo "model { $EMBED layer x $L; $FINAL }"
	echo "stages auto;"
	echo "schedule $2;"
}

# best LABEL: the least of the "sched step" lines on stdin, as "step (sched)"
best() {
	sort -k2 -n | awk 'NF == 2 { print $2 " (" $1 ")"; exit }'
}

run_model() {
	for pp in 4 8; do
		for sched in $scheds; do
			for k in $pp $((2 * pp)); do
				[ $((L % k)) -eq 0 ] || continue
				uniform $pp $k "$sched" >"$dir/u.pipe"
				s=$(step "$dir/u.pipe")
				[ -n "$s" ] && echo "$sched/$((k / pp)) $s"
			done
		done >"$dir/u.txt"
		for sched in $scheds auto; do
			auto $pp "$sched" >"$dir/a.pipe"
			s=$(step "$dir/a.pipe")
			[ -n "$s" ] && echo "$sched $s"
		done >"$dir/a.txt"
		uniform $pp $pp auto >"$dir/ua.pipe"
		ua=$(step "$dir/ua.pipe")
		u=$(best <"$dir/u.txt")
		a=$(best <"$dir/a.txt")
		ar=$(grep -v '^auto ' "$dir/a.txt" | best)
		gain=$(echo "${u%% *} ${a%% *}" | awk '{ printf "%+.1f", 100 * ($1 - $2) / $1 }')
		printf "%-10s pp=%d  uniform %-22s auto %-18s %6s%%   | uniform+auto %s, cut+registry %s\n" \
			"$NAME" $pp "$u" "$a" "$gain" "$ua" "$ar"
	done
}

if [ -z "${BIG_ONLY:-}" ]; then
echo "predicted step, ms (pipesim overlap model; best schedule in parentheses, /v: stages a"
echo "rank); the gain of auto (cut + schedule) over uniform (written + best registry schedule);"
echo "beside: the uniform split under schedule auto, and the cut under the best registry schedule"
llama3_8b
run_model
gpt2_xl
run_model
fi

# the time to cut: 80 layers into 16 stages
llama3_8b
L=80
{ head big 16; echo "model { $EMBED layer x $L; $FINAL }"; echo "stages 16;"; echo "schedule 1f1b;"; } >"$dir/big.pipe"
for i in 1 2 3 4 5; do
	s0=$(date +%s%N)
	"$BIN/pipecc" "$dir/big.pipe" --dump parse >/dev/null || exit 1
	s1=$(date +%s%N)
	echo $(((s1 - s0) / 1000))
done | sort -n | awk 'NR == 3 { printf "cutting 84 layers (80 transformer) into 16 stages: %.1f ms (median of 5, parse and check included)\n", $1 / 1000 }'
# and the whole compile at pp=16, 64 microbatches: the cut under 1f1b, and under schedule
# auto (the cut for one and for two stages a rank, each searched): the least and the
# median of 5 runs, in wall time and in CPU time (user + system: on a shared machine the
# wall time also counts the others' work), and the search's fast evaluations (pipecc
# --explain; each cut's)
# cpu FILE: the children's user + system time in a `times` output, in us (times is a
# builtin: called in the shell that runs pipecc, not in a subshell of its own)
cpu() {
	awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); printf "%.0f", (u[1] * 60 + u[2] + s[1] * 60 + s[2]) * 1e6 }' "$1"
}
for sched in 1f1b auto; do
	{ head big 16; echo "model { $EMBED layer x $L; $FINAL }"; echo "schedule $sched;"; } |
		sed 's/^microbatches .*/microbatches 64;/' >"$dir/whole.pipe"
	for i in 1 2 3 4 5; do
		times >"$dir/t0"
		s0=$(date +%s%N)
		"$BIN/pipecc" "$dir/whole.pipe" -o /dev/null || exit 1
		s1=$(date +%s%N)
		times >"$dir/t1"
		echo $(((s1 - s0) / 1000)) $(($(cpu "$dir/t1") - $(cpu "$dir/t0")))
	done >"$dir/runs"
	w=$(sort -n "$dir/runs" | awk 'NR == 1 { lo = $1 } NR == 3 { printf "%.2f s (median %.2f s)", lo / 1e6, $1 / 1e6 }')
	c=$(sort -n -k2 "$dir/runs" | awk 'NR == 1 { lo = $2 } NR == 3 { printf "%.2f s (median %.2f s)", lo / 1e6, $2 / 1e6 }')
	echo "$sched: wall $w, cpu $c"
done | awk '{ print (NR > 1 ? "                " : "whole compile, 80 layers on pp=16, 64 microbatches, least of 5:\n                ") $0 }'
"$BIN/pipecc" --explain "$dir/whole.pipe" -o /dev/null 2>&1 |
	sed -n 's/^schedule auto: .* candidates, \([0-9]*\) fast evaluations.*/\1/p' |
	awk '{ printf "%s%s", (NR > 1 ? " + " : "schedule auto there: fast evaluations "), $1 } END { print " (one stage a rank + two + each moved cut tried)" }'
