#!/bin/sh
# Transformer programs end to end: the GPT-2, Llama-2-7B and gpt-tiny examples compile,
# pass pipesim and report the published parameter counts in --emit summary (and a GPT-2
# layer's activation bytes with its dropouts); every schedule compiles gpt-tiny; a
# device preset scales the derived costs; a tied head on another rank than its
# embedding keeps a copy of the table, counted on its stage and once in the model
# (tests/cli/tied.sh tests the rest); piperun refuses what it cannot run with exit 1.
: "${BIN:=bin}"
TOOL=transformer
. tests/lib/cli.sh

for f in examples/gpt-tiny.pipe examples/gpt2.pipe examples/llama2-7b.pipe; do
	t "compiles $f" 0 "$BIN/pipecc" "$f" -o "$dir/x.plan"
	t "pipesim proves $f" 0 "$BIN/pipesim" "$dir/x.plan"
	has "$f runs to the end" "$dir/out" "^ok: "
done

t "gpt2 summary" 0 "$BIN/pipecc" examples/gpt2.pipe --emit summary
has "GPT-2 small has 124,439,808 parameters" "$dir/out" "^parameters 124439808;"
has "GPT-2 summary names AdamW" "$dir/out" "optimizer adamw (8 bytes of state"
has "GPT-2 summary names bf16" "$dir/out" "^precision bf16: .* (18 bytes a parameter"
# bf16 (Megatron's mixed precision): bf16 parameters 2 + f32 main gradients 4 + f32
# master weights 4 + AdamW 8 = 18 bytes a parameter (theoretical_memory_usage.py's 18)
has "GPT-2 stage line: bf16 params + grads + master + AdamW = 18 bytes a parameter" \
	"$dir/out" "^s1 .* 7087872 .* $((7087872 * 18))$"
# a layer's activation bytes a microbatch at bf16 with flash attention, N = 8 x 1024
# tokens, d 768, 12 heads: kept from F, 34 N d (Korthikanti et al. 2022's 34 sbh: the
# norms' and the projections' inputs, qkv, the heads' output, the MLP's h and gelu(h),
# two bytes each, and the two one-byte dropout masks) + the norms' f32 mean and rstd,
# 16 N, + flash's f32 log-sum-exp, 4 x 8 x 12 x 1024 (no S x S tensor is kept); held
# from B to W, 22 N d (each weighted layer's output gradient, dqkv and dh): 352,845,824
n=$((8192 * 768))
has "GPT-2 bf16 flash layer keeps 56 N d + 16 N + its log-sum-exp" "$dir/out" \
	"^s1 .* $((56 * n + 16 * 8192 + 4 * 8 * 12 * 1024)) *$((7087872 * 18))$"
# the same in f32 without flash: 1,082,261,504 without dropout (docs/layers.md's
# 100,679,680 bytes from F to B a sequence, x 8, + 276,824,064 held from B to W), +
# attention's mask 8 x 12 x 1024^2 = 100,663,296 bytes and its dropped probabilities, 4
# x that, + two hidden masks of 8192 x 768 bytes: 1,598,160,896; params + grads + AdamW
# = 16 bytes a parameter
sed 's/^precision bf16;/precision f32;/; s/ flash;/;/' examples/gpt2.pipe >"$dir/f32.pipe"
t "gpt2 f32 summary" 0 "$BIN/pipecc" "$dir/f32.pipe" --emit summary
has "GPT-2 f32 layer with its dropouts keeps 1,598,160,896 bytes" "$dir/out" \
	"^s1 .* $((1082261504 + 5 * 100663296 + 2 * 8192 * 768)) *113405952$"
sed 's/head tied;/head;/' examples/gpt2.pipe >"$dir/untied.pipe"
t "untied gpt2 summary" 0 "$BIN/pipecc" "$dir/untied.pipe" --emit summary
has "GPT-2 small untied has 163,037,184 parameters" "$dir/out" "^parameters 163037184;"
t "llama summary" 0 "$BIN/pipecc" examples/llama2-7b.pipe --emit summary
has "Llama-2-7B has 6,738,415,616 parameters" "$dir/out" "^parameters 6738415616;"

# Llama-3-70B, the flagship: 70,553,706,496 parameters (the published 70.6B, in closed
# form: 80 layers of 2d + d(d + 2 x 8 x 128) + d^2 + 3 d 28672, two 128256 x 8192
# tables, the final norm); at pp=8 dp=8 tp=8 with sp, bf16, flash and the distributed
# optimizer every rank fits an H100 (pipecc refuses a plan that does not); without sp
# it still does (rank 0 at 69.4 GB), without sp and without the distributed optimizer
# rank 0 does not (82 GB)
t "llama3-70b compiles" 0 "$BIN/pipecc" examples/llama3-70b.pipe -o "$dir/l3.plan"
t "pipesim proves llama3-70b" 0 "$BIN/pipesim" "$dir/l3.plan"
has "llama3-70b runs to the end" "$dir/out" "^ok: 512 ranks"
sed 's/^mesh pp=8 dp=8 tp=8 sp;/mesh pp=8 dp=8;/; s/^device h100;/device h100 memory=10TB;/' \
	examples/llama3-70b.pipe >"$dir/l3t1.pipe"
t "llama3-70b at tp=1 summary" 0 "$BIN/pipecc" "$dir/l3t1.pipe" --emit summary
has "Llama-3-70B has 70,553,706,496 parameters" "$dir/out" "^parameters 70553706496;"
sed 's/^mesh pp=8 dp=8 tp=8 sp;/mesh pp=8 dp=8 tp=8;/' examples/llama3-70b.pipe >"$dir/l3nosp.pipe"
t "llama3-70b without sp fits with the distributed optimizer" 0 "$BIN/pipecc" "$dir/l3nosp.pipe" \
	-o "$dir/x.plan"
sed -i 's/ distributed;/;/' "$dir/l3nosp.pipe"
t "llama3-70b without sp or the distributed optimizer does not fit" 1 "$BIN/pipecc" \
	"$dir/l3nosp.pipe" -o "$dir/x.plan"
has "... rank 0 is named" "$dir/err" "does not fit: rank 0 (pp 0, dp 0) needs 82 GB"

# every schedule compiles gpt-tiny (the V-shaped ones at pp=2: two stages a rank)
for s in $("$BIN/pipecc" --list-schedules); do
	case $s in
	custom | csv) continue ;;
	zbv | dualpipev) sed 's/mesh pp=4;/mesh pp=2;/' examples/gpt-tiny.pipe >"$dir/t.pipe" ;;
	*) cp examples/gpt-tiny.pipe "$dir/t.pipe" ;;
	esac
	t "gpt-tiny compiles with $s" 0 "$BIN/pipecc" "$dir/t.pipe" -s "$s" -o "$dir/s.plan"
	t "gpt-tiny with $s passes pipesim" 0 "$BIN/pipesim" "$dir/s.plan"
done

# the device peak sets derived costs: the H100 preset is 9.89x the default 100 TFLOP/s;
# at efficiency 1 and a bandwidth that makes memory nearly free its roofline comes within
# 0.3% of that (the norms' bytes remain), and at its default efficiencies its GEMMs alone
# take their FLOPs at 0.75 x 989 TFLOP/s, at most 7.42x faster (docs/semantics.md "Costs")
sed 's/^device h100;$//' examples/gpt2.pipe >"$dir/slow.pipe"
sed 's/^device h100;$/device h100 gemm=1 elementwise=1 attention=1 bandwidth=1000TB\/s;/' \
	examples/gpt2.pipe >"$dir/fast.pipe"
"$BIN/pipecc" "$dir/fast.pipe" -o "$dir/fast.plan"
"$BIN/pipecc" "$dir/slow.pipe" -o "$dir/slow.plan"
fast=$(sed -n 's/^stage 1 .* f=\([0-9]*\) .*/\1/p' "$dir/fast.plan")
slow=$(sed -n 's/^stage 1 .* f=\([0-9]*\) .*/\1/p' "$dir/slow.plan")
ratio=$(awk -v a="$slow" -v b="$fast" 'BEGIN { r = a / b; print (r > 9.86 && r < 9.90) ? 0 : 1 }')
check "h100 preset divides derived costs by 9.89" "$ratio" "f=$fast at h100, f=$slow at 100 TFLOP/s"
"$BIN/pipecc" examples/gpt2.pipe -o "$dir/roof.plan"
roof=$(sed -n 's/^stage 1 .* f=\([0-9]*\) .*/\1/p' "$dir/roof.plan")
ratio=$(awk -v a="$slow" -v b="$roof" 'BEGIN { r = a / b; print (r > 1 && r <= 7.42) ? 0 : 1 }')
check "h100 roofline: GEMMs at 0.75 of the rate at best" "$ratio" "f=$roof at h100, f=$slow at 100 TFLOP/s"
sed 's/^device h100;$/device peak=100TFLOPs;/' examples/gpt2.pipe >"$dir/peak.pipe"
"$BIN/pipecc" "$dir/peak.pipe" -o "$dir/peak.plan"
peak=$(sed -n 's/^stage 1 .* f=\([0-9]*\) .*/\1/p' "$dir/peak.plan")
check "device peak=100TFLOPs is the default rate" "$([ "$peak" = "$slow" ]; echo $?)" \
	"f=$peak, want $slow"

# a tied head on another rank than its embedding: GPT-2 interleaved, the head on pp 3
sed 's/^schedule zbv;$/schedule interleaved;/' examples/gpt2.pipe >"$dir/loop.pipe"
t "tied head on another rank compiles" 0 "$BIN/pipecc" "$dir/loop.pipe" -o "$dir/loop.plan"
has "the head keeps a copy" "$dir/loop.plan" "^layer head 768 50257 tied copy$"
t "pipesim proves it" 0 "$BIN/pipesim" "$dir/loop.plan"
t "its summary" 0 "$BIN/pipecc" "$dir/loop.pipe" --emit summary
has "GPT-2 small still has 124,439,808 parameters" "$dir/out" "^parameters 124439808;"
has "the head's stage holds the table (7087872 + 1536 + 50257 x 768)" "$dir/out" \
	"^s7  *3  *45686784 "
has "the copy is named" "$dir/out" "^tied table: 38597376 parameters held twice"

# piperun refuses what it cannot run yet with exit 1 and says why (tests/cli/
# transformer_run.sh trains the transformers)
printf 'optimizer adamw lr=1e-3;\n' | cat examples/tiny.pipe - >"$dir/adam.pipe"
"$BIN/pipecc" "$dir/adam.pipe" -o "$dir/adam.plan"
t "piperun runs the plan's adamw" 0 "$BIN/piperun" "$dir/adam.plan" --steps 1
has "piperun runs the plan's lr" "$dir/out" "^optimizer adamw lr=0.001 "

[ "$fails" -eq 0 ]
