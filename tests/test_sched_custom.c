/* Orders written by hand: custom orders (`schedule custom { rank 0: 0F0 ...; }`) that
 * run as written, and their located errors (golden text); orders valid per rank that
 * cannot run across ranks (the lowering's stall, and with allow_deadlock the plan for
 * the simulator's cycle), over a few hundred random orders; CSV files (torch's
 * _dump_csv, our --emit torch-csv read back for every schedule) and their errors located
 * in the CSV.  The built-in schedules are test_sched.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../sim/sim.h"
#include "sched_lib.h"

/* ---- custom orders ---------------------------------------------------------------- */

/* Two ranks (dp replicas of them), stages s0 s1 on rank 0 and s2 s3 on rank 1,
 * m = 2. */
static char *custom_dp(int dp, const char *body, const char *extra)
{
	static char buf[4096];
	snprintf(buf, sizeof buf,
	         "pipeline c;\nmesh pp=2 dp=%d;\nmicrobatches 2;\ninput 2x8;\n"
	         "stage s0 { linear 8; relu; }\nstage s1 { linear 8; relu; }\n"
	         "stage s2 { linear 8; relu; }\nstage s3 { linear 8; loss mse; }\n"
	         "cost * f=1 b=1 w=1;\nlink ideal;\n%sschedule custom {\n%s}\n",
	         dp, extra ? extra : "", body);
	return buf;
}

static char *custom(const char *body, const char *extra)
{
	return custom_dp(1, body, extra);
}

#define GOOD_R0 "  rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1;\n"
#define GOOD_R1 "  rank 1: 2F0 3F0 2F1 3F1 3I0 3W0 2B0 3I1 2B1 3W1;\n"

static void sched__custom__runs_as_written(void **state)
{
	(void)state;
	Plan *p = compile(custom(GOOD_R0 GOOD_R1, NULL));
	assert_non_null(p);
	assert_int_equal(p->stages[1].pp, 0);
	assert_int_equal(p->stages[2].pp, 1);
	static Order o;
	order_of(p, 1, &o);
	const char *want[] = {"F2.0", "F3.0", "F2.1", "F3.1", "B3.0", "W3.0", "BW2.0", "B3.1",
	                      "BW2.1", "W3.1"};
	assert_int_equal(o.n, 10);
	for (int i = 0; i < o.n; i++) {
		char t[16];
		snprintf(t, sizeof t, "%s%d.%d", plan_ops[o.op[i]->kind].name, o.op[i]->stage,
		         o.op[i]->mb);
		assert_string_equal(t, want[i]);
	}
	assert_int_equal(measure(p, SIM_STRICT, 0).verdict, SIM_OK);
	plan_free(p);
	/* an explicit placement that agrees; and dp = 2 with a skip */
	p = compile(custom(GOOD_R0 GOOD_R1, "placement [0, 0, 1, 1];\n"));
	assert_non_null(p);
	plan_free(p);
	p = compile(custom_dp(2, GOOD_R0 GOOD_R1, "skip s0 -> s2;\n"));
	assert_non_null(p);
	assert_int_equal(p->world, 4);
	assert_int_equal(measure(p, SIM_STRICT, 0).verdict, SIM_OK);
	plan_free(p);
}

static void sched__custom__located_errors(void **state)
{
	(void)state;
	expect_error(custom(GOOD_R0 "  rank 1: 2F0 3F0 2F1 3F1 3W0 3I0 2B0 3I1 2B1 3W1;\n", NULL),
	             "test.pipe:13:27: error: '3W0' comes before its input gradient '3I0'\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3W0 3I0 2B0 3I1 2B1 3W1;\n"
	             "                           ^~~\n"
	             "test.pipe:13: note: rank 1 runs ... 3F0 2F1 3F1 [3W0] 3I0 2B0 3I1 ...\n");
	expect_error(custom("  rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1 0F2;\n" GOOD_R1, NULL),
	             "test.pipe:12:43: error: microbatch 2 in '0F2' is out of range: the program "
	             "has 2 microbatches (0 to 1)\n"
	             "   rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1 0F2;\n"
	             "                                           ^~~\n"
	             "test.pipe:12: note: rank 0 runs ... 0B0 1B1 0B1 [0F2]\n");
	expect_error(custom(GOOD_R0 "  rank 1: 2F0 3F0 2F1 3F1 3I0 3W0 2B0 3I1 2B1 3W1 3F1;\n", NULL),
	             "test.pipe:13:51: error: '3F1' appears twice on rank 1\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3I0 3W0 2B0 3I1 2B1 3W1 3F1;\n"
	             "                                                   ^~~\n"
	             "test.pipe:13:23: note: first here\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3I0 3W0 2B0 3I1 2B1 3W1 3F1;\n"
	             "                       ^~~\n");
	expect_error(custom("  rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1 2F0;\n" GOOD_R1, NULL),
	             "test.pipe:13:11: error: stage 2 (s2) appears on rank 0 and on rank 1: a stage "
	             "runs on one pipeline rank\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3I0 3W0 2B0 3I1 2B1 3W1;\n"
	             "           ^~~\n"
	             "test.pipe:12:43: note: first on rank 0 here\n"
	             "   rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1 2F0;\n"
	             "                                           ^~~\n");
	expect_error(custom(GOOD_R0 "  rank 1: 2F0 3F0 2F1 3F1 3I0 3B0 2B0 3I1 2B1 3W1;\n", NULL),
	             "test.pipe:13:31: error: '3I0' and '3B0' both appear: a microbatch's backward "
	             "is either B, or I and W\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3I0 3B0 2B0 3I1 2B1 3W1;\n"
	             "                               ^~~\n"
	             "test.pipe:13:27: note: '3I0' is here\n"
	             "   rank 1: 2F0 3F0 2F1 3F1 3I0 3B0 2B0 3I1 2B1 3W1;\n"
	             "                           ^~~\n");
	expect_error(custom("  rank 0: 0F0 1B0 1F0 0F1 1F1 0B0 1B1 0B1;\n" GOOD_R1, NULL),
	             "test.pipe:12:15: error: '1B0' comes before its forward '1F0'\n"
	             "   rank 0: 0F0 1B0 1F0 0F1 1F1 0B0 1B1 0B1;\n"
	             "               ^~~\n"
	             "test.pipe:12: note: rank 0 runs 0F0 [1B0] 1F0 0F1 1F1 ...\n");
}

/* Valid by the rules above, but 0B0 waits for 1B0, later on the same rank: the
 * lowering names both actions, and --allow-deadlock cannot help (no plan holds it). */
static void sched__custom_local_wait__both_actions_named(void **state)
{
	(void)state;
	const char *want =
		"test.pipe:12:15: error: '0B0' needs '1B0', which comes later on rank 0: the rank "
		"can never run it (no plan can hold this order, not even with --allow-deadlock)\n"
		"   rank 0: 0F0 0B0 1F0 0F1 1F1 1B0 1B1 0B1;\n"
		"               ^~~\n"
		"test.pipe:12:31: note: '1B0' is here\n"
		"   rank 0: 0F0 0B0 1F0 0F1 1F1 1B0 1B1 0B1;\n"
		"                               ^~~\n";
	const char *src = custom("  rank 0: 0F0 0B0 1F0 0F1 1F1 1B0 1B1 0B1;\n" GOOD_R1, NULL);
	expect_error(src, want);
	PipeccOptions o = {.allow_deadlock = 1};
	char *errs = NULL;
	assert_null(compile_with(src, &o, &errs));
	assert_string_equal(errs, want);
	free(errs);
}

static void sched__custom__whole_order_errors(void **state)
{
	(void)state;
	expect_error(custom(GOOD_R0 "  rank 0: 2F0;\n", NULL),
	             "test.pipe:13:3: error: rank 0 is given twice\n"
	             "   rank 0: 2F0;\n"
	             "   ^~~~~~\n"
	             "test.pipe:12:3: note: first given here\n"
	             "   rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1;\n"
	             "   ^~~~~~\n");
	expect_error(custom("  rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1 2F0 2F1 2B0 2B1 3F0 3F1 "
	                    "3B0 3B1;\n",
	                    NULL),
	             "test.pipe:11:10: error: pipeline rank 1 runs no stage: every rank needs at "
	             "least one\n"
	             " schedule custom {\n"
	             "          ^~~~~~\n");
	expect_error(custom(GOOD_R0 "  rank 1: 2F0 2F1 2B0 2B1;\n", NULL),
	             "test.pipe:11:10: error: stage 3 (s3) appears on no rank\n"
	             " schedule custom {\n"
	             "          ^~~~~~\n");
	expect_error(custom(GOOD_R0 "  rank 1: 2F0 3F0 2F1 3I0 3W0 2B0 2B1;\n", NULL),
	             "test.pipe:13:3: error: rank 1 has no forward '3F1' of stage 3 (s3)\n"
	             "   rank 1: 2F0 3F0 2F1 3I0 3W0 2B0 2B1;\n"
	             "   ^~~~~~\n"
	             "test.pipe:13:3: error: rank 1 has no backward of stage 3 (s3) microbatch 1: "
	             "'3B1', or '3I1' and '3W1'\n"
	             "   rank 1: 2F0 3F0 2F1 3I0 3W0 2B0 2B1;\n"
	             "   ^~~~~~\n");
	expect_error(custom(GOOD_R0 GOOD_R1, "placement [0, 1, 1, 1];\n"),
	             "test.pipe:13:15: error: '1F0' is on rank 0, but the placement puts stage 1 "
	             "(s1) on pp index 1\n"
	             "   rank 0: 0F0 1F0 0F1 1F1 1B0 0B0 1B1 0B1;\n"
	             "               ^~~\n");
	expect_error(custom("  rank 0: 0F0 1F0 0F1 1F1 1B0 0W0 1B1 0B1;\n" GOOD_R1, NULL),
	             "test.pipe:12:31: error: '0W0' has no input gradient '0I0' before it\n"
	             "   rank 0: 0F0 1F0 0F1 1F1 1B0 0W0 1B1 0B1;\n"
	             "                               ^~~\n"
	             "test.pipe:12: note: rank 0 runs ... 0F1 1F1 1B0 [0W0] 1B1 0B1\n");
}

/* Valid on every rank, impossible across ranks: rank 0 starts with s2, which waits for
 * s1 on rank 1, which waits for s0, after s2 on rank 0.  Each pair of ranks exchanges
 * its messages in one order, so the plan is well formed and the simulator finds the
 * wait-for cycle. */
static const char cross_rank[] =
	"pipeline d;\nmesh pp=2;\nmicrobatches 1;\ninput 2x8;\n"
	"stage s0 { linear 8; relu; }\nstage s1 { linear 8; relu; }\n"
	"stage s2 { linear 8; loss mse; }\n"
	"cost * f=1 b=1 w=1;\nlink ideal;\nschedule custom {\n"
	"  rank 0: 2F0 0F0 2B0 0B0;\n  rank 1: 1F0 1B0;\n}\n";

static void sched__custom_cross_rank_cycle__stall_then_simulator_cycle(void **state)
{
	(void)state;
	expect_error(cross_rank,
	             "test.pipe:11:11: error: the schedule cannot run: every rank waits for another "
	             "(run with --allow-deadlock to emit the plan and let pipesim show the cycle)\n"
	             "   rank 0: 2F0 0F0 2B0 0B0;\n"
	             "           ^~~\n"
	             "  rank 0 is stuck at action 0: 2F0\n"
	             "  rank 1 is stuck at action 0: 1F0\n");
	PipeccOptions o = {.allow_deadlock = 1};
	char *errs = NULL;
	Plan *p = compile_with(cross_rank, &o, &errs);
	assert_non_null(p);
	assert_string_equal(errs, "");
	free(errs);
	PlanError err;
	assert_int_equal(plan_verify(p, &err), 0);
	SimOptions so = {.model = SIM_STRICT};
	SimResult r;
	assert_int_equal(sim_run(p, &so, &r), 1);
	assert_int_equal(r.verdict, SIM_DEADLOCK);
	assert_int_equal(r.nstuck, 2);
	assert_int_equal(r.ncycle, 2);
	sim_result_free(&r);
	plan_free(p);
}

/* ---- random custom orders ------------------------------------------------------- */

static uint32_t lcg(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

/* `custom { ... }`, the body for n stages placed by where[] with the given skips (src,
 * dst pairs): per rank, a random order of its actions that keeps every dependency
 * within the rank (a microbatch's F after the F that feeds it from a stage on the same
 * rank, its backward after the backward it gets a gradient from there, I before W), so
 * only the order across ranks can be wrong. */
static void random_order(char *buf, size_t size, int n, int pp, int m, const int *where,
                         const int (*skip)[2], int nskip, uint32_t *seed)
{
	enum { U = 64 * 8 };
	int src[16], dst[16], ne = 0;
	for (int s = 0; s + 1 < n; s++, ne++) {
		src[ne] = s;
		dst[ne] = s + 1;
	}
	for (int k = 0; k < nskip; k++, ne++) {
		src[ne] = skip[k][0];
		dst[ne] = skip[k][1];
	}
	int k = snprintf(buf, size, "custom {\n");
	for (int r = 0; r < pp; r++) {
		int next[U], split[U], stage[U], mb[U], units = 0; // per (stage, mb): actions done
		int unit_of[16][8];
		for (int s = 0; s < n; s++)
			for (int j = 0; j < m && where[s] == r; j++) {
				unit_of[s][j] = units;
				stage[units] = s;
				mb[units] = j;
				split[units] = lcg(seed) % 2;
				next[units++] = 0;
			}
		k += snprintf(buf + k, size - (size_t)k, "  rank %d:", r);
		for (;;) {
			int open[U], left = 0;
			for (int u = 0; u < units; u++) {
				if (next[u] == 2 + split[u])
					continue;
				int ok = 1;
				for (int e = 0; e < ne && ok && next[u] < 2; e++) {
					int other = next[u] == 0 ? src[e] : dst[e];
					if ((next[u] == 0 ? dst[e] : src[e]) != stage[u] || where[other] != r)
						continue;
					ok = next[unit_of[other][mb[u]]] > next[u]; // its F, or its B or I
				}
				if (ok)
					open[left++] = u;
			}
			if (!left)
				break;
			int u = open[lcg(seed) % (uint32_t)left];
			char kind = next[u] == 0 ? 'F' : !split[u] ? 'B' : next[u] == 1 ? 'I' : 'W';
			k += snprintf(buf + k, size - (size_t)k, " %d%c%d", stage[u], kind, mb[u]);
			next[u]++;
		}
		k += snprintf(buf + k, size - (size_t)k, ";\n");
	}
	snprintf(buf + k, size - (size_t)k, "}\n");
}

/* Orders that cannot run, with and without skips, over several placements and dp:
 * pipecc says so, and with allow_deadlock writes a plan that verifies (its pairs
 * exchange messages in one order) and that the simulator proves deadlocked with a
 * wait-for cycle, in every model; never a mismatch.  Orders that happen to run must
 * run. */
static void sched__random_custom_orders__deadlocks_show_a_cycle(void **state)
{
	(void)state;
	static const struct {
		int n, pp, dp, m;
		int nskip, skip[2][2];
		int place[8];
	} shapes[] = {
	    {4, 2, 1, 2, 1, {{1, 3}}, {0, 0, 1, 1}},
	    {4, 2, 1, 2, 1, {{1, 3}}, {0, 1, 0, 1}},
	    {4, 2, 1, 2, 0, {{0}}, {0, 1, 1, 0}},
	    {4, 2, 2, 2, 2, {{0, 2}, {1, 3}}, {1, 0, 1, 0}},
	    {3, 3, 1, 3, 1, {{0, 2}}, {0, 1, 2}},
	    {3, 3, 1, 2, 0, {{0}}, {2, 1, 0}},
	    {6, 3, 1, 2, 2, {{0, 3}, {2, 5}}, {0, 1, 2, 2, 1, 0}},
	    {6, 3, 2, 2, 1, {{1, 4}}, {0, 0, 1, 1, 2, 2}},
	    {5, 2, 1, 3, 2, {{0, 4}, {1, 3}}, {1, 0, 0, 1, 1}},
	};
	uint32_t seed = 12345;
	int stalled = 0, ran = 0;
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		for (int trial = 0; trial < 40; trial++) {
			char extra[8192], body[6144];
			int k = 0;
			for (int j = 0; j < shapes[i].nskip; j++)
				k += snprintf(extra + k, sizeof extra - (size_t)k, "skip s%d -> s%d;\n",
				              shapes[i].skip[j][0], shapes[i].skip[j][1]);
			k += snprintf(extra + k, sizeof extra - (size_t)k, "placement [");
			for (int s = 0; s < shapes[i].n; s++)
				k += snprintf(extra + k, sizeof extra - (size_t)k, "%s%d", s ? ", " : "",
				              shapes[i].place[s]);
			random_order(body, sizeof body, shapes[i].n, shapes[i].pp, shapes[i].m,
			             shapes[i].place, shapes[i].skip, shapes[i].nskip, &seed);
			snprintf(extra + k, sizeof extra - (size_t)k, "];\n");
			const char *src = program(shapes[i].n, shapes[i].pp, shapes[i].dp, shapes[i].m,
			                          body, extra);
			char *errs = NULL;
			PipeccOptions o = {0};
			Plan *p = compile_with(src, &o, &errs);
			if (p) {
				SimOptions so = {.model = SIM_STRICT};
				SimResult r;
				assert_int_equal(sim_run(p, &so, &r), 0);
				sim_result_free(&r);
				plan_free(p);
				free(errs);
				ran++;
				continue;
			}
			o.allow_deadlock = 1;
			if (!strstr(errs, "the schedule cannot run"))
				fail_msg("%s\n%s", src, errs);
			free(errs);
			p = compile_with(src, &o, NULL);
			assert_non_null(p);
			PlanError err;
			if (plan_verify(p, &err))
				fail_msg("%s\nplan fails verification: %s", src, err.msg);
			for (int model = 0; model < SIM_MODEL_COUNT; model++) {
				SimOptions so = {.model = model};
				SimResult r;
				assert_int_equal(sim_run(p, &so, &r), 1);
				if (r.verdict != SIM_DEADLOCK || r.ncycle < 1)
					fail_msg("%s\nmodel %d: %s", src, model, r.message);
				sim_result_free(&r);
			}
			plan_free(p);
			stalled++;
		}
	}
	/* the sweep met every kind of order */
	print_message("%d orders stalled across ranks, %d ran\n", stalled, ran);
	assert_true(stalled > 100);
	assert_true(ran > 0);
}

/* ---- CSV --------------------------------------------------------------------------- */

static char tmpdir[64];

static int setup_tmp(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/test_sched_custom.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static const char *write_tmp(const char *name, const char *text)
{
	static char path[128];
	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static char *csv_program(const char *path)
{
	static char buf[4096];
	snprintf(buf, sizeof buf,
	         "pipeline c;\nmesh pp=2;\nmicrobatches 2;\ninput 2x8;\n"
	         "stage s0 { linear 8; relu; }\nstage s1 { linear 8; relu; }\n"
	         "stage s2 { linear 8; relu; }\nstage s3 { linear 8; loss mse; }\n"
	         "cost * f=1 b=1 w=1;\nlink ideal;\nschedule csv \"%s\";\n",
	         path);
	return buf;
}

static void expect_csv_error(const char *csv, const char *want_fmt)
{
	const char *path = write_tmp("o.csv", csv);
	char want[2048];
	snprintf(want, sizeof want, want_fmt, path, path, path, path);
	expect_error(csv_program(path), want);
}

/* A CSV's cells without those the plan has no op for (waits, FSDP's UNSHARD/RESHARD,
 * REDUCE_GRAD), one row per line, into out. */
static int cell_has(const char *c, size_t l, const char *w)
{
	for (size_t i = 0, wl = strlen(w); i + wl <= l; i++)
		if (memcmp(c + i, w, wl) == 0)
			return 1;
	return 0;
}

static void plan_cells(const char *csv, char *out, size_t n)
{
	size_t k = 0;
	for (const char *c = csv; *c && k + 2 < n;) {
		size_t l = strcspn(c, ",\r\n");
		if (l && !cell_has(c, l, "WAIT_") && !cell_has(c, l, "SHARD") &&
		    !cell_has(c, l, "REDUCE_GRAD") && k + l + 2 < n) {
			memcpy(out + k, c, l);
			k += l;
			out[k++] = ',';
		}
		c += l;
		if (*c == '\n')
			out[k++] = '\n';
		if (*c)
			c++;
	}
	out[k] = 0;
}

/* What torch 2.15's _dump_csv writes for ScheduleInterleaved1F1B at p = 2, m = 2 (in
 * its default compute_comms format: CRLF rows, UNSHARD/RESHARD, waits, REDUCE_GRAD):
 * it compiles, runs, and the plan keeps torch's order of sends and receives. */
static void sched__csv__torch_dump_reads(void **state)
{
	(void)state;
	static const char torch_csv[] =
		"0UNSHARD,2UNSHARD,0F0,0SEND_F0,2RECV_F0,0F1,0SEND_F1,2RECV_F1,2F0,2SEND_F0,2F1,"
		"2SEND_F1,2RECV_B0,2B0,2WAIT_SEND_F0,2SEND_B0,2RECV_B1,2B1,2WAIT_SEND_F1,2SEND_B1,"
		"2REDUCE_GRAD,2WAIT_REDUCE_GRAD,2RESHARD,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,"
		"0WAIT_SEND_F1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD,2WAIT_SEND_B0,2WAIT_SEND_B1\r\n"
		"1UNSHARD,3UNSHARD,1RECV_F0,1F0,1SEND_F0,1RECV_F1,1F1,1SEND_F1,3RECV_F0,3F0,3RECV_F1,"
		"3B0,3SEND_B0,1RECV_B0,3F1,3B1,3SEND_B1,1RECV_B1,3REDUCE_GRAD,3WAIT_REDUCE_GRAD,"
		"3RESHARD,1B0,1WAIT_SEND_F0,1SEND_B0,1B1,1WAIT_SEND_F1,1SEND_B1,1REDUCE_GRAD,"
		"1WAIT_REDUCE_GRAD,1RESHARD,3WAIT_SEND_B0,3WAIT_SEND_B1,1WAIT_SEND_B0,1WAIT_SEND_B1\r\n";
	const char *path = write_tmp("torch.csv", torch_csv);
	Plan *p = compile(csv_program(path));
	assert_non_null(p);
	assert_string_equal(p->schedule, "csv");
	check_structure(p, "csv");
	assert_int_equal(measure(p, SIM_STRICT, 0).verdict, SIM_OK);
	char path2[128], got[4096], want[4096], back[4096] = {0};
	snprintf(path2, sizeof path2, "%s/back.csv", tmpdir);
	FILE *f = fopen(path2, "w+");
	assert_non_null(f);
	assert_int_equal(pipecc_emit_torch_csv(p, f, 1), 0);
	rewind(f);
	size_t n = fread(back, 1, sizeof back - 1, f);
	fclose(f);
	back[n] = 0;
	plan_cells(back, got, sizeof got);
	plan_cells(torch_csv, want, sizeof want);
	assert_string_equal(got, want);
	plan_free(p);
}

/* --emit torch-csv (with comms) read back gives the same compute order on every rank,
 * for every schedule. */
static void sched__csv__emit_roundtrip_every_schedule(void **state)
{
	(void)state;
	const char *names[] = {"gpipe", "1f1b", "zbh1", "zbh2", "zbv", "dualpipev",
	                       "loopedbfs", "interleaved"};
	const int per_rank[] = {1, 1, 1, 1, 2, 2, 2, 2};
	for (int k = 0; k < 8; k++)
		for (int pp = 1; pp <= 4; pp++) {
			int m = 2 * pp;
			char *src = program(per_rank[k] * pp, pp, 2, m, names[k], "skip s0 -> s2;\n");
			if (per_rank[k] * pp < 3)
				src = program(per_rank[k] * pp, pp, 2, m, names[k], NULL);
			char *copy = strdup(src);
			Plan *a = compile(copy);
			assert_non_null(a);
			char path[128];
			snprintf(path, sizeof path, "%s/rt.csv", tmpdir);
			FILE *f = fopen(path, "w");
			assert_int_equal(pipecc_emit_torch_csv(a, f, k % 2), 0);
			fclose(f);
			PipeccOptions o = {.from_csv = path};
			Plan *b = compile_with(copy, &o, NULL);
			if (!b)
				fail_msg("%s pp=%d: the CSV does not read back", names[k], pp);
			for (int q = 0; q < pp; q++) {
				static Order oa, ob;
				order_of(a, q, &oa);
				order_of(b, q, &ob);
				assert_int_equal(oa.n, ob.n);
				for (int i = 0; i < oa.n; i++) {
					assert_int_equal(oa.op[i]->kind, ob.op[i]->kind);
					assert_int_equal(oa.op[i]->stage, ob.op[i]->stage);
					assert_int_equal(oa.op[i]->mb, ob.op[i]->mb);
				}
			}
			for (int s = 0; s < a->nstages; s++)
				assert_int_equal(a->stages[s].pp, b->stages[s].pp);
			plan_free(a);
			plan_free(b);
			free(copy);
		}
}

/* An F&B pair written `3F1&2B0` (and its CSV form `(3F1;2B0)OVERLAP_F_B`): its two ops
 * lie side by side in the plan, the first marked paired, and the plan runs in both
 * models; a pair that is not a forward then another stage's backward is refused where
 * it is written. */
#define PAIR_R1 "  rank 1: 2F0 3F0 3I0 3W0 2F1 3F1&2B0 3I1 2B1 3W1;\n"

static void pair_is_adjacent(const Plan *p)
{
	const PlanRank *r = pp_rank(p, 1);
	int pairs = 0;
	for (int64_t i = 0; i < r->nops; i++) {
		if (!plan_op_paired(&r->ops[i]))
			continue;
		pairs++;
		assert_int_equal(r->ops[i].kind, OP_F);
		assert_int_equal(r->ops[i].stage, 3);
		assert_int_equal(r->ops[i].mb, 1);
		assert_true(i + 1 < r->nops);
		assert_int_equal(r->ops[i + 1].kind, OP_BW);
		assert_int_equal(r->ops[i + 1].stage, 2);
		assert_int_equal(r->ops[i + 1].mb, 0);
	}
	assert_int_equal(pairs, 1);
	assert_int_equal(measure(p, SIM_STRICT, 0).verdict, SIM_OK);
	assert_int_equal(measure(p, SIM_OVERLAP, 0).verdict, SIM_OK);
}

static void sched__custom_pair__adjacent_and_checked(void **state)
{
	(void)state;
	Plan *p = compile(custom(GOOD_R0 PAIR_R1, NULL));
	assert_non_null(p);
	pair_is_adjacent(p);
	plan_free(p);
	const char *path = write_tmp("pair.csv", "0F0,1F0,0F1,1F1,1B0,0B0,1B1,0B1\n"
	                                         "2F0,3F0,3I0,3W0,2F1,(3F1;2B0)OVERLAP_F_B,3I1,2B1,3W1\n");
	p = compile(csv_program(path));
	assert_non_null(p);
	pair_is_adjacent(p);
	plan_free(p);
	expect_error(custom("  rank 0: 0F0 1F0 0F1 1F1 1B0&0B0 1B1 0B1;\n" GOOD_R1, NULL),
	             "test.pipe:12:27: error: an overlapped pair is a forward and then a backward "
	             "(B or I) of another stage, like 0F3&3B1\n"
	             "   rank 0: 0F0 1F0 0F1 1F1 1B0&0B0 1B1 0B1;\n"
	             "                           ^~~~~~~\n");
	expect_csv_error("0F0,1F0,0F1,1F1,1B0,(0B0;1B1)OVERLAP_F_B,0B1\n"
	                 "2F0,3F0,2F1,3F1,3I0,3W0,2B0,3I1,2B1,3W1\n",
	                 "%s:1:21: error: in '(0B0;1B1)OVERLAP_F_B': an overlapped pair is a "
	                 "forward and then a backward (B or I) of another stage, like 0F3&3B1\n"
	                 " 0F0,1F0,0F1,1F1,1B0,(0B0;1B1)OVERLAP_F_B,0B1\n"
	                 "                     ^~~~~~~~~~~~~~~~~~~~\n");
}

/* The pair is one slot in the overlap model too: its forward waits for what its
 * backward half receives (here 1B0's gradient from rank 1), where the same order written
 * apart starts the forward at once; the backward follows the forward without a gap. */
static int64_t paired_start(const char *r0, int half)
{
	char body[256];
	snprintf(body, sizeof body, "%s  rank 1: 2F0 3F0 3I0 3W0 2B0 2F1 3F1 3I1 2B1 3W1;\n", r0);
	Plan *p = compile(custom(body, NULL));
	assert_non_null(p);
	SimOptions so = {.model = SIM_OVERLAP, .record_ops = 1};
	SimResult r;
	assert_int_equal(sim_run(p, &so, &r), 0);
	assert_int_equal(r.verdict, SIM_OK);
	const PlanRank *rk = pp_rank(p, 0);
	int64_t t = -1, fend = -1;
	for (int64_t i = 0; i < rk->nops; i++) {
		const PlanOp *o = &rk->ops[i];
		if (o->kind == OP_F && o->stage == 0 && o->mb == 1) {
			t = half ? t : sim_op_time(&r, 0, i).start;
			fend = sim_op_time(&r, 0, i).end;
		}
		if (half && o->kind == OP_BW && o->stage == 1 && o->mb == 0)
			assert_int_equal(sim_op_time(&r, 0, i).start, fend);
	}
	sim_result_free(&r);
	plan_free(p);
	return t;
}

static void sim__custom_pair__one_slot_in_the_overlap_model(void **state)
{
	(void)state;
	int64_t paired = paired_start("  rank 0: 0F0 1F0 0F1&1B0 1F1 0B0 1B1 0B1;\n", 0);
	int64_t apart = paired_start("  rank 0: 0F0 1F0 0F1 1B0 1F1 0B0 1B1 0B1;\n", 0);
	assert_true(apart >= 0 && paired > apart);
	paired_start("  rank 0: 0F0 1F0 0F1&1B0 1F1 0B0 1B1 0B1;\n", 1);
}

static void sched__csv__errors_located_in_the_csv(void **state)
{
	(void)state;
	expect_csv_error("0F0,1F0,0F1,1F1,1B0,0B0,1B1,0B1\n"
	                 "2F0,3F0,2F1,3F1,3I0,3W0,2B0,3X1,2B1,3W1,9F0\n",
	                 "%s:2:29: error: cannot read cell '3X1': expected an action like 0F1, 1I0, "
	                 "1W0, 2B3, 0SEND_F1 or (0F3;3B1)OVERLAP_F_B\n"
	                 " 2F0,3F0,2F1,3F1,3I0,3W0,2B0,3X1,2B1,3W1,9F0\n"
	                 "                             ^~~\n"
	                 "%s:2:41: error: stage index 9 in '9F0' is out of range: there are 4 "
	                 "stages\n"
	                 " 2F0,3F0,2F1,3F1,3I0,3W0,2B0,3X1,2B1,3W1,9F0\n"
	                 "                                         ^~~\n");
	expect_csv_error("0F0,1F0,0F1,1F1,1B0,0B0,1B1,0B1\n"
	                 "2F0,3F0,2F1,3F1,3W0,3I0,2B0,3I1,2B1,3W1\n",
	                 "%s:2:17: error: '3W0' comes before its input gradient '3I0'\n"
	                 " 2F0,3F0,2F1,3F1,3W0,3I0,2B0,3I1,2B1,3W1\n"
	                 "                 ^~~\n"
	                 "%s:2: note: rank 1 runs ... 3F0 2F1 3F1 [3W0] 3I0 2B0 3I1 ...\n");
	expect_csv_error("0F0,1F0,0F1,1F1,1B0,0B0,1B1,0B1\n",
	                 "%s: error: the file has 1 row, but the mesh has pp=2 (one row per pipeline "
	                 "rank)\n");
	expect_csv_error("0F0,1F0,0F1,1F1,1B0,0B0,1B1,0B1\n"
	                 "2F0,3F0,2F1,3F1,3I0,3W0,2B0,3I1,2B1,3W1\n"
	                 "0F0\n",
	                 "%s:3:1: error: row 3 has actions, but the mesh has pp=2 (one row per "
	                 "pipeline rank)\n"
	                 " 0F0\n"
	                 " ^\n");
	expect_csv_error("0F0,1F0,0F1,1F1,1B0,0B0,1B1\n"
	                 "2F0,3F0,2F1,3F1,3I0,3W0,2B0,3I1,2B1,3W1\n",
	                 "%s:1:1: error: rank 0 has no backward of stage 0 (s0) microbatch 1: '0B1', "
	                 "or '0I1' and '0W1'\n"
	                 " 0F0,1F0,0F1,1F1,1B0,0B0,1B1\n"
	                 " ^\n");
	/* a file that is not there: the error is the program's */
	char missing[128];
	snprintf(missing, sizeof missing, "%s/none.csv", tmpdir);
	char want[512];
	snprintf(want, sizeof want,
	         "test.pipe:11:10: error: cannot read %s: No such file or directory\n"
	         " schedule csv \"%s\";\n"
	         "          ^~~\n",
	         missing, missing);
	expect_error(csv_program(missing), want);
	/* --from-torch-csv replaces the program's schedule; its errors are the command line's */
	PipeccOptions o = {.from_csv = missing};
	char *errs = NULL;
	assert_null(compile_with(program(4, 2, 1, 2, "1f1b", NULL), &o, &errs));
	char tildes[128];
	size_t k = strlen(missing) - 1;
	memset(tildes, '~', k);
	tildes[k] = 0;
	snprintf(want, sizeof want,
	         "<command line>: error: cannot read %s: No such file or directory\n"
	         " --from-torch-csv %s\n"
	         "                  ^%s\n",
	         missing, missing, tildes);
	assert_string_equal(errs, want);
	free(errs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sched__custom__runs_as_written),
		cmocka_unit_test(sched__custom__located_errors),
		cmocka_unit_test(sched__custom_local_wait__both_actions_named),
		cmocka_unit_test(sched__custom__whole_order_errors),
		cmocka_unit_test(sched__custom_cross_rank_cycle__stall_then_simulator_cycle),
		cmocka_unit_test(sched__random_custom_orders__deadlocks_show_a_cycle),
		cmocka_unit_test(sched__csv__torch_dump_reads),
		cmocka_unit_test(sched__csv__emit_roundtrip_every_schedule),
		cmocka_unit_test(sched__csv__errors_located_in_the_csv),
		cmocka_unit_test(sched__custom_pair__adjacent_and_checked),
		cmocka_unit_test(sim__custom_pair__one_slot_in_the_overlap_model),
	};
	return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
