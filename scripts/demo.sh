#!/bin/sh
# make demo: the whole chain on examples/mlp4.pipe: compile, simulate (when pipesim
# is built), run with --check.  Usage: sh scripts/demo.sh BIN (the tools' folder).
set -e
BIN=${1:-bin}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
echo "== pipecc examples/mlp4.pipe -o mlp4.plan"
"$BIN/pipecc" examples/mlp4.pipe -o "$dir/mlp4.plan"
if [ -x "$BIN/pipesim" ]; then
	echo "== pipesim mlp4.plan"
	"$BIN/pipesim" "$dir/mlp4.plan"
else
	echo "== pipesim not built: simulation skipped"
fi
echo "== piperun mlp4.plan --check"
"$BIN/piperun" "$dir/mlp4.plan" --check
