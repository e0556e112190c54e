/* The cpu device's layer kernels: one row per layer kind (rt_cpu_layers, rt_backend.h
 * "Layers"), each computing into the tensors the layer table (plan/layer.c) states for
 * its kind, read by their slot names.  The transformer kinds call tkernels.c, the math
 * every other device agrees with and the tests and benchmarks call directly; a kind's
 * own elementwise math may live here beside its row instead, so that adding a kind
 * touches this file alone on the cpu side.  GEMMs go through OpenBLAS's cblas_sgemm,
 * everything else is a plain loop.  Every kernel is deterministic for given shapes,
 * which is what lets --check compare a pipelined run with the sequential reference bit
 * for bit when summation orders agree; reductions that produce a scalar (the loss)
 * accumulate in double. */
#include "rt_private.h"
#include "tkernels.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define F32(t) ((float *)(t)->data)

/* ---- layers: one row of kernels per layer kind (rt_backend.h, "Layers") ---- */

/* linear: y = x w + b; w in x out (row-major), b 1 x out. */
static int linear_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t m = c->rows, k = c->layer->in, n = c->layer->out;
	float *yd = F32(c->y);
	const float *bd = F32(&c->param[LINEAR_B]);
	for (int64_t i = 0; i < m; i++)
		memcpy(yd + i * n, bd, (size_t)n * sizeof(float));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
	            F32(c->x), (int)k, F32(&c->param[LINEAR_W]), (int)n, 1.0f, yd, (int)n);
	return RT_OK;
}

/* dx = dy w^T */
static int linear_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t m = c->rows, k = c->layer->in, n = c->layer->out;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)k, (int)n, 1.0f,
	            F32(c->dy), (int)n, F32(&c->param[LINEAR_W]), (int)n, 0.0f, F32(c->dx), (int)k);
	return RT_OK;
}

/* dw += x^T dy, db += column sums of dy */
static int linear_bwd_w(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t m = c->rows, k = c->layer->in, n = c->layer->out;
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)n, (int)m, 1.0f,
	            F32(c->x), (int)k, F32(c->dy), (int)n, 1.0f, F32(&c->grad[LINEAR_W]), (int)n);
	float *bd = F32(&c->grad[LINEAR_B]);
	const float *g = F32(c->dy);
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++)
			bd[j] += g[i * n + j];
	return RT_OK;
}

#define GELU_C 0.7978845608f
#define GELU_A 0.044715f

static int relu_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x);
	float *o = F32(c->y);
	for (int64_t i = 0, n = c->rows * c->layer->in; i < n; i++)
		o[i] = a[i] > 0 ? a[i] : 0;
	return RT_OK;
}

static int relu_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x), *g = F32(c->dy);
	float *o = F32(c->dx);
	for (int64_t i = 0, n = c->rows * c->layer->in; i < n; i++)
		o[i] = a[i] > 0 ? g[i] : 0;
	return RT_OK;
}

static int gelu_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x);
	float *o = F32(c->y);
	for (int64_t i = 0, n = c->rows * c->layer->in; i < n; i++) {
		float v = a[i];
		o[i] = 0.5f * v * (1.0f + tanhf(GELU_C * (v + GELU_A * v * v * v)));
	}
	return RT_OK;
}

static int gelu_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x), *g = F32(c->dy);
	float *o = F32(c->dx);
	for (int64_t i = 0, n = c->rows * c->layer->in; i < n; i++) {
		float v = a[i];
		float th = tanhf(GELU_C * (v + GELU_A * v * v * v));
		float d = 0.5f * (1.0f + th) +
		          0.5f * v * (1.0f - th * th) * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
		o[i] = g[i] * d;
	}
	return RT_OK;
}

/* Mean of (x - target)^2 over all elements, accumulated in double, into loss[slot]. */
static int mse_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	if (c->slot < 0 || c->slot >= c->loss->cols)
		return rt_error(r, "internal: loss slot %d of %lld", c->slot, (long long)c->loss->cols);
	const float *a = F32(c->x), *b = F32(c->target);
	int64_t n = c->rows * c->layer->in;
	double s = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = (double)a[i] - (double)b[i];
		s += d * d;
	}
	F32(c->loss)[c->slot] = (float)(s / (double)n);
	return RT_OK;
}

/* dx = scale * 2 (x - target) / (rows * cols) */
static int mse_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x), *b = F32(c->target);
	float *o = F32(c->dx);
	int64_t n = c->rows * c->layer->in;
	float k = (float)(2.0 * (double)c->scale / (double)n);
	for (int64_t i = 0; i < n; i++)
		o[i] = k * (a[i] - b[i]);
	return RT_OK;
}

/* ---- the transformer kinds: tkernels.c's math on the call's tensors ---- */

#define PARAM(c, i) F32(&(c)->param[i])
#define GRAD(c, i) F32(&(c)->grad[i])
#define SAVED(c, i) F32((c)->saved[i])
#define MASK(c, i) ((uint8_t *)(c)->saved[i]->data)
#define HELD(c, i) F32((c)->held[i])
#define HAS(ly, key) (((ly)->flags & LAYER_FLAG(LAYER_KEY_##key)) != 0)

/* The call's tp group size (1: the whole layer) and a split width's share. */
static int64_t tp_of(const RtLayerCall *c)
{
	return c->tp > 1 ? c->tp : 1;
}

/* A whole tensor added after a row-parallel output (its bias, learned positions) is
 * added by the group's first rank only, so the all-reduce sums it once. */
static const float *once(const RtLayerCall *c, const float *p)
{
	return c->tp_rank == 0 ? p : NULL;
}

/* The token ids of t (rows x 1 whole numbers) as a new int32 array; NULL with an error
 * naming the first bad one. */
static int32_t *token_ids(RtRank *r, const RtTensor *t, int64_t vocab, const char *what)
{
	int64_t n = t->rows * t->cols;
	int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
	if (!ids) {
		rt_error(r, "out of memory for %lld token ids", (long long)n);
		return NULL;
	}
	const float *v = F32(t);
	for (int64_t i = 0; i < n; i++) {
		if (!(v[i] >= 0 && v[i] < (float)vocab && v[i] == floorf(v[i]))) {
			rt_error(r, "%s %lld is %g, not a token id in [0, %lld)", what, (long long)i,
			         (double)v[i], (long long)vocab);
			free(ids);
			return NULL;
		}
		ids[i] = (int32_t)v[i];
	}
	return ids;
}

/* embed: y = wte[x] (+ wpe[position]); W scatters dy into the rows of the tokens.  At
 * tp > 1 the rank looks up the tokens of its rows of the table, zeros elsewhere. */
static int embed_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t V = plan_vocab_real(&c->sh), n = c->sh.vocab / tp_of(c);
	int32_t *ids = token_ids(r, c->x, V, "input token");
	if (!ids)
		return RT_EFAIL;
	tk_embed_fwd_tp(ids, PARAM(c, EMBED_WTE),
	                c->nparams > 1 ? once(c, PARAM(c, EMBED_WPE)) : NULL, F32(c->y),
	                c->sh.batch, c->sh.seq, c->layer->out, V, c->tp_rank * n, n);
	free(ids);
	return RT_OK;
}

static int embed_bwd_w(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t V = plan_vocab_real(&c->sh), n = c->sh.vocab / tp_of(c);
	int32_t *ids = token_ids(r, c->x, V, "input token");
	if (!ids)
		return RT_EFAIL;
	tk_embed_bwd_w_tp(ids, F32(c->dy), GRAD(c, EMBED_WTE),
	                  c->nparams > 1 ? GRAD(c, EMBED_WPE) : NULL, c->sh.batch, c->sh.seq,
	                  c->layer->out, V, c->tp_rank * n, n);
	free(ids);
	return RT_OK;
}

/* layernorm and rmsnorm: per-row statistics saved for B and W. */
static int layernorm_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_layernorm_fwd(F32(c->x), PARAM(c, LAYERNORM_GAIN), PARAM(c, LAYERNORM_BIAS), TK_NORM_EPS,
	                 F32(c->y), SAVED(c, LAYERNORM_MEAN), SAVED(c, LAYERNORM_RSTD), c->rows,
	                 c->layer->in);
	return RT_OK;
}

static int layernorm_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_layernorm_bwd_in(F32(c->x), PARAM(c, LAYERNORM_GAIN), SAVED(c, LAYERNORM_MEAN),
	                    SAVED(c, LAYERNORM_RSTD), F32(c->dy), F32(c->dx), c->rows,
	                    c->layer->in);
	return RT_OK;
}

static int layernorm_bwd_w(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_layernorm_bwd_w(F32(c->x), SAVED(c, LAYERNORM_MEAN), SAVED(c, LAYERNORM_RSTD),
	                   F32(c->dy), GRAD(c, LAYERNORM_GAIN), GRAD(c, LAYERNORM_BIAS), c->rows,
	                   c->layer->in);
	return RT_OK;
}

static int rmsnorm_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_rmsnorm_fwd(F32(c->x), PARAM(c, RMSNORM_GAIN), TK_NORM_EPS, F32(c->y),
	               SAVED(c, RMSNORM_RSTD), c->rows, c->layer->in);
	return RT_OK;
}

static int rmsnorm_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_rmsnorm_bwd_in(F32(c->x), PARAM(c, RMSNORM_GAIN), SAVED(c, RMSNORM_RSTD), F32(c->dy),
	                  F32(c->dx), c->rows, c->layer->in);
	return RT_OK;
}

static int rmsnorm_bwd_w(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_rmsnorm_bwd_w(F32(c->x), SAVED(c, RMSNORM_RSTD), F32(c->dy), GRAD(c, RMSNORM_GAIN),
	                 c->rows, c->layer->in);
	return RT_OK;
}

/* The parameters by slot (ATTN_WQKV .. ATTN_BO, MLP_W1 .. MLP_B2): the layer table lays
 * them out weight, bias, weight, bias, without the biases when absent (NULL here). */
static void wb_params(const RtLayerCall *c, const RtTensor *pt, float *w[4])
{
	int b = HAS(c->layer, BIAS);
	w[0] = F32(&pt[0]);
	w[1] = b ? F32(&pt[1]) : NULL;
	w[2] = F32(&pt[1 + b]);
	w[3] = b ? F32(&pt[3]) : NULL;
}

/* The dropout of an attention layer with dropout=P on the call's heads (NULL when P
 * is 0), and its mask and dropped probabilities. */
static const TkDrop *attn_drop(const RtLayerCall *c, const TkAttn *a, TkDrop *dr,
                               uint8_t **mask, float **pd)
{
	*mask = NULL, *pd = NULL;
	if (!(c->layer->drop > 0))
		return NULL;
	*dr = tk_drop(c->layer->drop, c->key);
	dr->head0 = c->tp_rank * (a->H / tp_of(c));
	*mask = MASK(c, ATTN_MASK), *pd = SAVED(c, ATTN_DROP);
	return dr;
}

/* attention: causal softmax per sequence and head (tk_attn_*), its dropout=P after. */
static int attn_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	TkAttn a = plan_layer_attn(c->layer, &c->sh);
	a.tp = tp_of(c);
	float *w[4], *pd;
	uint8_t *mask;
	TkDrop dr;
	wb_params(c, c->param, w);
	const TkDrop *drop = attn_drop(c, &a, &dr, &mask, &pd);
	int lse = plan_attn_lse_slot(c->layer); // flash: P, mask and pd are scratch here
	tk_attn_fwd_flash(&a, drop, F32(c->x), w[ATTN_WQKV],
	                  w[ATTN_BQKV], w[ATTN_WO], once(c, w[ATTN_BO]), SAVED(c, ATTN_QKV),
	                  SAVED(c, ATTN_PROBS), mask, pd, lse < 0 ? NULL : SAVED(c, lse),
	                  SAVED(c, ATTN_ATT), F32(c->y));
	return RT_OK;
}

/* Selective recomputation's rebuild, and flash attention's before every B: P from the
 * saved q, k (and with flash the rows' log-sum-exp), its mask and pd from the key. */

static int attn_rebuild(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	TkAttn a = plan_layer_attn(c->layer, &c->sh);
	a.tp = tp_of(c);
	float *pd;
	uint8_t *mask;
	TkDrop dr;
	const TkDrop *drop = attn_drop(c, &a, &dr, &mask, &pd);
	int lse = plan_attn_lse_slot(c->layer);
	if (lse >= 0)
		tk_attn_probs_lse(&a, drop, SAVED(c, ATTN_QKV), SAVED(c, lse), SAVED(c, ATTN_PROBS),
		                  mask, pd);
	else
		tk_attn_probs_drop(&a, drop, SAVED(c, ATTN_QKV), SAVED(c, ATTN_PROBS), mask, pd);
	return RT_OK;
}

static int attn_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	TkAttn a = plan_layer_attn(c->layer, &c->sh);
	a.tp = tp_of(c);
	float *w[4], *pd;
	uint8_t *mask;
	TkDrop dr;
	wb_params(c, c->param, w);
	const TkDrop *drop = attn_drop(c, &a, &dr, &mask, &pd);
	tk_attn_bwd_in_drop(&a, drop, w[ATTN_WQKV], w[ATTN_WO],
	                    SAVED(c, ATTN_QKV), SAVED(c, ATTN_PROBS), mask, pd, F32(c->dy),
	                    HELD(c, ATTN_DQKV), F32(c->dx), F32(c->work));
	return RT_OK;
}

static int attn_bwd_w(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	TkAttn a = plan_layer_attn(c->layer, &c->sh);
	a.tp = tp_of(c);
	float *g[4];
	wb_params(c, c->grad, g);
	tk_attn_bwd_w(&a, F32(c->x), SAVED(c, ATTN_ATT), F32(c->dy), HELD(c, ATTN_DQKV),
	              g[ATTN_WQKV], g[ATTN_BQKV], g[ATTN_WO], g[ATTN_BO]);
	return RT_OK;
}

/* mlp: gelu between two projections. */
static int mlp_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	float *w[4];
	wb_params(c, c->param, w);
	tk_mlp_fwd(F32(c->x), w[MLP_W1], w[MLP_B1], w[MLP_W2], once(c, w[MLP_B2]), SAVED(c, MLP_H),
	           SAVED(c, MLP_A), F32(c->y), c->rows, c->layer->in, c->layer->hidden / tp_of(c));
	return RT_OK;
}

static int mlp_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	float *w[4];
	wb_params(c, c->param, w);
	tk_mlp_bwd_in(w[MLP_W1], w[MLP_W2], SAVED(c, MLP_H), F32(c->dy), HELD(c, MLP_DH),
	              F32(c->dx), c->rows, c->layer->in, c->layer->hidden / tp_of(c));
	return RT_OK;
}

static int mlp_bwd_w(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	float *g[4];
	wb_params(c, c->grad, g);
	tk_mlp_bwd_w(F32(c->x), SAVED(c, MLP_A), F32(c->dy), HELD(c, MLP_DH), g[MLP_W1], g[MLP_B1],
	             g[MLP_W2], g[MLP_B2], c->rows, c->layer->in, c->layer->hidden / tp_of(c));
	return RT_OK;
}

/* swiglu: silu(x wg) * (x wu), then wd. */
static int swiglu_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_swiglu_fwd(F32(c->x), PARAM(c, SWIGLU_WG), PARAM(c, SWIGLU_WU), PARAM(c, SWIGLU_WD),
	              SAVED(c, SWIGLU_G), SAVED(c, SWIGLU_U), SAVED(c, SWIGLU_A), F32(c->y),
	              c->rows, c->layer->in, c->layer->hidden / tp_of(c));
	return RT_OK;
}

static int swiglu_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_swiglu_bwd_in(PARAM(c, SWIGLU_WG), PARAM(c, SWIGLU_WU), PARAM(c, SWIGLU_WD),
	                 SAVED(c, SWIGLU_G), SAVED(c, SWIGLU_U), F32(c->dy), HELD(c, SWIGLU_DG),
	                 HELD(c, SWIGLU_DU), F32(c->dx), c->rows, c->layer->in,
	                 c->layer->hidden / tp_of(c));
	return RT_OK;
}

static int swiglu_bwd_w(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_swiglu_bwd_w(F32(c->x), SAVED(c, SWIGLU_A), F32(c->dy), HELD(c, SWIGLU_DG),
	                HELD(c, SWIGLU_DU), GRAD(c, SWIGLU_WG), GRAD(c, SWIGLU_WU),
	                GRAD(c, SWIGLU_WD), c->rows, c->layer->in, c->layer->hidden / tp_of(c));
	return RT_OK;
}

/* geglu: gelu(x wg) * (x wu), then wd; swiglu's tensors, and its W. */
static int geglu_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_geglu_fwd(F32(c->x), PARAM(c, SWIGLU_WG), PARAM(c, SWIGLU_WU), PARAM(c, SWIGLU_WD),
	             SAVED(c, SWIGLU_G), SAVED(c, SWIGLU_U), SAVED(c, SWIGLU_A), F32(c->y), c->rows,
	             c->layer->in, c->layer->hidden / tp_of(c));
	return RT_OK;
}

static int geglu_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_geglu_bwd_in(PARAM(c, SWIGLU_WG), PARAM(c, SWIGLU_WU), PARAM(c, SWIGLU_WD),
	                SAVED(c, SWIGLU_G), SAVED(c, SWIGLU_U), F32(c->dy), HELD(c, SWIGLU_DG),
	                HELD(c, SWIGLU_DU), F32(c->dx), c->rows, c->layer->in,
	                c->layer->hidden / tp_of(c));
	return RT_OK;
}

/* head: logits = x wv^T (wv the embedding's table when tied). */
static int head_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_head_fwd(F32(c->x), PARAM(c, HEAD_WV), F32(c->y), c->rows, c->layer->in,
	            c->layer->out / tp_of(c));
	return RT_OK;
}

static int head_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_head_bwd_in(PARAM(c, HEAD_WV), F32(c->dy), F32(c->dx), c->rows, c->layer->in,
	               c->layer->out / tp_of(c));
	return RT_OK;
}

static int head_bwd_w(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	tk_head_bwd_w(F32(c->x), F32(c->dy), GRAD(c, HEAD_WV), c->rows, c->layer->in,
	              c->layer->out / tp_of(c));
	return RT_OK;
}

/* xent: mean cross-entropy of the rows against their next tokens, into loss[slot].  At
 * tp > 1 (vocabulary-parallel) F writes the local row maxima into y's row 0 and keeps
 * the targets; tp_fwd finishes after the model's all-reduces (rt_backend.h).  A padded
 * vocabulary's columns (from plan_vocab_real on) are left out of the softmax. */
static int xent_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	if (c->slot < 0 || c->slot >= c->loss->cols)
		return rt_error(r, "internal: loss slot %d of %lld", c->slot, (long long)c->loss->cols);
	int64_t V = plan_vocab_real(&c->sh), n = c->layer->in / tp_of(c);
	int32_t *ids = token_ids(r, c->target, V, "target token");
	if (!ids)
		return RT_EFAIL;
	memcpy(SAVED(c, XENT_TARGETS), F32(c->target), (size_t)c->target->bytes);
	if (tp_of(c) > 1) {
		tk_xent_tp_max(F32(c->x), F32(c->y), c->rows, V, c->tp_rank * n, n);
		free(ids);
		return RT_OK;
	}
	double loss = 0;
	tk_xent_fwd(F32(c->x), ids, SAVED(c, XENT_LSE), &loss, c->rows, V, c->layer->in);
	free(ids);
	F32(c->loss)[c->slot] = (float)loss;
	return RT_OK;
}

static int xent_tp_fwd(RtRank *r, const RtLayerCall *c)
{
	int64_t N = c->rows, n = c->layer->in / tp_of(c);
	float *y = F32(c->y);
	if (c->phase == 2) {
		double loss = 0;
		tk_xent_tp_end(y, y + N, y + 2 * N, SAVED(c, XENT_LSE), &loss, N);
		F32(c->loss)[c->slot] = (float)loss;
		return RT_OK;
	}
	int64_t V = plan_vocab_real(&c->sh);
	int32_t *ids = token_ids(r, c->saved[XENT_TARGETS], V, "target token");
	if (!ids)
		return RT_EFAIL;
	tk_xent_tp_sums(F32(c->x), ids, y, y + N, y + 2 * N, N, V, c->tp_rank * n, n);
	free(ids);
	return RT_OK;
}

static int xent_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t V = plan_vocab_real(&c->sh), n = c->layer->in / tp_of(c);
	int32_t *ids = token_ids(r, c->saved[XENT_TARGETS], V, "target token");
	if (!ids)
		return RT_EFAIL;
	tk_xent_tp_bwd(F32(c->x), ids, SAVED(c, XENT_LSE), c->scale, F32(c->dx), c->rows, V,
	               c->tp_rank * n, n);
	free(ids);
	return RT_OK;
}

/* dropout: y = x * mask / (1 - P) with the mask drawn from the call's key (tk_drop),
 * kept for B (none at P = 0: the identity). */
static int dropout_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	TkDrop dr = tk_drop(c->layer->drop, c->key);
	tk_dropout_fwd(&dr, F32(c->x), c->nsaved ? MASK(c, DROPOUT_MASK) : NULL, F32(c->y),
	               c->rows * c->layer->in, (uint64_t)(c->row0 * c->layer->in));
	return RT_OK;
}

static int dropout_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	TkDrop dr = tk_drop(c->layer->drop, c->key);
	tk_dropout_bwd(&dr, c->nsaved ? MASK(c, DROPOUT_MASK) : NULL, F32(c->dy), F32(c->dx),
	               c->rows * c->layer->in);
	return RT_OK;
}

/* squared_relu: y = relu(x)^2 (So et al. 2021, "Primer"; Nemotron-4's MLP activation);
 * dy/dx = 2 relu(x), continuous at 0 unlike relu's.  Keeps x (no tensors of its own). */
static int squared_relu_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x);
	float *o = F32(c->y);
	for (int64_t i = 0, n = c->rows * c->layer->in; i < n; i++) {
		float p = a[i] > 0 ? a[i] : 0;
		o[i] = p * p;
	}
	return RT_OK;
}

static int squared_relu_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x), *g = F32(c->dy);
	float *o = F32(c->dx);
	for (int64_t i = 0, n = c->rows * c->layer->in; i < n; i++) {
		float p = a[i] > 0 ? a[i] : 0;
		o[i] = (2.0f * p) * g[i]; // the cuda row's order: the same bits
	}
	return RT_OK;
}

const RtLayerKernels rt_cpu_layers[LAYER_COUNT] = {
	[LAYER_LINEAR] = {linear_fwd, linear_bwd_in, linear_bwd_w},
	[LAYER_RELU] = {relu_fwd, relu_bwd_in, NULL},
	[LAYER_GELU] = {gelu_fwd, gelu_bwd_in, NULL},
	[LAYER_MSE] = {mse_fwd, mse_bwd_in, NULL},
	[LAYER_EMBED] = {embed_fwd, NULL, embed_bwd_w},
	[LAYER_LAYERNORM] = {layernorm_fwd, layernorm_bwd_in, layernorm_bwd_w},
	[LAYER_RMSNORM] = {rmsnorm_fwd, rmsnorm_bwd_in, rmsnorm_bwd_w},
	[LAYER_ATTN] = {attn_fwd, attn_bwd_in, attn_bwd_w, NULL, attn_rebuild},
	[LAYER_MLP] = {mlp_fwd, mlp_bwd_in, mlp_bwd_w},
	[LAYER_SWIGLU] = {swiglu_fwd, swiglu_bwd_in, swiglu_bwd_w},
	[LAYER_HEAD] = {head_fwd, head_bwd_in, head_bwd_w},
	[LAYER_XENT] = {xent_fwd, xent_bwd_in, NULL, xent_tp_fwd},
	[LAYER_GEGLU] = {geglu_fwd, geglu_bwd_in, swiglu_bwd_w},
	[LAYER_DROPOUT] = {dropout_fwd, dropout_bwd_in, NULL},
	[LAYER_SQUARED_RELU] = {squared_relu_fwd, squared_relu_bwd_in, NULL},
};
