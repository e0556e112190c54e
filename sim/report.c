/* Text reports of a run: the summary of a plan that finished, the explanation of one
 * that did not (blocked ops, the wait-for cycle, the last steps before the stall), and
 * the terminal grid.  Every op is named the same way everywhere: its rank, its text as
 * the plan file carries it (plan_format_op) and its plan-file line, so a report line
 * can be pasted into an editor's "go to line". */
#include "sim.h"
#include "../plan/mem.h"
#include "../plan/line.h"
#include "../plan/link.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *const stream_words[SIM_STREAM_COUNT] = {"", "compute ", "comm "};

/* "rank 2 SEND act e=0 ... (line 57)"; "(op 12)" for plans not read from a file. */
static void name_op(char *buf, size_t n, const Plan *p, const SimOpRef *x)
{
	if (x->rank < 0 || x->rank >= p->world) {
		snprintf(buf, n, "nobody");
		return;
	}
	const char *sw = x->stream < SIM_STREAM_COUNT ? stream_words[x->stream] : "";
	if (x->op < 0 || x->op >= p->ranks[x->rank].nops) {
		snprintf(buf, n, "rank %d %s(no such op: the rest of its list does not have it)",
		         plan_world_rank(p, x->rank), sw);
		return;
	}
	char text[256];
	plan_format_op(p, &p->ranks[x->rank].ops[x->op], text, sizeof text);
	int64_t line = sim_op_line(p, x->rank, x->op);
	if (line)
		snprintf(buf, n, "rank %d %s%s (line %" PRId64 ")", plan_world_rank(p, x->rank), sw,
		         text, line);
	else
		snprintf(buf, n, "rank %d %s%s (op %" PRId64 ")", plan_world_rank(p, x->rank), sw,
		         text, x->op);
}

/* A time as people read it (plan_time_text): "57.12 us". */
static void put_time(FILE *f, int64_t ns)
{
	char t[32];
	fputs(plan_time_text(t, sizeof t, ns), f);
}

/* One text row per rank, laid out by the caller; plan_rows_put says uniform runs once. */
enum { ROW_CHARS = 200 };

static int *world_ids(const Plan *p)
{
	int *id = malloc((size_t)p->world * sizeof *id);
	for (int r = 0; id && r < p->world; r++)
		id[r] = plan_world_rank(p, r);
	return id;
}

double sim_busy(const SimResult *res, int r)
{
	if (res->makespan <= 0 || !res->ranks || res->world <= 0)
		return 0;
	if (r < 0)
		return (double)res->busy / ((double)res->world * (double)res->makespan);
	return (double)res->ranks[r].busy / (double)res->makespan;
}

/* The memory model per rank (docs/semantics.md "Memory"): the peak, its parts at that
 * moment, and the device's capacity when the plan states one. */
int sim_report_memory(FILE *f, const Plan *p, const PlanMem *mem)
{
	PlanMem *own = mem ? NULL : plan_mem_all(p);
	if (!mem && !(mem = own))
		return -1;
	char *text = malloc((size_t)p->world * ROW_CHARS), t[32];
	int *id = world_ids(p);
	if (!text || !id) {
		free(text), free(id), free(own);
		return -1;
	}
	int master = plan_prec(p->prec)->master > 0; // bf16: the f32 master weights too
	fprintf(f, "\nmemory (peak = params + grads + %soptim + saved + in flight)%s%s\n",
	        master ? "master + " : "", p->mem_cap ? ", device holds " : "",
	        p->mem_cap ? plan_mem_text(t, sizeof t, p->mem_cap) : "");
	fprintf(f, " rank           peak    params     grads%s     optim     saved in flight   at op\n",
	        master ? "    master" : "");
	for (int r = 0; r < p->world; r++) {
		const PlanMem m = mem[r];
		char *row = text + (size_t)r * ROW_CHARS;
		int64_t v[PLAN_MEM_PARTS];
		int n = plan_mem_parts(p, &m, v);
		int k = snprintf(row, ROW_CHARS, " %9s", plan_mem_text(t, sizeof t, m.peak));
		for (int i = 0; i < n; i++)
			k += snprintf(row + k, ROW_CHARS - (size_t)k, " %9s",
			              plan_mem_text(t, sizeof t, v[i]));
		snprintf(row + k, ROW_CHARS - (size_t)k, " %7" PRId64 "%s", m.peak_op,
		         p->mem_cap && m.peak > p->mem_cap ? "  does not fit" : "");
	}
	plan_rows_put(f, " ", "", "", 9, id, text, ROW_CHARS, p->world);
	free(text), free(id), free(own);
	return 0;
}

/* Per rank: busy share, compute and idle time, peak activations, and the model state:
 * parameters, gradients, master weights and optimizer state of the rank's stages, as
 * the plan's per-rank figures give them (a tp rank's share; the rank's shard of the
 * last two under a distributed optimizer).  Uniform ranks share a row. */
static int report_ranks(FILE *f, const Plan *p, const SimResult *res)
{
	char *text = malloc((size_t)res->world * ROW_CHARS), t[4][32];
	int *id = world_ids(p);
	if (!text || !id) {
		free(text), free(id);
		return -1;
	}
	fprintf(f, "\n rank       busy %%    compute       idle   peak act  peak act units  model state\n");
	for (int r = 0; r < res->world; r++) {
		const SimRankResult *rr = &res->ranks[r];
		int64_t model = 0;
		for (int s = 0; s < p->nstages; s++)
			if (p->stages[s].pp == p->ranks[r].coord[DIM_PP])
				model += plan_stage_state_bytes(p, s);
		snprintf(text + (size_t)r * ROW_CHARS, ROW_CHARS,
		         " %7.2f %10s %10s %10s %15" PRId64 " %12s", 100.0 * sim_busy(res, r),
		         plan_time_text(t[0], 32, rr->busy), plan_time_text(t[1], 32, rr->idle),
		         plan_mem_text(t[2], 32, rr->peak_act_bytes), rr->peak_act_units,
		         plan_mem_text(t[3], 32, model));
	}
	plan_rows_put(f, " ", "", "", 9, id, text, ROW_CHARS, res->world);
	free(text), free(id);
	return 0;
}

/* Links in the order that makes uniform ones neighbours: by direction (dst - src),
 * then src. */
static int cmp_link_run(const void *x, const void *y)
{
	const SimLink *a = x, *b = y;
	int da = a->dst - a->src, db = b->dst - b->src;
	if (da != db)
		return da < db ? -1 : 1;
	return a->src < b->src ? -1 : a->src > b->src;
}

/* Whether link b carries what link a does, one rank further along. */
static int link_follows(const SimLink *a, const SimLink *b)
{
	return b->src == a->src + 1 && b->dst == a->dst + 1 && b->bytes == a->bytes &&
	       b->transfers == a->transfers;
}

/* "0 -> 1: 1.05 MB in 8 transfers"; a run of links alike, one rank apart, once:
 * "0 -> 1 .. 126 -> 127 (127 links, each): ...". */
static int report_links(FILE *f, const Plan *p, const SimResult *res)
{
	if (!res->nlinks)
		return 0;
	SimLink *ls = malloc((size_t)res->nlinks * sizeof *ls);
	if (!ls) // out of memory: no report rather than another one
		return -1;
	memcpy(ls, res->links, (size_t)res->nlinks * sizeof *ls);
	qsort(ls, (size_t)res->nlinks, sizeof *ls, cmp_link_run);
	fprintf(f, "\nlinks (p2p)\n");
	for (int i = 0, k; i < res->nlinks; i += k) {
		char b[32];
		for (k = 1; i + k < res->nlinks && link_follows(&ls[i + k - 1], &ls[i + k]); k++)
			;
		fprintf(f, "  %d -> %d", plan_world_rank(p, ls[i].src), plan_world_rank(p, ls[i].dst));
		if (k > 1)
			fprintf(f, " .. %d -> %d (%d links, each)", plan_world_rank(p, ls[i + k - 1].src),
			        plan_world_rank(p, ls[i + k - 1].dst), k);
		fprintf(f, ": %s in %" PRId64 " transfer%s\n", plan_mem_text(b, sizeof b, ls[i].bytes),
		        ls[i].transfers, ls[i].transfers == 1 ? "" : "s");
	}
	free(ls);
	return 0;
}

/* Groups' traffic: "group of rank 0 (8 ranks): 4.2 MB in 1 all-reduce", groups alike
 * once ("groups of ranks 0-14 by 2 (2 ranks): ..."), and a tied table's pair by
 * name (summed by TIEREDUCE, an all-reduce whatever the optimizer). */
static int put_colls(FILE *f, const SimCollective *c, int n, const char *one, const char *many)
{
	char *text = calloc((size_t)(n > 0 ? n : 1), ROW_CHARS), b[32];
	int *id = calloc((size_t)(n > 0 ? n : 1), sizeof *id), ng = 0;
	if (!text || !id) {
		free(text), free(id);
		return -1;
	}
	for (int i = 0; i < n; i++)
		if (c[i].tie_head < 0) {
			id[ng] = c[i].first_rank;
			snprintf(text + (size_t)ng++ * ROW_CHARS, ROW_CHARS,
			         " (%d ranks): %s in %" PRId64 " %s", c[i].members,
			         plan_mem_text(b, sizeof b, c[i].bytes), c[i].count,
			         c[i].count == 1 ? one : many);
		}
	plan_rows_put(f, "  ", "group of rank", "groups of ranks", 0, id, text, ROW_CHARS, ng);
	for (int i = 0; i < n; i++)
		if (c[i].tie_head >= 0)
			fprintf(f, "  tied table's copies (embedding on rank %d, head on rank %d): %s in %" PRId64
			           " all-reduce%s\n", c[i].first_rank, c[i].tie_head,
			        plan_mem_text(b, sizeof b, c[i].bytes), c[i].count, c[i].count == 1 ? "" : "s");
	free(text), free(id);
	return 0;
}

static int report_colls(FILE *f, const Plan *p, const SimResult *res)
{
	int dist = p->optim.distributed; // a reduce-scatter and an all-gather a stage
	if (res->ncollectives) {
		fprintf(f, "\n%s (per dp group, and per pair holding a tied table's copies)\n",
		        dist ? "reduce-scatter and all-gather" : "all-reduce");
		if (put_colls(f, res->collectives, res->ncollectives, dist ? "collective" : "all-reduce",
		              dist ? "collectives" : "all-reduces"))
			return -1;
	}
	if (res->ntp) {
		fprintf(f, "\ntp all-reduce (per tp group, inside each stage)\n");
		return put_colls(f, res->tp, res->ntp, "all-reduce", "all-reduces");
	}
	return 0;
}

int sim_report_summary(FILE *f, const Plan *p, const SimResult *res, const PlanMem *mem)
{
	const char *tuned = !p->tuned_overlap           ? ""
	                    : res->model == SIM_OVERLAP ? " (the plan's tuning)"
	                                                : " (the plan is tuned for overlap)";
	fprintf(f, "%s: %s schedule, mesh pp=%d dp=%d tp=%d%s, %d microbatch%s, %s model%s, %s "
	        "sends\n", p->name ? p->name : "plan", p->schedule ? p->schedule : "?",
	        p->dims[DIM_PP], p->dims[DIM_DP], p->dims[DIM_TP], p->sp ? " sp" : "",
	        p->microbatches, p->microbatches == 1 ? "" : "es", sim_model_names[res->model], tuned,
	        res->eager ? "eager" : "rendezvous");
	int lines = plan_mesh_world(p) / p->world;
	if (p->line && lines > 1) { // one line ran for all of them (docs/pipesim.md "Line plans")
		fprintf(f, "ok: %d ranks ran %" PRId64 " ops to the end (%d lines, each as the one "
		           "simulated; ranks below are line 0's)\n",
		        plan_mesh_world(p), res->ops * lines, lines);
	} else {
		fprintf(f, "ok: %d ranks ran %" PRId64 " ops to the end\n", res->world, res->ops);
	}
	fprintf(f, "makespan   ");
	put_time(f, res->makespan);
	fprintf(f, "\nbubble     %.2f %%\nbusy       %.2f %% (mean over ranks)\n",
	        100.0 * res->bubble, 100.0 * sim_busy(res, -1));
	char line[256];
	plan_bottleneck(p, line, sizeof line);
	fprintf(f, "%s\n", line);
	if (report_ranks(f, p, res) || sim_report_memory(f, p, mem))
		return -1;
	if (report_links(f, p, res) || report_colls(f, p, res))
		return -1;
	if (res->npath) {
		int64_t comp = 0; // saturating, as the run's times are
		for (int64_t i = 0; i < res->npath; i++)
			comp = sat_add(comp, res->path[i].compute);
		fprintf(f, "\ncritical path: %" PRId64 " stretch%s, ", res->npath,
		        res->npath == 1 ? "" : "es");
		put_time(f, comp);
		fprintf(f, " of compute, ");
		put_time(f, res->makespan > comp ? res->makespan - comp : 0);
		fprintf(f, " of communication and waiting\n");
		int64_t shown = res->npath <= 12 ? res->npath : 10;
		for (int64_t i = 0; i < shown; i++) {
			const SimPathStep *st = &res->path[i];
			char a[300], b[300];
			name_op(a, sizeof a, p, &(SimOpRef){st->rank, st->first_op, SIM_STREAM_RANK});
			name_op(b, sizeof b, p, &(SimOpRef){st->rank, st->last_op, SIM_STREAM_RANK});
			fprintf(f, "  ");
			put_time(f, st->start);
			fprintf(f, " .. ");
			put_time(f, st->end);
			fprintf(f, "  %s", a);
			if (st->last_op != st->first_op)
				fprintf(f, " .. %s", strchr(b, ' ') ? strchr(strchr(b, ' ') + 1, ' ') + 1 : b);
			fprintf(f, "\n");
		}
		if (shown < res->npath)
			fprintf(f, "  ... %" PRId64 " more\n", res->npath - shown);
	}
	return ferror(f) ? -1 : 0;
}

/* ---- the grid ---- */

static int64_t gcd64(int64_t a, int64_t b)
{
	while (b) {
		int64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

static int digits(int64_t v)
{
	int d = 1;
	while (v >= 10) {
		v /= 10;
		d++;
	}
	return d;
}

/* The column width in ns: the gcd of every cost and transfer time when that keeps the
 * grid within max_cols, else the window split evenly. */
/* a / b rounded up, for a >= 0 and b > 0, without overflow near INT64_MAX. */
static int64_t ceil_div(int64_t a, int64_t b)
{
	return a / b + (a % b != 0);
}

static int64_t quantum(const Plan *p, int64_t window, int max_cols)
{
	int64_t g = 0;
	for (int s = 0; s < p->nstages; s++)
		for (int k = 0; k < 3; k++)
			g = gcd64(g, p->stages[s].cost[k]);
	if (!p->link_ideal) { // each edge's time over either link (plan/link.h)
		for (int e = 0; e < p->nedges; e++)
			for (int node = 0; node <= (p->per_node > 0); node++)
				g = gcd64(g, plan_link_ns(p, node, p->edges[e].bytes));
	}
	if (g <= 0)
		g = 1;
	if (max_cols < 1)
		max_cols = 1;
	if (window / g > max_cols) {
		int64_t q = ceil_div(window, max_cols);
		g = q > g ? q : g;
	}
	return g;
}

/* A compute or step op's letter in the grid: its op-table name's first (F, B, W, B for
 * BW, O for OPTIM). */
static char op_letter(const PlanOp *o)
{
	return plan_ops[plan_op_kind(o)].name[0];
}

/* A compute op the grid can show: it ran and took time. */
static int shown_op(const PlanOp *o, SimOpTime t)
{
	return !plan_is_comm(o->kind) && t.end >= 0 && t.start >= 0 && t.end > t.start;
}

/* One cell [a, b) of a rank's row.  Every shown op belongs to the cell holding its
 * midpoint: *n counts those and *first is the first of them; with none, *first is the
 * op running at the cell's middle (a long op's continuation), or -1.  *i and *j walk
 * the rank's ops and only move forward (compute ops run one after another). */
static void grid_cell(const SimResult *res, int r, const PlanRank *pr, int64_t a, int64_t b,
                      int64_t *i, int64_t *j, int64_t *n, int64_t *first)
{
	*n = 0;
	*first = -1;
	for (; *i < pr->nops; ++*i) {
		SimOpTime t = sim_op_time(res, r, *i);
		if (!shown_op(&pr->ops[*i], t))
			continue;
		int64_t mid = t.start + (t.end - t.start) / 2;
		if (mid >= b)
			break;
		if (mid >= a && !(*n)++)
			*first = *i;
	}
	if (*n)
		return;
	int64_t m = a + (b - a) / 2;
	while (*j < pr->nops && (!shown_op(&pr->ops[*j], sim_op_time(res, r, *j)) ||
	                         sim_op_time(res, r, *j).end <= m))
		++*j;
	if (*j < pr->nops && sim_op_time(res, r, *j).start <= m)
		*first = *j;
}

/* Where column c of a grid from t0 begins: t0 + c q, saturating (a run's times do). */
static int64_t col_at(int64_t t0, int c, int64_t q)
{
	return sat_add(t0, sat_mul(c, q));
}

/* Rows of cells for [t0, t0 + ncols * q): a cell names its op (letter and microbatch),
 * or `+N` when N ops end up in it, so no op is lost when a column is longer than the
 * ops; '.' is a cell in which the rank does not compute.  Returns the most ops any
 * cell holds. */
static int64_t grid_rows(FILE *f, const Plan *p, const SimResult *res, int64_t t0, int64_t q,
                         int ncols, const char *const *suffix)
{
	int64_t most = 0;
	for (int r = 0; r < p->world; r++) {
		int64_t i = 0, j = 0, n, first;
		for (int c = 0; c < ncols; c++) {
			grid_cell(res, r, &p->ranks[r], col_at(t0, c, q), col_at(t0, c + 1, q), &i, &j, &n,
			          &first);
			if (n > most)
				most = n;
		}
	}
	int w = 1 + digits(p->microbatches > 0 ? p->microbatches - 1 : 0);
	if (most > 1 && 1 + digits(most) > w)
		w = 1 + digits(most);
	int rw = digits(p->world > 0 ? plan_world_rank(p, p->world - 1) : 0);
	for (int r = 0; r < p->world; r++) {
		const PlanRank *pr = &p->ranks[r];
		fprintf(f, "rank %*d |", rw, plan_world_rank(p, r));
		int64_t i = 0, j = 0, n, first;
		for (int c = 0; c < ncols; c++) {
			grid_cell(res, r, pr, col_at(t0, c, q), col_at(t0, c + 1, q), &i, &j, &n, &first);
			fputc(' ', f);
			if (n > 1) {
				fprintf(f, "+%-*" PRId64, w - 1, n);
			} else if (first < 0) {
				fprintf(f, "%-*s", w, ".");
			} else {
				const PlanOp *o = &pr->ops[first];
				if (plan_ops[o->kind].role == OP_ROLE_STEP) // no microbatch
					fprintf(f, "%-*s", w, "O");
				else
					fprintf(f, "%c%-*d", op_letter(o), w - 1, (int)o->mb);
			}
		}
		fprintf(f, " |%s\n", suffix && suffix[r] ? suffix[r] : "");
	}
	return most;
}

int sim_report_grid(FILE *f, const Plan *p, const SimResult *res, int max_cols)
{
	if (!res->ranks || !res->ranks[0].recs) {
		fprintf(f, "(no grid: op times were not recorded)\n");
		return ferror(f) ? -1 : 0;
	}
	int64_t end = res->verdict == SIM_OK ? res->makespan : res->stall_time;
	int64_t q = quantum(p, end, max_cols);
	int ncols = (int)ceil_div(end, q);
	if (ncols < 1)
		ncols = 1;
	fprintf(f, "grid: 1 column = ");
	put_time(f, q);
	fprintf(f, ", %d column%s; F forward, B backward (B or BW), W weight gradient, "
	           "O optimizer, +N N ops in one column, . idle or communicating\n",
	        ncols, ncols == 1 ? "" : "s");
	grid_rows(f, p, res, 0, q, ncols, NULL);
	return ferror(f) ? -1 : 0;
}

/* ---- failures ---- */

int sim_report_failure(FILE *f, const Plan *p, const SimResult *res, const char *file)
{
	int oom = 0; // the grid's rows would lack what they say of each rank
	char a[400], b[400], c[400];
	if (!file)
		file = "plan";
	if (res->verdict == SIM_MISMATCH) {
		int64_t line = res->nstuck ? sim_op_line(p, res->stuck[0].rank, res->stuck[0].op) : 0;
		if (line)
			fprintf(f, "%s:%" PRId64 ": error: mismatch: %s\n", file, line, res->message);
		else
			fprintf(f, "%s: error: mismatch: %s\n", file, res->message);
		for (int i = 0; i < res->nstuck; i++) {
			name_op(a, sizeof a, p, &res->stuck[i]);
			fprintf(f, "  %s\n", a);
		}
		return ferror(f) ? -1 : 0;
	}
	if (res->verdict != SIM_DEADLOCK)
		return 0;
	fprintf(f, "%s: error: %s\n", file, res->message);
	for (int i = 0; i < res->nstuck; i++) {
		const SimOpRef *x = &res->stuck[i];
		name_op(a, sizeof a, p, x);
		int64_t line = sim_op_line(p, x->rank, x->op);
		if (line)
			fprintf(f, "%s:%" PRId64 ": note: blocked: %s\n", file, line, a);
		else
			fprintf(f, "%s: note: blocked: %s\n", file, a);
	}
	if (res->ncycle) {
		fprintf(f, "wait-for cycle (%d edges):\n", res->ncycle);
		for (int i = 0; i < res->ncycle; i++) {
			const SimWait *w = &res->cycle[i];
			name_op(a, sizeof a, p, &w->from);
			name_op(b, sizeof b, p, &w->on);
			name_op(c, sizeof c, p, &w->behind);
			if (w->on.rank == w->behind.rank && w->on.op == w->behind.op &&
			    w->on.stream == w->behind.stream)
				fprintf(f, "  %s waits for %s\n", a, b);
			else
				fprintf(f, "  %s waits for %s which waits behind %s\n", a, b, c);
		}
	}
	if (res->stall_time >= SIM_TIME_MAX) { // saturated: no column would be true
		fprintf(f, "(no picture of the last steps: their times pass 2^62 ns)\n");
	} else if (res->ranks && res->ranks[0].recs) {
		enum { COLS = 16 };
		int64_t q = quantum(p, res->stall_time, COLS);
		int64_t t0 = res->stall_time - COLS * q;
		if (t0 < 0)
			t0 = 0;
		int ncols = (int)ceil_div(res->stall_time - t0, q);
		if (ncols < 1)
			ncols = 1;
		char **suffix = calloc((size_t)p->world, sizeof *suffix);
		oom = !suffix;
		if (suffix) {
			for (int i = 0; i < res->nstuck; i++) {
				int r = res->stuck[i].rank;
				if (suffix[r] || res->stuck[i].op < 0 || res->stuck[i].op >= p->ranks[r].nops)
					continue;
				char text[256];
				plan_format_op(p, &p->ranks[r].ops[res->stuck[i].op], text, sizeof text);
				suffix[r] = malloc(300);
				if (suffix[r])
					snprintf(suffix[r], 300, " stuck at %s", text);
				oom |= !suffix[r];
			}
			for (int r = 0; r < p->world; r++) {
				if (suffix[r])
					continue;
				if ((suffix[r] = malloc(16)))
					snprintf(suffix[r], 16, " done");
				oom |= !suffix[r];
			}
		}
		fprintf(f, "last steps before the stall (1 column = ");
		put_time(f, q);
		fprintf(f, ", ");
		put_time(f, t0);
		fprintf(f, " .. ");
		put_time(f, res->stall_time);
		fprintf(f, "):\n");
		grid_rows(f, p, res, t0, q, ncols, (const char *const *)suffix);
		if (suffix)
			for (int r = 0; r < p->world; r++)
				free(suffix[r]);
		free(suffix);
	}
	return oom || ferror(f) ? -1 : 0;
}
