/* Optimizer tests (runtime/optim.c and the devices' optimizer rows): the cpu's SGD,
 * AdamW and momentum steps against their formulas evaluated here in double (two AdamW
 * steps, so the moments and the bias corrections carry over; three momentum steps), an entry for every kind on every
 * device built in, every hyper-parameter row's range
 * (its ends included or not, as the table says), how the optimizer a run uses follows
 * from the plan and the options, the state a stage holds (per kind, zeroed,
 * accounted as RT_MEM_OPTIM), and whole AdamW and momentum runs that --check passes
 * bit for bit with the loss falling (momentum's state equal to the memory model's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "../compiler/pipecc.h"
#include "../plan/mem.h"
#include "plan_lib.h"
#include "../runtime/rt_private.h"

/* A host tensor over `data`, for direct device calls. */
static RtTensor host(float *data, int64_t n)
{
	return (RtTensor){.data = data, .rows = 1, .cols = n, .bytes = n * 4};
}

/* Relative difference, against 1 for small values. */
static double rel(double got, double want)
{
	return fabs(got - want) / fmax(1.0, fabs(want));
}

/* ---- the steps against their formulas ---- */

static void optim__cpu_sgd__is_w_minus_lr_g(void **state)
{
	(void)state;
	float w[3] = {1.0f, -2.0f, 0.25f}, g[3] = {0.5f, 0.125f, -4.0f}, w0[3];
	memcpy(w0, w, sizeof w);
	RtTensor tw = host(w, 3), tg = host(g, 3);
	PlanOptim o = {.kind = OPTIM_SGD, .lr = 0.1};
	RtOptStep s = {.w = &tw, .g = &tg};
	rt_optim_step_init(&o, 1, &s);
	RtRank r = {.dev = &rt_device_cpu};
	assert_int_equal(rt_device_cpu.optim[OPTIM_SGD](&r, &s), RT_OK);
	for (int i = 0; i < 3; i++)
		assert_true(w[i] == w0[i] - (float)o.lr * g[i]);
}

/* torch.optim.SGD with momentum mu (no dampening, no Nesterov), in double: b = g at
 * step 1, then b = mu b + g; w -= lr b.  Three steps, so the buffer carries over. */
static void optim__cpu_momentum_three_steps__match_the_formula(void **state)
{
	(void)state;
	enum { N = 4 };
	const double g[3][N] = {{0.5, -0.25, 1e-3, 0}, {-0.75, -0.5, 2e-3, 0}, {0.125, 1, -1e-3, 0}};
	double wd[N] = {1.0, -2.0, 0.3, 0.5}, bd[N] = {0};
	float w[N], m[N] = {0}, gf[N];
	for (int i = 0; i < N; i++)
		w[i] = (float)wd[i];
	PlanOptim o = plan_optim_default(OPTIM_MOMENTUM);
	o.lr = 0.05;
	o.momentum = 0.8;
	RtTensor tw = host(w, N), tg = host(gf, N), tm = host(m, N);
	RtRank r = {.dev = &rt_device_cpu};
	for (int t = 1; t <= 3; t++) {
		for (int i = 0; i < N; i++) {
			gf[i] = (float)g[t - 1][i];
			bd[i] = t == 1 ? g[t - 1][i] : o.momentum * bd[i] + g[t - 1][i];
			wd[i] -= o.lr * bd[i];
		}
		RtOptStep s = {.w = &tw, .g = &tg, .m = &tm};
		rt_optim_step_init(&o, t, &s);
		assert_int_equal(rt_device_cpu.optim[OPTIM_MOMENTUM](&r, &s), RT_OK);
		for (int i = 0; i < N; i++) {
			if (rel(m[i], bd[i]) > 1e-6 || rel(w[i], wd[i]) > 1e-6)
				fail_msg("step %d element %d: buffer %g want %g, weight %g want %g", t, i, m[i],
				         bd[i], w[i], wd[i]);
		}
	}
	RtOptStep s = {.w = &tw, .g = &tg}; // without its buffer: an internal error
	rt_optim_step_init(&o, 4, &s);
	assert_int_equal(rt_device_cpu.optim[OPTIM_MOMENTUM](&r, &s), RT_EFAIL);
}

/* torch.optim.AdamW, in double: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * w -= lr wd w; w -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps). */
static void optim__cpu_adamw_two_steps__match_the_formula(void **state)
{
	(void)state;
	enum { N = 4 };
	const double g1[N] = {0.5, -0.25, 1e-3, 0}, g2[N] = {-0.75, -0.5, 2e-3, 0};
	const double w0[N] = {1.0, -2.0, 0.3, 0.5};
	PlanOptim o = {.kind = OPTIM_ADAMW, .lr = 0.01, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6,
	               .weight_decay = 0.1};
	float w[N], m[N] = {0}, v[N] = {0}, g[N];
	double ew[N], em[N] = {0}, ev[N] = {0};
	for (int i = 0; i < N; i++)
		ew[i] = w[i] = (float)w0[i];
	RtTensor tw = host(w, N), tg = host(g, N), tm = host(m, N), tv = host(v, N);
	RtRank r = {.dev = &rt_device_cpu};
	for (int t = 1; t <= 2; t++) {
		const double *gt = t == 1 ? g1 : g2;
		for (int i = 0; i < N; i++) {
			g[i] = (float)gt[i];
			em[i] = o.beta1 * em[i] + (1 - o.beta1) * gt[i];
			ev[i] = o.beta2 * ev[i] + (1 - o.beta2) * gt[i] * gt[i];
			ew[i] -= o.lr * o.weight_decay * ew[i];
			double mhat = em[i] / (1 - pow(o.beta1, t)), vhat = ev[i] / (1 - pow(o.beta2, t));
			ew[i] -= o.lr * mhat / (sqrt(vhat) + o.eps);
		}
		RtOptStep s = {.w = &tw, .g = &tg, .m = &tm, .v = &tv};
		rt_optim_step_init(&o, t, &s);
		assert_int_equal(rt_device_cpu.optim[OPTIM_ADAMW](&r, &s), RT_OK);
		for (int i = 0; i < N; i++) {
			if (rel(m[i], em[i]) > 1e-6 || rel(v[i], ev[i]) > 1e-6 || rel(w[i], ew[i]) > 1e-6)
				fail_msg("step %d, element %d: w %.9g m %.9g v %.9g, the formula says %.9g %.9g "
				         "%.9g", t, i, w[i], m[i], v[i], ew[i], em[i], ev[i]);
		}
	}
	/* Every weight moved, the one without a gradient by the decay alone. */
	for (int i = 0; i < N; i++)
		assert_true(w[i] != (float)w0[i]);
}

static void optim__adamw_without_state__internal_error(void **state)
{
	(void)state;
	float w[1] = {1}, g[1] = {1};
	RtTensor tw = host(w, 1), tg = host(g, 1);
	PlanOptim o = plan_optim_default(OPTIM_ADAMW);
	RtOptStep s = {.w = &tw, .g = &tg};
	rt_optim_step_init(&o, 1, &s);
	RtRank r = {.dev = &rt_device_cpu};
	assert_int_equal(rt_device_cpu.optim[OPTIM_ADAMW](&r, &s), RT_EFAIL);
	assert_non_null(strstr(r.err, "without its state"));
}

/* Every device built in runs every optimizer (a plan naming one is otherwise refused
 * when the world opens). */
static void optim__devices__every_kind_has_an_entry(void **state)
{
	(void)state;
	int ran = 0;
	for (int i = 0; i < rt_ndevices; i++) {
		const RtDevice *d = rt_devices[i];
		if (!d)
			continue;
		assert_non_null(d->optim);
		for (int k = 0; k < OPTIM_COUNT; k++)
			if (!d->optim[k])
				fail_msg("the %s device has no %s step", d->name, plan_optim_names[k]);
		ran++;
	}
	assert_true(ran > 0);
}

/* ---- hyper-parameters ---- */

static void optim__hypers__ranges_as_their_rows_say(void **state)
{
	(void)state;
	char msg[256];
	PlanOptim o = {0};
	for (int h = 0; h < RT_HYPER_COUNT; h++) {
		const RtHyperInfo *hi = &rt_hypers[h];
		assert_non_null(hi->name);
		assert_non_null(hi->option);
		assert_true(hi->lo < hi->hi);
		assert_int_equal(rt_hyper_check(h, (hi->lo + hi->hi) / 2, msg, sizeof msg), 0);
		assert_int_equal(rt_hyper_check(h, hi->lo, msg, sizeof msg), hi->lo_open ? -1 : 0);
		assert_int_equal(rt_hyper_check(h, hi->hi, msg, sizeof msg), hi->hi_open ? -1 : 0);
		assert_int_equal(rt_hyper_check(h, hi->lo - 1, msg, sizeof msg), -1);
		assert_non_null(strstr(msg, hi->name));
		assert_int_equal(rt_hyper_check(h, NAN, msg, sizeof msg), -1);
		/* Each row is its own field. */
		for (int k = 0; k < h; k++)
			assert_ptr_not_equal(rt_hyper_field(&o, h), rt_hyper_field(&o, k));
	}
	/* AdamW's bias corrections divide by 1 - beta^t: beta 1 is out. */
	assert_int_equal(rt_hyper_check(RT_HYPER_BETA1, 1.0, msg, sizeof msg), -1);
	assert_string_equal(msg, "beta1 must be in [0, 1), not 1");
	assert_int_equal(rt_hyper_check(RT_HYPER_EPS, 0, msg, sizeof msg), -1);
	assert_int_equal(rt_hyper_check(RT_HYPER_LR, -0.5, msg, sizeof msg), -1);
}

static void optim__resolve__plan_then_options(void **state)
{
	(void)state;
	char msg[256];
	Plan p = {0};
	RtOptions o = {0};
	PlanOptim e;
	/* No optimizer line: SGD at piperun's default. */
	assert_int_equal(rt_optim_resolve(&p, &o, &e, msg, sizeof msg), 0);
	assert_int_equal(e.kind, OPTIM_SGD);
	assert_true(e.lr == RT_DEFAULT_LR);
	/* The plan's line. */
	p.optim = (PlanOptim){.kind = OPTIM_ADAMW, .given = 1, .lr = 3e-4, .beta1 = 0.9,
	                      .beta2 = 0.95, .eps = 1e-5, .weight_decay = 0.1};
	assert_int_equal(rt_optim_resolve(&p, &o, &e, msg, sizeof msg), 0);
	assert_int_equal(e.kind, OPTIM_ADAMW);
	assert_true(e.lr == 3e-4 && e.beta2 == 0.95 && e.weight_decay == 0.1);
	/* Options replace single fields. */
	o.optim.lr = 1e-2;
	o.optim.beta2 = 0.5;
	o.optim_set = RT_OPTIM_SET(RT_HYPER_LR) | RT_OPTIM_SET(RT_HYPER_BETA2);
	assert_int_equal(rt_optim_resolve(&p, &o, &e, msg, sizeof msg), 0);
	assert_true(e.lr == 1e-2 && e.beta2 == 0.5 && e.beta1 == 0.9 && e.eps == 1e-5);
	/* Another kind starts from its defaults: sgd at RT_DEFAULT_LR. */
	o.optim.kind = OPTIM_SGD;
	o.optim_set = RT_OPTIM_SET_KIND;
	assert_int_equal(rt_optim_resolve(&p, &o, &e, msg, sizeof msg), 0);
	assert_int_equal(e.kind, OPTIM_SGD);
	assert_true(e.lr == RT_DEFAULT_LR);
	/* ... adamw over a plan without a line: the language's defaults. */
	p.optim = (PlanOptim){0};
	o.optim.kind = OPTIM_ADAMW;
	assert_int_equal(rt_optim_resolve(&p, &o, &e, msg, sizeof msg), 0);
	PlanOptim d = plan_optim_default(OPTIM_ADAMW);
	assert_true(e.kind == OPTIM_ADAMW && e.lr == d.lr && e.beta1 == d.beta1 &&
	            e.beta2 == d.beta2 && e.eps == d.eps && e.weight_decay == d.weight_decay);
	/* An adamw setting for sgd is an error, naming it. */
	o.optim_set = RT_OPTIM_SET(RT_HYPER_EPS);
	assert_int_equal(rt_optim_resolve(&p, &o, &e, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "eps is an adamw setting and the optimizer is sgd"));
	/* A plan's value out of the runtime's range (the plan format allows beta1=1). */
	p.optim = plan_optim_default(OPTIM_ADAMW);
	p.optim.beta1 = 1;
	o.optim_set = 0;
	assert_int_equal(rt_optim_resolve(&p, &o, &e, msg, sizeof msg), -1);
	assert_string_equal(msg, "the adamw optimizer's beta1 must be in [0, 1), not 1");
}

/* ---- state and whole runs ---- */

static const char tiny_src[] = "pipeline tiny;\nmesh pp=2;\nmicrobatches 2;\ninput 4x8;\n"
                               "stage s0 { linear 8; relu; }\nstage s1 { linear 8; loss mse; }\n"
                               "schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n";

static void optim__stage_state__per_kind_zeroed_and_accounted(void **state)
{
	(void)state;
	Plan *p = compile_plan(tiny_src);
	char err[256];
	for (int k = 0; k < OPTIM_COUNT; k++) {
		RtWorld w = {.plan = p, .dev = &rt_device_cpu, .opt = {.seed = 1},
		             .optim = plan_optim_default(k)};
		w.model = rt_model_new(p, 1, err, sizeof err);
		assert_non_null(w.model);
		RtRank r = {.w = &w, .rank = RT_REF_RANK, .dev = &rt_device_cpu, .model = w.model};
		RtStageBufs b;
		assert_int_equal(rt_stage_bufs_open(&r, 0, &b), RT_OK);
		int64_t np = w.model->st[0].nparams;
		assert_true(np > 0);
		assert_int_equal(r.mem[RT_MEM_PARAM], 4 * np);
		assert_int_equal(r.mem[RT_MEM_OPTIM], plan_optim_state_bytes(k) * np);
		int nbuf = plan_optim_state_bytes(k) / 4; // sgd none, momentum m, adamw m and v
		RtTensor *bufs[2] = {b.m, b.v};
		for (int j = 0; j < 2; j++) {
			if (j >= nbuf) {
				assert_null(bufs[j]);
				continue;
			}
			assert_non_null(bufs[j]);
			for (int64_t i = 0; i < np; i++)
				assert_true(((float *)bufs[j]->data)[i] == 0);
		}
		rt_stage_bufs_close(&r, &b);
		assert_int_equal(r.mem[RT_MEM_OPTIM], 0);
		rt_model_free(w.model);
	}
	plan_free(p);
}

/* AdamW on a chain with a skip, dp=1 and dp=2: the pipelined run equals the sequential
 * reference to the bit, the loss falls at every step, and every rank holds 8 bytes of
 * state per parameter it holds. */
static void optim__adamw_runs__check_passes_and_loss_falls(void **state)
{
	(void)state;
	const char *const srcs[] = {
		"pipeline a;\nmesh pp=4;\nmicrobatches 4;\ninput 4x8;\n"
		"stage s0 { linear 8; relu; }\nstage s1 { linear 8; gelu; }\n"
		"stage s2 { linear 8; relu; }\nstage s3 { linear 8; loss mse; }\n"
		"skip s0 -> s2;\nschedule 1f1b;\ncost * f=1 b=1 w=1;\nlink ideal;\n"
		"optimizer adamw lr=1e-3;\n",
		"pipeline b;\nmesh pp=2 dp=2;\nmicrobatches 4;\ninput 4x8;\n"
		"stage s0 { linear 8; relu; }\nstage s1 { linear 8; loss mse; }\n"
		"schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n"
		"optimizer adamw lr=1e-3 weight_decay=0.1;\n",
	};
	for (size_t i = 0; i < sizeof srcs / sizeof *srcs; i++) {
		Plan *p = compile_plan(srcs[i]);
		assert_int_equal(p->optim.kind, OPTIM_ADAMW);
		RtOptions o = {.backend = "threads", .steps = 4, .seed = 7, .check = 1,
		               .timeout_s = 20, .blas_threads = 1};
		char err[1024];
		RtWorld *w = rt_world_open(p, &o, err, sizeof err);
		if (!w)
			fail_msg("%s", err);
		RtResult res;
		assert_int_equal(rt_world_run(w, &res), RT_OK);
		assert_int_equal(res.optim.kind, OPTIM_ADAMW);
		assert_true(res.checked && res.check_ok);
		assert_true(res.loss_rel == 0 && res.weight_rel == 0);
		for (int s = 1; s < res.steps; s++)
			if (!(res.loss[s] < res.loss[s - 1]))
				fail_msg("%s: loss %g at step %d, %g before", p->name, res.loss[s], s + 1,
				         res.loss[s - 1]);
		for (int r = 0; r < p->world; r++) {
			assert_true(res.model_bytes[4 * r] > 0);
			assert_int_equal(res.model_bytes[4 * r + 2], 2 * res.model_bytes[4 * r]);
		}
		rt_result_free(&res);
		rt_world_close(w, 0);
		plan_free(p);
	}
}

/* SGD with momentum on a chain with a skip under zbh1: --check passes to the bit, the
 * loss falls, and every rank holds 4 bytes of state per parameter, as the memory model
 * (plan_mem_rank, pipesim's figures) says. */
static void optim__momentum_run__check_passes_and_state_as_predicted(void **state)
{
	(void)state;
	Plan *p = compile_plan("pipeline mo;\nmesh pp=4;\nmicrobatches 4;\ninput 4x8;\n"
	                       "stage s0 { linear 8; relu; }\nstage s1 { linear 8; gelu; }\n"
	                       "stage s2 { linear 8; relu; }\nstage s3 { linear 8; loss mse; }\n"
	                       "skip s0 -> s2;\nschedule zbh1;\ncost * f=1 b=1 w=1;\nlink ideal;\n"
	                       "optimizer momentum lr=0.05 momentum=0.9;\n");
	assert_int_equal(p->optim.kind, OPTIM_MOMENTUM);
	assert_true(p->optim.momentum == 0.9 && p->optim.lr == 0.05);
	RtOptions o = {.backend = "threads", .steps = 4, .seed = 7, .check = 1, .timeout_s = 20,
	               .blas_threads = 1};
	char err[1024];
	RtWorld *w = rt_world_open(p, &o, err, sizeof err);
	if (!w)
		fail_msg("%s", err);
	RtResult res;
	assert_int_equal(rt_world_run(w, &res), RT_OK);
	assert_int_equal(res.optim.kind, OPTIM_MOMENTUM);
	assert_true(res.checked && res.check_ok);
	assert_true(res.loss_rel == 0 && res.weight_rel == 0);
	for (int s = 1; s < res.steps; s++)
		if (!(res.loss[s] < res.loss[s - 1]))
			fail_msg("loss %g at step %d, %g before", res.loss[s], s + 1, res.loss[s - 1]);
	for (int r = 0; r < p->world; r++) {
		PlanMem pm;
		assert_int_equal(plan_mem_rank(p, r, &pm), 0);
		assert_true(res.model_bytes[4 * r] > 0);
		assert_int_equal(res.model_bytes[4 * r + 2], res.model_bytes[4 * r]);
		assert_int_equal(res.model_bytes[4 * r + 2], pm.optim);
	}
	rt_result_free(&res);
	rt_world_close(w, 0);
	plan_free(p);
}

/* The same plans under SGD hold no state. */
static void optim__sgd_run__no_state(void **state)
{
	(void)state;
	Plan *p = compile_plan(tiny_src);
	RtOptions o = {.backend = "threads", .steps = 2, .seed = 7, .timeout_s = 20,
	               .blas_threads = 1};
	char err[1024];
	RtWorld *w = rt_world_open(p, &o, err, sizeof err);
	assert_non_null(w);
	RtResult res;
	assert_int_equal(rt_world_run(w, &res), RT_OK);
	assert_int_equal(res.optim.kind, OPTIM_SGD);
	for (int r = 0; r < p->world; r++) {
		assert_int_equal(res.model_bytes[4 * r + 1], res.model_bytes[4 * r]);
		assert_int_equal(res.model_bytes[4 * r + 2], 0);
	}
	rt_result_free(&res);
	rt_world_close(w, 0);
	plan_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(optim__cpu_sgd__is_w_minus_lr_g),
		cmocka_unit_test(optim__cpu_adamw_two_steps__match_the_formula),
		cmocka_unit_test(optim__cpu_momentum_three_steps__match_the_formula),
		cmocka_unit_test(optim__adamw_without_state__internal_error),
		cmocka_unit_test(optim__devices__every_kind_has_an_entry),
		cmocka_unit_test(optim__hypers__ranges_as_their_rows_say),
		cmocka_unit_test(optim__resolve__plan_then_options),
		cmocka_unit_test(optim__stage_state__per_kind_zeroed_and_accounted),
		cmocka_unit_test(optim__adamw_runs__check_passes_and_loss_falls),
		cmocka_unit_test(optim__momentum_run__check_passes_and_state_as_predicted),
		cmocka_unit_test(optim__sgd_run__no_state),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
