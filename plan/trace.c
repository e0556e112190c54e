/* The shared Chrome trace writer (see trace.h).  Events are written as they come; the
 * format allows any order, and both tools give them per rank in op order. */
#include "trace.h"
#include "line.h"

#include <inttypes.h>

static void us(FILE *f, int64_t ns)
{
	if (ns < 0)
		ns = 0;
	fprintf(f, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
}

static void jtext(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

static int64_t line_of(const Plan *p, int r, int64_t op)
{
	PlanRank tmp;
	const PlanRank *rk = plan_rank(p, r, &tmp);
	return rk->first_line ? rk->first_line + op : 0;
}

void plan_trace_begin(PlanTrace *t, FILE *f, const Plan *p, const char *other)
{
	t->f = f;
	t->p = p;
	t->sep = "";
	fputs("{\"displayTimeUnit\": \"ns\", \"otherData\": {\"pipeline\": ", f);
	jtext(f, p->name ? p->name : "");
	if (other)
		fprintf(f, ", %s", other);
	fputs("},\n\"traceEvents\": [\n", f);
}

void plan_trace_rank(PlanTrace *t, int r)
{
	PlanRank tmp;
	const PlanRank *pr = plan_rank(t->p, r, &tmp);
	int w = plan_world_rank(t->p, r); // a line plan's ranks[] index is not the rank
	fprintf(t->f, "%s{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"args\": "
	              "{\"name\": \"rank %d (pp=%d dp=%d tp=%d)\"}}",
	        t->sep, w, w, pr->coord[DIM_PP], pr->coord[DIM_DP], pr->coord[DIM_TP]);
	t->sep = ",\n";
	fprintf(t->f, ",\n{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": %d, "
	              "\"args\": {\"sort_index\": %d}}",
	        w, w);
	fprintf(t->f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": 0, "
	              "\"args\": {\"name\": \"compute\"}}",
	        w);
	fprintf(t->f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": 1, "
	              "\"args\": {\"name\": \"comm\"}}",
	        w);
}

void plan_trace_compute(PlanTrace *t, int r, int64_t op, int64_t t0, int64_t t1, int step)
{
	PlanRank tmp;
	const PlanOp *o = &plan_rank(t->p, r, &tmp)->ops[op];
	char text[256];
	plan_format_op(t->p, o, text, sizeof text);
	fprintf(t->f, "%s{\"ph\": \"X\", \"pid\": %d, \"tid\": 0, \"name\": ", t->sep,
	        plan_world_rank(t->p, r));
	t->sep = ",\n";
	jtext(t->f, text);
	fprintf(t->f, ", \"cat\": \"%s\", \"ts\": ", plan_ops[o->kind].name);
	us(t->f, t0);
	fputs(", \"dur\": ", t->f);
	us(t->f, t1 - t0);
	fprintf(t->f, ", \"args\": {\"op\": %" PRId64 ", \"line\": %" PRId64 ", \"stage\": %d, \"mb\": %d",
	        op, line_of(t->p, r, op), o->stage, o->mb);
	if (step >= 0)
		fprintf(t->f, ", \"step\": %d", step + 1);
	fputs("}}", t->f);
}

void plan_trace_group(PlanTrace *t, int r, int64_t op, int64_t op_end, int64_t t0, int64_t t1,
                      int step, int stuck)
{
	PlanRank tmp;
	const PlanRank *pr = plan_rank(t->p, r, &tmp);
	const PlanOp *o = &pr->ops[op];
	int64_t n = op_end - op;
	fprintf(t->f, "%s{\"ph\": \"X\", \"pid\": %d, \"tid\": 1, \"name\": \"%s%s%s", t->sep,
	        plan_world_rank(t->p, r),
	        stuck ? "STUCK " : "", plan_ops[o->kind].name, n > 1 ? " +" : "");
	t->sep = ",\n";
	if (n > 1)
		fprintf(t->f, "%" PRId64, n - 1);
	fprintf(t->f, "\", \"cat\": \"comm\"%s, \"ts\": ", stuck ? ", \"cname\": \"terrible\"" : "");
	us(t->f, t0);
	fputs(", \"dur\": ", t->f);
	us(t->f, t1 > t0 ? t1 - t0 : 0);
	fprintf(t->f, ", \"args\": {\"group\": %d, \"line\": %" PRId64, o->group, line_of(t->p, r, op));
	if (step >= 0)
		fprintf(t->f, ", \"step\": %d", step + 1);
	fputs(", \"ops\": [", t->f);
	char text[256];
	for (int64_t j = op; j < op_end && j < pr->nops; j++) {
		PlanOp x = plan_rank_op(t->p, r, j); // its own peers, also when borrowed
		plan_format_op(t->p, &x, text, sizeof text);
		if (j > op)
			fputs(", ", t->f);
		jtext(t->f, text);
	}
	fputs("]}}", t->f);
}

int plan_trace_end(PlanTrace *t)
{
	fputs("\n]}\n", t->f);
	return ferror(t->f) ? -1 : 0;
}
