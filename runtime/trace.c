/* The measured timeline as a Chrome trace / Perfetto JSON file, in the format pipesim
 * writes (sim/trace.c): a process per rank named "rank R (pp= dp= tp=)", thread 0
 * "compute" with one complete event per compute op (named by its op text, category
 * its kind), thread 1 "comm" with one event per group (named by its first op's kind,
 * "+N" for N more ops, the ops listed in args).  Unlike pipesim's single step, every
 * step run is there, one after the other; args carry the step.  Times are
 * microseconds since the world started (on the root's clock). */
#include "rt.h"

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

int rt_trace_write(const Plan *p, const RtResult *res, FILE *f)
{
	fputs("{\"displayTimeUnit\": \"ns\", \"otherData\": {\"pipeline\": ", f);
	jtext(f, p->name ? p->name : "");
	fprintf(f, ", \"model\": \"measured\", \"steps\": %d},\n\"traceEvents\": [\n", res->steps);
	const char *sep = "";
	char text[256];
	for (int r = 0; r < p->world && r < res->world; r++) {
		const PlanRank *pr = &p->ranks[r];
		fprintf(f, "%s{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"args\": "
		           "{\"name\": \"rank %d (pp=%d dp=%d tp=%d)\"}}",
		        sep, r, r, pr->coord[DIM_PP], pr->coord[DIM_DP], pr->coord[DIM_TP]);
		sep = ",\n";
		fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": %d, "
		           "\"args\": {\"sort_index\": %d}}",
		        r, r);
		fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": 0, "
		           "\"args\": {\"name\": \"compute\"}}",
		        r);
		fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": 1, "
		           "\"args\": {\"name\": \"comm\"}}",
		        r);
		for (int64_t k = 0; k < res->nev[r]; k++) {
			const RtEvent *e = &res->ev[r][k];
			if (e->op < 0 || e->op >= pr->nops)
				continue;
			const PlanOp *o = &pr->ops[e->op];
			int64_t line = pr->first_line ? pr->first_line + e->op : 0;
			if (!plan_is_comm(o->kind)) {
				plan_format_op(p, o, text, sizeof text);
				fprintf(f, ",\n{\"ph\": \"X\", \"pid\": %d, \"tid\": 0, \"name\": ", r);
				jtext(f, text);
				fprintf(f, ", \"cat\": \"%s\", \"ts\": ", plan_op_names[o->kind]);
				us(f, e->t0);
				fputs(", \"dur\": ", f);
				us(f, e->t1 - e->t0);
				fprintf(f, ", \"args\": {\"op\": %" PRId64 ", \"line\": %" PRId64
				           ", \"stage\": %d, \"mb\": %d, \"step\": %d}}",
				        e->op, line, o->stage, o->mb, e->step + 1);
				continue;
			}
			int64_t n = e->op_end - e->op;
			fprintf(f, ",\n{\"ph\": \"X\", \"pid\": %d, \"tid\": 1, \"name\": \"%s%s", r,
			        plan_op_names[o->kind], n > 1 ? " +" : "");
			if (n > 1)
				fprintf(f, "%" PRId64, n - 1);
			fputs("\", \"cat\": \"comm\", \"ts\": ", f);
			us(f, e->t0);
			fputs(", \"dur\": ", f);
			us(f, e->t1 - e->t0);
			fprintf(f, ", \"args\": {\"group\": %d, \"line\": %" PRId64 ", \"step\": %d, \"ops\": [",
			        o->group, line, e->step + 1);
			for (int64_t j = e->op; j < e->op_end && j < pr->nops; j++) {
				plan_format_op(p, &pr->ops[j], text, sizeof text);
				if (j > e->op)
					fputs(", ", f);
				jtext(f, text);
			}
			fputs("]}}", f);
		}
	}
	fputs("\n]}\n", f);
	return ferror(f) ? -1 : 0;
}
