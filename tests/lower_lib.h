/* What test_lower.c, test_verify.c and test_rules.c share: compiling .pipe text in
 * memory, a small program of linear stages, the verifier's verdict on a plan edited by
 * hand, and group setups that run a group's tests again on 3 threads.
 * Included once per test program, after cmocka.h and compiler/pipecc.h. */
#ifndef TESTS_LOWER_LIB_H
#define TESTS_LOWER_LIB_H

#include "../plan/par.h" // plan_threads
#include "plan_lib.h"     // compile_pipe, program_text

/* Compiles .pipe text; NULL on diagnostics (printed to errs when given). */
static int want_line; // compile_text makes line plans (docs/plan-format.md "Lines")

static inline Plan *compile_text(const char *src, const char *schedule, char *errs, size_t nerrs)
{
	return compile_pipe(src, (PipeccOptions){.schedule = schedule, .line = want_line}, errs, nerrs);
}

/* A program with n stages of width 8, pp x dp, m microbatches and optional extras. */
static inline char *program(int n, int pp, int dp, int m, const char *extra)
{
	return program_text(n, pp, dp, m, "1f1b", "f=1 b=1 w=1", "ideal", extra ? extra : "");
}

/* p fails verification with a message holding needle1 (and needle2 when given). */
static inline void expect_verify_error(Plan *p, const char *needle1, const char *needle2)
{
	PlanError err;
	int rc = plan_verify(p, &err);
	if (rc == 0)
		fail_msg("verifier accepted a broken plan (wanted '%s')", needle1);
	if (!strstr(err.msg, needle1) || (needle2 && !strstr(err.msg, needle2)))
		fail_msg("message '%s' lacks '%s' / '%s'", err.msg, needle1, needle2 ? needle2 : "");
}

static inline int64_t find_op(const Plan *p, int r, int kind, int nth)
{
	for (int64_t i = 0; i < p->ranks[r].nops; i++)
		if (p->ranks[r].ops[i].kind == kind && nth-- == 0)
			return i;
	return -1;
}

/* cmocka group setup and teardown: the group's tests on 3 threads, then back to 1. */
static inline int threads_3(void **state)
{
	(void)state;
	plan_threads = 3;
	return 0;
}

static inline int threads_1(void **state)
{
	(void)state;
	plan_threads = 1;
	return 0;
}

#endif
