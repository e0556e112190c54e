#!/bin/sh
# Transformer layers on the cpu device against OpenBLAS sgemm alone (issue 11: a
# transformer stage's forward + backward reaches at least 60% of sgemm's FLOP rate on
# the same GEMM shapes), then a whole tiny GPT trained by piperun.
#
# bench/tf_bench.c runs one GPT-2 and one Llama layer per shape through the cpu
# device's layer rows (the kernels piperun calls) and replays the GEMMs those kernels
# issued, alone; it prints per shape the stage's time and GFLOP/s (the layer table's
# FLOPs), sgemm alone's, their ratio and the share of the stage's time outside GEMMs.
# With one OpenBLAS thread the times are thread CPU time, with more wall-clock time;
# best of REPS either way.  Then `piperun --check --steps 5` on examples/gpt-tiny.pipe
# (4 ranks, threads backend), timed end to end.
# Figures go to stdout; a missed target is reported, not fatal (timings on a shared
# machine are noisy).  Env: BIN (tools folder), BUILD (objects, default build/rel),
# REPS (default 10), THREADS (OpenBLAS thread counts, default "1 2").
: "${BIN:=bin}"
: "${BUILD:=build/rel}"
: "${REPS:=10}"
: "${THREADS:=1 2}"
make -s "$BUILD/bench/tf_bench" || exit 1
[ -z "${BENCH_BUILD_ONLY:-}" ] || exit 0 # tests/cli/benches.sh: built, nothing run
for t in $THREADS; do
	"$BUILD/bench/tf_bench" --threads "$t" --reps "$REPS" || exit 1
done

for tool in pipecc piperun; do
	if [ ! -x "$BIN/$tool" ]; then
		echo "bench_tf: gpt-tiny skipped: $BIN/$tool not built"
		exit 0
	fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$BIN/pipecc" examples/gpt-tiny.pipe -o "$dir/gpt-tiny.plan" || exit 1
start=$(date +%s.%N)
"$BIN/piperun" "$dir/gpt-tiny.plan" --check --steps 5 -q >"$dir/out" 2>&1
rc=$?
end=$(date +%s.%N)
grep -E '^(step 5|mean step|check)' "$dir/out" | sed 's/^/  /'
awk -v s="$start" -v e="$end" -v rc="$rc" 'BEGIN {
	printf "gpt-tiny (examples/gpt-tiny.pipe, pp=4 on threads, 8 microbatches of 4x64 tokens):\n"
	printf "  piperun --check --steps 5: %.2f s end to end, exit %d\n", e - s, rc
}'
[ "$rc" -eq 0 ]
