/* The link model (plan/link.c, docs/semantics.md "Links"): transfers take the node link
 * inside a node and the network across; collectives run as a ring bound by its slowest
 * link or hierarchically, by the plan's algorithm, for tp and dp alike; line plans are
 * simulated once only when every line sits on the nodes alike; and pipesim times a
 * compiled plan's all-reduce by the same figures.  Every figure below is derived by
 * hand in its comment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/link.h"
#include "../plan/io.h"
#include "../sim/sim.h"

#include "sim_lib.h"

/* A plan with no ops: mesh pp x dp x tp (pp outermost), per_node ranks a node, the
 * network 5 us / 10 GB/s (0.1 ns a byte), the node link 1 us / 100 GB/s (0.01 ns). */
static Plan *mesh(int pp, int dp, int tp, int per_node, int algo)
{
	Plan *p = plan_new();
	assert_non_null(p);
	p->ndims = DIM_COUNT;
	p->dims[DIM_PP] = pp, p->dims[DIM_DP] = dp, p->dims[DIM_TP] = tp;
	p->dim_order[0] = DIM_PP, p->dim_order[1] = DIM_DP, p->dim_order[2] = DIM_TP;
	p->world = pp * dp * tp;
	p->latency_ns = 5000, p->bandwidth = 10e9;
	p->node_latency_ns = 1000, p->node_bandwidth = 100e9;
	p->per_node = per_node;
	p->coll_algo = (uint8_t)algo;
	return p;
}

#define MB8 8000000 // bytes: 80 us on the node link, 800 us on the network

static void links__p2p__node_link_inside_a_node(void **state)
{
	(void)state;
	Plan *p = mesh(8, 1, 1, 4, PLAN_COLL_AUTO);
	assert_int_equal(plan_p2p_ns(p, 0, 3, MB8), 1000 + 80000);  // ranks 0 and 3: node 0
	assert_int_equal(plan_p2p_ns(p, 3, 4, MB8), 5000 + 800000); // nodes 0 and 1
	assert_int_equal(plan_p2p_ns(p, 4, 7, MB8), 1000 + 80000);
	assert_int_equal(plan_p2p_ns_floor(p, 0, 1, 1), 1000); // 0.01 ns rounded down
	assert_int_equal(plan_p2p_ns(p, 0, 1, 1), 1001);       // and up
	p->per_node = 0; // no node stated: every pair on the network
	assert_int_equal(plan_p2p_ns(p, 0, 3, MB8), 5000 + 800000);
	p->link_ideal = 1;
	assert_int_equal(plan_p2p_ns(p, 3, 4, MB8), 0);
	plan_free(p);
}

/* dp = 8 on two nodes of 4.  Ring: 2 x 7 steps on the network, 14/8 of the bytes:
 * 70 us + 1400 us.  Hierarchical: inside a node 2 x 3 steps, 6/4 of the bytes on the
 * node link (6 us + 120 us), across the 2 nodes an all-reduce of 1/4 of the bytes
 * (2 MB: 10 us + 200 us): 336 us.  Auto takes the faster. */
static void links__dp_allreduce__ring_hierarchical_auto(void **state)
{
	(void)state;
	const int64_t ring = 70000 + 1400000, hier = 6000 + 120000 + 10000 + 200000;
	const int64_t want[PLAN_COLL_COUNT] = {[PLAN_COLL_AUTO] = hier, [PLAN_COLL_RING] = ring,
	                                       [PLAN_COLL_HIER] = hier};
	for (int a = 0; a < PLAN_COLL_COUNT; a++) {
		Plan *p = mesh(1, 8, 1, 4, a);
		for (int r = 0; r < 8; r++) // every member times its group alike
			assert_int_equal(plan_dim_coll_ns(p, OP_ALLREDUCE, DIM_DP, r, MB8), want[a]);
		/* Reduce-scatter and all-gather: each half of it, by the same path rules:
		 * ring 35 + 700 us; hierarchical 3 + 60 us inside, 5 + 100 us across. */
		int64_t half = a == PLAN_COLL_RING ? 35000 + 700000 : 3000 + 60000 + 5000 + 100000;
		assert_int_equal(plan_dim_coll_ns(p, OP_REDSCATTER, DIM_DP, 0, MB8), half);
		assert_int_equal(plan_dim_coll_ns(p, OP_ALLGATHER, DIM_DP, 0, MB8), half);
		plan_free(p);
	}
}

/* A group inside one node runs its ring on the node link whatever the algorithm:
 * dp = 4 on a node of 8, 6 us + 6/4 x 80 us. */
static void links__one_node__node_ring(void **state)
{
	(void)state;
	for (int a = 0; a < PLAN_COLL_COUNT; a++) {
		Plan *p = mesh(2, 4, 1, 8, a);
		assert_int_equal(plan_dim_coll_ns(p, OP_ALLREDUCE, DIM_DP, 5, MB8), 6000 + 120000);
		plan_free(p);
	}
}

/* tp and dp are timed by the one function: the same group shape gives the same time. */
static void links__tp_and_dp__same_function(void **state)
{
	(void)state;
	for (int a = 0; a < PLAN_COLL_COUNT; a++) {
		Plan *d = mesh(1, 8, 1, 4, a), *t = mesh(1, 1, 8, 4, a);
		assert_int_equal(plan_dim_coll_ns(t, OP_TPREDUCE, DIM_TP, 3, MB8),
		                 plan_dim_coll_ns(d, OP_ALLREDUCE, DIM_DP, 3, MB8));
		assert_int_equal(plan_coll_ns(d, OP_ALLREDUCE, 0, 1, 8, MB8),
		                 plan_dim_coll_ns(d, OP_ALLREDUCE, DIM_DP, 0, MB8));
		plan_free(d);
		plan_free(t);
	}
}

/* Nodes of 3 under dp = 8: {0,1,2} {3,4,5} {6,7}.  Hierarchical: a ring of 3 inside
 * (4 steps: 4 us + ceil(4/3 x 80 us) = 110.667 us) and across 3 nodes on the largest
 * share, 1/2 of the bytes (4 us x 5 + ceil(4/3 x 400 us) = 553.334 us).  With no nodes
 * stated every rank is a node: hierarchical is the network ring. */
static void links__uneven_and_no_nodes(void **state)
{
	(void)state;
	Plan *p = mesh(1, 8, 1, 3, PLAN_COLL_HIER);
	assert_int_equal(plan_dim_coll_ns(p, OP_ALLREDUCE, DIM_DP, 0, MB8), 110667 + 553334);
	p->per_node = 0;
	int64_t hier = plan_dim_coll_ns(p, OP_ALLREDUCE, DIM_DP, 0, MB8);
	p->coll_algo = PLAN_COLL_RING;
	assert_int_equal(hier, plan_dim_coll_ns(p, OP_ALLREDUCE, DIM_DP, 0, MB8));
	assert_int_equal(hier, 70000 + 1400000);
	plan_free(p);
}

/* A tied pair across nodes: 2 steps of 1/2 the bytes on the network, 10 us + 800 us;
 * inside one node 2 us + 80 us. */
static void links__tied_pair__its_path(void **state)
{
	(void)state;
	Plan *p = mesh(8, 1, 1, 4, PLAN_COLL_AUTO);
	assert_int_equal(plan_pair_coll_ns(p, OP_TIEREDUCE, 7, 0, MB8), 10000 + 800000);
	assert_int_equal(plan_pair_coll_ns(p, OP_TIEREDUCE, 1, 2, MB8), 2000 + 80000);
	assert_int_equal(plan_pair_coll_ns(p, OP_TIEREDUCE, 2, 2, MB8), 0);
	plan_free(p);
}

/* A line plan (pp = 2, dp = 3: line 0 is ranks 0 and 3) is every line's run only when
 * every line sits on the nodes alike: nodes of 3 (each pipeline index's dp group one
 * node, each line across two) yes; nodes of 4 (line 0 in one node, line 1's ranks 1
 * and 4 in two) no. */
static void links__line_uniform__by_placement(void **state)
{
	(void)state;
	Plan *p = mesh(2, 3, 1, 3, PLAN_COLL_AUTO);
	p->line = 1;
	p->world = 2;
	assert_true(plan_line_uniform(p));
	p->per_node = 4;
	assert_false(plan_line_uniform(p));
	p->per_node = 0;
	assert_true(plan_line_uniform(p));
	plan_free(p);
}

/* pipesim times a compiled plan's dp all-reduce by plan/link.c: one stage (linear 8:
 * 72 f32 parameters, 288 bytes) on dp = 4, nodes of 2, network 1 us / 1 GB/s, node
 * link 100 ns / 4 GB/s; one microbatch of f = b = w = 1 us.  Ring: 6 us + 6/4 x 288 ns
 * = 6432 ns; hierarchical: 200 + 2/2 x 72 ns inside, 2000 + 144 ns across = 2416 ns. */
static void links__pipesim_dp_allreduce__hand_figures(void **state)
{
	(void)state;
	const char *algo[] = {"", " collective=ring", " collective=hierarchical"};
	const int64_t want[] = {3000 + 2416, 3000 + 6432, 3000 + 2416};
	for (int a = 0; a < 3; a++) {
		char link[160];
		snprintf(link, sizeof link,
		         "latency=1us bandwidth=1GB/s node_latency=100ns node_bandwidth=4GB/s%s", algo[a]);
		Plan *p = compile_text(program_text(1, 1, 4, 1, "gpipe", "f=1 b=1 w=1", link,
		                                    "devices per_node=2;"), NULL);
		assert_non_null(p);
		assert_int_equal(p->per_node, 2);
		assert_int_equal(p->stages[0].params * 4, 288);
		for (int model = 0; model < SIM_MODEL_COUNT; model++) {
			SimOptions o = {.model = model};
			SimResult res;
			assert_int_equal(sim_run(p, &o, &res), 0);
			assert_int_equal(res.makespan, want[a]);
			sim_result_free(&res);
		}
		plan_free(p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(links__p2p__node_link_inside_a_node),
	    cmocka_unit_test(links__dp_allreduce__ring_hierarchical_auto),
	    cmocka_unit_test(links__one_node__node_ring),
	    cmocka_unit_test(links__tp_and_dp__same_function),
	    cmocka_unit_test(links__uneven_and_no_nodes),
	    cmocka_unit_test(links__tied_pair__its_path),
	    cmocka_unit_test(links__line_uniform__by_placement),
	    cmocka_unit_test(links__pipesim_dp_allreduce__hand_figures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
