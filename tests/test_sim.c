/* Simulator tests: unit-cost makespans of the compiler's schedules, the bad-plan corpus
 * in tests/plans/bad (each caught with the right ops named), verdicts that depend on
 * buffering, both timing models, peak activations, the critical path, link costs, stop and
 * progress, and the reader + verifier + simulator on fuzzed plan files (fixed seed: never a
 * crash, always a located error).  The memory model and the reports are tested in
 * test_sim_reports.c; the independent reference for the strict model is test_sim_ref.c.
 * Paths are relative to the repository root, where make runs us. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/link.h"
#include "../plan/io.h"
#include "../plan/mem.h"
#include "../plan/tp.h"
#include "../plan/sizes.h"
#include "../sim/sim.h"

#include "sim_lib.h"

/* ---- unit costs ---- */

static void sim__unit_cost_schedules__makespan_3_m_plus_p_minus_1(void **state)
{
	(void)state;
	const char *scheds[] = {"gpipe", "1f1b"};
	for (int si = 0; si < 2; si++) {
		for (int pp = 1; pp <= 6; pp++) {
			for (int m = 1; m <= 9; m += 2) {
				Plan *p = compile_text(program(pp, 1, m, scheds[si], "f=1 b=1 w=1", "ideal"),
				                       NULL);
				assert_non_null(p);
				SimResult res;
				SimOptions o = {.model = SIM_STRICT};
				assert_int_equal(sim_run(p, &o, &res), 0);
				int64_t want = 3 * (int64_t)(m + pp - 1) * 1000;
				if (res.makespan != want)
					fail_msg("%s pp=%d m=%d: makespan %lld, want %lld", scheds[si], pp, m,
					         (long long)res.makespan, (long long)want);
				/* Peak activations: gpipe m everywhere; 1f1b min(p - i, m) on rank i. */
				for (int r = 0; r < pp; r++) {
					int64_t units = si == 0 ? m : (pp - r < m ? pp - r : m);
					assert_int_equal(res.ranks[r].peak_act_units, units);
					int s = r; // one stage per rank, loop placement
					int64_t per = p->stages[s].save_fb + p->stages[s].save_fw;
					assert_int_equal(res.ranks[r].peak_act_bytes, units * per);
					assert_int_equal(res.ranks[r].busy, 3 * (int64_t)m * 1000);
				}
				double bubble = 1.0 - (double)m / (m + pp - 1);
				assert_true(res.bubble > bubble - 1e-9 && res.bubble < bubble + 1e-9);
				sim_result_free(&res);
				/* With free links, overlapping communication changes nothing. */
				o.model = SIM_OVERLAP;
				assert_int_equal(sim_run(p, &o, &res), 0);
				assert_int_equal(res.makespan, want);
				sim_result_free(&res);
				plan_free(p);
			}
		}
	}
}

static void sim__dp_replicas__same_makespan_and_allreduce_counted(void **state)
{
	(void)state;
	Plan *p = compile_text(program(3, 2, 4, "1f1b", "f=1 b=1 w=1", "ideal"), NULL);
	assert_non_null(p);
	SimResult res;
	SimOptions o = {.model = SIM_STRICT};
	assert_int_equal(sim_run(p, &o, &res), 0);
	assert_int_equal(res.makespan, 3 * (4 + 3 - 1) * 1000);
	assert_int_equal(res.ncollectives, 3);
	for (int i = 0; i < res.ncollectives; i++) {
		assert_int_equal(res.collectives[i].members, 2);
		assert_int_equal(res.collectives[i].count, 1);
	}
	sim_result_free(&res);
	plan_free(p);

	/* With real links the step ends in all-reduces: the critical path still runs from
	 * 0 to the makespan without gaps, through the last member to reach them. */
	p = compile_text(program(3, 2, 4, "1f1b", "f=1 b=1 w=1", "latency=5us bandwidth=1GB/s"), NULL);
	assert_non_null(p);
	for (int model = 0; model < SIM_MODEL_COUNT; model++) {
		SimOptions ro = {.model = model, .record_ops = 1};
		assert_int_equal(sim_run(p, &ro, &res), 0);
		assert_true(res.npath > 3);
		assert_int_equal(res.path[0].start, 0);
		assert_int_equal(res.path[res.npath - 1].end, res.makespan);
		for (int64_t i = 1; i < res.npath; i++)
			assert_int_equal(res.path[i].start, res.path[i - 1].end);
		sim_result_free(&res);
	}
	plan_free(p);
}

/* ---- timing ---- */

/* Times past 48 bits (78 hours) are kept whole, in the result's wide table: gpipe on
 * pp=2 with 1000 s forwards, rank 0's forwards back to back, F k over [k C, (k + 1) C],
 * in both models, the last ones ending past 2^48 ns. */
static void sim__times_past_48_bits__kept_exact(void **state)
{
	(void)state;
	const int64_t c = 1000000000000; // 1000 s in ns
	Plan *p = compile_text(program(2, 1, 300, "gpipe", "f=1000000000 b=1 w=1", "ideal"), NULL);
	assert_non_null(p);
	for (int model = 0; model < SIM_MODEL_COUNT; model++) {
		SimResult res;
		SimOptions o = {.model = model, .record_ops = 1};
		assert_int_equal(sim_run(p, &o, &res), 0);
		assert_true(res.nwide > 0);
		int64_t k = 0;
		for (int64_t i = 0; i < p->ranks[0].nops; i++) {
			if (p->ranks[0].ops[i].kind != OP_F)
				continue;
			SimOpTime t = sim_op_time(&res, 0, i);
			assert_int_equal(t.start, k * c);
			assert_int_equal(t.end, (k + 1) * c);
			k++;
		}
		assert_int_equal(k, 300);
		assert_true(300 * c > ((int64_t)1 << 48));
		for (int r = 0; r < p->world; r++)
			for (int64_t i = 0; i < p->ranks[r].nops; i++) {
				SimOpTime t = sim_op_time(&res, r, i);
				assert_true(t.start >= 0 && t.end >= t.start && t.end <= res.makespan);
			}
		sim_result_free(&res);
	}
	plan_free(p);
}

/* Costs so large that the run's times saturate at INT64_MAX: the report's critical
 * path sums them saturating too, and the grid's columns end at INT64_MAX (both wrapped,
 * UB: negative compute and waiting, a grid of one column). */
static void sim__saturated_times__report_sums_saturate(void **state)
{
	(void)state;
	Plan *p = compile_text(program(2, 1, 8, "1f1b", "f=1 b=1 w=1", "ideal"), NULL);
	assert_non_null(p);
	for (int st = 0; st < p->nstages; st++)
		for (int k = 0; k < 3; k++)
			p->stages[st].cost[k] = INT64_MAX / 4;
	SimResult res;
	SimOptions o = {.model = SIM_STRICT, .record_ops = 1};
	assert_int_equal(sim_run(p, &o, &res), 0);
	assert_int_equal(res.makespan, INT64_MAX);
	assert_true(res.npath > 1);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_int_equal(sim_report_summary(f, p, &res, NULL), 0);
	fclose(f);
	const char *cp = strstr(buf, "critical path:");
	assert_non_null(cp);
	assert_non_null(strstr(cp, "9223372037 s of compute, 0 ns of communication"));
	free(buf);
	/* The grid's columns up to INT64_MAX, one per cost (the costs' gcd) and a last short
	 * one: INT64_MAX = 4 (INT64_MAX / 4) + 3. */
	f = open_memstream(&buf, &len);
	assert_int_equal(sim_report_grid(f, p, &res, 60), 0);
	fclose(f);
	assert_non_null(strstr(buf, " s, 5 columns;"));
	assert_null(strstr(buf, "-"));
	free(buf);
	sim_result_free(&res);
	plan_free(p);
}

static void sim__link_costs__transfer_and_allreduce_times(void **state)
{
	(void)state;
	/* pp=2, m=1, gpipe: F0 | xfer | F1 BW1 | xfer | BW0, then the all-reduce is per
	 * replica-group of one rank (dp = 1): free. */
	Plan *p = compile_text(program(2, 1, 1, "gpipe", "f=1 b=2 w=3", "latency=2us bandwidth=1GB/s"),
	                       NULL);
	assert_non_null(p);
	int64_t x = plan_link_ns(p, 0, p->edges[0].bytes);
	assert_true(x > 2000);
	SimResult res;
	SimOptions o = {.model = SIM_STRICT, .record_ops = 1};
	assert_int_equal(sim_run(p, &o, &res), 0);
	assert_int_equal(res.makespan, 1000 + x + 1000 + 5000 + x + 5000);
	/* Every op has a time, ends after it starts, and compute ops take their cost. */
	for (int r = 0; r < p->world; r++) {
		for (int64_t i = 0; i < p->ranks[r].nops; i++) {
			SimOpTime t = sim_op_time(&res, r, i);
			assert_true(t.start >= 0 && t.end >= t.start);
			const PlanOp *op = &p->ranks[r].ops[i];
			if (op->kind == OP_F)
				assert_int_equal(t.end - t.start, 1000);
			if (op->kind == OP_BW)
				assert_int_equal(t.end - t.start, 5000);
		}
	}
	/* The critical path covers the makespan without gaps or overlaps. */
	assert_true(res.npath >= 2);
	assert_int_equal(res.path[0].start, 0);
	assert_int_equal(res.path[res.npath - 1].end, res.makespan);
	for (int64_t i = 1; i < res.npath; i++)
		assert_int_equal(res.path[i].start, res.path[i - 1].end);
	assert_int_equal(res.nlinks, 2);
	assert_int_equal(res.links[0].bytes, p->edges[0].bytes);
	sim_result_free(&res);
	plan_free(p);

	/* All-reduce over n ranks: 2(n-1) latency + ceil(2(n-1)/n * bytes / bandwidth). */
	p = compile_text(program(1, 4, 1, "gpipe", "f=1 b=1 w=1", "latency=1us bandwidth=1GB/s"),
	                 NULL);
	assert_non_null(p);
	int64_t bytes = p->stages[0].params * 4;
	int64_t ar = 6 * 1000 + (int64_t)((6.0 / 4) * (double)bytes); // 1 GB/s: 1 ns per byte
	assert_int_equal(plan_dim_coll_ns(p, OP_ALLREDUCE, DIM_DP, 0, bytes), ar);
	assert_int_equal(sim_run(p, &o, &res), 0);
	assert_int_equal(res.makespan, 3000 + ar);
	sim_result_free(&res);
	plan_free(p);
}

/* Rank r's first op of kind k, or -1. */
static int64_t first_op(const Plan *p, int r, int k)
{
	for (int64_t i = 0; i < p->ranks[r].nops; i++)
		if (p->ranks[r].ops[i].kind == k)
			return i;
	return -1;
}

/* The distributed optimizer: a REDUCESCATTER and an ALLGATHER each take half the
 * all-reduce's ring over their whole buffer (f32 gradients, parameters at the
 * precision's bytes: in f32 the pair costs the all-reduce, in bf16 less), in order
 * (reduce-scatter, step, all-gather) in both models; members that post different
 * collectives at the same point are a mismatch. */
static void sim__distributed_optimizer__half_rings_in_order(void **state)
{
	(void)state;
	const char *link = "latency=1us bandwidth=1GB/s"; // 1 ns a byte
	for (int bf16 = 0; bf16 < 2; bf16++) {
		const char *extra = bf16 ? "precision bf16;\noptimizer adamw;" : "optimizer adamw;";
		const char *dist = bf16 ? "precision bf16;\noptimizer adamw distributed;"
		                        : "optimizer adamw distributed;";
		Plan *plain = compile_text(program_text(1, 1, 4, 2, "gpipe", "f=1 b=1 w=1", link, extra),
		                           NULL);
		Plan *p = compile_text(program_text(1, 1, 4, 2, "gpipe", "f=1 b=1 w=1", link, dist), NULL);
		assert_non_null(plain);
		assert_non_null(p);
		int64_t g = p->stages[0].params * 4, w = p->stages[0].params * (bf16 ? 2 : 4);
		int64_t rs = 3000 + g * 3 / 4, ag = 3000 + w * 3 / 4;
		int64_t ar = plan_dim_coll_ns(p, OP_ALLREDUCE, DIM_DP, 0, g);
		assert_int_equal(plan_dim_coll_ns(p, OP_REDSCATTER, DIM_DP, 0, g), rs);
		assert_int_equal(plan_dim_coll_ns(p, OP_ALLGATHER, DIM_DP, 0, w), ag);
		assert_int_equal(ar, 6000 + g * 6 / 4);
		for (int model = 0; model < SIM_MODEL_COUNT; model++) {
			SimOptions o = {.model = model, .record_ops = SIM_RECORD_ALL};
			SimResult a, b;
			assert_int_equal(sim_run(plain, &o, &a), 0);
			assert_int_equal(sim_run(p, &o, &b), 0);
			int64_t compute = 3 * 2 * 1000; // gpipe, 2 microbatches of f, b, w
			assert_int_equal(a.makespan, compute + ar);
			assert_int_equal(b.makespan, compute + rs + ag);
			if (!bf16)
				assert_int_equal(a.makespan, b.makespan);
			for (int r = 0; r < p->world; r++) {
				int64_t i = first_op(p, r, OP_REDSCATTER), j = first_op(p, r, OP_OPTIM);
				int64_t k = first_op(p, r, OP_ALLGATHER);
				assert_true(i >= 0 && i < j && j < k);
				SimOpTime ti = sim_op_time(&b, r, i), tj = sim_op_time(&b, r, j);
				SimOpTime tk = sim_op_time(&b, r, k);
				assert_int_equal(ti.end - ti.start, rs);
				assert_int_equal(tk.end - tk.start, ag);
				assert_true(tj.start >= ti.end && tk.start >= tj.end);
			}
			sim_result_free(&a);
			sim_result_free(&b);
		}
		plan_free(plain);
		if (bf16) {
			plan_free(p);
			continue;
		}
		/* Rank 1 all-reduces where its group reduce-scatters: a mismatch, both named. */
		p->ranks[1].ops[first_op(p, 1, OP_REDSCATTER)].kind = OP_ALLREDUCE;
		SimResult c;
		SimOptions o = {.model = SIM_STRICT};
		assert_int_equal(sim_run(p, &o, &c), 1);
		assert_int_equal(c.verdict, SIM_MISMATCH);
		assert_contains(c.message, "run different collectives at the same point");
		sim_result_free(&c);
		plan_free(p);
	}
}

/* Sequence parallelism: a one-stage model whose replicated layers (a layernorm, a
 * replicated linear: 64 + 32 x 32 + 32 parameters, f32 gradients also under bf16) each
 * rank holds gradients of over its rows only.  The stage's SPREDUCE sums them over the
 * tp group after its last W and before its OPTIM, for the tp ring's time (the link
 * model's, plan/link.h), which ends the step in both models; without sp there is none;
 * a member summing other bytes is a mismatch of the tp group. */
static void sim__sp_reduce__tp_ring_before_the_step(void **state)
{
	(void)state;
	static const char *const fmt =
	    "pipeline t;\nmesh pp=1 tp=2%s;\nmicrobatches 2;\ninput tokens 2x8 vocab=32;\n"
	    "stage s0 { embed 32; layernorm; linear 32; head; loss xent; }\nschedule gpipe;\n"
	    "cost * f=1 b=1 w=1;\nlink latency=1us bandwidth=1GB/s;\n%s\n";
	int64_t bytes = (64 + 32 * 32 + 32) * 4;
	for (int v = 0; v < 3; v++) {
		char src[1024];
		snprintf(src, sizeof src, fmt, v == 2 ? "" : " sp", v == 1 ? "precision bf16;" : "");
		Plan *p = compile_text(src, NULL);
		assert_non_null(p);
		for (int r = 0; r < p->world; r++) {
			int64_t i = first_op(p, r, OP_SPREDUCE);
			if (v == 2) {
				assert_int_equal(i, -1);
				continue;
			}
			assert_true(i >= 0);
			assert_int_equal(plan_op_bytes(p, &p->ranks[r].ops[i]), bytes);
			assert_int_equal(plan_sp_bytes(p, 0), bytes);
		}
		int64_t ring = plan_dim_coll_ns(p, OP_SPREDUCE, DIM_TP, 0, bytes);
		assert_true(ring > 1000); // its latency at least
		for (int model = 0; model < SIM_MODEL_COUNT && v < 2; model++) {
			SimOptions o = {.model = model, .record_ops = SIM_RECORD_ALL};
			SimResult a;
			assert_int_equal(sim_run(p, &o, &a), 0);
			for (int r = 0; r < p->world; r++) {
				int64_t i = first_op(p, r, OP_SPREDUCE), j = first_op(p, r, OP_OPTIM);
				assert_true(i >= 0 && i < j);
				SimOpTime ti = sim_op_time(&a, r, i), tj = sim_op_time(&a, r, j);
				assert_int_equal(ti.end - ti.start, ring);
				assert_true(tj.start >= ti.end);
				assert_int_equal(a.makespan, tj.end);
				for (int64_t k = 0; k < i; k++) // every W before it
					if (plan_ops[p->ranks[r].ops[k].kind].makes & PLAN_DEP_WGRAD)
						assert_true(sim_op_time(&a, r, k).end <= ti.start);
			}
			sim_result_free(&a);
		}
		if (v == 0) { // rank 1 sums other bytes: a mismatch in its tp group
			PlanOp *x = &p->ranks[1].ops[first_op(p, 1, OP_SPREDUCE)];
			assert_int_equal(plan_op_set_bytes(p, x, bytes + 4), 0);
			SimOptions o = {.model = SIM_STRICT};
			SimResult c;
			assert_int_equal(sim_run(p, &o, &c), 1);
			assert_int_equal(c.verdict, SIM_MISMATCH);
			assert_contains(c.message, "members of a tp group all-reduce different sizes");
			sim_result_free(&c);
		}
		plan_free(p);
	}
}

static void sim__overlap_model__hides_transfers_strict_does_not(void **state)
{
	(void)state;
	Plan *p = compile_text(program(4, 1, 8, "1f1b", "f=10 b=10 w=10", "latency=5us bandwidth=10GB/s"),
	                       NULL);
	assert_non_null(p);
	SimResult a, b;
	SimOptions o = {.model = SIM_STRICT};
	assert_int_equal(sim_run(p, &o, &a), 0);
	o.model = SIM_OVERLAP;
	assert_int_equal(sim_run(p, &o, &b), 0);
	assert_true(b.makespan <= a.makespan);
	assert_true(b.makespan >= 3 * (8 + 4 - 1) * 10000); // never better than free links
	assert_int_equal(a.busy, b.busy);
	sim_result_free(&a);
	sim_result_free(&b);
	plan_free(p);
}

/* ---- the bad corpus ---- */

typedef struct {
	const char *file;
	const char *needles[3]; // in the verifier's message
} VerifyCase;

static void sim__bad_corpus__verifier_names_both_ops(void **state)
{
	(void)state;
	static const VerifyCase cases[] = {
	    {"crossed_fifo", {"`SEND act e=0 m=0 to=1", "`RECV act e=0 m=1 from=0", "microbatch"}},
	    {"missing_send", {"`RECV act e=0 m=1 from=0", "no matching SEND", "(line 38)"}},
	    {"missing_recv", {"`SEND act e=0 m=1 to=1", "no matching RECV", "(line 28)"}},
	    {"compute_before_input", {"`F 1 0`", "before its input", "(line 35)"}},
	    {"w_before_b", {"`W 1 0`", "W before its B", "(line 37)"}},
	    {"allreduce_subset", {"`ALLREDUCE s=0", "only part of its dp group", "rank 1"}},
	    {"tp_order",
	     {"rank 3 op 11 (line 111) `TPREDUCE grad s=1 m=1 part=0",
	      "rank 2 op 11 (line 86) `TPREDUCE grad s=1 m=0 part=0", "collectives differ"}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char path[256];
		snprintf(path, sizeof path, "tests/plans/bad/%s.plan", cases[i].file);
		Plan *p = read_good(path);
		PlanError e;
		if (plan_verify(p, &e) == 0)
			fail_msg("%s: verifier found nothing", path);
		assert_true(e.line > 0);
		for (int k = 0; k < 3 && cases[i].needles[k]; k++)
			assert_contains(e.msg, cases[i].needles[k]);
		plan_free(p);
	}
}

typedef struct {
	const char *file;
	int eager_ok;    // runs with --eager
	int ncycle;
	const char *needles[3]; // in the failure report
} DeadlockCase;

static void sim__bad_corpus__deadlocks_with_cycle(void **state)
{
	(void)state;
	static const DeadlockCase cases[] = {
	    {"head_to_head", 1, 2,
	     {"rank 0 SEND act e=0 m=1 to=1 bytes=128 g=1 r=0 (line 27) waits for rank 1 RECV act "
	      "e=0 m=1 from=0 bytes=128 g=2 r=0 (line 39) which waits behind rank 1 SEND grad e=0 "
	      "m=0 to=0 bytes=128 g=1 r=1 (line 38)",
	      "x.plan:27: note: blocked: rank 0 SEND act", "x.plan:38: note: blocked: rank 1 SEND grad"}},
	    {"cycle3", 0, 3,
	     {"rank 0 RECV grad e=2 m=0 from=2 bytes=32 g=0 r=5 (line 35) waits for rank 2 SEND grad",
	      "rank 2 RECV act e=1 m=0 from=1 bytes=32 g=0 r=2 (line 54) waits for rank 1 SEND act",
	      "rank 1 RECV act e=0 m=0 from=0 bytes=32 g=0 r=0 (line 44) waits for rank 0 SEND act"}},
	    {"stall_at_zero", 0, 2,
	     {"rank 0 RECV grad e=0 m=0 from=1 bytes=128 g=0 r=1 (line 24) waits for rank 1 SEND grad",
	      "rank 1 RECV act e=0 m=0 from=0 bytes=128 g=0 r=0 (line 35) waits for rank 0 SEND act",
	      "x.plan:24: note: blocked: rank 0 RECV grad"}},
	    {"dp_order", 0, 4,
	     {"rank 0 ALLREDUCE s=2 bytes=80 g=4 (line 51) waits for rank 1 ALLREDUCE s=2",
	      "which waits behind rank 1 RECV grad e=2 m=0 from=3",
	      "rank 3 ALLREDUCE s=3 bytes=80 g=3 (line 104) waits for rank 2 ALLREDUCE s=3"}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char path[256];
		snprintf(path, sizeof path, "tests/plans/bad/%s.plan", cases[i].file);
		Plan *p = read_good(path);
		PlanError e;
		if (plan_verify(p, &e))
			fail_msg("%s: %s", path, e.msg);
		for (int model = 0; model < SIM_MODEL_COUNT; model++) {
			SimResult res;
			SimOptions o = {.model = model, .record_ops = 1};
			assert_int_equal(sim_run(p, &o, &res), 1);
			assert_int_equal(res.verdict, SIM_DEADLOCK);
			assert_int_equal(res.ncycle, cases[i].ncycle);
			/* The cycle closes: each edge's awaited stream is blocked where the next
			 * edge starts. */
			for (int k = 0; k < res.ncycle; k++) {
				const SimWait *w = &res.cycle[k], *nx = &res.cycle[(k + 1) % res.ncycle];
				assert_int_equal(w->on.rank, nx->from.rank);
				assert_int_equal(w->behind.op, nx->from.op);
				assert_true(w->on.op > w->behind.op); // not posted: behind the blocked op
			}
			if (model == SIM_STRICT) {
				char *txt = failure_text(p, &res);
				for (int k = 0; k < 3; k++)
					assert_contains(txt, cases[i].needles[k]);
				assert_contains(txt, "last steps before the stall");
				free(txt);
			}
			sim_result_free(&res);
			o.eager = 1;
			int rc = sim_run(p, &o, &res);
			assert_int_equal(rc, cases[i].eager_ok ? 0 : 1);
			sim_result_free(&res);
		}
		plan_free(p);
	}
}

/* Tensor parallelism: a TPREDUCE completes when every member of the tp group posts the
 * same one.  Hand-edited plans that verify but deadlock: members all-reducing different
 * microbatches first (a 2-cycle of TPREDUCEs), and a cycle through two tp groups and two
 * pipeline transfers; in both timing models. */
static void sim__tp_plans__collectives_and_cycles(void **state)
{
	(void)state;
	Plan *p = read_good("tests/plans/good/tp2.plan");
	PlanError e;
	if (plan_verify(p, &e))
		fail_msg("tp2: %s", e.msg);
	SimResult res;
	SimOptions o = {.model = SIM_STRICT, .record_ops = 1};
	assert_int_equal(sim_run(p, &o, &res), 0);
	assert_int_equal(res.ntp, 2); // two tp groups: {0, 1} on stage 0, {2, 3} on stage 1
	/* 2 microbatches: stage 0 has 2 forward and 1 backward all-reduces, stage 1 2 and 2 */
	assert_int_equal(res.tp[0].count, 2 * (2 + 1));
	assert_int_equal(res.tp[1].count, 2 * (2 + 2));
	assert_int_equal(res.tp[0].members, 2);
	/* compute is the stage costs, split over parts without loss */
	for (int r = 0; r < p->world; r++)
		assert_int_equal(res.ranks[r].busy, 2 * (p->stages[0].cost[0] + p->stages[0].cost[1] +
		                                              p->stages[0].cost[2]));
	int64_t strict = res.makespan;
	sim_result_free(&res);
	o.model = SIM_OVERLAP; // the parts wait for their TPREDUCEs across the two streams
	assert_int_equal(sim_run(p, &o, &res), 0);
	assert_true(res.makespan > 0 && res.makespan <= strict);
	assert_int_equal(res.tp[1].count, 2 * (2 + 2));
	for (int r = 0; r < p->world; r++)
		assert_int_equal(res.ranks[r].busy, 2 * (p->stages[0].cost[0] + p->stages[0].cost[1] +
		                                              p->stages[0].cost[2]));
	sim_result_free(&res);
	plan_free(p);

	static const DeadlockCase cases[] = {
	    {"tp_pp_cycle", 0, 4,
	     {"rank 0 TPREDUCE act s=0 m=1 part=0 bytes=64 g=3 (line 39) waits for rank 1 TPREDUCE",
	      "rank 1 RECV grad e=0 m=0 from=3 bytes=64 g=3 r=3 (line 59) waits for rank 3 SEND grad",
	      "rank 3 TPREDUCE grad s=1 m=0 part=0 bytes=64 g=3 (line 106) waits for rank 2 "
	      "TPREDUCE"}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char path[256];
		snprintf(path, sizeof path, "tests/plans/bad/%s.plan", cases[i].file);
		p = read_good(path);
		if (plan_verify(p, &e))
			fail_msg("%s: %s", path, e.msg);
		for (int run = 0; run < 4; run++) {
			o = (SimOptions){.model = run / 2 ? SIM_OVERLAP : SIM_STRICT, .record_ops = 1,
			                 .eager = run % 2};
			assert_int_equal(sim_run(p, &o, &res), 1);
			assert_int_equal(res.verdict, SIM_DEADLOCK);
			assert_int_equal(res.ncycle, cases[i].ncycle);
			for (int k = 0; k < res.ncycle; k++) {
				const SimWait *w = &res.cycle[k], *nx = &res.cycle[(k + 1) % res.ncycle];
				assert_int_equal(w->on.rank, nx->from.rank);
				assert_int_equal(w->behind.op, nx->from.op);
			}
			char *txt = failure_text(p, &res);
			for (int k = 0; k < 3 && o.model == SIM_STRICT; k++)
				assert_contains(txt, cases[i].needles[k]);
			assert_contains(txt, o.model == SIM_STRICT ? "rank 3 TPREDUCE" : "rank 3 comm TPREDUCE");
			free(txt);
			sim_result_free(&res);
		}
		plan_free(p);
	}
}
/* Without the verifier, the run itself still catches pairing errors with both ops. */
static void sim__unverified_mismatch__run_names_both_ops(void **state)
{
	(void)state;
	Plan *p = read_good("tests/plans/bad/crossed_fifo.plan");
	SimResult res;
	SimOptions o = {.model = SIM_STRICT};
	assert_int_equal(sim_run(p, &o, &res), 1);
	assert_int_equal(res.verdict, SIM_MISMATCH);
	assert_int_equal(res.nstuck, 2);
	assert_int_equal(res.stuck[0].rank, 0);
	assert_int_equal(res.stuck[0].op, 1);
	assert_int_equal(res.stuck[1].rank, 1);
	assert_int_equal(res.stuck[1].op, 0);
	char *txt = failure_text(p, &res);
	assert_contains(txt, "x.plan:25: error: mismatch");
	assert_contains(txt, "rank 1 RECV act e=0 m=1 from=0 bytes=128 g=0 r=0 (line 35)");
	free(txt);
	sim_result_free(&res);
	/* Told the plan verified (pipesim's run beside the verifier, whose result the
	 * verifier's refusal drops), the run skips the check: it runs on, and says nothing
	 * of the mismatch. */
	o.verified = 1;
	assert_true(sim_run(p, &o, &res) >= 0);
	assert_int_not_equal(res.verdict, SIM_MISMATCH);
	sim_result_free(&res);
	o.verified = 0;
	plan_free(p);

	/* A tp group posting its TPREDUCEs in two orders (the verifier's COLL_ORDER refuses
	 * it): run anyway, members match collectives by identity, so it is a deadlock, not
	 * m=0 reduced with m=1. */
	p = read_good("tests/plans/bad/tp_order.plan");
	assert_int_equal(sim_run(p, &o, &res), 1);
	assert_int_equal(res.verdict, SIM_DEADLOCK);
	sim_result_free(&res);
	plan_free(p);

	/* A send nobody receives: a deadlock-free stall under eager, caught at the end. */
	p = read_good("tests/plans/bad/missing_recv.plan");
	o.eager = 1;
	int rc = sim_run(p, &o, &res);
	assert_int_equal(rc, 1);
	sim_result_free(&res);
	plan_free(p);
}

static void sim__good_plans__run_in_both_models(void **state)
{
	(void)state;
	const char *files[] = {"tests/plans/good/tiny2.plan", "tests/plans/good/skip3.plan",
	                       "tests/plans/good/dp2x2.plan"};
	for (size_t i = 0; i < 3; i++) {
		Plan *p = read_good(files[i]);
		PlanError e;
		assert_int_equal(plan_verify(p, &e), 0);
		for (int model = 0; model < SIM_MODEL_COUNT; model++)
			for (int eager = 0; eager < 2; eager++) {
				SimResult res;
				SimOptions o = {.model = model, .eager = eager, .record_ops = 1};
				assert_int_equal(sim_run(p, &o, &res), 0);
				assert_int_equal(res.ops_done, plan_total_ops(p));
				assert_true(res.makespan > 0);
				/* No op ends before it was posted: an eager receive posted after its
				 * data arrived ends when posted, not at the arrival. */
				for (int r = 0; r < p->world; r++)
					for (int64_t j = 0; j < p->ranks[r].nops; j++) {
						SimOpTime t = sim_op_time(&res, r, j);
						if (t.end < t.start)
							fail_msg("%s model %d eager %d: rank %d op %" PRId64
							         " ends at %" PRId64 " before its start %" PRId64,
							         files[i], model, eager, r, j, t.end, t.start);
					}
				sim_result_free(&res);
			}
		plan_free(p);
	}
}

/* SimOptions.stop: set, the run ends early with "stopped" (and its result still frees);
 * given but clear, the run is the one without it. */
static void sim__stop_flag__set_stops_clear_changes_nothing(void **state)
{
	(void)state;
	Plan *p = read_good("tests/plans/good/dp2x2.plan");
	for (int model = 0; model < SIM_MODEL_COUNT; model++) {
		SimResult plain, clear, stopped;
		int stop = 0;
		SimOptions o = {.model = model, .record_ops = 1};
		assert_int_equal(sim_run(p, &o, &plain), 0);
		o.stop = &stop;
		assert_int_equal(sim_run(p, &o, &clear), 0);
		assert_int_equal(clear.makespan, plain.makespan);
		assert_int_equal(clear.ops_done, plan_total_ops(p));
		assert_int_equal(clear.npath, plain.npath);
		stop = 1;
		assert_int_equal(sim_run(p, &o, &stopped), -1);
		assert_string_equal(stopped.message, "stopped");
		assert_true(stopped.ops_done < plan_total_ops(p));
		sim_result_free(&plain);
		sim_result_free(&clear);
		sim_result_free(&stopped);
	}
	plan_free(p);
}

/* SimOptions.progress ends at the plan's op count, in both models and on threads (the
 * progress line's done/total). */
static void sim__progress__counts_every_op(void **state)
{
	(void)state;
	const char *plans[] = {"tests/plans/good/dp2x2.plan", "tests/plans/good/tiny2.plan"};
	for (size_t k = 0; k < sizeof plans / sizeof *plans; k++) {
		Plan *p = read_good(plans[k]);
		for (int model = 0; model < SIM_MODEL_COUNT; model++)
			for (int threads = 1; threads <= 4; threads += 3) {
				int64_t done = 0;
				SimOptions o = {.model = model, .verified = 1, .threads = threads,
				                .progress = &done};
				SimResult res;
				assert_int_equal(sim_run(p, &o, &res), 0);
				if (done != plan_total_ops(p))
					fail_msg("%s model %d threads %d: %lld of %lld ops", plans[k], model,
					         threads, (long long)done, (long long)plan_total_ops(p));
				sim_result_free(&res);
			}
		plan_free(p);
	}
}

/* ---- malformed input ---- */

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	char *buf = NULL;
	size_t cap = 0;
	*len = 0;
	int c;
	while ((c = fgetc(f)) != EOF) {
		if (*len + 1 >= cap) {
			cap = cap ? cap * 2 : 4096;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		buf[(*len)++] = (char)c;
	}
	fclose(f);
	return buf;
}

/* Reads buf as a plan; when it reads, verifies; when it verifies, simulates. */
static int try_text(const char *buf, size_t len, int *read_ok, int *verified)
{
	FILE *f = fmemopen((void *)buf, len ? len : 1, "r");
	if (!len) {
		fclose(f);
		f = fmemopen((void *)"", 1, "r");
		fgetc(f);
	}
	PlanError e;
	Plan *p = plan_read(f, "fuzz", &e);
	fclose(f);
	if (!p) {
		if (e.line <= 0)
			fail_msg("read error without a line: %s", e.msg);
		return 0;
	}
	(*read_ok)++;
	/* Whatever the verifier says, the simulator must not crash: run it regardless. */
	if (plan_verify(p, &e) == 0)
		(*verified)++;
	for (int model = 0; model < SIM_MODEL_COUNT; model++) {
		SimResult res;
		SimOptions o = {.model = model, .eager = model, .record_ops = 1};
		int rc = sim_run(p, &o, &res);
		assert_true(rc >= 0);
		char *buf2 = NULL;
		size_t n2 = 0;
		FILE *g = open_memstream(&buf2, &n2);
		if (res.verdict == SIM_OK)
			sim_report_summary(g, p, &res, NULL);
		else
			sim_report_failure(g, p, &res, "fuzz");
		sim_write_json(g, p, &res, NULL, "fuzz", NULL);
		fclose(g);
		free(buf2);
		sim_result_free(&res);
		/* Told the plan verified, as pipesim's run beside the verifier is before the
		 * verdict: it skips the pair check, and must still not crash or fail. */
		SimOptions v = {.model = model, .eager = model, .record_ops = SIM_RECORD_PATH,
		                .verified = 1};
		assert_true(sim_run(p, &v, &res) >= 0);
		sim_result_free(&res);
	}
	plan_free(p);
	return 1;
}

static void sim__malformed_plans__located_error_no_crash(void **state)
{
	(void)state;
	/* The hand-made malformed corpus. */
	const char *bad[] = {"truncated", "garbage", "bad_count", "bad_number", "empty", "wrong_size"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char path[256];
		snprintf(path, sizeof path, "tests/plans/malformed/%s.plan", bad[i]);
		PlanError e;
		Plan *p = plan_read_file(path, &e);
		if (p)
			fail_msg("%s: read without error", path);
		assert_true(e.line > 0);
	}
	/* Mutations of good plans, fixed seed. */
	const char *good[] = {"tests/plans/good/tiny2.plan", "tests/plans/good/dp2x2.plan",
	                      "tests/plans/good/skip3.plan", "tests/plans/bad/head_to_head.plan"};
	uint64_t seed = 20240611;
	int read_ok = 0, verified = 0, total = 0;
	for (size_t gi = 0; gi < 4; gi++) {
		size_t len;
		char *src = slurp(good[gi], &len);
		int dummy_r = 0, dummy_v = 0;
		assert_int_equal(try_text(src, len, &dummy_r, &dummy_v), 1);
		char *buf = malloc(len + 64);
		for (int iter = 0; iter < 1500; iter++) {
			memcpy(buf, src, len);
			size_t n = len;
			int kind = (int)(rng(&seed) % 7);
			int times = 1 + (int)(rng(&seed) % 3);
			for (int t = 0; t < times; t++) {
				size_t at = n ? rng(&seed) % n : 0;
				switch (kind) {
				case 0: // flip a byte to something printable-ish
					if (n)
						buf[at] = (char)(" 0123456789-=xge\n@"[rng(&seed) % 18]);
					break;
				case 1: // truncate
					n = at;
					break;
				case 2: // change a digit
					for (size_t k = at; k < n; k++)
						if (buf[k] >= '0' && buf[k] <= '9') {
							buf[k] = (char)('0' + rng(&seed) % 10);
							break;
						}
					break;
				case 3: { // delete a line
					size_t a = at, b = at;
					while (a > 0 && buf[a - 1] != '\n')
						a--;
					while (b < n && buf[b] != '\n')
						b++;
					if (b < n)
						b++;
					memmove(buf + a, buf + b, n - b);
					n -= b - a;
					break;
				}
				case 4: { // swap two op lines' digits: change a peer or group number
					for (size_t k = at; k + 3 < n; k++)
						if ((buf[k] == 'g' || buf[k] == 'o' || buf[k] == 'm') && buf[k + 1] == '=') {
							buf[k + 2] = (char)('0' + rng(&seed) % 4);
							break;
						}
					break;
				}
				case 5: // a random byte
					if (n)
						buf[at] = (char)(rng(&seed) & 0xff);
					break;
				case 6: { // swap a line with the next: reorders ops, keeps counts
					size_t a = at, b = at;
					while (a > 0 && buf[a - 1] != '\n')
						a--;
					while (b < n && buf[b] != '\n')
						b++;
					if (b + 1 >= n)
						break;
					size_t c = b + 1;
					while (c < n && buf[c] != '\n')
						c++;
					if (c >= n)
						break;
					char tmp[512];
					size_t l1 = b + 1 - a, l2 = c + 1 - (b + 1);
					if (l1 > sizeof tmp)
						break;
					memcpy(tmp, buf + a, l1);
					memmove(buf + a, buf + b + 1, l2);
					memcpy(buf + a + l2, tmp, l1);
					break;
				}
				}
			}
			try_text(buf, n, &read_ok, &verified);
			total++;
		}
		free(buf);
		free(src);
	}
	print_message("%d mutations: %d read, %d verified\n", total, read_ok, verified);
	/* The mutations must have exercised all three layers. */
	assert_true(read_ok > total / 20);
	assert_true(verified > 0);
	assert_true(read_ok < total);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(sim__unit_cost_schedules__makespan_3_m_plus_p_minus_1),
	    cmocka_unit_test(sim__dp_replicas__same_makespan_and_allreduce_counted),
	    cmocka_unit_test(sim__link_costs__transfer_and_allreduce_times),
	    cmocka_unit_test(sim__times_past_48_bits__kept_exact),
	    cmocka_unit_test(sim__saturated_times__report_sums_saturate),
	    cmocka_unit_test(sim__overlap_model__hides_transfers_strict_does_not),
	    cmocka_unit_test(sim__distributed_optimizer__half_rings_in_order),
	    cmocka_unit_test(sim__sp_reduce__tp_ring_before_the_step),
	    cmocka_unit_test(sim__bad_corpus__verifier_names_both_ops),
	    cmocka_unit_test(sim__bad_corpus__deadlocks_with_cycle),
	    cmocka_unit_test(sim__tp_plans__collectives_and_cycles),
	    cmocka_unit_test(sim__unverified_mismatch__run_names_both_ops),
	    cmocka_unit_test(sim__good_plans__run_in_both_models),
	    cmocka_unit_test(sim__stop_flag__set_stops_clear_changes_nothing),
	    cmocka_unit_test(sim__progress__counts_every_op),
	    cmocka_unit_test(sim__malformed_plans__located_error_no_crash),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
