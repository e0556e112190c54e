/* Line plans in pipesim's outputs: in memory a line plan (docs/plan-format.md "Lines")
 * holds one pipeline line by pipeline index, while the file, and so every report, JSON
 * object, trace and message, names world ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../sim/sim.h"

#include "sim_lib.h"

/* The run's JSON (which 0) or Chrome trace (1), malloc'd. */
static char *text_of_run(const Plan *p, const SimResult *res, int which)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	int rc = which ? sim_write_trace(f, p, res) : sim_write_json(f, p, res, NULL, "x.plan", NULL);
	fclose(f);
	assert_int_equal(rc, 0);
	return buf;
}

/* A line plan (pp=2 dp=2: ranks[] is line 0, world ranks 0 and 2) holds pipeline
 * indices in memory; JSON and the trace name ops as the file does, peers as world
 * ranks, and a verifier's error_rank is the world rank. */
static void sim__line_plan__json_names_world_ranks(void **state)
{
	(void)state;
	Plan *p = compile_pipe(program(2, 2, 2, "gpipe", "f=1 b=1 w=1", "ideal"),
	                       (PipeccOptions){.line = 1}, NULL, 0);
	assert_non_null(p);
	assert_true(p->line);
	SimResult res;
	SimOptions o = {.model = SIM_STRICT, .record_ops = 1};
	assert_int_equal(sim_run(p, &o, &res), 0);
	char *t = text_of_run(p, &res, 1);
	assert_contains(t, "\"process_name\", \"pid\": 2, \"args\": {\"name\": \"rank 2 (pp=1");
	assert_contains(t, "{\"ph\": \"X\", \"pid\": 2, \"tid\": 0, \"name\": \"F 1 0\"");
	assert_true(!strstr(t, "\"pid\": 1,"));
	assert_contains(t, "RECV act e=0 m=0 from=0 ");
	assert_contains(t, "SEND grad e=0 m=0 to=0 ");
	assert_true(!strstr(t, "to=1 ") && !strstr(t, "from=1 "));
	free(t);
	sim_result_free(&res);
	/* Rank 0 waits for microbatch 0's gradient before it sends the activation: the
	 * blocked ops named as the file names them. */
	PlanRank *k = &p->ranks[0];
	int64_t snd = -1, rcv = -1;
	for (int64_t i = 0; i < k->nops; i++) {
		if (snd < 0 && k->ops[i].kind == OP_SEND)
			snd = i;
		if (rcv < 0 && k->ops[i].kind == OP_RECV)
			rcv = i;
	}
	assert_true(snd >= 0 && snd < rcv);
	PlanOp x = k->ops[rcv];
	memmove(&k->ops[snd + 1], &k->ops[snd], (size_t)(rcv - snd) * sizeof x);
	k->ops[snd] = x;
	assert_int_equal(sim_run(p, &o, &res), 1);
	assert_int_equal(res.verdict, SIM_DEADLOCK);
	char *j = text_of_run(p, &res, 0);
	assert_contains(j, "\"rank\": 0, \"stream\": \"rank\"");
	assert_contains(j, "\"rank\": 2, \"stream\": \"rank\"");
	assert_contains(j, "RECV grad e=0 m=0 from=2 ");
	assert_true(!strstr(j, "to=1 ") && !strstr(j, "from=1 "));
	free(j);
	sim_result_free(&res);
	memmove(&k->ops[snd], &k->ops[snd + 1], (size_t)(rcv - snd) * sizeof x);
	k->ops[rcv] = x;
	PlanOp *r0 = NULL, *r1 = NULL; // rank 2's first two RECVs: their microbatches swapped
	for (int64_t i = 0; i < p->ranks[1].nops; i++)
		if (p->ranks[1].ops[i].kind == OP_RECV)
			*(r0 ? &r1 : &r0) = r1 ? r1 : &p->ranks[1].ops[i];
	assert_non_null(r1);
	int mb = r0->mb;
	r0->mb = r1->mb;
	r1->mb = mb;
	PlanError err;
	assert_int_equal(plan_verify(p, &err), -1);
	assert_int_equal(err.rank, 1); // the index into ranks[]
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_int_equal(sim_write_json(f, p, NULL, &err, "x.plan", NULL), 0);
	fclose(f);
	assert_contains(buf, "\"error_rank\": 2,");
	assert_contains(buf, "with rank 2 op");
	free(buf);
	plan_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(sim__line_plan__json_names_world_ranks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
