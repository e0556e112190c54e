#!/bin/sh
# make demo: the whole chain on examples/demo.pipe: compile, simulate (when pipesim is
# built) with a grid and an SVG timeline, run with --check; then a transformer,
# examples/gpt-tiny.pipe (4 GPT layers over 4 ranks), trained for a few steps with
# --check, so its loss is seen to fall.  The plans and the picture
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
echo "== pipecc examples/gpt-tiny.pipe -o $OUT/gpt-tiny.plan; piperun gpt-tiny.plan --check --steps 4"
"$BIN/pipecc" examples/gpt-tiny.pipe -o "$OUT/gpt-tiny.plan"
"$BIN/piperun" "$OUT/gpt-tiny.plan" --check --steps 4
if [ -n "$svg" ]; then
	echo "demo: the timeline is in $svg (open it in a web browser)"
else
	echo "demo: no timeline (pipesim not built); the plan is in $OUT/demo.plan"
fi
