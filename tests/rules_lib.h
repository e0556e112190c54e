/* test_rules.c's plans: good ones compiled from small programs (the tp=2 transformer,
 * tied tables, chains with dp, the distributed optimizer and sequence parallelism, V
 * shapes) and the edits that break them (ops dropped, inserted, swapped or resized,
 * group numbers kept consistent).  Included once, after cmocka.h, compiler/pipecc.h and
 * lower_lib.h. */
#ifndef TESTS_RULES_LIB_H
#define TESTS_RULES_LIB_H

/* ---- the good plans ---- */

/* A tp=2 transformer: stage 0's forward is two parts (after the embedding and the
 * attention), its backward two (only the first ends in a TPREDUCE); stage 1's backward
 * three. */
static const char tp_src[] =
	"pipeline t;\nmesh pp=2 tp=2;\nmicrobatches 2;\ninput tokens 1x4 vocab=8;\n"
	"stage s0 { embed 4; residual { layernorm; attention heads=2; } }\n"
	"stage s1 { residual { layernorm; mlp 8; } layernorm; head; loss xent; }\n"
	"schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n";

/* A head tied to the embedding on the other pipeline rank (HEAD: "head tied") or not
 * ("head"): the head keeps a copy, and each rank sums the table's gradient with the
 * other's by a TIEREDUCE. */
#define TIED_SRC(HEAD)                                                                     \
	"pipeline t;\nmesh pp=2;\nmicrobatches 2;\ninput tokens 1x4 vocab=8;\n"                \
	"stage s0 { embed 4; }\nstage s1 { layernorm; " HEAD "; loss xent; }\n"                \
	"schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n"

/* The same tie on one pipeline rank (placement v puts s0 and s3 on rank 0): the head
 * computes with the embedding's table, and its weight gradients add into stage 0's. */
static const char tied_v_src[] =
	"pipeline t;\nmesh pp=2;\nmicrobatches 2;\ninput tokens 1x4 vocab=8;\n"
	"stage s0 { embed 4; }\nstage s1 { layernorm; }\nstage s2 { layernorm; }\n"
	"stage s3 { layernorm; head tied; loss xent; }\n"
	"schedule zbv;\nplacement v;\ncost * f=1 b=1 w=1;\nlink ideal;\n";

/* src compiled with schedule sched (NULL: the program's), which must compile and verify. */
static Plan *good(const char *src, const char *sched)
{
	char errs[4096];
	Plan *p = compile_text(src, sched, errs, sizeof errs);
	if (!p)
		fail_msg("the good plan does not compile: %s", errs);
	PlanError e;
	if (plan_verify(p, &e))
		fail_msg("the good plan breaks %s: %s", e.rule >= 0 ? plan_rules[e.rule].name : "-",
		         e.msg);
	return p;
}

/* Two stages on pp=2, 2 microbatches, gpipe: rank 0 `F F SEND.. RECV BW RECV BW OPTIM`,
 * rank 1 the mirror. */
static Plan *chain(void)
{
	return good(program(2, 2, 1, 2, NULL), "gpipe");
}

/* The same on pp=2 dp=2: ranks 0, 1 hold stage 0 (dp 0, 1), ranks 2, 3 stage 1; each
 * ends with ALLREDUCE and OPTIM. */
static Plan *chain_dp(void)
{
	return good(program(2, 2, 2, 2, NULL), "gpipe");
}

/* chain_dp with the distributed optimizer: each rank ends with REDUCESCATTER, OPTIM,
 * ALLGATHER. */
static Plan *chain_dist(void)
{
	return good(program(2, 2, 2, 2, "optimizer adamw distributed;"), "gpipe");
}

/* Four stages on pp=2 in a V: rank 1 holds s1 and s2, joined by edge 1, handed over
 * locally or (self) sent to self, each SEND to self and its RECV in one group. */
static Plan *vee(int self)
{
	return good(program(4, 2, 1, 2, self ? "placement v;\npeers self_send;" : "placement v;"),
	            "zbv");
}

/* ---- edits ---- */

/* Rank r's nth op of kind k (0 first). */
static int64_t nth_op(const Plan *p, int r, int k, int nth)
{
	const PlanRank *rk = &p->ranks[r];
	for (int64_t i = 0; i < rk->nops; i++)
		if (rk->ops[i].kind == k && nth-- == 0)
			return i;
	fail_msg("rank %d has no such %s", r, plan_ops[k].name);
	return -1;
}

static PlanOp *op_of(Plan *p, int r, int k, int nth)
{
	return &p->ranks[r].ops[nth_op(p, r, k, nth)];
}

/* Rank r's last SEND to or RECV from q (kind k). */
static int64_t last_p2p(const Plan *p, int r, int k, int q)
{
	for (int64_t i = p->ranks[r].nops - 1; i >= 0; i--)
		if (p->ranks[r].ops[i].kind == k && p->ranks[r].ops[i].peer == q)
			return i;
	fail_msg("rank %d has no %s with peer %d", r, plan_ops[k].name, q);
	return -1;
}

/* Rank r's nth TPREDUCE in direction dir. */
static PlanOp *tpreduce(Plan *p, int r, int dir, int nth)
{
	for (int64_t i = 0; i < p->ranks[r].nops; i++) {
		PlanOp *o = &p->ranks[r].ops[i];
		if (o->kind == OP_TPREDUCE && o->dir == dir && nth-- == 0)
			return o;
	}
	fail_msg("rank %d has no such TPREDUCE", r);
	return NULL;
}

static void drop_op(Plan *p, int r, int64_t i)
{
	PlanRank *rk = &p->ranks[r];
	assert_true(i >= 0 && i < rk->nops);
	memmove(&rk->ops[i], &rk->ops[i + 1], (size_t)(rk->nops - i - 1) * sizeof *rk->ops);
	if (rk->lines)
		memmove(&rk->lines[i], &rk->lines[i + 1], (size_t)(rk->nops - i - 1) * sizeof *rk->lines);
	rk->nops--;
}

/* The comm ops of rank r from op i on move one group on. */
static void shift_groups(Plan *p, int r, int64_t i)
{
	for (; i < p->ranks[r].nops; i++)
		if (plan_is_comm(p->ranks[r].ops[i].kind))
			p->ranks[r].ops[i].group++;
}

/* o put before op i of rank r.  A comm op gets a group: `join`, that of the comm op just
 * before it; else a new one after it, the groups after moving one on (so they still
 * increase). */
static void insert_op(Plan *p, int r, int64_t i, PlanOp o, int join)
{
	PlanRank *rk = &p->ranks[r];
	assert_true(i >= 0 && i <= rk->nops);
	if (plan_is_comm(o.kind)) {
		int32_t last = -1;
		for (int64_t j = 0; j < i; j++)
			if (plan_is_comm(rk->ops[j].kind))
				last = rk->ops[j].group;
		if (join)
			assert_true(i > 0 && plan_is_comm(rk->ops[i - 1].kind));
		else
			shift_groups(p, r, i);
		o.group = join ? last : last + 1;
	}
	assert_non_null(plan_push_op(rk, o, 0));
	memmove(&rk->ops[i + 1], &rk->ops[i], (size_t)(rk->nops - 1 - i) * sizeof *rk->ops);
	rk->ops[i] = o;
	if (rk->lines) {
		memmove(&rk->lines[i + 1], &rk->lines[i], (size_t)(rk->nops - 1 - i) * sizeof *rk->lines);
		rk->lines[i] = 0;
	}
}

static void swap_ops(Plan *p, int r, int64_t i, int64_t j)
{
	PlanOp t = p->ranks[r].ops[i];
	p->ranks[r].ops[i] = p->ranks[r].ops[j];
	p->ranks[r].ops[j] = t;
}

/* Op i of rank r, not a comm op, moved to the end of its list. */
static void move_to_end(Plan *p, int r, int64_t i)
{
	PlanOp o = p->ranks[r].ops[i];
	assert_false(plan_is_comm(o.kind));
	drop_op(p, r, i);
	insert_op(p, r, p->ranks[r].nops, o, 0);
}

/* The `route` of a sized op of kind k moving bytes (one of the plan's sizes[]). */
static int32_t size_route(Plan *p, int k, int64_t bytes)
{
	PlanOp t = {.kind = (uint8_t)k, .mb = -1, .peer = -1, .route = -1};
	assert_int_equal(plan_op_set_bytes(p, &t, bytes), 0);
	return t.route;
}

/* The layer of kind `kind` of stage s. */
static PlanLayer *layer_of(Plan *p, int s, LayerKind kind)
{
	for (int l = 0; l < p->stages[s].nlayers; l++)
		if (p->stages[s].layers[l].kind == kind)
			return &p->stages[s].layers[l];
	fail_msg("stage %d has no %s layer", s, plan_layers[kind].name);
	return NULL;
}

/* A one-stage model on pp=1 x dp x tp=2 with sequence parallelism (`sp` 1) or without:
 * its layernorm's gradients are each rank's over its rows, summed by the stage's
 * SPREDUCE (after the dp reduction, before OPTIM). */
static Plan *chain_sp(int dp, int sp)
{
	char src[512];
	snprintf(src, sizeof src,
	         "pipeline t;\nmesh pp=1 dp=%d tp=2%s;\nmicrobatches 2;\ninput tokens 2x8 vocab=32;\n"
	         "stage s0 { embed 32; layernorm; head; loss xent; }\nschedule gpipe;\n",
	         dp, sp ? " sp" : "");
	return good(src, "gpipe");
}

/* Ops i and j of rank r swapped, each group number left in its place. */
static void swap_in_groups(Plan *p, int r, int64_t i, int64_t j)
{
	swap_ops(p, r, i, j);
	int32_t g = p->ranks[r].ops[i].group;
	p->ranks[r].ops[i].group = p->ranks[r].ops[j].group;
	p->ranks[r].ops[j].group = g;
}

#endif
