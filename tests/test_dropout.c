/* Dropout through the tools, by hand: the saved bytes a small GPT-like program's stages
 * carry with hidden dropouts and attention's dropout=P, derived here element by element
 * (whole, at tp = 2 and under selective recomputation); P = 0 changes no plan byte; the
 * plan lines (`layer dropout IN OUT p=P`, an attention's `dropout=P`) read back, and
 * the reader refuses bad ones at their line; the runtime's model refuses a dropout
 * that begins a stage; a run's masks follow the seed (the --check reference draws the
 * same ones, bit for bit).  The table loops of test_layers.c, the kernels' tests
 * (test_tkernels_attn.c, test_runtime.c) and tests/cli/dropout.sh (schedules, recomputation,
 * tp, mpirun, memory) do the rest. */
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

/* B = 2 sequences of S = 8 tokens (N = 16 rows), width d = 16, H = 2 heads, f = 32,
 * V = 16; MESH and the extra statements are filled in. */
static const char *src_fmt =
	"pipeline d;\nmesh pp=2%s;\nmicrobatches 2;\ninput tokens 2x8 vocab=16;\n"
	"stage s0 { embed 16 positions; dropout %s; residual { layernorm; "
	"attention heads=2 dropout=%s; dropout %s; } }\n"
	"stage s1 { residual { layernorm; mlp 32; dropout %s; } layernorm; head; loss xent; }\n"
	"schedule 1f1b;\n%s";

/* The program with hidden dropout ph, attention dropout pa, the mesh's tp (empty: 1)
 * and extra. */
static Plan *program(const char *ph, const char *pa, const char *tp, const char *extra)
{
	char src[1024], errs[1024];
	snprintf(src, sizeof src, src_fmt, tp, ph, pa, ph, ph, extra);
	Plan *p = compile_pipe(src, (PipeccOptions){0}, errs, sizeof errs);
	if (!p)
		fail_msg("does not compile:\n%s\n%s", src, errs);
	return p;
}

static void stage_is(const Plan *p, int s, int64_t params, int64_t fb, int64_t fw, int64_t bw,
                     int64_t re)
{
	const PlanStage *st = &p->stages[s];
	if (st->params != params || st->save_fb != fb || st->save_fw != fw || st->save_bw != bw ||
	    st->save_re != re)
		fail_msg("stage %d: params %lld save_fb %lld save_fw %lld save_bw %lld save_re %lld; "
		         "by hand %lld %lld %lld %lld %lld", s, (long long)st->params,
		         (long long)st->save_fb, (long long)st->save_fw, (long long)st->save_bw,
		         (long long)st->save_re, (long long)params, (long long)fb, (long long)fw,
		         (long long)bw, (long long)re);
}

/* Bytes per microbatch, f32 elements 4 bytes, masks 1 (N = 16, d = 16, S = 8, B = 2,
 * H = 2, f = 32, V = 16; B H S^2 = 256 probabilities):
 *
 * s0: embed (positions): params V d + S d = 256 + 128 = 384; save_fw the token ids 4 N
 *     = 64; save_bw dy 4 N d = 1024.
 *     dropout 0.1: its mask, N d = 256 bytes, in save_fb (it keeps no input).
 *     layernorm: params 2d = 32; save_fw 4 (N d + 2N) = 1152; save_bw 4 N d = 1024.
 *     attention (no bias) dropout=0.1: params 3d^2 + d^2 = 1024; save_fw 4 N d (x) +
 *     4 N 3d (qkv, 3072) + 4 B H S^2 (softmax, 1024) + 4 N d (att, 1024) + B H S^2
 *     (mask, 256) + 4 B H S^2 (dropped P, 1024) = 7424, of which the last two, 5 B H S^2
 *     = 1280, are dropout's (Korthikanti et al.'s 5as^2b with f32 for f16: 4 + 1 + 4
 *     bytes a probability against 2 + 1 + 2); save_bw dy + dqkv = 1024 + 3072 = 4096.
 *     dropout 0.1: 256 in save_fb.
 *     Sums: params 1440, save_fb 512, save_fw 64 + 1152 + 7424 = 8640, save_bw 6144.
 * s1: layernorm 32 / 1152 / 1024; mlp 32 (no bias): params 2 d f = 1024, save_fw 4 (N d
 *     + 2 N f) = 5120, save_bw 4 (N d + N f) = 3072; dropout 0.1: 256 in save_fb;
 *     layernorm 32 / 1152 / 1024; head: params V d = 256, save_fw 4 N d = 1024, save_bw
 *     4 N V = 1024; xent: save_fb 4 (N V + 2 N) = 1152.
 *     Sums: params 1344, save_fb 256 + 1152 = 1408, save_fw 8448, save_bw 6144.
 * At tp = 2 s0's attention keeps per rank x 1024 + qkv 1536 + P 512 + att 512 + mask
 * 128 + dropped P 512 = 4224 (s0's save_fw 64 + 1152 + 4224 = 5440); the dropouts act
 * on whole activations on every rank: 256 each.  Selective recomputation drops the
 * S x S tensors, P, mask and dropped P: save_re = 1024 + 256 + 1024 = 2304 out of
 * save_fw (8640 - 2304 = 6336). */
static void dropout__saved_bytes__as_derived_by_hand(void **state)
{
	(void)state;
	Plan *p = program("0.1", "0.1", "", "");
	stage_is(p, 0, 1440, 512, 8640, 6144, 0);
	stage_is(p, 1, 1344, 1408, 8448, 6144, 0);
	plan_free(p);
	p = program("0.1", "0.1", " tp=2", "");
	assert_int_equal(p->stages[0].save_fb, 512);
	assert_int_equal(p->stages[0].save_fw, 5440);
	plan_free(p);
	p = program("0.1", "0.1", "", "recompute s0 selective;\n");
	stage_is(p, 0, 1440, 512, 6336, 6144, 2304);
	assert_int_equal(p->stages[0].recompute, PLAN_RECOMPUTE_SELECTIVE);
	plan_free(p);
	/* Without dropout=P attention keeps 7424 - 1280; dropout 0 keeps nothing. */
	p = program("0", "0", "", "");
	stage_is(p, 0, 1440, 0, 8640 - 1280, 6144, 0);
	stage_is(p, 1, 1344, 1152, 8448, 6144, 0);
	plan_free(p);
}

/* An attention's dropout=0 is the attention without the key, byte for byte; P is
 * written in the fewest digits that read back (0.1, 1e-05, 0.30000000000000004). */
static void dropout__zero_and_digits__plan_text(void **state)
{
	(void)state;
	Plan *a = program("0.25", "0", "", ""), *b = program("0.25", "0.5", "", "");
	size_t na, nb;
	char *ta = text_of(a, &na), *tb = text_of(b, &nb);
	assert_non_null(strstr(ta, "layer attention 16 16 heads=2 kv_heads=2\n"));
	assert_non_null(strstr(tb, "layer attention 16 16 heads=2 kv_heads=2 dropout=0.5\n"));
	assert_non_null(strstr(ta, "layer dropout 16 16 p=0.25\n"));
	free(ta);
	free(tb);
	plan_free(a);
	plan_free(b);
	const char *ps[] = {"0", "1e-05", "0.30000000000000004", "0.9999999999999999"};
	const char *want[] = {"p=0\n", "p=1e-05\n", "p=0.30000000000000004\n",
	                      "p=0.9999999999999999\n"};
	for (int i = 0; i < 4; i++) {
		Plan *p = program(ps[i], "0", "", "");
		char *t = text_of(p, &na);
		if (!strstr(t, want[i]))
			fail_msg("dropout %s: no '%.*s' in the plan", ps[i], (int)strlen(want[i]) - 1,
			         want[i]);
		FILE *f = fmemopen(t, na, "r");
		PlanError e;
		Plan *q = plan_read(f, "mem", &e);
		fclose(f);
		assert_non_null(q);
		assert_true(same_text(p, q) && q->stages[0].layers[1].drop == p->stages[0].layers[1].drop);
		plan_free(q);
		free(t);
		plan_free(p);
	}
}

/* The reader's located errors on the dropout lines of a version 1 (unchecked) plan. */
static void dropout__plan_reader__located_errors(void **state)
{
	(void)state;
	Plan *p = program("0.25", "0.5", "", "");
	size_t n;
	char *t = text_of(p, &n), *plan = as_plain(t);
	read_broken(plan, " p=0.25", "", "a dropout layer needs p=P");
	read_broken(plan, "p=0.25", "p=1", "p= must be below 1");
	read_broken(plan, "p=0.25", "p=-0.5", "p= must be a number in [0, 1]");
	read_broken(plan, "p=0.25", "hidden=4", "unexpected 'hidden' on a dropout layer");
	read_broken(plan, "dropout=0.5", "dropout=1", "dropout= must be below 1");
	read_broken(plan, "dropout=0.5", "dropout=x", "dropout= must be a number in [0, 1]");
	read_broken(plan, "layer layernorm 16 16", "layer layernorm 16 16 dropout=0.5",
	            "unexpected 'dropout' on a layernorm layer");
	free(plan);
	free(t);
	plan_free(p);
}

/* A dropout keeps only its mask, so it cannot take a stage's input, which the stage keeps
 * as its first layer's: a hand-made plan whose stage begins with one is refused by the
 * runtime's model (the checker refuses the program: tests/golden/front/dropout_first). */
static void dropout__first_of_stage__refused_by_the_model(void **state)
{
	(void)state;
	char errs[512], err[256];
	Plan *p = compile_pipe("pipeline m;\nmesh pp=2;\nmicrobatches 2;\ninput 4x8;\n"
	                       "stage s0 { linear 8; }\nstage s1 { linear 8; dropout 0.5; loss mse; }\n"
	                       "schedule 1f1b;\n",
	                       (PipeccOptions){0}, errs, sizeof errs);
	if (!p)
		fail_msg("does not compile: %s", errs);
	RtModel *m = rt_model_new(p, 1, err, sizeof err);
	assert_non_null(m);
	rt_model_free(m);
	PlanLayer *l = p->stages[1].layers, swap = l[0]; // linear 8 -> 8, dropout: swapped
	l[0] = l[1];
	l[1] = swap;
	assert_null(rt_model_new(p, 1, err, sizeof err));
	assert_non_null(strstr(err, "stage s1: layer 0 (dropout) keeps only its mask"));
	plan_free(p);
}

/* Runs p on threads (3 steps, seed seed, --check when check) into res; 0 when it ran. */
static int run(const Plan *p, uint64_t seed, int check, RtResult *res)
{
	RtOptions o = {.backend = "threads", .steps = 3, .seed = seed, .check = check,
	               .timeout_s = 60, .blas_threads = 1};
	char err[1024];
	RtWorld *w = rt_world_open(p, &o, err, sizeof err);
	if (!w)
		fail_msg("rt_world_open: %s", err);
	int rc = rt_world_run(w, res);
	rt_world_close(w, 0);
	return rc;
}

/* Masks are drawn from the seed: the pipelined run gives the sequential reference's
 * losses and weights bit for bit (--check), the same seed the same loss bits twice,
 * another seed other losses; and dropout does something (P = 0.1 trains otherwise than
 * P = 0 from the same weights, the layers being the same). */
static void dropout__run__seeded_masks_repeat_and_check(void **state)
{
	(void)state;
	Plan *p = program("0.1", "0.1", "", ""), *z = program("0", "0", "", "");
	RtResult a, b, c, d;
	assert_int_equal(run(p, 7, 1, &a), 0);
	assert_true(a.checked && a.check_ok && a.loss_abs == 0 && a.weight_abs == 0);
	assert_int_equal(run(p, 7, 0, &b), 0);
	assert_int_equal(run(p, 8, 0, &c), 0);
	assert_int_equal(run(z, 7, 0, &d), 0);
	assert_memory_equal(a.loss, b.loss, 3 * sizeof *a.loss);
	for (int k = 0; k < 3; k++) {
		assert_true(isfinite(a.loss[k]));
		assert_true(c.loss[k] != a.loss[k] && d.loss[k] != a.loss[k]);
	}
	rt_result_free(&a);
	rt_result_free(&b);
	rt_result_free(&c);
	rt_result_free(&d);
	plan_free(p);
	plan_free(z);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(dropout__saved_bytes__as_derived_by_hand),
		cmocka_unit_test(dropout__zero_and_digits__plan_text),
		cmocka_unit_test(dropout__plan_reader__located_errors),
		cmocka_unit_test(dropout__first_of_stage__refused_by_the_model),
		cmocka_unit_test(dropout__run__seeded_masks_repeat_and_check),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
