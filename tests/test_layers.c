/* The kind tables in plan/: every layer kind and every op kind, enumerated from the
 * tables themselves, so a new row is tested without touching this file.
 *
 * Layers: each kind is spelled from its row into a program, which the checker, the
 * lowering and the runtime's model must all accept and agree on (parameters and saved
 * bytes per stage, and the plan file keeps the kind); a kind no program used fails.
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
#include "../compiler/program.h"
#include "../runtime/rt_private.h"

/* How a stage writes kind k: "linear 6", "relu", "loss mse". */
static void spell(LayerKind k, char *buf, size_t n)
{
	const LayerInfo *l = &plan_layers[k];
	switch (l->arg) {
	case LAYER_ARG_NONE:
	case LAYER_ARG_COUNT:
		snprintf(buf, n, "%s", l->word);
		break;
	case LAYER_ARG_WIDTH:
		snprintf(buf, n, "%s 6", l->word);
		break;
	case LAYER_ARG_NAME:
		snprintf(buf, n, "%s %s", l->word, l->name);
		break;
	}
}

static LayerKind first_loss(void)
{
	for (int k = 0; k < LAYER_COUNT; k++)
		if (plan_layers[k].loss)
			return (LayerKind)k;
	fail_msg("the layer table has no loss");
	return LAYER_COUNT;
}

/* Two stages on pp=2, dp=2 using kind k: in the first stage, or as the loss. */
static char *program_with(LayerKind k)
{
	static char buf[1024];
	char use[64], loss[64];
	spell(k, use, sizeof use);
	spell(plan_layers[k].loss ? k : first_loss(), loss, sizeof loss);
	snprintf(buf, sizeof buf,
	         "pipeline t;\nmesh pp=2 dp=2;\nmicrobatches 3;\ninput 5x4;\n"
	         "stage s0 { linear 8; %s%s }\nstage s1 { linear 7; %s; }\n"
	         "schedule 1f1b;\nlink ideal;\n",
	         plan_layers[k].loss ? "" : use, plan_layers[k].loss ? "" : ";", loss);
	return buf;
}

static Plan *compile_text(const char *src)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, "test.pipe", src, strlen(src), out);
	PipeccOptions o = {0};
	Plan *p = pipecc_compile("test.pipe", src, strlen(src), &o, &d);
	fclose(out);
	if (!p)
		fail_msg("does not compile:\n%s\n%s", src, buf ? buf : "");
	free(buf);
	return p;
}

/* The plan's figures per stage against the layer table and the runtime's model. */
static void agree(const Plan *p, int *used)
{
	char err[256];
	RtModel *m = rt_model_new(p, err, sizeof err);
	if (!m)
		fail_msg("the runtime's model refuses the plan: %s", err);
	for (int s = 0; s < p->nstages; s++) {
		const PlanStage *st = &p->stages[s];
		LayerCost sum = {0};
		for (int l = 0; l < st->nlayers; l++) {
			const PlanLayer *ly = &st->layers[l];
			LayerCost c = plan_layer_cost(ly->kind, p->rows, ly->in, ly->out);
			sum.params += c.params;
			sum.save_fb += c.save_fb;
			sum.save_fw += c.save_fw;
			sum.save_bw += c.save_bw;
			used[ly->kind]++;
		}
		assert_int_equal(st->params, sum.params);
		assert_int_equal(m->st[s].nparams, st->params);
		assert_int_equal(st->save_fb, sum.save_fb);
		assert_int_equal(st->save_fw, sum.save_fw);
		assert_int_equal(st->save_bw, sum.save_bw);
		assert_int_equal(m->st[s].save[0], st->save_fb);
		assert_int_equal(m->st[s].save[1], st->save_fw);
		assert_int_equal(m->st[s].save[2], st->save_bw);
	}
	rt_model_free(m);
}

static void layers__every_kind__check_lower_and_runtime_agree(void **state)
{
	(void)state;
	int used[LAYER_COUNT] = {0};
	for (int k = 0; k < LAYER_COUNT; k++) {
		Plan *p = compile_text(program_with((LayerKind)k));
		agree(p, used);
		/* The plan file keeps every kind: write, read back, compare. */
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		assert_int_equal(plan_write(p, f), 0);
		fclose(f);
		f = fmemopen(buf, len, "r");
		PlanError e;
		Plan *q = plan_read(f, "mem", &e);
		fclose(f);
		if (!q)
			fail_msg("%s: the plan does not read back: %s", plan_layers[k].name, e.msg);
		for (int s = 0; s < p->nstages; s++)
			for (int l = 0; l < p->stages[s].nlayers; l++)
				assert_int_equal(q->stages[s].layers[l].kind, p->stages[s].layers[l].kind);
		plan_free(q);
		free(buf);
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
		Plan *p = compile_text(program_with((LayerKind)k));
		for (int s = 0; s < p->nstages; s++) {
			const PlanStage *st = &p->stages[s];
			double flops[3] = {0, 0, 0};
			for (int l = 0; l < st->nlayers; l++) {
				LayerCost c = plan_layer_cost(st->layers[l].kind, p->rows, st->layers[l].in,
				                              st->layers[l].out);
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
		assert_non_null(l->cost);
		assert_true(l->arg < LAYER_ARG_COUNT);
		assert_int_equal(strncmp(l->example, l->word, strlen(l->word)), 0);
		assert_int_equal(plan_layer_find(l->name, strlen(l->name)), k);
		assert_int_equal(plan_layer_parse(l->word, l->arg == LAYER_ARG_NAME ? l->name : NULL),
		                 l->arg == LAYER_ARG_NAME ? (LayerKind)k : plan_layer_parse(l->word, NULL));
		for (int j = 0; j < k; j++)
			assert_string_not_equal(plan_layers[j].name, l->name);
		losses += l->loss;
		/* A layer's figures grow with the rows it holds, never shrink below zero. */
		LayerCost a = plan_layer_cost((LayerKind)k, 1, 4, 4), b = plan_layer_cost((LayerKind)k, 2, 4, 4);
		assert_true(a.params >= 0 && a.params == b.params);
		assert_true(b.save_fb >= a.save_fb && b.save_fw >= a.save_fw && b.save_bw >= a.save_bw);
	}
	assert_true(losses > 0);
	const char *words[LAYER_COUNT];
	int n = plan_layer_words(NULL, words);
	assert_true(n > 0 && n <= LAYER_COUNT);
	for (int i = 0; i < n; i++)
		assert_int_not_equal(plan_layer_parse(words[i], NULL), LAYER_COUNT);
	assert_int_equal(plan_layer_find("layernorm", 9), LAYER_COUNT);
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
		const char *why = plan_dep_apply(kinds[i], per_mb ? &mb[0] : NULL, &st, m, dp);
		if (why)
			return why;
	}
	return NULL;
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
		plan_push_op(&r, (PlanOp){.kind = (uint8_t)ops[i].k, .group = ops[i].group});
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
		cmocka_unit_test(ops__table__rows_complete),
		cmocka_unit_test(ops__dep_rules__order_enforced),
		cmocka_unit_test(ops__group_end__spans_one_group),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
