#!/bin/sh
# --threads N (plan/par.h): the passes it spreads over workers give what one thread
# gives.  Every example's plan, and many damaged copies of it (two op lines swapped, a
# microbatch, peer, group or edge changed: faults of every check the verifier makes),
# through pipesim with 1 and with 3 threads: the same output, errors and exit status,
# text and JSON.  The same for the test corpus (tests/plans: good plans, deadlocks,
# mismatches, malformed files) in both models and quiet, where with threads the
# simulation runs beside the verifier and is kept, or dropped when the plan does not
# verify (with 3 threads a task pages the run's per-op times in beside it, with 2 none
# does: par_prefault; with 3 the strict model of a plan without collectives runs on 2
# threads, sim/psim.c, and a damaged plan's run there is dropped or, stuck, run again on
# one).  pipecc compiles every example to the same bytes on 1, 2
# and 3 threads and on one per CPU (--threads 0), and given a plan verifies and writes
# it the same way too.
: "${BIN:=bin}"
TOOL=threads
. tests/lib/cli.sh
STEP=${STEP:-20} # every STEP-th op line of a plan is damaged

# same NAME ARGS...: pipesim ARGS with 1 and with 3 threads say the same; the status of
# the 1-thread run left in $same_rc.
same() {
	name=$1
	shift
	"$BIN/pipesim" "$@" >"$dir/one" 2>&1
	same_rc=$?
	"$BIN/pipesim" --threads 3 "$@" >"$dir/three" 2>&1
	rc3=$?
	cmp -s "$dir/one" "$dir/three" && [ "$same_rc" = "$rc3" ]
	check "$name" $? "exit $same_rc vs $rc3; $(diff "$dir/one" "$dir/three" | head -4 | tr '\n' ' ')"
}

# damage PLAN KIND LINE: PLAN as format 1 (no checksum), op line LINE changed by KIND.
damage() {
	awk -v k="$2" -v at="$3" '
	NR == 1 { $0 = "pipecc-plan 1" } # format 1: no checksum, so the edits are read
	NR == at && k == "swap" { held = $0; next }
	NR == at + 1 && k == "swap" { print; print held; next }
	NR == at && k == "mb" { if (!sub(/ m=[0-9]+/, " m=0")) $3 = 0 }
	NR == at && k == "peer" { sub(/ (to|from)=[0-9]+/, " to=0") }
	NR == at && k == "group" { sub(/ g=[0-9]+/, " g=1") }
	NR == at && k == "edge" { sub(/ e=[0-9]+/, " e=0") }
	{ print }' "$1"
}

faults=0 cases=0
for f in examples/*.pipe; do
	b=$(basename "$f" .pipe)
	"$BIN/pipecc" "$f" -o "$dir/$b.plan" 2>/dev/null || continue
	"$BIN/pipecc" --threads 3 "$f" -o "$dir/$b.3" 2>/dev/null
	cmp -s "$dir/$b.plan" "$dir/$b.3"
	check "$b: pipecc --threads 3 compiles the same plan" $? "differs"
	"$BIN/pipecc" --threads 0 "$f" -o "$dir/$b.0" 2>/dev/null
	cmp -s "$dir/$b.plan" "$dir/$b.0"
	check "$b: pipecc --threads 0 (one per CPU) compiles the same plan" $? "differs"
	"$BIN/pipecc" --expand --plan-format=binary "$f" -o "$dir/$b.xb" 2>/dev/null
	"$BIN/pipecc" --threads 2 --expand --plan-format=binary "$f" -o "$dir/$b.xb2" 2>/dev/null
	cmp -s "$dir/$b.xb" "$dir/$b.xb2"
	check "$b: pipecc --threads 2 --expand --plan-format=binary, the same" $? "differs"
	same "$b: the plan" "$dir/$b.plan"
	same "$b: the plan, json" --json "$dir/$b.plan"
	"$BIN/pipesim" --threads 0 "$dir/$b.plan" >"$dir/zero" 2>&1
	"$BIN/pipesim" "$dir/$b.plan" 2>&1 | cmp -s - "$dir/zero"
	check "$b: pipesim --threads 0 says the same" $? "differs"
	"$BIN/pipesim" --threads 2 "$dir/$b.plan" 2>&1 | cmp -s - "$dir/zero"
	check "$b: pipesim --threads 2 (no task pages the times in) says the same" $? "differs"
	"$BIN/pipecc" --threads 3 "$dir/$b.plan" -o "$dir/$b.again" 2>/dev/null
	cmp -s "$dir/$b.plan" "$dir/$b.again"
	check "$b: pipecc --threads 3 writes the plan it reads" $? "differs"
	ops=$(awk '/^(F|B|W|BW|SEND|RECV|ALLREDUCE|OPTIM|TIEREDUCE|TPREDUCE) / { print NR }' \
		"$dir/$b.plan" | awk -v s="$STEP" 'NR % s == 1')
	bad=0 n=0
	for at in $ops; do
		for k in swap mb peer group edge; do
			damage "$dir/$b.plan" $k "$at" >"$dir/bad.plan"
			"$BIN/pipesim" "$dir/bad.plan" >"$dir/one" 2>&1
			r1=$?
			"$BIN/pipesim" --threads 3 "$dir/bad.plan" >"$dir/three" 2>&1
			r3=$?
			n=$((n + 1))
			if ! cmp -s "$dir/one" "$dir/three" || [ "$r1" != "$r3" ]; then
				bad=$((bad + 1))
				echo "  $b line $at $k: exit $r1 vs $r3" >>"$dir/why"
			fi
			[ "$r1" = 0 ] || faults=$((faults + 1))
		done
	done
	cases=$((cases + n))
	check "$b: $n damaged plans, the same with 3 threads" "$bad" "$bad differ: $(head -3 "$dir/why" 2>/dev/null)"
done
for f in tests/plans/*/*.plan; do
	b=$(basename "$(dirname "$f")")/$(basename "$f" .plan)
	same "$b" "$f"
	same "$b, json, overlap model" --json --model overlap "$f"
	same "$b, quiet" -q "$f"
done

# The damage must reach the verifier's checks, or the comparison shows little.
check "damaged plans refused: $faults of $cases" "$([ "$faults" -gt $((cases / 3)) ]; echo $?)" \
	"too few faults"

[ "$fails" -eq 0 ]
