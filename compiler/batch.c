/* `microbatches auto;` (docs/language.md "microbatches"): the input's first number is
 * then the step's batch (sequences of `input tokens`, rows of a matrix input), and
 * pipecc chooses how many microbatches it is cut into.  Each count m is a divisor of
 * the batch of at least pp (fewer leaves ranks with nothing to do).  A count is tried
 * as the program with `microbatches m;` and the input's first number batch/m written
 * in: the front end rewrites the syntax tree before checking it, so every figure that
 * depends on the microbatch's size (costs, memory, the cut of `stages auto;`) is the
 * checker's own.  pipecc.c's search weighs the counts by their confirmed steps. */
#include "batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_int.h"
#include "part.h"

/* A whole positive number as written, or 0. */
static long written(const AstNum *v)
{
	char *end;
	if (v->bad || v->neg || !v->digits || v->unit[0])
		return 0;
	long n = strtol(v->digits, &end, 10);
	return *end || n < 1 || n > MAX_SIZE ? 0 : n;
}

int batch_find(AstProgram *ast, BatchAuto *b)
{
	*b = (BatchAuto){0};
	for (AstStmt *s = ast->head; s; s = s->next) {
		if (s->kind == AST_MICROBATCHES && !s->bad && s->name.s)
			b->stmt = s;
		if (s->kind == AST_INPUT && !s->bad)
			b->input = s;
	}
	if (!b->stmt)
		return 0;
	b->batch = b->input ? (int)written(&b->input->shape.rows) : 0;
	b->pp = part_mesh_pp(ast);
	return 1;
}

int batch_counts(const BatchAuto *b, int *m, int max)
{
	int n = 0;
	for (int k = b->pp; k <= b->batch && k <= MAX_MICROBATCHES && n < max; k++)
		if (b->batch % k == 0)
			m[n++] = k;
	return n;
}

/* The number AST v written as n, at v's place (or at where). */
static void rewrite(Arena *a, AstNum *v, long n, Loc where)
{
	char buf[24];
	snprintf(buf, sizeof buf, "%ld", n);
	*v = (AstNum){.digits = arena_strdup(a, buf), .unit = "", .loc = where};
}

int batch_split(Arena *a, Diag *d, const BatchAuto *b, int m)
{
	AstStmt *s = b->stmt;
	if (strcmp(s->name.s, "auto")) {
		diag_error(d, s->name.loc, "'microbatches' takes a count or 'auto', got '%s'",
		           s->name.s);
		return 1;
	}
	if (!b->batch) // no input, or one the checker refuses: it says why
		return 0;
	if (m > 0 && b->batch % m) {
		diag_error(d, s->name.loc, "microbatches auto: --microbatches %d does not divide "
		           "the step's batch of %d (the input's first number)", m, b->batch);
		return 1;
	}
	int counts[BATCH_COUNTS], n = batch_counts(b, counts, BATCH_COUNTS);
	if (!m && n) // the most of the counts weighed: the smallest microbatches, likeliest to fit
		m = counts[n - 1];
	if (!m) {
		diag_error(d, s->name.loc, "microbatches auto: the step's batch of %d (the input's "
		           "first number) has no divisor of at least pp=%d, so no count keeps every "
		           "rank busy; give a batch of at least %d, or 'microbatches N;'",
		           b->batch, b->pp, b->pp);
		return 1;
	}
	Loc at = s->name.loc;
	rewrite(a, &s->num, m, at);
	rewrite(a, &b->input->shape.rows, b->batch / m, b->input->shape.rows.loc);
	s->name.s = NULL;
	return 0;
}
