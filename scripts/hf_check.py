#!/usr/bin/env python3
"""Hand-run check of piperun --export (docs/runtime.md "Hugging Face files"); make check
never runs it.  Loads an export into transformers (GPT2LMHeadModel or LlamaForCausalLM,
the config from the tensors' shapes and --heads/--kv-heads), and compares its loss on one
sequence of S + 1 random tokens with piperun's: a token file of exactly S + 1 tokens has
one window, so every sequence of piperun's step 1 is that one, and its step-1 loss (the
weights before any update) is the mean cross-entropy of the logits of that sequence.

  piperun PLAN --steps 2 --save CK --export model.safetensors
  python3 scripts/hf_check.py model.safetensors PLAN --heads 4 [--kv-heads 2]

Needs torch, transformers and safetensors (pip install torch transformers safetensors).
"""
import argparse
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def shape(h, name):
    return h[name]["shape"]


def blocks(h, pattern):
    return 1 + max(int(m.group(1)) for m in (re.match(pattern, k) for k in h) if m)


def gpt2_model(h, a):
    from transformers import GPT2Config, GPT2LMHeadModel
    vocab, d = shape(h, "wte.weight")
    cfg = GPT2Config(vocab_size=vocab, n_positions=shape(h, "wpe.weight")[0], n_embd=d,
                     n_layer=blocks(h, r"h\.(\d+)\."), n_head=a.heads,
                     n_inner=shape(h, "h.0.mlp.c_fc.weight")[1],
                     activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     resid_pdrop=0, embd_pdrop=0, attn_pdrop=0,
                     tie_word_embeddings="lm_head.weight" not in h)
    return GPT2LMHeadModel(cfg), "transformer."


def llama_model(h, a):
    from transformers import LlamaConfig, LlamaForCausalLM
    vocab, d = shape(h, "model.embed_tokens.weight")
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=d,
                      intermediate_size=shape(h, "model.layers.0.mlp.gate_proj.weight")[0],
                      num_hidden_layers=blocks(h, r"model\.layers\.(\d+)\."),
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads or a.heads,
                      rms_norm_eps=1e-5, rope_theta=10000.0, attention_bias=False,
                      max_position_embeddings=4096,
                      tie_word_embeddings="lm_head.weight" not in h)
    return LlamaForCausalLM(cfg), ""


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("export")
    p.add_argument("plan")
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--seq", type=int, help="tokens per sequence (default: wpe's rows)")
    p.add_argument("--piperun", default="bin/piperun")
    p.add_argument("--tolerance", type=float, default=1e-4)
    a = p.parse_args()
    import torch
    from safetensors.torch import load_file
    h = header(a.export)
    h.pop("__metadata__", None)
    gpt2 = "wte.weight" in h
    model, prefix = (gpt2_model if gpt2 else llama_model)(h, a)
    state = load_file(a.export)
    if prefix:  # GPT2LMHeadModel keeps GPT2Model's tensors under transformer.
        state = {(k if k == "lm_head.weight" else prefix + k): v for k, v in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(".attn.bias") and
               not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
    if missing or unexpected:
        sys.exit(f"hf_check: missing {missing}, unexpected {unexpected}")
    if model.config.tie_word_embeddings:
        model.tie_weights()
    model.eval()
    seq = a.seq or (shape(h, "wpe.weight")[0] if gpt2 else None)
    if not seq:
        sys.exit("hf_check: give --seq (the plan's S) for a Llama export")
    vocab = shape(h, "wte.weight" if gpt2 else "model.embed_tokens.weight")[0]
    rng = random.Random(1)
    tokens = [rng.randrange(vocab) for _ in range(seq + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "one.u32")
        with open(data, "wb") as f:
            f.write(struct.pack(f"<{seq + 1}I", *tokens))
        out = subprocess.run([a.piperun, a.plan, "--init", a.export, "--data", data, "--steps",
                              "1", "--optimizer", "sgd", "--lr", "1e-30", "--json"],
                             check=True, capture_output=True, text=True).stdout
    ours = json.loads(out)["steps"][0]["loss"]
    with torch.no_grad():
        x = torch.tensor([tokens[:-1]])
        logits = model(input_ids=x).logits.double()
        theirs = torch.nn.functional.cross_entropy(logits[0], torch.tensor(tokens[1:])).item()
    diff = abs(ours - theirs)
    print(f"hf_check: {'gpt2' if gpt2 else 'llama'} piperun loss {ours:.8f}, transformers "
          f"{theirs:.8f}, difference {diff:.3g} ({'ok' if diff <= a.tolerance else 'FAILED'})")
    sys.exit(0 if diff <= a.tolerance else 1)


if __name__ == "__main__":
    main()
