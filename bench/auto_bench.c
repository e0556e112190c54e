/* `schedule auto` figures (bench/bench_auto.sh and bench/bench_zbgrid.sh run it).
 *
 *   auto_bench speed [P M]   fast-model evaluations per second (goal: 10,000 at pp=8,
 *                            m=32 on one core), list-scheduler runs per second, and the
 *                            whole search through pipecc_compile
 *   auto_bench zb [P...]     the table against Zero Bubble's heuristic
 *                            (compiler/auto_zb.c): p in {4, 8, 16}, m in {p, 2p, 4p},
 *                            F:B:W in {1:1:1, 10:11:9, 10:12:6, 10:8:12} (one unit =
 *                            1 us, F = 10 us), communication 0, 10 %, 20 % of F, memory
 *                            caps p, 1.5p, 2p activations (pipecc: 1F1B's peak plus the
 *                            extra activations); makespans from time 0 to the last op.
 *                            Columns: the heuristic's own time, its order compiled by
 *                            pipecc (the faster tuning that fits) and run in pipesim's
 *                            overlap model, whether that fits the cap, pipecc auto's
 *                            plan in the same model, and where the order does not fit,
 *                            auto's plan under the order's own peak (@zb-mem: equal
 *                            real memory).  The summary counts both comparisons over
 *                            all configurations and over those where the heuristic's
 *                            order fits, the one at equal real memory over those where
 *                            it does not, and how many it does not fit.
 *   auto_bench grid REFS [P...]  issue 51's grid, the same 324 configurations on a
 *                            program whose tensors in flight are small beside an
 *                            activation (grid_program), caps of p, 1.5p, 2p activations
 *                            and half one more: the heuristic (compiler/auto_zb.c)
 *                            given the transfer as Zero Bubble's published heuristic is
 *                            (comm us; pipecc's link takes 1 ns more), its makespan
 *                            against the published one's (REFS: bench/zb_grid.txt), its
 *                            order's ASAP time in pipecc's link times (the fast model)
 *                            against that order compiled by pipecc and run in pipesim's
 *                            overlap model, and auto's plan against both the ASAP time
 *                            and the heuristic's own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../compiler/auto.h"
#include "../plan/link.h"
#include "../compiler/pipecc.h"
#include "../plan/mem.h"
#include "../sim/sim.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The program text: p stages of one linear layer each on p ranks. */
static char *program(int p, int m, const int fbw[3], int comm_us, const char *sched,
                     int64_t cap, const char *extra)
{
	size_t n = 4096 + (size_t)p * 64 + (extra ? strlen(extra) : 0);
	char *s = malloc(n);
	int k = snprintf(s, n, "pipeline b;\nmesh pp=%d;\nmicrobatches %d;\ninput 64x512;\n", p, m);
	for (int i = 0; i < p; i++)
		k += snprintf(s + k, n - (size_t)k, "stage s%d { linear 512;%s }\n", i,
		              i == p - 1 ? " loss mse;" : "");
	k += snprintf(s + k, n - (size_t)k, "cost * f=%dus b=%dus w=%dus;\n", fbw[0], fbw[1], fbw[2]);
	if (comm_us) // latency + ceil(bytes / bandwidth) = comm exactly (the tensor is < 1 MB)
		k += snprintf(s + k, n - (size_t)k, "link latency=%dns bandwidth=1000TB/s;\n",
		              comm_us * 1000 - 1);
	else
		k += snprintf(s + k, n - (size_t)k, "link ideal;\n");
	if (cap)
		k += snprintf(s + k, n - (size_t)k, "device memory=%lldB;\n", (long long)cap);
	if (extra)
		k += snprintf(s + k, n - (size_t)k, "%s", extra);
	else
		snprintf(s + k, n - (size_t)k, "schedule %s;\n", sched);
	return s;
}

static Plan *compile_tuned(const char *src, FILE *sink, int tune)
{
	PipeccOptions o = {.tune_overlap = tune};
	Diag d;
	diag_init(&d, "bench.pipe", src, strlen(src), sink);
	return pipecc_compile("bench.pipe", src, strlen(src), &o, &d);
}

static Plan *compile(const char *src, FILE *sink)
{
	return compile_tuned(src, sink, 0);
}

static int64_t overlap_ms(const Plan *p)
{
	SimOptions so = {.model = SIM_OVERLAP};
	SimResult r;
	int rc = sim_run(p, &so, &r);
	int64_t ms = rc == 0 ? r.makespan : -1;
	sim_result_free(&r);
	return ms;
}

/* The fast model's facts of a lowered plan of a chain of one stage per rank (heap). */
typedef struct {
	AutoModel md;
	int64_t (*cost)[3], (*save)[4], *stat, *outb, *inb;
	AutoEdge *edges;
	int *stage_pp, *ein, *eout, *ioff, *ooff;
} Model;

static void model_from_plan(Model *x, const Plan *plan)
{
	int ns = plan->nstages, p = plan->dims[DIM_PP];
	x->cost = calloc((size_t)ns, sizeof *x->cost);
	x->save = calloc((size_t)ns, sizeof *x->save);
	x->stat = calloc((size_t)p, sizeof *x->stat);
	x->outb = calloc((size_t)ns, sizeof *x->outb), x->inb = calloc((size_t)ns, sizeof *x->inb);
	x->edges = calloc((size_t)ns, sizeof *x->edges);
	x->stage_pp = calloc((size_t)ns, sizeof(int)), x->ein = calloc((size_t)ns, sizeof(int));
	x->eout = calloc((size_t)ns, sizeof(int)), x->ioff = calloc((size_t)ns + 1, sizeof(int));
	x->ooff = calloc((size_t)ns + 1, sizeof(int));
	for (int s = 0; s < ns; s++) {
		const PlanStage *st = &plan->stages[s];
		memcpy(x->cost[s], st->cost, sizeof x->cost[s]);
		x->save[s][0] = st->save_fb, x->save[s][1] = st->save_fw, x->save[s][2] = st->save_bw;
		x->save[s][3] = st->save_re;
		x->stage_pp[s] = st->pp;
		x->outb[s] = (int64_t)plan->rows * st->out * 4;
		x->inb[s] = plan_stage_in_bytes(plan, s);
	}
	for (int e = 0; e < plan->nedges; e++) { // edge e runs from stage e to e + 1
		x->edges[e] = (AutoEdge){plan->edges[e].src, plan->edges[e].dst,
		                         plan_link_ns(plan, 0, plan->edges[e].bytes), 0};
		x->ein[e] = x->eout[e] = e;
	}
	for (int s = 0; s <= ns; s++) {
		x->ioff[s] = s > 0 ? s - 1 : 0;
		x->ooff[s] = s < ns - 1 ? s : ns - 1;
	}
	x->md = (AutoModel){.pp = p, .m = plan->microbatches, .ns = ns, .ne = plan->nedges,
	                    .stage_pp = x->stage_pp, .cost = x->cost, .save = x->save,
	                    .stat = x->stat, .edges = x->edges, .ein = x->ein, .ioff = x->ioff,
	                    .eout = x->eout, .ooff = x->ooff, .outb = x->outb, .inb = x->inb};
	for (int r = 0; r < plan->world; r++) { // static bytes per pipeline index
		PlanMem mm;
		if (plan->ranks[r].coord[DIM_DP] == 0 && plan->ranks[r].coord[DIM_TP] == 0 &&
		    plan_mem_rank(plan, r, &mm) == 0)
			x->stat[plan->ranks[r].coord[DIM_PP]] = mm.params + mm.grads + mm.optim;
	}
}

static void model_free(Model *x)
{
	free(x->cost), free(x->save), free(x->stat), free(x->edges), free(x->stage_pp);
	free(x->outb), free(x->inb);
	free(x->ein), free(x->eout), free(x->ioff), free(x->ooff);
}

static int speed(int p, int m)
{
	static const int fbw[3] = {10, 11, 9};
	FILE *sink = fopen("/dev/null", "w");
	char *src = program(p, m, fbw, 1, "auto", 0, NULL);
	double t0 = now();
	int runs = 0;
	Plan *plan = NULL;
	while (runs < 3 || now() - t0 < 1.0) {
		plan_free(plan);
		plan = compile(src, sink);
		runs++;
	}
	double whole = (now() - t0) / runs;
	if (!plan) {
		fprintf(stderr, "auto_bench: the program does not compile\n");
		return 1;
	}
	/* The fast model alone, on the plan's own stages and the chosen order. */
	Model x;
	model_from_plan(&x, plan);
	const AutoModel md = x.md;
	int ns = md.ns;
	SchedAct **acts = calloc((size_t)p, sizeof *acts);
	int *nacts = calloc((size_t)p, sizeof *nacts);
	for (int q = 0; q < p; q++)
		acts[q] = calloc((size_t)3 * m * ns, sizeof **acts);
	AutoListOpt lo = {.warm = 1};
	t0 = now();
	int lists = 0;
	while (lists < 100 || now() - t0 < 0.5) {
		auto_list_fill(&md, &lo, acts, nacts, NULL);
		lists++;
	}
	double tl = (now() - t0) / lists;
	AutoScratch *sc = auto_scratch_new(&md);
	AutoFig f;
	t0 = now();
	long evals = 0;
	while (evals < 1000 || now() - t0 < 1.0) {
		auto_eval(&md, sc, acts, nacts, &f);
		evals++;
	}
	double te = (now() - t0) / (double)evals;
	int64_t ops = 0;
	for (int q = 0; q < p; q++)
		ops += nacts[q];
	printf("pp=%d m=%d (%lld compute ops, F:B:W 10:11:9 us, comm 1 us), one core:\n", p, m,
	       (long long)ops);
	printf("  fast-model evaluations: %.0f per second (%.2f us each; goal 10000 per second: "
	       "%s)\n", 1 / te, te * 1e6, 1 / te >= 10000 ? "met" : "missed");
	printf("  list-scheduler orders:  %.0f per second (%.2f us each)\n", 1 / tl, tl * 1e6);
	printf("  whole search (pipecc_compile with schedule auto, confirmation included): "
	       "%.1f ms; chose %s, makespan %.3f us\n", whole * 1e3, plan->schedule,
	       (double)f.makespan / 1000);
	for (int q = 0; q < p; q++)
		free(acts[q]);
	free(acts), free(nacts), free(sc);
	model_free(&x);
	plan_free(plan);
	free(src);
	fclose(sink);
	return 0;
}

/* ZB's order as a custom schedule body. */
static char *zb_custom(SchedAct *const *acts, const int *nacts, int p)
{
	size_t n = 64;
	for (int j = 0; j < p; j++)
		n += 32 + (size_t)nacts[j] * 16;
	char *s = malloc(n);
	size_t k = (size_t)snprintf(s, n, "schedule custom {\n");
	for (int j = 0; j < p; j++) {
		k += (size_t)snprintf(s + k, n - k, "rank %d:", j);
		for (int i = 0; i < nacts[j]; i++)
			k += (size_t)snprintf(s + k, n - k, " %d%c%d", acts[j][i].stage,
			                      "FIW"[acts[j][i].kind],
			                      acts[j][i].mb);
		k += (size_t)snprintf(s + k, n - k, ";\n");
	}
	snprintf(s + k, n - k, "}\n");
	return s;
}

typedef struct {
	int n, eq, faster, slower, none;
	double logsum;
} Tally;

static void tally(Tally *t, double zb, double au)
{
	if (zb <= 0 || au <= 0) {
		t->none++;
		return;
	}
	t->n++;
	double r = au / zb;
	t->logsum += log(r);
	if (fabs(au - zb) < 1e-6)
		t->eq++;
	else if (au < zb)
		t->faster++;
	else
		t->slower++;
}

/* The same against a time zb that pipecc's links may lengthen by up to tol (1 ns a
 * transfer): auto within [zb, zb + tol] counts as equal. */
static void tally_within(Tally *t, double zb, double au, double tol)
{
	tally(t, zb, au >= zb && au <= zb + tol ? zb : au);
}

static void report(const char *what, const Tally *t)
{
	printf("%s: %d configs: auto equal %d, faster %d, slower %d; geometric mean auto/zb %.4f"
	       " (%d without a number)\n", what, t->n, t->eq, t->faster, t->slower,
	       t->n ? exp(t->logsum / t->n) : 0, t->none);
}

/* ZB's order compiled by pipecc under both communication tunings (as auto weighs its
 * own): the faster one that fits the cap, else the faster one (ties: the smaller peak);
 * its time and peak. */
static void zb_compiled(const char *src, int64_t cap, FILE *sink, double *ms, int64_t *peak)
{
	int fits = 0;
	for (int tune = 0; tune < 2; tune++) {
		Plan *zp = compile_tuned(src, sink, tune);
		if (!zp)
			continue;
		double t = (double)overlap_ms(zp) / 1000;
		int64_t *pk = calloc((size_t)zp->world, sizeof *pk);
		int64_t k = plan_mem_peaks(zp, pk);
		free(pk);
		plan_free(zp);
		int f = k >= 0 && k <= cap;
		if (t > 0 && (*ms < 0 || f > fits || (f == fits && (t < *ms || (t == *ms && k < *peak))))) {
			*ms = t;
			*peak = k;
			fits = f;
		}
	}
}

/* auto's plan of program text src (freed here): its overlap-model time (-1: none fits). */
static double auto_at_src(char *src, FILE *sink, char *chose, size_t n, double *dt)
{
	double t0 = now(), au = -1;
	Plan *ap = compile(src, sink);
	*dt = now() - t0;
	snprintf(chose, n, "none fits");
	if (ap) {
		au = (double)overlap_ms(ap) / 1000;
		snprintf(chose, n, "%s", ap->schedule);
	}
	plan_free(ap);
	free(src);
	return au;
}

/* auto's plan under cap: its overlap-model time (-1: none fits) and its name. */
static double auto_at(int p, int m, const int fbw[3], int comm, int64_t cap, FILE *sink,
                      char *chose, size_t n, double *dt)
{
	return auto_at_src(program(p, m, fbw, comm, "auto", cap, NULL), sink, chose, n, dt);
}

/* One (p, m, F:B:W, comm) setting at three caps; tallies the comparisons: tm against
 * the heuristic's own times, ts against its order in pipesim ([0] all, [1] where it fits
 * pipecc's cap), te at equal real memory (where it does not fit: auto under the peak of
 * the heuristic's compiled order). */
static void zb_row(int p, int m, const int fbw[3], int comm, FILE *sink, Tally tm[2], Tally ts[2],
                   Tally *te)
{
	char *src = program(p, m, fbw, comm, "1f1b", 0, NULL);
	Plan *ref = compile(src, sink);
	free(src);
	if (!ref) {
		printf("p=%d m=%d: 1f1b does not compile\n", p, m);
		return;
	}
	int64_t *peaks = calloc((size_t)ref->world, sizeof *peaks);
	int64_t peak1 = plan_mem_peaks(ref, peaks), act = ref->stages[0].save_fb + ref->stages[0].save_fw;
	free(peaks);
	Model x;
	model_from_plan(&x, ref);
	plan_free(ref);
	int64_t *maxmem = calloc((size_t)p, sizeof *maxmem);
	SchedAct **acts = calloc((size_t)p, sizeof *acts);
	int *nacts = calloc((size_t)p, sizeof *nacts);
	for (int j = 0; j < p; j++)
		acts[j] = calloc((size_t)3 * m, sizeof **acts);
	for (int h = 2; h <= 4; h++) { // cap h/2 * p activations
		int64_t units2 = (int64_t)h * p; // twice the activations
		for (int j = 0; j < p; j++)
			maxmem[j] = units2 * act / 2;
		AutoZbOut z = {0};
		double zb = -1, zs = -1, ae = -1, dt, dt2;
		int64_t cap = peak1 + (units2 - 2 * p) * act / 2, zpeak = -1;
		if (auto_zb_fill(&x.md, maxmem, acts, nacts, &z) == 0) {
			zb = (double)z.makespan / 1000;
			char *body = zb_custom(acts, nacts, p);
			char *s2 = program(p, m, fbw, comm, NULL, 0, body);
			zb_compiled(s2, cap, sink, &zs, &zpeak);
			free(s2);
			free(body);
		}
		char chose[64], chose2[64] = "";
		double au = auto_at(p, m, fbw, comm, cap, sink, chose, sizeof chose, &dt);
		int zfits = zpeak >= 0 && zpeak <= cap;
		if (zpeak > cap)
			ae = auto_at(p, m, fbw, comm, zpeak, sink, chose2, sizeof chose2, &dt2);
		char ratio[16], eq[16] = "-";
		snprintf(ratio, sizeof ratio, "%d:%d:%d", fbw[0], fbw[1], fbw[2]);
		if (ae > 0)
			snprintf(eq, sizeof eq, "%.0f", ae);
		printf("%3d %4d %-8s %4d %5.1fp %10.0f %10.0f %-3s %10.0f %8.2f%% %9s %7.0f  %s%s%s\n",
		       p, m, ratio, comm, h / 2.0, zb, zs, zpeak < 0 ? "-" : zfits ? "yes" : "no", au,
		       zb > 0 && au > 0 ? 100 * (au - zb) / zb : 0, eq, dt * 1e3, chose,
		       ae > 0 ? "; at its memory " : "", chose2);
		tally(&tm[0], zb, au);
		tally(&ts[0], zs, au);
		if (zfits) {
			tally(&tm[1], zb, au);
			tally(&ts[1], zs, au);
		} else if (zpeak > cap) {
			tally(te, zs, ae);
		}
		fflush(stdout);
	}
	for (int j = 0; j < p; j++)
		free(acts[j]);
	free(acts), free(nacts), free(maxmem);
	model_free(&x);
}

static int zb_table(int np, const int *ps)
{
	static const int ratios[4][3] = {{10, 10, 10}, {10, 11, 9}, {10, 12, 6}, {10, 8, 12}};
	FILE *sink = fopen("/dev/null", "w");
	Tally tm[2] = {{0}}, ts[2] = {{0}}, te = {0};
	printf("  p    m F:B:W    comm   cap    zb(own) zb(pipesim) fits?   auto    auto-zb @zb-mem ms/search  auto chose\n");
	for (int a = 0; a < np; a++) {
		int p = ps[a];
		for (int mm = 1; mm <= 4; mm *= 2) {
			for (int r = 0; r < 4; r++)
				for (int c = 0; c <= 2; c++)
					zb_row(p, mm * p, ratios[r], c, sink, tm, ts, &te);
		}
	}
	report("all: against the heuristic's own times", &tm[0]);
	report("all: against its order compiled by pipecc, pipesim overlap", &ts[0]);
	report("where ZB's order fits pipecc's cap: against its own times", &tm[1]);
	report("where ZB's order fits pipecc's cap: against its order in pipesim", &ts[1]);
	report("where it does not, at equal real memory (auto's cap: the peak of ZB's compiled "
	       "order): against its order in pipesim", &te);
	printf("%d configurations: the heuristic finds no order in %d; its order fits pipecc's memory"
	       " model in %d, not in %d (pipecc counts the tensors in flight, the heuristic does"
	       " not)\n", tm[0].n + tm[0].none, tm[0].none, tm[1].n, tm[0].n - tm[1].n);
	fclose(sink);
	return 0;
}

/* ---- the grid of issue 51: auto against Zero Bubble's heuristic as published ---- */

/* The grid's program: p stages of `linear 1024; relu; linear 1` on p ranks, an input of
 * 1024 x 1, so that the tensors sent are 4 KB and an activation 8 MB: the tensors in
 * flight fit in the half activation the cap leaves over p, 1.5p or 2p activations.  A
 * transfer of comm us is `latency=comm us bandwidth=1000TB/s` (pipecc's transfer time:
 * comm us + 1 ns, the bandwidth term rounded up), or an ideal link. */
static char *grid_program(int p, int m, const int fbw[3], int comm, int64_t cap, const char *body)
{
	size_t n = 4096 + (size_t)p * 64 + (body ? strlen(body) : 0);
	char *s = malloc(n);
	int k = snprintf(s, n, "pipeline zbgrid;\nmesh pp=%d;\nmicrobatches %d;\ninput 1024x1;\n",
	                 p, m);
	for (int i = 0; i < p; i++)
		k += snprintf(s + k, n - (size_t)k, "stage s%d { linear 1024; relu; linear 1;%s }\n", i,
		              i == p - 1 ? " loss mse;" : "");
	k += snprintf(s + k, n - (size_t)k, "cost * f=%dus b=%dus w=%dus;\n", fbw[0], fbw[1], fbw[2]);
	if (comm)
		k += snprintf(s + k, n - (size_t)k, "link latency=%dus bandwidth=1000TB/s;\n", comm);
	else
		k += snprintf(s + k, n - (size_t)k, "link ideal;\n");
	if (cap)
		k += snprintf(s + k, n - (size_t)k, "device memory=%lldB;\n", (long long)cap);
	snprintf(s + k, n - (size_t)k, "%s", body ? body : "schedule auto;\n");
	return s;
}

/* Zero Bubble's published makespans of the grid (bench/zb_grid.txt, ns), one line per
 * configuration `p m f b w comm cap2 makespan span`; NULL when the file is not there. */
typedef struct {
	int key[7];
	double makespan;
} ZbRef;

static ZbRef *read_refs(const char *path, int *n)
{
	FILE *f = fopen(path, "r");
	*n = 0;
	if (!f)
		return NULL;
	ZbRef *r = NULL;
	int cap = 0;
	char line[256];
	while (fgets(line, sizeof line, f)) {
		ZbRef x;
		double span;
		if (line[0] == '#' ||
		    sscanf(line, "%d %d %d %d %d %d %d %lf %lf", &x.key[0], &x.key[1], &x.key[2],
		           &x.key[3], &x.key[4], &x.key[5], &x.key[6], &x.makespan, &span) != 9)
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 512;
			r = realloc(r, (size_t)cap * sizeof *r);
		}
		r[(*n)++] = x;
	}
	fclose(f);
	return r;
}

static const ZbRef *find_ref(const ZbRef *r, int n, const int key[7])
{
	for (int i = 0; i < n; i++)
		if (!memcmp(r[i].key, key, sizeof r[i].key))
			return &r[i];
	return NULL;
}

typedef struct {
	int rows, ref_rows, ref_match; // our heuristic's makespan is the published one's
	int fits, exact, lowered_over; // its order fits the cap; then compiles to its ASAP
	int64_t worst_lowered;         // time, or not (ns over it at most)
	Tally asap, own;               // where it fits: auto against that ASAP time and
	double worst_asap, worst_own;  // against the heuristic's own; worst auto/zb
	char worst_asap_at[96], worst_own_at[96];
	int nofit_auto;                // where it does not fit: auto found a plan
	int at_bound, by_cap[3][2];    // auto's time is the lower bound (grid_bound); per cap
	                               // (p, 1.5p, 2p): at it, rows
	double worst_bound;            // the largest auto/bound
	char worst_bound_at[96];
} Grid;

/* A lower bound on any order's step on the grid's pipeline, in ns, whatever the cap: the
 * last rank starts its first F only after p - 1 forwards and transfers and then has
 * m (F + B + W) to do; the first rank starts its first backward only after the first
 * microbatch went through every stage's F and back through p - 1 stages' B, and then has
 * m (B + W) to do.  xfer: a transfer's time (pipecc's link). */
static int64_t grid_bound(int p, int m, const int fbw[3], int64_t xfer)
{
	int64_t f = fbw[0] * 1000LL, b = fbw[1] * 1000LL, w = fbw[2] * 1000LL;
	int64_t last = (p - 1) * (f + xfer) + m * (f + b + w);
	int64_t first = p * f + (p - 1) * b + 2 * (p - 1) * xfer + m * (b + w);
	return last > first ? last : first;
}

static void worst(double *w, char *at, size_t n, double r, const char *what)
{
	if (r > *w) {
		*w = r;
		snprintf(at, n, "%s", what);
	}
}

/* One configuration: cap2 is twice the cap in activations. */
static void grid_row(int p, int m, const int fbw[3], int comm, int cap2, const ZbRef *refs,
                     int nrefs, FILE *sink, Grid *g)
{
	char *src = grid_program(p, m, fbw, comm, 0, "schedule 1f1b;\n");
	Plan *ref = compile(src, sink);
	free(src);
	if (!ref) {
		printf("p=%d m=%d: 1f1b does not compile\n", p, m);
		return;
	}
	Model x;
	model_from_plan(&x, ref);
	int64_t act = ref->stages[0].save_fb + ref->stages[0].save_fw, stat = 0;
	plan_free(ref);
	for (int j = 0; j < p; j++)
		stat = x.stat[j] > stat ? x.stat[j] : stat;
	int64_t cap = stat + (int64_t)(cap2 + 1) * act / 2; // the cap and half an activation
	/* The heuristic as published is given the transfer, comm us: the link's latency. */
	AutoEdge *exact = calloc((size_t)p, sizeof *exact);
	memcpy(exact, x.edges, (size_t)(p - 1) * sizeof *exact);
	for (int e = 0; e < p - 1; e++)
		exact[e].ns = (int64_t)comm * 1000;
	AutoModel zm = x.md;
	zm.edges = exact;
	int64_t *maxmem = calloc((size_t)p, sizeof *maxmem);
	SchedAct **acts = calloc((size_t)p, sizeof *acts);
	int *nacts = calloc((size_t)p, sizeof *nacts);
	for (int j = 0; j < p; j++) {
		acts[j] = calloc((size_t)3 * m, sizeof **acts);
		maxmem[j] = cap - x.stat[j];
	}
	AutoZbOut z = {0};
	double own = -1, asap = -1, low = -1;
	int64_t zpeak = -1;
	int key[7] = {p, m, fbw[0], fbw[1], fbw[2], comm, cap2};
	const ZbRef *r = find_ref(refs, nrefs, key);
	char what[96];
	snprintf(what, sizeof what, "p=%d m=%d %d:%d:%d comm %d cap %gp", p, m, fbw[0], fbw[1],
	         fbw[2], comm, cap2 / 2.0 / p);
	g->rows++;
	if (auto_zb_fill(&zm, maxmem, acts, nacts, &z) == 0) {
		own = (double)z.makespan / 1000;
		AutoScratch *sc = auto_scratch_new(&x.md); // pipecc's link times
		AutoFig f;
		auto_eval(&x.md, sc, acts, nacts, &f);
		free(sc);
		asap = (double)f.makespan / 1000;
		char *body = zb_custom(acts, nacts, p);
		char *s2 = grid_program(p, m, fbw, comm, 0, body);
		zb_compiled(s2, cap, sink, &low, &zpeak);
		free(s2);
		free(body);
	}
	if (r) {
		g->ref_rows++;
		g->ref_match += r->makespan / 1000 == own;
	}
	char chose[64];
	double dt, au = auto_at_src(grid_program(p, m, fbw, comm, cap, NULL), sink, chose,
	                            sizeof chose, &dt);
	int fits = zpeak >= 0 && zpeak <= cap;
	double bound = (double)grid_bound(p, m, fbw, x.edges[0].ns) / 1000;
	if (au > 0) {
		/* pipecc's links, as auto's times: the same within 1 ns a transfer of the step */
		int at = au - bound <= 2.0 * (p - 1) * m / 1000 + 1e-9;
		g->at_bound += at;
		g->by_cap[cap2 / p - 2][0] += at;
		g->by_cap[cap2 / p - 2][1]++;
		worst(&g->worst_bound, g->worst_bound_at, sizeof g->worst_bound_at, au / bound, what);
	}
	printf("%3d %4d %2d:%2d:%2d %4d %4.1fp %10.3f %9s %10.3f %10.3f %-3s %10.3f %7.0f  %s\n", p,
	       m, fbw[0], fbw[1], fbw[2], comm, cap2 / 2.0 / p, own,
	       r ? (r->makespan / 1000 == own ? "same" : "DIFFERS") : "-", asap, low,
	       zpeak < 0 ? "-" : fits ? "yes" : "no", au, dt * 1e3, chose);
	if (fits) {
		g->fits++;
		int64_t over = (int64_t)((low - asap) * 1000 + 0.5);
		g->exact += over == 0;
		g->lowered_over += over != 0;
		g->worst_lowered = over > g->worst_lowered ? over : g->worst_lowered;
		tally(&g->asap, asap, au);
		worst(&g->worst_asap, g->worst_asap_at, sizeof g->worst_asap_at, au / asap, what);
		/* Against its own time: pipecc's links take 1 ns more a transfer, so a time
		 * within 1 ns per transfer of the step (2(p-1)m) counts as the same. */
		tally_within(&g->own, own, au, 2.0 * (p - 1) * m / 1000);
		worst(&g->worst_own, g->worst_own_at, sizeof g->worst_own_at, au / own, what);
	} else if (au > 0) {
		g->nofit_auto++;
	}
	fflush(stdout);
	for (int j = 0; j < p; j++)
		free(acts[j]);
	free(acts), free(nacts), free(maxmem), free(exact);
	model_free(&x);
}

static int grid_table(int np, const int *ps, const char *refpath)
{
	static const int ratios[4][3] = {{10, 10, 10}, {10, 11, 9}, {10, 12, 6}, {10, 8, 12}};
	FILE *sink = fopen("/dev/null", "w");
	int nrefs;
	ZbRef *refs = read_refs(refpath, &nrefs);
	Grid g = {.worst_asap = 0, .worst_own = 0};
	printf("  p    m F:B:W    comm  cap   zb(own)  published   zb(ASAP) zb(pipesim) fits?    auto ms/search  auto chose\n");
	for (int a = 0; a < np; a++)
		for (int mm = 1; mm <= 4; mm *= 2)
			for (int r = 0; r < 4; r++)
				for (int c = 0; c <= 2; c++)
					for (int h = 2; h <= 4; h++)
						grid_row(ps[a], mm * ps[a], ratios[r], c, h * ps[a], refs, nrefs,
						         sink, &g);
	printf("%d configurations; our heuristic (compiler/auto_zb.c) gives the makespan of Zero "
	       "Bubble's published one (%s) in %d of %d\n", g.rows, refpath, g.ref_match, g.ref_rows);
	printf("its order fits the cap in %d; there it compiles to its ASAP time (the fast model, "
	       "pipecc's link times) in %d, slower in %d (by %lld ns at most)\n", g.fits, g.exact,
	       g.lowered_over, (long long)g.worst_lowered);
	report("where it fits: auto against that order's ASAP time", &g.asap);
	printf("  worst auto/zb %.4f (%s)\n", g.worst_asap, g.worst_asap_at);
	report("where it fits: auto against the heuristic's own time (equal: within 1 ns a transfer)",
	       &g.own);
	printf("  worst auto/zb %.4f (%s)\n", g.worst_own, g.worst_own_at);
	printf("where it does not fit (%d): auto finds a plan in %d\n", g.rows - g.fits, g.nofit_auto);
	printf("auto at the lower bound (no order can be faster, grid_bound): %d of %d; largest "
	       "auto/bound %.4f (%s); at a cap of p %d of %d, 1.5p %d of %d, 2p %d of %d\n",
	       g.at_bound, g.rows, g.worst_bound, g.worst_bound_at, g.by_cap[0][0], g.by_cap[0][1],
	       g.by_cap[1][0], g.by_cap[1][1], g.by_cap[2][0], g.by_cap[2][1]);
	free(refs);
	fclose(sink);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "speed"))
		return speed(argc > 2 ? atoi(argv[2]) : 8, argc > 3 ? atoi(argv[3]) : 32);
	if (argc >= 2 && !strcmp(argv[1], "zb")) {
		int ps[8] = {4, 8, 16}, np = 3;
		if (argc > 2) {
			np = 0;
			for (int i = 2; i < argc && np < 8; i++)
				ps[np++] = atoi(argv[i]);
		}
		return zb_table(np, ps);
	}
	if (argc >= 3 && !strcmp(argv[1], "grid")) {
		int ps[8] = {4, 8, 16}, np = 3;
		if (argc > 3) {
			np = 0;
			for (int i = 3; i < argc && np < 8; i++)
				ps[np++] = atoi(argv[i]);
		}
		return grid_table(np, ps, argv[2]);
	}
	fprintf(stderr, "usage: auto_bench speed [P M] | zb [P...] | grid REFS [P...]\n");
	return 2;
}
