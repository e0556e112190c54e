/* The layer table: one row per LayerKind, with the functions that give each kind's
 * figures.  Every figure is per microbatch (LayerShape) and in f32 (4 bytes).
 *
 * Memory convention (docs/semantics.md "Memory"): every layer keeps its input for the
 * backward pass, a layer with weights until W (save_fw), one without until B (save_fb);
 * a layer with weights also keeps its output gradient from B to W (save_bw).  The
 * transformer kinds add what their kernels save in F (tk_mem_*'s saved, to save_fw, or to
 * save_fb without weights) and hold from B to W (held, to save_bw).  FLOPs count a
 * multiply-add as two; elementwise layers count as free, as they always have for the
 * derived costs.  Parameter, FLOP and memory formulas of the transformer kinds are
 * tfcount.c's, so the table and the kernels cannot disagree. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "layer.h"
#include "tfcount.h"

const LayerKeyInfo plan_layer_keys[LAYER_KEY_COUNT] = {
	[LAYER_KEY_HEADS] = {"heads", 1},
	[LAYER_KEY_KV_HEADS] = {"kv_heads", 1},
	[LAYER_KEY_BIAS] = {"bias", 0},
	[LAYER_KEY_ROPE] = {"rope", 0},
	[LAYER_KEY_TIED] = {"tied", 0},
	[LAYER_KEY_POSITIONS] = {"positions", 0},
	[LAYER_KEY_COPY] = {"copy", 0},
};

static int has(const PlanLayer *l, LayerKey k)
{
	return (l->flags & LAYER_FLAG(k)) != 0;
}

static void linear_cost(const PlanLayer *l, const LayerShape *sh, int tp, LayerCost *c)
{
	(void)tp; // replicated on a tp group
	c->params = tk_params_linear(l->in, l->out, 1);
	c->save_fw = sat_mul(sat_mul(sh->rows, l->in), 4);
	c->save_bw = sat_mul(sat_mul(sh->rows, l->out), 4);
	TkFlops f = tk_flops_linear(sh->rows, l->in, l->out);
	c->flops[0] = (double)f.f;
	c->flops[1] = (double)f.b;
	c->flops[2] = (double)f.w;
}

/* Elementwise, no weights: keeps its input from F to B. */
static void elementwise_cost(const PlanLayer *l, const LayerShape *sh, int tp, LayerCost *c)
{
	(void)tp;
	c->save_fb = sat_mul(sat_mul(sh->rows, l->in), 4);
}

/* A layer with weights: its input (in_w wide on this rank) and what F saves until W, its
 * output gradient (out_w wide) and what B holds from B to W. */
static void weighted(const LayerShape *sh, int64_t in_w, int64_t out_w, int64_t params,
                     TkMem m, TkFlops f, LayerCost *c)
{
	c->params = params;
	c->save_fw = sat_mul(sat_add(sat_mul(sh->rows, in_w), m.saved), 4);
	c->save_bw = sat_mul(sat_add(sat_mul(sh->rows, out_w), m.held), 4);
	c->flops[0] = (double)f.f;
	c->flops[1] = (double)f.b;
	c->flops[2] = (double)f.w;
}

/* The tp all-reduces around a split layer (Megatron's g after a row-parallel output,
 * f before a column-parallel input): fwd and bwd floats per row, none at tp = 1. */
static void tp_reduce(const LayerShape *sh, int tp, int64_t fwd, int64_t bwd, LayerCost *c)
{
	if (tp <= 1)
		return;
	c->tp_bytes[0] = sat_mul(sat_mul(sh->rows, fwd), 4);
	c->tp_bytes[1] = sat_mul(sat_mul(sh->rows, bwd), 4);
}

TkAttn plan_layer_attn(const PlanLayer *l, const LayerShape *sh)
{
	return (TkAttn){sh->batch, sh->seq, l->in, l->heads, l->kv_heads ? l->kv_heads : l->heads,
	                has(l, LAYER_KEY_ROPE), 10000.0, 1};
}

/* Vocabulary-parallel: each rank looks up the tokens of its slice, zeros elsewhere; the
 * forward all-reduce sums the slices. */
static void embed_cost(const PlanLayer *l, const LayerShape *sh, int tp, LayerCost *c)
{
	weighted(sh, l->in, l->out,
	         tk_params_embed_tp(sh->vocab, l->out, sh->seq, has(l, LAYER_KEY_POSITIONS), tp),
	         tk_mem_embed(sh->rows), (TkFlops){0, 0, 0}, c);
	tp_reduce(sh, tp, l->out, 0, c);
}

static void layernorm_cost(const PlanLayer *l, const LayerShape *sh, int tp, LayerCost *c)
{
	(void)tp;
	weighted(sh, l->in, l->out, tk_params_layernorm(l->in), tk_mem_layernorm(sh->rows),
	         (TkFlops){0, 0, 0}, c);
}

static void rmsnorm_cost(const PlanLayer *l, const LayerShape *sh, int tp, LayerCost *c)
{
	(void)tp;
	weighted(sh, l->in, l->out, tk_params_rmsnorm(l->in), tk_mem_rmsnorm(sh->rows),
	         (TkFlops){0, 0, 0}, c);
}

static void attn_cost(const PlanLayer *l, const LayerShape *sh, int tp, LayerCost *c)
{
	TkAttn a = plan_layer_attn(l, sh);
	weighted(sh, l->in, l->out, tk_params_attn_tp(&a, has(l, LAYER_KEY_BIAS), tp),
	         tk_mem_attn_tp(&a, tp), tk_flops_attn_tp(&a, tp), c);
	tp_reduce(sh, tp, l->out, l->in, c);
}

static void mlp_cost(const PlanLayer *l, const LayerShape *sh, int tp, LayerCost *c)
{
	weighted(sh, l->in, l->out, tk_params_mlp_tp(l->in, l->hidden, has(l, LAYER_KEY_BIAS), tp),
	         tk_mem_mlp_tp(sh->rows, l->hidden, tp),
	         tk_flops_mlp_tp(sh->rows, l->in, l->hidden, tp), c);
	tp_reduce(sh, tp, l->out, l->in, c);
}

static void swiglu_cost(const PlanLayer *l, const LayerShape *sh, int tp, LayerCost *c)
{
	weighted(sh, l->in, l->out, tk_params_swiglu_tp(l->in, l->hidden, tp),
	         tk_mem_swiglu_tp(sh->rows, l->hidden, tp),
	         tk_flops_swiglu_tp(sh->rows, l->in, l->hidden, tp), c);
	tp_reduce(sh, tp, l->out, l->in, c);
}

/* y = x + f(x): saves nothing, costs nothing; f's layers count for themselves. */
static void residual_cost(const PlanLayer *l, const LayerShape *sh, int tp, LayerCost *c)
{
	(void)l, (void)sh, (void)tp, (void)c;
}

/* Column-parallel over the vocabulary: each rank's logits are its slice; the backward
 * all-reduce sums the input gradients of the slices.  A tied head counts no parameters
 * of its own, unless it keeps a copy of the table on another pipeline rank (`copy`):
 * then its stage holds, steps and stores the copy. */
static void head_cost(const PlanLayer *l, const LayerShape *sh, int tp, LayerCost *c)
{
	int tied = has(l, LAYER_KEY_TIED) && !has(l, LAYER_KEY_COPY);
	weighted(sh, l->in, l->out / tp, tk_params_head_tp(l->out, l->in, tied, tp),
	         tk_mem_head_tp(sh->rows, l->out, tp), tk_flops_head_tp(sh->rows, l->in, l->out, tp),
	         c);
	tp_reduce(sh, tp, 0, l->in, c);
}

/* No weights: keeps its input (the logits, its slice of them) and what F saves from F to
 * B.  Vocabulary-parallel, it all-reduces three floats per row in the forward: the
 * maximum logit, the sum of exponentials and the target's logit (one op in the plan). */
static void xent_cost(const PlanLayer *l, const LayerShape *sh, int tp, LayerCost *c)
{
	c->save_fb = sat_mul(sat_add(sat_mul(sh->rows, l->in / tp), tk_mem_xent(sh->rows).saved), 4);
	tp_reduce(sh, tp, 3, 0, c);
}

#define K(k) LAYER_FLAG(LAYER_KEY_##k)

const LayerInfo plan_layers[LAYER_COUNT] = {
	[LAYER_LINEAR] = {"linear", "linear", LAYER_ARG_WIDTH, "linear 512", 0, 0, 0, LAYER_OUT_ARG,
	                  LAYER_TP_WHOLE, linear_cost},
	[LAYER_RELU] = {"relu", "relu", LAYER_ARG_NONE, "relu", 0, 0, 0, LAYER_OUT_SAME,
	                LAYER_TP_WHOLE, elementwise_cost},
	[LAYER_GELU] = {"gelu", "gelu", LAYER_ARG_NONE, "gelu", 0, 0, 0, LAYER_OUT_SAME,
	                LAYER_TP_WHOLE, elementwise_cost},
	[LAYER_MSE] = {"mse", "loss", LAYER_ARG_NAME, "loss mse", 1, 0, 0, LAYER_OUT_SAME,
	               LAYER_TP_WHOLE, elementwise_cost},
	[LAYER_EMBED] = {"embed", "embed", LAYER_ARG_WIDTH, "embed 768 positions", 0, K(POSITIONS),
	                 1, LAYER_OUT_ARG, LAYER_TP_VOCAB, embed_cost},
	[LAYER_LAYERNORM] = {"layernorm", "layernorm", LAYER_ARG_NONE, "layernorm", 0, 0, 0,
	                     LAYER_OUT_SAME, LAYER_TP_WHOLE, layernorm_cost},
	[LAYER_RMSNORM] = {"rmsnorm", "rmsnorm", LAYER_ARG_NONE, "rmsnorm", 0, 0, 0, LAYER_OUT_SAME,
	                   LAYER_TP_WHOLE, rmsnorm_cost},
	[LAYER_ATTN] = {"attention", "attention", LAYER_ARG_NONE, "attention heads=12", 0,
	                K(HEADS) | K(KV_HEADS) | K(BIAS) | K(ROPE), 0, LAYER_OUT_SAME,
	                LAYER_TP_HEADS, attn_cost},
	[LAYER_MLP] = {"mlp", "mlp", LAYER_ARG_HIDDEN, "mlp 3072 bias", 0, K(BIAS), 0,
	               LAYER_OUT_SAME, LAYER_TP_HIDDEN, mlp_cost},
	[LAYER_SWIGLU] = {"swiglu", "swiglu", LAYER_ARG_HIDDEN, "swiglu 11008", 0, 0, 0,
	                  LAYER_OUT_SAME, LAYER_TP_HIDDEN, swiglu_cost},
	[LAYER_RESIDUAL] = {"residual", "residual", LAYER_ARG_BODY, "residual { rmsnorm; ... }", 0,
	                    0, 0, LAYER_OUT_SAME, LAYER_TP_WHOLE, residual_cost},
	[LAYER_HEAD] = {"head", "head", LAYER_ARG_NONE, "head tied", 0, K(TIED), 1, LAYER_OUT_VOCAB,
	                LAYER_TP_VOCAB, head_cost},
	[LAYER_XENT] = {"xent", "loss", LAYER_ARG_NAME, "loss xent", 1, 0, 1, LAYER_OUT_SAME,
	                LAYER_TP_VOCAB, xent_cost},
};

#undef K

const LayerInfo *plan_layer(LayerKind k)
{
	return &plan_layers[k];
}

LayerKind plan_layer_find(const char *s, size_t n)
{
	for (int k = 0; k < LAYER_COUNT; k++)
		if (strlen(plan_layers[k].name) == n && !memcmp(s, plan_layers[k].name, n))
			return (LayerKind)k;
	return LAYER_COUNT;
}

LayerKey plan_layer_key_find(const char *s, size_t n)
{
	for (int k = 0; k < LAYER_KEY_COUNT; k++)
		if (strlen(plan_layer_keys[k].name) == n && !memcmp(s, plan_layer_keys[k].name, n))
			return (LayerKey)k;
	return LAYER_KEY_COUNT;
}

int plan_layer_out(LayerKind k, int in, int width_arg)
{
	return plan_layers[k].outw == LAYER_OUT_SAME ? in : width_arg;
}

LayerCost plan_layer_figures(const PlanLayer *l, const LayerShape *sh)
{
	return plan_layer_figures_tp(l, sh, 1);
}

LayerCost plan_layer_cost(LayerKind k, int64_t rows, int in, int out)
{
	PlanLayer l = {.kind = k, .in = in, .out = out};
	LayerShape sh = {rows, rows, 1, 0};
	return plan_layer_figures(&l, &sh);
}
LayerKind plan_layer_parse(const char *word, const char *name)
{
	for (int k = 0; k < LAYER_COUNT; k++) {
		const LayerInfo *l = &plan_layers[k];
		if (!strcmp(l->word, word) && (!name || !strcmp(l->name, name)))
			return (LayerKind)k;
	}
	return LAYER_COUNT;
}

int plan_layer_words(const char *word, const char **out)
{
	int n = 0;
	for (int k = 0; k < LAYER_COUNT; k++) {
		const LayerInfo *l = &plan_layers[k];
		int seen = 0;
		for (int j = 0; j < n && !word; j++)
			seen |= !strcmp(out[j], l->word);
		if (!seen && (!word || !strcmp(l->word, word)))
			out[n++] = word ? l->name : l->word;
	}
	return n;
}

LayerCost plan_layer_figures_tp(const PlanLayer *l, const LayerShape *sh, int tp)
{
	LayerCost c = {0};
	plan_layers[l->kind].cost(l, sh, tp > 1 ? tp : 1, &c);
	return c;
}

const char *plan_cost_uncountable(const LayerCost *c, double *value, double *limit)
{
	const struct {
		const char *what;
		int64_t v;
	} f[] = {{"parameters", c->params},
	         {"saved bytes per microbatch", c->save_fb},
	         {"saved bytes per microbatch", c->save_fw},
	         {"saved bytes per microbatch", c->save_bw},
	         {"tp all-reduce bytes per microbatch", c->tp_bytes[0]},
	         {"tp all-reduce bytes per microbatch", c->tp_bytes[1]}};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		if (f[i].v >= PLAN_COUNT_MAX) {
			*value = (double)f[i].v;
			*limit = (double)PLAN_COUNT_MAX;
			return f[i].what;
		}
	for (int k = 0; k < 3; k++)
		if (!(c->flops[k] < (double)TK_MANY)) { // (double)TK_MANY is 2^63
			*value = c->flops[k];
			*limit = (double)TK_MANY;
			return "FLOPs per microbatch";
		}
	return NULL;
}

char *plan_uncountable_text(char *buf, size_t n, const char *what, double v, double most)
{
	const char *more = v >= (double)TK_MANY ? "more than " : "";
	if (v > most)
		snprintf(buf, n, "%s are %s%.3g, past %.3g, the most the tools count", what, more, v,
		         most);
	else
		snprintf(buf, n, "%s are %s%.3g, the most the tools count", what, more, v);
	return buf;
}

const char *plan_layer_uncountable(const PlanLayer *l, const LayerShape *sh, int tp,
                                   double *value, double *limit)
{
	for (int t = 1; t <= tp; t = t == tp ? tp + 1 : tp) { // whole, then one rank's share
		LayerCost c = plan_layer_figures_tp(l, sh, t);
		const char *what = plan_cost_uncountable(&c, value, limit);
		if (what)
			return what;
	}
	return NULL;
}

void plan_cost_add(LayerCost *sum, const LayerCost *c)
{
	sum->params = sat_add(sum->params, c->params);
	sum->save_fb = sat_add(sum->save_fb, c->save_fb);
	sum->save_fw = sat_add(sum->save_fw, c->save_fw);
	sum->save_bw = sat_add(sum->save_bw, c->save_bw);
	for (int k = 0; k < 3; k++)
		sum->flops[k] += c->flops[k];
	for (int d = 0; d < 2; d++)
		sum->tp_bytes[d] = sat_add(sum->tp_bytes[d], c->tp_bytes[d]);
}

const char *plan_layer_tp_check(const PlanLayer *l, const LayerShape *sh, int tp, char *buf,
                                size_t n)
{
	if (tp <= 1)
		return NULL;
	switch (plan_layers[l->kind].tp) {
	case LAYER_TP_HEADS:
		if (l->heads % tp)
			snprintf(buf, n, "the number of heads (%d)", l->heads);
		else if (l->kv_heads % tp)
			snprintf(buf, n, "the number of key/value heads (%d)", l->kv_heads);
		else
			return NULL;
		return buf;
	case LAYER_TP_HIDDEN:
		if (l->hidden % tp == 0)
			return NULL;
		snprintf(buf, n, "the hidden width (%d)", l->hidden);
		return buf;
	case LAYER_TP_VOCAB:
		if (sh->vocab % tp == 0)
			return NULL;
		snprintf(buf, n, "the vocabulary (%lld)", (long long)sh->vocab);
		return buf;
	case LAYER_TP_WHOLE:
	case LAYER_TP_COUNT:
		break;
	}
	return NULL;
}
