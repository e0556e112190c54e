/* Transformer-stage benchmark on the cpu device: how close one stage's forward and
 * backward come to OpenBLAS sgemm's own FLOP rate on the same GEMMs (issue 11's target:
 * at least 60%; the rest is the non-GEMM kernels and the glue between layers).
 *
 * For each shape it builds one transformer layer as a stage's layer list (GPT-2:
 * residual { layernorm; attention bias; } residual { layernorm; mlp 4d bias; }, or
 * Llama: rmsnorm, rotary grouped-query attention, swiglu), lays out every tensor the
 * layer rows need from plan_layer_tensors (the layer table), and runs F, B and W through
 * rt_device_cpu.layers, the rows piperun calls, walking residuals as runtime/model.c
 * does (F adds the body's input with the device's add; B copies the output gradient at
 * the body's end and adds it at the residual).  Tensors are laid out once, so
 * allocation is not timed (the model allocates per op; the piperun timing at the end of
 * bench_tf.sh shows a whole plan).
 *
 * The GEMMs are the kernels' own: the bench is linked with -Wl,--wrap=cblas_sgemm, so
 * every cblas_sgemm call of tkernels.c and cpu.c passes through __wrap_cblas_sgemm,
 * which times it and, on the recorded pass, keeps its arguments.  The "sgemm alone"
 * figure replays exactly those calls (same shapes, leading dimensions, transposes,
 * operands in the same memory, same order) with nothing in between; the FLOPs are the
 * layer table's (plan_layer_figures), checked against the replayed calls' 2mnk.
 * Timings are the best of --reps repetitions after a warm-up, the stage and the replay
 * interleaved so that load from other processes hits both alike.
 *
 *   tf_bench [--threads N] [--reps R] [--only NAME] [--layers]
 *
 * --threads sets OpenBLAS's threads for both the stage and the replay (default 1);
 * --layers adds a line per layer and phase (time, time inside GEMMs, the rest). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "../plan/tfcount.h"
#include "../runtime/rt_private.h"

/* ---- cblas_sgemm interposition ---- */

typedef struct {
	enum CBLAS_ORDER order;
	enum CBLAS_TRANSPOSE ta, tb;
	int m, n, k, lda, ldb, ldc;
	float alpha, beta;
	const float *a, *b;
	float *c;
} GemmCall;

void __real_cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta,
                        enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc);
void __wrap_cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta,
                        enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc);

/* The clock of every figure: this thread's CPU time with one OpenBLAS thread (the
 * GEMMs run on the calling thread; other processes on a shared machine do not count),
 * else wall-clock time. */
static clockid_t g_clock = CLOCK_THREAD_CPUTIME_ID;

static double now(void)
{
	struct timespec t;
	clock_gettime(g_clock, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct {
	double gemm_s;      // time inside cblas_sgemm since the last reset
	int record;         // 1: append each call to calls
	GemmCall *calls;
	int ncalls, cap;
} g_wrap;

void __wrap_cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta,
                        enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc)
{
	if (g_wrap.record) {
		if (g_wrap.ncalls == g_wrap.cap) {
			g_wrap.cap = g_wrap.cap ? 2 * g_wrap.cap : 256;
			g_wrap.calls = realloc(g_wrap.calls, (size_t)g_wrap.cap * sizeof *g_wrap.calls);
			if (!g_wrap.calls) {
				fprintf(stderr, "tf_bench: out of memory recording GEMM calls\n");
				exit(1);
			}
		}
		g_wrap.calls[g_wrap.ncalls++] =
			(GemmCall){order, ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c};
	}
	double t0 = now();
	__real_cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
	g_wrap.gemm_s += now() - t0;
}

/* ---- one stage: the layers, their tensors, the walk ---- */

#define FLAG(k) LAYER_FLAG(LAYER_KEY_##k)
enum { MAX_LAYERS = 8 };

typedef struct {
	const char *name;
	int llama;             // 0: GPT-2 layer, 1: Llama layer
	int d, S, B, H, Hkv, f;
} Shape;

typedef struct {
	LayerTensors t;
	RtTensor *param, *grad;         // [t.nparams]
	RtTensor *saved[LAYER_MAX_TENSORS], *held[LAYER_MAX_TENSORS];
	RtTensor work, y, dx, skip;     // skip: a residual's copy of the output gradient
	const RtTensor *x, *dy;         // what F read, what B read (W reads both again)
} LayerRun;

typedef struct {
	PlanLayer ly[MAX_LAYERS];
	int n;
	LayerShape sh;
	LayerRun run[MAX_LAYERS];
	RtTensor x0, dy0;
	RtRank *r;
	double glue_t;                  // residual adds and copies of the best pass
} Stage;

static void die(const char *what)
{
	fprintf(stderr, "tf_bench: %s\n", what);
	exit(1);
}

static uint64_t g_seed = 0x9e3779b97f4a7c15ull;

static float urand(void)
{
	g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(g_seed >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

/* Lays out t (rows x cols) on the cpu device, filled as the model initializes `init`
 * (uniform: u[-1, 1) / sqrt(rows)). */
static void tensor(RtRank *r, RtTensor *t, int64_t rows, int64_t cols, LayerInit init)
{
	memset(t, 0, sizeof *t);
	t->rows = rows;
	t->cols = cols;
	t->bytes = rows * cols * (int64_t)sizeof(float);
	if (rt_device_cpu.alloc(r, t))
		die(r->err);
	float *v = t->data;
	float s = init == LAYER_INIT_UNIFORM ? 1.0f / sqrtf((float)rows) : 0.0f;
	for (int64_t i = 0; i < rows * cols; i++)
		v[i] = init == LAYER_INIT_ONE ? 1.0f : init == LAYER_INIT_UNIFORM ? urand() * s : 0.0f;
}

static void random_tensor(RtRank *r, RtTensor *t, int64_t rows, int64_t cols)
{
	tensor(r, t, rows, cols, LAYER_INIT_ZERO);
	for (int64_t i = 0; i < rows * cols; i++)
		((float *)t->data)[i] = urand();
}

static void add_layer(Stage *s, PlanLayer l)
{
	s->ly[s->n++] = l;
}

static void stage_build(Stage *s, const Shape *p, RtRank *r)
{
	memset(s, 0, sizeof *s);
	s->r = r;
	int d = p->d;
	PlanLayer norm = {.kind = p->llama ? LAYER_RMSNORM : LAYER_LAYERNORM, .in = d, .out = d};
	PlanLayer res = {.kind = LAYER_RESIDUAL, .in = d, .out = d, .span = 2};
	PlanLayer attn = {.kind = LAYER_ATTN, .in = d, .out = d, .heads = p->H, .kv_heads = p->Hkv,
	                  .flags = p->llama ? FLAG(ROPE) : FLAG(BIAS)};
	PlanLayer mlp = {.kind = p->llama ? LAYER_SWIGLU : LAYER_MLP, .in = d, .out = d,
	                 .hidden = p->f, .flags = p->llama ? 0 : FLAG(BIAS)};
	add_layer(s, res);
	add_layer(s, norm);
	add_layer(s, attn);
	add_layer(s, res);
	add_layer(s, norm);
	add_layer(s, mlp);
	int64_t N = (int64_t)p->B * p->S;
	s->sh = (LayerShape){N, p->B, p->S, 0, 0, PREC_F32, 1};
	TkAttn a = plan_layer_attn(&attn, &s->sh);
	const char *bad = tk_attn_check(&a);
	if (bad)
		die(bad);
	random_tensor(r, &s->x0, N, d);
	random_tensor(r, &s->dy0, N, d);
	for (int l = 0; l < s->n; l++) {
		const PlanLayer *ly = &s->ly[l];
		LayerRun *lr = &s->run[l];
		if (ly->kind == LAYER_RESIDUAL) {
			tensor(r, &lr->skip, N, d, LAYER_INIT_ZERO);
			continue;
		}
		plan_layer_tensors(ly, &s->sh, 1, &lr->t); // the whole layer: tp = 1
		lr->param = calloc((size_t)lr->t.nparams, sizeof *lr->param);
		lr->grad = calloc((size_t)lr->t.nparams, sizeof *lr->grad);
		if (!lr->param || !lr->grad)
			die("out of memory");
		for (int j = 0; j < lr->t.nparams; j++) {
			const LayerTensor *q = &lr->t.param[j];
			tensor(r, &lr->param[j], q->rows, q->cols, q->init);
			tensor(r, &lr->grad[j], q->rows, q->cols, LAYER_INIT_ZERO);
		}
		for (int j = 0; j < lr->t.nsaved; j++) {
			lr->saved[j] = malloc(sizeof(RtTensor));
			tensor(r, lr->saved[j], lr->t.saved[j].rows, lr->t.saved[j].cols, LAYER_INIT_ZERO);
		}
		for (int j = 0; j < lr->t.nheld; j++) {
			lr->held[j] = malloc(sizeof(RtTensor));
			tensor(r, lr->held[j], lr->t.held[j].rows, lr->t.held[j].cols, LAYER_INIT_ZERO);
		}
		if (lr->t.work.rows)
			tensor(r, &lr->work, lr->t.work.rows, lr->t.work.cols, LAYER_INIT_ZERO);
		tensor(r, &lr->y, N, ly->out, LAYER_INIT_ZERO);
		tensor(r, &lr->dx, N, ly->in, LAYER_INIT_ZERO);
	}
}

static RtLayerCall call_of(Stage *s, int l)
{
	LayerRun *lr = &s->run[l];
	return (RtLayerCall){.layer = &s->ly[l], .rows = s->sh.rows, .sh = s->sh, .x = lr->x,
	                     .nparams = lr->t.nparams, .param = lr->param, .grad = lr->grad,
	                     .nsaved = lr->t.nsaved, .saved = lr->saved, .nheld = lr->t.nheld,
	                     .held = lr->held, .work = lr->t.work.rows ? &lr->work : NULL};
}

static void check(Stage *s, int rc)
{
	if (rc)
		die(s->r->err);
}

/* Times fn's part of layer l into t and g (this pass's figures). */
#define TIMED(t, g, expr)                                   \
	do {                                                    \
		double g0_ = g_wrap.gemm_s, t0_ = now();            \
		expr;                                               \
		(t) = now() - t0_;                                  \
		(g) = g_wrap.gemm_s - g0_;                          \
	} while (0)

typedef struct {
	double t[MAX_LAYERS][3], g[MAX_LAYERS][3];
	double glue, total;
} Pass;

/* One F, B, W of the stage, as runtime/model.c walks it. */
static void stage_pass(Stage *s, Pass *ps)
{
	RtRank *r = s->r;
	memset(ps, 0, sizeof *ps);
	double t0 = now(), gt, gg;
	(void)gg; // TIMED sets it; the glue does no GEMMs
	/* F: a residual remembers its input and adds it after its body's last layer. */
	const RtTensor *cur = &s->x0;
	int end[MAX_LAYERS], open = 0;
	const RtTensor *skip[MAX_LAYERS];
	for (int l = 0; l < s->n; l++) {
		const PlanLayer *ly = &s->ly[l];
		if (ly->kind == LAYER_RESIDUAL) {
			end[open] = l + ly->span;
			skip[open++] = cur;
			continue;
		}
		LayerRun *lr = &s->run[l];
		lr->x = cur;
		RtLayerCall c = call_of(s, l);
		c.y = &lr->y;
		TIMED(ps->t[l][0], ps->g[l][0], check(s, rt_device_cpu.layers[ly->kind].fwd(r, &c)));
		cur = &lr->y;
		for (; open && end[open - 1] == l; open--) {
			TIMED(gt, gg, check(s, rt_device_cpu.add(r, &lr->y, skip[open - 1])));
			ps->glue += gt;
		}
	}
	/* B: at a body's last layer keep a copy of dy; at the residual add it. */
	RtTensor *dcur = &s->dy0;
	int stack[MAX_LAYERS], nst = 0;
	for (int l = s->n - 1; l >= 0; l--) {
		const PlanLayer *ly = &s->ly[l];
		if (ly->kind == LAYER_RESIDUAL) {
			if (!nst || stack[nst - 1] != l)
				die("internal: residual walk");
			TIMED(gt, gg, check(s, rt_device_cpu.add(r, dcur, &s->run[stack[--nst]].skip)));
			ps->glue += gt;
			continue;
		}
		for (int i = 0; i < l; i++)
			if (s->ly[i].kind == LAYER_RESIDUAL && i + s->ly[i].span == l) {
				TIMED(gt, gg, check(s, rt_device_cpu.copy(r, &s->run[i].skip, dcur)));
				ps->glue += gt;
				stack[nst++] = i;
			}
		LayerRun *lr = &s->run[l];
		lr->dy = dcur;
		RtLayerCall c = call_of(s, l);
		c.dy = dcur;
		c.dx = &lr->dx;
		TIMED(ps->t[l][1], ps->g[l][1],
		      check(s, rt_device_cpu.layers[ly->kind].bwd_in(r, &c)));
		dcur = &lr->dx;
	}
	/* W: every layer with parameters, last first (as the model's W op). */
	for (int l = s->n - 1; l >= 0; l--) {
		const PlanLayer *ly = &s->ly[l];
		if (ly->kind == LAYER_RESIDUAL || !rt_device_cpu.layers[ly->kind].bwd_w)
			continue;
		RtLayerCall c = call_of(s, l);
		c.dy = s->run[l].dy;
		TIMED(ps->t[l][2], ps->g[l][2],
		      check(s, rt_device_cpu.layers[ly->kind].bwd_w(r, &c)));
	}
	ps->total = now() - t0;
}

/* The recorded GEMMs again, in order, nothing in between. */
static double replay(const GemmCall *c, int n)
{
	double t0 = now();
	for (int i = 0; i < n; i++)
		__real_cblas_sgemm(c[i].order, c[i].ta, c[i].tb, c[i].m, c[i].n, c[i].k, c[i].alpha,
		                   c[i].a, c[i].lda, c[i].b, c[i].ldb, c[i].beta, c[i].c, c[i].ldc);
	return now() - t0;
}

static void zero_grads(Stage *s)
{
	for (int l = 0; l < s->n; l++)
		for (int j = 0; j < s->run[l].t.nparams; j++)
			check(s, rt_device_cpu.zero(s->r, &s->run[l].grad[j]));
}

static const char *phase_name[3] = {"F", "B", "W"};

static void bench_shape(const Shape *p, RtRank *r, int reps, int per_layer)
{
	Stage s;
	stage_build(&s, p, r);
	/* The layer table's FLOPs per phase. */
	double flops[3] = {0, 0, 0};
	for (int l = 0; l < s.n; l++) {
		if (s.ly[l].kind == LAYER_RESIDUAL)
			continue;
		LayerCost c = plan_layer_figures(&s.ly[l], &s.sh);
		for (int k = 0; k < 3; k++)
			flops[k] += c.flops[k];
	}
	double table = flops[0] + flops[1] + flops[2];
	/* Record the GEMMs of one pass (after a warm-up pass). */
	Pass ps, best;
	memset(&best, 0, sizeof best);
	stage_pass(&s, &ps);
	g_wrap.ncalls = 0;
	g_wrap.record = 1;
	stage_pass(&s, &ps);
	g_wrap.record = 0;
	double gemm_flops = 0;
	for (int i = 0; i < g_wrap.ncalls; i++)
		gemm_flops += 2.0 * g_wrap.calls[i].m * g_wrap.calls[i].n * g_wrap.calls[i].k;
	if (fabs(gemm_flops - table) > 1e-9 * table)
		fprintf(stderr, "tf_bench: %s: the kernels' GEMMs do %.0f FLOPs, the layer table "
		        "counts %.0f\n", p->name, gemm_flops, table);
	replay(g_wrap.calls, g_wrap.ncalls);
	double best_total = INFINITY, best_gemm = INFINITY, best_replay = INFINITY;
	for (int i = 0; i < reps; i++) {
		zero_grads(&s);
		g_wrap.gemm_s = 0;
		stage_pass(&s, &ps);
		if (ps.total < best_total) {
			best_total = ps.total;
			best_gemm = g_wrap.gemm_s;
			best = ps;
		}
		double t = replay(g_wrap.calls, g_wrap.ncalls);
		best_replay = t < best_replay ? t : best_replay;
	}
	double phase[3] = {0, 0, 0};
	for (int l = 0; l < s.n; l++)
		for (int k = 0; k < 3; k++)
			phase[k] += best.t[l][k];
	double rate = table / best_total * 1e-9, alone = gemm_flops / best_replay * 1e-9;
	char hkv[16] = "";
	if (p->Hkv != p->H)
		snprintf(hkv, sizeof hkv, "/%d", p->Hkv);
	printf("%-10s d=%-4d S=%-4d B=%-2d N=%-5lld heads=%d%s f=%-5d %5.1f GFLOP  "
	       "stage %7.2f ms (F %.2f B %.2f W %.2f) %5.1f GFLOP/s  sgemm alone %7.2f ms "
	       "%5.1f GFLOP/s  ratio %3.0f%% (target >= 60%%: %s)  outside GEMMs %4.1f%% "
	       "(%d GEMM calls)\n",
	       p->name, p->d, p->S, p->B, (long long)s.sh.rows, p->H, hkv, p->f, table * 1e-9,
	       best_total * 1e3, phase[0] * 1e3, phase[1] * 1e3, phase[2] * 1e3, rate,
	       best_replay * 1e3, alone, 100 * rate / alone, rate / alone >= 0.6 ? "met" : "MISSED",
	       100 * (best_total - best_gemm) / best_total, g_wrap.ncalls);
	if (per_layer) {
		for (int l = 0; l < s.n; l++) {
			if (s.ly[l].kind == LAYER_RESIDUAL)
				continue;
			for (int k = 0; k < 3; k++)
				if (best.t[l][k] > 0)
					printf("    layer %d %-9s %s %8.3f ms, GEMMs %8.3f ms, rest %8.3f ms\n", l,
					       plan_layers[s.ly[l].kind].name, phase_name[k], best.t[l][k] * 1e3,
					       best.g[l][k] * 1e3, (best.t[l][k] - best.g[l][k]) * 1e3);
		}
		printf("    residual adds and copies %.3f ms\n", best.glue * 1e3);
	}
	fflush(stdout);
}

static const Shape shapes[] = {
	{"gpt-256", 0, 256, 128, 8, 4, 4, 1024},
	{"gpt-512", 0, 512, 256, 4, 8, 8, 2048},
	{"gpt-768", 0, 768, 256, 4, 12, 12, 3072},
	{"gpt-768s", 0, 768, 128, 16, 12, 12, 3072},
	{"llama-256", 1, 256, 128, 8, 4, 2, 768},
	{"llama-512", 1, 512, 256, 4, 8, 4, 1536},
	{"llama-768", 1, 768, 256, 4, 12, 4, 2048},
};

static int whole(const char *s, int lo)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < lo || v > 1024) {
		fprintf(stderr, "tf_bench: '%s' is not a whole number in [%d, 1024]\n", s, lo);
		exit(2);
	}
	return (int)v;
}

int main(int argc, char **argv)
{
	int threads = 1, reps = 5, per_layer = 0;
	const char *only = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = whole(argv[++i], 1);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = whole(argv[++i], 1);
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--layers"))
			per_layer = 1;
		else {
			fprintf(stderr, "usage: tf_bench [--threads N] [--reps R] [--only NAME] "
			                "[--layers]\n");
			return 2;
		}
	}
	openblas_set_num_threads(threads);
	if (threads > 1)
		g_clock = CLOCK_MONOTONIC;
	RtWorld w;
	memset(&w, 0, sizeof w);
	w.dev = &rt_device_cpu;
	RtRank r;
	memset(&r, 0, sizeof r);
	r.w = &w;
	r.rank = RT_REF_RANK;
	r.dev = &rt_device_cpu;
	printf("one transformer layer as a stage, F+B+W on the cpu device, OpenBLAS threads %d, "
	       "best of %d, in %s time:\n", threads, reps,
	       threads > 1 ? "wall-clock" : "thread CPU");
	int ran = 0;
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
		if (only && strcmp(only, shapes[i].name))
			continue;
		bench_shape(&shapes[i], &r, reps, per_layer);
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "tf_bench: no shape named '%s'\n", only);
		return 2;
	}
	return 0;
}
