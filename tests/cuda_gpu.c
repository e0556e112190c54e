/* The CUDA backend's tests that need a GPU (tests/test_cuda.c holds the rest and main;
 * one binary of both, built with CUDA only): every kernel row (each transformer kind
 * in its variants, the tensor operations and optimizers) against the cpu device's, the
 * bias gradient's and the loss's tiles, a bad token id reported at the next sync, the
 * synthetic data made on the GPU bit for bit as on the host, a one-rank NCCL
 * communicator's grouped self send/receive and all-reduce, an abort that ends a hung
 * receive, and whole plans with --check (f32 and bf16, AdamW, a small transformer with
 * every kind, and two GPUs, tp=2 among them, when there are).  Without a GPU each
 * skips with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "../compiler/pipecc.h"
#include "../runtime/cuda_env.h"
#include "cuda_test.h"
#include "layer_samples.h"

/* A world for the one-GPU plan with rank 0 opened on this thread. */
typedef struct {
	Plan *p;
	RtWorld *w;
	RtRank *r;
	const RtDevice *dev;
	const RtComm *comm;
} Gpu;

static int gpu_open(Gpu *g, int dtype)
{
	memset(g, 0, sizeof *g);
	if (!have_gpu())
		return 0;
	g->p = compile_text(one_gpu_src);
	assert_non_null(g->p);
	RtOptions o = options("cuda", 1, 0, dtype);
	char err[1024];
	g->w = rt_world_open(g->p, &o, err, sizeof err);
	if (!g->w)
		fail_msg("rt_world_open: %s", err);
	g->dev = rt_backend_find("cuda")->device;
	g->comm = rt_backend_find("cuda")->comm;
	g->r = &g->w->ranks[0];
	if (g->dev->rank_open(g->r) || g->comm->rank_open(g->r))
		fail_msg("rank_open: %s", g->r->err);
	return 1;
}

static void gpu_close(Gpu *g)
{
	g->comm->rank_close(g->r);
	g->dev->rank_close(g->r);
	rt_world_close(g->w, 0);
	plan_free(g->p);
}

static float frand(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(*s >> 40) / 8388608.0 - 1.0);
}

/* A device tensor and its host twin with the same random contents. */
static RtTensor *both(Gpu *g, int64_t rows, int64_t cols, RtTensor *host, uint64_t seed)
{
	RtTensor *t = rt_tensor_new(g->r, rows, cols, RT_MEM_TEMP);
	assert_non_null(t);
	*host = (RtTensor){.rows = rows, .cols = cols, .bytes = rows * cols * 4};
	host->data = malloc((size_t)host->bytes);
	for (int64_t i = 0; i < rows * cols; i++)
		((float *)host->data)[i] = frand(&seed);
	assert_int_equal(g->dev->upload(g->r, t, host->data), RT_OK);
	return t;
}

/* Max |device - host| over max |host|. */
static double rel_err(Gpu *g, const RtTensor *t, const RtTensor *host)
{
	int64_t n = host->rows * host->cols;
	float *d = malloc((size_t)n * 4);
	assert_int_equal(g->dev->download(g->r, t, d), RT_OK);
	double e = 0, m = 1e-30;
	for (int64_t i = 0; i < n; i++) {
		double x = fabs((double)d[i] - ((float *)host->data)[i]);
		e = x > e || isnan(x) ? (isnan(x) ? INFINITY : x) : e;
		m = fmax(m, fabs(((float *)host->data)[i]));
	}
	free(d);
	return e / m;
}

/* One layer's tensors on the GPU and their host twins: [0] x, [1] y, [2] dy, [3] dx,
 * [4] target, [5] loss, then parameters, gradients, saved, held, work. */
enum { T_X, T_Y, T_DY, T_DX, T_TARGET, T_LOSS, T_FIXED };
typedef struct {
	RtTensor *d[T_FIXED + 5 * LAYER_MAX_TENSORS];
	RtTensor h[T_FIXED + 5 * LAYER_MAX_TENSORS];
	int n;
	RtLayerCall dc, hc; // the device's call and the cpu's
	RtTensor dp[LAYER_MAX_TENSORS], dg[LAYER_MAX_TENSORS]; // parameter structs
	RtTensor hp[LAYER_MAX_TENSORS], hg[LAYER_MAX_TENSORS];
	RtTensor *ds[2 * LAYER_MAX_TENSORS], *hs[2 * LAYER_MAX_TENSORS]; // saved, held
} Twin;

static int twin_add(Gpu *g, Twin *t, int64_t rows, int64_t cols)
{
	int i = t->n++;
	t->d[i] = both(g, rows, cols, &t->h[i], 100 + (uint64_t)i);
	return i;
}

/* A dropout mask (one byte an element) and its host twin, for F to fill. */
static int twin_mask(Gpu *g, Twin *t, const LayerTensor *ts)
{
	int i = t->n++;
	t->d[i] = rt_tensor_new_of(g->r, ts, RT_MEM_TEMP);
	assert_non_null(t->d[i]);
	t->h[i] = (RtTensor){.rows = ts->rows, .cols = ts->cols, .bytes = ts->rows * ts->cols};
	t->h[i].data = calloc(1, (size_t)t->h[i].bytes);
	return i;
}

/* Device tensor d holds the bytes of its host twin h (a mask: the same bits drawn). */
static void same_bytes(Gpu *g, const RtTensor *d, const RtTensor *h, const char *kind)
{
	char *b = malloc((size_t)h->bytes);
	assert_int_equal(g->dev->download(g->r, d, (float *)b), RT_OK);
	if (memcmp(b, h->data, (size_t)h->bytes))
		fail_msg("layer kind %s: the cuda device's dropout mask differs from the cpu's", kind);
	free(b);
}

/* Token ids (whole numbers below min(vocab, 13), so ids repeat) into tensor i of both
 * twins. */
static void twin_tokens(Gpu *g, Twin *t, int i, int64_t vocab)
{
	float *h = t->h[i].data;
	int64_t top = vocab < 13 ? vocab : 13;
	for (int64_t k = 0; k < t->h[i].rows * t->h[i].cols; k++)
		h[k] = (float)((k * 7 + k / 3) % top);
	assert_int_equal(g->dev->upload(g->r, t->d[i], h), RT_OK);
}

/* Tensors for layer ly on microbatch sh, random contents (token ids where a kind takes
 * them), and the two calls over them. */
static void twin_open(Gpu *g, Twin *t, const PlanLayer *ly, const LayerShape *sh)
{
	memset(t, 0, sizeof *t);
	LayerTensors lt = {0};
	int64_t m = sh->rows;
	int tokens = plan_layers[ly->kind].tokens;
	plan_layer_tensors(ly, sh, 1, &lt);
	twin_add(g, t, m, ly->in);
	twin_add(g, t, m, ly->out);
	twin_add(g, t, m, ly->out);
	twin_add(g, t, m, ly->in);
	twin_add(g, t, m, tokens ? 1 : ly->in);
	twin_add(g, t, 1, 4);
	if (ly->kind == LAYER_EMBED)
		twin_tokens(g, t, T_X, sh->vocab);
	if (tokens)
		twin_tokens(g, t, T_TARGET, ly->in);
	RtLayerCall c = {.layer = ly, .rows = m, .sh = *sh, .nparams = lt.nparams,
	                 .nsaved = lt.nsaved, .nheld = lt.nheld, .key = 0x5eed};
	t->dc = t->hc = c;
	for (int j = 0; j < lt.nparams; j++) {
		int p = twin_add(g, t, lt.param[j].rows, lt.param[j].cols);
		int q = twin_add(g, t, lt.param[j].rows, lt.param[j].cols);
		t->dp[j] = *t->d[p], t->dg[j] = *t->d[q], t->hp[j] = t->h[p], t->hg[j] = t->h[q];
	}
	for (int j = 0; j < lt.nsaved + lt.nheld; j++) {
		const LayerTensor *ts = j < lt.nsaved ? &lt.saved[j] : &lt.held[j - lt.nsaved];
		int p = ts->mask ? twin_mask(g, t, ts) : twin_add(g, t, ts->rows, ts->cols);
		t->ds[j] = t->d[p], t->hs[j] = &t->h[p];
	}
	t->dc.param = t->dp, t->dc.grad = t->dg, t->hc.param = t->hp, t->hc.grad = t->hg;
	t->dc.saved = t->ds, t->dc.held = t->ds + lt.nsaved;
	t->hc.saved = t->hs, t->hc.held = t->hs + lt.nsaved;
	if (lt.work.rows) {
		int p = twin_add(g, t, lt.work.rows, lt.work.cols);
		t->dc.work = t->d[p], t->hc.work = &t->h[p];
	}
	t->dc.x = t->d[T_X], t->hc.x = &t->h[T_X];
	if (plan_layers[ly->kind].loss) {
		t->dc.target = t->d[T_TARGET], t->hc.target = &t->h[T_TARGET];
		t->dc.loss = t->d[T_LOSS], t->hc.loss = &t->h[T_LOSS];
		t->dc.slot = t->hc.slot = 2;
	} else {
		t->dc.y = t->d[T_Y], t->hc.y = &t->h[T_Y];
	}
}

static void twin_close(Gpu *g, Twin *t)
{
	for (int i = 0; i < t->n; i++) {
		rt_tensor_free(g->r, t->d[i]);
		free(t->h[i].data);
	}
}

/* Device tensors d[0..n) agree with their host twins h within tol (0: bit for bit). */
static void twin_compare(Gpu *g, RtTensor *const *d, const RtTensor *h, int n, double tol,
                         const char *kind, const char *what)
{
	for (int i = 0; i < n; i++) {
		double e = rel_err(g, d[i], &h[i]);
		if (!(e <= tol))
			fail_msg("layer kind %s: %s %d differs from the cpu's by %g (bound %g)", kind,
			         what, i, e, tol);
	}
}

/* The layers the kernel rows are checked on: every sample (layer_samples.h) of every
 * kind with a cpu row (biases, grouped-query and rotary attention, dropout, flash,
 * learned positions), at odd sizes (no GEMM tile fits exactly, 3 heads).  Kinds on
 * tokens run on 3 sequences of 11 tokens over a vocabulary of 37. */
static const LayerSampleSize gpu_size = {.width = 24, .out = 45, .hidden = 40, .heads = 3};
static const LayerShape gpu_shape = {33, 3, 11, 37, 0, PREC_F32, 1};

/* One layer ly on the cuda row against the cpu row (cuda__kernels__match_cpu). */
static void layer_matches_cpu(Gpu *g, const PlanLayer *ly, int bf16)
{
	RtRank *r = g->r;
	const RtDevice *be = g->dev, *cpu = &rt_device_cpu;
	int kind = ly->kind;
	const RtLayerKernels *dk = &be->layers[kind], *hk = &cpu->layers[kind];
	const char *name = plan_layers[kind].name;
	if (!dk->fwd || !hk->fwd || !dk->bwd_in != !hk->bwd_in || !dk->bwd_w != !hk->bwd_w)
		fail_msg("layer kind %s: the cuda and cpu rows differ or are empty", name);
	LayerTensors lt;
	plan_layer_tensors(ly, &gpu_shape, 1, &lt);
	int gemms = 0; // several GEMMs chained: attention, the MLPs
	for (int j = 0; j < lt.nparams; j++)
		gemms += lt.param[j].gemm;
	int chained = gemms > 1;
	double gemm_tol = bf16 ? (chained ? 5e-2 : 2e-2) : (chained ? 1e-4 : 1e-5);
	double tol = kind == LAYER_DROPOUT                             ? 0
	             : plan_layer_figures(ly, &gpu_shape).flops[0] > 0 ? gemm_tol
	                                                               : 1e-5;
	double exact = kind == LAYER_EMBED ? 0 : tol;
	Twin t;
	twin_open(g, &t, ly, &gpu_shape);
	RtLayerCall *dc = &t.dc, *hc = &t.hc;
	int loss = plan_layers[kind].loss;
	assert_int_equal(dk->fwd(r, dc), RT_OK);
	assert_int_equal(hk->fwd(r, hc), RT_OK);
	twin_compare(g, &t.d[loss ? T_LOSS : T_Y], &t.h[loss ? T_LOSS : T_Y], 1, exact,
	             name, "F output");
	for (int j = 0; j < hc->nsaved; j++)
		if (lt.saved[j].mask) // drawn from the key alone: the same bits
			same_bytes(g, t.ds[j], t.hs[j], name);
		else
			twin_compare(g, &t.ds[j], t.hs[j], 1, tol, name, "saved tensor");
	dc->y = NULL, hc->y = NULL;
	if (loss)
		dc->scale = hc->scale = 0.25f;
	else
		dc->dy = t.d[T_DY], hc->dy = &t.h[T_DY];
	dc->dx = t.d[T_DX], hc->dx = &t.h[T_DX];
	if (plan_attn_lse_slot(ly) >= 0) { // flash: B rebuilds P from the log-sum-exp
		assert_int_equal(dk->rebuild(r, dc), RT_OK);
		assert_int_equal(hk->rebuild(r, hc), RT_OK);
	}
	if (dk->bwd_in) {
		assert_int_equal(dk->bwd_in(r, dc), RT_OK);
		assert_int_equal(hk->bwd_in(r, hc), RT_OK);
		twin_compare(g, &t.d[T_DX], &t.h[T_DX], 1, tol, name, "B input gradient");
		for (int j = 0; j < hc->nheld; j++)
			twin_compare(g, &t.ds[hc->nsaved + j], t.hs[hc->nsaved + j], 1, tol,
			             name, "held tensor");
	}
	if (dk->bwd_w) {
		assert_int_equal(dk->bwd_w(r, dc), RT_OK);
		assert_int_equal(hk->bwd_w(r, hc), RT_OK);
		for (int j = 0; j < hc->nparams; j++) {
			RtTensor dg = t.dg[j];
			double bound = (kind == LAYER_LINEAR && j == 1) ? 0 : exact;
			RtTensor *dgp = &dg;
			twin_compare(g, &dgp, &t.hg[j], 1, bound, name, "W gradient");
		}
	}
	assert_int_equal(be->sync(r), RT_OK);
	twin_close(g, &t);
}

/* The tensor operations and every optimizer (two steps each, its state carried over)
 * on the device against the cpu's, bit for bit, on an m x n tensor. */
static void ops_match_cpu(Gpu *g, int64_t m, int64_t n)
{
	RtRank *r = g->r;
	const RtDevice *be = g->dev, *cpu = &rt_device_cpu;
	RtTensor hy, hdy;
	RtTensor *y = both(g, m, n, &hy, 4), *dy = both(g, m, n, &hdy, 5);
	assert_int_equal(be->add(r, y, dy), RT_OK);
	cpu->add(r, &hy, &hdy);
	assert_true(rel_err(g, y, &hy) == 0);
	assert_int_equal(be->scale(r, y, 0.37f), RT_OK);
	cpu->scale(r, &hy, 0.37f);
	assert_true(rel_err(g, y, &hy) == 0);
	for (int k = 0; k < OPTIM_COUNT; k++) {
		PlanOptim po = plan_optim_default(k);
		po.lr = 0.05;
		RtTensor hm, hv;
		RtTensor *dm = both(g, m, n, &hm, 6), *dv = both(g, m, n, &hv, 7);
		assert_int_equal(be->zero(r, dm), RT_OK);
		assert_int_equal(be->zero(r, dv), RT_OK);
		memset(hm.data, 0, (size_t)hm.bytes);
		memset(hv.data, 0, (size_t)hv.bytes);
		int nbuf = plan_optim_state_bytes(k) / 4; // momentum: m; adamw: m and v
		for (int t = 1; t <= 2; t++) {
			RtOptStep ds = {.w = y, .g = dy, .m = nbuf >= 1 ? dm : NULL,
			                .v = nbuf >= 2 ? dv : NULL};
			RtOptStep hs = {.w = &hy, .g = &hdy, .m = nbuf >= 1 ? &hm : NULL,
			                .v = nbuf >= 2 ? &hv : NULL};
			rt_optim_step_init(&po, t, &ds);
			rt_optim_step_init(&po, t, &hs);
			assert_non_null(be->optim[k]);
			assert_int_equal(be->optim[k](r, &ds), RT_OK);
			assert_int_equal(cpu->optim[k](r, &hs), RT_OK);
			if (rel_err(g, y, &hy) != 0)
				fail_msg("%s step %d: the %s device's weights differ from the cpu's",
				         plan_optim_names[k], t, be->name);
			if ((nbuf >= 1 && rel_err(g, dm, &hm) != 0) ||
			    (nbuf >= 2 && rel_err(g, dv, &hv) != 0))
				fail_msg("%s step %d: the %s device's state differs from the cpu's",
				         plan_optim_names[k], t, be->name);
		}
		rt_tensor_free(r, dm);
		rt_tensor_free(r, dv);
		free(hm.data);
		free(hv.data);
	}
	assert_int_equal(be->copy(r, y, dy), RT_OK);
	assert_true(rel_err(g, y, &hdy) == 0);
	assert_int_equal(be->zero(r, y), RT_OK);
	memset(hy.data, 0, (size_t)hy.bytes);
	assert_true(rel_err(g, y, &hy) == 0);
	assert_int_equal(be->sync(r), RT_OK);
	rt_tensor_free(r, y);
	rt_tensor_free(r, dy);
	free(hy.data);
	free(hdy.data);
}

/* Every sample of gpu_size on the cuda row against the cpu row: F (output and saved
 * tensors), B (input gradient and held tensors) and W (parameter gradients, which
 * accumulate into random contents), for f32 and bf16 GEMMs.  A kind with GEMMs (FLOPs
 * in the layer table) is held to the GEMM bound (looser for the kinds that chain
 * several: attention, mlp, swiglu), other math to 1e-5; the embedding (gather and the
 * in-order scatter), linear's bias gradient (column sums in the CPU's order), dropout
 * and every dropout mask (attention's too: the same bits from the same key) bit for
 * bit.  Every kind with a cpu row must have been run.  Then ops_match_cpu. */
void cuda__kernels__match_cpu(void **state)
{
	(void)state;
	for (int dtype = 0; dtype < RT_DTYPE_COUNT; dtype++) {
		Gpu g;
		if (!gpu_open(&g, dtype))
			skip();
		const RtDevice *cpu = &rt_device_cpu;
		int bf16 = dtype == RT_DTYPE_BF16;
		int64_t m = gpu_shape.rows, n = 45;
		int seen[LAYER_COUNT] = {0};
		for (int kind = 0; kind < LAYER_COUNT; kind++) {
			PlanLayer samples[LAYER_SAMPLES_MAX];
			int ns = cpu->layers[kind].fwd ? layer_samples((LayerKind)kind, &gpu_shape,
			                                               &gpu_size, samples) : 0;
			for (int i = 0; i < ns; i++)
				layer_matches_cpu(&g, &samples[i], bf16);
			seen[kind] = ns > 0;
		}
		for (int k = 0; k < LAYER_COUNT; k++)
			if (cpu->layers[k].fwd && !seen[k])
				fail_msg("layer kind %s has a cpu row but no check against the cuda row",
				         plan_layers[k].name);

		ops_match_cpu(&g, m, n);
		gpu_close(&g);
	}
}

/* More rows than one tile of the bias gradient's column walk (2 full tiles of 128 and
 * a part) and a column count no block divides: linear's bias gradient is still the
 * cpu's bit for bit; and the mse loss summed over many blocks matches the cpu's. */
void cuda__many_rows__bias_grad_and_loss(void **state)
{
	(void)state;
	static const PlanLayer lin = {.kind = LAYER_LINEAR, .in = 70, .out = 45};
	static const PlanLayer mse = {.kind = LAYER_MSE, .in = 70, .out = 70};
	static const LayerShape sh = {300, 3, 100, 37, 0, PREC_F32, 1};
	Gpu g;
	if (!gpu_open(&g, RT_DTYPE_F32))
		skip();
	const RtLayerKernels *dk = &g.dev->layers[LAYER_LINEAR], *hk = &rt_device_cpu.layers[LAYER_LINEAR];
	Twin t;
	twin_open(&g, &t, &lin, &sh);
	assert_int_equal(dk->fwd(g.r, &t.dc), RT_OK);
	assert_int_equal(hk->fwd(g.r, &t.hc), RT_OK);
	t.dc.y = t.hc.y = NULL;
	t.dc.dy = t.d[T_DY], t.hc.dy = &t.h[T_DY];
	assert_int_equal(dk->bwd_w(g.r, &t.dc), RT_OK);
	assert_int_equal(hk->bwd_w(g.r, &t.hc), RT_OK);
	RtTensor db = t.dg[1], *dbp = &db;
	twin_compare(&g, &dbp, &t.hg[1], 1, 0, "linear", "bias gradient, 300 rows");
	twin_close(&g, &t);

	twin_open(&g, &t, &mse, &sh);
	assert_int_equal(g.dev->layers[LAYER_MSE].fwd(g.r, &t.dc), RT_OK);
	assert_int_equal(rt_device_cpu.layers[LAYER_MSE].fwd(g.r, &t.hc), RT_OK);
	twin_compare(&g, &t.d[T_LOSS], &t.h[T_LOSS], 1, 1e-5, "mse", "loss, 300 rows");
	assert_int_equal(g.dev->sync(g.r), RT_OK);
	twin_close(&g, &t);
	gpu_close(&g);
}

/* A bad token id (not a whole number, or out of the vocabulary) is found on the GPU:
 * the call itself returns at once, and the rank's next sync fails with the cpu
 * device's message naming the row and the value.  Both kinds on tokens: the
 * embedding's input and the cross-entropy's target. */
void cuda__tokens__bad_id_fails_at_sync(void **state)
{
	(void)state;
	static const PlanLayer embed = {.kind = LAYER_EMBED, .in = 1, .out = 24};
	static const PlanLayer xent = {.kind = LAYER_XENT, .in = 37, .out = 37};
	const PlanLayer *lys[] = {&embed, &xent};
	const float bad[] = {2.5f, 37.0f};
	const char *want[] = {"input token 5 is 2.5, not a token id in [0, 37)",
	                      "target token 5 is 37, not a token id in [0, 37)"};
	for (int i = 0; i < 2; i++) {
		Gpu g;
		if (!gpu_open(&g, RT_DTYPE_F32))
			skip();
		Twin t;
		twin_open(&g, &t, lys[i], &gpu_shape);
		int ti = i ? T_TARGET : T_X;
		((float *)t.h[ti].data)[5] = bad[i];
		assert_int_equal(g.dev->upload(g.r, t.d[ti], t.h[ti].data), RT_OK);
		const RtLayerKernels *dk = &g.dev->layers[lys[i]->kind];
		assert_int_equal(dk->fwd(g.r, &t.dc), RT_OK); // asynchronous: found on the GPU
		assert_int_equal(g.dev->sync(g.r), RT_EFAIL);
		if (!strstr(g.r->err, want[i]))
			fail_msg("bad token: '%s', want '%s'", g.r->err, want[i]);
		/* The cpu row refuses the same id with the same words. */
		RtRank cr = {.w = g.w, .rank = RT_REF_RANK, .dev = &rt_device_cpu};
		assert_int_equal(rt_device_cpu.layers[lys[i]->kind].fwd(&cr, &t.hc), RT_EFAIL);
		assert_non_null(strstr(cr.err, want[i]));
		twin_close(&g, &t);
		gpu_close(&g);
	}
}

/* Synthetic inputs and targets are made on the GPU (the device's gen), bit for bit
 * the host's rt_gen_values, for a size no block or grid divides. */
void cuda__gen__matches_host_bit_for_bit(void **state)
{
	(void)state;
	Gpu g;
	if (!gpu_open(&g, RT_DTYPE_F32))
		skip();
	assert_non_null(g.dev->gen);
	int64_t rows = 1001, cols = 1037;
	uint64_t key = rt_gen_key(42, RT_GEN_TARGET, 1, 3);
	RtTensor *t = rt_tensor_new(g.r, rows, cols, RT_MEM_TEMP);
	assert_non_null(t);
	float *want = malloc((size_t)(rows * cols) * 4), *got = malloc((size_t)(rows * cols) * 4);
	assert_true(want && got);
	rt_gen_values(key, want, rows * cols);
	assert_int_equal(g.dev->gen(g.r, t, key), RT_OK);
	assert_int_equal(g.dev->download(g.r, t, got), RT_OK);
	for (int64_t i = 0; i < rows * cols; i++)
		if (memcmp(&got[i], &want[i], 4))
			fail_msg("element %lld: %.9g on the GPU, %.9g on the host", (long long)i,
			         (double)got[i], (double)want[i]);
	free(want);
	free(got);
	rt_tensor_free(g.r, t);
	gpu_close(&g);
}

void cuda__nccl_self__grouped_sendrecv_and_allreduce(void **state)
{
	(void)state;
	Gpu g;
	if (!gpu_open(&g, RT_DTYPE_F32))
		skip();
	RtRank *r = g.r;
	const RtDevice *be = g.dev, *cpu = &rt_device_cpu;
	const RtComm *comm = g.comm;
	RtTensor ha, hb;
	RtTensor *a = both(&g, 64, 1000, &ha, 11), *b = both(&g, 64, 1000, &hb, 12);
	RtTensor *c = rt_tensor_new(r, 64, 1000, RT_MEM_COMM);
	RtTensor *d = rt_tensor_new(r, 64, 1000, RT_MEM_COMM);
	RtMsg m = {.edge = 0, .mb = 0, .dir = 0, .op = 0, .bytes = a->bytes};
	/* Two transfers to itself in one group, crossed over. */
	assert_int_equal(comm->group_start(r), RT_OK);
	assert_int_equal(comm->send(r, a, 0, &m), RT_OK);
	assert_int_equal(comm->send(r, b, 0, &m), RT_OK);
	assert_int_equal(comm->recv(r, c, 0, &m), RT_OK);
	assert_int_equal(comm->recv(r, d, 0, &m), RT_OK);
	assert_int_equal(comm->group_end(r), RT_OK);
	/* Compute that reads what arrived, then an all-reduce (an average over one rank). */
	assert_int_equal(be->add(r, c, d), RT_OK);
	cpu->add(r, &ha, &hb);
	m.mb = m.dir = -1;
	assert_int_equal(comm->group_start(r), RT_OK);
	assert_int_equal(comm->allreduce(r, c, OP_OVER_DP, 0, &m), RT_OK);
	assert_int_equal(comm->group_end(r), RT_OK);
	assert_int_equal(be->scale(r, c, 2.0f), RT_OK);
	cpu->scale(r, &ha, 2.0f);
	assert_int_equal(be->sync(r), RT_OK);
	assert_true(rel_err(&g, c, &ha) == 0);
	assert_int_equal(comm->barrier(r), RT_OK);
	RtTensor *ts[] = {a, b, c, d};
	for (int i = 0; i < 4; i++)
		rt_tensor_free(r, ts[i]);
	free(ha.data);
	free(hb.data);
	gpu_close(&g);
}

static void *abort_later(void *arg)
{
	struct timespec ts = {0, 300000000};
	nanosleep(&ts, NULL);
	rt_abort(arg);
	return NULL;
}

void cuda__hang__abort_ends_the_wait(void **state)
{
	(void)state;
	Gpu g;
	if (!gpu_open(&g, RT_DTYPE_F32))
		skip();
	RtRank *r = g.r;
	RtTensor *c = rt_tensor_new(r, 4, 4, RT_MEM_COMM);
	RtMsg m = {.bytes = c->bytes};
	/* A receive nobody sends: only the abort can end the wait. */
	alarm(60);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, abort_later, g.w), 0);
	int rc = g.comm->group_start(r);
	if (rc == RT_OK)
		rc = g.comm->recv(r, c, 0, &m);
	if (rc == RT_OK)
		rc = g.comm->group_end(r);
	if (rc == RT_OK)
		rc = g.dev->sync(r);
	pthread_join(th, NULL);
	alarm(0);
	assert_int_not_equal(rc, RT_OK);
	rt_tensor_free(r, c);
	gpu_close(&g);
}

/* lr > 0 replaces the plan's learning rate. */
static void run_checked(const char *src, int dtype, int ngpu, double lr)
{
	char why[256];
	int n = rt_cuda_device_count(why, sizeof why);
	if (n < ngpu) {
		print_message("skipped: needs %d GPU%s, found %d%s%s\n", ngpu, ngpu == 1 ? "" : "s",
		              n, n ? "" : ": ", n ? "" : why);
		skip();
	}
	Plan *p = compile_text(src);
	assert_non_null(p);
	RtOptions o = options("cuda", 3, 1, dtype);
	if (lr > 0) { // else the plan's optimizer
		o.optim.lr = lr;
		o.optim_set |= RT_OPTIM_SET(RT_HYPER_LR);
	}
	RtResult res, th;
	char *report;
	int rc = run_plan(p, &o, &res, &report);
	if (rc)
		fail_msg("cuda run failed: %s", report);
	free(report);
	assert_true(res.checked);
	print_message("dtype %d: loss rel err %.3g, weight rel err %.3g (bound %.3g, %s)\n", dtype,
	              res.loss_rel, res.weight_rel, res.tolerance, rt_bound_names[res.bound]);
	assert_true(res.check_ok);
	/* Memory is the interpreter's accounting: the same on every backend. */
	RtOptions t = options("threads", 3, 0, RT_DTYPE_F32);
	t.optim = o.optim;
	t.optim_set = o.optim_set;
	assert_int_equal(run_plan(p, &t, &th, &report), RT_OK);
	free(report);
	for (int i = 0; i < p->world; i++)
		assert_int_equal(res.peak_act[i], th.peak_act[i]);
	rt_result_free(&res);
	rt_result_free(&th);
	plan_free(p);
}

void cuda__plan_one_gpu__check_f32(void **state)
{
	(void)state;
	run_checked(one_gpu_src, RT_DTYPE_F32, 1, 0.5);
}

void cuda__plan_one_gpu__check_bf16(void **state)
{
	(void)state;
	run_checked(one_gpu_src, RT_DTYPE_BF16, 1, 0.5);
}

/* A small transformer with every kind on one GPU: learned positions, attention with
 * biases, grouped-query heads and dropout on its probabilities, then rotary with GQA,
 * both MLPs, both norms, hidden dropouts, a head tied to the embedding, cross-entropy
 * on next tokens. */
static const char tf_src[] =
	"pipeline tf;\nmesh pp=1;\nmicrobatches 4;\ninput tokens 3x12 vocab=37;\n"
	"stage s0 { embed 24 positions; dropout 0.1; residual { layernorm;\n"
	"  attention heads=4 kv_heads=2 bias dropout=0.1; dropout 0.1; }\n"
	"  residual { layernorm; mlp 40 bias; dropout 0.1; } }\n"
	"stage s1 { residual { rmsnorm; attention heads=6 kv_heads=3 rope; }\n"
	"  residual { rmsnorm; swiglu 40; } rmsnorm; head tied; loss xent; }\n"
	"schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n";

void cuda__plan_transformer__check_f32(void **state)
{
	(void)state;
	run_checked(tf_src, RT_DTYPE_F32, 1, 0.05);
}

/* The same transformer with flash attention (both layers, one with dropout=0.1): the
 * log-sum-exp kept, P rebuilt in B, under --check. */
static const char tf_flash_src[] =
	"pipeline tf;\nmesh pp=1;\nmicrobatches 4;\ninput tokens 3x12 vocab=37;\n"
	"stage s0 { embed 24 positions; dropout 0.1; residual { layernorm;\n"
	"  attention heads=4 kv_heads=2 bias dropout=0.1 flash; dropout 0.1; }\n"
	"  residual { layernorm; mlp 40 bias; dropout 0.1; } }\n"
	"stage s1 { residual { rmsnorm; attention heads=6 kv_heads=3 rope flash; }\n"
	"  residual { rmsnorm; swiglu 40; } rmsnorm; head tied; loss xent; }\n"
	"schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n";

void cuda__plan_transformer_flash__check_f32(void **state)
{
	(void)state;
	run_checked(tf_flash_src, RT_DTYPE_F32, 1, 0.05);
}

/* The same plan with the AdamW optimizer: its state on the GPU, --check against the
 * cpu reference (the step itself matches the cpu's bit for bit: cuda__kernels__...). */
static const char one_gpu_adamw_src[] = ONE_GPU_SRC "optimizer adamw lr=1e-3;\n";

void cuda__plan_one_gpu__check_adamw(void **state)
{
	(void)state;
	run_checked(one_gpu_adamw_src, RT_DTYPE_F32, 1, 0);
}

void cuda__plan_two_gpus__check_f32(void **state)
{
	(void)state;
	run_checked(two_gpu_src, RT_DTYPE_F32, 2, 0.5);
}

/* Tensor parallelism on two GPUs (tp=2): every split kind's shard on cuda_tf.cu's rows
 * (attention's dropout masks drawn for the rank's heads), TPREDUCE on the tp
 * ncclCommSplit communicator, the loss's max then sum. */
static const char tp_src[] =
	"pipeline tp;\nmesh pp=1 tp=2;\nmicrobatches 4;\ninput tokens 3x12 vocab=38;\n"
	"stage s0 { embed 24 positions; residual { layernorm;\n"
	"  attention heads=4 kv_heads=2 bias dropout=0.1; dropout 0.1; }\n"
	"  residual { layernorm; mlp 40 bias; } }\n"
	"stage s1 { residual { rmsnorm; attention heads=6 kv_heads=2 rope; }\n"
	"  residual { rmsnorm; swiglu 40; } rmsnorm; head; loss xent; }\n"
	"schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n";

void cuda__plan_tp2_two_gpus__check_f32(void **state)
{
	(void)state;
	run_checked(tp_src, RT_DTYPE_F32, 2, 0.05);
}
