/* The layer table: one row per LayerKind, with the functions that give each kind's
 * figures.  Every figure is per microbatch of `rows` rows and in f32 (4 bytes).
 *
 * Memory convention (docs/semantics.md "Memory"): every layer keeps its input for the
 * backward pass, a layer with weights until W (save_fw), one without until B (save_fb);
 * a layer with weights also keeps its output gradient from B to W (save_bw).  FLOPs
 * count a multiply-add as two; elementwise layers count as free, as they always have
 * for the derived costs. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "layer.h"

static void linear_cost(int64_t rows, int64_t in, int64_t out, LayerCost *c)
{
	c->params = in * out + out;
	c->save_fw = rows * in * 4;
	c->save_bw = rows * out * 4;
	double gemm = 2.0 * (double)rows * (double)in * (double)out;
	c->flops[0] = c->flops[1] = c->flops[2] = gemm;
}

/* Elementwise, no weights: keeps its input from F to B. */
static void elementwise_cost(int64_t rows, int64_t in, int64_t out, LayerCost *c)
{
	(void)out;
	c->save_fb = rows * in * 4;
}

const LayerInfo plan_layers[LAYER_COUNT] = {
	[LAYER_LINEAR] = {"linear", "linear", LAYER_ARG_WIDTH, "linear 512", 0, linear_cost},
	[LAYER_RELU] = {"relu", "relu", LAYER_ARG_NONE, "relu", 0, elementwise_cost},
	[LAYER_GELU] = {"gelu", "gelu", LAYER_ARG_NONE, "gelu", 0, elementwise_cost},
	[LAYER_MSE] = {"mse", "loss", LAYER_ARG_NAME, "loss mse", 1, elementwise_cost},
};

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

int plan_layer_out(LayerKind k, int in, int width_arg)
{
	return plan_layers[k].arg == LAYER_ARG_WIDTH ? width_arg : in;
}

LayerCost plan_layer_cost(LayerKind k, int64_t rows, int in, int out)
{
	LayerCost c = {0};
	plan_layers[k].cost(rows, in, out, &c);
	return c;
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
