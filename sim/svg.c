/* The SVG timeline, drawn the way the pipeline-schedule papers draw them: a row per
 * rank (labelled with its mesh coordinates), time to the right, one box per compute op
 * coloured by kind (F, B, W, fused BW, optimizer), shaded by the stage where a rank
 * holds several, and labelled kind and microbatch (`F0`; `3F0` with the stage where a
 * rank holds several), idle time left as the pale background so bubbles show.  Under
 * each row a thin bar per communication group, pale while the rank waits for its peer
 * and dark while data moves, an arrow per p2p transfer from the sender to the
 * receiver, so the picture says what waits for what, and the rank's memory track: the
 * memory model's bytes by class over the step, its peak marked.  A legend and a time
 * axis (1-2-5 ticks in us, ms or s) close the picture; a deadlocked run gets a red
 * line at the stall and the op each rank is stuck at.
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
#include "../plan/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
	RIGHT = 24,
	TOP = 44,
	ROW = 30,          // row pitch without the memory track
	MEM_H = 26,        // height of a rank's memory track, under its comm bars
	MEM_GAP = 10,      // from the comm bars to the memory track (room for the peak mark)
	SHADES = 4,        // shades of a kind's colour, one per stage a rank holds (mod)
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
	MARK_STATIC,          // memory: model state
	MARK_SAVED,           // memory: saved activations
	MARK_INFLIGHT,        // memory: stage outputs and gradients in flight
	MARK_PEAK,            // memory: a rank's peak
	MARK_CHUNKS,          // shades: a rank's stages
	MARK_COUNT
};

/* A kind's colour, shade c for a rank's (c mod SHADES)-th stage: the first is the kind's
 * own colour, the others darker and lighter, so that the stages (chunks) of zbv,
 * dualpipev and interleaved schedules can be told apart within a kind. */
static const char *const fill[OP_COUNT][SHADES] = {
    [OP_F] = {"#6fa8dc", "#2f6fae", "#a9cdee", "#1c4587"},
    [OP_B] = {"#93c47d", "#4f8a36", "#c2e0b4", "#274e13"},
    [OP_W] = {"#f6b26b", "#c27020", "#fbd5aa", "#7f4a10"},
    [OP_BW] = {"#6aa84f", "#38761d", "#a8d08d", "#1e4d0f"},
    [OP_OPTIM] = {"#b4a7d6", "#7d67b8", "#d9d2ee", "#4c3a85"},
};

/* Memory classes of the track, bottom up: colour and legend mark. */
static const struct {
	const char *color;
	int mark;
} mem_class[3] = {
    {"#c9c9c9", MARK_STATIC}, {"#76a5af", MARK_SAVED}, {"#e06666", MARK_INFLIGHT},
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

/* An arrow per completed p2p transfer (plan_p2p_pairs), from the sender's row where
 * the data leaves to the receiver's row where it lands.  Returns the arrows drawn, or
 * -1 when out of memory. */
static int64_t draw_transfers(FILE *f, const Plan *p, const SimResult *res, const Warp *w,
                              int left, int pitch)
{
	PlanPair *pairs;
	int64_t n = plan_p2p_pairs(p, &pairs), drawn = 0;
	for (int64_t k = 0; k < n; k++) {
		const PlanPair *q = &pairs[k];
		SimOpTime td = sim_op_time(res, q->dst, q->recv), ts = sim_op_time(res, q->src, q->send);
		if (td.end < 0 || ts.start < 0)
			continue;
		const PlanOp *o = &p->ranks[q->dst].ops[q->recv];
		int64_t t0 = td.end - plan_p2p_ns(p, q->src, q->dst, plan_op_bytes(p, o));
		if (t0 < ts.start)
			t0 = ts.start;
		double x0 = left + warp_x(w, t0), x1 = left + warp_x(w, td.end);
		int ys = TOP + q->src * pitch, yd = TOP + q->dst * pitch, down = q->dst > q->src;
		double y0 = down ? ys + BOX + 4 : ys, y1 = down ? yd : yd + BOX + 4;
		fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" "
		           "class=\"xfer\" marker-end=\"url(#arrow)\"/>\n",
		        x0, y0, x1, y1);
		drawn++;
	}
	free(pairs);
	return n < 0 ? -1 : drawn;
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

/* "F0": kind and microbatch, "O" for a stage's optimizer step; with the stage in front
 * ("3F0", "3O") where a rank holds several stages. */
static void box_label(const PlanOp *o, int several, char *buf, size_t n)
{
	int k = several ? snprintf(buf, n, "%d", (int)o->stage) : 0;
	if (plan_ops[o->kind].role == OP_ROLE_STEP) // no microbatch
		snprintf(buf + k, n - (size_t)k, "O");
	else
		snprintf(buf + k, n - (size_t)k, "%s%d", plan_ops[plan_op_kind(o)].name, (int)o->mb);
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
	int row;           // row pitch: ROW and the memory track
	int *chunk;        // [nstages] the stage's index among its rank's stages
	int several;       // the most stages a rank holds, when more than one; else 0
	PlanMem *mem;      // [world] the memory model's figures (plan/mem.h)
	PlanMemAt **at;    // [world][nops] each op's highest point
	int64_t mem_top;   // the memory tracks' common scale: the largest peak
	int oom;
} Pic;

/* The y of rank r's row. */
static int row_y(const Pic *c, int r)
{
	return TOP + r * c->row;
}

/* Each stage's chunk (its index among the stages on its pp index, in stage order),
 * and the most stages a rank holds when that is several. */
static void pic_chunks(Pic *c)
{
	const Plan *p = c->p;
	c->chunk = calloc((size_t)p->nstages + 1, sizeof *c->chunk);
	if (!c->chunk) {
		c->oom = 1;
		return;
	}
	for (int s = 0; s < p->nstages; s++) {
		for (int t = 0; t < s; t++)
			c->chunk[s] += p->stages[t].pp == p->stages[s].pp;
		if (c->chunk[s] && c->chunk[s] + 1 > c->several)
			c->several = c->chunk[s] + 1;
	}
}

/* The memory model's track of every rank (plan_mem_track) and their common scale. */
static void pic_mem_walk(Pic *c)
{
	const Plan *p = c->p;
	c->mem = calloc((size_t)p->world, sizeof *c->mem);
	c->at = calloc((size_t)p->world, sizeof *c->at);
	for (int r = 0; c->mem && c->at && r < p->world; r++) {
		c->at[r] = malloc(((size_t)p->ranks[r].nops + 1) * sizeof **c->at);
		if (!c->at[r] || plan_mem_track(p, r, &c->mem[r], c->at[r]))
			break;
		if (c->mem[r].peak > c->mem_top)
			c->mem_top = c->mem[r].peak;
		if (r + 1 == p->world)
			return;
	}
	c->oom = 1;
}

static void pic_free(Pic *c)
{
	for (int r = 0; c->at && r < c->p->world; r++)
		free(c->at[r]);
	free(c->at);
	free(c->mem);
	free(c->chunk);
	warp_free(&c->wp);
}

/* The shade of compute op o's kind: its stage's chunk. */
static int shade(const Pic *c, const PlanOp *o)
{
	return c->chunk && o->stage >= 0 && o->stage < c->p->nstages ? c->chunk[o->stage] % SHADES
	                                                               : 0;
}

/* The y of a memory track at level b bytes (0 at its bottom, mem_top at its top). */
static double mem_y(const Pic *c, int r, int64_t b)
{
	double base = row_y(c, r) + BOX + MEM_GAP + MEM_H;
	return base - (double)MEM_H * (double)b / (double)(c->mem_top > 0 ? c->mem_top : 1);
}

/* Rank r's level `cls` (0: model state; 1: and saved activations; 2: and in flight)
 * after op i: what the track's stacked areas draw. */
static int64_t mem_level(const Pic *c, int r, int64_t i, int cls)
{
	const PlanMem *m = &c->mem[r];
	int64_t v = plan_mem_static(m);
	if (i >= 0 && cls >= 1)
		v += c->at[r][i].saved;
	if (i >= 0 && cls >= 2)
		v += c->at[r][i].comm;
	return v;
}

/* One class's stacked area of rank r: a step function that takes each op's highest
 * point from the op's start to the next op's start, the model state before the first. */
static void mem_area(Pic *c, int r, int cls)
{
	FILE *f = c->f;
	const PlanRank *pr = &c->p->ranks[r];
	double base = mem_y(c, r, 0);
	double y = mem_y(c, r, mem_level(c, r, -1, cls));
	fprintf(f, "<path fill=\"%s\" d=\"M%d,%.1f V%.1f", mem_class[cls].color, c->left, base, y);
	for (int64_t i = 0, j; i < pr->nops; i = j) {
		j = plan_is_comm(pr->ops[i].kind) ? plan_group_end(pr, i) : i + 1;
		SimOpTime t = sim_op_time(c->res, r, i);
		if (t.start < 0)
			continue;
		double yi = mem_y(c, r, mem_level(c, r, i, cls));
		if (fabs(yi - y) >= 0.05) // a step the picture shows
			fprintf(f, " H%.2f V%.1f", c->left + warp_x(&c->wp, t.start), yi);
		y = yi;
	}
	fprintf(f, " H%d V%.1f Z\"/>\n", c->left + c->plot_w, base);
}

/* Under each rank's row its memory over the step (plan_mem_track): model state, saved
 * activations and bytes in flight stacked, on one scale for all ranks (its top written
 * at the left), and the rank's peak marked with its figure. */
static void pic_mem(Pic *c)
{
	FILE *f = c->f;
	char top[32], pk[32];
	plan_mem_text(top, sizeof top, c->mem_top);
	for (int r = 0; r < c->p->world; r++) {
		const PlanMem *m = &c->mem[r];
		int64_t peak = -1, at = -1;
		for (int64_t i = -1; i < c->p->ranks[r].nops; i++) {
			int64_t v = mem_level(c, r, i, 2);
			if ((i < 0 || sim_op_time(c->res, r, i).start >= 0) && v > peak) {
				peak = v;
				at = i;
			}
		}
		fprintf(f, "<g class=\"mem\" data-rank=\"%d\" data-peak=\"%" PRId64 "\" "
		           "data-static=\"%" PRId64 "\">\n",
		        plan_world_rank(c->p, r), peak, plan_mem_static(m));
		for (int cls = 2; cls >= 0; cls--)
			mem_area(c, r, cls);
		c->shown[MARK_STATIC] = 1;
		c->shown[MARK_SAVED] |= m->peak_saved > 0;
		c->shown[MARK_INFLIGHT] |= m->peak_comm > 0;
		fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"9\" fill=\"#666\" "
		           "text-anchor=\"end\">%s</text>\n",
		        c->left - 8, mem_y(c, r, c->mem_top) + 8, top);
		fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"9\" fill=\"#666\" "
		           "text-anchor=\"end\">0</text>\n",
		        c->left - 8, mem_y(c, r, 0));
		double x = c->left + (at >= 0 ? warp_x(&c->wp, sim_op_time(c->res, r, at).start) : 0);
		double y = mem_y(c, r, peak);
		plan_mem_text(pk, sizeof pk, peak);
		fprintf(f, "<path d=\"M%.2f,%.1f l-4,-5 h8 z\" fill=\"#cc0000\"/>\n", x, y);
		fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"9\" fill=\"#cc0000\" "
		           "text-anchor=\"%s\" stroke=\"white\" stroke-width=\"2.5\" paint-order=\"stroke\" "
		           "class=\"peak\">peak %s</text>\n</g>\n",
		        x + (x > c->left + c->plot_w - 80 ? -6 : 6), y + 3,
		        x > c->left + c->plot_w - 80 ? "end" : "start", pk);
		c->shown[MARK_PEAK] = 1;
	}
}

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
	c->row = ROW + MEM_GAP + MEM_H;
	pic_chunks(c);
	pic_mem_walk(c);
	/* the narrowest box that holds the longest label, 6 px a character */
	size_t maxbox = 1;
	for (int r = 0; r < p->world && c->detail && !c->oom; r++)
		for (int64_t i = 0; i < p->ranks[r].nops; i++) {
			char lab[48];
			if (plan_is_comm(p->ranks[r].ops[i].kind))
				continue;
			box_label(&p->ranks[r].ops[i], c->several, lab, sizeof lab);
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
	c->h = TOP + p->world * c->row + 112;
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
		int y = row_y(c, r);
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
		        left + c->wp.x[k], TOP - 2, c->wp.x[k + 1] - c->wp.x[k], c->p->world * c->row);
	}
}

/* Rank r's comm group [i, j): a bar under the row, pale while it waits, red when it
 * never completes, and darker where each op moves data. */
static void pic_group(Pic *c, int r, int64_t i, int64_t j)
{
	FILE *f = c->f;
	const Plan *p = c->p;
	const PlanRank *pr = &p->ranks[r];
	int y = row_y(c, r);
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
		int y = row_y(c, r);
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
				        x0, y, x1 - x0, BOX, fill[o->kind][0] ? fill[o->kind][shade(c, o)] : "#999",
				        x1 - x0 > 4 ? "1" : "0");
				c->shown[o->kind] = 1;
				char lab[48];
				box_label(o, c->several, lab, sizeof lab);
				if (x1 - x0 + 0.01 < 6.0 * (double)strlen(lab) + 4 && o->mb >= 0 &&
				    plan_ops[o->kind].role != OP_ROLE_STEP)
					snprintf(lab, sizeof lab, "%d", (int)o->mb); // colour and shade say the rest
				if (c->detail && x1 - x0 + 0.01 >= 6.0 * (double)strlen(lab) + 4)
					fprintf(f, "<text x=\"%.2f\" y=\"%d\" class=\"lab\">%s</text>\n",
					        (x0 + x1) / 2, y + BOX / 2 + 4, lab);
			}
			i++;
		}
	}
	int64_t arrows = c->detail ? draw_transfers(f, p, c->res, &c->wp, c->left, c->row) : 0;
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
	        x, TOP - 4, x, TOP + p->world * c->row);
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
		        xs + 8, row_y(c, s->rank) + BOX / 2 + 4);
		esc(f, text);
		int64_t line = sim_op_line(p, s->rank, s->op);
		if (line)
			fprintf(f, " (line %" PRId64 ")", line);
		fputs("</text>\n", f);
	}
}

/* The axis's unit: the largest whose one fits in the span. */
static const struct {
	const char *name;
	double ns;
} time_unit[] = {{"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};

/* v with `dec` decimals, trailing zeros dropped ("0.5", "12"), into buf; its width in
 * pixels (6 a character, 10 px font). */
static double tick_text(char *buf, size_t n, double v, int dec)
{
	snprintf(buf, n, "%.*f", dec, v);
	if (strchr(buf, '.')) {
		size_t k = strlen(buf);
		while (buf[k - 1] == '0')
			buf[--k] = 0;
		if (buf[k - 1] == '.')
			buf[--k] = 0;
	}
	return 6.0 * (double)strlen(buf);
}

/* A tick at x labelled buf, when it keeps its distance from the last one drawn (at
 * *last, *last_w wide): labels never overlap.  Returns whether it was drawn. */
static int tick(Pic *c, int ay, double x, const char *buf, double w, double *last,
                double *last_w)
{
	if (x - *last < (w + *last_w) / 2 + 16)
		return 0;
	fprintf(c->f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#333\"/>\n", x,
	        ay, x, ay + 4);
	fprintf(c->f, "<text x=\"%.2f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\" "
	              "class=\"tick\">%s</text>\n",
	        x, ay + 15, buf);
	*last = x;
	*last_w = w;
	return 1;
}

/* Time axis: nice ticks (1, 2 or 5 times a power of ten) in us, ms or s, dropped where
 * their labels would touch (a stretched or compressed part of a warped axis) or where
 * they fall inside a compressed stretch, which gets a break mark instead; the end of
 * the axis (makespan or stall) labelled when it has room.  Returns the axis's y. */
static int pic_axis(Pic *c)
{
	FILE *f = c->f;
	int left = c->left, plot_w = c->plot_w;
	const Warp *wp = &c->wp;
	int ay = TOP + c->p->world * c->row + 4;
	fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", left, ay,
	        left + plot_w, ay);
	size_t u = 0;
	while (u + 1 < sizeof time_unit / sizeof time_unit[0] &&
	       (double)c->span >= time_unit[u + 1].ns)
		u++;
	double span = (double)c->span / time_unit[u].ns;
	double step = tick_step(span, c->warped ? plot_w / 50.0 : 10);
	int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
	double last = -1e9, last_w = 0;
	char buf[48];
	for (int64_t k = 0;; k++) {
		double v = (double)k * step;
		if (v > span * (1 + 1e-9))
			break;
		int64_t ns = (int64_t)llround(v * time_unit[u].ns);
		int in_gap = 0;
		if (wp->n) {
			int64_t g = find_t(wp, ns); // first breakpoint at or after ns
			in_gap = g > 0 && wp->t[g] != ns && wp->gap[g - 1];
		}
		double w = tick_text(buf, sizeof buf, v, dec);
		if (!in_gap)
			tick(c, ay, left + warp_x(wp, ns), buf, w, &last, &last_w);
	}
	double w = tick_text(buf, sizeof buf, span, dec + 1);
	tick(c, ay, left + plot_w, buf, w, &last, &last_w);
	for (int64_t k = 0; k + 1 < wp->n; k++) {
		if (!wp->gap[k])
			continue;
		double xm = left + (wp->x[k] + wp->x[k + 1]) / 2;
		fprintf(f, "<path d=\"M%.2f,%d l4,-8 M%.2f,%d l4,-8\" stroke=\"#333\" "
		           "stroke-width=\"1.2\"/>\n",
		        xm - 5, ay + 4, xm, ay + 4);
	}
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">time (%s)%s</text>\n",
	        left + plot_w, ay + 28, time_unit[u].name,
	        c->ngaps ? "; // marks a compressed stretch" : "");
	return ay;
}

/* Legend: what the picture shows, below the axis at ay. */
static void pic_legend(Pic *c, int ay)
{
	FILE *f = c->f;
	int left = c->left;
	static const struct {
		const char *label, *color;
		int shape, mark; // shape 0 box, 1 bar, 2 arrow, 3 hatch, 4 F's shades
	} legend[] = { // a NULL colour: the op kind's (fill), or the memory class's
	    {"F forward", NULL, 0, OP_F},
	    {"B input gradient", NULL, 0, OP_B},
	    {"W weight gradient", NULL, 0, OP_W},
	    {"BW fused backward", NULL, 0, OP_BW},
	    {"optimizer", NULL, 0, OP_OPTIM},
	    {NULL, NULL, 4, MARK_CHUNKS}, // its label: shades[], by the stages a rank holds
	    {"idle", "#f1f1f1", 0, MARK_IDLE},
	    {"waiting for a peer", "#bbbbbb", 1, MARK_WAIT},
	    {"moving data", "#555555", 1, MARK_MOVE},
	    {"stuck", "#cc0000", 1, MARK_STUCK},
	    {"transfer, send to receive", "#555555", 2, MARK_XFER},
	    {"no rank computing (compressed)", "", 3, MARK_GAP},
	    {"memory: model state", NULL, 0, MARK_STATIC},
	    {"saved activations", NULL, 0, MARK_SAVED},
	    {"in flight", NULL, 0, MARK_INFLIGHT},
	    {"a rank's memory peak", "#cc0000", 5, MARK_PEAK},
	};
	static const char *const shades[] = { // by the most stages a rank holds
	    "", "", "shades: a rank's 1st and 2nd stage", "shades: a rank's 1st, 2nd and 3rd stage",
	    "shades: a rank's 1st, 2nd, 3rd and 4th stage",
	    "shades: a rank's 1st to 4th stage, then again from the 1st"};
	int nshades = c->several < SHADES ? c->several : SHADES;
	int lx = left, ly = ay + 40;
	for (size_t i = 0; i < sizeof legend / sizeof legend[0]; i++) {
		if (!c->shown[legend[i].mark])
			continue;
		const char *label = legend[i].mark == MARK_CHUNKS
		                        ? shades[c->several < SHADES + 1 ? c->several : SHADES + 1]
		                        : legend[i].label;
		int lw = 18 + 6 * (int)strlen(label) + 18;
		if (lx > left && lx + lw > c->w) {
			lx = left;
			ly += 20;
		}
		const char *color = legend[i].color;
		for (int k = 0; !color && k < 3; k++)
			if (mem_class[k].mark == legend[i].mark)
				color = mem_class[k].color;
		if (!color)
			color = fill[legend[i].mark < OP_COUNT ? legend[i].mark : OP_F][0];
		if (legend[i].shape == 4)
			for (int k = 0; k < nshades; k++)
				fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"4\" height=\"14\" fill=\"%s\"/>\n",
				        lx + 4 * k, ly, fill[OP_F][k]);
		else if (legend[i].shape == 5)
			fprintf(f, "<path d=\"M%d,%d l-4,-5 h8 z\" fill=\"%s\"/>\n", lx + 7, ly + 10,
			        color);
		else if (legend[i].shape == 1)
			fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"3\" fill=\"%s\"/>\n", lx,
			        ly + 5, color);
		else if (legend[i].shape == 2)
			fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"xfer\" "
			           "marker-end=\"url(#arrow)\"/>\n",
			        lx, ly + 2, lx + 14, ly + 12);
		else
			fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\" "
			           "stroke=\"#bbb\" stroke-width=\"0.5\"/>\n",
			        lx, ly, legend[i].shape == 3 ? "url(#hatch)" : color);
		fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>\n", lx + 18, ly + 11,
		        label);
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
	c.shown[MARK_CHUNKS] = c.several;
	if (!c.oom) {
		pic_ops(&c);
		pic_mem(&c);
	}
	if (res->verdict != SIM_OK)
		pic_stall(&c);
	pic_legend(&c, pic_axis(&c));
	int oom = c.wp.oom || c.oom;
	pic_free(&c);
	fputs("</svg>\n", f);
	if (oom) // a picture without what it could not draw is not written (cli_write)
		errno = ENOMEM;
	return oom || ferror(f) ? -1 : 0;
}
