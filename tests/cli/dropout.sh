#!/bin/sh
# Dropout end to end: gpt-tiny with GPT-2's dropouts (after the embedding, after
# attention and the MLP, and attention's dropout=0.1 on its probabilities) compiles to
# the layer lines docs/plan-format.md gives; a bad probability is a located error;
# piperun --check gives the sequential reference's losses and weights (the same masks,
# drawn from the seed) under a plain, a zero-bubble and a V schedule, full and selective
# recomputation, tp=2 with dp=2, and under mpirun; the same seed gives the same losses,
# another seed others.  tests/cli/memory.sh holds measured memory to pipesim's.
: "${BIN:=bin}"
TOOL=dropout
. tests/lib/cli.sh

# gpt-tiny or gpt-tp ($1) with the dropouts, into $2
with_dropout() {
	sed 's/embed 128 positions;/embed 128 positions; dropout 0.1;/
	     s/attention heads=4 bias;/attention heads=4 bias dropout=0.1; dropout 0.1;/
	     s/mlp 512 bias;/mlp 512 bias; dropout 0.1;/' "$1" >"$2"
}
with_dropout examples/gpt-tiny.pipe "$dir/d.pipe"

t "--list-layers names dropout" 0 "$BIN/pipecc" --list-layers
has "--list-layers has 'dropout 0.1'" "$dir/out" "^dropout 0.1$"
t "compiles gpt-tiny with dropouts" 0 "$BIN/pipecc" "$dir/d.pipe" -o "$dir/d.plan"
has "a dropout layer line" "$dir/d.plan" "^layer dropout 128 128 p=0.1$"
has "an attention's dropout=" "$dir/d.plan" "^layer attention 128 128 heads=4 kv_heads=4 bias dropout=0.1$"

sed 's/dropout 0.1;/dropout 1;/' "$dir/d.pipe" >"$dir/bad.pipe"
t "dropout 1 is refused" 1 "$BIN/pipecc" "$dir/bad.pipe" -o "$dir/bad.plan"
has "... at its place" "$dir/err" "bad.pipe:15:[0-9]*: error: 'dropout' probability must be in \[0, 1), got 1"

runs "gpt-tiny 1f1b" "$dir/d.plan"
t "zbh2" 0 "$BIN/pipecc" "$dir/d.pipe" -s zbh2 -o "$dir/zbh2.plan"
runs "gpt-tiny zbh2 (B and W apart)" "$dir/zbh2.plan"
sed 's/mesh pp=4;/mesh pp=2;/' "$dir/d.pipe" >"$dir/v.pipe"
t "zbv" 0 "$BIN/pipecc" "$dir/v.pipe" -s zbv -o "$dir/zbv.plan"
runs "gpt-tiny zbv" "$dir/zbv.plan"
for mode in full selective; do
	printf 'recompute * %s;\n' $mode | cat "$dir/d.pipe" - >"$dir/$mode.pipe"
	t "recompute $mode" 0 "$BIN/pipecc" "$dir/$mode.pipe" -o "$dir/$mode.plan"
	runs "gpt-tiny, recompute $mode" "$dir/$mode.plan"
done
# selective recomputation drops P, its mask and dropped copy: 4 x 4 x 64 x 64 x (4 + 1 + 4)
has "selective rebuilds P, mask and dropped P" "$dir/selective.plan" " recompute selective save_re=589824 "
with_dropout examples/gpt-tp.pipe "$dir/tp.pipe"
t "compiles gpt-tp with dropouts" 0 "$BIN/pipecc" "$dir/tp.pipe" -o "$dir/tp.plan"
runs "gpt-tp (tp=2 dp=2)" "$dir/tp.plan"

# the same seed, the same losses; another seed, others
t "seed 3" 0 "$BIN/piperun" "$dir/d.plan" --steps 2 --seed 3 --json
a=$(json_steps)
t "seed 3 again" 0 "$BIN/piperun" "$dir/d.plan" --steps 2 --seed 3 --json
b=$(json_steps)
t "seed 4" 0 "$BIN/piperun" "$dir/d.plan" --steps 2 --seed 4 --json
c=$(json_steps)
check "the same seed, the same losses" "$([ -n "$a" ] && [ "$a" = "$b" ]; echo $?)" "$a / $b"
check "another seed, other losses" "$([ -n "$c" ] && [ "$a" != "$c" ]; echo $?)" "$a / $c"

mpi_check "--check gpt-tiny with dropouts under mpirun -np 4" 4 "$dir/d.plan"

[ "$fails" -eq 0 ]
