#!/bin/sh
# Sequence parallelism trained by piperun (`mesh ... tp=2 sp`, docs/runtime.md "Sequence
# parallelism"): --check passes on threads and under mpirun for a small GPT (1f1b and
# zbh2), with dropout, in bf16, with AdamW's distributed optimizer, with a replicated
# linear, a Llama-style model (rmsnorm, rotary grouped-query flash attention, swiglu), a
# tied head under zbv, a skip edge and selective recomputation at tp=4; the first step's
# loss equals the same plan's without sp to the bit (the forward makes the same sums:
# dropout masks keyed by global position, the reduce-scatter summing in the all-reduce's
# order) and the printed losses of four steps agree; every rank's measured memory equals
# pipesim's, class by class (on threads, and under mpirun), and is below the plan's
# without sp; a checkpoint resumes to the bit, and into the plan without sp; what
# piperun does not run with sp is refused.
: "${BIN:=bin}"
TOOL=sp-run
. tests/lib/cli.sh

small_gpt sp_tiny "pp=2 dp=2 tp=2 sp" 2 >"$dir/gpt.pipe"
# variant NAME SED: gpt.pipe edited by SED into NAME.pipe
variant() {
	sed "$2" "$dir/gpt.pipe" >"$dir/$1.pipe"
}
cp "$dir/gpt.pipe" "$dir/base.pipe"
variant zbh2 's/schedule 1f1b;/schedule zbh2;/'
variant drop 's/heads=4 bias;/heads=4 bias dropout=0.1;/; s/mlp 64 bias; }/mlp 64 bias; dropout 0.1; }/'
variant bf16 's/schedule 1f1b;/precision bf16;\nschedule 1f1b;/'
variant dist 's/schedule 1f1b;/optimizer adamw lr=0.01 distributed;\nschedule 1f1b;/'
variant lin 's/stage s0 { embed 32 positions; gpt; }/stage s0 { embed 32 positions; linear 32; gelu; gpt; }/'
variant skip 's/mesh pp=2 dp=2 tp=2 sp;/mesh pp=4 tp=2 sp;/; s/^stage s0 { embed 32 positions; gpt; }$/&\nstage sa { gpt; }\nstage sb { gpt; }/; s/schedule 1f1b;/skip s0 -> sb;\nschedule 1f1b;/'
small_llama llama_sp "pp=2 tp=2 sp" "rope flash" >"$dir/llama.pipe"
sed 's/mesh pp=2 tp=2 sp;/mesh pp=1 tp=2 sp;/; s/head;/head tied;/; s/schedule zbh1;/schedule zbv;/' \
	"$dir/llama.pipe" >"$dir/tied.pipe"
sed 's/mesh pp=2 tp=2 sp;/mesh pp=1 tp=4 sp;/; s/kv_heads=2 rope flash;/kv_heads=4 rope dropout=0.1;/;
	s/^stage s0 { embed 32; layer; }$//; s/stage s1 { layer;/stage s1 { embed 32; layer; layer;/;
	s/schedule zbh1;/recompute s1 selective;\nschedule 1f1b;/' "$dir/llama.pipe" >"$dir/sel4.pipe"

plans="base zbh2 drop bf16 dist lin skip llama tied sel4"
for b in $plans; do
	t "$b compiles with sp" 0 "$BIN/pipecc" "$dir/$b.pipe" -o "$dir/$b.plan"
	has "$b's plan says sp" "$dir/$b.plan" "^mesh .* sp$"
	runs "$b with sp" "$dir/$b.plan"
done

# the first step's loss equals the plan's without sp to the bit (--json prints 9
# significant digits: an f32 exactly); four steps' printed losses agree
for b in base drop bf16 dist; do
	sed 's/ sp;/;/' "$dir/$b.pipe" >"$dir/$b-nosp.pipe"
	"$BIN/pipecc" "$dir/$b-nosp.pipe" -o "$dir/$b-nosp.plan"
	for v in "$b" "$b-nosp"; do
		"$BIN/piperun" "$dir/$v.plan" --steps 4 --json >"$dir/$v.json" 2>/dev/null
		"$BIN/piperun" "$dir/$v.plan" --steps 4 | grep '^step' | sed 's/ time.*//' >"$dir/$v.loss"
	done
	a=$(grep -o '"loss": [-0-9.e]*' "$dir/$b.json" | head -1)
	n=$(grep -o '"loss": [-0-9.e]*' "$dir/$b-nosp.json" | head -1)
	check "$b: step 1's loss with sp equals without, to the bit" \
		"$([ -n "$a" ] && [ "$a" = "$n" ]; echo $?)" "sp $a, without $n"
	check "$b: four steps' printed losses with sp equal those without" \
		"$([ "$(wc -l <"$dir/$b.loss")" -eq 4 ] && cmp -s "$dir/$b.loss" "$dir/$b-nosp.loss"; echo $?)" \
		"$(tr '\n' ' ' <"$dir/$b.loss") vs $(tr '\n' ' ' <"$dir/$b-nosp.loss")"
done

# the SPREDUCE (docs/semantics.md "Tensor parallelism"): each stage's replicated layers'
# gradients, its layernorms' (2 x 64 parameters on s0, 3 x 64 on s1, f32 also in bf16),
# summed over the tp group right after the dp all-reduce and before OPTIM; none without
# sp; pipesim's timeline times it, rank 0's ending the step
for b in base bf16; do
	has "$b sums s0's layernorm gradients over tp after the dp all-reduce" "$dir/$b.plan" \
		"^SPREDUCE s=0 bytes=512 g="
	has "$b sums s1's likewise" "$dir/$b.plan" "^SPREDUCE s=1 bytes=768 g="
	grep -A2 '^ALLREDUCE s=0 ' "$dir/$b.plan" | tr '\n' ' ' >"$dir/order"
	has "$b: ALLREDUCE, SPREDUCE, OPTIM in that order" "$dir/order" \
		"^ALLREDUCE s=0 [^@]*@[0-9]* SPREDUCE s=0 [^@]*@[0-9]* OPTIM s=0"
done
check "without sp there is no SPREDUCE" "$(grep -c '^SPREDUCE' "$dir/base-nosp.plan")" \
	"$(grep '^SPREDUCE' "$dir/base-nosp.plan" | head -2)"
"$BIN/pipesim" "$dir/base.plan" -q --trace "$dir/trace.json"
"$BIN/pipesim" "$dir/base.plan" --json >"$dir/simj.json"
span=$(grep -o '"makespan": [0-9.]*' "$dir/simj.json" | sed 's/.*: //')
end=$(grep -o '"name": "SPREDUCE", "cat": "comm", "ts": [0-9.]*, "dur": [0-9.]*' "$dir/trace.json" |
	sed 's/.*"ts": \([0-9.]*\), "dur": \([0-9.]*\)/\1 \2/' | awk '$2 > 0 { e = $1 + $2; if (e > m) m = e } END { printf "%.3f", m }')
check "pipesim times the SPREDUCE, the last one ending the step ($span us)" \
	"$([ -n "$span" ] && [ "$end" = "$(printf %.3f "$span")" ]; echo $?)" "SPREDUCEs end at $end"
# measured memory == pipesim's, every rank, every class; below the plan's without sp
fields="peak_total_bytes inflight_bytes_at_peak saved_bytes_at_peak peak_op param_bytes
	grad_bytes optim_state_bytes peak_act_bytes=peak_activation_bytes"
for b in $plans; do
	# f32 master weights: only a bf16 plan keeps them, and only then do the tools report them
	m=""
	grep -q "^precision bf16;" "$dir/$b.pipe" && m=master_bytes
	mem_same "$b, every rank, class by class" "$dir/$b.plan" "$fields $m"
done
"$BIN/piperun" "$dir/base.plan" --json --steps 1 >"$dir/sp.json"
"$BIN/piperun" "$dir/base-nosp.plan" --json --steps 1 >"$dir/nosp.json"
a=$(grep -o '"peak_act_bytes": [0-9]*' "$dir/sp.json" | head -1 | sed 's/.*: //')
n=$(grep -o '"peak_act_bytes": [0-9]*' "$dir/nosp.json" | head -1 | sed 's/.*: //')
check "sp keeps fewer activation bytes on rank 0 than the plan without" \
	"$([ -n "$a" ] && [ -n "$n" ] && [ "$a" -lt "$n" ]; echo $?)" "sp $a, without $n"

# checkpoints: an sp run resumed from its step-2 checkpoint gives the uninterrupted run's
# losses to the bit; the plan without sp (the same shards) resumes from it too
"$BIN/piperun" "$dir/base.plan" --steps 4 --json 2>/dev/null | grep -o '"loss": [-0-9.e]*' |
	tail -2 >"$dir/whole.loss"
t "an sp run saves a checkpoint" 0 "$BIN/piperun" "$dir/base.plan" --steps 2 --save "$dir/ck"
"$BIN/piperun" "$dir/base.plan" --steps 2 --resume "$dir/ck" --json 2>/dev/null |
	grep -o '"loss": [-0-9.e]*' >"$dir/resumed.loss"
check "resumed, it gives the uninterrupted run's losses to the bit" \
	"$([ "$(wc -l <"$dir/whole.loss")" -eq 2 ] && cmp -s "$dir/whole.loss" "$dir/resumed.loss"; echo $?)" \
	"$(tr '\n' ' ' <"$dir/whole.loss") vs $(tr '\n' ' ' <"$dir/resumed.loss")"
t "the plan without sp resumes from it" 0 "$BIN/piperun" "$dir/base-nosp.plan" --steps 2 \
	--resume "$dir/ck"
grep '^step' "$dir/out" | sed 's/ time.*//' >"$dir/nosp.loss"
check "and prints the sp run's losses of steps 3 and 4" \
	"$([ "$(wc -l <"$dir/nosp.loss")" -eq 2 ] && tail -2 "$dir/base.loss" | cmp -s - "$dir/nosp.loss"; echo $?)" \
	"$(tr '\n' ' ' <"$dir/nosp.loss")"

# examples/gpt-tp.pipe with sp
sed 's/mesh pp=2 dp=2 tp=2;/mesh pp=2 dp=2 tp=2 sp;/' examples/gpt-tp.pipe >"$dir/gpt-tp.pipe"
t "gpt-tp with sp compiles" 0 "$BIN/pipecc" "$dir/gpt-tp.pipe" -o "$dir/gpt-tp.plan"
runs "examples/gpt-tp.pipe with sp" "$dir/gpt-tp.plan"

# under mpirun: the reduce-scatter and all-gather of MPI
mpi_check "sp under mpirun -np 8" 8 "$dir/base.plan"
mpi_check "sp with dropout under mpirun -np 8" 8 "$dir/drop.plan"
mpi_check "sp in bf16 under mpirun -np 8" 8 "$dir/bf16.plan"
mpi_check "sp llama-style under mpirun -np 4" 4 "$dir/llama.plan"
case $BIN in *san*) mpi=0 ;; *) mpi=1 ;; esac
if [ "$mpi" = 1 ] && command -v mpirun >/dev/null 2>&1 && "$BIN/piperun" --version | grep -q mpi; then
	timeout 300 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 8 \
		"$BIN/piperun" "$dir/drop.plan" --json --steps 1 >"$dir/run.json" 2>/dev/null
	"$BIN/pipesim" --expand --json "$dir/drop.plan" >"$dir/sim.json"
	for f in peak_total_bytes inflight_bytes_at_peak saved_bytes_at_peak peak_op; do
		got=$(grep -o "\"$f\": -*[0-9]*" "$dir/run.json" | tr '\n' ' ')
		want=$(grep -o "\"$f\": -*[0-9]*" "$dir/sim.json" | tr '\n' ' ')
		[ -n "$got" ] && [ "$got" = "$want" ] || echo "$f: measured $got, predicted $want"
	done >"$dir/bad"
	check "under mpirun -np 8 every rank's memory equals pipesim's" \
		"$([ ! -s "$dir/bad" ]; echo $?)" "$(cat "$dir/bad")"
fi

# refused with the reason: a matrix input; the cuda device
sed 's/mesh pp=4 dp=2; .*/mesh pp=4 tp=2 sp;/' examples/mlp4.pipe >"$dir/mlp.pipe"
t "mlp4 with sp compiles" 0 "$BIN/pipecc" "$dir/mlp.pipe" -o "$dir/mlp.plan"
t "sp on a matrix input is refused" 1 "$BIN/piperun" "$dir/mlp.plan" --steps 1
has "the refusal says why" "$dir/err" "cannot run this tp=2 plan on the threads backend: sequence parallelism on a matrix input"
if "$BIN/piperun" --version | grep -q cuda; then
	t "sp on the cuda device is refused" 1 "$BIN/piperun" "$dir/base.plan" --backend cuda --steps 1
	has "the cuda refusal says why" "$dir/err" "on the cuda backend: sequence parallelism (its device does not split the sequence yet)"
fi

[ "$fails" -eq 0 ]
