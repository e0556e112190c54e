/* Transformer layer kernels on the CPU: the math of every decoder-transformer layer kind,
 * as a pure library over float32 row-major arrays and explicit sizes (no runtime structs),
 * so the layer table and the backends can call it.  docs/layers.md gives the math, the
 * saved tensors, the FLOPs and the parameter counts of each kind.
 *
 * Conventions shared by every kernel:
 * - N = B*S rows (the tokens of a microbatch), one row per token, sequence-major within
 *   a microbatch (row b*S + s is token s of sequence b).
 * - Each layer kind has three entry points: forward (`_fwd`) writes y and fills the
 *   caller's "saved" buffers; backward-input (`_bwd_in`) turns dy into dx and fills the
 *   "held" buffers that the weight gradient needs; backward-weight (`_bwd_w`)
 *   accumulates (+=) into the parameter gradients from the layer input, the saved and the
 *   held buffers and dy.  Between `_bwd_in` and `_bwd_w` the caller keeps dy, the layer
 *   input x and the saved/held buffers unchanged; nothing else carries over, so the two
 *   halves can run apart (zero-bubble schedules).  `_bwd` is the fused pair.
 * - `_bwd_in` overwrites dx; `_bwd_w` adds into dW/db (the caller zeroes them per step).
 * - Every GEMM dimension (N, d, f, V, S, nqkv) must fit in an int (OpenBLAS's API).
 * - Kernels never allocate.  Only attention's `_bwd_in` needs scratch
 *   (`tk_attn_workspace` floats).  Element counts below are floats unless marked;
 *   the layer table (plan/layer.c) states them per kind, by named slot.
 * - Optional parameters (biases, learned positions) are NULL when absent; so are their
 *   gradients.
 * - Same inputs, same bits: fixed loop orders, scalar reductions (row statistics, the
 *   loss) in double, GEMMs through OpenBLAS's cblas_sgemm (deterministic for given
 *   shapes and thread count). */
#ifndef TKERNELS_H
#define TKERNELS_H

#include <stdint.h>

#include "../plan/tfcount.h"

enum {
	TK_OK = 0,       // success
	TK_EINVAL = -1,  // bad argument: a token or target out of range
};

#define TK_NORM_EPS 1e-5f     // layernorm / rmsnorm default epsilon
#define TK_ROPE_THETA 10000.0 // rotary base (Llama, GPT-NeoX)

/* ---- linear: y (N x n) = x (N x k) W (k x n) + b (n) ----
 * Saved: nothing beyond the input x (N*k).  Held for W: dy (N*n). */
void tk_linear_fwd(const float *x, const float *w, const float *b, float *y, int64_t N,
                   int64_t k, int64_t n);
/* dx (N x k) = dy W^T; with accumulate != 0, dx += dy W^T. */
void tk_linear_bwd_in(const float *dy, const float *w, float *dx, int64_t N, int64_t k,
                      int64_t n, int accumulate);
/* dw += x^T dy; db += column sums of dy (db may be NULL). */
void tk_linear_bwd_w(const float *x, const float *dy, float *dw, float *db, int64_t N,
                     int64_t k, int64_t n);

/* ---- token embedding: x[t] = wte[tok[t]] (+ wpe[t mod S]) ----
 * tok: N int32 in [0, V); wte V x d; wpe S x d or NULL (rotary or no positions).
 * Saved: nothing beyond the input tokens (N int32).  No input gradient (tokens are not
 * differentiable).
 * Returns TK_EINVAL, writing nothing, if a token is out of range. */
int tk_embed_fwd(const int32_t *tok, const float *wte, const float *wpe, float *x, int64_t B,
                 int64_t S, int64_t d, int64_t V);
/* dwte[tok[t]] += dy[t]; dwpe[t mod S] += dy[t] (dwpe NULL without positions).  Rows are
 * added in token order, so repeated tokens accumulate deterministically. */
int tk_embed_bwd_w(const int32_t *tok, const float *dy, float *dwte, float *dwpe, int64_t B,
                   int64_t S, int64_t d, int64_t V);
/* The same on one rank of a tp group holding rows [lo, lo + n) of the table (wte, dwte:
 * n x d): a token outside them gives zeros (plus wpe when given) and no table gradient. */
int tk_embed_fwd_tp(const int32_t *tok, const float *wte, const float *wpe, float *x,
                    int64_t B, int64_t S, int64_t d, int64_t V, int64_t lo, int64_t n);
int tk_embed_bwd_w_tp(const int32_t *tok, const float *dy, float *dwte, float *dwpe, int64_t B,
                      int64_t S, int64_t d, int64_t V, int64_t lo, int64_t n);

/* ---- layernorm: y = (x - mean) * rstd * g + b, rstd = 1/sqrt(var + eps) ----
 * x, y: N x d; g, b: d.  Saved: mean (N), rstd (N), plus the input x (N*d).
 * Held for W: dy (N*d). */
void tk_layernorm_fwd(const float *x, const float *g, const float *b, float eps, float *y,
                      float *mean, float *rstd, int64_t N, int64_t d);
void tk_layernorm_bwd_in(const float *x, const float *g, const float *mean,
                         const float *rstd, const float *dy, float *dx, int64_t N, int64_t d);
void tk_layernorm_bwd_w(const float *x, const float *mean, const float *rstd,
                        const float *dy, float *dg, float *db, int64_t N, int64_t d);
void tk_layernorm_bwd(const float *x, const float *g, const float *mean, const float *rstd,
                      const float *dy, float *dx, float *dg, float *db, int64_t N, int64_t d);

/* ---- rmsnorm: y = x * rstd * g, rstd = 1/sqrt(mean(x^2) + eps) ----
 * Saved: rstd (N), plus the input x (N*d).  Held for W: dy (N*d). */
void tk_rmsnorm_fwd(const float *x, const float *g, float eps, float *y, float *rstd,
                    int64_t N, int64_t d);
void tk_rmsnorm_bwd_in(const float *x, const float *g, const float *rstd, const float *dy,
                       float *dx, int64_t N, int64_t d);
void tk_rmsnorm_bwd_w(const float *x, const float *rstd, const float *dy, float *dg, int64_t N,
                      int64_t d);
void tk_rmsnorm_bwd(const float *x, const float *g, const float *rstd, const float *dy,
                    float *dx, float *dg, int64_t N, int64_t d);

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
 * Workspace of _bwd_in: tk_attn_workspace() floats (N*d + S*S).  The shape (TkAttn) is
 * plan/tfcount.h's; the tensors and every count are the layer table's (plan/layer.c). */
void tk_attn_fwd(const TkAttn *a, const float *x, const float *wqkv, const float *bqkv,
                 const float *wo, const float *bo, float *qkv, float *p, float *att, float *y);
/* p from qkv as _fwd computes it (selective recomputation rebuilds it with this). */
void tk_attn_probs(const TkAttn *a, const float *qkv, float *p);
void tk_attn_bwd_in(const TkAttn *a, const float *wqkv, const float *wo, const float *qkv,
                    const float *p, const float *dy, float *dqkv, float *dx, float *work);
void tk_attn_bwd_w(const TkAttn *a, const float *x, const float *att, const float *dy,
                   const float *dqkv, float *dwqkv, float *dbqkv, float *dwo, float *dbo);
void tk_attn_bwd(const TkAttn *a, const float *x, const float *wqkv, const float *wo,
                 const float *qkv, const float *p, const float *att, const float *dy,
                 float *dqkv, float *dx, float *dwqkv, float *dbqkv, float *dwo, float *dbo,
                 float *work);
/* Rotary on the q and k heads of qkv rows (N x nqkv) in place; inverse != 0 applies the
 * transpose (the gradient). */
void tk_rope(const TkAttn *a, float *qkv, int inverse);

/* ---- dropout: y = x * mask / (1 - P), mask[i] = 1 with probability 1 - P ----
 * The masks are drawn, not stored: element i of a mask keyed k is kept when the top 32
 * bits of splitmix64(k ^ i) are at least thr = round(P 2^32), so any device, any run and
 * the --check reference draw the same bits from the same key (the runtime keys each
 * layer, microbatch and step: rt_drop_key).  Masks are one byte an element (uint8 0 or
 * 1).  P = 0 keeps everything (thr 0, scale 1) and needs no mask: y = x bit for bit. */
typedef struct {
	uint64_t key;  // the masks' key
	uint64_t thr;  // keep element i when splitmix64(key ^ i) >> 32 >= thr
	float scale;   // 1 / (1 - P), each kept element's factor
	int64_t head0; // attention: the first of the call's heads among the layer's (tp rank t
	               // holds heads t H/tp ..): a probability's index counts every head of
	               // every sequence, [b][h][i][j], so a tp group draws the whole layer's
} TkDrop;
TkDrop tk_drop(double p, uint64_t key);
/* 1 when element i of dr's mask is kept. */
int tk_drop_keep(const TkDrop *dr, uint64_t i);
/* y and mask (NULL at P = 0) from x, n elements; x[0] is element `first` of the whole
 * tensor (a rank's rows under sequence parallelism), whose index keys its mask bit. */
void tk_dropout_fwd(const TkDrop *dr, const float *x, uint8_t *mask, float *y, int64_t n,
                    uint64_t first);
/* dx = dy * mask * scale (dy at P = 0, mask NULL). */
void tk_dropout_bwd(const TkDrop *dr, const uint8_t *mask, const float *dy, float *dx, int64_t n);
/* Attention with dropout on its probabilities (Megatron's attention dropout): F draws
 * the mask of p (B*H*S*S bytes) and pd = p * mask * scale (B*H*S*S floats), and att =
 * pd v; B takes dP = (dO v^T) * mask * scale into the softmax' and dv += pd^T dO.  Saved
 * besides _fwd's: mask and pd.  The _drop forms with dr NULL are the plain ones. */
void tk_attn_fwd_drop(const TkAttn *a, const TkDrop *dr, const float *x, const float *wqkv,
                      const float *bqkv, const float *wo, const float *bo, float *qkv,
                      float *p, uint8_t *mask, float *pd, float *att, float *y);
/* p, its mask and pd from qkv as _fwd_drop computes them (selective recomputation). */
void tk_attn_probs_drop(const TkAttn *a, const TkDrop *dr, const float *qkv, float *p,
                        uint8_t *mask, float *pd);
/* Flash attention (the layer's `flash`): the S x S tensors are the caller's scratch, not
 * kept; F also writes each row's log-sum-exp of its scaled causal scores, lse (B*H*S
 * floats, [b][h][i]; lse NULL: _fwd_drop), and B rebuilds P = exp(c q k^T - lse) below
 * the diagonal (one more q k^T), its mask and pd from dr as F drew them, before
 * _bwd_in_drop.  Equal to the materialised P up to float rounding. */
void tk_attn_fwd_flash(const TkAttn *a, const TkDrop *dr, const float *x, const float *wqkv,
                       const float *bqkv, const float *wo, const float *bo, float *qkv,
                       float *p, uint8_t *mask, float *pd, float *lse, float *att, float *y);
void tk_attn_probs_lse(const TkAttn *a, const TkDrop *dr, const float *qkv, const float *lse,
                       float *p, uint8_t *mask, float *pd);
void tk_attn_bwd_in_drop(const TkAttn *a, const TkDrop *dr, const float *wqkv, const float *wo,
                         const float *qkv, const float *p, const uint8_t *mask, const float *pd,
                         const float *dy, float *dqkv, float *dx, float *work);

/* ---- MLP with GELU (tanh approximation, as GPT-2 and runtime/cpu_layers.c) ----
 * h = x W1 + b1 (N x f), a = gelu(h), y = a W2 + b2.  W1 d x f, W2 f x d, b1/b2 or NULL.
 * Saved: h (N*f), a (N*f), plus the input x (N*d).
 * Held for W: dh (N*f, gradient at h), plus dy (N*d). */
void tk_mlp_fwd(const float *x, const float *w1, const float *b1, const float *w2,
                const float *b2, float *h, float *a, float *y, int64_t N, int64_t d, int64_t f);
void tk_mlp_bwd_in(const float *w1, const float *w2, const float *h, const float *dy,
                   float *dh, float *dx, int64_t N, int64_t d, int64_t f);
void tk_mlp_bwd_w(const float *x, const float *a, const float *dy, const float *dh,
                  float *dw1, float *db1, float *dw2, float *db2, int64_t N, int64_t d,
                  int64_t f);
void tk_mlp_bwd(const float *x, const float *w1, const float *w2, const float *h,
                const float *a, const float *dy, float *dh, float *dx, float *dw1, float *db1,
                float *dw2, float *db2, int64_t N, int64_t d, int64_t f);

/* ---- SwiGLU MLP (Llama): y = (silu(x Wg) * (x Wu)) Wd, no biases ----
 * Wg, Wu d x f; Wd f x d.  Saved: g = x Wg (N*f), u = x Wu (N*f), a = silu(g)*u (N*f),
 * plus the input x (N*d).  Held for W: dg (N*f), du (N*f), plus dy (N*d). */
void tk_swiglu_fwd(const float *x, const float *wg, const float *wu, const float *wd, float *g,
                   float *u, float *a, float *y, int64_t N, int64_t d, int64_t f);
void tk_swiglu_bwd_in(const float *wg, const float *wu, const float *wd, const float *g,
                      const float *u, const float *dy, float *dg, float *du, float *dx,
                      int64_t N, int64_t d, int64_t f);
void tk_swiglu_bwd_w(const float *x, const float *a, const float *dy, const float *dg,
                     const float *du, float *dwg, float *dwu, float *dwd, int64_t N, int64_t d,
                     int64_t f);
/* ---- GeGLU MLP: y = (gelu(x Wg) * (x Wu)) Wd, no biases ----
 * SwiGLU's tensors with GELU (tanh form, as the MLP's) for SiLU; W is tk_swiglu_bwd_w. */
void tk_geglu_fwd(const float *x, const float *wg, const float *wu, const float *wd, float *g,
                  float *u, float *a, float *y, int64_t N, int64_t d, int64_t f);
void tk_geglu_bwd_in(const float *wg, const float *wu, const float *wd, const float *g,
                     const float *u, const float *dy, float *dg, float *du, float *dx,
                     int64_t N, int64_t d, int64_t f);
void tk_swiglu_bwd(const float *x, const float *wg, const float *wu, const float *wd,
                   const float *g, const float *u, const float *a, const float *dy, float *dg,
                   float *du, float *dx, float *dwg, float *dwu, float *dwd, int64_t N,
                   int64_t d, int64_t f);

/* ---- residual: y = x + s, where s = sub(x) is a sub-block's output ----
 * Backward: dx = dy + (the sub-block's input gradient dxs).  Saves nothing.  y may alias
 * x or s; dx may alias dy or dxs. */
void tk_residual_fwd(const float *x, const float *s, float *y, int64_t n);
void tk_residual_bwd(const float *dy, const float *dxs, float *dx, int64_t n);

/* ---- vocabulary head: logits (N x V) = x Wv^T, Wv V x d, no bias ----
 * Tied: pass the embedding's wte as wv (and its gradient as dwv).  Saved: the input x
 * (N*d).  Held for W: dlogits (N*V). */
void tk_head_fwd(const float *x, const float *wv, float *logits, int64_t N, int64_t d,
                 int64_t V);
void tk_head_bwd_in(const float *wv, const float *dlogits, float *dx, int64_t N, int64_t d,
                    int64_t V);
void tk_head_bwd_w(const float *x, const float *dlogits, float *dwv, int64_t N, int64_t d,
                   int64_t V);

/* ---- cross-entropy on next-token targets: loss = mean_t -log softmax(logits[t])[tgt[t]] ----
 * logits N x Vp; tgt N int32 in [0, V).  A padded vocabulary (`pad=`, Vp > V): the
 * columns V..Vp-1 are left out of the softmax, as if their logits were -inf, and get a
 * zero gradient; Vp == V pads nothing.  Saved: lse (N, each row's log-sum-exp) and the
 * targets (N int32), plus the input logits (N*V).  Backward writes
 * dlogits = scale * (softmax(logits) - onehot(tgt)) / N, and may run in place
 * (dlogits == logits), so a microbatch needs one N x V buffer.  No parameters.
 * Return TK_EINVAL, writing nothing, if a target is out of range. */
int tk_xent_fwd(const float *logits, const int32_t *tgt, float *lse, double *loss, int64_t N,
                int64_t V, int64_t Vp);
int tk_xent_bwd(const float *logits, const int32_t *tgt, const float *lse, float scale,
                float *dlogits, int64_t N, int64_t V, int64_t Vp);
/* Vocabulary-parallel (tp): a rank's logits are columns [lo, lo + n) of V (N x n).
 * tk_xent_tp_max: each row's local maximum; after its max all-reduce over the group (M),
 * tk_xent_tp_sums: sum of exp(logit - M) and the target's logit (0 when outside the
 * slice); after their sum all-reduce, tk_xent_tp_end: lse = M + log(sum) and the mean
 * loss.  tk_xent_tp_bwd: the rank's columns of tk_xent_bwd's dlogits.  V is the real
 * vocabulary: the columns lo + j >= V are padding (the maximum of a slice of padding
 * only is -inf). */
void tk_xent_tp_max(const float *logits, float *mx, int64_t N, int64_t V, int64_t lo,
                    int64_t n);
int tk_xent_tp_sums(const float *logits, const int32_t *tgt, const float *mx, float *sum,
                    float *zt, int64_t N, int64_t V, int64_t lo, int64_t n);
void tk_xent_tp_end(const float *mx, const float *sum, const float *zt, float *lse,
                    double *loss, int64_t N);
int tk_xent_tp_bwd(const float *logits, const int32_t *tgt, const float *lse, float scale,
                   float *dlogits, int64_t N, int64_t V, int64_t lo, int64_t n);

#endif
