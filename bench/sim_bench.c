/* Simulator benchmark: builds a 1F1B plan of about N ops in memory (exact-size op
 * arrays, so the plan costs its 24 bytes per op and no more), verifies it, simulates it
 * and prints one line of figures: seconds and ops per second for each phase, peak
 * resident memory and bytes per op.  One process per size, so peak RSS is that size's.
 * The simulation is timed in thread CPU time, best of three runs, so that other load on
 * a shared machine does not count; the other phases in wall-clock time.
 *
 * The op lists are what pipecc's lowering emits for 1F1B: before each compute op the
 * receives it needs, after it the sends it feeds, and all communication between two
 * compute ops posted as one group.
 *
 *   sim_bench OPS [PP] [strict|overlap] [record]   (optionally --write FILE) */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "../sim/sim.h"
#include "../plan/io.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CPU time of this thread: a shared machine's other load does not count against us. */
static double cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long peak_rss_kb(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return u.ru_maxrss;
}

typedef struct {
	PlanRank *r;
	int32_t g;      // next group number
	int open;       // a group is open since the last compute op
} Emit;

static void comm(Emit *e, PlanOp op)
{
	if (!e->open) {
		e->g++;
		e->open = 1;
	}
	op.group = e->g;
	e->r->ops[e->r->nops++] = op;
}

static void compute(Emit *e, int kind, int stage, int mb)
{
	e->open = 0;
	e->r->ops[e->r->nops++] = (PlanOp){.kind = kind, .stage = stage, .mb = mb, .peer = -1,
	                                   .group = -1, .route = -1};
}

/* F of (s, mb): its activation in, the forward, its activation out. */
static void fwd(Emit *e, int s, int pp, int mb, PlanOp *ra, PlanOp *sa)
{
	if (s > 0)
		ra->mb = mb, comm(e, *ra);
	compute(e, OP_F, s, mb);
	if (s < pp - 1)
		sa->mb = mb, comm(e, *sa);
}

static void bwd(Emit *e, int s, int pp, int mb, PlanOp *rg, PlanOp *sg)
{
	if (s < pp - 1)
		rg->mb = mb, comm(e, *rg);
	compute(e, OP_BW, s, mb);
	if (s > 0)
		sg->mb = mb, comm(e, *sg);
}

static Plan *build(int pp, int m)
{
	Plan *p = plan_new();
	p->name = strdup("bench");
	p->source = strdup("-");
	p->schedule = strdup("1f1b");
	p->ndims = 3;
	p->dims[DIM_PP] = pp;
	p->world = pp;
	p->microbatches = m;
	p->rows = 4;
	p->cols = 8;
	p->link_ideal = 0;
	p->latency_ns = 2000;
	p->bandwidth = 50e9;
	p->nstages = pp;
	p->stages = calloc((size_t)pp, sizeof *p->stages);
	for (int s = 0; s < pp; s++) {
		PlanStage *st = &p->stages[s];
		char name[16];
		snprintf(name, sizeof name, "s%d", s);
		st->name = strdup(name);
		st->pp = s;
		st->in = st->out = 8;
		st->nlayers = 2;
		st->layers = calloc(2, sizeof *st->layers);
		st->layers[0] = (PlanLayer){.kind = LAYER_LINEAR, .in = 8, .out = 8};
		st->layers[1] = (PlanLayer){.kind = s == pp - 1 ? LAYER_MSE : LAYER_RELU, .in = 8, .out = 8};
		st->cost[0] = 1000;
		st->cost[1] = 1000;
		st->cost[2] = 1000;
		st->params = 72;
		st->save_fb = st->save_fw = st->save_bw = 128;
	}
	p->nedges = pp - 1;
	p->edges = calloc((size_t)(pp > 1 ? pp - 1 : 1), sizeof *p->edges);
	p->nroutes = 2 * (pp - 1);
	p->routes = calloc((size_t)(pp > 1 ? 2 * (pp - 1) : 1), sizeof *p->routes);
	for (int e = 0; e < pp - 1; e++) {
		p->edges[e] = (PlanEdge){.src = e, .dst = e + 1, .bytes = 128};
		p->routes[2 * e] = (PlanRoute){.edge = e, .dir = DIR_ACT, .src_rank = e, .dst_rank = e + 1,
		                               .src_dev = e, .dst_dev = e + 1, .inverse_of = -1};
		p->routes[2 * e + 1] = (PlanRoute){.edge = e, .dir = DIR_GRAD, .src_rank = e + 1, .dst_rank = e,
		                                   .src_dev = e + 1, .dst_dev = e, .inverse_of = 2 * e};
	}
	p->ranks = calloc((size_t)pp, sizeof *p->ranks);
	for (int s = 0; s < pp; s++) {
		PlanRank *r = &p->ranks[s];
		r->coord[DIM_PP] = s;
		r->device = s;
		r->npeers = (s > 0) + (s < pp - 1);
		r->peers = calloc(2, sizeof *r->peers);
		int k = 0;
		if (s > 0)
			r->peers[k++] = (PlanPeer){s, s - 1, 1, s - 1, s - 1, 0};
		if (s < pp - 1)
			r->peers[k++] = (PlanPeer){s, s, 0, s + 1, s + 1, 0};
		int64_t n = (int64_t)m * (2 + 2 * (s > 0) + 2 * (s < pp - 1)) + 1;
		r->ops = malloc((size_t)n * sizeof *r->ops);
		r->ops_cap = n;
		Emit e = {.r = r, .g = -1};
		int warm = pp - 1 - s < m ? pp - 1 - s : m;
		int f = 0, b = 0;
		PlanOp ra = {.kind = OP_RECV, .dir = DIR_ACT, .stage = s - 1, .peer = s - 1,
		             .route = 2 * (s - 1)}; // 128 bytes: the edge's
		PlanOp sa = {.kind = OP_SEND, .dir = DIR_ACT, .stage = s, .peer = s + 1,
		             .route = 2 * s}; // 128 bytes: the edge's
		PlanOp rg = {.kind = OP_RECV, .dir = DIR_GRAD, .stage = s, .peer = s + 1,
		             .route = 2 * s + 1}; // 128 bytes: the edge's
		PlanOp sg = {.kind = OP_SEND, .dir = DIR_GRAD, .stage = s - 1, .peer = s - 1,
		             .route = 2 * (s - 1) + 1}; // 128 bytes: the edge's
		while (f < warm)
			fwd(&e, s, pp, f++, &ra, &sa);
		while (f < m) {
			fwd(&e, s, pp, f++, &ra, &sa);
			bwd(&e, s, pp, b++, &rg, &sg);
		}
		while (b < m)
			bwd(&e, s, pp, b++, &rg, &sg);
		compute(&e, OP_OPTIM, s, -1);
	}
	return p;
}

int main(int argc, char **argv)
{
	const char *write_to = NULL;
	int ai = 1;
	if (argc > 2 && !strcmp(argv[1], "--write")) {
		write_to = argv[2];
		ai = 3;
	}
	if (argc - ai < 1) {
		fprintf(stderr, "usage: sim_bench [--write FILE] OPS [PP] [strict|overlap] [record]\n");
		return 2;
	}
	int64_t target = atoll(argv[ai]);
	int pp = argc - ai > 1 ? atoi(argv[ai + 1]) : 16;
	int model = argc - ai > 2 ? sim_model_parse(argv[ai + 2]) : SIM_STRICT;
	int record = argc - ai > 3 && !strcmp(argv[ai + 3], "record");
	if (pp < 2 || model < 0 || target < 100) {
		fprintf(stderr, "sim_bench: bad arguments\n");
		return 2;
	}
	int m = (int)(target / (6 * (int64_t)pp - 4));
	double t0 = now();
	Plan *p = build(pp, m);
	double t1 = now();
	int64_t ops = plan_total_ops(p);
	if (write_to) {
		FILE *f = fopen(write_to, "w");
		if (!f || plan_write(p, f) || fclose(f)) {
			fprintf(stderr, "sim_bench: cannot write %s\n", write_to);
			return 1;
		}
		printf("wrote %s: %lld ops\n", write_to, (long long)ops);
		plan_free(p);
		return 0;
	}
	PlanError err;
	double t2 = now();
	if (plan_verify(p, &err)) {
		fprintf(stderr, "sim_bench: generated plan does not verify: %s\n", err.msg);
		return 1;
	}
	double tv = now();
	/* Best of three runs: the machine may be shared. */
	SimOptions o = {.model = model, .record_ops = record};
	SimResult res;
	double best = 1e30, t3 = 0, t4 = 0;
	for (int rep = 0; rep < 3; rep++) {
		if (rep)
			sim_result_free(&res);
		double a = cpu_now();
		int rc = sim_run(p, &o, &res);
		double b = cpu_now();
		if (rc != 0) {
			fprintf(stderr, "sim_bench: run failed: %s\n", res.message);
			return 1;
		}
		if (b - a < best) {
			best = b - a;
			t3 = a;
			t4 = b;
		}
	}
	int64_t want = 3 * (int64_t)(m + pp - 1) * 1000;
	long rss = peak_rss_kb();
	printf("ops %10lld  pp %3d  m %8d  %-7s %-8s build %6.3f s  verify %6.3f s (%5.1f M/s)  "
	       "sim %6.3f s cpu (%6.1f M ops/s, best of 3)  peak RSS %7.1f MB = %5.1f B/op  makespan %s\n",
	       (long long)ops, pp, m, sim_model_names[model], record ? "record" : "-", t1 - t0,
	       tv - t2, (double)ops / (tv - t2) / 1e6, t4 - t3, (double)ops / (t4 - t3) / 1e6,
	       (double)rss / 1024, (double)rss * 1024 / (double)ops,
	       res.makespan >= want ? "ok" : "TOO SHORT");
	sim_result_free(&res);
	plan_free(p);
	return 0;
}
