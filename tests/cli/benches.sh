#!/bin/sh
# Every bench program builds: each script that compiles one (bench/*.sh) run with
# BENCH_BUILD_ONLY=1, which stops it once its program is built, before any figure.
# A bench nobody ran for a while cannot rot unseen (tf_bench did, 2026-12-03).  The
# scripts build into build/rel; under another BUILD (SAN=1) this says so and skips.
TOOL=benches
. tests/lib/cli.sh

: "${BUILD:=build/rel}"
if [ "$BUILD" != build/rel ]; then
	echo "testing $TOOL build ... skipped (the bench scripts build into build/rel, not $BUILD)"
	exit 0
fi
for pair in bench_io:io_bench bench_lines:load_bench bench_sim:sim_bench \
	bench_auto:auto_bench bench_pipecc:lower_bench bench_tf:tf_bench; do
	script=${pair%%:*} prog=${pair#*:}
	rm -f "build/rel/bench/$prog"
	t "bench/$script.sh builds $prog" 0 env BENCH_BUILD_ONLY=1 BIN="$BIN" sh "bench/$script.sh"
	check "build/rel/bench/$prog is there" "$([ -x "build/rel/bench/$prog" ]; echo $?)" ""
	check "bench/$script.sh ran nothing" "$([ ! -s "$dir/out" ]; echo $?)" "$(head -3 "$dir/out")"
done
[ "$fails" -eq 0 ]
