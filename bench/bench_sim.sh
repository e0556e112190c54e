#!/bin/sh
# Simulator speed and memory.  Goals (issue "pipesim"): at least 20 M simulated ops per
# second on one core for plans of ten million ops and more, time linear in ops, peak RSS
# at most 64 bytes per op including the 24-byte in-memory op.
#
# bench/sim_bench.c builds a 1F1B plan in memory (no file parsing), verifies it and runs
# sim_run; one process per size so peak RSS is that size's.  Then end to end: the same
# plans written to files and read, verified and simulated by $BIN/pipesim.
# Built here, outside the Makefile, from the release objects.
: "${BIN:=bin}"
. bench/lib.sh
bench_build sim_bench sim
[ -z "${BENCH_BUILD_ONLY:-}" ] || exit 0 # tests/cli/benches.sh: built, nothing run
PP=${PP:-16}
SIZES=${SIZES:-"1000000 4000000 16000000"}
T=$(mktemp -d /tmp/pipesim-bench.XXXXXX)
trap 'rm -rf "$T"' EXIT

echo "in memory, strict model (the verdict run), pp=$PP:"
for n in $SIZES; do
	"$B/bench/sim_bench" "$n" "$PP" strict || exit 1
done
echo "in memory, biggest size, other settings:"
big=$(echo "$SIZES" | tr ' ' '\n' | tail -1)
"$B/bench/sim_bench" "$big" "$PP" overlap || exit 1
"$B/bench/sim_bench" "$big" "$PP" strict record || exit 1
"$B/bench/sim_bench" "$big" "$PP" overlap record || exit 1
"$B/bench/sim_bench" "$big" 4 strict || exit 1
"$B/bench/sim_bench" "$big" 128 strict || exit 1

echo "end to end ($BIN/pipesim on a plan file: read, verify, simulate, report):"
for n in $SIZES; do
	"$B/bench/sim_bench" --write "$T/b.plan" "$n" "$PP" >/dev/null || exit 1
	bytes=$(wc -c <"$T/b.plan")
	# -q keeps no per-op times (nothing it prints reads them); the report needs them.
	for mode in "-q --no-record" -q report; do
		flags=$mode
		[ "$mode" = report ] && flags=
		if [ -x /usr/bin/time ]; then
			/usr/bin/time -f "%e %M" -o "$T/time" "$BIN/pipesim" $flags "$T/b.plan" >/dev/null || exit 1
			read -r secs kb <"$T/time"
			awk -v n="$n" -v s="$secs" -v kb="$kb" -v b="$bytes" -v m="$mode" 'BEGIN {
				printf "ops %10d  file %6.1f MB  %-14s %6.2f s (%5.1f M ops/s)  peak RSS %7.1f MB = %5.1f B/op\n",
				       n, b / 1048576, m, s, (s > 0 ? n / s / 1e6 : 0), kb / 1024, kb * 1024 / n }'
		else
			time "$BIN/pipesim" $flags "$T/b.plan" >/dev/null || exit 1
		fi
	done
	rm -f "$T/b.plan"
done
