#!/bin/sh
# Vocabulary padding (`input tokens BxS vocab=V pad=M;`, docs/language.md): vocab=257
# pad=8 at tp=2, which tp does not divide, pads to 272 (the least multiple of 8 x 2 at
# least 257); the plan records both (`vocab=257 padded=272`) and reads back (text and
# binary); the summary counts the padded tables (its figures derived below); pipesim
# proves the plan; piperun --check passes on threads and under mpirun; the loss equals the unpadded model's (tp=1,
# vocab=257) at every step with the same seed, tied head or not, since the real rows
# start equal and the padded logits are left out of the loss; at tp=1 without pad= the
# plan is the unpadded one; pad=M where M x tp already divides V pads nothing.
: "${BIN:=bin}"
TOOL=vocabpad
. tests/lib/cli.sh

cat >"$dir/pad.pipe" <<'PIPE'
pipeline padtok;
mesh pp=2 tp=2;
microbatches 4;
input tokens 2x8 vocab=257 pad=8;
stage s0 { embed 16 positions; layernorm; mlp 32; }
stage s1 { layernorm; head; loss xent; }
schedule 1f1b;
PIPE
sed -e 's/ tp=2//' -e 's/ pad=8//' "$dir/pad.pipe" >"$dir/nopad.pipe"
sed 's/head;/head tied;/' "$dir/pad.pipe" >"$dir/tied.pipe"
sed 's/head;/head tied;/' "$dir/nopad.pipe" >"$dir/tiednopad.pipe"

t "pads 257 to 272 at tp=2" 0 "$BIN/pipecc" "$dir/pad.pipe" -o "$dir/pad.plan"
has "the plan records the real and the padded vocabulary" "$dir/pad.plan" \
	"^input tokens 2x8 vocab=257 padded=272$"
t "the summary" 0 "$BIN/pipecc" "$dir/pad.pipe" --emit summary -q -o "$dir/sum"
has "the summary names both" "$dir/sum" "tokens (vocabulary 257, padded to 272)"
# Per rank of the tp group: s0 = wte 272/2 x 16 (2176) + wpe 8 x 16 (128) + layernorm
# 2 x 16 (32) + mlp 32, no biases, its hidden width halved: 16 x 16 + 16 x 16 (512) =
# 2848; s1 = layernorm 32 + head 272/2 x 16 (2176) = 2208.  Unpadded at tp=2 the
# tables would be 257/2 rows: not whole.
has "s0 counts its half of the padded table" "$dir/sum" "^s0  *0  *2848 "
has "s1 counts its half of the padded head" "$dir/sum" "^s1  *1  *2208 "
t "pipesim proves the padded plan" 0 "$BIN/pipesim" --json "$dir/pad.plan"
# pipesim's memory figures: params bytes 4 x 2848 on rank 0, 4 x 2208 on rank 2.
has "pipesim holds rank 0's padded table" "$dir/out" \
	'{"rank": 0, .*"param_bytes": 11392, "grad_bytes": 11392,'
has "pipesim holds rank 2's padded head" "$dir/out" \
	'{"rank": 2, .*"param_bytes": 8832, "grad_bytes": 8832,'
t "pipesim's text report" 0 "$BIN/pipesim" "$dir/pad.plan"
has "... rank 0's params and grads in kB" "$dir/out" "^ 0 *[0-9.]* [kM]B *11\.4 kB *11\.4 kB "
"$BIN/pipecc" "$dir/pad.pipe" --plan-format binary -q -o "$dir/pad.bin"
"$BIN/pipecc" "$dir/pad.bin" -q -o "$dir/back.plan"
cmp -s "$dir/pad.plan" "$dir/back.plan"
check "the binary form keeps padded=" $? "text -> binary -> text differs"
t "piperun --check on threads" 0 "$BIN/piperun" "$dir/pad.plan" --check --steps 3 -q
has "piperun --check agrees" "$dir/out" "^check: .*: ok"

# The loss with padding equals the unpadded model's (tp=1), step by step.
losses() { "$BIN/piperun" "$1" --steps 3 -q --json | grep -o '"loss": [^,]*'; }
for m in "" tied; do
	"$BIN/pipecc" "$dir/${m:-pad}.pipe" -q -o "$dir/a.plan"
	"$BIN/pipecc" "$dir/${m}nopad.pipe" -q -o "$dir/b.plan"
	losses "$dir/a.plan" >"$dir/la"
	losses "$dir/b.plan" >"$dir/lb"
	awk 'NR == FNR { a[FNR] = $2; next }
	     { d = a[FNR] - $2; if (d < 0) d = -d; if (d > 1e-5 * $2 || $2 != $2) bad = 1; n++ }
	     END { exit bad || n != 3 }' "$dir/la" "$dir/lb"
	check "${m:-untied}: the padded model's loss is the unpadded one's" $? \
		"$(tr '\n' ' ' <"$dir/la") vs $(tr '\n' ' ' <"$dir/lb")"
done
"$BIN/pipecc" "$dir/tied.pipe" -q -o "$dir/tied.plan"
t "piperun --check on threads, tied" 0 "$BIN/piperun" "$dir/tied.plan" --check --steps 3 -q

# Without pad= the tp=1 plan reads `vocab=257` alone; pad=8 at tp=1 pads to 264; pad
# that already divides (vocab=256 pad=8 at tp=2) writes no padded=.
"$BIN/pipecc" "$dir/nopad.pipe" -q -o "$dir/b.plan"
has "no pad=, no padded=" "$dir/b.plan" "^input tokens 2x8 vocab=257$"
sed 's/ tp=2//' "$dir/pad.pipe" >"$dir/tp1.pipe"
"$BIN/pipecc" "$dir/tp1.pipe" -q -o "$dir/tp1.plan"
has "pad=8 at tp=1 pads to 264" "$dir/tp1.plan" "^input tokens 2x8 vocab=257 padded=264$"
sed 's/vocab=257/vocab=256/' "$dir/pad.pipe" >"$dir/even.pipe"
"$BIN/pipecc" "$dir/even.pipe" -q -o "$dir/even.plan"
has "a vocabulary already a multiple is left alone" "$dir/even.plan" \
	"^input tokens 2x8 vocab=256$"
# A plan whose padded= is not above vocab= is a located error.
sed 's/padded=272/padded=257/' "$dir/pad.plan" >"$dir/bad.plan"
t "padded= not above vocab= is refused" 1 "$BIN/pipesim" -q "$dir/bad.plan"
has "the reader names the key" "$dir/err" "padded="

for m in pad tied; do
	mpi_check "piperun --check $m under mpirun (np 4)" 4 "$dir/$m.plan"
done
[ "$fails" -eq 0 ]
