#!/bin/sh
# bf16 mixed precision run on the cpu (docs/runtime.md "Precision"): bf16 parameters
# rounded from f32 master weights after each step, bf16 activations, saved tensors and
# messages, f32 gradients, optimizer state and statistics.  --check agrees with the
# sequential run (which rounds at the same points) to the bit where tp = 1, within the
# bound at tp = 2, on threads and under mpirun; every rank's memory, by class (master
# weights too), is what pipesim predicts; the losses are near the f32 run's but not
# equal to them; tf32 is refused.
: "${BIN:=bin}"
TOOL=bf16
. tests/lib/cli.sh

# every class of memory, measured and predicted
fields="peak_total_bytes param_bytes grad_bytes optim_state_bytes master_bytes
	saved_bytes_at_peak inflight_bytes_at_peak peak_op"

bf16='s/^schedule .*/precision bf16;\noptimizer adamw lr=1e-3;\n&/'
drop='s/embed 128 positions;/& dropout 0.1;/; s/mlp 512 bias;/& dropout 0.1;/
      s/attention heads=4 bias;/attention heads=4 bias dropout=0.1; dropout 0.1;/'
sed "$bf16" examples/gpt-tiny.pipe >"$dir/gpt.pipe"
sed 's/^schedule .*/optimizer adamw lr=1e-3;\n&/' examples/gpt-tiny.pipe >"$dir/gpt32.pipe"
sed "$drop
     s/attention heads=4 bias/& flash/
     $bf16" examples/gpt-tiny.pipe >"$dir/flash.pipe"
sed "$drop
     $bf16" examples/gpt-tiny.pipe | sed 's/^schedule .*/recompute * selective;\n&/' >"$dir/selective.pipe"
sed "$bf16" examples/gpt-tiny.pipe | sed 's/^schedule .*/recompute * full;\n&/' >"$dir/full.pipe"
sed "$bf16" examples/gpt-tp.pipe >"$dir/tp.pipe"
sed 's/^schedule .*/precision bf16;\noptimizer momentum lr=1e-2 distributed;\n&/' \
	examples/mlp4.pipe >"$dir/mlp4.pipe"
sed "$bf16" examples/zbv.pipe >"$dir/zbv.pipe"
for n in gpt32 gpt flash selective full tp mlp4 zbv; do
	t "$n: compiles" 0 "$BIN/pipecc" "$dir/$n.pipe" -o "$dir/$n.plan"
done
has "selective: a bf16 plan" "$dir/selective.plan" "^precision bf16$"
has "selective: recomputes" "$dir/selective.plan" " recompute selective "
has "full: a bf16 plan" "$dir/full.plan" "^precision bf16$"
has "full: recomputes" "$dir/full.plan" " recompute save_re="
has "flash: a bf16 plan" "$dir/flash.plan" "^precision bf16$"
for n in gpt flash selective full mlp4 zbv; do
	runs "$n in bf16" "$dir/$n.plan"
	has "$n in bf16: to the bit" "$dir/out" "^check: loss max abs err 0 rel 0; weights max abs err 0 rel 0"
	mem_same "$n in bf16" "$dir/$n.plan" "$fields"
done
runs "gpt-tp (tp=2) in bf16" "$dir/tp.plan"
mem_same "gpt-tp (tp=2) in bf16" "$dir/tp.plan" "$fields"
has "master weights are a class of their own" "$dir/run.json" '"master_bytes": [1-9]'

# near f32, not equal: the rounding happened
loss() { sed -n 's/^step 4: loss \([0-9.]*\) .*/\1/p' "$dir/out"; }
t "f32 run" 0 "$BIN/piperun" "$dir/gpt32.plan" --steps 4
a=$(loss)
t "bf16 run" 0 "$BIN/piperun" "$dir/gpt.plan" --steps 4
b=$(loss)
check "bf16's step-4 loss differs from f32's" "$([ -n "$a" ] && [ "$a" != "$b" ]; echo $?)" "$a / $b"
check "... by less than 1e-3 relative" \
	"$(awk -v a="$a" -v b="$b" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d; print (a > 0 && d < 1e-3) ? 0 : 1 }')" \
	"$a / $b"

# a checkpoint keeps the f32 master weights: resuming gives the run that never stopped
t "4 steps" 0 "$BIN/piperun" "$dir/gpt.plan" --steps 4
grep '^step [34]:' "$dir/out" | sed 's/ time .*//' >"$dir/whole"
t "2 steps, saved" 0 "$BIN/piperun" "$dir/gpt.plan" --steps 2 --save "$dir/ck"
t "2 more, resumed" 0 "$BIN/piperun" "$dir/gpt.plan" --steps 2 --resume "$dir/ck"
grep '^step [34]:' "$dir/out" | sed 's/ time .*//' >"$dir/resumed"
check "bf16: resumed, steps 3 and 4 to the bit" \
	"$([ -s "$dir/whole" ] && cmp -s "$dir/whole" "$dir/resumed"; echo $?)" \
	"$(cat "$dir/whole" "$dir/resumed" | tr '\n' ' ')"

sed 's/^precision bf16;/precision tf32;/' "$dir/gpt.pipe" >"$dir/tf32.pipe"
t "tf32: compiles" 0 "$BIN/pipecc" "$dir/tf32.pipe" -o "$dir/tf32.plan"
t "tf32: piperun refuses it" 1 "$BIN/piperun" "$dir/tf32.plan"
has "... saying what it runs" "$dir/err" "piperun runs f32 and bf16 plans, and this plan's precision is tf32"

mpi_check "gpt-tiny in bf16 under mpirun -np 4" 4 "$dir/gpt.plan"
mpi_check "mlp4, bf16 and the distributed optimizer, under mpirun -np 8" 8 "$dir/mlp4.plan"

[ "$fails" -eq 0 ]
