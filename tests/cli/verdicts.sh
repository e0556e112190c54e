#!/bin/sh
# pipesim's verdict is piperun's, on every plan of tests/plans (good, bad, malformed):
# a plan pipesim passes runs to the end; one it refuses (reader or verifier) piperun
# refuses with the same first line, and pipecc given the plan too; one it proves
# deadlocked ends in piperun's watchdog with every rank blocked at the op pipesim names
# (the same set of rank and op lines), on threads and, where mpirun and the MPI backend
# are there (not under sanitizers), one process per rank.  Among them
# bad/dp_tp_cycle.plan, collectives of a dp group and a tp group that wait on each
# other (a rank runs its collectives one after another, as NCCL's stream does), and
# bad/tp_order.plan, a tp group posting its collectives in two orders, which MPI and
# NCCL would pair by order: every tool refuses it with one message.
: "${BIN:=bin}"
TOOL=verdicts
. tests/lib/cli.sh

mpi=
case $BIN in
*san*) ;;
*)
	if command -v mpirun >/dev/null 2>&1 && "$BIN/piperun" --version | grep -q mpi; then
		mpi="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader"
	fi
	;;
esac
export OMPI_MCA_rmaps_base_oversubscribe=1

# The blocked ops a report names, one "R OP" a line, sorted: pipesim's
# "FILE:L: note: blocked: rank R OP (line L)", piperun's
# "FILE:L: note: rank R blocked in step S at 'OP'".
sim_blocked() {
	sed -n 's/^.*: note: blocked: rank \([0-9]*\) \(.*\) (line [0-9]*)$/\1 \2/p' "$1" | sort
}
run_blocked() {
	sed -n "s/^.*: note: rank \([0-9]*\) blocked in step [0-9]* at '\(.*\)'\$/\1 \2/p" "$1" |
		sort -u
}

# agree PLAN WAY: piperun (WAY: threads or mpi) reaches pipesim's verdict on PLAN.
agree() {
	f=$1
	"$BIN/pipesim" "$f" >"$dir/sim.out" 2>"$dir/sim.err"
	src=$?
	if [ "$2" = mpi ]; then
		n=$(sed -n 's/^world //p' "$f")
		[ -n "$n" ] || return 0 # unreadable: the threads run covers it
		timeout 120 $mpi -np "$n" "$BIN/piperun" "$f" -n 1 --timeout 1 -q \
			>"$dir/run.out" 2>"$dir/run.err"
	else
		timeout 120 "$BIN/piperun" "$f" -n 1 --timeout 1 -q >"$dir/run.out" 2>"$dir/run.err"
	fi
	rrc=$?
	if [ "$src" -eq 0 ]; then
		[ "$rrc" -eq 0 ] && return 0
		echo "pipesim passes $f, piperun ($2) exits $rrc:" && head -3 "$dir/run.err"
		return 1
	fi
	if [ "$rrc" -eq 0 ]; then
		echo "pipesim refuses $f, piperun ($2) runs it" && head -3 "$dir/sim.err"
		return 1
	fi
	if grep -q "error: deadlock" "$dir/sim.err"; then
		sim_blocked "$dir/sim.err" >"$dir/a"
		run_blocked "$dir/run.err" >"$dir/b"
		if ! grep -q "no rank made progress" "$dir/run.err" || [ ! -s "$dir/a" ] ||
			! cmp -s "$dir/a" "$dir/b"; then
			echo "$f ($2): pipesim's blocked ops and piperun's differ:"
			diff "$dir/a" "$dir/b" | head -10
			head -3 "$dir/run.err"
			return 1
		fi
		return 0
	fi
	# A refused plan: the same first line (mpirun's processes all print it).
	head -1 "$dir/sim.err" >"$dir/a"
	grep -m1 -F -x -f "$dir/a" "$dir/run.err" >/dev/null && return 0
	echo "$f ($2): pipesim says"
	cat "$dir/a"
	echo "piperun says"
	head -3 "$dir/run.err"
	return 1
}

ways=threads
[ -n "$mpi" ] && ways="threads mpi"
nplans=0
for way in $ways; do
	for f in tests/plans/good/*.plan tests/plans/bad/*.plan tests/plans/malformed/*.plan; do
		agree "$f" "$way" >"$dir/why" 2>&1
		check "piperun ($way) agrees with pipesim on $f" $? "$(cat "$dir/why")"
		nplans=$((nplans + 1))
	done
done
check "the plans were there" "$([ "$nplans" -ge 20 ] && echo 0 || echo 1)" "$nplans plans"

# The dp x tp cycle is one: pipesim names the 4-cycle, piperun the same four ranks.
t "dp_tp_cycle: pipesim finds the 4-cycle" 1 "$BIN/pipesim" tests/plans/bad/dp_tp_cycle.plan
has "dp_tp_cycle: 4 edges" "$dir/err" "wait-for cycle (4 edges)"
t "dp_tp_cycle: piperun's watchdog ends it" 1 "$BIN/piperun" tests/plans/bad/dp_tp_cycle.plan \
	-n 1 --timeout 1 -q
has "dp_tp_cycle: rank 0 blocked at its ALLREDUCE" "$dir/err" \
	"dp_tp_cycle.plan:42: note: rank 0 blocked in step 1 at 'ALLREDUCE s=1"
has "dp_tp_cycle: rank 1 blocked at its TPREDUCE" "$dir/err" \
	"dp_tp_cycle.plan:66: note: rank 1 blocked in step 1 at 'TPREDUCE grad s=0"

# Collectives out of order in a tp group: the same located message from all three.
msg="tp_order.plan:111: error: rank 3 op 11 (line 111) \`TPREDUCE grad s=1 m=1 part=0"
for run in "pipecc -o /dev/null" pipesim "piperun -n 1"; do
	set -- $run
	tool=$1
	shift
	t "$tool refuses tp_order.plan" 1 "$BIN/$tool" tests/plans/bad/tp_order.plan "$@"
	has "$tool names both TPREDUCEs" "$dir/err" "$msg.*rank 2 op 11 (line 86).*collectives differ"
done

[ "$fails" -eq 0 ]
