#!/bin/sh
# The distributed optimizer (`optimizer ... distributed`, docs/semantics.md "Data flow"):
# each dp replica steps its shard of every stage between a REDUCESCATTER of the
# gradients and an ALLGATHER of the parameters.  On threads the shared-memory
# reduce-scatter sums each element in member order, as its all-reduce does, so a run
# gives the all-reduce plan's losses to the bit for every optimizer; --check agrees with
# the sequential run on threads (shards of uneven length, dp=3; a tied table; tp=2) and
# under mpirun; each rank measures the optimizer state of its shard alone, as pipesim
# predicts.
: "${BIN:=bin}"
TOOL=distopt
. tests/lib/cli.sh

for opt in "sgd lr=0.05" "momentum lr=0.01" "adamw lr=1e-3"; do
	k=${opt%% *}
	sed "s/^schedule .*/optimizer $opt;\n&/" examples/mlp4.pipe >"$dir/$k.pipe"
	sed "s/^schedule .*/optimizer $opt distributed;\n&/" examples/mlp4.pipe >"$dir/$k-d.pipe"
	t "$k: compiles" 0 "$BIN/pipecc" "$dir/$k.pipe" -o "$dir/$k.plan"
	t "$k distributed: compiles" 0 "$BIN/pipecc" "$dir/$k-d.pipe" -o "$dir/$k-d.plan"
	has "$k distributed: reduce-scatters" "$dir/$k-d.plan" "^REDUCESCATTER s=0 bytes=2101248 "
	has "$k distributed: all-gathers" "$dir/$k-d.plan" "^ALLGATHER s=0 bytes=2101248 "
	t "$k: runs" 0 "$BIN/piperun" "$dir/$k.plan" --steps 3 --json
	a=$(json_steps)
	t "$k distributed: runs" 0 "$BIN/piperun" "$dir/$k-d.plan" --steps 3 --json
	b=$(json_steps)
	cp "$dir/out" "$dir/run.json"
	check "$k: distributed, the same losses to the bit" "$([ -n "$a" ] && [ "$a" = "$b" ]; echo $?)" \
		"$a / $b"
	"$BIN/pipesim" --expand --json "$dir/$k-d.plan" >"$dir/sim.json"
	for f in optim_state_bytes peak_total_bytes; do
		got=$(figs "$dir/run.json" $f) want=$(figs "$dir/sim.json" $f)
		check "$k distributed: $f measured == predicted" \
			"$([ -n "$got" ] && [ "$got" = "$want" ]; echo $?)" "$got / $want"
	done
	runs "$k distributed" "$dir/$k-d.plan"
done
# AdamW's state on a rank: its stage's parameters, halved (dp=2), two f32 moments each
got=$(figs "$dir/run.json" optim_state_bytes | cut -d' ' -f1)
check "adamw distributed: rank 0 keeps half the state" "$([ "$got" = 2101248 ]; echo $?)" "$got"

# shards of uneven length: 7 x 5 + 5 = 40 and 5 x 3 + 3 = 18 parameters over dp=3 (14,
# 14, 12 and 6, 6, 6)
cat >"$dir/odd.pipe" <<EOP
pipeline odd;
mesh pp=2 dp=3;
microbatches 4;
input 4x7;
stage s0 { linear 5; relu; }
stage s1 { linear 3; loss mse; }
schedule 1f1b;
optimizer adamw lr=1e-2 distributed;
EOP
t "uneven shards: compiles" 0 "$BIN/pipecc" "$dir/odd.pipe" -o "$dir/odd.plan"
runs "uneven shards over dp=3" "$dir/odd.plan" --steps 4
t "uneven shards: pipesim" 0 "$BIN/pipesim" --json "$dir/odd.plan"
has "uneven shards: ceil(40 / 3) x 8 bytes of AdamW state" "$dir/out" '"optim_state_bytes": 112,'

# a tied table across pipeline ranks (its TIEREDUCE, then the stage's reduce-scatter),
# zbv's two stages a rank, tp=2
sed 's/^mesh pp=4;/mesh pp=4 dp=2;/; s/ head;/ head tied;/; s/^schedule .*/optimizer adamw lr=1e-3 distributed;\n&/' \
	examples/gpt-tiny.pipe >"$dir/gpt.pipe"
t "gpt-tiny dp=2: compiles" 0 "$BIN/pipecc" "$dir/gpt.pipe" -o "$dir/gpt.plan"
runs "gpt-tiny dp=2 distributed" "$dir/gpt.plan"
sed 's/^schedule .*/optimizer adamw lr=1e-3 distributed;\n&/' examples/zbv.pipe >"$dir/zbv.pipe"
t "zbv: compiles" 0 "$BIN/pipecc" "$dir/zbv.pipe" -o "$dir/zbv.plan"
runs "zbv distributed" "$dir/zbv.plan"
sed 's/^schedule .*/optimizer momentum lr=1e-2 distributed;\n&/' examples/gpt-tp.pipe >"$dir/tp.pipe"
t "gpt-tp: compiles" 0 "$BIN/pipecc" "$dir/tp.pipe" -o "$dir/tp.plan"
runs "gpt-tp (tp=2 dp=2) distributed" "$dir/tp.plan"

mpi_check "adamw distributed under mpirun -np 8" 8 "$dir/adamw-d.plan"
mpi_check "uneven shards under mpirun -np 6" 6 "$dir/odd.plan"

[ "$fails" -eq 0 ]
