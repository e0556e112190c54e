/* The link model: what every SEND/RECV pair and every collective costs, by the links of
 * the path it uses (docs/semantics.md "Links").
 *
 * A plan states two links: the network (`link`) and, when it states nodes, the node link
 * (`node per_node=N`): world ranks w / N equal share a node.  A transfer takes its pair's
 * link.  A collective over a group runs as a ring (each of its steps moves 1/n of the
 * bytes; an all-reduce takes 2(n-1) steps, a reduce-scatter or an all-gather n-1), bound
 * by the ring's slowest link, or hierarchically (the ring's half inside every node over
 * the node link, the whole collective across the nodes over the network on the 1/k of
 * the bytes each rank then holds, the other half inside the node again); the plan names
 * one, or auto: the faster.  One function times all of them, for tp and dp alike, so the
 * simulator, schedule auto's model and the lowering's walk cannot disagree. */
#include "link.h"
#include "line.h"
#include "tie.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const plan_coll_names[PLAN_COLL_COUNT] = {"auto", "ring", "hierarchical"};

int plan_coll_parse(const char *s)
{
	for (int i = 0; i < PLAN_COLL_COUNT; i++)
		if (!strcmp(s, plan_coll_names[i]))
			return i;
	return -1;
}

char *plan_coll_list(char *buf, size_t n)
{
	size_t len = 0;
	buf[0] = 0;
	for (int i = 0; i < PLAN_COLL_COUNT && len < n; i++)
		len += (size_t)snprintf(buf + len, n - len, "%s%s",
		                        !i ? "" : i + 1 < PLAN_COLL_COUNT ? ", " : " or ",
		                        plan_coll_names[i]);
	return buf;
}

int plan_same_node(const Plan *p, int a, int b)
{
	return p->per_node > 0 && a / p->per_node == b / p->per_node;
}

/* A link's figures: the node link (node 1) or the network's. */
typedef struct {
	int64_t latency_ns;
	double bandwidth;
} Link;

static Link link_of(const Plan *p, int node)
{
	return node ? (Link){p->node_latency_ns, p->node_bandwidth}
	            : (Link){p->latency_ns, p->bandwidth};
}

/* latency + bytes at the bandwidth, rounded up (or down), saturated. */
static int64_t move(const Plan *p, Link l, int64_t bytes, int down)
{
	if (p->link_ideal)
		return 0;
	double x = (double)bytes * 1e9 / l.bandwidth;
	double t = (double)l.latency_ns + (down ? floor(x) : ceil(x));
	return t < (double)(INT64_MAX / 4) ? (int64_t)t : INT64_MAX / 4; // no overflow UB
}

int64_t plan_link_ns(const Plan *p, int node, int64_t bytes)
{
	return move(p, link_of(p, node), bytes, 0);
}

static int64_t p2p(const Plan *p, int a, int b, int64_t bytes, int down)
{
	int node = plan_same_node(p, plan_world_rank(p, a), plan_world_rank(p, b));
	return move(p, link_of(p, node), bytes, down);
}

int64_t plan_p2p_ns(const Plan *p, int a, int b, int64_t bytes)
{
	return p2p(p, a, b, bytes, 0);
}

int64_t plan_p2p_ns_floor(const Plan *p, int a, int b, int64_t bytes)
{
	return p2p(p, a, b, bytes, 1);
}

/* A ring of n ranks over link l taking steps steps of bytes / n each:
 * steps x latency + ceil(steps / n x bytes at the bandwidth); 0 for n <= 1. */
static int64_t ring(Link l, int n, int steps, double bytes)
{
	if (n <= 1)
		return 0;
	double x = ceil((double)steps / n * bytes * 1e9 / l.bandwidth);
	if (!(x < 4e18) || l.latency_ns > INT64_MAX / (4 * (int64_t)steps))
		return INT64_MAX / 2;
	return sat_add((int64_t)steps * l.latency_ns, (int64_t)x);
}

/* How a group lies on the nodes: nodes it spans, the most and the fewest of its ranks
 * one node holds. */
typedef struct {
	int n, nodes, most, fewest;
} Shape;

/* Members first + i * stride increase, so each node's are one run. */
static Shape shape_of(const Plan *p, int first, int stride, int n)
{
	Shape g = {n, 0, 0, n};
	for (int i = 0, run = 0; i < n; i++) {
		int w = first + i * stride;
		run = i > 0 && plan_same_node(p, w - stride, w) ? run + 1 : 1;
		if (run == 1)
			g.nodes++;
		if (run > g.most)
			g.most = run;
		if ((i == n - 1 || !plan_same_node(p, w, w + stride)) && run < g.fewest)
			g.fewest = run;
	}
	return g;
}

/* One ring over the whole group: its slowest link is the network once it spans nodes. */
static int64_t ring_ns(const Plan *p, Shape g, int half, double bytes)
{
	return ring(link_of(p, g.nodes == 1), g.n, (2 - half) * (g.n - 1), bytes);
}

/* The half inside each node, the collective across nodes on the share a rank holds
 * then (bytes / the fewest ranks of a node: the largest share), the half again. */
static int64_t hier_ns(const Plan *p, Shape g, int half, double bytes)
{
	int64_t in = ring(link_of(p, 1), g.most, (2 - half) * (g.most - 1), bytes);
	return sat_add(in, ring(link_of(p, 0), g.nodes, (2 - half) * (g.nodes - 1),
	                        bytes / g.fewest));
}

static int64_t auto_ns(const Plan *p, Shape g, int half, double bytes)
{
	int64_t a = ring_ns(p, g, half, bytes), b = hier_ns(p, g, half, bytes);
	return a < b ? a : b;
}

/* A row per PlanColl. */
static int64_t (*const algo_ns[PLAN_COLL_COUNT])(const Plan *, Shape, int, double) = {
	[PLAN_COLL_AUTO] = auto_ns,
	[PLAN_COLL_RING] = ring_ns,
	[PLAN_COLL_HIER] = hier_ns,
};

int64_t plan_coll_ns(const Plan *p, OpKind k, int first, int stride, int n, int64_t bytes)
{
	if (p->link_ideal || n <= 1)
		return 0;
	int algo = p->coll_algo < PLAN_COLL_COUNT ? p->coll_algo : PLAN_COLL_AUTO;
	return algo_ns[algo](p, shape_of(p, first, stride, n), plan_ops[k].shard, (double)bytes);
}

int64_t plan_dim_coll_ns(const Plan *p, OpKind k, int dim, int r, int64_t bytes)
{
	int stride = plan_dim_stride(p, dim), c[DIM_COUNT];
	int w = plan_world_rank(p, r);
	plan_mesh_coords(p, w, c);
	return plan_coll_ns(p, k, w - c[dim] * stride, stride, p->dims[dim], bytes);
}

int64_t plan_pair_coll_ns(const Plan *p, OpKind k, int a, int b, int64_t bytes)
{
	int x = plan_world_rank(p, a), y = plan_world_rank(p, b);
	int lo = x < y ? x : y, hi = x < y ? y : x;
	return plan_coll_ns(p, k, lo, hi - lo, hi > lo ? 2 : 1, bytes);
}

/* plan_op_move_ns by what the op communicates over: a row per OP_OVER_*. */
static int64_t over_peer(const Plan *p, int r, const PlanOp *o, int64_t b)
{
	return plan_p2p_ns(p, r, o->peer, b);
}

static int64_t over_dp(const Plan *p, int r, const PlanOp *o, int64_t b)
{
	return plan_dim_coll_ns(p, plan_op_kind(o), DIM_DP, r, b);
}

static int64_t over_tp(const Plan *p, int r, const PlanOp *o, int64_t b)
{
	return plan_dim_coll_ns(p, plan_op_kind(o), DIM_TP, r, b);
}

static int64_t over_tie(const Plan *p, int r, const PlanOp *o, int64_t b)
{
	int s, q = plan_tie_peer(p, r, &s);
	return plan_pair_coll_ns(p, plan_op_kind(o), r, q >= 0 ? q : r, b);
}

static int64_t (*const over_ns[OP_OVER_COUNT])(const Plan *, int, const PlanOp *, int64_t) = {
	[OP_OVER_PEER] = over_peer,
	[OP_OVER_DP] = over_dp,
	[OP_OVER_TP] = over_tp,
	[OP_OVER_TIE] = over_tie,
};

int64_t plan_op_move_ns(const Plan *p, int r, const PlanOp *o)
{
	int over = plan_ops[o->kind].over;
	return over_ns[over] ? over_ns[over](p, r, o, plan_op_bytes(p, o)) : 0;
}

/* Whether the groups along dim of world ranks w and w0 lie on the nodes alike. */
static int same_shape(const Plan *p, int dim, int w, int w0)
{
	int st = plan_dim_stride(p, dim), n = p->dims[dim], c[DIM_COUNT], c0[DIM_COUNT];
	plan_mesh_coords(p, w, c);
	plan_mesh_coords(p, w0, c0);
	Shape a = shape_of(p, w - c[dim] * st, st, n), b = shape_of(p, w0 - c0[dim] * st, st, n);
	return a.nodes == b.nodes && a.most == b.most && a.fewest == b.fewest;
}

/* Nodes are runs of world ranks and a line's ranks increase with the pipeline index, so
 * two lines pair their ranks alike when each next pipeline rank shares a node with the
 * one before alike; a group is timed by its shape alone. */
int plan_line_uniform(const Plan *p)
{
	if (!p->line || p->per_node <= 0 || p->link_ideal)
		return 1;
	int world = plan_mesh_world(p), stride = plan_pp_stride(p);
	for (int w = 0; w < world; w++) {
		int c[DIM_COUNT];
		plan_mesh_coords(p, w, c);
		int w0 = c[DIM_PP] * stride; // line 0's rank at w's pipeline index
		if (c[DIM_PP] > 0 &&
		    plan_same_node(p, w - stride, w) != plan_same_node(p, w0 - stride, w0))
			return 0;
		for (int d = 0; d < 2; d++) {
			int dim = d ? DIM_TP : DIM_DP;
			if (p->dims[dim] > 1 && c[dim] == 0 && !same_shape(p, dim, w, w0))
				return 0;
		}
	}
	return 1;
}
