#!/bin/sh
# tests/gpu/run.sh, the GPU machine's script, run here with --dry-run: the threads
# backend stands in for cuda and the GPU-only steps are skipped.  A script that only a
# GPU session runs rots unseen otherwise: stated routes in examples/skips.pipe made it
# drop that example from its one-rank checks with a note (2026-12-04).  It builds into
# build/rel; under another BUILD (SAN=1) this says so and skips.
TOOL=gpu-script
. tests/lib/cli.sh

: "${BUILD:=build/rel}"
if [ "$BUILD" != build/rel ]; then
	echo "testing $TOOL dry run ... skipped (tests/gpu/run.sh builds into build/rel, not $BUILD)"
	exit 0
fi
t "dry run exits 0" 0 sh tests/gpu/run.sh --dry-run
has "dry run ends with all checks passed" "$dir/out" '^all checks passed$'
n=$(grep -c '^testing .* \.\.\. passed$' "$dir/out")
check "dry run passed its checks ($n)" "$([ "$n" -ge 15 ]; echo $?)" "fewer than 15"
# The examples whose schedule admits one rank holding every stage must run there.
for b in interleaved skips; do
	has "example $b --check'ed on one rank" "$dir/out" "^testing one GPU, example $b on one rank \.\.\. passed"
done
has "the watchdog ends the planted deadlock" "$dir/out" '^testing deadlock: the watchdog says why \.\.\. passed'
[ "$fails" -eq 0 ]
