/* The verifier's rule table (plan/rules.h), row by row: for each row a good plan, compiled
 * here and verified, then broken by the smallest edit that breaks that rule and no rule
 * reported before it (plan/verify.h: tables, groups, sends to self, matching,
 * collectives and the tied table, dependencies), and plan_verify must then name exactly
 * that row, its phrase in the message.  The cases are a table indexed by row, so a row
 * added to rules.h without its bad plan fails rules__every_row__has_a_case, and a
 * phrase added to the op table without its row fails the op table's test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/par.h"
#include "../plan/rules.h"
#include "../plan/block.h"
#include "../plan/tie.h"
#include "../plan/tp.h"
#include "../plan/sizes.h"

#include "lower_lib.h"
#include "plan_lib.h"
#include "rules_lib.h"

/* ---- the cases: one bad plan per row ---- */

/* the plan's tables */

static Plan *bad_STAGE_PP(void)
{
	Plan *p = chain();
	p->stages[1].pp = 2; // pp=2: indices 0 and 1
	return p;
}

static Plan *bad_ROUTE_LINE(void)
{
	Plan *p = chain();
	p->routes[0].dst_rank = p->routes[0].src_rank; // edge 0's act route, rank 0 to itself
	return p;
}

static Plan *bad_ROUTE_DEVICES(void)
{
	Plan *p = chain();
	p->routes[0].dst_dev++;
	return p;
}

static Plan *bad_ROUTE_INVERSE(void)
{
	Plan *p = chain();
	assert_int_equal(p->routes[1].dir, DIR_GRAD);
	p->routes[1].inverse_of = 1; // itself, a grad route
	return p;
}

/* ROUTE_INVERSE's other half: a grad route naming as its inverse the act route of its
 * edge on the other dp line (the right kind and edge, the wrong ranks). */
static void rules__ROUTE_INVERSE__other_lines_route_refused(void **state)
{
	(void)state;
	Plan *p = chain_dp();
	int g = -1, f = -1;
	for (int i = 0; i < p->nroutes && g < 0; i++)
		if (p->routes[i].dir == DIR_GRAD)
			g = i;
	assert_true(g >= 0);
	const PlanRoute *own = &p->routes[p->routes[g].inverse_of];
	for (int i = 0; i < p->nroutes && f < 0; i++)
		if (p->routes[i].dir == DIR_ACT && p->routes[i].edge == own->edge &&
		    p->routes[i].dst_rank != own->dst_rank)
			f = i;
	assert_true(f >= 0);
	p->routes[g].inverse_of = f;
	PlanError e;
	assert_int_equal(plan_verify(p, &e), -1);
	assert_int_equal(e.rule, PLAN_RULE_ROUTE_INVERSE);
	plan_free(p);
}

/* P2P_ROUTE's other half: a SEND naming the route of its edge and direction on the other
 * dp line (the right edge and direction, the wrong ranks). */
static void rules__P2P_ROUTE__other_lines_route_refused(void **state)
{
	(void)state;
	Plan *p = chain_dp();
	PlanOp *o = NULL;
	for (int64_t i = 0; i < p->ranks[0].nops && !o; i++)
		if (plan_op_is_p2p(plan_op_kind(&p->ranks[0].ops[i])) &&
		    plan_ops[p->ranks[0].ops[i].kind].sends)
			o = &p->ranks[0].ops[i];
	assert_non_null(o);
	const PlanRoute *own = &p->routes[o->route];
	int other = -1;
	for (int i = 0; i < p->nroutes && other < 0; i++)
		if (p->routes[i].edge == own->edge && p->routes[i].dir == own->dir &&
		    p->routes[i].src_rank != own->src_rank)
			other = i;
	assert_true(other >= 0);
	o->route = other;
	PlanError e;
	assert_int_equal(plan_verify(p, &e), -1);
	assert_int_equal(e.rule, PLAN_RULE_P2P_ROUTE);
	plan_free(p);
}

static Plan *bad_PEER_STAGE(void)
{
	Plan *p = chain();
	p->ranks[0].peers[0].stage = 1; // edge 0 leaves stage 0
	return p;
}

static Plan *bad_PEER_PLACED(void)
{
	Plan *p = chain();
	p->ranks[0].peers[0].in = 1; // edge 0 as it enters stage 1, on rank 1
	p->ranks[0].peers[0].stage = 1;
	return p;
}

static Plan *bad_PEER_NAMES(void)
{
	Plan *p = chain();
	p->ranks[1].peers[0].local = PEER_SELF; // stage 0 is on rank 0: remote
	return p;
}

static Plan *bad_PEER_TWICE(void)
{
	Plan *p = chain();
	PlanRank *rk = &p->ranks[0];
	PlanPeer *pe = realloc(rk->peers, 2 * sizeof *pe);
	assert_non_null(pe);
	pe[1] = pe[0];
	rk->peers = pe;
	rk->npeers = 2;
	return p;
}

static Plan *bad_PEER_MISSING(void)
{
	Plan *p = chain();
	p->ranks[1].npeers = 0;
	return p;
}

/* comm groups, sends to self, matching */

static Plan *bad_GROUP_ALONE(void)
{
	Plan *p = chain_dp();
	int r = 2; // stage 1, dp 0: `... BW SEND ALLREDUCE OPTIM`
	int64_t i = nth_op(p, r, OP_ALLREDUCE, 0);
	PlanOp *o = p->ranks[r].ops;
	assert_true(i > 0 && o[i - 1].kind == OP_SEND);
	o[i].group = o[i - 1].group;
	return p;
}

static Plan *bad_GROUP_ORDER(void)
{
	Plan *p = chain();
	op_of(p, 0, OP_SEND, 1)->group = op_of(p, 0, OP_SEND, 0)->group;
	return p;
}

/* An F marked paired (plan_op_paired) with a SEND after it. */
static Plan *bad_PAIR(void)
{
	Plan *p = chain();
	op_of(p, 0, OP_F, 0)->dir = 1;
	return p;
}

static Plan *bad_SELF_RECV(void)
{
	Plan *p = vee(1);
	drop_op(p, 1, last_p2p(p, 1, OP_SEND, 1));
	return p;
}

static Plan *bad_SELF_SEND_GROUP(void)
{
	Plan *p = vee(1);
	int64_t i = last_p2p(p, 1, OP_RECV, 1);
	assert_int_equal(p->ranks[1].ops[i - 1].peer, 1); // its SEND to self, in its group
	shift_groups(p, 1, i);
	return p;
}

static Plan *bad_SELF_SEND_ALONE(void)
{
	Plan *p = vee(1);
	drop_op(p, 1, last_p2p(p, 1, OP_RECV, 1));
	return p;
}

static Plan *bad_NO_SEND(void)
{
	Plan *p = chain();
	drop_op(p, 0, nth_op(p, 0, OP_SEND, 1));
	return p;
}

static Plan *bad_FIFO(void)
{
	Plan *p = chain();
	PlanOp *a = op_of(p, 1, OP_RECV, 0), *b = op_of(p, 1, OP_RECV, 1);
	int32_t mb = a->mb;
	a->mb = b->mb;
	b->mb = mb;
	return p;
}

static Plan *bad_NO_RECV(void)
{
	Plan *p = chain();
	drop_op(p, 1, nth_op(p, 1, OP_RECV, 1));
	return p;
}

/* collectives and the tied table */

static Plan *bad_COLL_PART(void)
{
	Plan *p = chain_dp();
	drop_op(p, 1, nth_op(p, 1, OP_ALLREDUCE, 0));
	return p;
}

static Plan *bad_COLL_ORDER(void)
{
	Plan *p = good(tp_src, NULL);
	tpreduce(p, 1, DIR_ACT, 0)->mb = 1; // rank 1 (tp 1) against rank 0: m=1 where m=0
	return p;
}

static Plan *bad_TIE_COPY(void)
{
	Plan *p = good(TIED_SRC("head tied"), NULL);
	layer_of(p, 1, LAYER_HEAD)->flags &= ~LAYER_FLAG(LAYER_KEY_COPY);
	return p;
}

static Plan *bad_TIE_NOCOPY(void)
{
	Plan *p = good(TIED_SRC("head"), NULL);
	layer_of(p, 1, LAYER_HEAD)->flags |= LAYER_FLAG(LAYER_KEY_COPY);
	return p;
}

static Plan *bad_TIE_NONE(void)
{
	Plan *p = chain();
	PlanOp t = {.kind = OP_TIEREDUCE, .stage = 0, .mb = -1, .peer = 1, .route = -1};
	insert_op(p, 0, p->ranks[0].nops, t, 0);
	return p;
}

static Plan *bad_TIE_PEER(void)
{
	Plan *p = good(TIED_SRC("head tied"), NULL);
	op_of(p, 0, OP_TIEREDUCE, 0)->peer = 0; // the other copy is on rank 1
	return p;
}

static Plan *bad_TIE_STAGE(void)
{
	Plan *p = good(TIED_SRC("head tied"), NULL);
	op_of(p, 0, OP_TIEREDUCE, 0)->stage = 1; // rank 0's copy is stage 0's, the embedding
	return p;
}

static Plan *bad_TIE_BYTES(void)
{
	Plan *p = good(TIED_SRC("head tied"), NULL);
	op_of(p, 0, OP_TIEREDUCE, 0)->route = size_route(p, OP_TIEREDUCE, plan_tie_bytes(p) + 4);
	return p;
}

static Plan *bad_TIE_COUNT(void)
{
	Plan *p = good(TIED_SRC("head tied"), NULL);
	drop_op(p, 1, nth_op(p, 1, OP_TIEREDUCE, 0));
	return p;
}

/* completeness */

static Plan *bad_OP_PLACED(void)
{
	Plan *p = chain();
	op_of(p, 0, OP_F, 0)->stage = 1;
	return p;
}

/* The list cut before its last BW: also its OPTIM goes, which would otherwise come
 * before the stage's last W (DEP_OPTIM_EARLY). */
static Plan *bad_NEVER_RUNS(void)
{
	Plan *p = chain();
	PlanRank *rk = &p->ranks[0];
	assert_int_equal(rk->ops[rk->nops - 2].kind, OP_BW);
	rk->nops -= 2;
	return p;
}

/* Both members of stage 0's dp group cut before their ALLREDUCE (one alone would be
 * COLL_PART; an OPTIM left would come before the all-reduce). */
static Plan *bad_NEVER_REDUCED(void)
{
	Plan *p = chain_dp();
	for (int r = 0; r < 2; r++) {
		PlanRank *rk = &p->ranks[r];
		assert_int_equal(rk->ops[rk->nops - 2].kind, OP_ALLREDUCE);
		rk->nops -= 2;
	}
	return p;
}

static Plan *bad_NEVER_OPTIM(void)
{
	Plan *p = chain();
	drop_op(p, 0, nth_op(p, 0, OP_OPTIM, 0));
	return p;
}

/* dependencies */

static Plan *bad_DEP_SECOND_F(void)
{
	Plan *p = chain();
	op_of(p, 0, OP_F, 1)->mb = 0;
	return p;
}

static Plan *bad_DEP_SECOND_BACKWARD(void)
{
	Plan *p = chain();
	op_of(p, 0, OP_BW, 1)->mb = 0;
	return p;
}

static Plan *bad_DEP_BACKWARD_EARLY(void)
{
	Plan *p = chain();
	op_of(p, 0, OP_F, 0)->kind = OP_BW;
	return p;
}

static Plan *bad_DEP_SECOND_W(void)
{
	Plan *p = chain();
	PlanOp *o = op_of(p, 0, OP_BW, 1);
	o->kind = OP_W; // of microbatch 0, whose BW made its weight gradient
	o->mb = 0;
	return p;
}

/* Both members of stage 0's dp group cut before their ALLGATHER. */
static Plan *bad_NEVER_GATHERED(void)
{
	Plan *p = chain_dist();
	for (int r = 0; r < 2; r++) {
		PlanRank *rk = &p->ranks[r];
		assert_int_equal(rk->ops[rk->nops - 1].kind, OP_ALLGATHER);
		rk->nops--;
	}
	return p;
}

static Plan *bad_DEP_W_EARLY(void)
{
	Plan *p = chain();
	op_of(p, 0, OP_BW, 0)->kind = OP_W;
	return p;
}

static Plan *bad_DEP_SECOND_ONE(void)
{
	Plan *p = chain();
	insert_op(p, 0, p->ranks[0].nops, *op_of(p, 0, OP_OPTIM, 0), 0);
	return p;
}

static Plan *bad_DEP_REDUCE_EARLY(void)
{
	Plan *p = chain_dp();
	int64_t i = nth_op(p, 0, OP_ALLREDUCE, 0);
	assert_int_equal(p->ranks[0].ops[i - 1].kind, OP_BW);
	swap_ops(p, 0, i - 1, i);
	return p;
}

static Plan *bad_DEP_OPTIM_EARLY(void)
{
	Plan *p = chain();
	int64_t i = nth_op(p, 0, OP_OPTIM, 0);
	assert_int_equal(p->ranks[0].ops[i - 1].kind, OP_BW);
	swap_ops(p, 0, i - 1, i);
	return p;
}

static Plan *bad_DEP_TIE_EARLY(void)
{
	Plan *p = good(TIED_SRC("head tied"), NULL);
	int64_t i = nth_op(p, 0, OP_TIEREDUCE, 0);
	assert_int_equal(p->ranks[0].ops[i - 1].kind, OP_BW);
	swap_ops(p, 0, i - 1, i);
	return p;
}

/* On both members of the tp group (one alone: COLL_ORDER): mb 1's first TPREDUCE made
 * a second copy of mb 0's last. */
static Plan *bad_DEP_SECOND_TP(void)
{
	Plan *p = good(tp_src, NULL);
	for (int r = 0; r < 2; r++) {
		PlanOp *o = tpreduce(p, r, DIR_ACT, 2), was = *o;
		*o = *tpreduce(p, r, DIR_ACT, 1);
		assert_true(was.mb == 1 && o->mb == 0 && o->part == 1);
		o->group = was.group;
	}
	return p;
}

/* On both members of the tp group: the first TPREDUCE of mb 0's forward says part 1 (and
 * moves part 1's bytes), right after part 0. */
static Plan *bad_DEP_TP_ORDER(void)
{
	Plan *p = good(tp_src, NULL);
	for (int r = 0; r < 2; r++) {
		PlanOp *o = tpreduce(p, r, DIR_ACT, 0), *next = tpreduce(p, r, DIR_ACT, 1);
		assert_int_equal(next->part, 1);
		o->part = next->part;
		o->route = next->route;
	}
	return p;
}

static Plan *bad_DEP_BEFORE_HEAD_W(void)
{
	Plan *p = good(tied_v_src, NULL);
	/* Rank 0 holds s0 (embed) and s3 (head): the head's last W and its OPTIM moved
	 * after OPTIM s=0, which then steps the table before the head added to it. */
	int64_t w = -1;
	for (int64_t i = 0; i < p->ranks[0].nops; i++)
		if (p->ranks[0].ops[i].kind == OP_W && p->ranks[0].ops[i].stage == 3)
			w = i;
	assert_true(w >= 0);
	move_to_end(p, 0, w);
	int64_t o = nth_op(p, 0, OP_OPTIM, 0);
	assert_int_equal(p->ranks[0].ops[o].stage, 3);
	move_to_end(p, 0, o);
	return p;
}

static Plan *bad_DEP_BEFORE_TIE(void)
{
	Plan *p = good(TIED_SRC("head tied"), NULL);
	int64_t i = nth_op(p, 0, OP_TIEREDUCE, 0);
	assert_int_equal(p->ranks[0].ops[i + 1].kind, OP_OPTIM);
	swap_ops(p, 0, i, i + 1);
	return p;
}

static Plan *bad_DEP_REDUCE_DP1(void)
{
	Plan *p = chain();
	PlanOp t = {.kind = OP_ALLREDUCE, .stage = 0, .mb = -1, .peer = -1,
	            .route = size_route(p, OP_ALLREDUCE, p->stages[0].params * 4)};
	insert_op(p, 0, nth_op(p, 0, OP_OPTIM, 0), t, 0);
	return p;
}

static Plan *bad_DEP_SCATTER_DP1(void)
{
	Plan *p = good(program(2, 2, 1, 2, "optimizer adamw distributed;"), "gpipe");
	PlanOp t = {.kind = OP_REDSCATTER, .stage = 0, .mb = -1, .peer = -1,
	            .route = size_route(p, OP_REDSCATTER, p->stages[0].params * 4)};
	insert_op(p, 0, nth_op(p, 0, OP_OPTIM, 0), t, 0);
	return p;
}

static Plan *bad_DEP_GATHER_DP1(void)
{
	Plan *p = good(program(2, 2, 1, 2, "optimizer adamw distributed;"), "gpipe");
	PlanOp t = {.kind = OP_ALLGATHER, .stage = 0, .mb = -1, .peer = -1,
	            .route = size_route(p, OP_ALLGATHER, p->stages[0].params * 4)};
	insert_op(p, 0, p->ranks[0].nops, t, 0);
	return p;
}

/* The ALLGATHER moved before its OPTIM on both members of the dp group. */
static Plan *bad_DEP_GATHER_EARLY(void)
{
	Plan *p = chain_dist();
	for (int r = 0; r < 2; r++) {
		int64_t i = nth_op(p, r, OP_ALLGATHER, 0);
		assert_int_equal(p->ranks[r].ops[i - 1].kind, OP_OPTIM);
		swap_ops(p, r, i - 1, i);
	}
	return p;
}

/* A plain plan whose stage-0 ALLREDUCE says REDUCESCATTER on both members. */
static Plan *bad_DEP_SHARD_PLAIN(void)
{
	Plan *p = chain_dp();
	for (int r = 0; r < 2; r++)
		op_of(p, r, OP_ALLREDUCE, 0)->kind = OP_REDSCATTER;
	return p;
}

/* A distributed plan whose REDUCESCATTER says ALLREDUCE on both members. */
static Plan *bad_DEP_PLAIN_SHARD(void)
{
	Plan *p = chain_dist();
	for (int r = 0; r < 2; r++)
		op_of(p, r, OP_REDSCATTER, 0)->kind = OP_ALLREDUCE;
	return p;
}

static Plan *bad_DEP_GATHER_SIZE(void)
{
	Plan *p = chain_dist();
	for (int r = 0; r < 2; r++) {
		PlanOp *o = op_of(p, r, OP_ALLGATHER, 0);
		o->route = size_route(p, OP_ALLGATHER, plan_op_bytes(p, o) + 4);
	}
	return p;
}

static Plan *bad_DEP_OPTIM_UNREDUCED(void)
{
	Plan *p = chain_dp();
	int64_t i = nth_op(p, 0, OP_ALLREDUCE, 0);
	assert_int_equal(p->ranks[0].ops[i + 1].kind, OP_OPTIM);
	swap_ops(p, 0, i, i + 1);
	return p;
}

/* On both members of the tp group: stage 0's backward TPREDUCE says part 1, the last
 * part, which ends in none. */
static Plan *bad_DEP_PART_NO_REDUCE(void)
{
	Plan *p = good(tp_src, NULL);
	PlanParts pp;
	assert_int_equal(plan_stage_parts(p, 0, &pp), 0);
	int n = pp.n[DIR_GRAD];
	int64_t reduce = pp.part[DIR_GRAD][1].reduce;
	plan_parts_free(&pp);
	assert_true(n == 2 && reduce == 0);
	for (int r = 0; r < 2; r++) {
		PlanOp *o = tpreduce(p, r, DIR_GRAD, 0);
		assert_int_equal(o->stage, 0);
		o->part = 1;
	}
	return p;
}

static Plan *bad_DEP_NO_PART(void)
{
	Plan *p = good(tp_src, NULL);
	PlanOp *o = op_of(p, 0, OP_F, 1);
	assert_int_equal(o->part, 1);
	o->part = 2; // the forward has parts 0 and 1
	return p;
}

static Plan *bad_DEP_PART_ORDER(void)
{
	Plan *p = good(tp_src, NULL);
	PlanOp *o = op_of(p, 0, OP_F, 0);
	assert_int_equal(o->part, 0);
	o->part = 1;
	return p;
}

static Plan *bad_DEP_PARTS_MIXED(void)
{
	Plan *p = good(tp_src, NULL);
	PlanOp *o = op_of(p, 0, OP_BW, 1);
	assert_true(o->mb == 0 && o->part == 1);
	o->kind = OP_B;
	return p;
}

static Plan *bad_DEP_NO_INPUT(void)
{
	Plan *p = chain();
	swap_ops(p, 1, nth_op(p, 1, OP_RECV, 0), nth_op(p, 1, OP_F, 0));
	return p;
}

static Plan *bad_DEP_NO_OUT_GRAD(void)
{
	Plan *p = chain();
	swap_ops(p, 0, nth_op(p, 0, OP_RECV, 0), nth_op(p, 0, OP_BW, 0));
	return p;
}

static Plan *bad_DEP_SENT_EARLY(void)
{
	Plan *p = chain();
	swap_ops(p, 0, nth_op(p, 0, OP_F, 0), nth_op(p, 0, OP_SEND, 0));
	return p;
}

/* The second activation sent and received as mb 0's again (both ends, so they match). */
static Plan *bad_DEP_RECEIVED_TWICE(void)
{
	Plan *p = chain();
	op_of(p, 0, OP_SEND, 1)->mb = 0;
	op_of(p, 1, OP_RECV, 1)->mb = 0;
	return p;
}

static Plan *bad_DEP_TP_SIZE(void)
{
	Plan *p = good(tp_src, NULL);
	PlanOp *o = tpreduce(p, 0, DIR_ACT, 0);
	o->route = size_route(p, OP_TPREDUCE, plan_op_bytes(p, o) + 4);
	return p;
}

static Plan *bad_DEP_STAGE_AWAY(void)
{
	Plan *p = chain();
	op_of(p, 0, OP_OPTIM, 0)->stage = 1;
	return p;
}

static Plan *bad_DEP_TP_AT_TP1(void)
{
	Plan *p = chain();
	PlanOp t = {.kind = OP_TPREDUCE, .dir = DIR_ACT, .stage = 0, .mb = 0, .peer = -1,
	            .route = size_route(p, OP_TPREDUCE, 64)};
	insert_op(p, 0, nth_op(p, 0, OP_F, 0) + 1, t, 0);
	return p;
}

static Plan *bad_DEP_REDUCE_SIZE(void)
{
	Plan *p = chain_dp();
	PlanOp *o = op_of(p, 0, OP_ALLREDUCE, 0);
	o->route = size_route(p, OP_ALLREDUCE, plan_op_bytes(p, o) + 4);
	return p;
}

/* Both ends turned into a gradient's, so they still match: on rank 0 the edge's end for
 * a gradient sent is stage 1's. */
static Plan *bad_P2P_NOT_HERE(void)
{
	Plan *p = chain();
	op_of(p, 0, OP_SEND, 0)->dir = DIR_GRAD;
	op_of(p, 1, OP_RECV, 0)->dir = DIR_GRAD;
	return p;
}

/* The two pipeline lines' first activations crossed: rank 0 (line 0) sends to line 1's
 * stage 1 rank and rank 1 (line 1) to line 0's, each received there in order. */
static Plan *bad_P2P_PEER(void)
{
	Plan *p = chain_dp();
	PlanOp *s0 = op_of(p, 0, OP_SEND, 0), *s1 = op_of(p, 1, OP_SEND, 0);
	int b0 = s0->peer, b1 = s1->peer;
	assert_int_not_equal(b0, b1);
	op_of(p, b0, OP_RECV, 0)->peer = 1;
	op_of(p, b1, OP_RECV, 0)->peer = 0;
	s0->peer = b1;
	s1->peer = b0;
	return p;
}

/* Rank 1 hands edge 1 (s1 -> s2) over locally; a SEND to self and its RECV, in one
 * group, added for microbatch 0's activation. */
static Plan *bad_P2P_SAME_RANK(void)
{
	Plan *p = vee(0);
	assert_true(p->edges[1].src == 1 && p->edges[1].dst == 2);
	PlanOp s = {.kind = OP_SEND, .dir = DIR_ACT, .stage = 1, .mb = 0, .peer = 1, .route = 0};
	int64_t i = nth_op(p, 1, OP_F, 0) + 1;
	assert_int_equal(p->ranks[1].ops[i - 1].stage, 1);
	insert_op(p, 1, i, s, 0);
	s.kind = OP_RECV;
	insert_op(p, 1, i + 1, s, 1);
	return p;
}

static Plan *bad_P2P_ROUTE(void)
{
	Plan *p = chain();
	PlanOp *o = op_of(p, 0, OP_SEND, 0);
	assert_int_equal(p->routes[o->route].inverse_of, -1);
	o->route = 1; // the grad route that inverts it
	assert_int_equal(p->routes[1].inverse_of, 0);
	return p;
}

/* The SPREDUCE moved before the stage's last weight gradient on both tp members. */
static Plan *bad_DEP_SP_EARLY(void)
{
	Plan *p = chain_sp(1, 1);
	for (int r = 0; r < 2; r++) {
		int64_t i = nth_op(p, r, OP_SPREDUCE, 0), j = i;
		while (!(plan_ops[p->ranks[r].ops[j].kind].makes & PLAN_DEP_WGRAD))
			j--;
		PlanOp t = p->ranks[r].ops[i];
		drop_op(p, r, i);
		insert_op(p, r, j, t, 0);
	}
	return p;
}

/* chain_sp(dp, 1) with, on every rank, its first op of kind k and the one after it (of
 * kind next) swapped by swap. */
static Plan *sp_swapped(int dp, int k, int next, void (*swap)(Plan *, int, int64_t, int64_t))
{
	Plan *p = chain_sp(dp, 1);
	for (int r = 0; r < p->world; r++) {
		int64_t i = nth_op(p, r, k, 0);
		assert_int_equal(p->ranks[r].ops[i + 1].kind, next);
		swap(p, r, i, i + 1);
	}
	return p;
}

/* OPTIM before the SPREDUCE on both tp members. */
static Plan *bad_DEP_OPTIM_BEFORE_SP(void)
{
	return sp_swapped(1, OP_SPREDUCE, OP_OPTIM, swap_ops);
}

/* An SPREDUCE on both tp members of a plan without sequence parallelism. */
static Plan *bad_DEP_SP_NONE(void)
{
	Plan *p = chain_sp(1, 0);
	PlanOp t = {.kind = OP_SPREDUCE, .stage = 0, .mb = -1, .peer = -1,
	            .route = size_route(p, OP_SPREDUCE, 256)};
	for (int r = 0; r < 2; r++)
		insert_op(p, r, nth_op(p, r, OP_OPTIM, 0), t, 0);
	return p;
}

/* The SPREDUCE before the dp ALLREDUCE on every rank. */
static Plan *bad_DEP_SP_BEFORE_DP(void)
{
	return sp_swapped(2, OP_ALLREDUCE, OP_SPREDUCE, swap_in_groups);
}

static Plan *bad_DEP_SP_SIZE(void)
{
	Plan *p = chain_sp(1, 1);
	for (int r = 0; r < 2; r++) {
		PlanOp *o = op_of(p, r, OP_SPREDUCE, 0);
		o->route = size_route(p, OP_SPREDUCE, plan_op_bytes(p, o) + 4);
	}
	return p;
}

/* One per row of plan/rules.h (rules__every_row__has_a_case fails on a row left out). */
#define CASE(name) [PLAN_RULE_##name] = bad_##name
static Plan *(*const cases[PLAN_RULE_COUNT])(void) = {
	CASE(STAGE_PP),
	CASE(ROUTE_LINE),
	CASE(ROUTE_DEVICES),
	CASE(ROUTE_INVERSE),
	CASE(PEER_STAGE),
	CASE(PEER_PLACED),
	CASE(PEER_NAMES),
	CASE(PEER_TWICE),
	CASE(PEER_MISSING),
	CASE(GROUP_ALONE),
	CASE(GROUP_ORDER),
	CASE(PAIR),
	CASE(SELF_RECV),
	CASE(SELF_SEND_GROUP),
	CASE(SELF_SEND_ALONE),
	CASE(NO_SEND),
	CASE(FIFO),
	CASE(NO_RECV),
	CASE(COLL_PART),
	CASE(COLL_ORDER),
	CASE(TIE_COPY),
	CASE(TIE_NOCOPY),
	CASE(TIE_NONE),
	CASE(TIE_STAGE),
	CASE(TIE_PEER),
	CASE(TIE_BYTES),
	CASE(TIE_COUNT),
	CASE(OP_PLACED),
	CASE(NEVER_RUNS),
	CASE(NEVER_REDUCED),
	CASE(NEVER_GATHERED),
	CASE(NEVER_OPTIM),
	CASE(DEP_SECOND_F),
	CASE(DEP_SECOND_BACKWARD),
	CASE(DEP_BACKWARD_EARLY),
	CASE(DEP_SECOND_W),
	CASE(DEP_W_EARLY),
	CASE(DEP_SECOND_ONE),
	CASE(DEP_REDUCE_EARLY),
	CASE(DEP_OPTIM_EARLY),
	CASE(DEP_TIE_EARLY),
	CASE(DEP_SECOND_TP),
	CASE(DEP_TP_ORDER),
	CASE(DEP_BEFORE_HEAD_W),
	CASE(DEP_BEFORE_TIE),
	CASE(DEP_REDUCE_DP1),
	CASE(DEP_SCATTER_DP1),
	CASE(DEP_GATHER_DP1),
	CASE(DEP_GATHER_EARLY),
	CASE(DEP_SHARD_PLAIN),
	CASE(DEP_PLAIN_SHARD),
	CASE(DEP_GATHER_SIZE),
	CASE(DEP_OPTIM_UNREDUCED),
	CASE(DEP_PART_NO_REDUCE),
	CASE(DEP_NO_PART),
	CASE(DEP_PART_ORDER),
	CASE(DEP_PARTS_MIXED),
	CASE(DEP_NO_INPUT),
	CASE(DEP_NO_OUT_GRAD),
	CASE(DEP_SENT_EARLY),
	CASE(DEP_RECEIVED_TWICE),
	CASE(DEP_TP_SIZE),
	CASE(DEP_STAGE_AWAY),
	CASE(DEP_TP_AT_TP1),
	CASE(DEP_REDUCE_SIZE),
	CASE(DEP_SP_EARLY),
	CASE(DEP_OPTIM_BEFORE_SP),
	CASE(DEP_SP_NONE),
	CASE(DEP_SP_BEFORE_DP),
	CASE(DEP_SP_SIZE),
	CASE(P2P_NOT_HERE),
	CASE(P2P_PEER),
	CASE(P2P_SAME_RANK),
	CASE(P2P_ROUTE),
};
#undef CASE

/* ---- the tests ---- */

/* Row *state's bad plan fails verification with that row, its phrase in the message.
 * Run once per row, as rules__ROW__bad_plan_breaks_it. */
static void rules__row__bad_plan_breaks_it(void **state)
{
	int row = *(const int *)*state;
	if (!cases[row])
		skip(); // rules__every_row__has_a_case fails for it
	Plan *p = cases[row]();
	PlanError e;
	int rc = plan_verify(p, &e);
	plan_free(p);
	if (rc != -1)
		fail_msg("%s: the bad plan verifies", plan_rules[row].name);
	if (e.rule != row)
		fail_msg("%s: the bad plan breaks %s instead: %s", plan_rules[row].name,
		         e.rule >= 0 && e.rule < PLAN_RULE_COUNT ? plan_rules[e.rule].name : "no row",
		         e.msg);
	if (!strstr(e.msg, plan_rules[row].phrase))
		fail_msg("%s: the message lacks \"%s\": %s", plan_rules[row].name,
		         plan_rules[row].phrase, e.msg);
}

static void rules__every_row__has_a_case(void **state)
{
	(void)state;
	char missing[2048] = "";
	int n = 0;
	for (int row = 0; row < PLAN_RULE_COUNT; row++)
		if (!cases[row]) {
			size_t k = strlen(missing);
			snprintf(missing + k, sizeof missing - k, " %s", plan_rules[row].name);
			n++;
		}
	if (n)
		fail_msg("%d of %d rows have no bad plan:%s", n, PLAN_RULE_COUNT, missing);
}

/* Every phrase of the op table is a dependency row's (plan_rule_of finds it): a phrase
 * added to a kind's row needs its row in rules.h. */
static void rules__op_table_phrases__each_a_row(void **state)
{
	(void)state;
	int n = 0;
	for (int k = 0; k < OP_COUNT; k++) {
		const char *why[] = {plan_ops[k].again, plan_ops[k].early};
		for (int j = 0; j < 2; j++) {
			if (!why[j])
				continue;
			int row = plan_rule_of(why[j]);
			if (row < PLAN_RULE_FIRST_DEP)
				fail_msg("%s's \"%s\" has no row in plan/rules.h", plan_ops[k].name, why[j]);
			n++;
		}
	}
	assert_true(n > 0); // the loop saw the table's phrases
}

/* The op table's columns agree with each other: a p2p op names an edge and is sized by
 * it, a collective is sized by the sizes table and alone in its group, only a compute
 * op runs in tp parts, only a p2p op sends, a p2p op has a peer and so does TIEREDUCE
 * (its pair's other rank), no other op.  The fields: a comm op has a group and
 * bytes, a p2p op a route, a peer and a direction; a TPREDUCE (part_end, over tp) ends a
 * part, so it has a microbatch, a part and a direction, a TIEREDUCE a peer; a compute op
 * has a microbatch, and a part where it is parted.  plan_op_of_over finds the first
 * collective over each communicator (the dp group's plain ALLREDUCE, tp's TPREDUCE,
 * which the tp expansion asks it for); the distributed optimizer's two (shard) are over
 * dp too, and the SPREDUCE (a stage's, PLAN_DEP_SEQ) over tp. */
static void rules__op_table_columns__agree(void **state)
{
	(void)state;
	for (int k = 0; k < OP_COUNT; k++) {
		const OpInfo *o = &plan_ops[k];
		int p2p = plan_op_is_p2p((OpKind)k), coll = plan_op_is_coll((OpKind)k);
		int comm = plan_op_is_comm((OpKind)k), tp = o->part_end;
		int compute = plan_op_is_compute((OpKind)k);
		unsigned f = o->fields;
		if (o->over >= OP_OVER_COUNT || p2p != (o->at == OP_AT_EDGE) || coll != o->sized || coll != o->alone ||
		    (o->parted && !compute) || (o->sends && !p2p) || comm != (p2p || coll) ||
		    plan_op_has_peer((OpKind)k) > comm || p2p > plan_op_has_peer((OpKind)k))
			fail_msg("%s: its columns disagree", o->name);
		if (comm != !!(f & OP_FIELD_GROUP) || comm != !!(f & OP_FIELD_BYTES) ||
		    p2p != !!(f & OP_FIELD_ROUTE) ||
		    (p2p || o->over == OP_OVER_TIE) != !!(f & OP_FIELD_PEER) ||
		    (p2p || tp) != !!(f & OP_FIELD_DIR) || (o->parted || tp) != !!(f & OP_FIELD_PART) ||
		    (compute || p2p || tp) != !!(f & OP_FIELD_MB))
			fail_msg("%s: its fields disagree with its other columns", o->name);
		if (o->part_end && o->over != OP_OVER_TP)
			fail_msg("%s: ends a tp part but is not over tp", o->name);
		if (coll && !o->shard && !(o->makes & PLAN_DEP_SEQ) && plan_op_of_over(o->over) != (OpKind)k)
			fail_msg("%s: plan_op_of_over does not find it", o->name);
		if (o->shard && (o->over != OP_OVER_DP || !coll))
			fail_msg("%s: a distributed optimizer's op is not a dp collective", o->name);
	}
	assert_true(plan_op_has_peer(OP_TIEREDUCE) && !plan_op_has_peer(OP_ALLREDUCE) &&
	            !plan_op_has_peer(OP_TPREDUCE) && !plan_op_has_peer(OP_OPTIM));
	assert_true(plan_op_is_p2p(OP_SEND) && plan_ops[OP_SEND].sends && !plan_ops[OP_RECV].sends);
	assert_int_equal(plan_op_of_over(OP_OVER_PEER), OP_SEND);
	assert_int_equal(plan_op_of_over(OP_OVER_NONE), OP_COUNT);
	assert_int_equal(plan_ops[OP_F].dir, DIR_ACT);
	assert_int_equal(plan_ops[OP_B].dir, DIR_GRAD);
}

int main(void)
{
	static int rows[PLAN_RULE_COUNT];
	static char names[PLAN_RULE_COUNT][80];
	static struct CMUnitTest tests[PLAN_RULE_COUNT + 5] = {
		cmocka_unit_test(rules__op_table_columns__agree),
		cmocka_unit_test(rules__every_row__has_a_case),
		cmocka_unit_test(rules__op_table_phrases__each_a_row),
		cmocka_unit_test(rules__ROUTE_INVERSE__other_lines_route_refused),
		cmocka_unit_test(rules__P2P_ROUTE__other_lines_route_refused),
	};
	for (int row = 0; row < PLAN_RULE_COUNT; row++) {
		rows[row] = row;
		snprintf(names[row], sizeof names[row], "rules__%s__bad_plan_breaks_it",
		         plan_rules[row].name);
		tests[5 + row] = (struct CMUnitTest){names[row], rules__row__bad_plan_breaks_it,
		                                     NULL, NULL, &rows[row]};
	}
	/* Then the bad plans again with the verifier's walk on 3 workers: the same rows. */
	return cmocka_run_group_tests_name("rules", tests, NULL, NULL) |
	       cmocka_run_group_tests_name("rules, 3 threads", tests, threads_3, threads_1);
}
