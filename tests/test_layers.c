/* The kind tables in plan/: every layer kind and every op kind, enumerated from the
 * tables themselves, so a new row is tested without touching this file.
 *
 * Layers: each kind is spelled from its row (its argument, every key it takes) into a
 * program, which the checker and the lowering must accept and agree on (parameters and
 * saved bytes per stage), the plan file must keep byte for byte, and the runtime's model
 * must either accept with the same figures or refuse by saying it has no kernel for the
 * kind (never for linear, relu, gelu and mse); a kind no program used fails.  The
 * transformer rows must give docs/layers.md's formulas, and the examples' parameter
 * counts are the published ones.
 * Ops: each row is complete and consistent, and the dependency rules (plan_dep_apply)
 * accept the textbook order and refuse each step taken too early or twice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/io.h"
#include "../compiler/program.h"
#include "../plan/tfcount.h"
#include "../runtime/rt_private.h"
#include "../plan/block.h"
#include "../plan/tie.h"
#include "layer_samples.h"
#include "plan_lib.h"

/* How a stage writes kind k: "linear 8", "relu", "loss mse", "attention heads=2
 * kv_heads=1 bias rope", "residual { rmsnorm; }": its argument and every key it takes. */
static void spell(LayerKind k, char *buf, size_t n)
{
	const LayerInfo *l = &plan_layers[k];
	int len = 0;
	switch (l->arg) {
	case LAYER_ARG_NONE:
	case LAYER_ARG_BODY:
	case LAYER_ARG_COUNT:
		len = snprintf(buf, n, "%s", l->word);
		break;
	case LAYER_ARG_WIDTH:
		len = snprintf(buf, n, "%s 8", l->word);
		break;
	case LAYER_ARG_HIDDEN:
		len = snprintf(buf, n, "%s 6", l->word);
		break;
	case LAYER_ARG_PROB:
		len = snprintf(buf, n, "%s 0.25", l->word);
		break;
	case LAYER_ARG_NAME:
		len = snprintf(buf, n, "%s %s", l->word, l->name);
		break;
	}
	for (int key = 0; key < LAYER_KEY_COUNT; key++)
		if (l->keys & LAYER_FLAG(key))
			len += snprintf(buf + len, n - (size_t)len, " %s%s", plan_layer_keys[key].name,
			                !plan_layer_keys[key].number                      ? ""
			                : plan_layer_keys[key].number == LAYER_VAL_PROB ? "=0.25"
			                : key == LAYER_KEY_HEADS                         ? "=2"
			                                                                 : "=1");
	if (l->arg == LAYER_ARG_BODY)
		snprintf(buf + len, n - (size_t)len, " { rmsnorm; }");
}

/* The old kinds run in a matrix program; a kind with keys, a body, a hidden width or a
 * token input in a token program. */
static int needs_tokens(LayerKind k)
{
	const LayerInfo *l = &plan_layers[k];
	return l->tokens || l->keys || l->arg == LAYER_ARG_HIDDEN || l->arg == LAYER_ARG_BODY;
}

/* The kinds piperun ran before the transformer kinds: its model must accept them. */
static int runtime_runs(LayerKind k)
{
	return k == LAYER_LINEAR || k == LAYER_RELU || k == LAYER_GELU || k == LAYER_MSE;
}

/* What ends a layer statement of kind k: a body ends in its brace. */
static const char *end(LayerKind k)
{
	return plan_layers[k].arg == LAYER_ARG_BODY ? "" : ";";
}

/* Two stages using kind k: in the first stage, or as the loss, or (embedding, head) in
 * its own place.  Token programs put both stages on one rank (pp=1, dp=2), so a tied
 * head shares the embedding's rank. */
static char *program_with(LayerKind k)
{
	static char buf[1024];
	char use[96];
	spell(k, use, sizeof use);
	const LayerInfo *l = &plan_layers[k];
	if (!needs_tokens(k)) {
		snprintf(buf, sizeof buf,
		         "pipeline t;\nmesh pp=2 dp=2;\nmicrobatches 3;\ninput 5x4;\n"
		         "stage s0 { linear 8; %s%s }\nstage s1 { linear 7; %s; }\n"
		         "schedule 1f1b;\nlink ideal;\n",
		         l->loss ? "" : use, l->loss ? "" : end(k), l->loss ? use : "loss mse");
		return buf;
	}
	snprintf(buf, sizeof buf,
	         "pipeline t;\nmesh pp=1 dp=2;\nmicrobatches 3;\ninput tokens 2x4 vocab=11;\n"
	         "stage s0 { %s; %s%s }\nstage s1 { %s; %s; }\n"
	         "schedule interleaved;\nlink ideal;\n",
	         k == LAYER_EMBED ? use : "embed 8", k == LAYER_EMBED || k == LAYER_HEAD || l->loss ?
	         "" : use, k == LAYER_EMBED || k == LAYER_HEAD || l->loss ? "" : end(k),
	         k == LAYER_HEAD ? use : "head", l->loss ? use : "loss xent");
	return buf;
}

/* The plan's figures per stage against the layer table and the runtime's model (which
 * may refuse a kind it has no kernel for, saying so, unless the program is a matrix
 * one). */
static void agree(const Plan *p, int *used, int may_refuse)
{
	char err[512];
	RtModel *m = NULL;
	if (rt_device_check(&rt_device_cpu, p, err, sizeof err)) {
		if (!may_refuse || !strstr(err, "no kernel"))
			fail_msg("the cpu device refuses the plan: %s", err);
	} else if (!(m = rt_model_new(p, 1, err, sizeof err))) {
		fail_msg("the runtime's model refuses the plan: %s", err);
	}
	LayerShape sh = plan_shape(p);
	for (int s = 0; s < p->nstages; s++) {
		const PlanStage *st = &p->stages[s];
		LayerCost sum = {0};
		for (int l = 0; l < st->nlayers; l++) {
			const PlanLayer *ly = &st->layers[l];
			LayerCost c = plan_layer_figures(ly, &sh);
			sum.params += c.params;
			sum.save_fb += c.save_fb;
			sum.save_fw += c.save_fw;
			sum.save_bw += c.save_bw;
			used[ly->kind]++;
		}
		assert_int_equal(st->params, sum.params);
		assert_int_equal(st->save_fb, sum.save_fb);
		assert_int_equal(st->save_fw, sum.save_fw);
		assert_int_equal(st->save_bw, sum.save_bw);
		if (!m)
			continue;
		if (m)
			assert_int_equal(m->st[s].nparams, st->params);
		if (m) {
			assert_int_equal(m->st[s].save[0], st->save_fb);
			assert_int_equal(m->st[s].save[1], st->save_fw);
			assert_int_equal(m->st[s].save[2], st->save_bw);
		}
	}
	if (m)
		rt_model_free(m);
}

/* p written, read back and written again: the same bytes. */
static void round_trip(const Plan *p, const char *what)
{
	char *buf = NULL, *buf2 = NULL;
	size_t len = 0, len2 = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_int_equal(plan_write(p, f), 0);
	fclose(f);
	f = fmemopen(buf, len, "r");
	PlanError e;
	Plan *q = plan_read(f, "mem", &e);
	fclose(f);
	if (!q)
		fail_msg("%s: the plan does not read back: line %lld: %s", what, (long long)e.line,
		         e.msg);
	f = open_memstream(&buf2, &len2);
	assert_int_equal(plan_write(q, f), 0);
	fclose(f);
	assert_int_equal(len, len2);
	assert_memory_equal(buf, buf2, len);
	plan_free(q);
	free(buf);
	free(buf2);
}

static void layers__every_kind__check_lower_and_runtime_agree(void **state)
{
	(void)state;
	int used[LAYER_COUNT] = {0};
	for (int k = 0; k < LAYER_COUNT; k++) {
		Plan *p = compile_plan(program_with((LayerKind)k));
		agree(p, used, !runtime_runs((LayerKind)k));
		round_trip(p, plan_layers[k].name); // the plan file keeps every kind and key
		plan_free(p);
	}
	for (int k = 0; k < LAYER_COUNT; k++)
		if (used[k] == 0)
			fail_msg("layer kind %s ran on no program", plan_layers[k].name);
}

/* Derived costs come from the table's FLOPs at the default rate. */
static void layers__derived_cost__table_flops(void **state)
{
	(void)state;
	for (int k = 0; k < LAYER_COUNT; k++) {
		Plan *p = compile_plan(program_with((LayerKind)k));
		LayerShape sh = plan_shape(p);
		for (int s = 0; s < p->nstages; s++) {
			const PlanStage *st = &p->stages[s];
			double flops[3] = {0, 0, 0};
			for (int l = 0; l < st->nlayers; l++) {
				LayerCost c = plan_layer_figures(&st->layers[l], &sh);
				for (int i = 0; i < 3; i++)
					flops[i] += c.flops[i];
			}
			for (int i = 0; i < 3; i++) {
				double ns = flops[i] * 1e9 / PROG_DEFAULT_FLOPS;
				assert_int_equal(st->cost[i], ns < 1 ? 1 : (int64_t)(ns + 0.5));
			}
		}
		plan_free(p);
	}
}

static void layers__table__rows_complete_and_found(void **state)
{
	(void)state;
	int losses = 0;
	for (int k = 0; k < LAYER_COUNT; k++) {
		const LayerInfo *l = &plan_layers[k];
		assert_non_null(l->name);
		assert_non_null(l->word);
		assert_non_null(l->example);
		assert_true(l->arg < LAYER_ARG_COUNT);
		assert_int_equal(strncmp(l->example, l->word, strlen(l->word)), 0);
		assert_int_equal(plan_layer_find(l->name, strlen(l->name)), k);
		assert_int_equal(plan_layer_parse(l->word, l->arg == LAYER_ARG_NAME ? l->name : NULL),
		                 l->arg == LAYER_ARG_NAME ? (LayerKind)k : plan_layer_parse(l->word, NULL));
		for (int j = 0; j < k; j++)
			assert_string_not_equal(plan_layers[j].name, l->name);
		losses += l->loss;
		/* A layer's figures grow with the rows it holds, never shrink below zero. */
		PlanLayer ly = {(LayerKind)k, 4, 4, 2, 1, 6, 1, 0, 0};
		LayerShape one = {1, 1, 1, 4, 0, PREC_F32, 1}, two = {2, 2, 1, 4, 0, PREC_F32, 1};
		LayerCost a = plan_layer_figures(&ly, &one), b = plan_layer_figures(&ly, &two);
		assert_true(a.params >= 0 && a.params == b.params);
		assert_true(b.save_fb >= a.save_fb && b.save_fw >= a.save_fw && b.save_bw >= a.save_bw);
	}
	assert_true(losses > 0);
	const char *words[LAYER_COUNT];
	int n = plan_layer_words(NULL, words);
	assert_true(n > 0 && n <= LAYER_COUNT);
	for (int i = 0; i < n; i++)
		assert_int_not_equal(plan_layer_parse(words[i], NULL), LAYER_COUNT);
	assert_int_equal(plan_layer_find("batchnorm", 9), LAYER_COUNT);
	for (int k = 0; k < LAYER_KEY_COUNT; k++)
		assert_int_equal(plan_layer_key_find(plan_layer_keys[k].name,
		                                     strlen(plan_layer_keys[k].name)), k);
}

/* The transformer rows give docs/layers.md's closed formulas for a GQA attention with
 * rotary and biases, a GELU MLP, a SwiGLU MLP, norms, an embedding and a head. */
static void layers__transformer_rows__match_documented_formulas(void **state)
{
	(void)state;
	enum { B = 2, S = 8, D = 16, H = 4, HKV = 2, F = 40, V = 23 };
	int64_t N = B * S;
	LayerShape sh = {N, B, S, V, 0, PREC_F32, 1};
	int64_t nq = (H + 2 * HKV) * (D / H), sq = 2 * B * H * S * S * (D / H);
	uint32_t bias = LAYER_FLAG(LAYER_KEY_BIAS), rope = LAYER_FLAG(LAYER_KEY_ROPE);

	PlanLayer at = {LAYER_ATTN, D, D, H, HKV, 0, 0, bias | rope, 0};
	LayerCost c = plan_layer_figures(&at, &sh);
	int64_t proj = 2 * N * D * nq + 2 * N * D * D;
	assert_int_equal(c.params, D * nq + nq + D * D + D);
	assert_true(c.flops[0] == (double)(proj + 2 * sq) && c.flops[1] == (double)(proj + 4 * sq) &&
	            c.flops[2] == (double)proj);
	assert_int_equal(c.save_fw, (N * D + N * nq + B * H * S * S + N * D) * 4); // x qkv p att
	assert_int_equal(c.save_bw, (N * D + N * nq) * 4);                          // dy dqkv
	assert_int_equal(c.save_fb, 0);

	PlanLayer mlp = {LAYER_MLP, D, D, 0, 0, F, 0, bias, 0};
	c = plan_layer_figures(&mlp, &sh);
	assert_int_equal(c.params, 2 * D * F + F + D);
	assert_true(c.flops[0] == (double)(4 * N * D * F));
	assert_int_equal(c.save_fw, (N * D + 2 * N * F) * 4); // x, h, a
	assert_int_equal(c.save_bw, (N * D + N * F) * 4);     // dy, dh

	PlanLayer sw = {LAYER_SWIGLU, D, D, 0, 0, F, 0, 0, 0};
	c = plan_layer_figures(&sw, &sh);
	assert_int_equal(c.params, 3 * D * F);
	assert_true(c.flops[2] == (double)(6 * N * D * F));
	assert_int_equal(c.save_fw, (N * D + 3 * N * F) * 4); // x, g, u, a
	assert_int_equal(c.save_bw, (N * D + 2 * N * F) * 4); // dy, dg, du

	PlanLayer ln = {LAYER_LAYERNORM, D, D, 0, 0, 0, 0, 0, 0};
	c = plan_layer_figures(&ln, &sh);
	assert_int_equal(c.params, 2 * D);
	assert_int_equal(c.save_fw, (N * D + 2 * N) * 4); // x, mean, rstd
	PlanLayer rn = {LAYER_RMSNORM, D, D, 0, 0, 0, 0, 0, 0};
	assert_int_equal(plan_layer_figures(&rn, &sh).params, D);

	PlanLayer em = {LAYER_EMBED, 1, D, 0, 0, 0, 0, LAYER_FLAG(LAYER_KEY_POSITIONS), 0};
	c = plan_layer_figures(&em, &sh);
	assert_int_equal(c.params, V * D + S * D);
	assert_int_equal(c.save_fw, N * 4); // the token ids
	em.flags = 0;
	assert_int_equal(plan_layer_figures(&em, &sh).params, V * D);

	PlanLayer hd = {LAYER_HEAD, D, V, 0, 0, 0, 0, 0, 0};
	c = plan_layer_figures(&hd, &sh);
	assert_int_equal(c.params, V * D);
	assert_true(c.flops[0] == (double)(2 * N * D * V));
	hd.flags = LAYER_FLAG(LAYER_KEY_TIED);
	assert_int_equal(plan_layer_figures(&hd, &sh).params, 0);

	PlanLayer xe = {LAYER_XENT, V, V, 0, 0, 0, 0, 0, 0};
	c = plan_layer_figures(&xe, &sh);
	assert_int_equal(c.params, 0);
	assert_int_equal(c.save_fb, (N * V + 2 * N) * 4); // logits, lse, targets

	PlanLayer rs = {LAYER_RESIDUAL, D, D, 0, 0, 0, 2, 0, 0};
	c = plan_layer_figures(&rs, &sh);
	assert_true(c.params == 0 && c.save_fb == 0 && c.save_fw == 0 && c.flops[0] == 0);

	/* dropout: its one-byte mask, not its input; nothing at P = 0; elementwise: 0 FLOPs.
	 * Attention's dropout=P adds its probabilities' mask and dropped copy (5 B H S^2). */
	PlanLayer dr = {LAYER_DROPOUT, D, D, 0, 0, 0, 0, 0, 0.1};
	c = plan_layer_figures(&dr, &sh);
	assert_true(c.params == 0 && c.save_fb == N * D && c.save_fw == 0 && c.save_bw == 0);
	assert_true(c.flops[0] == 0 && c.flops[1] == 0 && c.flops[2] == 0);
	dr.drop = 0;
	assert_int_equal(plan_layer_figures(&dr, &sh).save_fb, 0);
	at.drop = 0.1;
	c = plan_layer_figures(&at, &sh);
	assert_int_equal(c.save_fw, (N * D + N * nq + B * H * S * S + N * D) * 4 + 5 * B * H * S * S);
	assert_int_equal(plan_layer_rebuilt_bytes(&at, &sh, 1), 9 * B * H * S * S);
	assert_true(c.flops[0] == (double)(proj + 2 * sq) && c.flops[1] == (double)(proj + 4 * sq));
}


/* The slot names index the tensors each row states: the kernels read them by name. */
static void layers__slots__name_the_stated_tensors(void **state)
{
	(void)state;
	enum { B = 2, S = 4, D = 8, H = 2, F = 12, V = 10 };
	LayerShape sh = {B * S, B, S, V, 0, PREC_F32, 1};
	LayerTensors t;
	PlanLayer lin = {LAYER_LINEAR, D, 5, 0, 0, 0, 0, 0, 0};
	plan_layer_tensors(&lin, &sh, 1, &t);
	assert_true(t.param[LINEAR_W].rows == D && t.param[LINEAR_W].cols == 5);
	assert_true(t.param[LINEAR_B].rows == 1 && t.param[LINEAR_B].cols == 5);
	PlanLayer ln = {LAYER_LAYERNORM, D, D, 0, 0, 0, 0, 0, 0};
	plan_layer_tensors(&ln, &sh, 1, &t);
	assert_true(t.param[LAYERNORM_GAIN].init == LAYER_INIT_ONE);
	assert_true(t.param[LAYERNORM_BIAS].init == LAYER_INIT_ZERO);
	assert_true(t.nsaved == 2 && t.saved[LAYERNORM_RSTD].rows == B * S);
	PlanLayer at = {LAYER_ATTN, D, D, H, H, 0, 0, LAYER_FLAG(LAYER_KEY_BIAS), 0};
	plan_layer_tensors(&at, &sh, 1, &t);
	assert_true(t.param[ATTN_WQKV].cols == 3 * D && t.param[ATTN_BQKV].cols == 3 * D);
	assert_true(t.param[ATTN_WO].rows == D && t.param[ATTN_BO].rows == 1);
	assert_true(t.saved[ATTN_PROBS].rows == B * H * S && t.saved[ATTN_PROBS].cols == S);
	assert_true(t.saved[ATTN_ATT].cols == D && t.held[ATTN_DQKV].cols == 3 * D);
	PlanLayer mlp = {LAYER_MLP, D, D, 0, 0, F, 0, LAYER_FLAG(LAYER_KEY_BIAS), 0};
	plan_layer_tensors(&mlp, &sh, 1, &t);
	assert_true(t.param[MLP_W1].cols == F && t.param[MLP_B1].cols == F);
	assert_true(t.param[MLP_W2].rows == F && t.param[MLP_B2].cols == D);
	int gated = 0;
	for (int k = 0; k < LAYER_COUNT; k++) { // the gated MLPs share swiglu's slots
		if (plan_layers[k].tensors != plan_layers[LAYER_SWIGLU].tensors)
			continue;
		gated++;
		PlanLayer gl = {(LayerKind)k, D, D, 0, 0, F, 0, 0, 0};
		plan_layer_tensors(&gl, &sh, 1, &t);
		assert_true(t.nparams == 3 && t.param[SWIGLU_WD].rows == F &&
		            t.param[SWIGLU_WU].cols == F);
		assert_true(t.nsaved == 3 && t.nheld == 2 && t.held[SWIGLU_DU].cols == F);
	}
	assert_true(gated >= 2); // swiglu, geglu
	PlanLayer hd = {LAYER_HEAD, D, V, 0, 0, 0, 0, 0, 0};
	plan_layer_tensors(&hd, &sh, 1, &t);
	assert_true(t.param[HEAD_WV].rows == V && t.param[HEAD_WV].cols == D);
	PlanLayer xe = {LAYER_XENT, V, V, 0, 0, 0, 0, 0, 0};
	plan_layer_tensors(&xe, &sh, 1, &t);
	assert_true(t.nsaved == 2 && t.saved[XENT_TARGETS].rows == B * S &&
	            t.saved[XENT_LSE].cols == 1);
	PlanLayer dr = {LAYER_DROPOUT, D, D, 0, 0, 0, 0, 0, 0.5};
	plan_layer_tensors(&dr, &sh, 1, &t);
	assert_true(t.nsaved == 1 && t.saved[DROPOUT_MASK].mask && t.saved[DROPOUT_MASK].cols == D);
	assert_true(plan_layers[LAYER_DROPOUT].drops_x && !t.saved[DROPOUT_MASK].rebuilt);
	at.drop = 0.5; // the S x S tensors, and only they, are rebuilt by selective recomputation
	plan_layer_tensors(&at, &sh, 1, &t);
	assert_true(t.nsaved == 5 && t.saved[ATTN_MASK].mask && !t.saved[ATTN_DROP].mask);
	assert_true(t.saved[ATTN_DROP].rows == B * H * S && t.saved[ATTN_MASK].cols == S);
	for (int j = 0; j < t.nsaved; j++)
		assert_int_equal(t.saved[j].rebuilt, j == ATTN_PROBS || j >= ATTN_MASK);
}

/* Counts saturate rather than wrap (tfcount.h), and the limits of plan/layer.h name the
 * first figure past them: exact below, TK_MANY and refused above. */
static void layers__counts__saturate_and_are_refused(void **state)
{
	(void)state;
	const int64_t big = (int64_t)1 << 24, lim = PLAN_COUNT_MAX;
	assert_int_equal(sat_mul(3, 7), 21);
	assert_int_equal(sat_mul((int64_t)1 << 31, (int64_t)1 << 31), (int64_t)1 << 62);
	assert_int_equal(sat_mul((int64_t)1 << 32, (int64_t)1 << 31), TK_MANY);
	assert_int_equal(sat_mul(TK_MANY, 0), 0);
	assert_int_equal(sat_add(TK_MANY, 1), TK_MANY);
	assert_int_equal(sat_add(TK_MANY - 1, 1), TK_MANY);
	assert_int_equal(sat_div(TK_MANY, 8), TK_MANY);
	assert_int_equal(sat_add(INT64_MIN + 1, -2), INT64_MIN); // the simulator's memory falls
	assert_int_equal(sat_add(5, -7), -2);
	assert_int_equal(sat_mul(-((int64_t)1 << 32), (int64_t)1 << 31), INT64_MIN);
	assert_int_equal(sat_mul(-((int64_t)1 << 32), -((int64_t)1 << 31)), INT64_MAX);
	assert_int_equal(sat_div(-64, 8), -8);
	assert_int_equal(sat_div(64, 8), 8);
	/* 2 x 2^24 x 2^24 x 2^24 FLOPs: 2^73, which wrapped to 0 before. */
	PlanLayer lin = {LAYER_LINEAR, 1 << 24, 1 << 24, 0, 0, 0, 0, 0, 0};
	LayerShape rows = {big, big, 1, 0, 0, PREC_F32, 1};
	assert_true(plan_layer_figures(&lin, &rows).flops[0] == (double)TK_MANY);
	assert_true(plan_layer_cost(LAYER_LINEAR, 3, 5, 7).flops[0] == 210.0);
	TkAttn a = {16, 1 << 20, 1 << 16, 1 << 16, 1 << 16, 0, 10000.0, 1}; // B H S S = 2^60
	assert_int_equal(tk_attn_p_elems(&a), (int64_t)1 << 60);
	/* A rank's share at tp 4: N d + N nqkv / 4 + B H S S / 4 + N d / 4 floats, exact. */
	PlanLayer at = {LAYER_ATTN, 1 << 16, 1 << 16, 1 << 16, 1 << 16, 0, 0, 0, 0};
	LayerShape ash = {big, 16, 1 << 20, 0, 0, PREC_F32, 1};
	assert_int_equal(plan_layer_figures_tp(&at, &ash, 4).save_fw,
	                 (big * (1 << 16) + (big * 3 * (1 << 16) + ((int64_t)1 << 60) + big * (1 << 16)) / 4) * 4);
	a.H = a.Hkv = (int64_t)1 << 30; // B H S S = 2^74
	assert_int_equal(tk_attn_p_elems(&a), TK_MANY);
	at.heads = at.kv_heads = 1 << 30;
	assert_int_equal(plan_layer_figures_tp(&at, &ash, 8).save_fw, TK_MANY); // saturated

	LayerCost c = {.params = lim - 1, .save_fw = lim - 1, .flops = {1e18, 9e18, 0}};
	double v, most;
	assert_null(plan_cost_uncountable(&c, &v, &most));
	c.save_bw = lim;
	assert_string_equal(plan_cost_uncountable(&c, &v, &most), "saved bytes per microbatch");
	assert_true(v == (double)lim && most == (double)lim);
	c.save_bw = 0;
	c.flops[2] = (double)TK_MANY;
	assert_string_equal(plan_cost_uncountable(&c, &v, &most), "FLOPs per microbatch");
	char msg[160];
	assert_string_equal(plan_uncountable_text(msg, sizeof msg, "FLOPs per microbatch", v, most),
	                    "FLOPs per microbatch are more than 9.22e+18, the most the tools count");
	c.params = TK_MANY;
	const char *what = plan_cost_uncountable(&c, &v, &most);
	assert_string_equal(plan_uncountable_text(msg, sizeof msg, what, v, most),
	                    "parameters are more than 9.22e+18, past 1.15e+18, the most the tools "
	                    "count");

	/* A layer: whole and at tp; a linear of 2^30 x 2^30 has 2^60 parameters. */
	LayerShape sh = {4, 4, 1, 0, 0, PREC_F32, 1};
	PlanLayer wide = {LAYER_LINEAR, 1 << 30, 1 << 30, 0, 0, 0, 0, 0, 0};
	assert_string_equal(plan_layer_uncountable(&wide, &sh, 1, &v, &most), "parameters");
	wide.in = (1 << 30) - 2; // (2^30 - 2) 2^30 + 2^30 bias: just below
	assert_null(plan_layer_uncountable(&wide, &sh, 2, &v, &most));
	LayerCost sum = {0}, one = plan_layer_figures(&wide, &sh);
	plan_cost_add(&sum, &one);
	plan_cost_add(&sum, &one);
	assert_int_equal(sum.params, 2 * one.params);
	assert_string_equal(plan_cost_uncountable(&sum, &v, &most), "parameters");
	sum.params = TK_MANY - 1;
	plan_cost_add(&sum, &one);
	assert_int_equal(sum.params, TK_MANY);
}

/* Tensor parallelism in the layer table: at tp = 1 every row is its whole figures with no
 * all-reduce; at tp = T a split row's FLOPs are the whole's / T exactly, its split
 * parameters / T with the rest whole, and it names the all-reduces Megatron places
 * (forward after a row-parallel output, backward after a column-parallel input); a whole
 * row is unchanged.  Loops over the table (every sample of every kind, layer_samples.h):
 * every split must be met. */
static void layers__tp_figures__divide_as_split(void **state)
{
	(void)state;
	enum { B = 2, S = 8, D = 16, H = 4, F = 40, V = 24, T = 2 };
	int64_t N = B * S;
	LayerShape sh = {N, B, S, V, 0, PREC_F32, 1};
	const LayerSampleSize size = {.width = D, .out = D, .hidden = F, .heads = H};
	int seen[LAYER_TP_COUNT] = {0};
	for (int k = 0; k < LAYER_COUNT; k++) {
		PlanLayer samples[LAYER_SAMPLES_MAX];
		int ns = layer_samples((LayerKind)k, &sh, &size, samples);
		assert_true(ns > 0);
		for (int i = 0; i < ns; i++) {
			const PlanLayer *l = &samples[i];
			LayerCost one = plan_layer_figures(l, &sh), a = plan_layer_figures_tp(l, &sh, 1);
			assert_memory_equal(&one, &a, sizeof one);
			assert_true(one.tp_bytes[0] == 0 && one.tp_bytes[1] == 0);
			LayerCost t = plan_layer_figures_tp(l, &sh, T);
			char why[96];
			assert_null(plan_layer_tp_check(l, &sh, T, why, sizeof why));
			LayerTp split = plan_layers[k].tp;
			seen[split]++;
			if (split == LAYER_TP_WHOLE) {
				assert_memory_equal(&one, &t, sizeof one);
				continue;
			}
			for (int f = 0; f < 3; f++)
				assert_true(t.flops[f] * T == one.flops[f]);
			LayerTensors lt; // parameters that stay whole on every rank
			plan_layer_tensors(l, &sh, T, &lt);
			int64_t whole = 0;
			for (int j = 0; j < lt.nparams; j++)
				if (lt.split[j].axis == LAYER_SPLIT_NONE)
					whole += lt.param[j].rows * lt.param[j].cols;
			assert_int_equal(t.params, (one.params - whole) / T + whole);
			int64_t ts = t.save_fb + t.save_fw + t.save_bw;
			int64_t os = one.save_fb + one.save_fw + one.save_bw;
			assert_true(k == LAYER_EMBED ? ts == os : ts < os); // an embedding keeps the tokens
			/* Megatron's all-reduces: after a row-parallel output in F and a column-parallel
			 * input in B; of the vocabulary kinds the embedding sums its slices' rows in F,
			 * the head its input gradients in B, the loss three floats a row in F. */
			int vocab = split == LAYER_TP_VOCAB;
			int fwd = !vocab || k != LAYER_HEAD, bwd = !vocab || k == LAYER_HEAD;
			assert_int_equal(t.tp_bytes[0], !fwd ? 0 : k == LAYER_XENT ? N * 3 * 4 : N * D * 4);
			assert_int_equal(t.tp_bytes[1], bwd ? N * D * 4 : 0);
		}
	}
	for (int s = 0; s < LAYER_TP_COUNT; s++)
		assert_true(seen[s] > 0);
	/* what tp must divide */
	char why[96];
	uint32_t bias = LAYER_FLAG(LAYER_KEY_BIAS);
	PlanLayer at = {LAYER_ATTN, D, D, H, 1, 0, 0, bias | LAYER_FLAG(LAYER_KEY_ROPE), 0.1};
	assert_non_null(plan_layer_tp_check(&at, &sh, 2, why, sizeof why));
	assert_string_equal(why, "the number of key/value heads (1)");
	at.kv_heads = 2;
	assert_string_equal(plan_layer_tp_check(&at, &sh, 3, why, sizeof why),
	                    "the number of heads (4)");
	PlanLayer swi = {LAYER_SWIGLU, D, D, 0, 0, F, 0, 0, 0};
	assert_string_equal(plan_layer_tp_check(&swi, &sh, 3, why, sizeof why),
	                    "the hidden width (40)");
	PlanLayer hd = {LAYER_HEAD, D, V, 0, 0, 0, 0, 0, 0};
	assert_string_equal(plan_layer_tp_check(&hd, &sh, 5, why, sizeof why),
	                    "the vocabulary (24)");
	PlanLayer lin = {LAYER_LINEAR, D, D, 0, 0, 0, 0, 0, 0};
	assert_null(plan_layer_tp_check(&lin, &sh, 7, why, sizeof why));
	/* a body keeps nothing of its own: the same at any tp */
	PlanLayer res = {LAYER_RESIDUAL, D, D, 0, 0, 0, 1, 0, 0};
	LayerCost r1 = plan_layer_figures(&res, &sh), rt = plan_layer_figures_tp(&res, &sh, T);
	assert_memory_equal(&r1, &rt, sizeof r1);
}
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	return buf;
}

static int64_t params_of(const char *src)
{
	Plan *p = compile_plan(src);
	int64_t n = 0;
	for (int s = 0; s < p->nstages; s++)
		n += p->stages[s].params;
	round_trip(p, "example");
	plan_free(p);
	return n;
}

/* The published counts: GPT-2 small tied and untied, Llama-2-7B. */
static void layers__examples__published_parameter_counts(void **state)
{
	(void)state;
	char *src = slurp("examples/gpt2.pipe");
	assert_int_equal(params_of(src), 124439808);
	char *tied = strstr(src, "head tied;");
	assert_non_null(tied);
	memcpy(tied, "head;     ", 10); // untied, same length
	assert_int_equal(params_of(src), 163037184);
	assert_int_equal(params_of(slurp("examples/llama2-7b.pipe")), 6738415616);
}

/* The reader's located errors on what version 2 added, and version 1 still reads. */
static void layers__plan_reader__located_errors(void **state)
{
	(void)state;
	Plan *p = compile_plan(slurp("examples/gpt-tiny.pipe"));
	p->optim = (PlanOptim){.kind = OPTIM_MOMENTUM, .given = 1, .lr = 2e-3, .momentum = 0.85};
	round_trip(p, "gpt-tiny with momentum");
	p->optim.distributed = 1;
	round_trip(p, "gpt-tiny with a distributed momentum optimizer");
	p->optim = (PlanOptim){.kind = OPTIM_ADAMW, .given = 1, .lr = 1e-3, .beta1 = 0.9,
	                       .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
	char *plan = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&plan, &len);
	assert_int_equal(plan_write(p, f), 0);
	fclose(f);
	round_trip(p, "gpt-tiny with adamw");
	char *full = plan;
	plan = as_plain(full);
	free(full);
	read_broken(plan, "heads=4 kv_heads=4", "heads=3 kv_heads=3", "do not divide");
	read_broken(plan, "heads=4 kv_heads=4", "heads=4", "expected 'kv_heads='");
	read_broken(plan, "128 128 span=2", "128 128", "needs span=N");
	read_broken(plan, "128 128 span=2", "128 128 span=99", "out of range");
	read_broken(plan, "bias hidden=512", "bias", "needs hidden=N");
	read_broken(plan, "layer layernorm 128 128", "layer layernorm 128 128 rope",
	            "unexpected 'rope' on a layernorm layer");
	read_broken(plan, "layer head 128 512", "layer head 128 512 positions",
	            "unexpected 'positions'");
	read_broken(plan, "vocab=512", "vocab=0", "out of range");
	read_broken(plan, "optimizer adamw", "optimizer adam", "unknown optimizer 'adam'");
	read_broken(plan, "beta2=0.95", "beta2=2", "beta2= must be a number in [0, 1]");
	read_broken(plan, "weight_decay=0.1", "weight_decay=0.1 distributedly", "unexpected text");
	read_broken(plan, "pipecc-plan 1", "pipecc-plan 4", "version 4 is not supported");
	free(plan);
	plan_free(p);

	/* a version 1 plan reads as the same plan */
	p = compile_plan(slurp("examples/tiny.pipe"));
	plan = NULL;
	f = open_memstream(&plan, &len);
	assert_int_equal(plan_write(p, f), 0);
	fclose(f);
	assert_memory_equal(plan, "pipecc-plan 2 blocks=", 21);
	full = plan;
	plan = as_plain(full);
	free(full);
	f = fmemopen(plan, strlen(plan), "r");
	PlanError e;
	Plan *q = plan_read(f, "mem", &e);
	fclose(f);
	if (!q)
		fail_msg("a version 1 plan does not read: %s", e.msg);
	assert_int_equal(q->nstages, p->nstages);
	assert_int_equal(q->stages[0].layers[0].kind, p->stages[0].layers[0].kind);
	plan_free(q);
	free(plan);
	plan_free(p);
}
static void ops__table__rows_complete(void **state)
{
	(void)state;
	for (int k = 0; k < OP_COUNT; k++) {
		const OpInfo *o = &plan_ops[k];
		assert_non_null(o->name);
		assert_true(o->role < OP_ROLE_COUNT);
		assert_false(plan_op_is_compute((OpKind)k) && plan_op_is_comm((OpKind)k));
		for (int j = 0; j < k; j++)
			assert_string_not_equal(plan_ops[j].name, o->name);
		if (o->torch)
			assert_int_equal(plan_op_of_torch(o->torch), k);
		if (plan_op_is_compute((OpKind)k)) {
			assert_true(o->torch != 0);     // a PyTorch action
			assert_true(o->makes != 0);     // it makes something
			assert_true(o->costs != 0);     // and costs something
			assert_non_null(o->again);
		}
	}
	/* A microbatch's saved bytes come back to zero by either backward path, and the
	 * costs add up to the stage's F + B + W. */
	PlanStage st = {.save_fb = 1, .save_fw = 10, .save_bw = 100, .cost = {1, 10, 100}};
	assert_int_equal(plan_op_mem(OP_F, &st), 11);
	assert_int_equal(plan_op_mem(OP_F, &st) + plan_op_mem(OP_B, &st) + plan_op_mem(OP_W, &st), 0);
	assert_int_equal(plan_op_mem(OP_F, &st) + plan_op_mem(OP_BW, &st), 0);
	assert_int_equal(plan_op_cost(OP_BW, st.cost), 110);
	assert_int_equal(plan_op_cost(OP_F, st.cost) + plan_op_cost(OP_B, st.cost) +
	                     plan_op_cost(OP_W, st.cost),
	                 111);
	assert_int_equal(plan_op_cost(OP_SEND, st.cost) + plan_op_mem(OP_OPTIM, &st), 0);
	assert_int_equal(plan_op_of_torch('X'), OP_COUNT);
	assert_int_equal(plan_op_of_torch(0), OP_COUNT);
}

/* Runs kinds in order on one microbatch (ALLREDUCE and OPTIM on the stage); the phrase
 * of the first refusal, or NULL. */
static const char *run(const OpKind *kinds, int n, int m, int dp)
{
	uint8_t mb[4] = {0};
	PlanStageDeps st = {0};
	for (int i = 0; i < n; i++) {
		int per_mb = plan_op_is_compute(kinds[i]);
		const char *why = plan_dep_apply(kinds[i], per_mb ? &mb[0] : NULL, &st, NULL, m, dp);
		if (why)
			return why;
	}
	return NULL;
}

/* A head tied to another stage's embedding adds into its gradient: the embedding's
 * all-reduce and step wait for the head's weight gradients, and none may come after. */
static void ops__dep_rules__tied_head_before_embedding_step(void **state)
{
	(void)state;
	for (int late = 0; late < 2; late++) {
		uint8_t emb_mb = 0, head_mb = 0;
		PlanStageDeps emb = {.tied = 1}, head = {0};
		assert_null(plan_dep_apply(OP_F, &emb_mb, &emb, NULL, 1, 2));
		assert_null(plan_dep_apply(OP_BW, &emb_mb, &emb, NULL, 1, 2));
		assert_null(plan_dep_apply(OP_F, &head_mb, &head, &emb, 1, 2));
		if (late) { // the embedding reduces first: refused, and the head's W after it too
			const char *why = plan_dep_apply(OP_ALLREDUCE, NULL, &emb, NULL, 1, 2);
			assert_non_null(why);
			assert_non_null(strstr(why, "head tied to its embedding"));
			emb.reduced = 1; // as a plan that went on regardless
			why = plan_dep_apply(OP_BW, &head_mb, &head, &emb, 1, 2);
			assert_non_null(why);
			assert_non_null(strstr(why, "tied head's weight gradient after"));
			continue;
		}
		assert_null(plan_dep_apply(OP_BW, &head_mb, &head, &emb, 1, 2));
		assert_int_equal(emb.nw_tied, 1);
		assert_null(plan_dep_apply(OP_ALLREDUCE, NULL, &emb, NULL, 1, 2));
		assert_null(plan_dep_apply(OP_OPTIM, NULL, &emb, NULL, 1, 2));
	}
}

static void ops__dep_rules__order_enforced(void **state)
{
	(void)state;
	const OpKind split[] = {OP_F, OP_B, OP_W, OP_ALLREDUCE, OP_OPTIM};
	const OpKind fused[] = {OP_F, OP_BW, OP_OPTIM};
	assert_null(run(split, 5, 1, 2));
	assert_null(run(fused, 3, 1, 1));
	const struct {
		OpKind k[5];
		int n, dp;
		const char *why;
	} bad[] = {
		{{OP_B}, 1, 1, "backward before its F"},
		{{OP_BW}, 1, 1, "backward before its F"},
		{{OP_F, OP_W}, 2, 1, "W before its B"},
		{{OP_F, OP_F}, 2, 1, "a second F of this stage and microbatch"},
		{{OP_F, OP_B, OP_BW}, 3, 1, "a second backward of this stage and microbatch"},
		{{OP_F, OP_BW, OP_W}, 3, 1, "a second W"},
		{{OP_F, OP_B, OP_ALLREDUCE}, 3, 2, "a reduction before the stage's last W"},
		{{OP_F, OP_B, OP_OPTIM}, 3, 1, "an optimizer step before the stage's last W"},
		{{OP_F, OP_BW, OP_OPTIM}, 3, 2, "an optimizer step before the stage's all-reduce"},
		{{OP_F, OP_BW, OP_ALLREDUCE}, 3, 1, "an all-reduce with dp = 1"},
		{{OP_F, OP_BW, OP_ALLREDUCE, OP_ALLREDUCE}, 4, 2, "a second one for this stage"},
		{{OP_F, OP_BW, OP_OPTIM, OP_OPTIM}, 4, 1, "a second one for this stage"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *why = run(bad[i].k, bad[i].n, 1, bad[i].dp);
		if (!why || strcmp(why, bad[i].why))
			fail_msg("case %zu: got '%s', want '%s'", i, why ? why : "(accepted)", bad[i].why);
	}
	/* Every compute kind's local needs are what some earlier kind makes. */
	for (int k = 0; k < OP_COUNT; k++) {
		uint8_t need = plan_ops[k].needs & PLAN_DEP_MB, made = 0;
		for (int j = 0; j < OP_COUNT; j++)
			if (j != k)
				made |= plan_ops[j].makes;
		assert_int_equal(need & ~made, 0);
	}
}

/* One stage's ops in order through plan_dep_apply, one microbatch: a case's verdict is
 * why (NULL: accepted).  The stage is on when the case says so (a tied table, sequence-
 * parallel gradients: whatever flag on sets), else a plain one. */
typedef struct {
	OpKind k[5];
	int n, dp, on;
	const char *why;
} DepCase;

static void dep_cases(const DepCase *c, size_t n, PlanStageDeps on)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t mb = 0;
		PlanStageDeps st = c[i].on ? on : (PlanStageDeps){0};
		const char *why = NULL;
		for (int j = 0; j < c[i].n && !why; j++)
			why = plan_dep_apply(c[i].k[j], plan_op_is_compute(c[i].k[j]) ? &mb : NULL, &st,
			                     NULL, 1, c[i].dp);
		if (c[i].why ? !why || strcmp(why, c[i].why) : why != NULL)
			fail_msg("case %zu: got '%s', want '%s'", i, why ? why : "(accepted)",
			         c[i].why ? c[i].why : "(accepted)");
	}
}

/* A stage holding a copy of a table tied across ranks: its TIEREDUCE comes after its
 * last W and before its all-reduce and step, once; a stage without one has none. */
static void ops__dep_rules__tie_reduce_after_last_w_before_step(void **state)
{
	(void)state;
	static const DepCase cases[] = {
		{{OP_F, OP_BW, OP_TIEREDUCE, OP_ALLREDUCE, OP_OPTIM}, 5, 2, 1, NULL},
		{{OP_F, OP_B, OP_W, OP_TIEREDUCE, OP_OPTIM}, 5, 1, 1, NULL},
		{{OP_F, OP_B, OP_TIEREDUCE}, 3, 1, 1, "a tied table's reduction before the stage's last W"},
		{{OP_F, OP_BW, OP_ALLREDUCE}, 3, 2, 1,
		 "before the stage's TIEREDUCE (its tied table's copies are not summed yet)"},
		{{OP_F, OP_BW, OP_OPTIM}, 3, 1, 1,
		 "before the stage's TIEREDUCE (its tied table's copies are not summed yet)"},
		{{OP_F, OP_BW, OP_TIEREDUCE, OP_TIEREDUCE}, 4, 1, 1, "a second one for this stage"},
		{{OP_F, OP_BW, OP_TIEREDUCE}, 3, 1, 0,
		 "a TIEREDUCE on a stage that holds no table tied across pipeline ranks"},
	};
	dep_cases(cases, sizeof cases / sizeof cases[0], (PlanStageDeps){.tie = 1});
	/* a W of another microbatch after the TIEREDUCE */
	uint8_t mb[2] = {0};
	PlanStageDeps st = {.tie = 1};
	assert_null(plan_dep_apply(OP_F, &mb[0], &st, NULL, 2, 1));
	assert_null(plan_dep_apply(OP_F, &mb[1], &st, NULL, 2, 1));
	assert_null(plan_dep_apply(OP_BW, &mb[0], &st, NULL, 2, 1));
	assert_non_null(plan_dep_apply(OP_TIEREDUCE, NULL, &st, NULL, 2, 1)); // one W to go
	st.tie_done = 1; // as a plan that went on regardless
	assert_string_equal(plan_dep_apply(OP_BW, &mb[1], &st, NULL, 2, 1),
	                    "a weight gradient after the stage's TIEREDUCE");
}

/* A stage with sequence-parallel gradients (PlanStageDeps.sp): its SPREDUCE comes after
 * its last W and its dp reduction and before its step, once; a stage without has none. */
static void ops__dep_rules__sp_reduce_after_dp_before_step(void **state)
{
	(void)state;
	static const DepCase cases[] = {
		{{OP_F, OP_BW, OP_ALLREDUCE, OP_SPREDUCE, OP_OPTIM}, 5, 2, 1, NULL},
		{{OP_F, OP_B, OP_W, OP_SPREDUCE, OP_OPTIM}, 5, 1, 1, NULL},
		{{OP_F, OP_B, OP_W, OP_OPTIM}, 4, 1, 0, NULL},
		{{OP_F, OP_B, OP_SPREDUCE}, 3, 1, 1,
		 "a sequence-parallel gradients' all-reduce before the stage's last W"},
		{{OP_F, OP_BW, OP_SPREDUCE}, 3, 2, 1, "an SPREDUCE before the stage's dp reduction"},
		{{OP_F, OP_BW, OP_OPTIM}, 3, 1, 1, "an optimizer step before the stage's SPREDUCE"},
		{{OP_F, OP_BW, OP_SPREDUCE, OP_SPREDUCE}, 4, 1, 1, "a second one for this stage"},
		{{OP_F, OP_BW, OP_SPREDUCE}, 3, 1, 0,
		 "an SPREDUCE on a stage without sequence-parallel gradients"},
	};
	dep_cases(cases, sizeof cases / sizeof cases[0], (PlanStageDeps){.sp = 1});
	/* what no verified walk reaches: a W after the SPREDUCE, an SPREDUCE after the step */
	uint8_t mb[2] = {0};
	PlanStageDeps st = {.sp = 1, .sp_done = 1};
	assert_null(plan_dep_apply(OP_F, &mb[0], &st, NULL, 2, 1));
	assert_string_equal(plan_dep_apply(OP_BW, &mb[0], &st, NULL, 2, 1),
	                    "a weight gradient after the stage's SPREDUCE");
	st = (PlanStageDeps){.sp = 1, .nw = 1, .stepped = 1};
	assert_string_equal(plan_dep_apply(OP_SPREDUCE, NULL, &st, NULL, 1, 1),
	                    "an SPREDUCE after the stage's optimizer step");
}

/* gpt-tiny with its head tied at pp=4: a copy of the table on the head's rank, and a
 * TIEREDUCE on both ranks; the reader and the verifier locate what is wrong in one. */
static void plan__tie_across_ranks__read_and_verified(void **state)
{
	(void)state;
	const char *src = slurp("examples/gpt-tiny.pipe");
	const char *at = strstr(src, "head;");
	assert_non_null(at);
	size_t n = strlen(src) + 8;
	char *tied = malloc(n);
	assert_non_null(tied);
	snprintf(tied, n, "%.*shead tied;%s", (int)(at - src), src, at + 5);
	Plan *p = compile_plan(tied);
	PlanError e;
	assert_int_equal(plan_verify(p, &e), 0);
	round_trip(p, "gpt-tiny tied across ranks");
	int em, hd, st;
	assert_int_equal(plan_tie_across(p, &em, &hd), 1);
	assert_int_equal(plan_tie_peer(p, 0, &st), 3);
	assert_int_equal(st, em);
	assert_int_equal(plan_tie_peer(p, 3, &st), 0);
	assert_int_equal(st, hd);
	assert_int_equal(plan_tie_peer(p, 1, &st), -1);
	assert_int_equal(plan_tie_bytes(p), 512 * 128 * 4);
	char *plan = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&plan, &len);
	assert_int_equal(plan_write(p, f), 0);
	fclose(f);
	char *full = plan;
	plan = as_plain(full);
	free(full);
	assert_non_null(strstr(plan, "\nTIEREDUCE s=0 with=3 bytes=262144 g="));
	assert_non_null(strstr(plan, "\nTIEREDUCE s=3 with=0 bytes=262144 g="));
	read_broken(plan, "TIEREDUCE s=0 with=3", "TIEREDUCE s=0 to=3", "expected 'with='");
	read_broken(plan, "TIEREDUCE s=0 with=3", "TIEREDUCE s=0 with=4", "out of range");
	read_broken(plan, "TIEREDUCE s=0 with=3", "TIEREDUCE s=9 with=3", "out of range");
	read_broken(plan, "layer head 128 512 tied copy", "layer head 128 512 copy",
	            "unexpected 'copy' on a head layer");
	/* read, but refused by the verifier */
	const struct {
		const char *from, *to, *want;
	} bad[] = {
		{"TIEREDUCE s=0 with=3", "TIEREDUCE s=0 with=2",
		 "the tied table's other copy is on rank 3 (want with=3)"},
		{"TIEREDUCE s=0 with=3 bytes=262144", "TIEREDUCE s=0 with=3 bytes=262148",
		 "the tied table's gradient is 262144 bytes"},
		{"layer head 128 512 tied copy", "layer head 128 512 tied",
		 "must keep its own copy of the table"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *hit = strstr(plan, bad[i].from);
		assert_non_null(hit);
		size_t m = strlen(plan) + strlen(bad[i].to) + 1;
		char *text = malloc(m);
		assert_non_null(text);
		snprintf(text, m, "%.*s%s%s", (int)(hit - plan), plan, bad[i].to, hit + strlen(bad[i].from));
		f = fmemopen(text, strlen(text), "r");
		Plan *q = plan_read(f, "mem", &e);
		fclose(f);
		if (!q)
			fail_msg("'%s' does not read: %s", bad[i].to, e.msg);
		if (plan_verify(q, &e) == 0 || !strstr(e.msg, bad[i].want))
			fail_msg("'%s': %s; want %s", bad[i].to, e.msg, bad[i].want);
		plan_free(q);
		free(text);
	}
	free(plan);
	plan_free(p);
	free(tied);
}

static void ops__group_end__spans_one_group(void **state)
{
	(void)state;
	PlanRank r = {0};
	const struct {
		OpKind k;
		int group;
	} ops[] = {{OP_F, -1}, {OP_SEND, 0}, {OP_RECV, 0}, {OP_SEND, 1}, {OP_B, -1}, {OP_ALLREDUCE, 2},
	           {OP_OPTIM, -1}};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		plan_push_op(&r, (PlanOp){.kind = (uint8_t)ops[i].k, .group = ops[i].group}, 0);
	const int64_t want[] = {1, 3, 3, 4, 5, 6, 7};
	for (int64_t i = 0; i < r.nops; i++)
		assert_int_equal(plan_group_end(&r, i), want[i]);
	free(r.ops);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(layers__every_kind__check_lower_and_runtime_agree),
		cmocka_unit_test(layers__derived_cost__table_flops),
		cmocka_unit_test(layers__table__rows_complete_and_found),
		cmocka_unit_test(layers__transformer_rows__match_documented_formulas),
		cmocka_unit_test(layers__slots__name_the_stated_tensors),
		cmocka_unit_test(layers__examples__published_parameter_counts),
		cmocka_unit_test(layers__plan_reader__located_errors),
		cmocka_unit_test(ops__table__rows_complete),
		cmocka_unit_test(ops__dep_rules__order_enforced),
		cmocka_unit_test(ops__dep_rules__tied_head_before_embedding_step),
		cmocka_unit_test(ops__dep_rules__tie_reduce_after_last_w_before_step),
		cmocka_unit_test(ops__dep_rules__sp_reduce_after_dp_before_step),
		cmocka_unit_test(plan__tie_across_ranks__read_and_verified),
		cmocka_unit_test(ops__group_end__spans_one_group),
		cmocka_unit_test(layers__tp_figures__divide_as_split),
		cmocka_unit_test(layers__counts__saturate_and_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
