/* The text writer's op lines (plan/write.c): put_op copies a line's text from the last
 * line of its shape when only the microbatch and the group differ (LineTpl), so every
 * op below differs from the one before it of its shape in one field, and each line must
 * still spell its own fields, as an independent snprintf of the format says
 * (docs/plan-format.md).  Written on one thread and in pieces on three workers (each
 * piece starts without templates).  And plan_format_op (diagnostics) spells every kind's
 * line as the writer does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/par.h"
#include "plan_lib.h"
#include "../plan/block.h"

/* Op o (from .pipe line `line`) as the format spells it, with its newline. */
static void spell(const Plan *p, const PlanOp *o, int32_t line, char *buf, size_t n)
{
	int k = 0;
	if (o->kind == OP_SEND || o->kind == OP_RECV)
		k = snprintf(buf, n, "%s %s e=%d m=%d %s=%d bytes=%lld g=%d r=%d", plan_ops[o->kind].name,
		             plan_dir_names[o->dir], o->stage, o->mb, o->kind == OP_SEND ? "to" : "from",
		             o->peer, (long long)p->edges[o->stage].bytes, o->group, o->route);
	else if (o->part)
		k = snprintf(buf, n, "%s %d %d part=%d", plan_ops[o->kind].name, o->stage, o->mb,
		             o->part);
	else
		k = snprintf(buf, n, "%s %d %d", plan_ops[o->kind].name, o->stage, o->mb);
	if (line > 0)
		k += snprintf(buf + k, n - (size_t)k, " @%d", line);
	snprintf(buf + k, n - (size_t)k, "\n");
}

#define P2P(k, d, e, m, q, g, r) \
	{.kind = k, .dir = d, .stage = e, .mb = m, .peer = q, .group = g, .route = r}
#define SEND(d, e, m, q, g, r) P2P(OP_SEND, d, e, m, q, g, r)
#define RECV(d, e, m, q, g, r) P2P(OP_RECV, d, e, m, q, g, r)
#define COMPUTE(k, s, m, pt) \
	{.kind = k, .stage = s, .mb = m, .part = pt, .peer = -1, .group = -1, .route = -1}

/* Rank 0's ops: after each, one that differs from it in one field (or in the two a
 * template leaves to the line, or in many digits); the .pipe lines beside. */
static const PlanOp ops[] = {
	SEND(DIR_ACT, 0, 0, 1, 0, 0),         SEND(DIR_ACT, 0, 1, 1, 1, 0), // template
	SEND(DIR_ACT, 0, 2, 2, 2, 0),         SEND(DIR_ACT, 0, 3, 2, 3, 1), // peer, route
	SEND(DIR_ACT, 1, 4, 2, 4, 1),         SEND(DIR_ACT, 1, 5, 2, 5, 1), // edge, line
	SEND(DIR_ACT, 1, 6, 2, 6, 1),         SEND(DIR_GRAD, 1, 7, 2, 7, 1), // no line, dir
	SEND(DIR_ACT, 1, 123456789, 2, 2000000000, 1),                       // long numbers
	SEND(DIR_ACT, 1, 8, 2, 9, 1),                                        // short again
	SEND(DIR_ACT, 1, -3, 2, -4, 1),       SEND(DIR_ACT, 1, -2, 2, -3, 1), // negative
	RECV(DIR_ACT, 1, 8, 2, 10, 1),        RECV(DIR_ACT, 2, 9, 2, 11, 1), // kind, edge
	RECV(DIR_GRAD, 2, 9, 2, 12, 1),       RECV(DIR_GRAD, 2, 10, 1, 13, 1), // dir, peer
	COMPUTE(OP_F, 0, 0, 0),               COMPUTE(OP_F, 0, 1, 0),        // template
	COMPUTE(OP_F, 0, 2, 1),               COMPUTE(OP_F, 0, 3, 1),        // part
	COMPUTE(OP_F, 1, 3, 1),               COMPUTE(OP_F, 1, 4, 1),        // stage, line
	COMPUTE(OP_B, 1, 4, 1),               COMPUTE(OP_W, 1, 4, 1),        // kinds
	COMPUTE(OP_BW, 1, 5, 0),              COMPUTE(OP_F, 1, 2000000000, 0), // long mb
	COMPUTE(OP_F, 2, 6, 0),               COMPUTE(OP_F, 2, -1, 0),       // negative
	COMPUTE(OP_F, 2, -2, 0),
};
static const int32_t lines[] = {5, 5, 5, 5, 5, 6, 0, 0, 0, 0, 0, 0, 6, 6, 6, 6, 5,
                                5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7};

/* The text of p written with `threads` workers, rank 0's op lines (`copies` times ops[])
 * checked one by one. */
static void check_lines(const Plan *p, int threads, int64_t copies)
{
	size_t n;
	plan_threads = threads;
	char *text = text_of(p, &n);
	plan_threads = 1;
	const char *at = strstr(text, "\nrank 0 ");
	assert_non_null(at);
	at = strchr(at + 1, '\n') + 1;
	while (!strncmp(at, "peer ", 5))
		at = strchr(at, '\n') + 1;
	for (size_t j = 0; j < (size_t)copies * (sizeof ops / sizeof *ops); j++) {
		size_t i = j % (sizeof ops / sizeof *ops);
		char want[256];
		spell(p, &ops[i], lines[i], want, sizeof want);
		if (strncmp(at, want, strlen(want)))
			fail_msg("op %zu on %d threads: wrote %.*s, the fields spell %s", j, threads,
			         (int)(strchr(at, '\n') - at + 1), at, want);
		at += strlen(want);
	}
	assert_true(!strncmp(at, "rank 1 ", 7));
	free(text);
}

static void write__op_lines__each_spells_its_own_fields(void **state)
{
	(void)state;
	assert_int_equal(sizeof ops / sizeof *ops, sizeof lines / sizeof *lines);
	Plan *p = read_good("tests/plans/good/skip3.plan"); // 3 ranks, 3 edges, 6 routes
	assert_true(p->world >= 3 && p->nedges >= 3 && p->nroutes >= 2 && !p->line);
	p->edges[2].bytes = INT64_MAX; // the widest size a line holds
	int64_t n = (int64_t)(sizeof ops / sizeof *ops);
	PlanRank *rk = &p->ranks[0];
	assert_int_equal(plan_reserve_ops(rk, n, 1), 0);
	memcpy(rk->ops, ops, sizeof ops);
	memcpy(rk->lines, lines, sizeof lines);
	rk->nops = n;
	check_lines(p, 1, 1);
	/* Many copies: on workers, rank 0 is cut into pieces, each without templates. */
	int64_t copies = 3000;
	assert_int_equal(plan_reserve_ops(rk, n * copies, 1), 0);
	for (int64_t c = 1; c < copies; c++) {
		memcpy(rk->ops + c * n, ops, sizeof ops);
		memcpy(rk->lines + c * n, lines, sizeof lines);
	}
	rk->nops = n * copies;
	check_lines(p, 1, copies);
	check_lines(p, 3, copies);
	plan_free(p);
}

/* Every kind's op line as plan_format_op spells it is the line the writer wrote, but
 * its " @line": both spell the fields the op table gives the kind (OpInfo.fields).  A
 * tied head across pipeline ranks at dp = tp = 2, with B and W (zbh1) and with BW
 * (1f1b), with the distributed optimizer and with sequence parallelism, has every kind. */
static void write__format_op__spells_every_kind_as_written(void **state)
{
	(void)state;
	static const char src[] = "pipeline all_kinds;\nmesh pp=2 dp=2 tp=2;\nmicrobatches 4;\n"
	                          "input tokens 2x16 vocab=64;\n"
	                          "stage s0 { embed 32 positions; attention heads=2 bias; }\n"
	                          "stage s1 { mlp 64 bias; layernorm; head tied; loss xent; }\n"
	                          "schedule 1f1b;\n";
	static const char *const sched[] = {"schedule zbh1;", "schedule 1f1b;",
	                                    "schedule 1f1b;\noptimizer sgd distributed;",
	                                    "schedule 1f1b;"};
	char sp[sizeof src + 8]; // with sequence parallelism (its SPREDUCE) in the last
	snprintf(sp, sizeof sp, "%.*s sp%s", (int)(strstr(src, ";\nmicro") - src), src,
	         strstr(src, ";\nmicro"));
	int64_t seen[OP_COUNT] = {0};
	for (int s = 0; s < 4; s++) {
		char *with = with_schedule(s == 3 ? sp : src, sched[s]);
		Plan *p = compile_pipe(with, (PipeccOptions){0}, NULL, 0); // every world rank
		assert_non_null(p);
		size_t n;
		char *text = text_of(p, &n);
		const char *at = text;
		for (int r = 0; r < p->world; r++) {
			const PlanRank *rk = &p->ranks[r];
			for (int64_t i = 0; i < rk->nops; i++) {
				char want[256];
				int k = plan_format_op(p, &rk->ops[i], want, sizeof want);
				at = strstr(at, want); // the op lines are in list order
				if (!at || (at[k] != ' ' && at[k] != '\n'))
					fail_msg("rank %d op %lld: '%s' is not a line of the written plan", r,
					         (long long)i, want);
				at += k;
				seen[rk->ops[i].kind]++;
			}
		}
		free(text);
		plan_free(p);
		free(with);
	}
	for (int k = 0; k < OP_COUNT; k++)
		if (!seen[k])
			fail_msg("no %s in the plans", plan_ops[k].name);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(write__op_lines__each_spells_its_own_fields),
		cmocka_unit_test(write__format_op__spells_every_kind_as_written),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
