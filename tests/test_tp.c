/* Tensor-parallel shards against the whole layer, on the cpu device's kernel rows: for
 * every kind the layer table splits, tp ranks holding the pieces of the whole layer's
 * parameters (the layer table's LayerSplit, cut by rt_split_copy) compute, summed over the group
 * where the plan all-reduces (forward outputs of row-parallel kinds, input gradients of
 * column-parallel ones), the whole layer's outputs and input gradients, and each rank's
 * weight gradients are the pieces of the whole layer's.  The vocabulary-parallel
 * cross-entropy, reduced as the runtime reduces it (maximum, then sums), gives the
 * whole loss and the pieces of its gradient.  The layers are every sample of every such
 * kind (layer_samples.h); a kind the table splits without one fails the registry test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "../runtime/rt_private.h"
#include "layer_samples.h"

#define F32(t) ((float *)(t)->data)

static RtWorld world;
static RtRank rank = {.w = &world, .rank = RT_REF_RANK, .dev = &rt_device_cpu};

static uint64_t next(uint64_t *s)
{
	*s = rt_splitmix64(*s);
	return *s;
}

static void fill(RtTensor *t, uint64_t seed, float scale)
{
	for (int64_t i = 0; i < t->rows * t->cols; i++)
		F32(t)[i] = ((float)(next(&seed) >> 40) / 8388608.0f - 1.0f) * scale;
}

static RtTensor *tensor(int64_t rows, int64_t cols)
{
	RtTensor *t = rt_tensor_new(&rank, rows, cols, RT_MEM_TEMP);
	assert_non_null(t);
	memset(t->data, 0, (size_t)t->bytes);
	return t;
}

/* One layer on one rank of a tp group: its tensors and a call over them. */
typedef struct {
	LayerTensors t;
	RtTensor *x, *y, *dy, *dx, *target, *loss, *work;
	RtTensor *param[LAYER_MAX_TENSORS], *grad[LAYER_MAX_TENSORS];
	RtTensor pv[LAYER_MAX_TENSORS], gv[LAYER_MAX_TENSORS];
	RtTensor *saved[LAYER_MAX_TENSORS], *held[LAYER_MAX_TENSORS];
	RtLayerCall c;
} One;

static void one_open(One *o, const PlanLayer *ly, const LayerShape *sh, int tp, int t)
{
	memset(o, 0, sizeof *o);
	plan_layer_tensors(ly, sh, tp, &o->t);
	int tokens_in = ly->kind == LAYER_EMBED, loss = plan_layers[ly->kind].loss;
	o->x = tensor(sh->rows, tokens_in ? 1 : o->t.in);
	o->y = tensor(loss && tp > 1 ? 3 : sh->rows, loss && tp > 1 ? sh->rows : o->t.out);
	o->dy = tensor(sh->rows, o->t.out);
	o->dx = tensor(sh->rows, o->t.in);
	o->target = tensor(sh->rows, 1);
	o->loss = tensor(1, 1);
	if (o->t.work.rows)
		o->work = tensor(o->t.work.rows, o->t.work.cols);
	for (int j = 0; j < o->t.nparams; j++) {
		o->param[j] = tensor(o->t.param[j].rows, o->t.param[j].cols);
		o->grad[j] = tensor(o->t.param[j].rows, o->t.param[j].cols);
		o->pv[j] = *o->param[j];
		o->gv[j] = *o->grad[j];
	}
	for (int j = 0; j < o->t.nsaved; j++)
		o->saved[j] = tensor(o->t.saved[j].rows, o->t.saved[j].cols);
	for (int j = 0; j < o->t.nheld; j++)
		o->held[j] = tensor(o->t.held[j].rows, o->t.held[j].cols);
	o->c = (RtLayerCall){.layer = ly, .rows = sh->rows, .sh = *sh, .x = o->x, .y = o->y,
	                     .dy = loss ? NULL : o->dy, .dx = o->dx, .nparams = o->t.nparams,
	                     .param = o->pv, .grad = o->gv, .nsaved = o->t.nsaved,
	                     .saved = o->saved, .nheld = o->t.nheld, .held = o->held,
	                     .work = o->work, .target = loss ? o->target : NULL, .loss = o->loss,
	                     .scale = 1.0f, .tp = tp, .tp_rank = t};
}

static void one_close(One *o)
{
	RtTensor *all[] = {o->x, o->y, o->dy, o->dx, o->target, o->loss, o->work};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		rt_tensor_free(&rank, all[i]);
	for (int j = 0; j < o->t.nparams; j++) {
		rt_tensor_free(&rank, o->param[j]);
		rt_tensor_free(&rank, o->grad[j]);
	}
	for (int j = 0; j < o->t.nsaved; j++)
		rt_tensor_free(&rank, o->saved[j]);
	for (int j = 0; j < o->t.nheld; j++)
		rt_tensor_free(&rank, o->held[j]);
}

/* max |a - b| / max |b| over n values */
static double rel_err(const float *a, const float *b, int64_t n)
{
	double d = 0, m = 0;
	for (int64_t i = 0; i < n; i++) {
		d = fmax(d, fabs((double)a[i] - (double)b[i]));
		m = fmax(m, fabs((double)b[i]));
	}
	return m > 0 ? d / m : d;
}

static void tokens(RtTensor *t, int64_t vocab, uint64_t seed)
{
	for (int64_t i = 0; i < t->rows; i++)
		F32(t)[i] = (float)(next(&seed) % (uint64_t)vocab);
}

/* Runs the whole layer and tp shards of it; sum_y: the forward output is a partial sum
 * (else each rank's is its slice of the whole, cut as the layer's first parameter's
 * rows: the head's logits); sum_dx likewise for the input gradient. */
static void shards_match(const PlanLayer *ly, const LayerShape *sh, int tp, int sum_y,
                         int sum_dx)
{
	const RtLayerKernels *k = &rt_device_cpu.layers[ly->kind];
	One w, s;
	one_open(&w, ly, sh, 1, 0);
	if (plan_layers[ly->kind].tokens && ly->in == 1) // token ids (an embedding)
		tokens(w.x, sh->vocab, 7);
	else
		fill(w.x, 7, 1.0f);
	fill(w.dy, 8, 1.0f);
	for (int j = 0; j < w.t.nparams; j++)
		fill(w.param[j], 20 + (uint64_t)j, 1.0f / sqrtf((float)w.t.param[j].rows));
	assert_int_equal(k->fwd(&rank, &w.c), RT_OK);
	if (k->bwd_in)
		assert_int_equal(k->bwd_in(&rank, &w.c), RT_OK);
	if (k->bwd_w)
		assert_int_equal(k->bwd_w(&rank, &w.c), RT_OK);
	int64_t ny = w.y->rows * w.y->cols, nx = w.dx->rows * w.dx->cols;
	float *ysum = calloc((size_t)ny, sizeof(float)), *dxsum = calloc((size_t)nx, sizeof(float));
	float *piece = malloc((size_t)w.y->bytes + (size_t)w.dx->bytes + 4096 * sizeof(float));
	assert_true(ysum && dxsum && piece);
	for (int t = 0; t < tp; t++) {
		one_open(&s, ly, sh, tp, t);
		memcpy(s.x->data, w.x->data, (size_t)s.x->bytes);
		memcpy(s.dy->data, w.dy->data, (size_t)s.dy->bytes * (s.dy->cols == w.dy->cols));
		if (s.dy->cols != w.dy->cols) // the rank's columns of the whole output gradient
			for (int64_t r = 0; r < sh->rows; r++)
				memcpy(F32(s.dy) + r * s.dy->cols, F32(w.dy) + r * w.dy->cols + t * s.dy->cols,
				       (size_t)s.dy->cols * sizeof(float));
		for (int j = 0; j < s.t.nparams; j++)
			rt_split_copy(&s.t.param[j], &s.t.split[j], tp, t, F32(w.param[j]), F32(s.param[j]));
		assert_int_equal(k->fwd(&rank, &s.c), RT_OK);
		if (k->bwd_in)
			assert_int_equal(k->bwd_in(&rank, &s.c), RT_OK);
		if (k->bwd_w)
			assert_int_equal(k->bwd_w(&rank, &s.c), RT_OK);
		for (int64_t i = 0; i < ny && sum_y; i++)
			ysum[i] += F32(s.y)[i];
		for (int64_t r = 0; r < sh->rows && !sum_y; r++)
			assert_true(rel_err(F32(s.y) + r * s.y->cols,
			                    F32(w.y) + r * w.y->cols + t * s.y->cols, s.y->cols) < 1e-5);
		for (int64_t i = 0; i < nx && k->bwd_in && sum_dx; i++)
			dxsum[i] += F32(s.dx)[i];
		for (int j = 0; j < s.t.nparams; j++) { // weight gradients: the pieces of the whole's
			int64_t n = s.t.param[j].rows * s.t.param[j].cols;
			float *want = n <= 4096 + (w.y->bytes + w.dx->bytes) / 4 ? piece : NULL;
			assert_non_null(want);
			rt_split_copy(&s.t.param[j], &s.t.split[j], tp, t, F32(w.grad[j]), want);
			double e = rel_err(F32(s.grad[j]), want, n);
			if (e > 1e-5)
				fail_msg("%s tp=%d rank %d: gradient of parameter %d differs by %g",
				         plan_layers[ly->kind].name, tp, t, j, e);
		}
		one_close(&s);
	}
	if (sum_y && rel_err(ysum, F32(w.y), ny) > 1e-5)
		fail_msg("%s tp=%d: the outputs do not sum to the whole layer's (%g)",
		         plan_layers[ly->kind].name, tp, rel_err(ysum, F32(w.y), ny));
	if (k->bwd_in && sum_dx && rel_err(dxsum, F32(w.dx), nx) > 1e-5)
		fail_msg("%s tp=%d: the input gradients do not sum to the whole layer's (%g)",
		         plan_layers[ly->kind].name, tp, rel_err(dxsum, F32(w.dx), nx));
	free(ysum);
	free(dxsum);
	free(piece);
	one_close(&w);
}

static const LayerShape shape = {16, 2, 8, 24, 0, PREC_F32, 1}; // 2 sequences of 8 tokens, 24 words
static int covered[LAYER_COUNT];

/* The cross-entropy reduced as rt_stage_tp_reduce does: the maximum of row 0, phase 1,
 * the sum of rows 1 and 2, phase 2. */
static void xent_case(const PlanLayer *lp, int tp)
{
	PlanLayer ly = *lp;
	const RtLayerKernels *k = &rt_device_cpu.layers[ly.kind];
	One w, s[4];
	one_open(&w, &ly, &shape, 1, 0);
	fill(w.x, 3, 4.0f);
	tokens(w.target, shape.vocab, 5);
	assert_int_equal(k->fwd(&rank, &w.c), RT_OK);
	assert_int_equal(k->bwd_in(&rank, &w.c), RT_OK);
	int64_t N = shape.rows, n = ly.in / tp;
	for (int t = 0; t < tp; t++) {
		one_open(&s[t], &ly, &shape, tp, t);
		for (int64_t r = 0; r < N; r++)
			memcpy(F32(s[t].x) + r * n, F32(w.x) + r * ly.in + t * n, (size_t)n * sizeof(float));
		memcpy(s[t].target->data, w.target->data, (size_t)w.target->bytes);
		assert_int_equal(k->fwd(&rank, &s[t].c), RT_OK);
	}
	for (int phase = 1; phase <= 2; phase++) {
		int64_t lo = phase == 1 ? 0 : N, hi = phase == 1 ? N : 3 * N;
		for (int64_t i = lo; i < hi; i++) { // the all-reduce: every rank gets the result
			float acc = F32(s[0].y)[i];
			for (int t = 1; t < tp; t++)
				acc = phase == 1 ? fmaxf(acc, F32(s[t].y)[i]) : acc + F32(s[t].y)[i];
			for (int t = 0; t < tp; t++)
				F32(s[t].y)[i] = acc;
		}
		for (int t = 0; t < tp; t++) {
			s[t].c.phase = phase;
			assert_int_equal(k->tp_fwd(&rank, &s[t].c), RT_OK);
		}
	}
	for (int t = 0; t < tp; t++) {
		assert_true(fabs(F32(s[t].loss)[0] - F32(w.loss)[0]) <= 1e-6 * fabs(F32(w.loss)[0]));
		assert_int_equal(k->bwd_in(&rank, &s[t].c), RT_OK);
		for (int64_t r = 0; r < N; r++)
			assert_true(rel_err(F32(s[t].dx) + r * n, F32(w.dx) + r * ly.in + t * n, n) < 1e-5);
		one_close(&s[t]);
	}
	one_close(&w);
}

/* Every sample (layer_samples.h) of every kind the layer table splits, at tp 2 and 4:
 * the shards sum where the layer's tensors say the plan all-reduces (tp_floats: after F,
 * after B), else each is its slice; a loss split over the vocabulary (a tp_fwd kernel)
 * reduced as the runtime reduces it. */
static void tp__split_kinds__shards_sum_to_whole(void **state)
{
	(void)state;
	const LayerSampleSize size = {.width = 32, .out = 16, .hidden = 40, .heads = 8};
	for (int k = 0; k < LAYER_COUNT; k++) {
		if (plan_layers[k].tp == LAYER_TP_WHOLE)
			continue;
		PlanLayer samples[LAYER_SAMPLES_MAX];
		int ns = layer_samples((LayerKind)k, &shape, &size, samples);
		for (int i = 0; i < ns; i++)
			for (int tp = 2; tp <= 4; tp *= 2) {
				LayerTensors t;
				plan_layer_tensors(&samples[i], &shape, tp, &t);
				if (rt_device_cpu.layers[k].tp_fwd)
					xent_case(&samples[i], tp);
				else
					shards_match(&samples[i], &shape, tp, t.tp_floats[0] != 0,
					             t.tp_floats[1] != 0);
			}
		covered[k] = ns > 0;
	}
}

/* Runs last: every kind the layer table splits had a sample above. */
static void tp__registry__every_split_kind_covered(void **state)
{
	(void)state;
	for (int k = 0; k < LAYER_COUNT; k++)
		if (plan_layers[k].tp != LAYER_TP_WHOLE && !covered[k])
			fail_msg("layer kind %s is split over tp groups but no test covers it",
			         plan_layers[k].name);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(tp__split_kinds__shards_sum_to_whole),
	    cmocka_unit_test(tp__registry__every_split_kind_covered),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
