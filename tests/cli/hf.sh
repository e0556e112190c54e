#!/bin/sh
# piperun --export and --init (docs/runtime.md "Hugging Face files"): a GPT-2-shaped and
# a Llama-shaped model written with Hugging Face's names and layouts (GPT-2's Conv1D
# [in, out], Llama's [out, in] with q, k and v apart), read back bit for bit (a run
# from the export loses what the checkpoint's resumed run loses, to the bit), onto
# another mesh (tp=2, --check), the same file under mpirun; a missing or misshapen
# tensor and a model with no Hugging Face names refused by name.
: "${BIN:=bin}"
TOOL=hf
. tests/lib/cli.sh

# GPT-2: learned positions, biases, a head tied across pipeline ranks (its own copy)
cat >"$dir/gpt.pipe" <<'PIPE'
pipeline tiny_gpt;
mesh pp=2;
microbatches 2;
input tokens 2x16 vocab=96;
block gpt {
	residual { layernorm; attention heads=2 bias; }
	residual { layernorm; mlp 64 bias; }
}
stage a { embed 32 positions; gpt; }
stage b { gpt; layernorm; head tied; loss xent; }
schedule 1f1b;
PIPE
# Llama: rmsnorm, rotary, grouped-query attention, swiglu, an untied head
cat >"$dir/llama.pipe" <<'PIPE'
pipeline tiny_llama;
mesh pp=2;
microbatches 2;
input tokens 2x16 vocab=96;
block layer {
	residual { rmsnorm; attention heads=4 kv_heads=2 rope; }
	residual { rmsnorm; swiglu 96; }
}
stage a { embed 32; layer; }
stage b { layer; rmsnorm; head; loss xent; }
schedule 1f1b;
PIPE
sed 's/mesh pp=2;/mesh pp=2 tp=2;/' "$dir/llama.pipe" >"$dir/llama-tp.pipe"
sed 's/swiglu 96;/swiglu 128;/' "$dir/llama.pipe" >"$dir/llama-wide.pipe"
sed 's/stage b { layer;/stage b { layer; layer;/' "$dir/llama.pipe" >"$dir/llama-deep.pipe"
compile gpt llama llama-tp llama-wide llama-deep
"$BIN/pipecc" examples/mlp4.pipe -o "$dir/mlp4.plan"

# names FILE: each tensor's name and shape in the safetensors header
names() {
	n=$(od -An -tu8 -N8 "$1" | tr -d ' ')
	dd if="$1" bs=1 skip=8 count="$n" 2>/dev/null | sed 's/"dtype":"F32",//g' |
		grep -o '"[a-z_.0-9]*":{"shape":\[[0-9,]*\]' | sed 's/"//g; s/:{shape:\[/ /; s/\]$//'
}
O="--optimizer sgd --lr 0.1"

for m in gpt llama; do
	t "$m: 2 steps, saved and exported" 0 "$BIN/piperun" "$dir/$m.plan" --steps 2 $O \
		--save "$dir/$m-ck" --export "$dir/$m.safetensors"
	names "$dir/$m.safetensors" >"$dir/$m.names"
	t "$m: resumed for 2 steps" 0 "$BIN/piperun" "$dir/$m.plan" --steps 2 $O --json \
		--resume "$dir/$m-ck"
	step_losses "$dir/out" | sed 's/^[0-9]* //' >"$dir/$m-resumed.loss"
	t "$m: 2 steps from the export" 0 "$BIN/piperun" "$dir/$m.plan" --steps 2 $O --json \
		--init "$dir/$m.safetensors"
	step_losses "$dir/out" | sed 's/^[0-9]* //' >"$dir/$m-init.loss"
	check "$m: the same losses as the resumed run ($(tr '\n' ' ' <"$dir/$m-init.loss"))" \
		"$(cmp -s "$dir/$m-resumed.loss" "$dir/$m-init.loss" && [ -s "$dir/$m-init.loss" ]; echo $?)" \
		"$(paste "$dir/$m-resumed.loss" "$dir/$m-init.loss" | tr '\n' ' ')"
	runs "$m from the export" "$dir/$m.plan" --init "$dir/$m.safetensors"
done
has "gpt: Conv1D's [in, out] fused qkv" "$dir/gpt.names" "^h.0.attn.c_attn.weight 32,96$"
has "gpt: its bias a vector" "$dir/gpt.names" "^h.1.attn.c_attn.bias 96$"
has "gpt: mlp.c_proj [in, out]" "$dir/gpt.names" "^h.1.mlp.c_proj.weight 64,32$"
has "gpt: learned positions" "$dir/gpt.names" "^wpe.weight 16,32$"
has "gpt: the final norm" "$dir/gpt.names" "^ln_f.bias 32$"
check "gpt: the tied head's copy is not written" "$(! grep -q lm_head "$dir/gpt.names"; echo $?)" \
	"$(grep lm_head "$dir/gpt.names")"
check "gpt: 2 blocks of 12 tensors, wte, wpe, ln_f" "$(wc -l <"$dir/gpt.names" | grep -qx 28; echo $?)" \
	"$(wc -l <"$dir/gpt.names")"
has "llama: q_proj [out, in]" "$dir/llama.names" "^model.layers.0.self_attn.q_proj.weight 32,32$"
has "llama: k_proj of 2 key/value heads" "$dir/llama.names" "^model.layers.1.self_attn.k_proj.weight 16,32$"
has "llama: down_proj [out, in]" "$dir/llama.names" "^model.layers.1.mlp.down_proj.weight 32,96$"
has "llama: the untied head" "$dir/llama.names" "^lm_head.weight 96,32$"
has "llama: the final norm" "$dir/llama.names" "^model.norm.weight 32$"
runs "llama's export onto tp=2" "$dir/llama-tp.plan" --init "$dir/llama.safetensors"

if command -v mpirun >/dev/null 2>&1 && "$BIN/piperun" --version | grep -q mpi &&
	! echo "$BIN" | grep -q san; then
	export OMPI_MCA_rmaps_base_oversubscribe=1
	t "under mpirun: saved and exported" 0 timeout 300 mpirun --allow-run-as-root --oversubscribe \
		--mca btl self,vader -np 2 "$BIN/piperun" "$dir/llama.plan" --steps 2 $O \
		--save "$dir/mpi-ck" --export "$dir/mpi.safetensors"
	check "under mpirun: the threads' file, byte for byte" \
		"$(cmp -s "$dir/llama.safetensors" "$dir/mpi.safetensors"; echo $?)" "they differ"
	t "under mpirun: exported without --save" 0 timeout 300 mpirun --allow-run-as-root \
		--oversubscribe --mca btl self,vader -np 2 "$BIN/piperun" "$dir/llama.plan" --steps 2 $O \
		--export "$dir/mpi-nosave.safetensors"
	check "under mpirun without --save: the same file, no scratch left" \
		"$(cmp -s "$dir/llama.safetensors" "$dir/mpi-nosave.safetensors" &&
			[ ! -e "$dir/mpi-nosave.safetensors.ckpt-tmp" ]; echo $?)" "$(ls "$dir")"
else
	echo "testing $TOOL under mpirun ... skipped: no mpirun or no MPI backend"
fi

# refusals
t "a misshapen tensor is refused" 1 "$BIN/piperun" "$dir/llama-wide.plan" --init "$dir/llama.safetensors"
has "a misshapen tensor: named with both shapes" "$dir/err" \
	"llama.safetensors: error: tensor 'model.layers.0.mlp.gate_proj.weight' is 96x32, and the plan's is 128x32"
t "a missing tensor is refused" 1 "$BIN/piperun" "$dir/llama-deep.plan" --init "$dir/llama.safetensors"
has "a missing tensor: named" "$dir/err" \
	"llama.safetensors: error: tensor 'model.layers.2.input_layernorm.weight' is missing"
t "another architecture's file is refused" 1 "$BIN/piperun" "$dir/gpt.plan" --init "$dir/llama.safetensors"
has "another architecture's file: the first tensor named" "$dir/err" "tensor 'wte.weight' is missing"
t "no Hugging Face names: --init refused" 1 "$BIN/piperun" "$dir/mlp4.plan" --init "$dir/llama.safetensors"
has "no Hugging Face names: says why" "$dir/err" "neither GPT-2's layers (layernorm, mlp) nor Llama's"
t "no Hugging Face names: --export fails" 1 "$BIN/piperun" "$dir/mlp4.plan" --steps 1 \
	--save "$dir/mlp4-ck" --export "$dir/mlp4.safetensors"
has "no Hugging Face names: --export says why" "$dir/err" "piperun: error: --export .*mlp4.safetensors: the model has neither"
check "no Hugging Face names: no file left" "$([ ! -e "$dir/mlp4.safetensors" ]; echo $?)" "$(ls "$dir")"
t "a damaged file is refused" 1 "$BIN/piperun" "$dir/llama.plan" --init "$dir/llama.names"
has "a damaged file: located" "$dir/err" "llama.names: error: "
# without --save: the same file, through a scratch checkpoint beside it that is gone after
t "--export without --save" 0 "$BIN/piperun" "$dir/llama.plan" --steps 2 $O \
	--export "$dir/nosave.safetensors"
check "--export without --save: the file --save gives" \
	"$(cmp -s "$dir/llama.safetensors" "$dir/nosave.safetensors"; echo $?)" "they differ"
check "--export without --save: no scratch checkpoint left" \
	"$([ ! -e "$dir/nosave.safetensors.ckpt-tmp" ]; echo $?)" "$(ls "$dir")"
t "--export takes no -" 2 "$BIN/piperun" "$dir/llama.plan" --save "$dir/x" --export -
t "--init takes no --resume" 2 "$BIN/piperun" "$dir/llama.plan" --init "$dir/llama.safetensors" \
	--resume "$dir/llama-ck"

exit $((fails > 0))
