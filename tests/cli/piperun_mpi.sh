#!/bin/sh
# piperun under mpirun, one rank per process: --check passes for every schedule pipecc
# accepts on the bundled examples (the backend chosen automatically from the launcher's
# environment, and by --backend mpi), for AdamW with dp=2 and for pp x dp x tp =
# 2 x 2 x 2 (examples/gpt-tp.pipe), a head-to-head deadlock
# ends by the watchdogs with both blocked sends named, a wrong process count is an
# error, and --backend threads (which would run the whole world in every process) is
# refused.  Skipped (with a line saying so) without mpirun, without the MPI backend, or
# under sanitizers.
: "${BIN:=bin}"
TOOL=piperun-mpi
. tests/lib/cli.sh
if ! command -v mpirun >/dev/null 2>&1; then
	echo "testing piperun under mpirun ... skipped: mpirun not found"
	exit 0
fi
if ! "$BIN/piperun" --version | grep -q mpi; then
	echo "testing piperun under mpirun ... skipped: piperun was built without MPI"
	exit 0
fi
case $BIN in
*san*)
	echo "testing piperun under mpirun ... skipped: sanitizer builds test the threads backend"
	exit 0
	;;
esac
# Oversubscribe: the tests run more ranks than this machine may have cores.
MPIRUN="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader"
export OMPI_MCA_rmaps_base_oversubscribe=1

schedules=$(sed -n 's/.*\.name = "\([A-Za-z0-9_]*\)".*/\1/p' compiler/sched_*.c | sort -u)
for p in examples/tiny.pipe examples/skips.pipe examples/mlp4.pipe; do
	b=$(basename "$p" .pipe)
	for s in $schedules; do
		"$BIN/pipecc" "$p" -s "$s" -o "$dir/$b-$s.plan" >/dev/null 2>&1 || continue
		if [ -x "$BIN/pipesim" ] && ! "$BIN/pipesim" -q "$dir/$b-$s.plan" >/dev/null 2>&1; then
			continue
		fi
		n=$(sed -n 's/^world //p' "$dir/$b-$s.plan")
		t "--check $s on $b (np $n)" 0 timeout 300 $MPIRUN -np "$n" "$BIN/piperun" \
			"$dir/$b-$s.plan" --check --steps 2
		has "--check $s on $b chose mpi and agrees" "$dir/out" "^check: .*: ok"
	done
done
has "the backend is chosen from the launcher" "$dir/out" " on mpi, "
# Same-rank edges sent to self (a send to self inside one group) under MPI.
for s in zbv dualpipev; do
	"$BIN/pipecc" examples/zbv.pipe -s "$s" --same-rank=self-send -o "$dir/self-$s.plan"
	t "--check on the $s self-send plan (np 8)" 0 timeout 300 $MPIRUN -np 8 "$BIN/piperun" \
		"$dir/self-$s.plan" --check --steps 2
	has "--check on the $s self-send plan agrees" "$dir/out" "^check: .*: ok"
done
# pp x dp x tp = 2 x 2 x 2: TPREDUCE on the tp communicator (MPI_Comm_split), the
# vocabulary-split loss's max and sum among them; a second one with zbh1 (B and W apart).
"$BIN/pipecc" examples/gpt-tp.pipe -o "$dir/gpt-tp.plan"
t "--check gpt-tp pp=2 dp=2 tp=2 (np 8)" 0 timeout 300 $MPIRUN -np 8 "$BIN/piperun" \
	"$dir/gpt-tp.plan" --check --steps 2
has "--check gpt-tp on mpi agrees" "$dir/out" "^check: .*: ok"
has "gpt-tp ran 2 x 2 x 2 on mpi" "$dir/out" "pp=2 dp=2 tp=2, 8 ranks.* on mpi, "
# A run bigger than the host (72 PB: 65536 microbatches of a 1.1 TB output): the two
# processes on this host add up their ranks' peaks and refuse before allocating; the
# first says why, once.
printf 'pipeline vast;\nmesh pp=2;\nmicrobatches 65536;\ninput 4194304x4;\n%s\n%s\n%s\n' \
	'stage s0 { linear 65536; }' 'stage s1 { linear 4; loss mse; }' 'schedule gpipe;' \
	>"$dir/vast.pipe"
"$BIN/pipecc" "$dir/vast.pipe" -o "$dir/vast.plan" || fails=$((fails + 1))
t "a run bigger than the host is refused (np 2)" nonzero timeout 120 $MPIRUN -np 2 \
	"$BIN/piperun" "$dir/vast.plan"
n=$(grep -c "^piperun: error: the run needs at least 72.1 PB on host .* (its 2 ranks' peaks together" "$dir/err")
check "the refusal counts both processes' ranks, said once" "$([ "$n" = 1 ]; echo $?)" \
	"$n such lines"
"$BIN/pipecc" examples/gpt-tp.pipe -s zbh1 -o "$dir/gpt-tp-zbh1.plan"
t "--check gpt-tp zbh1 (np 8)" 0 timeout 300 $MPIRUN -np 8 "$BIN/piperun" \
	"$dir/gpt-tp-zbh1.plan" --check --steps 2
has "--check gpt-tp zbh1 on mpi agrees" "$dir/out" "^check: .*: ok"
# AdamW with dp=2 (its state per process; the all-reduce is MPI's, within the bound).
"$BIN/pipecc" examples/mlp4.pipe -o "$dir/mlp4-adamw.plan"
t "--check adamw on mlp4 (np 8)" 0 timeout 300 $MPIRUN -np 8 "$BIN/piperun" \
	"$dir/mlp4-adamw.plan" --optimizer adamw --check --steps 2
has "--check adamw on mlp4 agrees" "$dir/out" "^check: .*: ok"
has "--check adamw on mlp4 ran adamw" "$dir/out" "^optimizer adamw lr=0.001 "
"$BIN/pipecc" examples/tiny.pipe -o "$dir/tiny.plan"
t "--backend mpi" 0 timeout 120 $MPIRUN -np 2 "$BIN/piperun" "$dir/tiny.plan" --backend mpi --json
has "--backend mpi reports mpi" "$dir/out" '"backend": "mpi"'
t "wrong process count" nonzero timeout 120 $MPIRUN -np 3 "$BIN/piperun" "$dir/tiny.plan"
has "wrong process count is explained" "$dir/err" "the plan has world 2 but 3 MPI processes"
"$BIN/pipecc" examples/tiny.pipe -o "$dir/tiny.plan"
t "a diverged run under mpirun fails" nonzero timeout 120 $MPIRUN -np 2 "$BIN/piperun" \
	"$dir/tiny.plan" --lr 1e6 -q
has "... its root naming the step" "$dir/err" "piperun: error: step 3: the loss is inf: the training diverged"
t "--backend threads under mpirun is refused" 1 timeout 120 $MPIRUN -np 2 "$BIN/piperun" \
	"$dir/tiny.plan" --backend threads
has "the refusal says to use --backend mpi" "$dir/err" \
	"as 2 processes, but the threads backend runs every rank of the plan in one process.*use --backend mpi"
check "the refusal is said once" "$(($(grep -c "piperun: error:" "$dir/err") - 1))" \
	"$(grep -c "piperun: error:" "$dir/err") error lines"
check "the refused run prints no figures" "$(grep -c "^step " "$dir/out")" "stdout has steps"

# The head-to-head deadlock of tests/cli/piperun.sh: rank 0 sends act m=1 while rank 1
# sends grad m=0, in separate groups.
sed -n '/^cat >"$dir\/deadlock.plan" <<.EOF.$/,/^EOF$/p' tests/cli/piperun.sh | sed '1d;$d' \
	>"$dir/deadlock.plan"
if [ -x "$BIN/pipesim" ]; then
	t "deadlock plan: pipesim finds the deadlock" 1 "$BIN/pipesim" "$dir/deadlock.plan"
fi
l0=$(grep -n "SEND act e=0 m=1" "$dir/deadlock.plan" | cut -d: -f1)
l1=$(grep -n "SEND grad e=0 m=0" "$dir/deadlock.plan" | cut -d: -f1)
t "deadlock ends by the watchdog" nonzero timeout 60 $MPIRUN -np 2 "$BIN/piperun" \
	"$dir/deadlock.plan" --timeout 2
# Both ranks' watchdogs fire; the first to abort ends the job, and the other may be
# gone before it prints: at least one names its op, and every op named is right.
b0="deadlock.plan:$l0: note: rank 0 blocked in step 1 at 'SEND act e=0 m=1 to=1"
b1="deadlock.plan:$l1: note: rank 1 blocked in step 1 at 'SEND grad e=0 m=0 to=0"
grep -q -e "$b0" -e "$b1" "$dir/err"
check "watchdog names a rank's blocked send" $? "neither blocked send named"
grep "blocked in step" "$dir/err" | grep -v -e "$b0" -e "$b1" >"$dir/wrong"
check "every blocked op the watchdog names is the right one" "$([ -s "$dir/wrong" ]; echo $((1 - $?)))" \
	"$(cat "$dir/wrong")"
# The failing processes exit 1 instead of calling MPI_Abort, whose help message mpirun
# could receive cut short (runtime/launch_mpi.c): nothing garbled from Open MPI.
no_orte() {
	! grep -q "ORTE_ERROR_LOG" "$dir/err"
	check "$1: no ORTE_ERROR_LOG from mpirun" $? "$(grep -m1 ORTE_ERROR_LOG "$dir/err")"
}
no_orte "deadlock"

# A rank stuck in a kernel (PIPERUN_FAULT, runtime/fault.c: rank 1 sleeps for good in
# its first forward op): rank 0's watchdog ends the job, the stuck process with it.
t "a rank stuck in its compute op ends by the watchdog" nonzero env \
	PIPERUN_FAULT=stall:rank=1:op=1 timeout 60 $MPIRUN -x PIPERUN_FAULT -np 2 "$BIN/piperun" \
	"$dir/tiny.plan" --timeout 2
has "stuck rank: the watchdog names rank 0's send to it" "$dir/err" \
	"tiny.plan:[0-9]*: note: rank 0 blocked in step 1 at 'SEND act e=0 m=1 to=1"
no_orte "stuck rank"
sleep 0.5
left=$(pgrep -f -- "piperun $dir/tiny.plan")
[ -z "$left" ]
check "stuck rank: no piperun process of the job remains" $? "left: $left"
[ -n "$left" ] && kill -9 $left


# Chaos: one rank of a long run is stopped (SIGSTOP) or killed (SIGKILL) mid-run.  The
# job must end within the watchdog time plus the launcher's grace second, with a non-zero
# status, no piperun process of the job left alive, our watchdog message and no
# ORTE_ERROR_LOG line (docs/runtime.md).  The plan: pp=4, 64 mbs.
{
	printf 'pipeline chaos;\nmesh pp=4;\nmicrobatches 64;\ninput 2x4;\n'
	printf 'stage s0 { linear 4; }\nstage s1 { linear 4; }\nstage s2 { linear 4; }\n'
	printf 'stage s3 { linear 4; loss mse; }\nschedule 1f1b;\ncost * f=1 b=1 w=1;\nlink ideal;\n'
} >"$dir/chaos.pipe"
"$BIN/pipecc" "$dir/chaos.pipe" -o "$dir/chaos.plan" || fails=$((fails + 1))
# The third run stops a rank under `mpirun -q` (Open MPI's own banners off): what is
# left on stderr is piperun's report only.  In the fourth, process 2 is stuck before
# it opens the world (PIPERUN_FAULT=stall-open, runtime/fault.c) while the others wait
# in MPI_Init: their start guard ends the job (5 x the timeout, at least 10 s).
for sig in STOP KILL STOP-q OPEN; do
	q= fault= label=SIG$sig
	[ "$sig" = STOP-q ] && sig=STOP q=-q
	[ "$sig" = OPEN ] && fault=stall-open:rank=2 label="stuck while starting"
	env ${fault:+PIPERUN_FAULT=$fault} $MPIRUN $q -np 4 "$BIN/piperun" "$dir/chaos.plan" \
		--steps 1000000 --timeout 2 >"$dir/out" 2>"$dir/err" &
	mp=$!
	n=0 # until all four ranks are up
	while [ "$(pgrep -f -- "^$BIN/piperun $dir/chaos.plan" | wc -l)" -lt 4 ] && [ "$n" -lt 200 ]; do
		sleep 0.1
		n=$((n + 1))
	done
	sleep 1
	victim=$(pgrep -f -- "^$BIN/piperun $dir/chaos.plan" | tail -1)
	[ -n "$victim" ] && [ -z "$fault" ] && kill -"$sig" "$victim"
	# The bound: 2 s watchdog + 1 s grace + start-up slack; a hang fails here.
	n=0
	while kill -0 "$mp" 2>/dev/null && [ "$n" -lt 200 ]; do
		sleep 0.1
		n=$((n + 1))
	done
	if kill -0 "$mp" 2>/dev/null; then
		check "$label: mpirun ends within 20 s" 1 "still running"
		kill -9 "$mp"
	else
		check "$label: mpirun ends within 20 s" 0 ""
	fi
	wait "$mp"
	rc=$?
	[ "$rc" -ne 0 ]
	check "$label: mpirun exits non-zero" $? "exit $rc"
	sleep 0.5
	left=$(pgrep -f -- "piperun $dir/chaos.plan")
	[ -z "$left" ]
	check "$label: no piperun process of the job remains" $? "left: $left"
	[ -n "$left" ] && kill -9 $left
	if [ -n "$fault" ]; then
		has "$label: the start guard says why" "$dir/err" \
			"error: .*: opening the job took longer than 10 s"
	elif [ "$sig" = STOP ]; then # on a loaded machine the stop may land while starting
		has "$label: the watchdog says why" "$dir/err" \
			"error: no rank made progress for 2 s\|opening the job took longer than 10 s"
	fi
	no_orte "$label"
	if [ -n "$q" ]; then
		grep -v -e "^piperun: " -e "^$dir/chaos.plan:[0-9]*: note: " "$dir/err" >"$dir/other"
		check "SIG$sig mpirun $q: stderr is piperun's report only" \
			"$([ -s "$dir/other" ]; echo $((1 - $?)))" "$(head -3 "$dir/other")"
	fi
done

[ "$fails" -eq 0 ]
