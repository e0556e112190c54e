#!/bin/sh
# Out of memory at every allocation: the tools linked with tests/failalloc/failalloc.c
# ($BUILD/failalloc/, built by `make check`) fail their N-th allocation when
# PIPECC_FAIL_ALLOC=N, or every allocation from the N-th on with N+.  For each case
# below, N runs from 1 until a run sees no failure injected (the case's allocation
# count); every run with a failure must exit 1 with "out of memory" on stderr, or
# get by without: then its exit status, standard output, standard error (but for
# failalloc's line) and output file are those of the run without a failure, byte for
# byte (no report cut short, no picture with less in it, where memory ran out); and it
# must leave no output file behind when it fails:
# never a crash, an abort or a sanitizer report (under SAN=1 that includes leaks in the
# N mode: the out-of-memory paths free what they hold; the N+ mode skips the leak
# check, and the custom schedule runs in the N mode only, to keep the test short).
: "${BIN:=bin}" "${BUILD:=build/rel}"
TOOL=failalloc
. tests/lib/cli.sh
FA=$BUILD/failalloc
"$BIN/pipecc" examples/demo.pipe -o "$dir/demo.plan" || fails=$((fails + 1))
"$BIN/pipecc" examples/demo.pipe --plan-format=binary -o "$dir/demo.bin" || fails=$((fails + 1))
"$BIN/pipecc" examples/gpt-tp.pipe -o "$dir/tp.plan" || fails=$((fails + 1))
sed 's/^schedule [a-z0-9]*;/schedule auto;/; s/^microbatches 4;/microbatches 2;/' \
	examples/tiny.pipe >"$dir/auto.pipe"
# 1000 s ops, 150 microbatches: times past 2^48 ns, kept in the per-op times' wide table
sed 's/^cost .*/cost * f=1000000000 b=1000000000 w=1000000000;/; s/^microbatches 4;/microbatches 150;/' \
	examples/tiny.pipe >"$dir/wide.pipe"
"$BIN/pipecc" "$dir/wide.pipe" -o "$dir/wide.plan" || fails=$((fails + 1))
# Ranks of 32,000 ops (1 MB, past PLAN_TAKE_MIN): their arrays come in blocks (the
# lowering's, copy_lines', the text reader's carved ones, the binary reader's whole one,
# pipesim's per-op times past PLAN_HUGE_MIN; plan/plan.h); out of memory in any of them
# fails the run or, for the binary reader's, falls back to reading a stream.
{
	echo "pipeline fbig; mesh pp=2 dp=2; microbatches 8000; input 1x16;"
	echo "stage a { linear 16; } stage b { linear 16; loss mse; } schedule 1f1b;"
} >"$dir/fbig.pipe"
"$BIN/pipecc" "$dir/fbig.pipe" -o "$dir/fbig.plan" || fails=$((fails + 1))
"$BIN/pipecc" --expand --plan-format=binary "$dir/fbig.pipe" -o "$dir/fbig.bin" ||
	fails=$((fails + 1))

# sweep NAME OUTPUT MODE TOOL ARGS...: the loop above; MODE is "" or "+"; OUTPUT is
# the file the run writes ("-" for none), removed before each run.  With STEP=K set,
# every K-th allocation only (a run with thousands of them).
sweep() {
	name=$1 output=$2 mode=$3
	shift 3
	[ "$output" = - ] || rm -f "$output"
	"$@" >"$dir/ref.out" 2>"$dir/ref.err"
	ref_rc=$?
	[ "$output" = - ] || cp "$output" "$dir/ref.file" 2>/dev/null
	n=1 injected=0 oom=0 bad=""
	while [ "$n" -lt 100000 ]; do
		[ "$output" = - ] || rm -f "$output"
		PIPECC_FAIL_ALLOC=$n$mode "$@" >"$dir/out" 2>"$dir/err"
		rc=$?
		grep -q '^failalloc: failing allocation' "$dir/err" || break
		injected=$((injected + 1))
		if [ "$rc" -eq 1 ] && grep -q 'out of memory' "$dir/err"; then
			oom=$((oom + 1))
		elif [ "$rc" -ne "$ref_rc" ]; then
			bad="$bad $n$mode:exit$rc"
		elif ! cmp -s "$dir/out" "$dir/ref.out" ||
			! grep -v '^failalloc: ' "$dir/err" | cmp -s - "$dir/ref.err" ||
			{ [ "$output" != - ] && ! cmp -s "$output" "$dir/ref.file"; }; then
			bad="$bad $n$mode:exit$rc-with-other-output"
		fi
		if [ "$rc" -ne "$ref_rc" ] && [ "$output" != - ] && [ -e "$output" ]; then
			bad="$bad $n$mode:left-$(basename "$output")"
		fi
		n=$((n + ${STEP:-1}))
	done
	# the last run, without a failure, must be the first; a sweep that injected nothing
	# tested nothing
	[ "$rc" -eq "$ref_rc" ] || bad="$bad $n$mode:clean-run-exit$rc"
	[ "$injected" -gt 10 ] || bad="$bad only-$injected-injected"
	check "$name ($((n - ${STEP:-1})) allocations or more, $oom out of memory)" \
		"$([ -z "$bad" ]; echo $?)" \
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
		"$FA/pipesim" "$dir/demo.plan" --model overlap -g --svg "$dir/s.svg"
done
unset ASAN_OPTIONS
# The other outputs, in the N mode: pipecc's binary plan, its summary (with the memory
# model), --dump lower, a transformer program on pp x dp x tp = 2 x 2 x 2 (gpt-tp.pipe:
# tp parts in the lowering, the verifier and pipesim's overlap model), `schedule auto` (a search that simulates its candidates: thousands of
# allocations even for tiny.pipe, so every 7th; a candidate dropped for want of memory
# would make another plan the winner), its --threads
# (which allocation is the N-th varies from run to run, what every run must do does
# not); pipesim on a binary plan, JSON, the report with the run and the memory model
# beside the verifier, a deadlock's report (exit 1 when all goes well) and its picture,
# the trace, and one of times past 48 bits (sim_wide_put's table).
sweep "pipecc --plan-format=binary fail allocation N" "$dir/a.bin" "" \
	"$FA/pipecc" examples/demo.pipe --plan-format=binary -o "$dir/a.bin"
sweep "pipecc -e summary fail allocation N" - "" "$FA/pipecc" examples/demo.pipe -e summary
sweep "pipecc --dump lower fail allocation N" - "" "$FA/pipecc" examples/demo.pipe --dump lower
sweep "pipecc gpt-tp fail allocation N" "$dir/t2.plan" "" \
	"$FA/pipecc" examples/gpt-tp.pipe -o "$dir/t2.plan"
sweep "pipesim gpt-tp overlap fail allocation N" - "" "$FA/pipesim" "$dir/tp.plan" --model overlap -g
STEP=7
sweep "pipecc schedule auto fail allocation N" "$dir/auto.plan" "" \
	"$FA/pipecc" "$dir/auto.pipe" -o "$dir/auto.plan"
unset STEP
sweep "pipecc --threads 2 fail allocation N" "$dir/t.plan" "" \
	"$FA/pipecc" examples/demo.pipe --threads 2 -o "$dir/t.plan"
sweep "pipesim binary plan fail allocation N" - "" "$FA/pipesim" "$dir/demo.bin"
sweep "pipesim --json fail allocation N" - "" "$FA/pipesim" "$dir/demo.plan" --json
sweep "pipesim --threads 2 fail allocation N" - "" "$FA/pipesim" "$dir/demo.plan" --threads 2
sweep "pipesim deadlock fail allocation N" "$dir/d.svg" "" \
	"$FA/pipesim" tests/plans/bad/head_to_head.plan --svg "$dir/d.svg"
sweep "pipesim --trace fail allocation N" "$dir/t.json" "" \
	"$FA/pipesim" "$dir/demo.plan" --model overlap --trace "$dir/t.json"
sweep "pipesim times past 48 bits fail allocation N" "$dir/w.json" "" \
	"$FA/pipesim" "$dir/wide.plan" --model overlap --trace "$dir/w.json"
sweep "pipecc --expand, ranks in blocks, fail allocation N" "$dir/fb.bin" "" \
	"$FA/pipecc" --expand --plan-format=binary "$dir/fbig.pipe" -o "$dir/fb.bin"
sweep "pipesim, ranks in blocks, fail allocation N" - "" "$FA/pipesim" "$dir/fbig.plan"
sweep "pipesim binary, ranks in one block, fail allocation N" - "" "$FA/pipesim" "$dir/fbig.bin"

exit $((fails > 0))
