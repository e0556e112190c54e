/* Selective recomputation at tp > 1 (`recompute NAME selective;` on a tp group,
 * docs/semantics.md "Memory"), by hand: a rank drops and rebuilds its own heads'
 * probabilities (with dropout=P their mask and dropped copy), its B cost gains the
 * rebuild's share of its own F FLOPs, and each backward part rebuilds its own attention
 * layers' (PlanPart.rebuilt), its B share weighted with the rebuild; in f32 and in bf16.
 * Korthikanti's selective figure at t = 8 is in test_prec.c; tests/cli/selective_tp.sh
 * runs it (--check, mpirun, measured memory == pipesim's). */
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
#include "../plan/tp.h"
#include "plan_lib.h"

/* B = 2 sequences of S = 16 tokens (N = 32 rows), width d = 32, H = 4 heads of hd = 8,
 * MLP 64, tp = 2: a rank has 2 heads.  s0's layers: embed 0, residual 1, layernorm 2,
 * attention 3, residual 4, layernorm 5, mlp 6.  Filled in: the precision, attention's
 * extra keys and whether s0 recomputes selectively.  s0's costs are given: f 18 us. */
static const char *src_fmt =
	"pipeline p;\nmesh pp=2 tp=2;\nmicrobatches 4;\ninput tokens 2x16 vocab=64;\n%s"
	"stage s0 { embed 32; residual { layernorm; attention heads=4%s; } "
	"residual { layernorm; mlp 64; } }\n"
	"stage s1 { layernorm; head; loss xent; }\n"
	"cost s0 f=18us b=30us w=20us;\n%s"
	"schedule 1f1b;\n";

static Plan *program(const char *prec, const char *keys, int selective)
{
	char src[1024];
	snprintf(src, sizeof src, src_fmt, prec, keys, selective ? "recompute s0 selective;\n" : "");
	return compile_plan(src);
}

/* One rank's FLOPs of s0 (docs/layers.md; norms, residuals and the embedding count 0):
 * attention F = projections 2 N d (3d + d) / tp = 131072 + its heads' two S x S
 * products 2 x 2 B (H/tp) S^2 hd = 32768: 163840; mlp F = 2 x 2 N d 64 / tp = 131072;
 * F = 294912.  The rebuild is one S x S product of its heads: core = 2 B (H/tp) S^2 hd
 * = 16384 = F / 18, so b gains f / 18 = 1000 ns.  B (the input gradient; W the
 * weights'): attention's projections 131072 + four S x S products 4 x 16384 = 196608,
 * mlp 131072. */
enum { F_RANK = 294912, CORE_RANK = 16384, ATTN_B = 196608, MLP_B = 131072 };

/* The rebuilt bytes a rank drops: P = B (H/tp) S^2 = 1024 elements at the activation
 * size act, with dropout=P its one-byte mask and dropped copy (act) besides. */
static int64_t rank_probs(int act, int drop)
{
	return 1024 * (drop ? 2 * act + 1 : act);
}

static void one_case(const char *prec, int act, const char *keys, int drop)
{
	Plan *plain = program(prec, keys, 0), *sel = program(prec, keys, 1);
	const PlanStage *a = &plain->stages[0], *b = &sel->stages[0];
	int64_t re = rank_probs(act, drop);
	assert_int_equal(b->recompute, PLAN_RECOMPUTE_SELECTIVE);
	assert_int_equal(b->save_re, re);
	assert_int_equal(b->save_fw, a->save_fw - re);
	assert_int_equal(b->save_fb, a->save_fb);
	assert_int_equal(b->save_bw, a->save_bw);
	/* the rank's F FLOPs as derived above, and b + f x core / F */
	LayerShape sh = plan_shape(sel);
	double fl = 0, core = 0;
	for (int l = 0; l < b->nlayers; l++) {
		fl += plan_layer_figures_tp(&b->layers[l], &sh, 2).flops[0];
		core += plan_layer_rebuild_flops(&b->layers[l], &sh, 2);
	}
	assert_true(fl == F_RANK && core == CORE_RANK);
	assert_true(plan_layer_figures_tp(&b->layers[3], &sh, 2).flops[1] == ATTN_B);
	assert_true(plan_layer_figures_tp(&b->layers[6], &sh, 2).flops[1] == MLP_B);
	assert_int_equal(a->cost[0], 18000);
	assert_int_equal(b->cost[1], a->cost[1] + 18000 / 18);
	/* parts: backward {mlp} | {layernorm, residual, attention} | {rest}; the middle one
	 * rebuilds the attention's, and F keeps none of them */
	PlanParts pp;
	assert_int_equal(plan_stage_parts(sel, 0, &pp), 0);
	assert_int_equal(pp.n[DIR_GRAD], 3);
	const PlanPart *g = pp.part[DIR_GRAD];
	assert_true(g[0].first == 6 && g[1].first == 3 && g[1].n == 3);
	assert_true(g[0].rebuilt == 0 && g[1].rebuilt == re && g[2].rebuilt == 0);
	for (int d = 0; d < DIR_COUNT; d++) {
		int64_t fw = 0;
		for (int i = 0; i < pp.n[d]; i++)
			fw += pp.part[d][i].save[1];
		assert_int_equal(fw, b->save_fw);
	}
	for (int i = 0; i < pp.n[DIR_ACT]; i++)
		assert_int_equal(pp.part[DIR_ACT][i].rebuilt, 0);
	/* b (31000 ns) shared by B FLOPs, the rebuild's with the attention's part: the mlp's
	 * part 31000 x 131072 / 344064 = 11809.5, rounded 11810 (without the rebuild's
	 * weight it would be 12400) */
	int64_t upto = llround((double)b->cost[1] * MLP_B / (MLP_B + ATTN_B + CORE_RANK));
	assert_int_equal(b->cost[1], 31000);
	assert_int_equal(upto, 11810);
	assert_int_equal(g[0].cost[1], upto);
	assert_int_equal(g[1].cost[1], b->cost[1] - upto);
	assert_int_equal(g[2].cost[1], 0);
	plan_parts_free(&pp);
	plan_free(plain);
	plan_free(sel);
}

/* f32: P 4096 bytes a rank (x 9/4 with dropout: 9216). */
static void selective__tp2_f32__drops_the_ranks_heads(void **state)
{
	(void)state;
	one_case("", 4, "", 0);
	assert_int_equal(rank_probs(4, 1), 9216);
	one_case("", 4, " dropout=0.1", 1);
}

/* bf16: P at 2 bytes, 2048 a rank (x 5/2 with dropout: 5120). */
static void selective__tp2_bf16__drops_the_ranks_heads(void **state)
{
	(void)state;
	one_case("precision bf16;\n", 2, "", 0);
	assert_int_equal(rank_probs(2, 1), 5120);
	one_case("precision bf16;\n", 2, " dropout=0.1", 1);
}

/* At tp = 1 the figures are the whole layer's: the tp argument changes nothing. */
static void selective__tp1__whole_layer(void **state)
{
	(void)state;
	PlanLayer at = {.kind = LAYER_ATTN, .in = 32, .out = 32, .heads = 4, .kv_heads = 4,
	                .drop = 0.1};
	LayerShape sh = {32, 2, 16, 0, 0, PREC_F32, 1};
	assert_int_equal(plan_layer_rebuilt_bytes(&at, &sh, 1), 9 * 2 * 4 * 16 * 16);
	assert_int_equal(plan_layer_rebuilt_bytes(&at, &sh, 2), 9 * 2 * 2 * 16 * 16);
	assert_true(plan_layer_rebuild_flops(&at, &sh, 1) == 2 * CORE_RANK);
	at.flags = LAYER_FLAG(LAYER_KEY_FLASH);
	assert_true(plan_layer_rebuild_flops(&at, &sh, 2) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(selective__tp2_f32__drops_the_ranks_heads),
		cmocka_unit_test(selective__tp2_bf16__drops_the_ranks_heads),
		cmocka_unit_test(selective__tp1__whole_layer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
