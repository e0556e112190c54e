/* The tensors of each layer kind: its parameters (with their initial values), what F
 * saves for B and W, what B holds for W, and B's scratch, for a microbatch of a given
 * shape (rt_backend.h, "Layers").  One row per kind, shared by every device, so the
 * cpu reference and the cuda kernels compute into the same tensors; the model checks
 * each row's figures against the layer table (plan/layer.c) when it opens a plan.  A
 * kind without a row keeps nothing but its input (relu, gelu, mse) or is the model's
 * own (residual). */
#include "rt_private.h"

#include "../plan/tfcount.h"

#define HAS(ly, key) (((ly)->flags & LAYER_FLAG(LAYER_KEY_##key)) != 0)

static void add_shape(RtShape *list, int *n, int64_t rows, int64_t cols, RtInit init)
{
	list[(*n)++] = (RtShape){rows, cols, init};
}

/* linear: w in x out (row-major), b 1 x out. */
static void linear_shapes(const PlanLayer *ly, const LayerShape *sh, RtLayerTensors *t)
{
	(void)sh;
	t->nparams = 2;
	t->param[0] = (RtShape){ly->in, ly->out, RT_INIT_UNIFORM};
	t->param[1] = (RtShape){1, ly->out, RT_INIT_ZERO};
}

/* embed: wte V x d (+ wpe S x d).  Only ever the first layer: no input gradient. */
static void embed_shapes(const PlanLayer *ly, const LayerShape *sh, RtLayerTensors *t)
{
	add_shape(t->param, &t->nparams, sh->vocab, ly->out, RT_INIT_UNIFORM);
	if (HAS(ly, POSITIONS))
		add_shape(t->param, &t->nparams, sh->seq, ly->out, RT_INIT_UNIFORM);
}

/* layernorm: gain and bias 1 x d; saves mean and rstd per row. */
static void layernorm_shapes(const PlanLayer *ly, const LayerShape *sh, RtLayerTensors *t)
{
	add_shape(t->param, &t->nparams, 1, ly->in, RT_INIT_ONE);
	add_shape(t->param, &t->nparams, 1, ly->in, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, 1, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, 1, RT_INIT_ZERO);
}

/* rmsnorm: gain 1 x d; saves rstd per row. */
static void rmsnorm_shapes(const PlanLayer *ly, const LayerShape *sh, RtLayerTensors *t)
{
	add_shape(t->param, &t->nparams, 1, ly->in, RT_INIT_ONE);
	add_shape(t->saved, &t->nsaved, sh->rows, 1, RT_INIT_ZERO);
}

/* attention: wqkv d x nqkv (+ bqkv), wo d x d (+ bo); saves qkv, P and the heads'
 * output; B holds dqkv and needs a workspace. */
static void attn_shapes(const PlanLayer *ly, const LayerShape *sh, RtLayerTensors *t)
{
	TkAttn a = plan_layer_attn(ly, sh);
	int64_t d = ly->in, nqkv = tk_attn_nqkv(&a);
	add_shape(t->param, &t->nparams, d, nqkv, RT_INIT_UNIFORM);
	if (HAS(ly, BIAS))
		add_shape(t->param, &t->nparams, 1, nqkv, RT_INIT_ZERO);
	add_shape(t->param, &t->nparams, d, d, RT_INIT_UNIFORM);
	if (HAS(ly, BIAS))
		add_shape(t->param, &t->nparams, 1, d, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, nqkv, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, a.B * a.H * a.S, a.S, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, d, RT_INIT_ZERO);
	add_shape(t->held, &t->nheld, sh->rows, nqkv, RT_INIT_ZERO);
	t->work = (RtShape){1, tk_attn_workspace(&a), RT_INIT_ZERO};
}

/* mlp: w1 d x f (+ b1), w2 f x d (+ b2); saves h and gelu(h); B holds dh. */
static void mlp_shapes(const PlanLayer *ly, const LayerShape *sh, RtLayerTensors *t)
{
	int64_t d = ly->in, f = ly->hidden;
	add_shape(t->param, &t->nparams, d, f, RT_INIT_UNIFORM);
	if (HAS(ly, BIAS))
		add_shape(t->param, &t->nparams, 1, f, RT_INIT_ZERO);
	add_shape(t->param, &t->nparams, f, d, RT_INIT_UNIFORM);
	if (HAS(ly, BIAS))
		add_shape(t->param, &t->nparams, 1, d, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, f, RT_INIT_ZERO);
	add_shape(t->saved, &t->nsaved, sh->rows, f, RT_INIT_ZERO);
	add_shape(t->held, &t->nheld, sh->rows, f, RT_INIT_ZERO);
}

/* swiglu: wg, wu d x f, wd f x d; saves g, u, silu(g) u; B holds dg and du. */
static void swiglu_shapes(const PlanLayer *ly, const LayerShape *sh, RtLayerTensors *t)
{
	int64_t d = ly->in, f = ly->hidden;
	add_shape(t->param, &t->nparams, d, f, RT_INIT_UNIFORM);
	add_shape(t->param, &t->nparams, d, f, RT_INIT_UNIFORM);
	add_shape(t->param, &t->nparams, f, d, RT_INIT_UNIFORM);
	for (int i = 0; i < 3; i++)
		add_shape(t->saved, &t->nsaved, sh->rows, f, RT_INIT_ZERO);
	for (int i = 0; i < 2; i++)
		add_shape(t->held, &t->nheld, sh->rows, f, RT_INIT_ZERO);
}

/* head: wv V x d, logits = x wv^T; tied, wv is the embedding's (borrowed, see
 * rt_backend.h), so the layer lays out nothing of its own, unless it is on another
 * pipeline rank (`copy`): then wv is its own copy of the table. */
static void head_shapes(const PlanLayer *ly, const LayerShape *sh, RtLayerTensors *t)
{
	add_shape(t->param, &t->nparams, sh->vocab, ly->in, RT_INIT_UNIFORM);
	t->copy = HAS(ly, TIED) && HAS(ly, COPY);
	t->borrowed = HAS(ly, TIED) && !t->copy;
}

/* xent: saves each row's log-sum-exp and its target. */
static void xent_shapes(const PlanLayer *ly, const LayerShape *sh, RtLayerTensors *t)
{
	(void)ly;
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
