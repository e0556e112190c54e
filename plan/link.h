/* The link model (plan/link.c, docs/semantics.md "Links"): the time of every transfer
 * and collective, from the placement of ranks on nodes.
 *
 * World ranks w share a node when w / per_node agree (per_node 0: no node is stated,
 * every rank is a node of its own).  Two ranks of one node talk over the node link
 * (node_latency_ns, node_bandwidth), any others over the network link (latency_ns,
 * bandwidth).  These functions are the one place that times a SEND/RECV pair or a
 * collective: pipesim, schedule auto's model, pipecc's lowering and the SVG all call
 * them. */
#ifndef PLAN_LINK_H
#define PLAN_LINK_H

#include "plan.h"

/* How a collective that spans nodes runs (the plan's node line, `collective=`). */
typedef enum {
	PLAN_COLL_AUTO, // the faster of ring and hierarchical (the default)
	PLAN_COLL_RING, // one ring over the group, bound by its slowest link
	PLAN_COLL_HIER, // inside each node, across nodes on 1/k of the bytes, inside again
	PLAN_COLL_COUNT
} PlanColl;
extern const char *const plan_coll_names[PLAN_COLL_COUNT]; // "auto", "ring", "hierarchical"
/* The algorithm named s, or -1. */
int plan_coll_parse(const char *s);
/* "auto, ring or hierarchical" into buf, for messages.  Returns buf. */
char *plan_coll_list(char *buf, size_t n);

/* Whether world ranks a and b share a node. */
int plan_same_node(const Plan *p, int a, int b);
/* Transfer time of bytes from rank a to rank b of p (entries of ranks[]: a line plan's
 * pipeline indices are line 0's): latency + ceil(bytes * 1e9 / bandwidth) of their
 * link, 0 under `link ideal`.  _floor: the bandwidth term rounded down (schedule auto
 * runs Zero Bubble's heuristic on both). */
int64_t plan_p2p_ns(const Plan *p, int a, int b, int64_t bytes);
int64_t plan_p2p_ns_floor(const Plan *p, int a, int b, int64_t bytes);
/* The same over the node link (node 1) or the network (node 0). */
int64_t plan_link_ns(const Plan *p, int node, int64_t bytes);
/* Time of collective kind k (an all-reduce: ALLREDUCE, TPREDUCE, TIEREDUCE; half of
 * one: REDUCESCATTER, ALLGATHER) of bytes over the n world ranks first + i * stride,
 * by the plan's algorithm. */
int64_t plan_coll_ns(const Plan *p, OpKind k, int first, int stride, int n, int64_t bytes);
/* The same over the group of rank r of p along dim (DIM_DP or DIM_TP), in the world. */
int64_t plan_dim_coll_ns(const Plan *p, OpKind k, int dim, int r, int64_t bytes);
/* The same over the pair of ranks a and b of p (a tied table's TIEREDUCE). */
int64_t plan_pair_coll_ns(const Plan *p, OpKind k, int a, int b, int64_t bytes);
/* The time comm op o of rank r takes once it can run (a p2p op: its transfer; a
 * collective: its group's; a TIEREDUCE: over a pair in one node or not as peer says). */
int64_t plan_op_move_ns(const Plan *p, int r, const PlanOp *o);

/* Whether every line of line plan p takes line 0's times (its pipeline ranks sit on the
 * nodes as line 0's do, and so do its tp and dp groups): then one line's run is every
 * line's (docs/pipesim.md, "Line plans").  Work O(world), no ops. */
int plan_line_uniform(const Plan *p);

#endif
