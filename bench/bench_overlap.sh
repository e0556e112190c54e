#!/bin/sh
# How well the lowering hides link time in the overlap model (issue 18).
#
# Method: a chain of p stages (2p for zbv, placement v) of one small linear layer each,
# m microbatches, per-microbatch costs F:B:W = 10:11:9 us, and a link of latency c us
# (c = 0, 10% and 20% of F; bandwidth 1000 TB/s, so the bytes add nanoseconds), for
# p in 4, 8, 16 and m in p, 2p, 4p.  Each order is compiled with the default tuning
# and with --tune=overlap, and pipesim predicts its step in the overlap model
# (GPU streams).  Printed: both makespans in us and their ratios to a lower bound,
# LB = (p - 1)(F + c) + m(F + B + W) for a chain of p ranks (the last rank can start
# no sooner, then has m(F + B + W) to compute) and (p - 1)(F + c) + 2m(F + B + W) for
# zbv (each rank holds two stages).  Then the two cases issue 18 quotes.  With OLD set
# to a folder holding an older build's pipecc and pipesim, its overlap-tuned makespan
# is printed beside, as "before".  Figures only; nothing is asserted.  Env: BIN (tools
# folder, default bin), OLD (optional), SCHEDULES (default "1f1b zbh1 zbh2 zbv").
: "${BIN:=bin}"
: "${SCHEDULES:=1f1b zbh1 zbh2 zbv}"
for tool in pipecc pipesim; do
	if [ ! -x "$BIN/$tool" ]; then
		echo "bench_overlap: skipped: $BIN/$tool not built"
		exit 0
	fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# gen P M F B W LAT SCHEDULE: the program on stdout.
gen() {
	ns=$1
	[ "$7" = zbv ] && ns=$((2 * $1))
	echo "pipeline bench; mesh pp=$1; microbatches $2; input 4x8;"
	i=0
	while [ $i -lt $((ns - 1)) ]; do
		echo "stage s$i { linear 8; }"
		i=$((i + 1))
	done
	echo "stage s$i { linear 8; loss mse; }"
	echo "schedule $7;"
	[ "$7" = zbv ] && echo "placement v;"
	echo "cost * f=$3 b=$4 w=$5;"
	if [ "$6" = 0 ]; then
		echo "link ideal;"
	else
		echo "link latency=$6 bandwidth=1000TB/s;"
	fi
}

# span TOOLS TUNE: the overlap model's makespan of $dir/p.pipe, in us ("-": no plan).
span() {
	if "$1/pipecc" -q --tune "$2" "$dir/p.pipe" -o "$dir/p.plan" 2>/dev/null; then
		"$1/pipesim" --json --model overlap "$dir/p.plan" |
			sed -n 's/.*"makespan": \([0-9.]*\).*/\1/p' | head -n 1
	else
		echo -
	fi
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-") print "-"; else printf "%.3f", a / b }'; }

# row P M F B W LAT SCHEDULE
row() {
	gen "$@" >"$dir/p.pipe"
	k=1
	[ "$7" = zbv ] && k=2
	lb=$(awk -v p="$1" -v m="$2" -v f="$3" -v b="$4" -v w="$5" -v c="$6" -v k="$k" \
		'BEGIN { print (p - 1) * (f + c) + k * m * (f + b + w) }')
	def=$(span "$BIN" strict)
	ovl=$(span "$BIN" overlap)
	old=""
	[ -n "$OLD" ] && old=$(span "$OLD" overlap)
	printf '%-6s %3s %4s %5s %8s %10s %10s %10s %6s %6s %6s\n' "$7" "$1" "$2" "$6" "$lb" \
		"$def" "${old:--}" "$ovl" "$(ratio "$def" "$lb")" "$(ratio "${old:--}" "$lb")" \
		"$(ratio "$ovl" "$lb")"
}

hdr() {
	printf '%-6s %3s %4s %5s %8s %10s %10s %10s %6s %6s %6s\n' schedule p m "c us" "LB us" \
		"default" "before" "overlap" "def/LB" "bef/LB" "ovl/LB"
}

echo "overlap model makespan (us): default tuning, --tune=overlap before (OLD) and now"
echo "F:B:W = 10:11:9 us"
hdr
for s in $SCHEDULES; do
	for p in 4 8 16; do
		for m in $p $((2 * p)) $((4 * p)); do
			for c in 0 1 2; do
				row $p $m 10 11 9 $c "$s"
			done
		done
	done
done
echo
echo "issue 18's cases"
hdr
row 3 2 10 10 10 2 gpipe
for s in $SCHEDULES; do
	row 16 64 10 8 12 2 "$s"
done
