#!/bin/sh
# PyTorch's own schedules, as torch.distributed.pipelining wrote them (tests/torch/,
# made by tests/torch/dump.py with the torch version in tests/torch/VERSION): every
# compute-only CSV and every compute_comms CSV compiles with --from-torch-csv, pipesim's
# verdict and unit-cost makespan are the ones recorded below, and pipecc's own schedule
# of the same name is never slower than torch's order, lowered by pipecc or with
# torch's own communication in either timing model.
: "${BIN:=bin}"
TOOL=torch
. tests/lib/cli.sh

# program PP NSTAGES M SCHEDULE [PLACEMENT]: unit costs, ideal links
program() {
	printf 'pipeline u;\nmesh pp=%d;\nmicrobatches %d;\ninput 2x8;\n' "$1" "$3"
	i=0
	while [ $i -lt "$2" ]; do
		if [ $i -eq $(($2 - 1)) ]; then l="loss mse;"; else l="relu;"; fi
		printf 'stage s%d { linear 8; %s }\n' $i "$l"
		i=$((i + 1))
	done
	printf 'schedule %s;\ncost * f=1 b=1 w=1;\nlink ideal;\n%s\n' "$4" "${5:+placement $5;}"
}

# span PLAN [PIPESIM OPTIONS]: the makespan in us, or "deadlock" when it does not run
span() {
	plan=$1
	shift
	if "$BIN/pipesim" "$plan" "$@" >"$dir/sim" 2>&1; then
		awk '/^makespan/ { print $2 + 0 }' "$dir/sim"
	else
		echo deadlock
	fi
}

# Per dump: torch's compute-only order (strict makespan, or "rejected"), its
# compute_comms order (strict and overlap makespans, torch's sends and receives kept).
# 1F1B's compute order is rejected: torch 2.15's Schedule1F1B._get_pipeline_order has
# the last rank run forwards 1..m and no forward 0 (its own runtime refuses the order
# too; Schedule1F1B.step does not use it).
table=$(cat <<'TABLE'
1F1B-p2-m16 rejected - -
1F1B-p2-m2 rejected - -
1F1B-p2-m4 rejected - -
1F1B-p2-m6 rejected - -
1F1B-p2-m8 rejected - -
1F1B-p4-m12 rejected - -
1F1B-p4-m16 rejected - -
1F1B-p4-m4 rejected - -
1F1B-p4-m8 rejected - -
1F1B-p8-m16 rejected - -
1F1B-p8-m24 rejected - -
1F1B-p8-m8 rejected - -
DualPipeV-p2-m16 98 144 98
DualPipeV-p2-m4 26 36 26
DualPipeV-p2-m6 38 54 38
DualPipeV-p2-m8 50 72 50
DualPipeV-p4-m12 78 117 106
DualPipeV-p4-m16 102 153 142
DualPipeV-p4-m8 54 81 70
DualPipeV-p8-m16 110 173 154
DualPipeV-p8-m24 158 245 226
GPipe-p2-m16 51 51 51
GPipe-p2-m2 9 9 9
GPipe-p2-m4 15 15 15
GPipe-p2-m6 21 21 21
GPipe-p2-m8 27 27 27
GPipe-p4-m12 45 45 45
GPipe-p4-m16 57 57 57
GPipe-p4-m4 21 21 21
GPipe-p4-m8 33 33 33
GPipe-p8-m16 69 69 69
GPipe-p8-m24 93 93 93
GPipe-p8-m8 45 45 45
Interleaved1F1B-p2-m16 99 154 99
Interleaved1F1B-p2-m2 15 21 15
Interleaved1F1B-p2-m4 27 40 27
Interleaved1F1B-p2-m6 39 59 39
Interleaved1F1B-p2-m8 51 78 51
Interleaved1F1B-p4-m12 81 135 94
Interleaved1F1B-p4-m16 105 175 118
Interleaved1F1B-p4-m4 33 55 46
Interleaved1F1B-p4-m8 57 95 70
Interleaved1F1B-p8-m16 117 256 174
Interleaved1F1B-p8-m24 165 372 222
Interleaved1F1B-p8-m8 69 140 126
InterleavedZeroBubble-p2-m16 97 129 97
InterleavedZeroBubble-p2-m2 13 17 13
InterleavedZeroBubble-p2-m4 25 33 25
InterleavedZeroBubble-p2-m6 37 49 37
InterleavedZeroBubble-p2-m8 49 65 49
InterleavedZeroBubble-p4-m12 75 113 84
InterleavedZeroBubble-p4-m16 99 148 108
InterleavedZeroBubble-p4-m4 27 42 36
InterleavedZeroBubble-p4-m8 51 78 60
InterleavedZeroBubble-p8-m16 103 196 156
InterleavedZeroBubble-p8-m24 151 275 204
InterleavedZeroBubble-p8-m8 55 118 108
LoopedBFS-p2-m16 99 147 99
LoopedBFS-p2-m2 15 21 15
LoopedBFS-p2-m4 27 39 27
LoopedBFS-p2-m6 39 57 39
LoopedBFS-p2-m8 51 75 51
LoopedBFS-p4-m12 81 129 109
LoopedBFS-p4-m16 105 169 141
LoopedBFS-p4-m4 33 53 45
LoopedBFS-p4-m8 57 91 77
LoopedBFS-p8-m16 117 241 219
LoopedBFS-p8-m24 165 347 315
LoopedBFS-p8-m8 69 135 123
ZBVZeroBubble-p2-m16 97 127 97
ZBVZeroBubble-p2-m2 14 16 14
ZBVZeroBubble-p2-m4 25 31 25
ZBVZeroBubble-p2-m6 37 47 37
ZBVZeroBubble-p2-m8 49 63 49
ZBVZeroBubble-p4-m12 75 106 79
ZBVZeroBubble-p4-m16 99 142 103
ZBVZeroBubble-p4-m4 30 40 32
ZBVZeroBubble-p4-m8 51 70 55
ZBVZeroBubble-p8-m16 103 142 115
ZBVZeroBubble-p8-m24 151 214 163
ZBVZeroBubble-p8-m8 62 84 68
TABLE
)
want() {
	echo "$table" | awk -v n="$1" '$1 == n { print $2, $3, $4 }'
}

ver=$(cat tests/torch/VERSION)
n=0
for f in tests/torch/*-p*-m*.csv; do
	b=$(basename "$f" .csv)
	name=${b%%-*}
	p=${b#*-p}
	p=${p%%-m*}
	m=${b##*-m}
	case $name in
	GPipe) s=gpipe v=1 pl= ;;
	1F1B) s=1f1b v=1 pl= ;;
	Interleaved1F1B) s=interleaved v=2 pl=loop ;;
	LoopedBFS) s=loopedbfs v=2 pl=loop ;;
	InterleavedZeroBubble) s= v=2 pl=loop ;;
	ZBVZeroBubble) s=zbv v=2 pl=v ;;
	DualPipeV) s=dualpipev v=2 pl=v ;;
	*) s=unknown ;;
	esac
	set -- $(want "$b")
	check "$b has a recorded result" "$([ $# -eq 3 ]; echo $?)" "no row in the table"
	[ $# -eq 3 ] || continue
	n=$((n + 1))
	program "$p" $((p * v)) "$m" gpipe >"$dir/g.pipe"
	if [ "$1" = rejected ]; then
		t "$ver $b compute order is rejected" 1 "$BIN/pipecc" "$dir/g.pipe" --from-torch-csv "$f" \
			-o "$dir/c.plan"
		has "$ver $b rejection is located" "$dir/err" "$f:$p:[0-9]*: error: microbatch $m in '"
		continue
	fi
	rm -f "$dir/c.plan" "$dir/k.plan" "$dir/o.plan"
	"$BIN/pipecc" "$dir/g.pipe" --from-torch-csv "$f" -o "$dir/c.plan" 2>"$dir/err"
	got=$(span "$dir/c.plan")
	check "$ver $b compute order runs in $1" "$([ "$got" = "$1" ]; echo $?)" "got $got"
	gzip -dc "tests/torch/$b.comms.csv.gz" >"$dir/k.csv"
	"$BIN/pipecc" "$dir/g.pipe" --from-torch-csv "$dir/k.csv" -o "$dir/k.plan" 2>"$dir/err"
	got="$(span "$dir/k.plan") $(span "$dir/k.plan" --model overlap)"
	check "$ver $b torch's comms run in $2 (strict), $3 (overlap)" \
		"$([ "$got" = "$2 $3" ]; echo $?)" "got $got"
	[ -n "$s" ] || continue # InterleavedZeroBubble: no pipecc schedule of that name
	program "$p" $((p * v)) "$m" "$s" "$pl" >"$dir/o.pipe"
	"$BIN/pipecc" "$dir/o.pipe" -o "$dir/o.plan" 2>"$dir/err"
	own=$(span "$dir/o.plan")
	best=$1 # torch's order at its fastest: lowered by pipecc, or its own comms in either model
	for x in $2 $3; do [ "$x" -lt "$best" ] && best=$x; done
	check "$b: pipecc's $s ($own) is not slower than torch's order ($best)" \
		"$([ "$own" != deadlock ] && [ "$own" -le "$best" ]; echo $?)" "got $own"
done

# A compute_comms CSV is checked cell by cell, errors located in the file: one torch
# dump (Interleaved1F1B, p = 2, m = 2) with one thing broken at a time.
program 2 4 2 gpipe >"$dir/g.pipe"
gzip -dc tests/torch/Interleaved1F1B-p2-m2.comms.csv.gz >"$dir/k.csv"
# As a spreadsheet saves it (a UTF-8 byte-order mark first, CRLF line ends), the same
# CSV compiles to the same plan.
"$BIN/pipecc" "$dir/g.pipe" --from-torch-csv "$dir/k.csv" -o "$dir/k.plan" || fails=$((fails + 1))
printf '\357\273\277' | cat - "$dir/k.csv" | sed 's/$/\r/' >"$dir/xl.csv"
t "a spreadsheet's CSV compiles" 0 "$BIN/pipecc" "$dir/g.pipe" --from-torch-csv "$dir/xl.csv" \
	-o "$dir/xl.plan"
cmp -s "$dir/k.plan" "$dir/xl.plan"
check "a spreadsheet's CSV gives the same plan" $? "the plans differ"
bad() { # NAME SED-SCRIPT MESSAGE
	sed "$2" "$dir/k.csv" >"$dir/e.csv"
	t "$1 is an error" 1 "$BIN/pipecc" "$dir/g.pipe" --from-torch-csv "$dir/e.csv" -o "$dir/e.plan"
	has "$1 is located" "$dir/err" "^$dir/e.csv:$3"
}
bad "a missing send" '1s/,0SEND_F1,/,/' "1:1: error: rank 0 has no '0SEND_F1': a CSV that names communication must name every transfer"
bad "a send on the wrong rank" '1s/^0UNSHARD/1SEND_F0/' "1:1: error: '1SEND_F0' is on rank 0, but stage 1 (s1) runs on rank 1"
bad "a receive before the first stage" '1s/^0UNSHARD/0RECV_F0/' "1:1: error: '0RECV_F0' moves nothing: stage 0 is the first stage"
bad "a send twice" '1s/0F0,0SEND_F0/0F0,0SEND_F0,0SEND_F0/' "1:32: error: '0SEND_F0' appears twice on rank 0"
bad "a send's microbatch out of range" '1s/0F1,0SEND_F1/0F1,0SEND_F9/' "1:45: error: microbatch 9 in '0SEND_F9' is out of range"
bad "a communication cell overlapped" '1s/0F0,0SEND_F0/(0F0;0SEND_F0)OVERLAP_F_B/' "1:19: error: cannot read cell '(0F0;0SEND_F0)OVERLAP_F_B'"
bad "a send before its forward" '1s/0F0,0SEND_F0/0SEND_F0,0F0/' "1:19: error: '0SEND_F0' comes before the compute that makes its tensor"
bad "a receive after its use" '2s/1RECV_F0,1F0/1F0,1RECV_F0/' "2:23: error: '1RECV_F0' comes after the compute that uses its tensor"
bad "receives out of order" '2s/1RECV_F0,1F0,1SEND_F0,1RECV_F1/1RECV_F1,1RECV_F0,1F0,1SEND_F0/' \
	"2:28: error: '1RECV_F0' is rank 1's receive #2 from rank 0, but '0SEND_F0' is rank 0's send #1 to rank 1"
# Torch's order kept means pipesim judges it: rank 1 posting its sends after the
# receives they unblock waits for itself through rank 0.
sed '2s/1RECV_F0,1F0,1SEND_F0,1RECV_F1,1F1,1SEND_F1,3RECV_F0,3F0/1RECV_F0,1F0,1RECV_F1,1F1,3RECV_F0,1SEND_F0,1SEND_F1,3F0/' \
	"$dir/k.csv" >"$dir/e.csv"
t "a deadlocking comms order compiles" 0 "$BIN/pipecc" "$dir/g.pipe" --from-torch-csv "$dir/e.csv" \
	-o "$dir/e.plan"
t "pipesim finds its deadlock" 1 "$BIN/pipesim" "$dir/e.plan"
has "pipesim shows the wait-for cycle" "$dir/err" "^wait-for cycle (2 edges):"

check "every recorded dump was read" "$([ $n -eq $(echo "$table" | wc -l) ]; echo $?)" "read $n"
exit $((fails > 0))
