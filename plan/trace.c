/* The shared Chrome trace writer (see trace.h).  Events are written as they come; the
 * format allows any order, and both tools give them per rank in op order. */
#include "trace.h"
#include "line.h"

#include <inttypes.h>
#include <stdlib.h>

void plan_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
		if (*c == '"' || *c == '\\')
			fprintf(f, "\\%c", *c);
		else if (*c == '\n')
			fputs("\\n", f);
		else if (*c == '\t')
			fputs("\\t", f);
		else if (*c < 0x20)
			fprintf(f, "\\u%04x", *c);
		else
			fputc(*c, f);
	}
	fputc('"', f);
}

void plan_json_us(FILE *f, int64_t ns)
{
	if (ns < 0) {
		fputs("-", f);
		ns = -ns;
	}
	fprintf(f, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
}

/* A trace's times never go below 0. */
static void us(FILE *f, int64_t ns)
{
	plan_json_us(f, ns < 0 ? 0 : ns);
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
	t->flows = 0;
	fputs("{\"displayTimeUnit\": \"ns\", \"otherData\": {\"pipeline\": ", f);
	plan_json_str(f, p->name ? p->name : "");
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
	plan_json_str(t->f, text);
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
		plan_json_str(t->f, text);
	}
	fputs("]}}", t->f);
}

int plan_trace_end(PlanTrace *t)
{
	fputs("\n]}\n", t->f);
	return ferror(t->f) ? -1 : 0;
}

void plan_trace_flow(PlanTrace *t, int src, int64_t s0, int64_t s1, int dst, int64_t r0,
                     int64_t r1, int step)
{
	int64_t id = ++t->flows;
	int64_t ts_src = s0 + (s1 - s0 > 1 ? 1 : 0), ts_dst = r1 - (r1 - r0 > 1 ? 1 : 0);
	if (ts_dst < ts_src) // a send that took no time (ideal links): its end
		ts_dst = r1;
	const char *ph[2] = {"s", "f"};
	int rank[2] = {src, dst};
	int64_t ts[2] = {ts_src, ts_dst};
	for (int k = 0; k < 2; k++) {
		fprintf(t->f, "%s{\"ph\": \"%s\", \"id\": %" PRId64 ", \"pid\": %d, \"tid\": 1, "
		              "\"name\": \"transfer\", \"cat\": \"p2p\"%s, \"ts\": ",
		        t->sep, ph[k], id, plan_world_rank(t->p, rank[k]), k ? ", \"bp\": \"e\"" : "");
		t->sep = ",\n";
		us(t->f, ts[k]);
		if (step >= 0)
			fprintf(t->f, ", \"args\": {\"step\": %d}", step + 1);
		fputs("}", t->f);
	}
}

void plan_trace_memory(PlanTrace *t, int r, int64_t ts, int64_t stat, int64_t saved,
                       int64_t comm)
{
	fprintf(t->f, "%s{\"ph\": \"C\", \"pid\": %d, \"name\": \"memory bytes\", \"ts\": ", t->sep,
	        plan_world_rank(t->p, r));
	t->sep = ",\n";
	us(t->f, ts);
	fprintf(t->f, ", \"args\": {\"model state\": %" PRId64 ", \"saved activations\": %" PRId64
	              ", \"in flight\": %" PRId64 "}}",
	        stat, saved, comm);
}

/* ---- p2p pairs ---- */

static int cmp_pair(const void *a, const void *b) // by receiver, then by sender's op
{
	const PlanPair *x = a, *y = b;
	if (x->dst != y->dst)
		return (x->dst > y->dst) - (x->dst < y->dst);
	return (x->send > y->send) - (x->send < y->send);
}

/* Whether op o is the sending (1) or receiving (0) side of a p2p pair; -1 neither. */
static int p2p_side(const PlanOp *o)
{
	return plan_op_is_p2p(plan_op_kind(o)) ? plan_ops[o->kind].sends != 0 : -1;
}

int64_t plan_p2p_pairs(const Plan *p, PlanPair **out)
{
	int world = p->world;
	*out = NULL;
	PlanPair **sends = calloc((size_t)world, sizeof *sends); // per sender, by receiver
	int64_t *nsends = calloc((size_t)world, sizeof *nsends), *seen = NULL, n = 0, cap = 0;
	int rc = sends && nsends ? 0 : -1;
	for (int s = 0; s < world && !rc; s++) {
		PlanRank tmp;
		const PlanRank *pr = plan_rank(p, s, &tmp);
		for (int64_t i = 0; pr && i < pr->nops; i++)
			nsends[s] += p2p_side(&pr->ops[i]) == 1;
		if (!nsends[s])
			continue;
		if (!(sends[s] = malloc((size_t)nsends[s] * sizeof *sends[s]))) {
			rc = -1;
			break;
		}
		int64_t k = 0;
		for (int64_t i = 0; i < pr->nops; i++)
			if (p2p_side(&pr->ops[i]) == 1)
				sends[s][k++] = (PlanPair){s, plan_rank_op(p, s, i).peer, i, -1};
		qsort(sends[s], (size_t)k, sizeof *sends[s], cmp_pair);
		cap += k;
	}
	if (!rc && (!(seen = calloc((size_t)world, sizeof *seen)) ||
	            !(*out = malloc((size_t)(cap + 1) * sizeof **out))))
		rc = -1;
	for (int d = 0; d < world && !rc; d++) {
		PlanRank tmp;
		const PlanRank *pr = plan_rank(p, d, &tmp);
		for (int64_t i = 0; pr && i < pr->nops; i++) {
			int s = plan_rank_op(p, d, i).peer;
			if (p2p_side(&pr->ops[i]) || s < 0 || s >= world || s == d)
				continue;
			int64_t lo = 0, hi = nsends[s]; // s's first send to d
			while (lo < hi) {
				int64_t mid = lo + (hi - lo) / 2;
				if (sends[s][mid].dst < d)
					lo = mid + 1;
				else
					hi = mid;
			}
			int64_t k = lo + seen[s]++;
			if (k < nsends[s] && sends[s][k].dst == d)
				(*out)[n++] = (PlanPair){s, d, sends[s][k].send, i};
		}
		for (int64_t i = 0; pr && i < pr->nops; i++) {
			int s = plan_rank_op(p, d, i).peer;
			if (s >= 0 && s < world)
				seen[s] = 0;
		}
	}
	for (int s = 0; sends && s < world; s++)
		free(sends[s]);
	free(sends);
	free(nsends);
	free(seen);
	if (rc) {
		free(*out);
		*out = NULL;
		return -1;
	}
	return n;
}
