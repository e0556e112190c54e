/* The tensors of each layer kind: its parameters (with their initial values), what F
 * saves for B and W, what B holds for W, and B's scratch, for a microbatch of a given
 * shape (rt_backend.h, "Layers").  One row per kind, shared by every device, so the
 * cpu reference and the cuda kernels compute into the same tensors; the model checks
 * each row's figures against the layer table (plan/layer.c) when it opens a plan.  A
 * kind without a row keeps nothing but its input (relu, gelu, mse) or is the model's
 * own (residual). */
#include "rt_private.h"

#include "../plan/tfcount.h"

#include <string.h>

#define HAS(ly, key) (((ly)->flags & LAYER_FLAG(LAYER_KEY_##key)) != 0)

static void add_shape(RtShape *list, int *n, int64_t rows, int64_t cols, RtInit init)
{
	list[(*n)++] = (RtShape){rows, cols, init};
}

/* The last parameter added is cut along axis into segments seg[0..nseg) (whole lengths). */
static void split(RtLayerTensors *t, int tp, RtSplitAxis axis, int nseg, const int64_t *seg)
{
	if (tp <= 1)
		return;
	RtSplit *s = &t->split[t->nparams - 1];
	s->axis = (uint8_t)axis;
	s->nseg = (uint8_t)nseg;
	for (int i = 0; i < nseg; i++)
		s->seg[i] = seg[i];
}

/* linear: w in x out (row-major), b 1 x out. */
static void linear_shapes(const PlanLayer *ly, const LayerShape *sh, int tp, RtLayerTensors *t)
{
	(void)sh, (void)tp; // replicated
	t->nparams = 2;
	t->param[0] = (RtShape){ly->in, ly->out, RT_INIT_UNIFORM};
	t->param[1] = (RtShape){1, ly->out, RT_INIT_ZERO};
}

/* embed: wte V x d (+ wpe S x d).  Only ever the first layer: no input gradient.  At
 * tp > 1 a rank holds V / tp rows of wte, the positions whole. */
static void embed_shapes(const PlanLayer *ly, const LayerShape *sh, int tp, RtLayerTensors *t)
{
	add_shape(t->param, &t->nparams, sh->vocab / tp, ly->out, RT_INIT_UNIFORM);
	split(t, tp, RT_SPLIT_ROWS, 1, &sh->vocab);
	if (HAS(ly, POSITIONS))
		add_shape(t->param, &t->nparams, sh->seq, ly->out, RT_INIT_UNIFORM);
}

/* layernorm: gain and bias 1 x d; saves mean and rstd per row. */
static void layernorm_shapes(const PlanLayer *ly, const LayerShape *sh, int tp, RtLayerTensors *t)
{
	(void)tp; // replicated
	add_shape(t->param, &t->nparams, 1, ly->in, RT_INIT_ONE);
	add_shape(t->param, &t->nparams, 1, ly->in, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, 1, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, 1, RT_INIT_ZERO);
}

/* rmsnorm: gain 1 x d; saves rstd per row. */
static void rmsnorm_shapes(const PlanLayer *ly, const LayerShape *sh, int tp, RtLayerTensors *t)
{
	(void)tp; // replicated
	add_shape(t->param, &t->nparams, 1, ly->in, RT_INIT_ONE);
	add_shape(t->saved, &t->nsaved, sh->rows, 1, RT_INIT_ZERO);
}

/* attention: wqkv d x nqkv (+ bqkv), wo d x d (+ bo); saves qkv, P and the heads'
 * output; B holds dqkv and needs a workspace.  At tp > 1 a rank has H / tp query and
 * Hkv / tp key/value heads: the columns of its heads in each of q, k and v of wqkv and
 * bqkv, the matching rows of wo; bo whole. */
static void attn_shapes(const PlanLayer *ly, const LayerShape *sh, int tp, RtLayerTensors *t)
{
	TkAttn a = plan_layer_attn(ly, sh);
	int64_t d = ly->in, nqkv = tk_attn_nqkv(&a) / tp, hd = d / a.H;
	int64_t seg[3] = {a.H * hd, a.Hkv * hd, a.Hkv * hd};
	add_shape(t->param, &t->nparams, d, nqkv, RT_INIT_UNIFORM);
	split(t, tp, RT_SPLIT_COLS, 3, seg);
	if (HAS(ly, BIAS)) {
		add_shape(t->param, &t->nparams, 1, nqkv, RT_INIT_ZERO);
		split(t, tp, RT_SPLIT_COLS, 3, seg);
	}
	add_shape(t->param, &t->nparams, d / tp, d, RT_INIT_UNIFORM);
	split(t, tp, RT_SPLIT_ROWS, 1, &d);
	if (HAS(ly, BIAS))
		add_shape(t->param, &t->nparams, 1, d, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, nqkv, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, a.B * (a.H / tp) * a.S, a.S, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, d / tp, RT_INIT_ZERO);
	add_shape(t->held, &t->nheld, sh->rows, nqkv, RT_INIT_ZERO);
	t->work = (RtShape){1, tk_attn_workspace(&a), RT_INIT_ZERO};
}

/* mlp: w1 d x f (+ b1), w2 f x d (+ b2); saves h and gelu(h); B holds dh.  At tp > 1
 * a rank holds f / tp columns of w1 and b1, the matching rows of w2; b2 whole. */
static void mlp_shapes(const PlanLayer *ly, const LayerShape *sh, int tp, RtLayerTensors *t)
{
	int64_t d = ly->in, whole = ly->hidden, f = whole / tp;
	add_shape(t->param, &t->nparams, d, f, RT_INIT_UNIFORM);
	split(t, tp, RT_SPLIT_COLS, 1, &whole);
	if (HAS(ly, BIAS)) {
		add_shape(t->param, &t->nparams, 1, f, RT_INIT_ZERO);
		split(t, tp, RT_SPLIT_COLS, 1, &whole);
	}
	add_shape(t->param, &t->nparams, f, d, RT_INIT_UNIFORM);
	split(t, tp, RT_SPLIT_ROWS, 1, &whole);
	if (HAS(ly, BIAS))
		add_shape(t->param, &t->nparams, 1, d, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, f, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, f, RT_INIT_ZERO);
	add_shape(t->held, &t->nheld, sh->rows, f, RT_INIT_ZERO);
}

/* swiglu: wg, wu d x f, wd f x d; saves g, u, silu(g) u; B holds dg and du.  At tp > 1
 * a rank holds f / tp columns of wg and wu, the matching rows of wd. */
static void swiglu_shapes(const PlanLayer *ly, const LayerShape *sh, int tp, RtLayerTensors *t)
{
	int64_t d = ly->in, whole = ly->hidden, f = whole / tp;
	for (int i = 0; i < 2; i++) {
		add_shape(t->param, &t->nparams, d, f, RT_INIT_UNIFORM);
		split(t, tp, RT_SPLIT_COLS, 1, &whole);
	}
	add_shape(t->param, &t->nparams, f, d, RT_INIT_UNIFORM);
	split(t, tp, RT_SPLIT_ROWS, 1, &whole);
	for (int i = 0; i < 3; i++)
		add_shape(t->saved, &t->nsaved, sh->rows, f, RT_INIT_ZERO);
	for (int i = 0; i < 2; i++)
		add_shape(t->held, &t->nheld, sh->rows, f, RT_INIT_ZERO);
}

/* head: wv V x d, logits = x wv^T; tied, wv is the embedding's (borrowed, see
 * rt_backend.h), so the layer lays out nothing of its own, unless it is on another
 * pipeline rank (`copy`): then wv is its own copy of the table.  At tp > 1 a rank holds
 * V / tp rows of wv (the embedding's rows when tied) and gives their logits. */
static void head_shapes(const PlanLayer *ly, const LayerShape *sh, int tp, RtLayerTensors *t)
{
	add_shape(t->param, &t->nparams, sh->vocab / tp, ly->in, RT_INIT_UNIFORM);
	split(t, tp, RT_SPLIT_ROWS, 1, &sh->vocab);
	t->out = sh->vocab / tp; // its slice of the logits
	t->copy = HAS(ly, TIED) && HAS(ly, COPY);
	t->borrowed = HAS(ly, TIED) && !t->copy;
}

/* xent: saves each row's log-sum-exp and its target.  At tp > 1 its input is the
 * head's slice of the logits (vocabulary-parallel). */
static void xent_shapes(const PlanLayer *ly, const LayerShape *sh, int tp, RtLayerTensors *t)
{
	t->in = ly->in / tp;
	add_shape(t->saved, &t->nsaved, sh->rows, 1, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, 1, RT_INIT_ZERO);
}

const RtLayerShapeFn rt_layer_shapes[LAYER_COUNT] = {
	[LAYER_LINEAR] = linear_shapes,
	[LAYER_EMBED] = embed_shapes,
	[LAYER_LAYERNORM] = layernorm_shapes,
	[LAYER_RMSNORM] = rmsnorm_shapes,
	[LAYER_ATTN] = attn_shapes,
	[LAYER_MLP] = mlp_shapes,
	[LAYER_SWIGLU] = swiglu_shapes,
	[LAYER_HEAD] = head_shapes,
	[LAYER_XENT] = xent_shapes,
};

void rt_layer_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, RtLayerTensors *t)
{
	memset(t, 0, sizeof *t);
	if (rt_layer_shapes[ly->kind])
		rt_layer_shapes[ly->kind](ly, sh, tp > 1 ? tp : 1, t);
	if (!t->in)
		t->in = ly->in;
	if (!t->out)
		t->out = ly->out;
}

/* Walks the split axis segment by segment: piece t of segment k starts t * len into it
 * in the whole, and after the pieces of the segments before it in the rank's shard. */
void rt_split_copy(const RtShape *piece, const RtSplit *sp, int tp, int t, const float *whole,
                   float *out)
{
	if (sp->axis == RT_SPLIT_NONE || tp <= 1) {
		memcpy(out, whole, (size_t)(piece->rows * piece->cols) * sizeof(float));
		return;
	}
	int64_t wcols = sp->axis == RT_SPLIT_COLS ? 0 : piece->cols;
	for (int k = 0; k < sp->nseg && sp->axis == RT_SPLIT_COLS; k++)
		wcols += sp->seg[k];
	int64_t at = 0, from = 0; // along the axis: in the piece, in the whole
	for (int k = 0; k < sp->nseg; k++) {
		int64_t len = sp->seg[k] / tp, src = from + (int64_t)t * len;
		for (int64_t i = 0; i < len; i++)
			if (sp->axis == RT_SPLIT_ROWS)
				memcpy(out + (at + i) * piece->cols, whole + (src + i) * wcols,
				       (size_t)piece->cols * sizeof(float));
			else
				for (int64_t r = 0; r < piece->rows; r++)
					out[r * piece->cols + at + i] = whole[r * wcols + src + i];
		at += len;
		from += sp->seg[k];
	}
}
