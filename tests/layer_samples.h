/* Sample layers of any kind, derived from its row of the layer table (plan_layers[]):
 * what the tests that check every kind's rows (test_layers.c's tp figures,
 * test_runtime.c's finite differences, test_tp.c's shards, cuda_gpu.c's cuda rows
 * against the cpu's) loop over, instead of each keeping a list of kinds.  A new kind
 * whose argument and keys are of the existing types is in all of them without an edit.
 *
 * The row says what a sample needs: its argument (a WIDTH gives the caller's output
 * width, a HIDDEN its hidden width, a PROB 0 and SAMPLE_P), its output width (the
 * vocabulary for a head), its keys (every flag on and off, every probability key 0 and
 * SAMPLE_P, in every combination; heads and kv_heads cycle through the caller's heads
 * h as (h, h), (2h, h) and (h, h/2 or 1): full, grouped and fewer key/value heads).
 * Its input width is the caller's, or 1 for a kind that reads tokens and gives a width
 * (an embedding), or the vocabulary for one that keeps its width and is split by
 * vocabulary (a loss over a head's logits).  A body kind's sample spans one layer (the
 * caller's next).  A sample that would borrow another layer's tensors (a tied head) is
 * left out: it is that layer's. */
#ifndef TESTS_LAYER_SAMPLES_H
#define TESTS_LAYER_SAMPLES_H

#include "../plan/layer.h"

#define SAMPLE_P 0.25 // the nonzero probability of a PROB argument or key

typedef struct {
	int32_t width;  // input width of a kind on features
	int32_t out;    // output width a WIDTH argument gives
	int32_t hidden; // a HIDDEN argument
	int32_t heads;  // h above: width / (2h) must be whole and even (rotary pairs)
} LayerSampleSize;

enum { LAYER_SAMPLES_MAX = 64 };

/* The samples of kind k on microbatch sh into out[LAYER_SAMPLES_MAX]; returns how many
 * (at least 1 for every kind but one whose every sample borrows). */
static inline int layer_samples(LayerKind k, const LayerShape *sh, const LayerSampleSize *z,
                                PlanLayer *out)
{
	const LayerInfo *row = &plan_layers[k];
	PlanLayer base = {.kind = k, .in = z->width};
	if (row->tokens && row->outw == LAYER_OUT_ARG)
		base.in = 1;
	else if (row->tp == LAYER_TP_VOCAB && row->outw == LAYER_OUT_SAME)
		base.in = (int32_t)sh->vocab;
	base.out = row->outw == LAYER_OUT_SAME ? base.in
	           : row->outw == LAYER_OUT_ARG ? z->out
	                                         : (int32_t)sh->vocab;
	if (row->arg == LAYER_ARG_HIDDEN)
		base.hidden = z->hidden;
	if (row->arg == LAYER_ARG_BODY)
		base.span = 1;
	/* The binary choices: each flag key, each probability key, a PROB argument. */
	int bit[LAYER_KEY_COUNT + 1], nbit = 0;
	for (int key = 0; key < LAYER_KEY_COUNT; key++)
		if ((row->keys & LAYER_FLAG(key)) && plan_layer_keys[key].number != LAYER_VAL_WHOLE)
			bit[nbit++] = key;
	if (row->arg == LAYER_ARG_PROB)
		bit[nbit++] = LAYER_KEY_COUNT; // stands for the argument
	int n = 0;
	for (int v = 0; v < (1 << nbit) && n < LAYER_SAMPLES_MAX; v++) {
		PlanLayer l = base;
		for (int b = 0; b < nbit; b++) {
			if (!(v & (1 << b)))
				continue;
			if (bit[b] == LAYER_KEY_COUNT || plan_layer_keys[bit[b]].number == LAYER_VAL_PROB)
				l.drop = SAMPLE_P; // the only probability a layer holds (PlanLayer.drop)
			else
				l.flags |= LAYER_FLAG(bit[b]);
		}
		if (row->keys & LAYER_FLAG(LAYER_KEY_HEADS)) {
			int h = z->heads;
			l.heads = v % 3 == 1 ? 2 * h : h;
			l.kv_heads = v % 3 == 2 ? (h % 2 ? 1 : h / 2) : h;
			if (!(row->keys & LAYER_FLAG(LAYER_KEY_KV_HEADS)))
				l.kv_heads = l.heads;
		}
		LayerTensors t;
		plan_layer_tensors(&l, sh, 1, &t);
		if (!t.borrowed)
			out[n++] = l;
	}
	return n;
}

#endif
