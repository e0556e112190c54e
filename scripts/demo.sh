#!/bin/sh
# make demo: the whole chain on examples/demo.pipe: compile, simulate (when pipesim is
# built) with a grid and an SVG timeline, run with --check; then a transformer,
# examples/gpt-tiny.pipe (4 GPT layers over 4 ranks) with a byte vocabulary (256),
# trained on real text: the project's own docs/*.md, each byte a token (the .u8 name
# says so to piperun --data), until its loss is well below the bytes' unigram entropy
# (what a model that knows only byte frequencies scores), printed beside it.
# DEMO_STEPS (default 400) sets the steps.  The plans, the token file and the picture
# stay in OUT (default demo-out/ in the current folder, which git ignores), and the
# last line says where the picture is.
# Usage: sh scripts/demo.sh [BIN [OUT]] (BIN: the tools' folder, default bin).
set -e
BIN=${1:-bin}
OUT=${2:-demo-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
echo "== pipecc examples/demo.pipe -o $OUT/demo.plan"
"$BIN/pipecc" examples/demo.pipe -o "$OUT/demo.plan"
svg=""
if [ -x "$BIN/pipesim" ]; then
	echo "== pipesim demo.plan --grid --svg $OUT/demo.svg"
	"$BIN/pipesim" "$OUT/demo.plan" --grid --svg "$OUT/demo.svg"
	svg="$OUT/demo.svg"
else
	echo "== pipesim not built: simulation skipped"
fi
echo "== piperun demo.plan --check"
"$BIN/piperun" "$OUT/demo.plan" --check
steps=${DEMO_STEPS:-400}
echo "== gpt-tiny with vocab=256 on docs/*.md as bytes: piperun --data $OUT/docs.u8 --steps $steps"
sed 's/vocab=512/vocab=256/' examples/gpt-tiny.pipe >"$OUT/gpt-bytes.pipe"
"$BIN/pipecc" "$OUT/gpt-bytes.pipe" -o "$OUT/gpt-bytes.plan"
cat docs/*.md >"$OUT/docs.u8"
# the unigram entropy in nats: -sum p ln p over the byte frequencies
h=$(od -An -v -tu1 "$OUT/docs.u8" | awk '{ for (i = 1; i <= NF; i++) c[$i]++; n += NF }
	END { for (k in c) { p = c[k] / n; h -= p * log(p) }; printf "%.3f", h }')
t0=$(date +%s)
"$BIN/piperun" "$OUT/gpt-bytes.plan" --data "$OUT/docs.u8" --steps "$steps" \
	--optimizer adamw --lr 1e-2 --beta2 0.99 >"$OUT/gpt-bytes.out"
t1=$(date +%s)
awk -v h="$h" -v n="$steps" '/^step / { s = $2 + 0; if (s == 1 || s % 25 == 0 || s == n)
	printf "%s   (unigram entropy %s)\n", $0, h }' "$OUT/gpt-bytes.out"
first=$(sed -n 's/^step 1: loss \([0-9.]*\).*/\1/p' "$OUT/gpt-bytes.out")
last=$(sed -n "s/^step $steps: loss \\([0-9.]*\\).*/\\1/p" "$OUT/gpt-bytes.out")
echo "demo: gpt-tiny on $(wc -c <"$OUT/docs.u8") bytes of docs: loss $first -> $last nats in" \
	"$steps steps, $((t1 - t0)) s; the bytes' unigram entropy is $h nats"
if [ -n "$svg" ]; then
	echo "demo: the timeline is in $svg (open it in a web browser)"
else
	echo "demo: no timeline (pipesim not built); the plan is in $OUT/demo.plan"
fi
