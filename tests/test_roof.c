/* The roofline cost model (plan/roof.h, docs/semantics.md "Costs"): a pass's time is the
 * sum over kernel classes of max(FLOPs / (rate x eff), bytes / (bandwidth x eff)); the
 * optimizer step moves its bytes per parameter over the bandwidth; a device without a
 * bandwidth times FLOPs alone.  Every figure below is derived by hand in its test. */
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
#include "../plan/optim.h"
#include "../plan/roof.h"
#include "plan_lib.h"

/* A compute-bound and a memory-bound class add; without bandwidth only FLOPs count. */
static void roof__pass__sums_each_class_max(void **state)
{
	(void)state;
	PlanRoof d = plan_roof(100e12, 1e12); // gemm 0.75, elementwise 0.8
	RoofWork w = {{0}, {0}};
	w.flops[ROOF_GEMM] = 75e9;           // 1 ms at 75 TFLOP/s
	w.bytes[ROOF_GEMM] = 75e6;           // 0.1 ms at 750 GB/s: compute-bound
	w.bytes[ROOF_ELEMENTWISE] = 400e6;   // 0.5 ms at 800 GB/s
	assert_true(fabs(plan_roof_ns(&d, &w) - 1.5e6) < 1e-3);
	w.bytes[ROOF_GEMM] = 1500e6;         // 2 ms: now memory-bound
	assert_true(fabs(plan_roof_ns(&d, &w) - 2.5e6) < 1e-3);
	PlanRoof flat = plan_roof(100e12, 0); // no bandwidth: 75e9 FLOPs at 100 TFLOP/s
	assert_true(fabs(plan_roof_ns(&flat, &w) - 0.75e6) < 1e-3);
}

/* Bytes per parameter: the f32 gradient read, the weights (the master copy when there
 * is one, read and written, and the bf16 parameter written), the state read and written. */
static void roof__optimizer_bytes__per_parameter(void **state)
{
	(void)state;
	assert_int_equal(plan_roof_optim_bytes(OPTIM_SGD, PREC_F32), 4 + 2 * 4);
	assert_int_equal(plan_roof_optim_bytes(OPTIM_MOMENTUM, PREC_F32), 4 + 2 * 4 + 2 * 4);
	assert_int_equal(plan_roof_optim_bytes(OPTIM_ADAMW, PREC_F32), 4 + 2 * 4 + 2 * 8);
	assert_int_equal(plan_roof_optim_bytes(OPTIM_ADAMW, PREC_BF16), 4 + 2 * 4 + 2 + 2 * 8);
	PlanRoof d = plan_roof(100e12, 1e12); // optimizer at 0.8: 800 GB/s
	/* 1e9 parameters, adamw bf16: 30 GB at 800 GB/s = 37.5 ms */
	assert_true(fabs(plan_roof_optim_ns(&d, OPTIM_ADAMW, PREC_BF16, 1000000000) - 37.5e6) < 1);
	PlanRoof flat = plan_roof(100e12, 0);
	assert_true(plan_roof_optim_ns(&flat, OPTIM_ADAMW, PREC_BF16, 1000000000) == 0);
}

/* A bf16 layernorm of 8192 rows of 1600 (GPT-2 1.5B at 8 x 1024 tokens): F reads x and
 * writes y (2 x 2 x 8192 x 1600 = 52428800 bytes), B reads x and dy and writes dx
 * (78643200), W reads dy for the gain and for the bias and updates each f32 gradient
 * (2 x (2 x 8192 + 2 x 4) x 1600 = 52454400); no FLOPs are counted. */
static void roof__layernorm__bytes_by_hand(void **state)
{
	(void)state;
	PlanLayer l = {.kind = LAYER_LAYERNORM, .in = 1600, .out = 1600};
	LayerShape sh = {8192, 8, 1024, 50257, 0, PREC_BF16, 1};
	RoofWork w[3];
	plan_layer_work(&l, &sh, 1, w);
	assert_true(w[0].bytes[ROOF_ELEMENTWISE] == 52428800.0);
	assert_true(w[1].bytes[ROOF_ELEMENTWISE] == 78643200.0);
	assert_true(w[2].bytes[ROOF_ELEMENTWISE] == 52454400.0);
	for (int k = 0; k < 3; k++)
		for (int c = 0; c < ROOF_COUNT; c++)
			assert_true(w[k].flops[c] == 0 && (c == ROOF_ELEMENTWISE || w[k].bytes[c] == 0));
}

/* linear 4096 on 1024 rows of 4096, f32: each pass 2 x 1024 x 4096 x 4096 FLOPs; F and B
 * move x and y (4 x 1024 x 8192) and read w (4 x 4096^2); W moves x and dy, reads and
 * writes dw (2 x 4 x 4096^2) and reduces dy into the bias (4 x 1024 x 4096 + 8 x 4096). */
static void roof__linear__gemm_and_bias_by_hand(void **state)
{
	(void)state;
	PlanLayer l = {.kind = LAYER_LINEAR, .in = 4096, .out = 4096};
	LayerShape sh = {1024, 1024, 1, 0, 0, PREC_F32, 1};
	RoofWork w[3];
	plan_layer_work(&l, &sh, 1, w);
	double xy = 4.0 * 1024 * 8192, wt = 4096.0 * 4096;
	for (int k = 0; k < 3; k++)
		assert_true(w[k].flops[ROOF_GEMM] == 2.0 * 1024 * wt);
	assert_true(w[0].bytes[ROOF_GEMM] == xy + 4 * wt && w[1].bytes[ROOF_GEMM] == xy + 4 * wt);
	assert_true(w[2].bytes[ROOF_GEMM] == xy + 8 * wt);
	assert_true(w[2].bytes[ROOF_ELEMENTWISE] == 4.0 * 1024 * 4096 + 8.0 * 4096);
	assert_true(w[0].bytes[ROOF_ELEMENTWISE] == 0);
}

static const char *prog = "pipeline p;\nmesh pp=1;\nmicrobatches 1;\ninput 1024x4096;\n%s\n"
                          "stage s0 { relu; loss mse; }\nschedule 1f1b;\n";

/* relu and mse on 1024 x 4096 f32 are memory-bound: F moves 2 + 2 passes of 16 MiB,
 * 67108864 bytes; at bandwidth=1TB/s and elementwise=0.5, 134217.728 us. */
static void roof__device_settings__override_the_preset(void **state)
{
	(void)state;
	char src[512];
	snprintf(src, sizeof src, prog, "device h100 bandwidth=1TB/s elementwise=0.5;");
	Plan *p = compile_plan(src);
	assert_int_equal(p->stages[0].cost[0], llround(67108864.0 * 1e9 / (1e12 * 0.5)));
	plan_free(p);
	snprintf(src, sizeof src, prog, "device elementwise=0.5 bandwidth=1TB/s h100;");
	p = compile_plan(src);
	assert_int_equal(p->stages[0].cost[0], llround(67108864.0 * 1e9 / (1e12 * 0.5)));
	plan_free(p);
	snprintf(src, sizeof src, prog, "device h100;"); // 3.35 TB/s at 0.8
	p = compile_plan(src);
	assert_int_equal(p->stages[0].cost[0], llround(67108864.0 * 1e9 / (3.35e12 * 0.8)));
	plan_free(p);
}

/* Bad settings: located errors, naming the key. */
static void roof__device_settings__bad_values_located(void **state)
{
	(void)state;
	const struct {
		const char *dev, *want;
	} rows[] = {
		{"device h100 gemm=0;", "test.pipe:5:18: error: gemm must be above 0"},
		{"device h100 attention=1.5;", "test.pipe:5:23: error: attention must be in [0, 1]"},
		{"device h100 bandwidth=3;", "test.pipe:5:23: error: bandwidth needs a unit"},
		{"device h100 optim;", "test.pipe:5:13: error: 'optim' needs a value"},
		{"device h100 bandwith=1TB/s;", "did you mean 'bandwidth'"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		char src[512], errs[2048];
		snprintf(src, sizeof src, prog, rows[i].dev);
		Plan *p = compile_pipe(src, (PipeccOptions){0}, errs, sizeof errs);
		assert_null(p);
		if (!strstr(errs, rows[i].want))
			fail_msg("%s: wanted '%s' in:\n%s", rows[i].dev, rows[i].want, errs);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(roof__pass__sums_each_class_max),
		cmocka_unit_test(roof__optimizer_bytes__per_parameter),
		cmocka_unit_test(roof__layernorm__bytes_by_hand),
		cmocka_unit_test(roof__linear__gemm_and_bias_by_hand),
		cmocka_unit_test(roof__device_settings__override_the_preset),
		cmocka_unit_test(roof__device_settings__bad_values_located),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
