# Sourced by bench_part.sh and bench_batch.sh: the two models they cut and order, and
# the step they compare.  Each model function sets NAME, L (transformer layers), VOCAB,
# EMBED (the first layer), FINAL (the last ones) and BLOCK (one transformer layer's
# body); the caller writes the program around them.

# A Llama-3-8B-like model: 32 layers, d 4096, GQA 32/8 heads with rotary positions,
# SwiGLU 14336, vocabulary 128256, untied head.
llama3_8b() {
	NAME=llama3-8b L=32 VOCAB=128256 EMBED="embed 4096;" FINAL="rmsnorm; head; loss xent;"
	BLOCK="	residual { rmsnorm; attention heads=32 kv_heads=8 rope flash; }
	residual { rmsnorm; swiglu 14336; }"
}

# A GPT-2-XL-like model: 48 layers, d 1600, 25 heads, MLP 6400, vocabulary 50257, tied.
gpt2_xl() {
	NAME=gpt2-xl L=48 VOCAB=50257 EMBED="embed 1600 positions;" FINAL="layernorm; head tied; loss xent;"
	BLOCK="	residual { layernorm; attention heads=25 bias flash; }
	residual { layernorm; mlp 6400 bias; }"
}

# step FILE: pipesim's overlap-model step of FILE compiled, in ms; nothing when pipecc
# refuses it.  $dir/x.plan is left as the plan.
step() {
	"$BIN/pipecc" "$1" -o "$dir/x.plan" 2>/dev/null || return 0
	"$BIN/pipesim" --model overlap --json "$dir/x.plan" 2>/dev/null |
		sed -n 's/^  "makespan": \([0-9.]*\),$/\1/p' | awk '{ printf "%.1f", $1 / 1000 }'
}
