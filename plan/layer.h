/* The layer kinds: one row per kind, read by every tool.
 *
 * A row says how the language spells the layer, what it takes, and what it costs: its
 * output width, parameter count, saved bytes per microbatch and FLOPs of F, B and W.
 * The checker (words, arguments, widths, FLOPs), the lowering (parameters, saved bytes)
 * and the runtime's model (the cross-check of the plan) read these rows and restate
 * nothing.  Adding a kind: its enum member here, its row in layer.c, its kernels in the
 * runtime, its test (docs/architecture.md, "Adding a layer kind"). */
#ifndef PLAN_LAYER_H
#define PLAN_LAYER_H

#include <stdint.h>

typedef enum {
	LAYER_LINEAR, // dense layer with bias, in -> out
	LAYER_RELU,   // elementwise max(x, 0)
	LAYER_GELU,   // elementwise gelu (tanh approximation)
	LAYER_MSE,    // mean squared error loss against a synthetic target
	LAYER_COUNT
} LayerKind;

/* What follows a layer's word in a .pipe stage. */
typedef enum {
	LAYER_ARG_NONE,  // nothing: `relu;`
	LAYER_ARG_WIDTH, // one whole number, the output width: `linear 512;`
	LAYER_ARG_NAME,  // one name, the row's name: `loss mse;`
	LAYER_ARG_COUNT
} LayerArg;

/* A layer's figures for one microbatch of `rows` rows. */
typedef struct {
	int64_t params;                     // f32 parameters (weights and biases)
	int64_t save_fb, save_fw, save_bw;  // saved bytes, as PlanStage's fields of those names
	double flops[3];                    // F, B (input gradient), W (weight gradient)
} LayerCost;

typedef struct {
	const char *name;    // the plan file's word and the name in messages ("mse")
	const char *word;    // the language's word ("loss"); rows may share one (LAYER_ARG_NAME)
	LayerArg arg;        // what follows the word
	const char *example; // a use, for "needs" messages ("linear 512")
	int loss;            // 1: must be the last layer of the last stage
	/* The figures for widths in -> out (out = in unless arg is LAYER_ARG_WIDTH). */
	void (*cost)(int64_t rows, int64_t in, int64_t out, LayerCost *c);
} LayerInfo;

extern const LayerInfo plan_layers[LAYER_COUNT];

/* Row of kind k; k must be valid. */
const LayerInfo *plan_layer(LayerKind k);
/* The kind whose name is the n bytes at s, or LAYER_COUNT. */
LayerKind plan_layer_find(const char *s, size_t n);
/* Output width of a kind given its input width and its width argument (if it takes one). */
int plan_layer_out(LayerKind k, int in, int width_arg);
/* Figures of one layer for a microbatch of rows rows. */
LayerCost plan_layer_cost(LayerKind k, int64_t rows, int in, int out);
/* The kind spelled word (and, for LAYER_ARG_NAME rows, name), or LAYER_COUNT; with name
 * NULL the first row spelled word. */
LayerKind plan_layer_parse(const char *word, const char *name);
/* Into out (LAYER_COUNT entries), in table order: with word NULL every distinct word
 * ("linear", "relu", "gelu", "loss"), else the names of the rows spelled word ("mse").
 * Returns the count. */
int plan_layer_words(const char *word, const char **out);

#endif
