#!/bin/sh
# Plan I/O end to end (issue 15): `pipecc -o PLAN` and `pipesim PLAN` on a generated
# 1f1b program (default pp=128, m=16384: 12.5 M ops, a 500 MiB plan), as ops per second
# and as a ratio to `wc -l PLAN`, the honest "how fast can this machine read this text"
# in the same run.  Goals: both >= 20 M ops/s, pipesim within 3x of wc -l, <= 64 bytes
# of peak RSS per op.  The same rows for the binary form (pipecc --plan-format=binary,
# pipesim on its file).  Then bench/io_bench.c times the readers and the writers alone,
# and the machine's floor for any tool holding the plan as 24-byte PlanOps: the kernel's
# time to fault that many fresh pages in (a ceiling in M ops/s no such tool passes),
# and pipesim's passes alone in memory on one thread, then on THREADS threads, in wall
# seconds, the two readers (plan/read_par.c: the text's blocks hashed and counted, then
# its ranks parsed, on the workers) and the strict simulation (sim/psim.c; pipesim gives
# it half of --threads, so on two threads the one-thread run bounds the report from
# below); io_bench's figures also as ratios
# to `wc -l`.
# pipesim's rows: -q --no-record (verdict only), -q (the same: a quiet run keeps no
# times), and the default run, whose report needs the critical path (4 bytes an op while
# the simulation runs, SIM_RECORD_PATH; 16 before 2026-12-02) and the memory model's
# pass over every rank.  Wall times are the best of REPS runs (the
# machine may be shared); RSS from /usr/bin/time.  With OLD set to a folder holding an
# older build's pipecc and pipesim, each tool row is also run with those, the old and
# the new run alternating (on a shared machine the speed drifts by more than most
# changes), and printed below it as "old build" (the old pipesim reads the text plan the
# old pipecc wrote: builds before 2026-12-04 do not read the blocks checksum).  With
# THREADS above 1 (default 2), each
# tool row is followed by the same run with --threads THREADS (with OLD, old and new)
# (plan/par.h): on more cores than this 2-core machine's, try THREADS=8.  Exported,
# PIPECC_HUGE_PAGES=1 or 0 reaches every tool run (old builds before 2026-12-02 ignore
# it; before 2026-12-03 they take 0, and unset, as no huge pages).
: "${BIN:=bin}"
PP=${PP:-128}
M=${M:-16384}
REPS=${REPS:-3}
THREADS=${THREADS:-2} # the tool rows again with --threads THREADS (1: not)
. bench/lib.sh
bench_build io_bench sim
[ -z "${BENCH_BUILD_ONLY:-}" ] || exit 0 # tests/cli/benches.sh: built, nothing run
T=$(mktemp -d /tmp/io-bench.XXXXXX)
trap 'rm -rf "$T"' EXIT

{
	echo "pipeline big; mesh pp=$PP; microbatches $M; input 1x16;"
	i=0
	while [ $i -lt $((PP - 1)) ]; do echo "stage s$i { linear 16; }"; i=$((i + 1)); done
	echo "stage s$i { linear 16; loss mse; }"
	echo "schedule 1f1b; cost * f=1 b=1 w=1; link ideal;"
} >"$T/big.pipe"

# best CMD...: runs CMD REPS times (stdout discarded); prints "SECONDS RSS_KIB CPU" of the
# fastest run (CPU: user + system seconds, which other load on the machine inflates less).
best() {
	bs=
	for _ in $(seq "$REPS"); do
		t0=$(date +%s.%N)
		if [ -x /usr/bin/time ]; then
			/usr/bin/time -f "%M %U %S" -o "$T/time" "$@" >/dev/null 2>"$T/err" ||
				{ cat "$T/err" >&2; return 1; }
		else
			"$@" >/dev/null 2>"$T/err" || { cat "$T/err" >&2; return 1; }
			echo 0 0 0 >"$T/time"
		fi
		t1=$(date +%s.%N)
		s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
		if [ -z "$bs" ] || awk -v s="$s" -v b="$bs" 'BEGIN { exit !(s < b) }'; then
			bs=$s
			kb=$(awk '{ print $1 }' "$T/time")
			cs=$(awk '{ printf "%.2f", $2 + $3 }' "$T/time")
		fi
	done
	echo "$bs $kb $cs"
}

"$BIN/pipecc" --stats "$T/big.pipe" -o "$T/big.plan" 2>"$T/stats" || { cat "$T/stats"; exit 1; }
[ -z "${OLD:-}" ] || "$OLD/pipecc" "$T/big.pipe" -o "$T/old.plan" || exit 1
ops=$(awk '{ print $2 }' "$T/stats")
bytes=$(wc -c <"$T/big.plan")
echo "PIPECC_HUGE_PAGES=${PIPECC_HUGE_PAGES:-unset} (1: the op lists offered for huge pages, 0: not, unset: as the machine says; man pipesim)"
# What decides the huge pages' worth here (plan/thp.c; docs/pipesim.md, "Huge pages,
# decided by the machine"): the largest page THP gives a region that asks, and whether a
# balloon reports free memory to a hypervisor, which then backs a huge page as big as
# its blocks again on its first write.
echo "huge pages: $("$B/bench/io_bench" --thp)"
echo "pp=$PP m=$M: $ops ops, plan $(awk -v b="$bytes" 'BEGIN { printf "%.1f MiB, %.1f bytes/op", b / 1048576, b / '"$ops"' }')"
set -- $(best wc -l "$T/big.plan") || exit 1
wc=$1
row() { # NAME SECONDS RSS_KIB [CPU_SECONDS]
	awk -v n="$1" -v s="$2" -v kb="$3" -v cs="${4:-0}" -v ops="$ops" -v wc="$wc" 'BEGIN {
		printf "  %-30s %7.3f s  %6.1f M ops/s  %5.1fx wc -l", n, s, (s > 0 ? ops / s / 1e6 : 0),
		       (wc > 0 ? s / wc : 0)
		if (kb > 0) printf "  peak RSS %6.1f MiB = %5.1f B/op", kb / 1024, kb * 1024 / ops
		if (cs > 0) printf "  cpu %6.2f s = %5.1f M ops/s", cs, ops / cs / 1e6
		printf "\n" }'
}
row "wc -l PLAN" "$wc" 0
timed() { # NAME TOOL ARGS...: the best run as one row; with OLD, OLD's TOOL's too
	name=$1
	shift
	if [ -z "${OLD:-}" ]; then
		set -- $(best "$@") || exit 1
		row "$name" "$1" "$2" "$3"
		return
	fi
	tool=$1
	shift
	nb= ob=
	for _ in $(seq "$REPS"); do # old first: the file left is the new tool's
		r=$(REPS=1 && best "$OLD/${tool##*/}" $(old_args "$@")) || exit 1
		ob=$(faster "$ob" "$r")
		r=$(REPS=1 && best "$tool" "$@") || exit 1
		nb=$(faster "$nb" "$r")
	done
	row "$name" $nb
	row "  old build" $ob
}
# old_args ARGS...: one per line, the text plan swapped for the one OLD's pipecc wrote
# (text plans carry the blocks checksum since 2026-12-04, which older builds do not read).
old_args() {
	for a; do
		if [ "$a" = "$T/big.plan" ]; then echo "$T/old.plan"; else echo "$a"; fi
	done
}
faster() { # "S KB CPU" "S KB CPU": the one of fewer seconds (the first when empty)
	if [ -z "$1" ] || awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); exit !(y[1] < x[1]) }'; then
		echo "$2"
	else
		echo "$1"
	fi
}
same() { # GOT WANT WHAT
	cmp -s "$1" "$2" || { echo "bench_io: $3" >&2; exit 1; }
}
# both NAME TOOL ARGS...: timed, then (THREADS > 1) the same with --threads THREADS
both() {
	timed "$@" || exit 1
	[ "$THREADS" -gt 1 ] || return 0
	name=$1 tool=$2
	shift 2
	timed "  with --threads $THREADS" "$tool" --threads "$THREADS" "$@"
}
both "pipecc -o PLAN" "$BIN/pipecc" "$T/big.pipe" -o "$T/out.plan"
same "$T/out.plan" "$T/big.plan" "pipecc wrote a different plan"
both "pipesim -q --no-record PLAN" "$BIN/pipesim" -q --no-record "$T/big.plan"
both "pipesim -q PLAN" "$BIN/pipesim" -q "$T/big.plan"
both "pipesim PLAN (the report)" "$BIN/pipesim" "$T/big.plan"
"$BIN/pipecc" --plan-format=binary "$T/big.pipe" -o "$T/big.bin" || exit 1
bbytes=$(wc -c <"$T/big.bin")
echo "binary form: plan $(awk -v b="$bbytes" 'BEGIN { printf "%.1f MiB, %.2f bytes/op", b / 1048576, b / '"$ops"' }')"
both "pipecc --plan-format=binary" "$BIN/pipecc" --plan-format=binary "$T/big.pipe" -o "$T/out.bin"
same "$T/out.bin" "$T/big.bin" "pipecc wrote a different binary plan"
both "pipesim -q --no-record BINPLAN" "$BIN/pipesim" -q --no-record "$T/big.bin"
both "pipesim -q BINPLAN" "$BIN/pipesim" -q "$T/big.bin"
both "pipesim BINPLAN (the report)" "$BIN/pipesim" "$T/big.bin"
timed "pipecc BIN -o PLAN (to text)" "$BIN/pipecc" "$T/big.bin" -o "$T/conv.plan"
same "$T/conv.plan" "$T/big.plan" "binary -> text differs"
rm -f "$T/conv.plan" "$T/out.bin"
echo "the plan's reader and writers alone (bench/io_bench.c, best of $REPS):"
IO_WC=$wc IO_SIM_THREADS=$THREADS "$B/bench/io_bench" "$T/big.plan" "$T/out.plan" "$REPS" || exit 1
same "$T/out.plan" "$T/big.plan" "plan_write wrote a different plan"
same "$T/out.plan.bin" "$T/big.bin" "plan_write_binary wrote a different plan"
