#!/bin/sh
# Optional, not part of `make check`: a single-node Slurm on localhost (Debian's
# slurm-wlm: slurmctld + slurmd, started here as root with a throw-away configuration in
# a temporary folder, no munge: auth/none), then piperun launched by srun through Open
# MPI's PMIx support:
#     srun --mpi=pmix -n 4 --overcommit bin/piperun PLAN --check
# on a pp=4 plan of four small stages.  Prints "testing X ... passed" lines
# like the CLI tests; exits 0 when every check passed, 77 (skipped) without slurm-wlm,
# root or the MPI backend, 1 otherwise.  The daemons are stopped and the folder removed
# at the end, whatever happened.  Ports: SLURM_TEST_PORT (default 16817) and the next.
#     apt-get install -y --no-install-recommends slurm-wlm   # then:
#     sh tests/slurm/run.sh
: "${BIN:=bin}"
TOOL=slurm
. tests/lib/cli.sh
for c in slurmctld slurmd srun scontrol; do
	if ! command -v "$c" >/dev/null 2>&1; then
		echo "testing slurm ... skipped: $c not found (apt-get install slurm-wlm)"
		exit 77
	fi
done
if [ "$(id -u)" -ne 0 ]; then
	echo "testing slurm ... skipped: the daemons are started as root"
	exit 77
fi
if ! "$BIN/piperun" --version | grep -q mpi; then
	echo "testing slurm ... skipped: piperun was built without MPI"
	exit 77
fi
port=${SLURM_TEST_PORT:-16817}
host=$(hostname -s)
cpus=$(nproc)
s=$dir/slurm
mkdir -p "$s/state" "$s/spool" "$s/log"
cat >"$s/slurm.conf" <<CONF
ClusterName=pipecc
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.pid
SlurmctldLogFile=$s/log/slurmctld.log
SlurmdLogFile=$s/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF="$s/slurm.conf"
stop() {
	[ -f "$s/slurmd.pid" ] && kill "$(cat "$s/slurmd.pid")" 2>/dev/null
	[ -f "$s/slurmctld.pid" ] && kill "$(cat "$s/slurmctld.pid")" 2>/dev/null
	sleep 1
	rm -rf "$dir"
}
trap stop EXIT
slurmctld -i 2>"$s/log/ctld.err"
slurmd 2>"$s/log/d.err"

# Up: the node answers idle within 30 s.
n=0
until sinfo -h -N -o %t 2>/dev/null | grep -q idle || [ "$n" -ge 60 ]; do
	sleep 0.5
	n=$((n + 1))
done
sinfo -h -N -o %t 2>/dev/null | grep -q idle
check "slurmctld and slurmd up, the node idle" $? "$(sinfo -N 2>&1 | tail -2; tail -5 "$s/log/slurmctld.log" "$s/log/slurmd.log" 2>/dev/null)"

{
	printf 'pipeline four;\nmesh pp=4;\nmicrobatches 8;\ninput 8x16;\n'
	printf 'stage s0 { linear 16; relu; }\nstage s1 { linear 16; relu; }\n'
	printf 'stage s2 { linear 16; relu; }\nstage s3 { linear 16; loss mse; }\n'
	printf 'schedule 1f1b;\n'
} >"$dir/four.pipe"
"$BIN/pipecc" "$dir/four.pipe" -o "$dir/four.plan" || fails=$((fails + 1))
t "srun --mpi=pmix -n 4 piperun --check" 0 timeout 120 srun --mpi=pmix -n 4 --overcommit \
	"$BIN/piperun" "$dir/four.plan" --check
has "srun: the backend is mpi, 4 ranks" "$dir/out" "4 ranks, .* on mpi, "
has "srun: --check agrees" "$dir/out" "check.*ok"
# A rank stuck in an op (PIPERUN_FAULT, runtime/fault.c): the other ranks' watchdogs
# report and exit 1; srun -K ends the step at the first non-zero exit.
t "srun -K: a stuck rank ends by the watchdog" nonzero env PIPERUN_FAULT=stall:rank=1:op=1 \
	timeout 60 srun --mpi=pmix -n 4 --overcommit -K "$BIN/piperun" "$dir/four.plan" \
	--timeout 2
has "srun: the watchdog says why" "$dir/err" "error: no rank made progress for 2 s"
# Without -K too: the processes that exit without MPI_Finalize make Slurm's PMIx plugin
# cancel the step ("Job step aborted: Waiting up to 32 seconds"), the stuck one with it.
t "srun: a stuck rank ends by the watchdog without -K too" nonzero env \
	PIPERUN_FAULT=stall:rank=1:op=1 timeout 60 srun --mpi=pmix -n 4 --overcommit \
	"$BIN/piperun" "$dir/four.plan" --timeout 2
has "srun without -K: Slurm cancels the step" "$dir/err" "STEP .* CANCELLED"
[ -n "$SLURM_TEST_SHOW" ] && cat "$dir/out" "$dir/err"
[ "$fails" -eq 0 ]
