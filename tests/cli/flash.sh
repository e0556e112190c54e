#!/bin/sh
# Flash attention end to end: gpt-tiny with `flash` (and attention's dropout=0.1)
# compiles to the attention line docs/plan-format.md gives and keeps the rows'
# log-sum-exp in place of the S x S tensors; `flash=1` is a located error; selective
# recomputation over flash attention is warned about at its statement (it rebuilds
# nothing); piperun --check gives the sequential reference's losses and weights under a
# plain and a zero-bubble schedule, full and selective recomputation, tp=2 with dp=2,
# and under mpirun.  tests/cli/memory.sh holds measured memory to pipesim's.
: "${BIN:=bin}"
TOOL=flash
. tests/lib/cli.sh

# gpt-tiny or gpt-tp ($1) with flash attention and its dropout ($3: empty or
# " dropout=0.1"), into $2
with_flash() {
	sed "s/attention heads=4 bias;/attention heads=4 bias flash$3;/" "$1" >"$2"
}
with_flash examples/gpt-tiny.pipe "$dir/f.pipe" " dropout=0.1"
with_flash examples/gpt-tiny.pipe "$dir/m.pipe" ""
sed 's/ flash;/;/' "$dir/m.pipe" >"$dir/plain.pipe"

t "compiles gpt-tiny with flash" 0 "$BIN/pipecc" "$dir/f.pipe" -o "$dir/f.plan"
has "an attention's flash" "$dir/f.plan" "^layer attention 128 128 heads=4 kv_heads=4 bias flash dropout=0.1$"
# Per microbatch and attention layer (B 4, H 4, S 64, hd 32, d 128): flash keeps the
# rows' log-sum-exp, 4 B H S = 4096 bytes, in place of P, 4 B H S^2 = 262144 bytes; and
# its B counts one more q k^T, 2 B H S^2 hd = 4194304 FLOPs.  Stage s1 holds one layer.
t "compiles gpt-tiny without flash" 0 "$BIN/pipecc" "$dir/plain.pipe" -o "$dir/plain.plan"
t "compiles gpt-tiny with flash, no dropout" 0 "$BIN/pipecc" "$dir/m.pipe" -o "$dir/m.plan"
fw() { sed -n 's/^stage 1 s1 .* save_fw=\([0-9]*\).*/\1/p' "$1"; }
a=$(fw "$dir/plain.plan") b=$(fw "$dir/m.plan")
check "flash keeps 262144 - 4096 bytes less in s1" "$([ -n "$a" ] && [ $((a - b)) -eq 258048 ]; echo $?)" "$a - $b"

sed 's/ flash dropout/ flash=1 dropout/' "$dir/f.pipe" >"$dir/bad.pipe"
t "flash=1 is refused" 1 "$BIN/pipecc" "$dir/bad.pipe" -o "$dir/bad.plan"
has "... at its place" "$dir/err" "bad.pipe:11:[0-9]*: error: 'flash' takes no value"

runs "gpt-tiny flash 1f1b" "$dir/f.plan"
runs "gpt-tiny flash without dropout" "$dir/m.plan"
t "zbh2" 0 "$BIN/pipecc" "$dir/f.pipe" -s zbh2 -o "$dir/zbh2.plan"
runs "gpt-tiny flash zbh2 (B and W apart)" "$dir/zbh2.plan"
for mode in full selective; do
	printf 'recompute * %s;\n' $mode | cat "$dir/f.pipe" - >"$dir/$mode.pipe"
	t "recompute $mode" 0 "$BIN/pipecc" "$dir/$mode.pipe" -o "$dir/$mode.plan"
	runs "gpt-tiny flash, recompute $mode" "$dir/$mode.plan"
done
has "selective over flash rebuilds nothing" "$dir/selective.plan" " recompute selective save_re=0 "
t "selective over flash is warned about" 0 "$BIN/pipecc" "$dir/selective.pipe" -o "$dir/selective.plan"
has "... at its statement" "$dir/err" "selective.pipe:[0-9]*:[0-9]*: warning: every attention layer is flash"
with_flash examples/gpt-tp.pipe "$dir/tp.pipe" " dropout=0.1"
t "compiles gpt-tp with flash" 0 "$BIN/pipecc" "$dir/tp.pipe" -o "$dir/tp.plan"
runs "gpt-tp flash (tp=2 dp=2)" "$dir/tp.plan"

mpi_check "--check gpt-tiny with flash under mpirun -np 4" 4 "$dir/f.plan"

[ "$fails" -eq 0 ]
