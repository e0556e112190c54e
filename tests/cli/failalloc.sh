#!/bin/sh
# Out of memory at every allocation: the tools linked with tests/failalloc/failalloc.c
# ($BUILD/failalloc/, built by `make check`) fail their N-th allocation when
# PIPECC_FAIL_ALLOC=N, or every allocation from the N-th on with N+.  For each case
# below, N runs from 1 until a run sees no failure injected (the case's allocation
# count); every run with a failure must exit 1 with "out of memory" on stderr, or
# exit 0 having got by without, and must leave no output file behind when it fails:
# never a crash, an abort or a sanitizer report (under SAN=1 that includes leaks in the
# N mode: the out-of-memory paths free what they hold; the N+ mode skips the leak
# check, and the custom schedule runs in the N mode only, to keep the test short).
: "${BIN:=bin}" "${BUILD:=build/rel}"
TOOL=failalloc
. tests/lib/cli.sh
FA=$BUILD/failalloc
"$BIN/pipecc" examples/demo.pipe -o "$dir/demo.plan" || fails=$((fails + 1))

# sweep NAME OUTPUT MODE TOOL ARGS...: the loop above; MODE is "" or "+"; OUTPUT is
# the file the run writes ("-" for none), removed before each run.
sweep() {
	name=$1 output=$2 mode=$3
	shift 3
	n=1 injected=0 oom=0 bad=""
	while [ "$n" -lt 5000 ]; do
		[ "$output" = - ] || rm -f "$output"
		PIPECC_FAIL_ALLOC=$n$mode "$@" >"$dir/out" 2>"$dir/err"
		rc=$?
		grep -q '^failalloc: failing allocation' "$dir/err" || break
		injected=$((injected + 1))
		if [ "$rc" -eq 1 ] && grep -q 'out of memory' "$dir/err"; then
			oom=$((oom + 1))
		elif [ "$rc" -ne 0 ]; then
			bad="$bad $n$mode:exit$rc"
		fi
		if [ "$rc" -ne 0 ] && [ "$output" != - ] && [ -e "$output" ]; then
			bad="$bad $n$mode:left-$(basename "$output")"
		fi
		n=$((n + 1))
	done
	# the run without a failure must succeed; a sweep that injected nothing tested nothing
	[ "$rc" -eq 0 ] || bad="$bad $n$mode:clean-run-exit$rc"
	[ "$injected" -gt 10 ] || bad="$bad only-$injected-injected"
	check "$name ($((n - 1)) allocations, $oom out of memory)" "$([ -z "$bad" ]; echo $?)" \
		"${bad# }"
	[ -z "$bad" ] || sed 's/^/  | /' "$dir/err" | head -5
}

for mode in "" +; do
	[ "$mode" = + ] && export ASAN_OPTIONS=detect_leaks=0
	sweep "pipecc fail allocation N$mode" "$dir/a.plan" "$mode" \
		"$FA/pipecc" examples/demo.pipe -o "$dir/a.plan"
	[ -z "$mode" ] && sweep "pipecc custom schedule fail allocation N" "$dir/c.plan" "" \
		"$FA/pipecc" examples/custom.pipe -o "$dir/c.plan"
	sweep "pipesim fail allocation N$mode" "$dir/s.svg" "$mode" \
		"$FA/pipesim" "$dir/demo.plan" -m overlap -g --svg "$dir/s.svg"
done

exit $((fails > 0))
