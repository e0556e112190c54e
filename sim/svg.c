/* The SVG timeline, drawn the way the pipeline-schedule papers draw them: a row per
 * rank (labelled with its mesh coordinates), time to the right, one box per compute op
 * coloured by kind (F, B, W, fused BW, optimizer) and labelled stage, kind and
 * microbatch (`3F0`), idle time left as the pale background so bubbles show.  Under
 * each row a thin bar per communication group, pale while the rank waits for its peer
 * and dark while data moves, and an arrow per p2p transfer from the sender to the
 * receiver, so the picture says what waits for what.  A legend and a time axis close
 * the picture; a deadlocked run gets a red line at the stall and the op each rank is
 * stuck at.
 *
 * Time is drawn to scale, widened up to PLOT_W_MAX so that every compute box holds the
 * longest label (`2BW7`).  When that does not fit (small models whose links cost more
 * than their computes), time goes through a monotone piecewise-linear map (Warp):
 * every compute box still gets its label's width, and a stretch in which no rank
 * computes is compressed to at most GAP_W pixels, hatched and marked with a break on
 * the axis; the subtitle says the axis is not to scale.  Everything is computed from
 * the plan and the recorded times only, so the output is deterministic. */
#include "sim.h"
#include "../plan/line.h"
#include "../plan/tp.h"
#include "../plan/link.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
	RIGHT = 24,
	TOP = 44,
	ROW = 30,          // row pitch
	BOX = 22,          // box height
	PLOT_W = 1100,     // width of the time axis
	PLOT_W_MAX = 2400, // widest the axis grows to give every box room for a label
	GAP_W = 36,        // widest a stretch without compute is drawn
	DETAIL_OPS = 200000, // above this many ops: no labels, arrows or warp
};

/* What the legend explains: the op kinds (OpKind values), then these. */
enum {
	MARK_IDLE = OP_COUNT, // the pale background
	MARK_WAIT,            // a comm group waiting for its peer
	MARK_MOVE,            // a comm op moving data
	MARK_XFER,            // a transfer arrow
	MARK_GAP,             // a compressed stretch
	MARK_STUCK,           // a group that never completes
	MARK_COUNT
};

static const char *const fill[OP_COUNT] = {
    [OP_F] = "#6fa8dc", [OP_B] = "#93c47d", [OP_W] = "#f6b26b",
    [OP_BW] = "#6aa84f", [OP_OPTIM] = "#b4a7d6",
};

static void esc(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '<')
			fputs("&lt;", f);
		else if (*s == '>')
			fputs("&gt;", f);
		else if (*s == '&')
			fputs("&amp;", f);
		else
			fputc(*s, f);
	}
}

/* A tick step of 1, 2 or 5 times a power of ten giving about `ticks` ticks over span
 * (a span of zero or less gets step 1). */
static double tick_step(double span, double ticks)
{
	if (!(span > 0) || !(ticks >= 1))
		return 1;
	double raw = span / ticks, p = pow(10, floor(log10(raw)));
	double m = raw / p;
	return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/* ---- the time map ---- */

typedef struct {
	int64_t n;      // breakpoints
	int64_t *t;     // [n] ns, ascending, t[0] = 0, t[n-1] = span
	double *x;      // [n] pixels from the axis start
	uint8_t *gap;   // [n-1] 1: interval k is a compressed stretch without compute
	double width;   // x[n-1]
	double sx;      // px per ns of the linear map (used when n == 0)
	int oom;        // an allocation failed: the picture would not be the one asked for
} Warp;

static double warp_x(const Warp *w, int64_t t)
{
	if (!w->n)
		return (double)t * w->sx;
	if (t <= w->t[0])
		return w->x[0];
	if (t >= w->t[w->n - 1])
		return w->x[w->n - 1];
	int64_t lo = 0, hi = w->n - 1; // t[lo] <= t < t[hi]
	while (hi - lo > 1) {
		int64_t mid = lo + (hi - lo) / 2;
		if (w->t[mid] <= t)
			lo = mid;
		else
			hi = mid;
	}
	return w->x[lo] + (w->x[hi] - w->x[lo]) * (double)(t - w->t[lo]) /
	                      (double)(w->t[hi] - w->t[lo]);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static int64_t find_t(const Warp *w, int64_t t)
{
	int64_t lo = 0, hi = w->n - 1;
	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2;
		if (w->t[mid] < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Width of the whole axis at linear scale s (px/ns): interval k is s * len wide, at
 * least need[k] where a compute op covers it, at most GAP_W where none does. */
static double warp_total(const Warp *w, const double *need, double s, int fill_x)
{
	double x = 0;
	if (fill_x)
		w->x[0] = 0;
	for (int64_t k = 0; k + 1 < w->n; k++) {
		double len = (double)(w->t[k + 1] - w->t[k]), d = s * len;
		if (need[k] > 0) {
			if (d < need[k])
				d = need[k];
		} else if (d > GAP_W) {
			d = GAP_W;
		}
		if (fill_x) {
			w->gap[k] = need[k] <= 0 && s * len > GAP_W + 0.5;
			w->x[k + 1] = x + d;
		}
		x += d;
	}
	return x;
}

static void warp_free(Warp *w)
{
	free(w->t);
	free(w->x);
	free(w->gap);
}

/* Whether op i of rank r is a compute op drawn as a box inside [0, span]. */
static int drawn(const Plan *p, const SimResult *res, int r, int64_t i, int64_t span)
{
	SimOpTime ti = sim_op_time(res, r, i);
	return !plan_is_comm(p->ranks[r].ops[i].kind) && ti.end > ti.start && ti.start >= 0 &&
	       ti.end <= span;
}

/* need[k]: the share of min_box the widest-needing op covering interval k of the map
 * asks; returns their sum. */
static double warp_need(const Warp *w, const Plan *p, const SimResult *res, int64_t span,
                        double min_box, double *need)
{
	double sum = 0;
	for (int r = 0; r < p->world; r++) {
		for (int64_t i = 0; i < p->ranks[r].nops; i++) {
			if (!drawn(p, res, r, i, span))
				continue;
			SimOpTime ti = sim_op_time(res, r, i);
			double len = (double)(ti.end - ti.start);
			for (int64_t k = find_t(w, ti.start); k + 1 < w->n && w->t[k] < ti.end; k++) {
				double v = min_box * (double)(w->t[k + 1] - w->t[k]) / len;
				if (v > need[k])
					need[k] = v;
			}
		}
	}
	for (int64_t k = 0; k + 1 < w->n; k++)
		sum += need[k];
	return sum;
}

/* Builds the map for [0, span]; falls back to the linear map (n = 0) for huge plans,
 * when memory is short, or when a linear map gives every box min_box pixels within PLOT_W_MAX
 * (then scaled so).  Returns 1 when the map is not linear. */
static int warp_build(Warp *w, const Plan *p, const SimResult *res, int64_t span, int detail,
                      double min_box)
{
	memset(w, 0, sizeof *w);
	w->sx = (double)PLOT_W / (double)span;
	w->width = PLOT_W;
	if (!detail)
		return 0;
	/* The linear map that gives the shortest op min_box, when it is not too wide. */
	int64_t cap = 2, shortest = 0;
	for (int r = 0; r < p->world; r++) {
		for (int64_t i = 0; i < p->ranks[r].nops; i++) {
			if (!drawn(p, res, r, i, span))
				continue;
			SimOpTime ti = sim_op_time(res, r, i);
			cap += 2;
			if (!shortest || ti.end - ti.start < shortest)
				shortest = ti.end - ti.start;
		}
	}
	if (!shortest)
		return 0;
	double lin = min_box * (double)span / (double)shortest;
	if (lin <= PLOT_W_MAX) {
		if (lin > PLOT_W) {
			w->width = lin;
			w->sx = lin / (double)span;
		}
		return 0;
	}
	int64_t *t = malloc((size_t)cap * sizeof *t);
	if (!t) {
		w->oom = 1;
		return 0;
	}
	int64_t n = 0;
	t[n++] = 0;
	t[n++] = span;
	for (int r = 0; r < p->world; r++) {
		for (int64_t i = 0; i < p->ranks[r].nops; i++) {
			if (!drawn(p, res, r, i, span))
				continue;
			SimOpTime ti = sim_op_time(res, r, i);
			t[n++] = ti.start;
			t[n++] = ti.end;
		}
	}
	qsort(t, (size_t)n, sizeof *t, cmp_i64);
	int64_t m = 0;
	for (int64_t i = 0; i < n; i++)
		if (!m || t[i] != t[m - 1])
			t[m++] = t[i];
	w->n = m;
	w->t = t;
	double *need = calloc((size_t)m, sizeof *need);
	w->x = malloc((size_t)m * sizeof *w->x);
	w->gap = calloc((size_t)m, 1);
	int oom = !need || !w->x || !w->gap;
	if (oom || m < 2)
		goto linear;
	double sum_need = warp_need(w, p, res, span, min_box, need);
	/* Room: the axis grows up to PLOT_W_MAX; beyond that boxes get less than min_box. */
	double target = sum_need * 1.2 > PLOT_W ? sum_need * 1.2 : PLOT_W;
	if (target > PLOT_W_MAX) {
		double shrink = PLOT_W_MAX / target;
		for (int64_t k = 0; k + 1 < m; k++)
			need[k] *= shrink;
		target = PLOT_W_MAX;
	}
	/* The linear scale s with total(s) = target: total grows with s. */
	double lo = 0, hi = (double)PLOT_W / (double)span;
	for (int i = 0; i < 200 && warp_total(w, need, hi, 0) < target; i++)
		hi *= 2;
	if (warp_total(w, need, hi, 0) < target)
		goto linear; // nothing but compressed stretches: keep it linear
	for (int i = 0; i < 100; i++) {
		double mid = (lo + hi) / 2;
		if (warp_total(w, need, mid, 0) < target)
			lo = mid;
		else
			hi = mid;
	}
	w->width = warp_total(w, need, hi, 1);
	w->sx = hi;
	int warped = 0;
	for (int64_t k = 0; k + 1 < m && !warped; k++)
		if (fabs((w->x[k + 1] - w->x[k]) - hi * (double)(t[k + 1] - t[k])) > 0.5)
			warped = 1;
	free(need);
	if (warped)
		return 1;
	/* uniformly scaled: the linear map at that scale */
	double sx = hi, width = hi * (double)span;
	warp_free(w);
	memset(w, 0, sizeof *w);
	w->sx = sx;
	w->width = width;
	return 0;
linear:
	free(need);
	warp_free(w);
	memset(w, 0, sizeof *w);
	w->sx = (double)PLOT_W / (double)span;
	w->width = PLOT_W;
	w->oom = oom;
	return 0;
}

/* ---- transfers ---- */

typedef struct {
	int32_t dst;
	int64_t op;
} SendRef;

static int cmp_send(const void *a, const void *b)
{
	const SendRef *x = a, *y = b;
	if (x->dst != y->dst)
		return (x->dst > y->dst) - (x->dst < y->dst);
	return (x->op > y->op) - (x->op < y->op);
}

/* Whether o is the receiving side of a p2p pair (a RECV). */
static int is_recv(const PlanOp *o)
{
	return plan_op_is_p2p(plan_op_kind(o)) && !plan_ops[o->kind].sends;
}

/* An arrow per completed p2p transfer, from the sender's row where the data leaves to
 * the receiver's row where it lands.  Sends pair with receives FIFO per ordered pair of
 * ranks (docs/semantics.md), so the k-th RECV on d from s is the k-th SEND on s to d.
 * Returns the arrows drawn, or -1 when out of memory. */
static int64_t draw_transfers(FILE *f, const Plan *p, const SimResult *res, const Warp *w,
                              int left)
{
	int world = p->world;
	SendRef **sends = calloc((size_t)world, sizeof *sends);
	int64_t *nsends = calloc((size_t)world, sizeof *nsends);
	int64_t *seen = calloc((size_t)world, sizeof *seen), drawn = 0;
	if (!sends || !nsends || !seen) {
		drawn = -1;
		goto out;
	}
	for (int s = 0; s < world; s++) {
		const PlanRank *pr = &p->ranks[s];
		int64_t n = 0;
		for (int64_t i = 0; i < pr->nops; i++)
			n += plan_ops[pr->ops[i].kind].sends;
		if (!n)
			continue;
		sends[s] = malloc((size_t)n * sizeof *sends[s]);
		if (!sends[s]) {
			drawn = -1;
			goto out;
		}
		for (int64_t i = 0; i < pr->nops; i++)
			if (plan_ops[pr->ops[i].kind].sends)
				sends[s][nsends[s]++] = (SendRef){pr->ops[i].peer, i};
		qsort(sends[s], (size_t)n, sizeof *sends[s], cmp_send);
	}
	for (int d = 0; d < world; d++) {
		const PlanRank *pr = &p->ranks[d];
		for (int64_t i = 0; i < pr->nops; i++) {
			const PlanOp *o = &pr->ops[i];
			if (!is_recv(o) || o->peer < 0 || o->peer >= world || o->peer == d)
				continue;
			int s = o->peer;
			int64_t k = seen[s]++;
			/* first send of s to d */
			int64_t lo = 0, hi = nsends[s];
			while (lo < hi) {
				int64_t mid = lo + (hi - lo) / 2;
				if (sends[s][mid].dst < d)
					lo = mid + 1;
				else
					hi = mid;
			}
			SimOpTime td = sim_op_time(res, d, i);
			if (lo + k >= nsends[s] || sends[s][lo + k].dst != d || td.end < 0)
				continue;
			SimOpTime ts = sim_op_time(res, s, sends[s][lo + k].op);
			if (ts.start < 0)
				continue;
			int64_t t0 = td.end - plan_p2p_ns(p, s, d, plan_op_bytes(p, o));
			if (t0 < ts.start)
				t0 = ts.start;
			double x0 = left + warp_x(w, t0), x1 = left + warp_x(w, td.end);
			int ys = TOP + s * ROW, yd = TOP + d * ROW;
			double y0 = d > s ? ys + BOX + 4 : ys, y1 = d > s ? yd : yd + BOX + 4;
			fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" "
			           "class=\"xfer\" marker-end=\"url(#arrow)\"/>\n",
			        x0, y0, x1, y1);
			drawn++;
		}
		for (int64_t i = 0; i < pr->nops; i++)
			if (is_recv(&pr->ops[i]) && pr->ops[i].peer >= 0 && pr->ops[i].peer < world)
				seen[pr->ops[i].peer] = 0;
	}
out:
	if (sends)
		for (int s = 0; s < world; s++)
			free(sends[s]);
	free(sends);
	free(nsends);
	free(seen);
	return drawn;
}

/* "r5 pp=1 dp=1": the rank and its coordinate along every mesh dim longer than 1. */
static void rank_label(const Plan *p, int r, char *buf, size_t n)
{
	static const char *const dim_names[DIM_COUNT] = {"pp", "dp", "tp"};
	int k = snprintf(buf, n, "r%d", plan_world_rank(p, r));
	for (int d = 0; d < DIM_COUNT && k > 0 && (size_t)k < n; d++)
		if (p->dims[d] > 1)
			k += snprintf(buf + k, n - (size_t)k, " %s=%d", dim_names[d],
			              p->ranks[r].coord[d]);
}

/* "3F0": stage, kind, microbatch; "3O" for a stage's optimizer step. */
static void box_label(const PlanOp *o, char *buf, size_t n)
{
	if (plan_ops[o->kind].role == OP_ROLE_STEP) // no microbatch
		snprintf(buf, n, "%dO", (int)o->stage);
	else
		snprintf(buf, n, "%d%s%d", (int)o->stage, plan_ops[plan_op_kind(o)].name, (int)o->mb);
}

/* ---- the picture ---- */

/* One picture being drawn: its sizes, its time map and the marks it has drawn (which
 * the legend explains). */
typedef struct {
	FILE *f;
	const Plan *p;
	const SimResult *res;
	int64_t span;      // the time axis: makespan or stall time
	int detail;        // labels, arrows and the warp (not for huge plans)
	double min_box;    // the narrowest box that holds the longest label
	Warp wp;
	int warped;
	int left, plot_w, w, h; // plot's left edge and width, picture's size
	int ngaps;         // compressed stretches
	int shown[MARK_COUNT];
} Pic;

/* Sizes: the axis, the narrowest labelled box, the time map, margins. */
static void pic_size(Pic *c)
{
	const Plan *p = c->p;
	const SimResult *res = c->res;
	c->span = res->verdict == SIM_OK ? res->makespan : res->stall_time;
	/* A stall at t = 0 (or a plan that takes no time) still gets a 0 .. 1 us axis. */
	if (c->span <= 0)
		c->span = 1000;
	c->detail = plan_total_ops(p) <= DETAIL_OPS;
	/* the narrowest box that holds the longest label, 6 px a character */
	size_t maxbox = 1;
	for (int r = 0; r < p->world && c->detail; r++)
		for (int64_t i = 0; i < p->ranks[r].nops; i++) {
			char lab[48];
			if (plan_is_comm(p->ranks[r].ops[i].kind))
				continue;
			box_label(&p->ranks[r].ops[i], lab, sizeof lab);
			if (strlen(lab) > maxbox)
				maxbox = strlen(lab);
		}
	c->min_box = 6.0 * (double)maxbox + 4;
	c->warped = warp_build(&c->wp, p, res, c->span, c->detail, c->min_box);
	c->plot_w = (int)ceil(c->wp.width);
	int maxlab = 0;
	for (int r = 0; r < p->world; r++) {
		char lab[64];
		rank_label(p, r, lab, sizeof lab);
		if ((int)strlen(lab) > maxlab)
			maxlab = (int)strlen(lab);
	}
	c->left = 16 + 7 * maxlab;
	if (c->left < 78)
		c->left = 78;
	c->h = TOP + p->world * ROW + 92;
	/* A deadlock gets a margin on the right for what each rank is stuck at. */
	int right = res->verdict == SIM_OK ? RIGHT : 430;
	c->w = c->left + c->plot_w + right;
}

/* The svg element, its definitions, the title and the subtitle. */
static void pic_head(Pic *c)
{
	FILE *f = c->f;
	const Plan *p = c->p;
	const SimResult *res = c->res;
	int w = c->w, h = c->h, left = c->left;
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
	           "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\">\n",
	        w, h, w, h);
	fputs("<defs>\n"
	      "<marker id=\"arrow\" viewBox=\"0 0 6 6\" refX=\"6\" refY=\"3\" markerWidth=\"6\" "
	      "markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0 L6,3 L0,6 z\" fill=\"#555\"/></marker>\n"
	      "<pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
	      "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f1f1f1\"/>"
	      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#c8c8c8\" stroke-width=\"2\"/>"
	      "</pattern>\n"
	      "<style>.xfer{stroke:#555;stroke-width:0.8;stroke-opacity:0.55} "
	      ".lab{font-size:10px;text-anchor:middle}</style>\n"
	      "</defs>\n",
	      f);
	fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", w, h);
	fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"15\" font-weight=\"bold\">", left);
	esc(f, p->name ? p->name : "plan");
	fprintf(f, ": %s, pp=%d dp=%d tp=%d, %d microbatches</text>\n",
	        p->schedule ? p->schedule : "?", p->dims[DIM_PP], p->dims[DIM_DP], p->dims[DIM_TP],
	        p->microbatches);
	fprintf(f, "<text x=\"%d\" y=\"36\" font-size=\"12\" fill=\"#444\">%s model, %s sends; ",
	        left, sim_model_names[res->model], res->eager ? "eager" : "rendezvous");
	if (res->verdict == SIM_OK)
		fprintf(f, "makespan %.3f us, bubble %.1f%%", (double)res->makespan / 1000,
		        100 * res->bubble);
	else
		fprintf(f, "%s at %.3f us", sim_verdict_names[res->verdict],
		        (double)res->stall_time / 1000);
	if (c->warped)
		fprintf(f, "; time not to scale: boxes at least %.0f px, idle stretches compressed",
		        c->min_box);
	fputs("</text>\n", f);
}

/* Rows: label, background; compressed stretches. */
static void pic_rows(Pic *c)
{
	FILE *f = c->f;
	int left = c->left;
	for (int r = 0; r < c->p->world; r++) {
		char lab[64];
		rank_label(c->p, r, lab, sizeof lab);
		int y = TOP + r * ROW;
		fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"end\">%s</text>\n",
		        left - 8, y + BOX / 2 + 4, lab);
		fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#f1f1f1\"/>\n",
		        left, y, c->plot_w, BOX);
	}
	for (int64_t k = 0; k + 1 < c->wp.n; k++) {
		if (!c->wp.gap[k])
			continue;
		c->ngaps++;
		fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
		           "fill=\"url(#hatch)\"/>\n",
		        left + c->wp.x[k], TOP - 2, c->wp.x[k + 1] - c->wp.x[k], c->p->world * ROW);
	}
}

/* Rank r's comm group [i, j): a bar under the row, pale while it waits, red when it
 * never completes, and darker where each op moves data. */
static void pic_group(Pic *c, int r, int64_t i, int64_t j)
{
	FILE *f = c->f;
	const Plan *p = c->p;
	const PlanRank *pr = &p->ranks[r];
	int y = TOP + r * ROW;
	int64_t end = -1;
	int stuck = 0;
	for (int64_t k = i; k < j; k++) {
		int64_t e = sim_op_time(c->res, r, k).end;
		if (e < 0)
			stuck = 1;
		else if (e > end)
			end = e;
	}
	int64_t start = sim_op_time(c->res, r, i).start;
	if (start < 0)
		return;
	if (stuck)
		end = c->span;
	double x0 = c->left + warp_x(&c->wp, start), x1 = c->left + warp_x(&c->wp, end);
	if (x1 - x0 >= 0.5 || stuck) {
		fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"3\" fill=\"%s\"/>\n", x0,
		        y + BOX + 1, x1 - x0 > 1 ? x1 - x0 : 1, stuck ? "#cc0000" : "#bbbbbb");
		c->shown[stuck ? MARK_STUCK : MARK_WAIT] = 1;
	}
	/* the part of each op spent moving data, darker */
	for (int64_t k = i; k < j && !stuck; k++) {
		int64_t d = plan_op_move_ns(p, r, &pr->ops[k]);
		int64_t e = sim_op_time(c->res, r, k).end, a = e - d < start ? start : e - d;
		double xa = c->left + warp_x(&c->wp, a), xb = c->left + warp_x(&c->wp, e);
		if (xb - xa >= 0.5) {
			fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"3\" "
			           "fill=\"#555555\"/>\n",
			        xa, y + BOX + 1, xb - xa);
			c->shown[MARK_MOVE] = 1;
		}
	}
}

/* Communication groups, then compute boxes, then the transfer arrows. */
static void pic_ops(Pic *c)
{
	FILE *f = c->f;
	const Plan *p = c->p;
	for (int r = 0; r < p->world; r++) {
		const PlanRank *pr = &p->ranks[r];
		int y = TOP + r * ROW;
		for (int64_t i = 0; i < pr->nops;) {
			const PlanOp *o = &pr->ops[i];
			if (plan_is_comm(o->kind)) {
				int64_t j = plan_group_end(pr, i);
				pic_group(c, r, i, j);
				i = j;
				continue;
			}
			SimOpTime t = sim_op_time(c->res, r, i);
			if (t.end >= 0 && t.end > t.start) {
				double x0 = c->left + warp_x(&c->wp, t.start);
				double x1 = c->left + warp_x(&c->wp, t.end);
				fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
				           "stroke=\"white\" stroke-width=\"%s\"/>\n",
				        x0, y, x1 - x0, BOX, fill[o->kind] ? fill[o->kind] : "#999",
				        x1 - x0 > 4 ? "1" : "0");
				c->shown[o->kind] = 1;
				char lab[48];
				box_label(o, lab, sizeof lab);
				if (c->detail && x1 - x0 + 0.01 >= 6.0 * (double)strlen(lab) + 4)
					fprintf(f, "<text x=\"%.2f\" y=\"%d\" class=\"lab\">%s</text>\n",
					        (x0 + x1) / 2, y + BOX / 2 + 4, lab);
			}
			i++;
		}
	}
	int64_t arrows = c->detail ? draw_transfers(f, p, c->res, &c->wp, c->left) : 0;
	if (arrows < 0)
		c->wp.oom = 1;
	c->shown[MARK_XFER] = arrows > 0;
}

/* The stall and where each rank is stuck. */
static void pic_stall(Pic *c)
{
	FILE *f = c->f;
	const Plan *p = c->p;
	const SimResult *res = c->res;
	double x = c->left + warp_x(&c->wp, res->stall_time > 0 ? res->stall_time : 0);
	fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#cc0000\" "
	           "stroke-width=\"2\"/>\n",
	        x, TOP - 4, x, TOP + p->world * ROW);
	double xs = c->left + c->plot_w;
	for (int i = 0; i < res->nstuck; i++) {
		const SimOpRef *s = &res->stuck[i];
		if (s->rank < 0 || s->op < 0 || s->op >= p->ranks[s->rank].nops)
			continue;
		if (i && res->stuck[i - 1].rank == s->rank)
			continue; // overlap model: the comm stream's op says it
		char text[256];
		plan_format_op(p, &p->ranks[s->rank].ops[s->op], text, sizeof text);
		fprintf(f, "<text x=\"%.2f\" y=\"%d\" font-size=\"11\" fill=\"#cc0000\">stuck: ",
		        xs + 8, TOP + s->rank * ROW + BOX / 2 + 4);
		esc(f, text);
		int64_t line = sim_op_line(p, s->rank, s->op);
		if (line)
			fprintf(f, " (line %" PRId64 ")", line);
		fputs("</text>\n", f);
	}
}

/* Time axis: nice ticks, dropped where they would crowd (a stretched or compressed
 * part of a warped axis) or fall inside a compressed stretch, which gets a break mark
 * instead.  Returns the axis's y. */
static int pic_axis(Pic *c)
{
	FILE *f = c->f;
	int left = c->left, plot_w = c->plot_w;
	const Warp *wp = &c->wp;
	int ay = TOP + c->p->world * ROW + 4;
	fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", left, ay,
	        left + plot_w, ay);
	double span_us = (double)c->span / 1000;
	double step = tick_step(span_us, c->warped ? plot_w / 50.0 : 10);
	double last = -1e9;
	for (int64_t k = 0;; k++) {
		double v = (double)k * step;
		if (v > span_us * (1 + 1e-9))
			break;
		int64_t ns = (int64_t)llround(v * 1000);
		double x = left + warp_x(wp, ns);
		int in_gap = 0;
		if (wp->n) {
			int64_t g = find_t(wp, ns); // first breakpoint at or after ns
			in_gap = g > 0 && wp->t[g] != ns && wp->gap[g - 1];
		}
		if (in_gap || x - last < 40)
			continue;
		last = x;
		fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#333\"/>\n", x,
		        ay, x, ay + 4);
		fprintf(f, "<text x=\"%.2f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%g</text>\n",
		        x, ay + 15, v);
	}
	if (left + plot_w - last >= 40) { // the end of the axis: makespan or stall
		fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n",
		        left + plot_w, ay, left + plot_w, ay + 4);
		fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%g</text>\n",
		        left + plot_w, ay + 15, span_us);
	}
	for (int64_t k = 0; k + 1 < wp->n; k++) {
		if (!wp->gap[k])
			continue;
		double xm = left + (wp->x[k] + wp->x[k + 1]) / 2;
		fprintf(f, "<path d=\"M%.2f,%d l4,-8 M%.2f,%d l4,-8\" stroke=\"#333\" "
		           "stroke-width=\"1.2\"/>\n",
		        xm - 5, ay + 4, xm, ay + 4);
	}
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">time (us)%s</text>\n",
	        left + plot_w, ay + 28, c->ngaps ? "; // marks a compressed stretch" : "");
	return ay;
}

/* Legend: what the picture shows, below the axis at ay. */
static void pic_legend(Pic *c, int ay)
{
	FILE *f = c->f;
	int left = c->left;
	static const struct {
		const char *label, *color;
		int shape, mark; // shape 0 box, 1 bar, 2 arrow, 3 hatch
	} legend[] = {
	    {"F forward", "#6fa8dc", 0, OP_F},
	    {"B input gradient", "#93c47d", 0, OP_B},
	    {"W weight gradient", "#f6b26b", 0, OP_W},
	    {"BW fused backward", "#6aa84f", 0, OP_BW},
	    {"optimizer", "#b4a7d6", 0, OP_OPTIM},
	    {"idle", "#f1f1f1", 0, MARK_IDLE},
	    {"waiting for a peer", "#bbbbbb", 1, MARK_WAIT},
	    {"moving data", "#555555", 1, MARK_MOVE},
	    {"stuck", "#cc0000", 1, MARK_STUCK},
	    {"transfer, send to receive", "#555555", 2, MARK_XFER},
	    {"no rank computing (compressed)", "", 3, MARK_GAP},
	};
	int lx = left, ly = ay + 40;
	for (size_t i = 0; i < sizeof legend / sizeof legend[0]; i++) {
		if (!c->shown[legend[i].mark])
			continue;
		int lw = 18 + 6 * (int)strlen(legend[i].label) + 18;
		if (lx > left && lx + lw > c->w) {
			lx = left;
			ly += 20;
		}
		if (legend[i].shape == 1)
			fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"3\" fill=\"%s\"/>\n", lx,
			        ly + 5, legend[i].color);
		else if (legend[i].shape == 2)
			fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"xfer\" "
			           "marker-end=\"url(#arrow)\"/>\n",
			        lx, ly + 2, lx + 14, ly + 12);
		else
			fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\" "
			           "stroke=\"#bbb\" stroke-width=\"0.5\"/>\n",
			        lx, ly, legend[i].shape == 3 ? "url(#hatch)" : legend[i].color);
		fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>\n", lx + 18, ly + 11,
		        legend[i].label);
		lx += lw;
	}
}

int sim_write_svg(FILE *f, const Plan *p, const SimResult *res)
{
	if (!res->ranks || !res->ranks[0].recs) {
		fprintf(stderr, "pipesim: no op times recorded: cannot draw\n");
		return -1;
	}
	Pic c = {.f = f, .p = p, .res = res};
	pic_size(&c);
	pic_head(&c);
	pic_rows(&c);
	c.shown[MARK_IDLE] = 1;
	c.shown[MARK_GAP] = c.ngaps > 0;
	pic_ops(&c);
	if (res->verdict != SIM_OK)
		pic_stall(&c);
	pic_legend(&c, pic_axis(&c));
	int oom = c.wp.oom;
	warp_free(&c.wp);
	fputs("</svg>\n", f);
	if (oom) // a picture without what it could not draw is not written (cli_write)
		errno = ENOMEM;
	return oom || ferror(f) ? -1 : 0;
}
