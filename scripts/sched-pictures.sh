#!/bin/sh
# Redraws docs/img/sched-*.svg: pipesim --svg of each schedule with p = 4, m = 8 (two
# stages per rank for the schedules that take several), unit costs and ideal links;
# then the example pictures of docs/pipesim.md: svg, trace and summary + grid of
# examples/{tiny,skips,mlp4,demo}.pipe and of two deadlocked plans.
# Usage: sh scripts/sched-pictures.sh [BIN]; prints each schedule picture's grid too.
set -e
BIN=${1:-bin}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
program() { # N SCHEDULE
	echo "pipeline p4; mesh pp=4; microbatches 8; input 2x8;"
	i=0
	while [ $i -lt $(($1 - 1)) ]; do echo "stage s$i { linear 8; relu; }"; i=$((i + 1)); done
	echo "stage s$i { linear 8; loss mse; }"
	echo "schedule $2; cost * f=1 b=1 w=1; link ideal;"
}
draw() { # NAME N SCHEDULE OUT [PIPECC OPTIONS] [-- PIPESIM OPTIONS]
	name=$1 n=$2 s=$3 out=$4
	shift 4
	copts="" sopts=""
	while [ $# -gt 0 ] && [ "$1" != -- ]; do copts="$copts $1"; shift; done
	[ "${1:-}" = -- ] && shift
	sopts="$*"
	program "$n" "$s" >"$dir/p.pipe"
	"$BIN/pipecc" $copts "$dir/p.pipe" -o "$dir/p.plan"
	echo "== $name ($s$copts, pipesim $sopts)"
	"$BIN/pipesim" $sopts --svg "docs/img/$out.svg" --grid --width 200 "$dir/p.plan" |
		sed -n '/^makespan/p;/^grid:/,$p'
}
draw gpipe 4 gpipe sched-gpipe
draw 1f1b 4 1f1b sched-1f1b
draw interleaved 8 interleaved sched-interleaved
draw loopedbfs 8 loopedbfs sched-loopedbfs
draw zbh1 4 zbh1 sched-zbh1
draw zbh2 4 zbh2 sched-zbh2
draw zbv 8 zbv sched-zbv
draw dualpipev 8 dualpipev sched-dualpipev

example() { # NAME PLAN [PIPESIM OPTIONS]: docs/img/NAME.{svg,trace.json,grid.txt}
	name=$1 plan=$2
	shift 2
	"$BIN/pipesim" "$@" --svg "docs/img/$name.svg" --trace "docs/img/$name.trace.json" \
		--grid "$plan" >"docs/img/$name.grid.txt" 2>&1 || [ $? -eq 1 ]
}
for ex in tiny skips mlp4 demo; do
	"$BIN/pipecc" "examples/$ex.pipe" -o "$dir/$ex.plan"
	example "$ex" "$dir/$ex.plan"
	# the plan's path is not part of the picture: name it as the docs do
	sed -i "s|$dir/||g" "docs/img/$ex.grid.txt"
done
# deadlocks: the picture, the failure report and the grid
for d in head_to_head:deadlock stall_at_zero:deadlock-t0; do
	"$BIN/pipesim" --svg "docs/img/${d#*:}.svg" --grid "tests/plans/bad/${d%%:*}.plan" \
		>"docs/img/${d#*:}.grid.txt" 2>&1 || [ $? -eq 1 ]
done
