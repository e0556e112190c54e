#!/bin/sh
# Schedules from the command line: textbook unit-cost makespans read from
# `pipesim --json`, every schedule's plan runs, placements rejected with what works,
# custom and CSV orders with located errors, --from-torch-csv round trips, F&B pairs
# (marked, kept in binary, run bit-identical to their halves apart), and an
# order that cannot run across ranks (pipecc says so; with --allow-deadlock pipesim
# shows the cycle).
: "${BIN:=bin}"
TOOL=schedules
. tests/lib/cli.sh

# program N PP M SCHEDULE [EXTRA]: N stages on PP ranks, M microbatches, unit costs
program() {
	printf 'pipeline u;\nmesh pp=%d;\nmicrobatches %d;\ninput 2x8;\n' "$2" "$3"
	i=0
	while [ $i -lt "$1" ]; do
		if [ $i -eq $(($1 - 1)) ]; then l="loss mse;"; else l="relu;"; fi
		printf 'stage s%d { linear 8; %s }\n' $i "$l"
		i=$((i + 1))
	done
	printf 'schedule %s;\ncost * f=1 b=1 w=1;\nlink ideal;\n%s\n' "$4" "${5:-}"
}

# makespan SCHED N PP M WANT [PIPESIM OPTIONS]: the step takes WANT us
makespan() {
	s=$1 n=$2 p=$3 m=$4 want=$5
	shift 5
	program "$n" "$p" "$m" "$s" >"$dir/u.pipe"
	if ! "$BIN/pipecc" ${TUNE:+--tune=$TUNE} "$dir/u.pipe" -o "$dir/u.plan" 2>"$dir/err"; then
		echo "  $s n=$n pp=$p m=$m does not compile"
		sed 's/^/  | /' "$dir/err" | head -5
		return 1
	fi
	"$BIN/pipesim" --json "$@" "$dir/u.plan" >"$dir/u.json"
	got=$(sed -n 's/^  "makespan": \([0-9]*\)\.000,$/\1/p' "$dir/u.json")
	if [ "$got" != "$want" ]; then
		echo "  $s n=$n pp=$p m=$m $*: makespan $got us, want $want"
		return 1
	fi
}

max() { if [ "$1" -gt "$2" ]; then echo "$1"; else echo "$2"; fi; }

formulas() {
	ok=0
	for p in 1 2 3 4 6; do
		for m in 1 2 3 $p $((2 * p)) $((2 * p + 1)) $((3 * p)); do
			makespan gpipe $p $p $m $((3 * (m + p - 1))) || ok=1
			makespan 1f1b $p $p $m $((3 * (m + p - 1))) || ok=1
			zb=$(max $((3 * m + p - 1)) $((2 * m + 2 * p - 1)))
			makespan zbh1 $p $p $m "$zb" || ok=1
			makespan zbh2 $p $p $m "$zb" || ok=1
			zbv=$(max $((6 * m + p - 1)) $((4 * m + 4 * p - 2)))
			makespan zbv $((2 * p)) $p $m "$zbv" || ok=1
			for v in 1 2 3; do
				w=$((3 * (m + v * p - 1)))
				[ $m -ge $p ] && w=$((3 * (v * m + p - 1)))
				makespan loopedbfs $((v * p)) $p $m $w || ok=1
				[ $((m % p)) -eq 0 ] || continue
				makespan interleaved $((v * p)) $p $m $((3 * v * m + 3 * (p - 1))) || ok=1
				makespan interleaved $((v * p)) $p $m $((3 * v * m + 3 * (p - 1))) \
					--model overlap || ok=1
			done
			if [ $m -ge $((2 * p)) ]; then
				# exact when tuned for overlap; docs/schedules.md, "dualpipev"
				TUNE=overlap makespan dualpipev $((2 * p)) $p $m $((6 * m + p - 1)) \
					--model overlap || ok=1
				TUNE=overlap makespan dualpipev $((2 * p)) $p $m $((6 * m + p - 1)) \
					--eager || ok=1
			fi
		done
	done
	return $ok
}
if formulas >"$dir/formulas" 2>&1; then
	echo "testing schedules unit-cost makespans match the formulas ... passed"
else
	echo "testing schedules unit-cost makespans match the formulas ... FAILED"
	sed 's/^/  | /' "$dir/formulas" | head -20
	fails=$((fails + 1))
fi

# DualPipe's README gives DualPipeV's bubble as (PP/2 - 1)(F&B + B - 3W), PP the stages
# (2p), B a full backward (b + w), W a weight gradient (w) and F&B an overlapped pair,
# F + B here (docs/semantics.md, "Overlapped pairs"): (p - 1)(f + 2b - w).  pipecc's
# dualpipev stays within it (the step less a rank's work, 2m(f + b + w)), in both models
# (docs/schedules.md, "dualpipev").
dualpipe_bubble() {
	ok=0
	for c in "1 1 1" "1 2 1" "2 2 1" "10 12 6" "3 1 1"; do
		set -- $c
		f=$1 b=$2 w=$3
		for p in 2 3 4; do
			for m in $((2 * p)) $((3 * p + 1)); do
				program $((2 * p)) $p $m dualpipev |
					sed "s/^cost .*/cost * f=$f b=$b w=$w;/" >"$dir/dp.pipe"
				"$BIN/pipecc" "$dir/dp.pipe" -o "$dir/dp.plan" || { ok=1; continue; }
				want=$(((p - 1) * (f + 2 * b - w)))
				for model in strict overlap; do
					got=$("$BIN/pipesim" --json --model $model "$dir/dp.plan" |
						sed -n 's/^  "makespan": \([0-9]*\)\.000,$/\1/p')
					bubble=$((got - 2 * m * (f + b + w)))
					echo "p=$p m=$m $f:$b:$w $model: bubble $bubble, formula $want"
					[ "$bubble" -ge 0 ] && [ "$bubble" -le "$want" ] || ok=1
				done
			done
		done
	done
	return $ok
}
if dualpipe_bubble >"$dir/dpb" 2>&1; then
	echo "testing schedules dualpipev within DualPipe's bubble formula ($(wc -l <"$dir/dpb") cases) ... passed"
else
	echo "testing schedules dualpipev within DualPipe's bubble formula ... FAILED"
	grep -v "^p=" "$dir/dpb" | sed 's/^/  | /' | head -5
	awk '/^p=/ { split($6, b, ","); if (b[1] + 0 > $8 + 0 || b[1] + 0 < 0) print "  | " $0 }' \
		"$dir/dpb" | head -10
	fails=$((fails + 1))
fi

for f in examples/interleaved.pipe examples/zbv.pipe examples/custom.pipe \
	examples/fromcsv.pipe; do
	t "compiles $f" 0 "$BIN/pipecc" "$f" -o "$dir/e.plan"
	t "$f runs (strict)" 0 "$BIN/pipesim" --quiet "$dir/e.plan"
	t "$f runs (overlap)" 0 "$BIN/pipesim" --quiet --model overlap "$dir/e.plan"
done
"$BIN/pipecc" examples/zbv.pipe -o "$dir/e.plan"
t "zbv example makespan" 0 "$BIN/pipesim" "$dir/e.plan"
has "zbv example takes 6m + pp - 1 us" "$dir/out" "makespan   51 us"

# Every registered schedule's torch CSV reads back to the same order: on a generated
# program with one or two stages per rank, else on the example written for it
# (custom, csv); a schedule no program takes fails.
for s in $("$BIN/pipecc" --list-schedules); do
	src=
	for n in 4 8; do
		program $n 4 8 "$s" "skip s0 -> s2;" >"$dir/r$n.pipe"
		"$BIN/pipecc" "$dir/r$n.pipe" -o /dev/null 2>/dev/null && { src=$dir/r$n.pipe; break; }
	done
	for f in examples/*.pipe; do
		[ -z "$src" ] || break
		"$BIN/pipecc" "$f" -o "$dir/x.plan" 2>/dev/null && grep -qx "schedule $s" "$dir/x.plan" &&
			src=$f
	done
	check "some program takes schedule $s" "$([ -n "$src" ]; echo $?)" "no program takes it"
	[ -n "$src" ] || continue
	"$BIN/pipecc" "$src" -e torch-csv --comms -o "$dir/a.csv"
	t "$s CSV imports" 0 "$BIN/pipecc" "$src" --from-torch-csv "$dir/a.csv" \
		-e torch-csv --comms -o "$dir/b.csv"
	t "$s CSV round trip is exact" 0 cmp "$dir/a.csv" "$dir/b.csv"
done
t "--from-torch-csv with --schedule is a usage error" 2 "$BIN/pipecc" examples/custom.pipe \
	--from-torch-csv examples/custom.csv -s gpipe
t "--from-torch-csv of a missing file" 1 "$BIN/pipecc" examples/custom.pipe \
	--from-torch-csv "$dir/none.csv"
has "missing CSV named" "$dir/err" "cannot read $dir/none.csv"

# Placements a schedule cannot serve.
program 8 4 8 zbv "placement loop;" >"$dir/p.pipe"
t "zbv rejects loop placement" 1 "$BIN/pipecc" "$dir/p.pipe"
has "zbv says what works" "$dir/err" "it works with placement v"
program 8 4 8 interleaved "placement [0, 0, 1, 1, 2, 2, 3, 3];" >"$dir/p.pipe"
t "interleaved rejects contiguous blocks" 1 "$BIN/pipecc" "$dir/p.pipe"
has "interleaved says what works" "$dir/err" "it works with placement loop"
t "loopedbfs takes contiguous blocks" 0 "$BIN/pipecc" "$dir/p.pipe" -s loopedbfs -o "$dir/p.plan"
t "and the plan runs" 0 "$BIN/pipesim" --quiet "$dir/p.plan"

# Custom orders: located errors, in the program or in the CSV.
sed 's/3F2 3I2 3W2 0I1/3F2 3W2 3I2 0I1/' examples/custom.pipe >"$dir/c.pipe"
t "custom W before I" 1 "$BIN/pipecc" "$dir/c.pipe"
has "custom error located" "$dir/err" \
	"c.pipe:20:15: error: '3W2' comes before its input gradient '3I2'"
has "custom error shows the rank" "$dir/err" \
	"note: rank 0 runs ... 0I0 0W0 3F2 \[3W2\] 3I2 0I1"
sed 's/,3I2,/,3I9,/' examples/custom.csv >"$dir/c.csv"
t "CSV microbatch out of range" 1 "$BIN/pipecc" examples/custom.pipe --from-torch-csv "$dir/c.csv"
has "CSV error located in the CSV" "$dir/err" \
	"c.csv:1:[0-9]*: error: microbatch 9 in '3I9' is out of range"
sed 's/,3I2,/,3Q2,/' examples/custom.csv >"$dir/c.csv"
t "CSV unreadable cell" 1 "$BIN/pipecc" examples/custom.pipe --from-torch-csv "$dir/c.csv"
has "CSV cell located" "$dir/err" "c.csv:1:[0-9]*: error: cannot read cell '3Q2'"

# Valid on each rank, impossible across ranks.
cat >"$dir/d.pipe" <<'EOF'
pipeline d;
mesh pp=2;
microbatches 1;
input 2x8;
stage s0 { linear 8; relu; }
stage s1 { linear 8; relu; }
stage s2 { linear 8; loss mse; }
cost * f=1 b=1 w=1;
link ideal;
schedule custom {
  rank 0: 2F0 0F0 2B0 0B0;
  rank 1: 1F0 1B0;
}
EOF
t "cross-rank cycle is an error" 1 "$BIN/pipecc" "$dir/d.pipe"
has "the stall is reported" "$dir/err" "d.pipe:11:11: error: the schedule cannot run"
t "with --allow-deadlock the plan is written" 0 \
	"$BIN/pipecc" "$dir/d.pipe" --allow-deadlock -o "$dir/d.plan"
t "pipesim finds the deadlock" 1 "$BIN/pipesim" "$dir/d.plan"
has "pipesim shows the cycle" "$dir/err" "wait-for cycle (2 edges)"


# An F&B pair written in a custom order (docs/semantics.md, "Overlapped pairs"): the
# plan marks it and keeps it through the binary form; piperun runs it bit-identical to
# the same order written apart (one compute stream), and --emit torch-csv writes
# PyTorch's OVERLAP_F_B cell, which reads back to the same plan.
sed 's/3F2 3I2 3W2 0I1 0W1/3F2\&0I1 3I2 3W2 0W1/' examples/custom.pipe >"$dir/p.pipe"
sed 's/3F2 3I2 3W2 0I1 0W1/3F2 0I1 3I2 3W2 0W1/' examples/custom.pipe >"$dir/a.pipe"
t "a custom F&B pair compiles" 0 "$BIN/pipecc" "$dir/p.pipe" -o "$dir/p.plan"
has "the plan marks the pair" "$dir/p.plan" "^F 3 2 pair @"
t "the paired plan in binary" 0 "$BIN/pipecc" "$dir/p.plan" --plan-format=binary -o "$dir/p.bin"
t "and back to text" 0 "$BIN/pipecc" "$dir/p.bin" -o "$dir/p2.plan"
cmp -s "$dir/p.plan" "$dir/p2.plan"
check "the pair survives the binary form" $? "the plans differ"
t "the order written apart compiles" 0 "$BIN/pipecc" "$dir/a.pipe" -o "$dir/a.plan"
t "piperun runs the pair" 0 "$BIN/piperun" "$dir/p.plan" --steps 2 --save "$dir/sp"
t "piperun runs the order apart" 0 "$BIN/piperun" "$dir/a.plan" --steps 2 --save "$dir/sa"
cmp -s "$dir/sp/step-2/rank0.safetensors" "$dir/sa/step-2/rank0.safetensors" &&
	cmp -s "$dir/sp/step-2/rank1.safetensors" "$dir/sa/step-2/rank1.safetensors"
check "the pair's weights are bit-identical to the order apart" $? "the weights differ"
t "the pair as a torch CSV" 0 "$BIN/pipecc" "$dir/p.pipe" --emit torch-csv -o "$dir/p.csv"
has "the CSV has PyTorch's overlapped cell" "$dir/p.csv" ",(3F2;0I1)OVERLAP_F_B,"
t "the CSV reads back" 0 "$BIN/pipecc" "$dir/p.pipe" --from-torch-csv "$dir/p.csv" \
	-o "$dir/p3.plan"
has "with its pair" "$dir/p3.plan" "^F 3 2 pair @"
sed 's/^mesh pp=2;/mesh pp=2 tp=2;/' "$dir/p.pipe" >"$dir/ptp.pipe"
t "a pair at tp = 2 compiles" 0 "$BIN/pipecc" "$dir/ptp.pipe" -o "$dir/ptp.plan"
! grep -q '^F .* pair' "$dir/ptp.plan"
check "at tp = 2 the pair runs as its halves (no mark)" $? "a pair mark at tp = 2"
t "and the tp = 2 plan runs" 0 "$BIN/pipesim" "$dir/ptp.plan"

[ "$fails" -eq 0 ]
