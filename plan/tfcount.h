/* Transformer counts: parameters, FLOPs and memory of each transformer layer kind, as
 * pure functions of the shapes.  They live in plan/ so that the layer table (layer.c),
 * the kernels (runtime/tkernels.c) and their tests share one formula per figure;
 * docs/layers.md gives the math.  The tk_ prefix is the kernels' one: these are the
 * kernels' own counts, moved here because plan/ may not depend on runtime/. */
#ifndef PLAN_TFCOUNT_H
#define PLAN_TFCOUNT_H

#include <stdint.h>

#include "sat.h"

/* Every count saturates (sat.h): one past INT64_MAX is TK_MANY, never a wrapped number, so that
 * a shape too large to count is seen as such (plan_layer_countable refuses a layer
 * whose figures reach PLAN_COUNT_MAX) rather than read as a small one.  The sizes given
 * are never negative. */
#define TK_MANY INT64_MAX

/* ---- causal multi-head self-attention with grouped-query attention ----
 * hd = d/H; nqkv = (H + 2*Hkv)*hd.  A qkv row is [q heads | k heads | v heads]; query head
 * h reads key/value head h / (H/Hkv).
 * Parameters: wqkv d x nqkv, bqkv nqkv or NULL, wo d x d, bo d or NULL.
 * Saved (besides the input x, N*d):
 *   qkv  N*nqkv   projections, q and k after rotary
 *   p    B*H*S*S  softmax probabilities per (b, h), row-major S x S, zeros above the
 *                 diagonal
 *   att  N*d      attention output before wo (heads side by side)
 * Held for W (filled by _bwd_in): dqkv N*nqkv (gradient at the qkv projection's output,
 *   before rotary), plus dy (N*d).
 * Workspace of _bwd_in: tk_attn_workspace() floats (N*d + S*S). */
typedef struct TkAttn {
	int64_t B, S, d;   // sequences, sequence length, model width
	int64_t H, Hkv;    // query heads, key/value heads (Hkv divides H)
	int rope;          // 1: rotary position embedding on q and k
	double rope_theta; // rotary base (TK_ROPE_THETA)
	int64_t tp;        // > 1: the kernels (runtime/tkernels.c) compute one rank's share of
	                   // a tp group this size: H / tp query and Hkv / tp key/value heads
	                   // (qkv, p, att and wo by those heads); 0 or 1: the whole layer.  The
	                   // counts here always describe the whole layer.
} TkAttn;

/* NULL when the shape is valid, else what is wrong (H divides d, Hkv divides H, even hd
 * with rotary, positive sizes).  The attention kernels assume a valid shape. */
const char *tk_attn_check(const TkAttn *a);
int64_t tk_attn_nqkv(const TkAttn *a);
int64_t tk_attn_p_elems(const TkAttn *a);
int64_t tk_attn_workspace(const TkAttn *a);

/* ---- parameter counts, per layer kind (docs/layers.md) ---- */
int64_t tk_params_linear(int64_t k, int64_t n, int bias);
int64_t tk_params_embed(int64_t V, int64_t d, int64_t S, int learned_pos);
int64_t tk_params_layernorm(int64_t d);
int64_t tk_params_rmsnorm(int64_t d);
int64_t tk_params_attn(const TkAttn *a, int bias);
int64_t tk_params_mlp(int64_t d, int64_t f, int bias);
int64_t tk_params_swiglu(int64_t d, int64_t f);
int64_t tk_params_head(int64_t V, int64_t d, int tied);

/* ---- memory per microbatch, in 4-byte elements (floats; int32 tokens and targets),
 * besides the layer's input (kept from F to W: x, or the tokens of an embedding, or the
 * logits of a cross-entropy) and its output gradient dy (kept from B to W) ---- */
typedef struct TkMem {
	int64_t saved; // written by F, read by B and W
	int64_t held;  // written by B, read by W
	int64_t work;  // scratch inside B only
} TkMem;

TkMem tk_mem_embed(int64_t N);
TkMem tk_mem_layernorm(int64_t N);
TkMem tk_mem_rmsnorm(int64_t N);
TkMem tk_mem_attn(const TkAttn *a);
TkMem tk_mem_mlp(int64_t N, int64_t f);
TkMem tk_mem_swiglu(int64_t N, int64_t f);
TkMem tk_mem_head(int64_t N, int64_t V);
TkMem tk_mem_xent(int64_t N);

/* ---- FLOPs per microbatch: GEMM multiply-adds counted as 2, for F (forward), B (input
 * gradient) and W (weight gradient).  Element-wise kinds (embedding, norms, residual,
 * cross-entropy) do no GEMMs and count 0 (docs/layers.md). ---- */
typedef struct TkFlops {
	int64_t f, b, w; // forward, backward-input, backward-weight
} TkFlops;

TkFlops tk_flops_linear(int64_t N, int64_t k, int64_t n);
TkFlops tk_flops_attn(const TkAttn *a);
TkFlops tk_flops_mlp(int64_t N, int64_t d, int64_t f);
TkFlops tk_flops_swiglu(int64_t N, int64_t d, int64_t f);
TkFlops tk_flops_head(int64_t N, int64_t d, int64_t V);


/* ---- tensor parallelism (docs/layers.md, "Tensor parallelism") ----
 * The same figures for one rank of a tp group of size tp, Megatron's split: attention by
 * heads (qkv column-parallel, wo row-parallel; tp divides H and Hkv), an MLP or SwiGLU
 * by its hidden width (tp divides f), embedding and head by the vocabulary (tp divides
 * V).  A row-parallel projection's bias and an embedding's learned positions are whole
 * on every rank.  With tp = 1 each is the function above. */
int64_t tk_params_attn_tp(const TkAttn *a, int bias, int64_t tp);
int64_t tk_params_mlp_tp(int64_t d, int64_t f, int bias, int64_t tp);
int64_t tk_params_swiglu_tp(int64_t d, int64_t f, int64_t tp);
int64_t tk_params_embed_tp(int64_t V, int64_t d, int64_t S, int learned_pos, int64_t tp);
int64_t tk_params_head_tp(int64_t V, int64_t d, int tied, int64_t tp);
TkMem tk_mem_attn_tp(const TkAttn *a, int64_t tp);
TkMem tk_mem_mlp_tp(int64_t N, int64_t f, int64_t tp);
TkMem tk_mem_swiglu_tp(int64_t N, int64_t f, int64_t tp);
TkMem tk_mem_head_tp(int64_t N, int64_t V, int64_t tp);
TkFlops tk_flops_attn_tp(const TkAttn *a, int64_t tp);
TkFlops tk_flops_mlp_tp(int64_t N, int64_t d, int64_t f, int64_t tp);
TkFlops tk_flops_swiglu_tp(int64_t N, int64_t d, int64_t f, int64_t tp);
TkFlops tk_flops_head_tp(int64_t N, int64_t d, int64_t V, int64_t tp);

#endif
