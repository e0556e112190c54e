/* The attention shape shared by the layer table (layer.c, which states every kind's
 * tensors and derives parameters, memory and FLOPs from them) and the kernels
 * (runtime/tkernels.c): its sizes and the counts the table's attention row reads,
 * saturating (docs/layers.md gives the math).  The tk_ prefix is the kernels' one; it
 * lives in plan/ because plan/ may not depend on runtime/. */
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

#endif
