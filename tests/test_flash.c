/* Flash attention (`attention ... flash`) through the tools, by hand: the saved bytes and
 * FLOPs of a small GPT-like program's attention derived here element by element (whole,
 * at tp = 2, and under selective recomputation, which has nothing left to drop and says
 * so in a warning); the plan line carries `flash` and reads back, and the reader refuses
 * a bad one at its line; a run passes --check on threads and follows the materialised
 * form's losses (the same masks, the same math up to float rounding).  The kernels'
 * equality (test_tkernels_attn.c), the rows' finite differences (test_runtime.c), the
 * parse errors (tests/golden/front/flash_args) and tests/cli/flash.sh (schedules,
 * recomputation, tp, mpirun, measured memory) do the rest. */
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
#include "../runtime/rt_private.h"
#include "plan_lib.h"

/* B = 2 sequences of S = 8 tokens (N = 16 rows), width d = 16, H = 2 heads of hd = 8,
 * f = 32, V = 16; the attention's keys, the mesh's tp and the extra statements are
 * filled in. */
static const char *src_fmt =
	"pipeline f;\nmesh pp=2%s;\nmicrobatches 2;\ninput tokens 2x8 vocab=16;\n"
	"stage s0 { embed 16 positions; dropout 0.1; residual { layernorm; "
	"attention heads=2 %s; dropout 0.1; } }\n"
	"stage s1 { residual { layernorm; mlp 32; } layernorm; head; loss xent; }\n"
	"schedule 1f1b;\n%s";

/* The program with attention keys keys, tp (empty: 1) and extra; its diagnostics
 * (warnings) in errs. */
static Plan *program(const char *keys, const char *tp, const char *extra, char *errs,
                     size_t n)
{
	char src[1024], own[1024];
	snprintf(src, sizeof src, src_fmt, tp, keys, extra);
	Plan *p = compile_pipe(src, (PipeccOptions){0}, errs ? errs : own,
	                       errs ? n : sizeof own);
	if (!p)
		fail_msg("does not compile:\n%s\n%s", src, errs ? errs : own);
	return p;
}

enum { ATTN_AT = 4 }; // s0's layers: embed, dropout, residual, layernorm, attention

/* Bytes per microbatch, f32 elements 4 bytes, masks 1 (N = 16, d = 16, S = 8, B = 2,
 * H = 2, hd = 8; B H S^2 = 256 probabilities, B H S = 32 rows of them):
 *
 * s0: embed (positions) save_fw 64 (token ids); dropout 0.1 256 in save_fb (its mask);
 *     layernorm save_fw 4 (N d + 2 N) = 1152; the closing dropout 256 in save_fb.
 *     attention (no bias) flash dropout=0.1 keeps x 4 N d = 1024, qkv 4 N 3d = 3072,
 *     att 4 N d = 1024 and the rows' log-sum-exp 4 B H S = 128: 5248.  The materialised
 *     form (test_dropout.c) keeps 7424: P 1024, its mask 256 and the dropped P 1024
 *     besides, 2304 - 128 = 2176 more.  s0's save_fw = 64 + 1152 + 5248 = 6464 (8640
 *     materialised), save_fb 512, save_bw 6144 (flash changes nothing from B to W).
 *     Without dropout=P flash keeps the same 5248 (materialised 7424 - 1280 = 6144).
 * At tp = 2 a rank's attention keeps x 1024 + qkv 1536 + att 512 + lse 64 = 3136, so
 * s0's save_fw = 64 + 1152 + 3136 = 4352.
 * Selective recomputation drops the rebuilt tensors, and flash has none: save_re 0,
 * save_fw still 6464, no cost added to B.
 *
 * FLOPs of the attention on a microbatch (docs/layers.md, Megatron-style, the full S x S
 * products without halving for the causal mask, as every attention count here): the
 * projections' weights 2 N (d 3d + d d) = 2 16 1024 = 32768 in each of F, B, W; one
 * S x S x hd product over all heads 2 B H S^2 hd = 2 2 2 64 8 = 4096.  F = 32768 + 2
 * 4096 = 40960 (q k^T, P v); materialised B = 32768 + 4 4096 = 49152 (dP, dV, dQ,
 * dK); flash B = 49152 + 4096 = 53248 (q k^T again); W = 32768.  At tp = 2 each a
 * half: B = 26624. */
static void flash__figures__as_derived_by_hand(void **state)
{
	(void)state;
	Plan *p = program("flash dropout=0.1", "", "", NULL, 0);
	const PlanStage *st = &p->stages[0];
	assert_int_equal(st->save_fb, 512);
	assert_int_equal(st->save_fw, 6464);
	assert_int_equal(st->save_bw, 6144);
	assert_int_equal(st->save_re, 0);
	LayerShape sh = plan_shape(p);
	const PlanLayer *ly = &st->layers[ATTN_AT];
	assert_int_equal(ly->kind, LAYER_ATTN);
	LayerCost c = plan_layer_figures(ly, &sh);
	assert_true(c.flops[0] == 40960 && c.flops[1] == 53248 && c.flops[2] == 32768);
	assert_true(plan_layer_figures_tp(ly, &sh, 2).flops[1] == 26624);
	PlanLayer mat = *ly;
	mat.flags &= ~LAYER_FLAG(LAYER_KEY_FLASH);
	c = plan_layer_figures(&mat, &sh);
	assert_true(c.flops[0] == 40960 && c.flops[1] == 49152 && c.flops[2] == 32768);
	assert_int_equal(plan_layer_rebuilt_bytes(ly, &sh, 1), 0);
	assert_int_equal(plan_layer_rebuilt_bytes(&mat, &sh, 1), 2304);
	plan_free(p);
	p = program("flash", "", "", NULL, 0);
	assert_int_equal(p->stages[0].save_fw, 64 + 1152 + 5248);
	assert_int_equal(p->stages[0].save_fb, 512);
	plan_free(p);
	p = program("flash dropout=0.1", " tp=2", "", NULL, 0);
	assert_int_equal(p->stages[0].save_fw, 4352);
	plan_free(p);
	char errs[1024];
	Plan *a = program("flash dropout=0.1", "", "", NULL, 0);
	p = program("flash dropout=0.1", "", "recompute s0 selective;\n", errs, sizeof errs);
	assert_int_equal(p->stages[0].recompute, PLAN_RECOMPUTE_SELECTIVE);
	assert_int_equal(p->stages[0].save_fw, 6464);
	assert_int_equal(p->stages[0].save_re, 0);
	assert_true(p->stages[0].cost[1] == a->stages[0].cost[1]); // nothing rebuilt
	if (!strstr(errs, "test.pipe:8:11: warning: stage 's0''s attention is flash: it keeps no "
	                  "probabilities, so selective recomputation rebuilds nothing"))
		fail_msg("no located warning in:\n%s", errs);
	plan_free(p);
	p = program("flash", "", "recompute * selective;\n", errs, sizeof errs);
	assert_non_null(strstr(errs, "warning: every attention layer is flash"));
	plan_free(p);
	plan_free(a);
}

/* The attention line carries `flash` (after the other flags, before dropout=P) and reads
 * back to the same plan; a plan without it has no `flash`; the reader refuses a valued
 * or misplaced one at its line (a version 1, unchecked plan). */
static void flash__plan_line__reads_back_and_errors_located(void **state)
{
	(void)state;
	Plan *p = program("flash dropout=0.5", "", "", NULL, 0), *m = program("dropout=0.5", "", "",
	                                                                     NULL, 0);
	size_t n, nm;
	char *t = text_of(p, &n), *tm = text_of(m, &nm);
	assert_non_null(strstr(t, "layer attention 16 16 heads=2 kv_heads=2 flash dropout=0.5\n"));
	assert_null(strstr(tm, "flash"));
	Plan *q = reread(t, n);
	assert_true(same_text(p, q));
	assert_true(q->stages[0].layers[ATTN_AT].flags & LAYER_FLAG(LAYER_KEY_FLASH));
	plan_free(q);
	char *plan = as_plain(t);
	read_broken(plan, " flash", " flash=1", "unexpected 'flash' on an attention layer");
	read_broken(plan, "layer layernorm 16 16", "layer layernorm 16 16 flash",
	            "unexpected 'flash' on a layernorm layer");
	free(plan);
	free(t);
	free(tm);
	plan_free(p);
	plan_free(m);
}

/* Runs p on threads (3 steps, seed 7, --check when check) into res. */
static void run(const Plan *p, int check, RtResult *res)
{
	RtOptions o = {.backend = "threads", .steps = 3, .seed = 7, .check = check,
	               .timeout_s = 60, .blas_threads = 1};
	char err[1024];
	RtWorld *w = rt_world_open(p, &o, err, sizeof err);
	if (!w)
		fail_msg("rt_world_open: %s", err);
	assert_int_equal(rt_world_run(w, res), 0);
	rt_world_close(w, 0);
}

/* The pipelined run gives the sequential reference's losses and weights bit for bit
 * (--check), with and without selective recomputation; and its losses are the
 * materialised form's up to float rounding (the same seed, so the same masks). */
static void flash__run__checks_and_follows_materialised(void **state)
{
	(void)state;
	const char *extra[] = {"", "recompute * selective;\n", "recompute *;\n"};
	RtResult mat;
	Plan *m = program("dropout=0.1", "", "", NULL, 0);
	run(m, 0, &mat);
	for (int i = 0; i < 3; i++) {
		char errs[1024];
		Plan *p = program("flash dropout=0.1", "", extra[i], errs, sizeof errs);
		RtResult a;
		run(p, 1, &a);
		assert_true(a.checked && a.check_ok && a.loss_abs == 0 && a.weight_abs == 0);
		for (int k = 0; k < 3; k++)
			if (!(fabs(a.loss[k] - mat.loss[k]) <= 1e-5 * fabs(mat.loss[k])))
				fail_msg("%sstep %d: flash loss %.9g, materialised %.9g", extra[i], k,
				         a.loss[k], mat.loss[k]);
		rt_result_free(&a);
		plan_free(p);
	}
	rt_result_free(&mat);
	plan_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(flash__figures__as_derived_by_hand),
		cmocka_unit_test(flash__plan_line__reads_back_and_errors_located),
		cmocka_unit_test(flash__run__checks_and_follows_materialised),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
