/* What the schedule tests share (test_sched.c, test_sched_custom.c): compiling .pipe
 * text in memory, a chain of n stages with unit costs, a pipeline rank's compute order,
 * the structure every order must keep (one F and one backward per stage and microbatch,
 * in order, on the stage's rank), a plan measured by the simulator, and a compile that
 * must fail with exactly the given diagnostics (golden text).
 * Included once per test program, after cmocka.h, compiler/pipecc.h and sim/sim.h. */
#ifndef TESTS_SCHED_LIB_H
#define TESTS_SCHED_LIB_H

#include "../plan/line.h" // plan_rank_of

/* Compiles src with o; the diagnostics go to *errs (malloc'd) when errs is not NULL,
 * else to stderr when compilation fails. */
static inline Plan *compile_with(const char *src, const PipeccOptions *o, char **errs)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, "test.pipe", src, strlen(src), out);
	Plan *p = pipecc_compile("test.pipe", src, strlen(src), o, &d);
	fclose(out);
	if (errs)
		*errs = buf;
	else {
		if (!p && buf)
			fprintf(stderr, "%s", buf);
		free(buf);
	}
	return p;
}

static inline Plan *compile(const char *src)
{
	PipeccOptions o = {0};
	return compile_with(src, &o, NULL);
}

/* n stages of width 8 on pp x dp ranks, m microbatches, unit costs, ideal links. */
static inline char *program(int n, int pp, int dp, int m, const char *sched, const char *extra)
{
	static char buf[1 << 14];
	int k = snprintf(buf, sizeof buf,
	                 "pipeline t;\nmesh pp=%d dp=%d;\nmicrobatches %d;\ninput 2x8;\n", pp, dp, m);
	for (int s = 0; s < n; s++)
		k += snprintf(buf + k, sizeof buf - k, "stage s%d { linear 8; %s}\n", s,
		              s == n - 1 ? "loss mse; " : "relu; ");
	snprintf(buf + k, sizeof buf - k, "schedule %s;\ncost * f=1 b=1 w=1;\nlink ideal;\n%s",
	         sched, extra ? extra : "");
	return buf;
}

/* The rank at pipeline index q of the first pipeline line. */
static inline const PlanRank *pp_rank(const Plan *p, int q)
{
	int c[DIM_COUNT] = {0};
	c[DIM_PP] = q;
	return &p->ranks[plan_rank_of(p, c)];
}

/* Compute op i of a rank's list, skipping comms; NULL past the end. */
typedef struct {
	const PlanOp *op[1 << 14];
	int n;
} Order;

static inline void order_of(const Plan *p, int q, Order *o)
{
	const PlanRank *r = pp_rank(p, q);
	o->n = 0;
	for (int64_t i = 0; i < r->nops; i++)
		if (r->ops[i].kind <= OP_BW && o->n < (int)(sizeof o->op / sizeof o->op[0]))
			o->op[o->n++] = &r->ops[i];
}

/* Every (stage, mb) has one F and either one BW or one B and one W, on the stage's
 * rank, F before its backward and B before W.  Returns the largest number of
 * activations alive at once on any rank (F to W or BW). */
static inline int check_structure(const Plan *p, const char *what)
{
	int n = p->nstages, m = p->microbatches, peak = 0;
	int *pos = calloc((size_t)n * m * OP_COUNT, sizeof *pos);
	static Order o;
	for (int q = 0; q < p->dims[DIM_PP]; q++) {
		order_of(p, q, &o);
		int live = 0;
		for (int i = 0; i < o.n; i++) {
			const PlanOp *op = o.op[i];
			if (p->stages[op->stage].pp != q)
				fail_msg("%s: stage %d runs on pp %d, placed on %d", what, op->stage, q,
				         p->stages[op->stage].pp);
			int *at = &pos[((size_t)op->stage * m + op->mb) * OP_COUNT + op->kind];
			if (*at)
				fail_msg("%s: %s %d %d twice", what, plan_ops[op->kind].name, op->stage, op->mb);
			*at = i + 1;
			live += op->kind == OP_F ? 1 : op->kind == OP_W || op->kind == OP_BW ? -1 : 0;
			if (live > peak)
				peak = live;
		}
	}
	for (int s = 0; s < n; s++)
		for (int mb = 0; mb < m; mb++) {
			int *at = &pos[((size_t)s * m + mb) * OP_COUNT];
			int f = at[OP_F], b = at[OP_B], w = at[OP_W], bw = at[OP_BW];
			if (!f || (!bw && !(b && w)) || (bw && (b || w)))
				fail_msg("%s: stage %d mb %d has F%d B%d W%d BW%d", what, s, mb, !!f, !!b, !!w,
				         !!bw);
			if ((bw && bw < f) || (b && b < f) || (w && w < b))
				fail_msg("%s: stage %d mb %d out of order", what, s, mb);
		}
	free(pos);
	return peak;
}

typedef struct {
	int64_t makespan;
	int peak;      // largest peak activation units of any rank
	int64_t span;  // largest (finish - first compute start) of any rank
	int verdict;
} Measure;

static inline Measure measure(const Plan *p, int model, int eager)
{
	SimOptions so = {.model = model, .eager = eager, .record_ops = 1};
	SimResult r;
	sim_run(p, &so, &r);
	Measure ms = {.makespan = r.makespan, .verdict = r.verdict};
	for (int q = 0; q < p->world; q++) {
		if (r.ranks[q].peak_act_units > ms.peak)
			ms.peak = (int)r.ranks[q].peak_act_units;
		for (int64_t i = 0; i < p->ranks[q].nops; i++)
			if (p->ranks[q].ops[i].kind <= OP_BW) {
				int64_t span = r.ranks[q].finish - sim_op_time(&r, q, i).start;
				if (span > ms.span)
					ms.span = span;
				break;
			}
	}
	sim_result_free(&r);
	return ms;
}

static inline void expect_error(const char *src, const char *want)
{
	char *errs = NULL;
	PipeccOptions o = {0};
	Plan *p = compile_with(src, &o, &errs);
	assert_null(p);
	if (!errs || strcmp(errs, want) != 0)
		fail_msg("got:\n%s\nwant:\n%s", errs ? errs : "(nothing)", want);
	free(errs);
}

#endif
