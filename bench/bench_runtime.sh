#!/bin/sh
# piperun on the threads backend, against pipesim's prediction for the same plan.
#
# Method: compile a model, run `piperun --calibrate` to measure the mean F, B and W
# time of every stage and the mean step time of the same run, put those as `cost`
# lines into the .pipe file (link ideal: the threads backend moves tensors with one
# memcpy), compile again, and compare pipesim's predicted step (strict model: the
# threads backend waits for each group, as strict does) with that measured mean step.
# Costs and step time come from one run, so load from other processes on the machine
# moves both alike.
#  1. overhead: tiny layers (1x4), many microbatches, so compute is ~1 us and the
#     difference measured - predicted is the runtime's own cost: dispatch, memory
#     accounting, channel hand-shakes and thread wake-ups.  Reported per op of the
#     longest op list (the ops on the critical path).  Target: <= 20 us/op.
#  2. step time: layers large enough that compute dominates.  Target: measured within
#     10% of predicted.
# Two ranks, one per core of the 2-core machine this was written on; more ranks than
# cores measure the operating system's scheduler rather than the runtime.
# Figures go to stdout; a missed target is reported, not fatal (timings on a shared
# machine are noisy).  Env: BIN (tools folder), STEPS (default 30).
: "${BIN:=bin}"
: "${STEPS:=30}"
for tool in pipecc pipesim piperun; do
	if [ ! -x "$BIN/$tool" ]; then
		echo "bench_runtime: skipped: $BIN/$tool not built"
		exit 0
	fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

json_num() { # key file
	sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p" "$2" | head -n 1
}

# calibrated NAME SRC: compiles SRC, calibrates, recompiles with measured costs; prints
# "predicted_us measured_us max_ops" for the calibrated plan.
calibrated() {
	name=$1 src=$2
	"$BIN/pipecc" "$src" -o "$dir/$name.plan" || return 1
	"$BIN/piperun" "$dir/$name.plan" --calibrate --steps "$STEPS" >"$dir/$name.cost" || return 1
	{ grep -v '^cost' "$src"; grep '^cost' "$dir/$name.cost"; } >"$dir/$name-cal.pipe"
	"$BIN/pipecc" "$dir/$name-cal.pipe" -o "$dir/$name-cal.plan" || return 1
	"$BIN/pipesim" --json "$dir/$name-cal.plan" >"$dir/$name.sim.json" || return 1
	pred=$(json_num makespan "$dir/$name.sim.json")
	meas=$(sed -n 's/^# mean step time over those steps: \([0-9.]*\) us$/\1/p' "$dir/$name.cost")
	ops=$(sed -n 's/^rank .* ops=\([0-9]*\)$/\1/p' "$dir/$name-cal.plan" | sort -n | tail -n 1)
	echo "$pred $meas $ops"
}

cat >"$dir/overhead.pipe" <<'EOF'
pipeline overhead;
mesh pp=2;
microbatches 64;
input 1x4;
stage s0 { linear 4; relu; }
stage s1 { linear 4; loss mse; }
schedule 1f1b;
cost * f=1 b=1 w=1;
link ideal;
EOF
cat >"$dir/compute.pipe" <<'EOF'
pipeline compute;
mesh pp=2;
microbatches 8;
input 32x256;
stage s0 { linear 256; relu; linear 256; gelu; }
stage s1 { linear 256; relu; linear 256; loss mse; }
schedule 1f1b;
cost * f=1 b=1 w=1;
link ideal;
EOF

set -- $(calibrated overhead "$dir/overhead.pipe") || exit 1
awk -v p="$1" -v m="$2" -v n="$3" 'BEGIN {
	o = (m - p) / n
	printf "runtime overhead (threads, pp=2, 64 microbatches of 1x4, 1f1b):\n"
	printf "  predicted step %.1f us, measured %.1f us, %d ops on the longest list\n", p, m, n
	printf "  overhead %.2f us/op (target <= 20 us/op: %s)\n", o, o <= 20 ? "met" : "MISSED"
	printf "  all-in %.2f us/op (measured step / ops: compute of 1x4 layers included)\n", m / n
}'
set -- $(calibrated compute "$dir/compute.pipe") || exit 1
awk -v p="$1" -v m="$2" 'BEGIN {
	d = (m - p) / p * 100
	printf "step time (threads, pp=2, 8 microbatches of 32x256, 1f1b, calibrated costs):\n"
	printf "  predicted %.1f us, measured %.1f us, %+.1f%% (target within 10%%: %s)\n", p, m, d,
		(d <= 10 && d >= -10) ? "met" : "MISSED"
}'
grep '^cost' "$dir/compute.cost" | sed 's/^/  calibrated: /'
