/* Runtime tests: the synthetic data against its definition, the layer kernels against
 * finite differences, every schedule of the compiler's registry over a set of small
 * programs (those that take a written order get it written out; a schedule that runs
 * on none fails) with pipelined == sequential reference bit for bit on threads and
 * measured peak activation bytes == pipesim's prediction, the registries of launchers,
 * devices and communicators (complete, each part used by a backend), the watchdog on a
 * head-to-head deadlock, and the errors for missing peers, wrong sizes, FIFO mismatches
 * and bad models.  Plans come from the compiler (pipecc_compile) and are then broken by
 * hand where a test needs it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>
#include <unistd.h>

#include "../compiler/pipecc.h"
#include "../compiler/schedule.h"
#include "../runtime/rt_private.h"
#include "../sim/sim.h"
#include "layer_samples.h"
#include "plan_lib.h" // compile_pipe

/* ---- helpers ---- */

static Plan *compile_text(const char *src, const char *schedule, int mb)
{
	return compile_pipe(src, (PipeccOptions){.schedule = schedule, .microbatches = mb}, NULL, 0);
}

static const char tiny_src[] = "pipeline tiny;\nmesh pp=2;\nmicrobatches 2;\ninput 4x8;\n"
                               "stage s0 { linear 8; relu; }\nstage s1 { linear 8; loss mse; }\n"
                               "schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n";

static RtOptions options(int steps, int check)
{
	return (RtOptions){.backend = "threads", .steps = steps, .seed = 7,
	                   .check = check, .timeout_s = 20, .blas_threads = 1};
}

/* Runs p; returns rt_world_run's code and the report text (malloc'd) in *report. */
static int run_plan(const Plan *p, const RtOptions *o, RtResult *res, char **report)
{
	char err[1024];
	RtWorld *w = rt_world_open(p, o, err, sizeof err);
	if (!w) {
		if (report)
			*report = strdup(err);
		memset(res, 0, sizeof *res);
		return -100;
	}
	int rc = rt_world_run(w, res);
	if (report) {
		size_t len = 0;
		*report = NULL;
		FILE *f = open_memstream(report, &len);
		if (rc)
			rt_world_report(w, f);
		fclose(f);
	}
	rt_world_close(w, 0);
	return rc;
}

/* ---- data ---- */

static uint64_t sm64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void runtime__data__follows_semantics(void **state)
{
	(void)state;
	/* docs/semantics.md: k = seed; k = splitmix64(k ^ v) per field; u = (x>>40)/2^23 - 1 */
	float in[40], tg[40];
	rt_gen_values(rt_gen_key(42, RT_GEN_INPUT, 1, 2), in, 40);
	rt_gen_values(rt_gen_key(42, RT_GEN_TARGET, 1, 2), tg, 40);
	for (int i = 0; i < 40; i++) {
		uint64_t f1[] = {1, 1, 2, (uint64_t)i}, f2[] = {2, 1, 2, (uint64_t)i};
		uint64_t k1 = 42, k2 = 42;
		for (int j = 0; j < 4; j++) {
			k1 = sm64(k1 ^ f1[j]);
			k2 = sm64(k2 ^ f2[j]);
		}
		assert_true(in[i] == (float)((double)(k1 >> 40) / 8388608.0 - 1.0));
		assert_true(tg[i] == (float)((double)(k2 >> 40) / 8388608.0 - 1.0));
		assert_true(in[i] >= -1.0f && in[i] < 1.0f);
	}
	assert_true(memcmp(in, tg, sizeof in) != 0);
	/* The data set is the same every step (so training can fit it): the key has no
	 * step; another replica's microbatch differs. */
	float again[40];
	rt_gen_values(rt_gen_key(42, RT_GEN_INPUT, 0, 2), again, 40);
	assert_true(memcmp(in, again, sizeof in) != 0);
	Plan *p = compile_text(tiny_src, NULL, 0);
	assert_non_null(p);
	float w[72];
	rt_gen_weights(5, p, 1, w);
	uint64_t k = 5;
	uint64_t f[] = {3, 1, 0, 9};
	for (int j = 0; j < 4; j++)
		k = sm64(k ^ f[j]);
	assert_true(fabsf(w[9] - (float)((double)(k >> 40) / 8388608.0 - 1.0) / sqrtf(8.0f)) < 1e-7f);
	for (int i = 64; i < 72; i++)
		assert_true(w[i] == 0.0f); // biases start at 0
	plan_free(p);
}

/* ---- kernels ---- */

/* Loss of one microbatch through stage 0 of a one-stage model. */
static double loss_of(RtRank *r, RtStageBufs *b, RtTensor **saved)
{
	RtTensor *x = rt_stage_input(r, 0, 0, 0, b, RT_MEM_TEMP), *y;
	assert_int_equal(rt_stage_forward(r, 0, 0, 0, 0, b, x, saved, &y), RT_OK);
	assert_null(y);
	float l;
	r->dev->download(r, b->loss, &l);
	for (int i = 0; i < r->w->model->st[0].nslots; i++) {
		rt_tensor_free(r, saved[i]);
		saved[i] = NULL;
	}
	return l;
}

static void runtime__gradients__match_finite_differences(void **state)
{
	(void)state;
	const char *src = "pipeline g;\nmesh pp=1;\nmicrobatches 1;\ninput 3x4;\n"
	                  "stage s0 { linear 5; gelu; linear 4; loss mse; }\n"
	                  "schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n";
	Plan *p = compile_text(src, NULL, 0);
	assert_non_null(p);
	char err[256];
	RtWorld w = {.plan = p, .dev = &rt_device_cpu, .opt = options(1, 0)};
	w.model = rt_model_new(p, 1, err, sizeof err);
	assert_non_null(w.model);
	RtRank r = {.w = &w, .rank = RT_REF_RANK, .dev = &rt_device_cpu, .model = w.model};
	RtStageBufs b;
	assert_int_equal(rt_stage_bufs_open(&r, 0, &b), RT_OK);
	RtTensor *saved[16] = {0};
	assert_true(w.model->st[0].nslots <= 16);
	RtTensor *x = rt_stage_input(&r, 0, 0, 0, &b, RT_MEM_TEMP), *y, *dx;
	assert_int_equal(rt_stage_forward(&r, 0, 0, 0, 0, &b, x, saved, &y), RT_OK);
	/* The runtime holds exactly the plan's F figures, then B's, then nothing. */
	assert_int_equal(r.mem[RT_MEM_SAVED], p->stages[0].save_fb + p->stages[0].save_fw);
	assert_int_equal(rt_stage_backward(&r, 0, 0, 0, 0, &b, NULL, saved, &dx), RT_OK);
	assert_null(dx);
	assert_int_equal(r.mem[RT_MEM_SAVED], p->stages[0].save_fw + p->stages[0].save_bw);
	assert_int_equal(rt_stage_weights(&r, 0, &b, saved), RT_OK);
	assert_int_equal(r.mem[RT_MEM_SAVED], 0);
	int64_t n = p->stages[0].params;
	float *g = malloc((size_t)n * sizeof *g), *wt = malloc((size_t)n * sizeof *wt);
	r.dev->download(&r, b.grads, g);
	r.dev->download(&r, b.params, wt);
	int checked = 0;
	for (int64_t i = 0; i < n; i += 3) {
		float keep = wt[i];
		const float h = 1e-2f;
		wt[i] = keep + h;
		r.dev->upload(&r, b.params, wt);
		double lp = loss_of(&r, &b, saved);
		wt[i] = keep - h;
		r.dev->upload(&r, b.params, wt);
		double lm = loss_of(&r, &b, saved);
		wt[i] = keep;
		r.dev->upload(&r, b.params, wt);
		double num = (lp - lm) / (2 * h);
		assert_true(fabs(num - g[i]) <= 2e-3 * fmax(1.0, fabs(num)) + 2e-4);
		checked++;
	}
	assert_true(checked > 10);
	free(g);
	free(wt);
	rt_stage_bufs_close(&r, &b);
	rt_model_free(w.model);
	plan_free(p);
}

/* ---- every schedule ---- */

static const char *const programs[] = {
	/* chain, one stage per rank */
	"pipeline a;\nmesh pp=2;\nmicrobatches 4;\ninput 4x8;\n"
	"stage s0 { linear 8; relu; }\nstage s1 { linear 6; loss mse; }\n"
	"schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n",
	/* skip connection, dp = 2, gelu, widths change */
	"pipeline b;\nmesh pp=4 dp=2;\nmicrobatches 4;\ninput 2x6;\n"
	"stage s0 { linear 8; relu; }\nstage s1 { linear 8; gelu; }\n"
	"stage s2 { linear 5; relu; }\nstage s3 { linear 4; loss mse; }\n"
	"skip s0 -> s2;\nschedule gpipe;\ncost * f=1 b=1 w=1;\nlink latency=1us bandwidth=1GB/s;\n",
	/* two stages per rank, skips over local and remote edges */
	"pipeline c;\nmesh pp=2;\nmicrobatches 4;\ninput 2x8;\n"
	"stage s0 { linear 8; relu; }\nstage s1 { linear 8; gelu; }\n"
	"stage s2 { linear 8; relu; }\nstage s3 { linear 8; loss mse; }\n"
	"skip s0 -> s3;\nskip s0 -> s2;\nschedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n",
	/* V placement with dp */
	"pipeline d;\nmesh dp=2 pp=2;\nmicrobatches 4;\ninput 2x8;\n"
	"stage s0 { linear 8; relu; }\nstage s1 { linear 8; relu; }\n"
	"stage s2 { linear 8; relu; }\nstage s3 { linear 8; loss mse; }\n"
	"skip s1 -> s3;\nplacement v;\nschedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n",
	/* one pipeline rank: every edge a local hand-off */
	"pipeline e;\nmesh pp=1 dp=2;\nmicrobatches 2;\ninput 2x8;\n"
	"stage s0 { linear 8; relu; }\nstage s1 { linear 8; gelu; }\n"
	"stage s2 { linear 8; loss mse; }\nskip s0 -> s2;\nschedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n",
	/* eight stages on four ranks */
	"pipeline f;\nmesh pp=4;\nmicrobatches 8;\ninput 2x4;\n"
	"stage s0 { linear 4; relu; }\nstage s1 { linear 4; relu; }\nstage s2 { linear 4; gelu; }\n"
	"stage s3 { linear 4; relu; }\nstage s4 { linear 4; relu; }\nstage s5 { linear 4; relu; }\n"
	"stage s6 { linear 4; relu; }\nstage s7 { linear 4; loss mse; }\nskip s2 -> s5;\n"
	"schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n",
};

/* Runs p (threads, --check) and compares with the reference and the simulator; 0 when
 * pipesim finds p deadlocks under the strict model (nothing to compare), else 1. */
static int run_and_compare(Plan *p, const char *name, int prog)
{
	PlanError e;
	assert_int_equal(plan_verify(p, &e), 0);
	SimOptions so = {.model = SIM_STRICT};
	SimResult sr;
	if (sim_run(p, &so, &sr) != 0) {
		sim_result_free(&sr);
		return 0;
	}
	RtOptions o = options(2, 1);
	RtResult res;
	char *rep;
	int rc = run_plan(p, &o, &res, &rep);
	if (rc)
		fprintf(stderr, "%s on program %d: %s\n", name, prog, rep);
	assert_int_equal(rc, 0);
	assert_true(res.checked);
	if (!res.check_ok || res.loss_rel != 0 || res.weight_rel != 0)
		fprintf(stderr, "%s on program %d: loss rel %g weight rel %g\n", name, prog,
		        res.loss_rel, res.weight_rel);
	/* threads: same summation order as the reference, so bit for bit */
	assert_true(res.check_ok);
	assert_true(res.loss_rel == 0 && res.weight_rel == 0);
	for (int r = 0; r < p->world; r++) {
		assert_int_equal(res.peak_act[r], sr.ranks[r].peak_act_bytes);
		assert_int_equal(res.held_end[r], 0);
	}
	assert_true(res.loss[0] > 0 && isfinite(res.loss[1]));
	free(rep);
	rt_result_free(&res);
	sim_result_free(&sr);
	return 1;
}

/* Every registered schedule, over every program (as written, or with its order written
 * out): it must run on at least one, or the test fails, so a schedule that rejects
 * every shape here cannot pass by running on nothing. */
static void runtime__every_schedule__matches_reference_and_sim(void **state)
{
	(void)state;
	int nprog = sizeof programs / sizeof programs[0];
	char csv[] = "/tmp/test_runtime_order.XXXXXX";
	int fd = mkstemp(csv);
	assert_true(fd >= 0);
	close(fd);
	for (int k = 0; k < sched_count; k++) {
		const char *name = sched_registry[k]->name;
		int ran = 0;
		for (int i = 0; i < nprog; i++) {
			Plan *p = compile_text(programs[i], name, 0);
			char *alt[2] = {NULL, NULL};
			int nalt = p ? 0 : written_orders(programs[i], sched_registry[0]->name, csv, alt);
			for (int a = 0; !p && a < nalt; a++)
				p = alt[a] ? compile_text(alt[a], name, 0) : NULL;
			free(alt[0]);
			free(alt[1]);
			if (!p)
				continue; // this schedule does not take this shape
			ran += run_and_compare(p, name, i);
			plan_free(p);
		}
		printf("runtime: schedule %s ran on %d of %d programs\n", name, ran, nprog);
		if (ran == 0)
			fail_msg("schedule %s is registered but ran on none of the %d programs", name,
			         nprog);
	}
	unlink(csv);
}

/* ---- registries ---- */

/* Members from `first` to the table's end, as function pointers: all set. */
static int filled(const void *table, size_t size, size_t first, size_t last)
{
	void (*const *fn)(void) = (void (*const *)(void))((const char *)table + first);
	size_t n = (last + sizeof *fn - first) / sizeof *fn;
	(void)size;
	for (size_t i = 0; i < n; i++)
		if (!fn[i])
			return 0;
	return 1;
}

/* Every built part has every entry the world and the interpreter call (the optional
 * ones are the process- and rank-level open/close of devices and communicators, and a
 * launcher's abort), and every registered part is some backend's: a part that no
 * backend names would be tested by nothing. */
static void runtime__registries__parts_complete_and_used(void **state)
{
	(void)state;
	for (int i = 0; i < rt_nlaunchers; i++) {
		const RtLauncher *l = rt_launchers[i];
		if (!l)
			continue;
		assert_true(l->name && l->open && l->launch && l->gather && l->bcast && l->close);
		int used = 0;
		for (int b = 0; b < rt_nbackends; b++)
			used += rt_backends[b].launcher == l;
		if (!used)
			fail_msg("launcher %s is registered but no backend uses it", l->name);
	}
	for (int i = 0; i < rt_ndevices; i++) {
		const RtDevice *d = rt_devices[i];
		if (!d)
			continue;
		assert_true(filled(d, sizeof *d, offsetof(RtDevice, alloc), offsetof(RtDevice, sync)));
		int used = 0;
		for (int b = 0; b < rt_nbackends; b++)
			used += rt_backends[b].device == d;
		if (!used)
			fail_msg("device %s is registered but no backend uses it", d->name);
	}
	for (int i = 0; i < rt_ncomms; i++) {
		const RtComm *c = rt_comms[i];
		if (!c)
			continue;
		assert_non_null(c->abort);
		assert_true(filled(c, sizeof *c, offsetof(RtComm, group_start),
		                   offsetof(RtComm, barrier)));
		int used = 0;
		for (int b = 0; b < rt_nbackends; b++)
			used += rt_backends[b].comm == c;
		if (!used)
			fail_msg("communicator %s is registered but no backend uses it", c->name);
	}
	/* Every backend is known by name; the built ones are listed and accepted. */
	char names[256], msg[512];
	rt_backend_names(names, sizeof names);
	for (int b = 0; b < rt_nbackends; b++) {
		const RtBackend *be = &rt_backends[b];
		assert_ptr_equal(rt_backend_find(be->name), be);
		int ok = rt_backend_check(be->name, msg, sizeof msg) == 0;
		assert_int_equal(ok, rt_backend_built(be));
		assert_int_equal(strstr(names, be->name) != NULL, ok);
	}
	assert_int_equal(rt_backend_check("threads", msg, sizeof msg), 0);
}

/* ---- layer kernels ---- */

/* Every layer kind either has a complete row on the cpu device, or a plan using it is
 * refused when the world opens, naming the kind (the transformer kinds until their
 * tkernels are wired into rows).  At least the original kinds have rows. */
static void runtime__layer_kernels__every_kind_has_a_cpu_row_or_is_refused(void **state)
{
	(void)state;
	assert_non_null(rt_device_cpu.layers);
	int rows = 0;
	for (int k = 0; k < LAYER_COUNT; k++) {
		const RtLayerKernels *row = &rt_device_cpu.layers[k];
		const char *name = plan_layers[k].name;
		PlanLayer ly = {.kind = (LayerKind)k, .in = 8, .out = 8, .heads = 2, .kv_heads = 2,
		                .hidden = 16};
		PlanStage st = {.name = "s0", .nlayers = 1, .layers = &ly};
		Plan p = {.nstages = 1, .stages = &st, .rows = 4, .seq = 4, .vocab = 8};
		if (plan_layers[k].arg == LAYER_ARG_BODY) { // the model's own: no row, not refused
			char err[256];
			assert_null(row->fwd);
			assert_null(rt_device_check(&rt_device_cpu, &p, err, sizeof err));
			continue;
		}
		if (!row->fwd) {
			char err[256], want[128];
			assert_non_null(rt_device_check(&rt_device_cpu, &p, err, sizeof err));
			snprintf(want, sizeof want, "the cpu device has no kernel for layer kind %s", name);
			if (!strstr(err, want))
				fail_msg("layer kind %s without a cpu row: refused with '%s'", name, err);
			continue;
		}
		rows++;
		LayerShape sh = plan_shape(&p);
		int params = plan_layer_figures(&ly, &sh).params > 0;
		/* An embedding's input is token ids: nothing takes their gradient. */
		if (!row->bwd_in != (k == LAYER_EMBED))
			fail_msg("layer kind %s: an input-gradient kernel on the cpu device %s", name,
			         k == LAYER_EMBED ? "for token ids" : "is missing");
		if (!row->bwd_w != !params)
			fail_msg("layer kind %s: a weight-gradient kernel on the cpu device %s", name,
			         params ? "is missing" : "for a kind without parameters");
	}
	assert_true(rows >= 4);
}

/* One layer on the cpu device: its tensors (plan_layer_tensors) and a call over them. */
typedef struct {
	RtTensor *x, *y, *dy, *dx, *target, *loss, *work;
	RtTensor *param[LAYER_MAX_TENSORS], *grad[LAYER_MAX_TENSORS];
	RtTensor pv[LAYER_MAX_TENSORS], gv[LAYER_MAX_TENSORS];
	RtTensor *keep[2 * LAYER_MAX_TENSORS]; // saved, then held
	LayerTensors t;
	RtLayerCall c;
} OneLayer;

static float *f32(RtTensor *t)
{
	return (float *)t->data;
}

/* Values in +-[0.2, 1): clear of relu's kink at 0, so finite differences hold. */
static void fill_away_from_zero(RtTensor *t, uint64_t seed)
{
	for (int64_t i = 0; i < t->rows * t->cols; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		double u = (double)(seed >> 11) / 9007199254740992.0;
		f32(t)[i] = (float)((i % 2 ? -1 : 1) * (0.2 + 0.8 * u));
	}
}

/* Token ids in [0, vocab). */
static void fill_tokens(RtTensor *t, int64_t vocab, uint64_t seed)
{
	for (int64_t i = 0; i < t->rows * t->cols; i++)
		f32(t)[i] = (float)((seed + (uint64_t)i * 5) % (uint64_t)vocab);
}

static void one_layer_open(RtRank *r, OneLayer *o, const PlanLayer *ly, const LayerShape *sh)
{
	int64_t rows = sh->rows;
	memset(o, 0, sizeof *o);
	plan_layer_tensors(ly, sh, 1, &o->t);
	RtTensor **mine[] = {&o->x, &o->y, &o->dy, &o->dx, &o->target};
	int tokens = plan_layers[ly->kind].tokens;
	int64_t cols[] = {ly->in, ly->out, ly->out, ly->in, tokens ? 1 : ly->in};
	for (int i = 0; i < 5; i++) {
		*mine[i] = rt_tensor_new(r, rows, cols[i], RT_MEM_TEMP);
		fill_away_from_zero(*mine[i], 11 + (uint64_t)i);
	}
	if (ly->kind == LAYER_EMBED)
		fill_tokens(o->x, sh->vocab, 3);
	if (tokens)
		fill_tokens(o->target, ly->in, 1);
	o->loss = rt_tensor_new(r, 1, 4, RT_MEM_TEMP);
	for (int j = 0; j < o->t.nparams; j++) {
		o->param[j] = rt_tensor_new(r, o->t.param[j].rows, o->t.param[j].cols, RT_MEM_PARAM);
		o->grad[j] = rt_tensor_new(r, o->t.param[j].rows, o->t.param[j].cols, RT_MEM_GRAD);
		fill_away_from_zero(o->param[j], 31 + (uint64_t)j);
		/* As the model's init scales them: 1/sqrt(inputs), so softmaxes stay smooth. */
		for (int64_t i = 0; i < o->param[j]->rows * o->param[j]->cols; i++)
			f32(o->param[j])[i] /= sqrtf((float)o->t.param[j].rows);
		o->pv[j] = *o->param[j];
		o->gv[j] = *o->grad[j];
	}
	for (int j = 0; j < o->t.nsaved + o->t.nheld; j++) {
		const LayerTensor *sh = j < o->t.nsaved ? &o->t.saved[j] : &o->t.held[j - o->t.nsaved];
		o->keep[j] = rt_tensor_new_of(r, sh, RT_MEM_SAVED);
	}
	if (o->t.work.rows)
		o->work = rt_tensor_new(r, o->t.work.rows, o->t.work.cols, RT_MEM_TEMP);
	o->c = (RtLayerCall){.layer = ly, .rows = rows, .sh = *sh, .x = o->x, .nparams = o->t.nparams,
	                     .param = o->pv, .grad = o->gv, .nsaved = o->t.nsaved,
	                     .saved = o->keep, .nheld = o->t.nheld, .held = o->keep + o->t.nsaved,
	                     .work = o->work, .key = 0x5eed};
	if (plan_layers[ly->kind].loss)
		o->c.target = o->target, o->c.loss = o->loss, o->c.slot = 1, o->c.scale = 1;
	else
		o->c.y = o->y;
}

static void one_layer_close(RtRank *r, OneLayer *o)
{
	RtTensor *all[] = {o->x, o->y, o->dy, o->dx, o->target, o->loss, o->work};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		rt_tensor_free(r, all[i]);
	for (int j = 0; j < o->t.nparams; j++) {
		rt_tensor_free(r, o->param[j]);
		rt_tensor_free(r, o->grad[j]);
	}
	for (int j = 0; j < o->t.nsaved + o->t.nheld; j++)
		rt_tensor_free(r, o->keep[j]);
}

/* The objective the gradients are of: a loss's loss, else sum(y .* dy) for the fixed
 * random dy, in double. */
static double objective(RtRank *r, OneLayer *o)
{
	RtLayerCall c = o->c;
	assert_int_equal(rt_device_cpu.layers[c.layer->kind].fwd(r, &c), RT_OK);
	if (plan_layers[c.layer->kind].loss)
		return f32(o->loss)[1];
	double s = 0;
	for (int64_t i = 0; i < o->y->rows * o->y->cols; i++)
		s += (double)f32(o->y)[i] * f32(o->dy)[i];
	return s;
}

/* Central differences of the objective against the analytic gradient g of the
 * elements of t. */
static int check_gradient(RtRank *r, OneLayer *o, RtTensor *t, const float *g,
                          const char *kind, const char *what)
{
	int checked = 0;
	for (int64_t i = 0; i < t->rows * t->cols; i++) {
		float keep = f32(t)[i];
		const float h = 1e-2f;
		f32(t)[i] = keep + h;
		double lp = objective(r, o);
		f32(t)[i] = keep - h;
		double lm = objective(r, o);
		f32(t)[i] = keep;
		double num = (lp - lm) / (2 * h);
		if (!(fabs(num - g[i]) <= 2e-3 * fmax(1.0, fabs(num)) + 5e-4))
			fail_msg("layer kind %s: %s element %lld: %g analytic, %g by finite differences",
			         kind, what, (long long)i, (double)g[i], num);
		checked++;
	}
	return checked;
}

/* Every layer kind's cpu row (the table, not a hand list): the input gradient of B and
 * the parameter gradients of W match finite differences of F, B writes no parameter
 * gradient (zero-bubble's split), and W accumulates.  Kinds with keys run in every
 * variant layer_samples.h derives from their rows (biases, grouped-query and rotary
 * attention, dropout, flash, learned positions). */
static int fd_layer(RtRank *r, const PlanLayer *ly, const LayerShape *sh)
{
	const RtLayerKernels *row = &rt_device_cpu.layers[ly->kind];
	const char *name = plan_layers[ly->kind].name;
	OneLayer o;
	one_layer_open(r, &o, ly, sh);
	objective(r, &o); // F fills the saved tensors B and W read
	RtLayerCall c = o.c;
	c.y = NULL;
	c.dy = plan_layers[ly->kind].loss ? NULL : o.dy;
	c.dx = o.dx;
	int checked = 0;
	for (int j = 0; j < o.t.nparams; j++)
		memset(o.grad[j]->data, 0, (size_t)o.grad[j]->bytes);
	for (int j = 0; j < o.t.nsaved; j++) // flash: B rebuilds F's scratch (NaN till then)
		if (o.t.saved[j].scratch)
			memset(o.keep[j]->data, 0xff, (size_t)o.keep[j]->bytes);
	if (row->bwd_in && plan_attn_lse_slot(ly) >= 0)
		assert_int_equal(row->rebuild(r, &c), RT_OK);
	if (row->bwd_in) {
		assert_int_equal(row->bwd_in(r, &c), RT_OK);
		for (int j = 0; j < o.t.nparams; j++)
			for (int64_t i = 0; i < o.grad[j]->rows * o.grad[j]->cols; i++)
				if (f32(o.grad[j])[i] != 0)
					fail_msg("layer kind %s: B wrote a weight gradient", name);
		float *dx = malloc((size_t)o.dx->bytes);
		memcpy(dx, o.dx->data, (size_t)o.dx->bytes);
		checked += check_gradient(r, &o, o.x, dx, name, "input gradient");
		free(dx);
	}
	for (int j = 0; j < o.t.nparams; j++) {
		assert_non_null(row->bwd_w);
		objective(r, &o); // the saved tensors again at the unperturbed point
		assert_int_equal(row->bwd_w(r, &c), RT_OK); // twice: W accumulates
		assert_int_equal(row->bwd_w(r, &c), RT_OK);
		float *g = malloc((size_t)o.grad[j]->bytes);
		for (int64_t i = 0; i < o.grad[j]->rows * o.grad[j]->cols; i++)
			g[i] = f32(o.grad[j])[i] / 2;
		for (int i = 0; i < o.t.nparams; i++)
			memset(o.grad[i]->data, 0, (size_t)o.grad[i]->bytes);
		checked += check_gradient(r, &o, o.param[j], g, name, "parameter gradient");
		free(g);
	}
	if (checked == 0)
		fail_msg("layer kind %s: no gradient element checked", name);
	one_layer_close(r, &o);
	return checked;
}

static void runtime__layer_kernels__gradients_match_finite_differences(void **state)
{
	(void)state;
	const char *src = "pipeline g;\nmesh pp=1;\nmicrobatches 1;\ninput 3x4;\n"
	                  "stage s0 { linear 4; loss mse; }\n"
	                  "schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n";
	Plan *p = compile_text(src, NULL, 0);
	assert_non_null(p);
	RtWorld w = {.plan = p, .dev = &rt_device_cpu, .opt = options(1, 0)};
	RtRank r = {.w = &w, .rank = RT_REF_RANK, .dev = &rt_device_cpu, .model = w.model};
	int seen[LAYER_COUNT] = {0};
	/* Two sequences of 3 tokens over a vocabulary of 7. */
	LayerShape sh = {6, 2, 3, 7, 0, PREC_F32, 1};
	const LayerSampleSize size = {.width = 8, .out = 5, .hidden = 8, .heads = 2};
	for (int k = 0; k < LAYER_COUNT; k++) {
		if (!rt_device_cpu.layers[k].fwd) // a body kind: its layers' rows compute it
			continue;
		PlanLayer samples[LAYER_SAMPLES_MAX];
		int ns = layer_samples((LayerKind)k, &sh, &size, samples);
		for (int i = 0; i < ns; i++)
			assert_true(fd_layer(&r, &samples[i], &sh) > 0);
		seen[k] = ns > 0;
	}
	for (int k = 0; k < LAYER_COUNT; k++)
		if (rt_device_cpu.layers[k].fwd && !seen[k])
			fail_msg("layer kind %s has a cpu row but no finite-difference check",
			         plan_layers[k].name);
	plan_free(p);
}

/* squared_relu by hand: y = relu(x)^2 and dx = 2 relu(x) dy, exact in f32 at these x
 * (-1.5 and 0 give 0 and no gradient; 0.5 and 2 give 0.25 and 4). */
static void runtime__squared_relu__hand_values(void **state)
{
	(void)state;
	RtWorld w = {.dev = &rt_device_cpu, .opt = options(1, 0)};
	RtRank r = {.w = &w, .rank = RT_REF_RANK, .dev = &rt_device_cpu};
	PlanLayer ly = {.kind = LAYER_SQUARED_RELU, .in = 4, .out = 4};
	LayerShape sh = {1, 1, 1, 0, 0, PREC_F32, 1};
	OneLayer o;
	one_layer_open(&r, &o, &ly, &sh);
	const float x[4] = {-1.5f, 0, 0.5f, 2}, dy[4] = {3, 1, 2, -0.5f};
	const float y[4] = {0, 0, 0.25f, 4}, dx[4] = {0, 0, 2, -2};
	memcpy(o.x->data, x, sizeof x);
	memcpy(o.dy->data, dy, sizeof dy);
	const RtLayerKernels *row = &rt_device_cpu.layers[LAYER_SQUARED_RELU];
	assert_int_equal(row->fwd(&r, &o.c), RT_OK);
	RtLayerCall c = o.c;
	c.y = NULL, c.dy = o.dy, c.dx = o.dx;
	assert_int_equal(row->bwd_in(&r, &c), RT_OK);
	for (int i = 0; i < 4; i++) {
		assert_true(f32(o.y)[i] == y[i]);
		assert_true(f32(o.dx)[i] == dx[i]);
	}
	assert_null(row->bwd_w); // no parameters
	one_layer_close(&r, &o);
}

/* A device without a kernel a plan needs is refused when the world opens, naming the
 * device, the part and the kind; a part nobody needs (stage 0's first input gradient)
 * may be missing. */
static void runtime__device_without_row__refused_at_open(void **state)
{
	(void)state;
	Plan *p = compile_text(tiny_src, NULL, 0); // s0 { linear; relu }, s1 { linear; mse }
	assert_non_null(p);
	char err[256];
	assert_null(rt_device_check(&rt_device_cpu, p, err, sizeof err));
	RtLayerKernels rows[LAYER_COUNT];
	RtDevice dev = rt_device_cpu;
	dev.layers = rows;
	static const struct {
		LayerKind kind;
		int part; // 0 fwd, 1 bwd_in, 2 bwd_w
		const char *msg;
	} cases[] = {
		{LAYER_RELU, 0, "the cpu device has no kernel for layer kind relu (stage s0, layer 1)"},
		{LAYER_MSE, 1, "the cpu device has no input-gradient kernel for layer kind mse"},
		{LAYER_LINEAR, 2, "the cpu device has no weight-gradient kernel for layer kind linear"},
		{LAYER_LINEAR, 1, "the cpu device has no input-gradient kernel for layer kind linear "
		                  "(stage s1, layer 0)"},
		{LAYER_GELU, 0, NULL}, // not in the plan
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		memcpy(rows, rt_device_cpu.layers, sizeof rows);
		RtLayerFn *part[] = {&rows[cases[i].kind].fwd, &rows[cases[i].kind].bwd_in,
		                     &rows[cases[i].kind].bwd_w};
		*part[cases[i].part] = NULL;
		const char *why = rt_device_check(&dev, p, err, sizeof err);
		if (!cases[i].msg) {
			assert_null(why);
			continue;
		}
		assert_non_null(why);
		assert_non_null(strstr(why, cases[i].msg));
	}
	plan_free(p);
}

/* ---- failures ---- */

/* tiny under gpipe with 2 microbatches, rank 0 with its sends moved after both F and
 * rank 1 sending grad m0 before receiving act m1: head-to-head sends in separate
 * groups.  Rank 0 blocks at SEND act m=1, rank 1 at SEND grad m=0. */
static Plan *deadlock_plan(void)
{
	Plan *p = compile_text(tiny_src, "gpipe", 2);
	assert_non_null(p);
	PlanRank *r0 = &p->ranks[0], *r1 = &p->ranks[1];
	assert_int_equal(r0->nops, 9);
	assert_int_equal(r1->nops, 9);
	PlanOp a[9], b[9];
	/* rank 0: F0 F1 SENDa0 SENDa1 RECVg0 BW0 RECVg1 BW1 OPTIM */
	PlanOp f[2], sa[2], rg[2], bw[2], op0 = {0}, op1 = {0}, ra[2], f1[2], b1[2], sg[2];
	int nf = 0, ns = 0, nr = 0, nb = 0;
	for (int i = 0; i < 9; i++) {
		PlanOp o = r0->ops[i];
		if (o.kind == OP_F)
			f[nf++] = o;
		else if (o.kind == OP_SEND)
			sa[ns++] = o;
		else if (o.kind == OP_RECV)
			rg[nr++] = o;
		else if (o.kind == OP_BW)
			bw[nb++] = o;
		else
			op0 = o;
	}
	a[0] = f[0], a[1] = f[1], a[2] = sa[0], a[3] = sa[1], a[4] = rg[0], a[5] = bw[0];
	a[6] = rg[1], a[7] = bw[1], a[8] = op0;
	nf = ns = nr = nb = 0;
	for (int i = 0; i < 9; i++) {
		PlanOp o = r1->ops[i];
		if (o.kind == OP_F)
			f1[nf++] = o;
		else if (o.kind == OP_SEND)
			sg[ns++] = o;
		else if (o.kind == OP_RECV)
			ra[nr++] = o;
		else if (o.kind == OP_BW)
			b1[nb++] = o;
		else
			op1 = o;
	}
	/* rank 1: RECVa0 F0 BW0 SENDg0 RECVa1 F1 BW1 SENDg1 OPTIM */
	b[0] = ra[0], b[1] = f1[0], b[2] = b1[0], b[3] = sg[0], b[4] = ra[1], b[5] = f1[1];
	b[6] = b1[1], b[7] = sg[1], b[8] = op1;
	int g = 0;
	for (int i = 0; i < 9; i++) {
		if (plan_is_comm(a[i].kind))
			a[i].group = g++;
		if (plan_is_comm(b[i].kind))
			b[i].group = 100 + g++;
	}
	memcpy(r0->ops, a, sizeof a);
	memcpy(r1->ops, b, sizeof b);
	return p;
}

static void runtime__deadlock__watchdog_names_blocked_sends(void **state)
{
	(void)state;
	Plan *p = deadlock_plan();
	PlanError e;
	assert_int_equal(plan_verify(p, &e), 0);
	SimOptions so = {.model = SIM_STRICT};
	SimResult sr;
	assert_int_equal(sim_run(p, &so, &sr), 1);
	assert_int_equal(sr.verdict, SIM_DEADLOCK);
	sim_result_free(&sr);
	RtOptions o = options(1, 0);
	o.timeout_s = 0.3;
	RtResult res;
	char *rep;
	int64_t t0 = rt_now_ns();
	assert_int_equal(run_plan(p, &o, &res, &rep), RT_EFAIL);
	assert_true(rt_now_ns() - t0 < 10000000000ll);
	assert_non_null(strstr(rep, "no rank made progress"));
	assert_non_null(strstr(rep, "rank 0 blocked in step 1 at 'SEND act e=0 m=1 to=1"));
	assert_non_null(strstr(rep, "rank 1 blocked in step 1 at 'SEND grad e=0 m=0 to=0"));
	free(rep);
	plan_free(p);
}

static void runtime__missing_peer__is_an_error(void **state)
{
	(void)state;
	Plan *p = compile_text(tiny_src, NULL, 0);
	assert_non_null(p);
	p->ranks[1].npeers = 0; // rank 1 forgets who feeds stage 1
	RtOptions o = options(1, 0);
	RtResult res;
	char *rep;
	assert_int_equal(run_plan(p, &o, &res, &rep), RT_EFAIL);
	assert_non_null(strstr(rep, "rank 1"));
	assert_non_null(strstr(rep, "no peer registered for edge 0"));
	free(rep);
	plan_free(p);
}

static void runtime__fifo_mismatch__names_both_ops(void **state)
{
	(void)state;
	Plan *p = compile_text(tiny_src, "gpipe", 2);
	assert_non_null(p);
	PlanRank *r1 = &p->ranks[1];
	int k = 0;
	for (int64_t i = 0; i < r1->nops; i++)
		if (r1->ops[i].kind == OP_RECV && r1->ops[i].dir == DIR_ACT)
			r1->ops[i].mb = 1 - k++; // receive m=1 first
	RtOptions o = options(1, 0);
	RtResult res;
	char *rep;
	assert_int_equal(run_plan(p, &o, &res, &rep), RT_EFAIL);
	assert_non_null(strstr(rep, "do not match"));
	assert_non_null(strstr(rep, "rank 0's 'SEND act e=0 m=0"));
	assert_non_null(strstr(rep, "rank 1's 'RECV act e=0 m=1"));
	free(rep);
	plan_free(p);
}

static void runtime__bad_model__rejected_at_open(void **state)
{
	(void)state;
	Plan *p = compile_text(tiny_src, NULL, 0);
	assert_non_null(p);
	p->edges[0].bytes = 100;
	RtOptions o = options(1, 0);
	RtResult res;
	char *rep;
	assert_int_equal(run_plan(p, &o, &res, &rep), -100);
	assert_non_null(strstr(rep, "edge 0: bytes=100"));
	free(rep);
	p->edges[0].bytes = 128;
	p->stages[1].params = 7;
	assert_int_equal(run_plan(p, &o, &res, &rep), -100);
	assert_non_null(strstr(rep, "the plan says 7"));
	free(rep);
	o.backend = "nosuch";
	assert_int_equal(run_plan(p, &o, &res, &rep), -100);
	assert_non_null(strstr(rep, "unknown backend 'nosuch' (valid backends are "));
	for (int i = 0; i < rt_nbackends; i++) // the message lists every registered backend
		assert_non_null(strstr(rep, rt_backends[i].name));
	free(rep);
	plan_free(p);
}

static void runtime__trace_and_calibrate__cover_every_compute_op(void **state)
{
	(void)state;
	Plan *p = compile_text(programs[1], "1f1b", 0);
	assert_non_null(p);
	RtOptions o = options(3, 0);
	o.trace = 1;
	RtResult res;
	assert_int_equal(run_plan(p, &o, &res, NULL), 0);
	for (int r = 0; r < p->world; r++) {
		int64_t want = 0, got = 0, hi = 0;
		for (int64_t i = 0; i < p->ranks[r].nops; i++)
			want += !plan_is_comm(p->ranks[r].ops[i].kind);
		for (int64_t i = 0; i < res.nev[r]; i++) {
			const RtEvent *e = &res.ev[r][i];
			got += !plan_is_comm(p->ranks[r].ops[e->op].kind);
			assert_true(e->t1 >= e->t0);
			if (i)
				assert_true(e->t0 >= res.ev[r][i - 1].t1);
			int64_t m = e->mem[0] + e->mem[1] + e->mem[2];
			assert_true(e->mem[0] > 0 && e->mem[1] >= 0 && e->mem[2] >= 0);
			if (m > hi)
				hi = m;
		}
		assert_int_equal(got, 3 * want);
		assert_int_equal(hi, res.mem_peak[r * 4]); // the events' highest point is the peak
	}
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_int_equal(rt_trace_write(p, &res, f), 0);
	assert_int_equal(rt_calibrate_write(p, &res, f), 0);
	fclose(f);
	assert_non_null(strstr(buf, "\"traceEvents\""));
	assert_non_null(strstr(buf, "\"name\": \"F 0 0\", \"cat\": \"F\""));
	assert_non_null(strstr(buf, "\"thread_name\", \"pid\": 7, \"tid\": 1"));
	assert_non_null(strstr(buf, "\"ph\": \"f\", \"id\": 1,")); // flows and memory counters
	assert_non_null(strstr(buf, "\"name\": \"memory bytes\""));
	assert_non_null(strstr(buf, "cost s3 f="));
	free(buf);
	rt_result_free(&res);
	plan_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(runtime__data__follows_semantics),
		cmocka_unit_test(runtime__gradients__match_finite_differences),
		cmocka_unit_test(runtime__every_schedule__matches_reference_and_sim),
		cmocka_unit_test(runtime__registries__parts_complete_and_used),
		cmocka_unit_test(runtime__layer_kernels__every_kind_has_a_cpu_row_or_is_refused),
		cmocka_unit_test(runtime__layer_kernels__gradients_match_finite_differences),
		cmocka_unit_test(runtime__squared_relu__hand_values),
		cmocka_unit_test(runtime__device_without_row__refused_at_open),
		cmocka_unit_test(runtime__deadlock__watchdog_names_blocked_sends),
		cmocka_unit_test(runtime__missing_peer__is_an_error),
		cmocka_unit_test(runtime__fifo_mismatch__names_both_ops),
		cmocka_unit_test(runtime__bad_model__rejected_at_open),
		cmocka_unit_test(runtime__trace_and_calibrate__cover_every_compute_op),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
