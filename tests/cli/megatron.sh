#!/bin/sh
# pipecc's per-rank weights and optimizer bytes against Megatron-LM's own
# megatron/training/theoretical_memory_usage.py (commit d98e8a6, run by hand on the
# two configurations below: docs/semantics.md "Against Megatron's formula").  bf16 with
# AdamW is 18 bytes a parameter on both sides, 6 + 12/dp with the distributed optimizer; the
# parameter counts differ only by the tensors the formula leaves out, each named here.
: "${BIN:=bin}"
TOOL=megatron
. tests/lib/cli.sh

# stages N PER BLOCK FIRST LAST: N stage lines of PER blocks, FIRST before the first
# stage's blocks, LAST after the last's
stages() {
	n=$1 per=$2 blk=$3 first=$4 last=$5
	i=0
	while [ $i -lt "$n" ]; do
		body="$blk x $per;"
		[ $i -eq 0 ] && body="$first $body"
		[ $i -eq $((n - 1)) ] && body="$body $last"
		echo "stage s$i { $body }"
		i=$((i + 1))
	done
}

# GPT-3 175B as Megatron's GPT-3 runs it: 96 layers, h 12288, 96 heads, s 2048, the
# vocabulary padded to 51200, tp 8, pp 16, dp 8, a tied head (a copy on the last stage)
{
	cat <<EOF
pipeline gpt3_175b;
mesh pp=16 dp=8 tp=8;
microbatches 16;
input tokens 1x2048 vocab=50257 pad=128;
device a100 memory=1TB;
precision bf16;
optimizer adamw;
block gpt {
	residual { layernorm; attention heads=96 bias dropout=0.1 flash; dropout 0.1; }
	residual { layernorm; mlp 49152 bias; dropout 0.1; }
}
EOF
	stages 16 6 gpt "embed 12288 positions; dropout 0.1;" "layernorm; head tied; loss xent;"
	echo "schedule 1f1b;"
} >"$dir/gpt3.pipe"
t "GPT-3 175B summary" 0 "$BIN/pipecc" "$dir/gpt3.pipe" --emit summary
# Megatron's most loaded shard: 1,437,894,144 parameters, 25,882,094,592 bytes.  It
# leaves out the learned positions (2048 x 12288 = 25,165,824, whole on every tp rank)
# and the linear layers' biases (a layer's qkv 36864 / 8 + fc1 49152 / 8 split, proj
# and fc2 12288 each whole: 35,328, six layers), and gives every stage 1/16 of the
# final layer norm (2 x 12288 / 16 = 1,536), which pipecc keeps on the last stage.
p0=$((1437894144 + 25165824 + 6 * 35328 - 1536))
has "GPT-3 175B: stage 0 holds Megatron's shard + positions + biases - norm share" \
	"$dir/out" "^s0 *0 *$p0 .* $((p0 * 18))$"
has "GPT-3 175B: 18 bytes a parameter" "$dir/out" "(18 bytes a parameter with the optimizer"
# With the distributed optimizer the formula gives 6 + 12/8 = 7.5 bytes a parameter:
# 10,784,206,080 bytes for its shard; pipecc's stage 0 holds bf16 parameters and f32
# gradients whole (6 bytes each) and 1/8 of the master weights and AdamW state (12)
sed 's/^optimizer adamw;/optimizer adamw distributed;/' "$dir/gpt3.pipe" >"$dir/gpt3d.pipe"
t "GPT-3 175B, distributed optimizer: summary" 0 "$BIN/pipecc" "$dir/gpt3d.pipe" --emit summary
has "GPT-3 175B, distributed: 6 + 12/8 bytes a parameter on stage 0" \
	"$dir/out" "^s0 *0 *$p0 .* $((p0 * 6 + (p0 + 7) / 8 * 12))$"
check "... which is the formula's 7.5 bytes a parameter" \
	"$([ $((p0 * 6 + (p0 + 7) / 8 * 12)) -eq $((p0 * 15 / 2)) ]; echo $?)" "$p0"
has "... and the summary says so" "$dir/out" "sharded over dp=8 (6 + 12/8 bytes a parameter)"

# Llama-2-70B: 80 layers, h 8192, 64 heads, 8 key/value groups, SwiGLU 28672, RMSNorm,
# s 4096, vocabulary 32000, untied, tp 8, pp 8, dp 8
{
	cat <<EOF
pipeline llama2_70b;
mesh pp=8 dp=8 tp=8;
microbatches 8;
input tokens 1x4096 vocab=32000;
device h100 memory=1TB;
precision bf16;
optimizer adamw;
block llama {
	residual { rmsnorm; attention heads=64 kv_heads=8 rope flash; }
	residual { rmsnorm; swiglu 28672; }
}
EOF
	stages 8 10 llama "embed 8192;" "rmsnorm; head; loss xent;"
	echo "schedule 1f1b;"
} >"$dir/llama.pipe"
t "Llama-2-70B summary" 0 "$BIN/pipecc" "$dir/llama.pipe" --emit summary
# Megatron's most loaded shard: 1,102,480,384 parameters, 19,844,646,912 bytes; the
# same but for its 1/8 of the final RMSNorm (8192 / 8 = 1,024)
p0=$((1102480384 - 1024))
has "Llama-2-70B: stage 0 holds Megatron's shard - norm share" \
	"$dir/out" "^s0 *0 *$p0 .* $((p0 * 18))$"
# distributed: the formula's 8,268,602,880 bytes less 7.5 x its norm share (7,680)
sed 's/^optimizer adamw;/optimizer adamw distributed;/' "$dir/llama.pipe" >"$dir/llamad.pipe"
t "Llama-2-70B, distributed optimizer: summary" 0 "$BIN/pipecc" "$dir/llamad.pipe" --emit summary
has "Llama-2-70B, distributed: the formula's bytes less the norm share's" \
	"$dir/out" "^s0 *0 *$p0 .* $((8268602880 - 7680))$"
sed 's/^mesh pp=8 dp=8 tp=8;/mesh pp=8 dp=8;/' "$dir/llama.pipe" >"$dir/llama1.pipe"
t "Llama-2-70B at tp=1 summary" 0 "$BIN/pipecc" "$dir/llama1.pipe" --emit summary
has "Llama-2-70B: 68,976,648,192 parameters, the published 69.0B in closed form" "$dir/out" \
	"^parameters 68976648192;"

[ "$fails" -eq 0 ]
