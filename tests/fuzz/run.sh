#!/bin/sh
# Runs every libFuzzer target in FUZZBIN for SECONDS each, from seed corpora built out of
# the project's own inputs: examples/*.pipe, tests/golden/*/*.pipe and the regression
# seeds in tests/fuzz/seeds/ for fuzz_compile,
# tests/plans/*/*.plan, the regression seeds tests/fuzz/seeds/*.plan and the examples
# compiled by TOOLBIN/pipecc for the plan targets,
# and those plans converted to the binary form for fuzz_binplan.
# Prints executions and crashes per target; a crash keeps its input under
# build/fuzz/crashes/ and fails the run.  Ends with "N passed, N failed".
# Usage: sh tests/fuzz/run.sh FUZZBIN SECONDS TOOLBIN
FUZZBIN=${1:-bin/fuzz}
SECONDS_EACH=${2:-60}
TOOLBIN=${3:-bin}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
crashes=build/fuzz/crashes
mkdir -p "$crashes"

mkdir -p "$work/pipe" "$work/plan" "$work/binplan"
cp examples/*.pipe "$work/pipe/"
for f in tests/golden/*/*.pipe tests/fuzz/seeds/*.pipe; do [ -f "$f" ] && cp "$f" "$work/pipe/"; done
for f in tests/plans/*/*.plan; do cp "$f" "$work/plan/$(basename "$(dirname "$f")")-$(basename "$f")"; done
for f in tests/fuzz/seeds/*.plan; do [ -f "$f" ] && cp "$f" "$work/plan/seed-$(basename "$f")"; done
for f in examples/*.pipe; do
	"$TOOLBIN/pipecc" "$f" -o "$work/plan/$(basename "$f" .pipe).plan" 2>/dev/null ||
		rm -f "$work/plan/$(basename "$f" .pipe).plan"
done
for f in "$work"/plan/*.plan; do
	"$TOOLBIN/pipecc" --plan-format=binary "$f" -o "$work/binplan/$(basename "$f" .plan).bin" \
		2>/dev/null || rm -f "$work/binplan/$(basename "$f" .plan).bin"
done

pass=0
fail=0
for f in "$FUZZBIN"/fuzz_*; do
	[ -x "$f" ] || continue
	name=$(basename "$f")
	case $name in
	fuzz_compile) seeds=$work/pipe; extra="-dict=tests/fuzz/pipe.dict" ;;
	fuzz_binplan) seeds=$work/binplan; extra="" ;;
	fuzz_data) seeds=tests/fuzz/seeds/data; extra="" ;;
	fuzz_safet) seeds=tests/fuzz/seeds/safet; extra="" ;;
	*) seeds=$work/plan; extra="" ;;
	esac
	mkdir -p "$work/corpus-$name"
	"$f" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=2048 -max_len=65536 \
		-print_final_stats=1 -artifact_prefix="$crashes/$name-" $extra \
		"$work/corpus-$name" "$seeds" >"$work/log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
	if [ $rc -eq 0 ]; then
		echo "fuzz $name: ${execs:-?} executions in ${SECONDS_EACH}s, 0 crashes ... passed"
		pass=$((pass + 1))
	else
		echo "fuzz $name: ${execs:-?} executions, crash (exit $rc) ... FAILED"
		grep -E 'invariant broken|ERROR: |SUMMARY|Test unit written' "$work/log" | head -10 | sed 's/^/  | /'
		fail=$((fail + 1))
	fi
done
[ $((pass + fail)) -gt 0 ] || { echo "no fuzz target in $FUZZBIN"; fail=1; }
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
