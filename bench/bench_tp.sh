#!/bin/sh
# The tp all-reduce (TPREDUCE) as piperun measures it on the threads backend, against
# the link model's prediction (docs/semantics.md "Tensor parallelism": a ring over the
# tp group, 2(T-1) latencies + 2(T-1)/T bytes / node_bandwidth).
#
# Method: one tp group of two ranks (mesh pp=1 tp=2, one rank per core of a 2-core
# machine) trains a stack of MLPs of width D on 64 rows, so every TPREDUCE moves
# 64 x D x 4 bytes; piperun --trace gives each one's duration.  A duration includes
# waiting for the other member, so the minimum over the run (both arrived together) is
# the all-reduce's own time; the median shows the skew too.  The smallest and largest
# sizes fit the link (node_latency, node_bandwidth), and pipesim, given that link,
# predicts every size: the middle ones test the fit.  With the plan's default node link
# (NVLink class, 1 us and 300 GB/s) pipesim predicts what a GPU node would take.
# Figures go to stdout; nothing is asserted (timings on a shared machine are noisy).
# Env: BIN (tools folder), STEPS (default 4).
: "${BIN:=bin}"
: "${STEPS:=4}"
for tool in pipecc pipesim piperun; do
	if [ ! -x "$BIN/$tool" ]; then
		echo "bench_tp: skipped: $BIN/$tool not built"
		exit 0
	fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# model D LINK: a .pipe of width D with the given link statement
model() {
	cat <<PIPE
pipeline tp_bench;
mesh pp=1 tp=2;
microbatches 8;
input 64x$1;
stage s0 { linear $1; mlp $(($1 / 2)); mlp $(($1 / 2)); loss mse; }
schedule gpipe;
$2
PIPE
}

# durations (us) of rank 0's TPREDUCEs in a Chrome trace, one a line, sorted
durations() {
	grep '"pid": 0, "tid": 1, "name": "TPREDUCE"' "$1" |
		sed 's/.*"dur": \([0-9.]*\).*/\1/' | sort -n
}

sizes="64 256 1024 2048"
printf '%8s %10s %12s %12s\n' D bytes "min us" "median us" >"$dir/table"
for d in $sizes; do
	model "$d" "" >"$dir/m$d.pipe"
	"$BIN/pipecc" "$dir/m$d.pipe" -o "$dir/m$d.plan" || exit 1
	"$BIN/piperun" "$dir/m$d.plan" --steps "$STEPS" --trace "$dir/m$d.json" >/dev/null || exit 1
	durations "$dir/m$d.json" >"$dir/d$d"
	n=$(wc -l <"$dir/d$d")
	min=$(head -n 1 "$dir/d$d")
	med=$(sed -n "$(((n + 1) / 2))p" "$dir/d$d")
	echo "$d $((64 * d * 4)) $min $med" >>"$dir/meas"
	printf '%8s %10s %12s %12s\n' "$d" $((64 * d * 4)) "$min" "$med" >>"$dir/table"
done
echo "measured TPREDUCE on threads (tp=2, rank 0, $STEPS steps):"
cat "$dir/table"

# the link through the smallest and the largest: t = 2 lat + bytes / bw (T = 2)
fit=$(awk 'NR == 1 { b1 = $2; t1 = $3 } { b2 = $2; t2 = $3 }
	END { bw = (b2 - b1) / (t2 - t1) * 1e6; lat = (t1 - b1 / bw * 1e6) / 2;
	      if (lat < 0.001) lat = 0.001; printf "%.0f %.0f", lat * 1000, bw }' "$dir/meas")
lat_ns=${fit% *}
bw=${fit#* }
echo "fitted link: node_latency=${lat_ns}ns node_bandwidth=$(awk -v b="$bw" 'BEGIN { printf "%.2f", b / 1e9 }')GB/s"

# pipesim's TPREDUCE time with the fitted link, and with the default node link
printf '%8s %12s %12s %8s %14s\n' D "measured us" "pipesim us" "error" "default-link us"
for d in $sizes; do
	model "$d" "link node_latency=${lat_ns}ns node_bandwidth=${bw}B/s;" >"$dir/f$d.pipe"
	"$BIN/pipecc" "$dir/f$d.pipe" -o "$dir/f$d.plan" || exit 1
	"$BIN/pipesim" "$dir/f$d.plan" --trace "$dir/s$d.json" >/dev/null || exit 1
	"$BIN/pipesim" "$dir/m$d.plan" --trace "$dir/g$d.json" >/dev/null || exit 1
	pred=$(durations "$dir/s$d.json" | head -n 1)
	gpu=$(durations "$dir/g$d.json" | head -n 1)
	meas=$(awk -v d="$d" '$1 == d { print $3 }' "$dir/meas")
	err=$(awk -v m="$meas" -v p="$pred" 'BEGIN { printf "%+.0f%%", (m - p) / p * 100 }')
	printf '%8s %12s %12s %8s %14s\n' "$d" "$meas" "$pred" "$err" "$gpu"
done
