/* The Chrome trace / Perfetto writer: the JSON "trace event format" with a process per
 * rank and two threads in it, "compute" (one complete event per compute op) and "comm"
 * (one complete event per group, from its posting to its completion, its ops listed in
 * args).  Both are sequential on a rank in either timing model, so events never
 * overlap on a thread, as the format wants.  Groups still pending at a deadlock end at
 * the stall and are named "STUCK ...". */
#include "sim.h"

#include <inttypes.h>

static void us(FILE *f, int64_t ns)
{
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

int sim_write_trace(FILE *f, const Plan *p, const SimResult *res)
{
	if (!res->ranks || !res->ranks[0].times) {
		fprintf(stderr, "pipesim: no op times recorded: cannot write a trace\n");
		return -1;
	}
	int64_t stop = res->verdict == SIM_OK ? res->makespan : res->stall_time;
	fputs("{\"displayTimeUnit\": \"ns\", \"otherData\": {\"pipeline\": ", f);
	jtext(f, p->name ? p->name : "");
	fprintf(f, ", \"model\": \"%s\", \"verdict\": \"%s\"},\n\"traceEvents\": [\n",
	        sim_model_names[res->model], sim_verdict_names[res->verdict]);
	const char *sep = "";
	char text[256];
	for (int r = 0; r < p->world; r++) {
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
		const SimOpTime *t = res->ranks[r].times;
		for (int64_t i = 0; i < pr->nops;) {
			const PlanOp *o = &pr->ops[i];
			int64_t line = sim_op_line(p, r, i);
			if (!plan_is_comm(o->kind)) {
				if (t[i].end >= 0) {
					plan_format_op(p, o, text, sizeof text);
					fprintf(f, ",\n{\"ph\": \"X\", \"pid\": %d, \"tid\": 0, \"name\": ", r);
					jtext(f, text);
					fprintf(f, ", \"cat\": \"%s\", \"ts\": ", plan_op_names[o->kind]);
					us(f, t[i].start);
					fputs(", \"dur\": ", f);
					us(f, t[i].end - t[i].start);
					fprintf(f, ", \"args\": {\"op\": %" PRId64 ", \"line\": %" PRId64
					           ", \"stage\": %d, \"mb\": %d}}",
					        i, line, o->stage, o->mb);
				}
				i++;
				continue;
			}
			int64_t j = i, end = -1;
			int stuck = 0;
			while (j < pr->nops && plan_is_comm(pr->ops[j].kind) && pr->ops[j].group == o->group) {
				if (t[j].end < 0)
					stuck = 1;
				else if (t[j].end > end)
					end = t[j].end;
				j++;
			}
			if (t[i].start >= 0) {
				if (stuck)
					end = stop;
				plan_format_op(p, o, text, sizeof text);
				fprintf(f, ",\n{\"ph\": \"X\", \"pid\": %d, \"tid\": 1, \"name\": \"%s%s%s",
				        r, stuck ? "STUCK " : "", plan_op_names[o->kind],
				        j - i > 1 ? " +" : "");
				if (j - i > 1)
					fprintf(f, "%" PRId64, j - i - 1);
				fprintf(f, "\", \"cat\": \"comm\"%s, \"ts\": ", stuck ? ", \"cname\": \"terrible\"" : "");
				us(f, t[i].start);
				fputs(", \"dur\": ", f);
				us(f, end > t[i].start ? end - t[i].start : 0);
				fprintf(f, ", \"args\": {\"group\": %d, \"line\": %" PRId64 ", \"ops\": [", o->group,
				        line);
				for (int64_t k = i; k < j; k++) {
					plan_format_op(p, &pr->ops[k], text, sizeof text);
					if (k > i)
						fputs(", ", f);
					jtext(f, text);
				}
				fputs("]}}", f);
			}
			i = j;
		}
	}
	fputs("\n]}\n", f);
	return ferror(f) ? -1 : 0;
}
