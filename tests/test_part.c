/* Automatic stage partitioning (compiler/part.c): the dynamic program equals an
 * exhaustive search over every contiguous split on small random cases (times, memory,
 * forbidden and pinned cuts, length bounds), and `model { ... }` compiles to the stages
 * it chose: a heavy layer alone, pinned cuts kept, a memory cap obeyed; under schedule
 * auto a cut the search moves is confirmed faster than the DP's, and as fast as the best
 * cut written by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../compiler/part.h"
#include "../compiler/pipecc.h"
#include "../sim/sim.h"

/* A small deterministic generator (xorshift), so every run tries the same cases. */
static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int pick(uint64_t *s, int lo, int hi)
{
	return lo + (int)(next(s) % (uint64_t)(hi - lo + 1));
}

/* Whether stage j = [a, b) is allowed by pb's constraints. */
static int stage_ok(const PartProblem *pb, int j, int a, int b)
{
	int len = b - a;
	if (len < 1 || (pb->min_len && len < pb->min_len) || (pb->max_len && len > pb->max_len))
		return 0;
	if (a > 0 && pb->cut_ok && !pb->cut_ok[a])
		return 0;
	for (int u = a + 1; pb->pin && u < b; u++)
		if (pb->pin[u])
			return 0;
	int64_t st = 0, ac = 0;
	for (int u = a; u < b; u++) {
		st += pb->stat ? pb->stat[u] : 0;
		ac += pb->act ? pb->act[u] : 0;
	}
	int64_t m = st + (pb->inflight ? pb->inflight[j] : 1) * ac;
	if (pb->edge && a > 0)
		m += pb->edge[a];
	if (pb->edge && b < pb->n)
		m += (pb->outflight ? pb->outflight[j] : 1) * pb->edge[b];
	return !pb->cap || m <= pb->cap;
}

/* Every split: stage j begins at cut[j]; the least bottleneck over those allowed, or
 * PART_NONE. */
static int64_t exhaustive(const PartProblem *pb, int *cut, int j)
{
	if (j == pb->k)
		return cut[j] == pb->n ? 0 : PART_NONE;
	int64_t best = PART_NONE;
	int last = j == pb->k - 1;
	for (int b = cut[j] + 1; b <= pb->n; b++) {
		if (last && b != pb->n)
			continue;
		if (!stage_ok(pb, j, cut[j], b))
			continue;
		cut[j + 1] = b;
		int64_t rest = exhaustive(pb, cut, j + 1);
		if (rest < 0)
			continue;
		int64_t t = 0;
		for (int u = cut[j]; u < b; u++)
			t += pb->time[u];
		int64_t v = t > rest ? t : rest;
		if (best < 0 || v < best)
			best = v;
	}
	return best;
}

static void part__dp__equals_exhaustive_search(void **state)
{
	(void)state;
	uint64_t seed = 0x9e3779b97f4a7c15u;
	int cases = 0, infeasible = 0, constrained = 0;
	for (int round = 0; round < 4000; round++) {
		int n = pick(&seed, 1, 12), k = pick(&seed, 1, 4);
		int64_t time[12], stat[12], act[12], edge[13];
		uint8_t cut_ok[12], pin[12];
		int inflight[4], outflight[4];
		for (int u = 0; u < n; u++) {
			time[u] = pick(&seed, 1, 1000);
			stat[u] = pick(&seed, 0, 100);
			act[u] = pick(&seed, 0, 50);
			cut_ok[u] = pick(&seed, 0, 5) > 0;
			pin[u] = pick(&seed, 0, 9) == 0;
		}
		for (int u = 0; u <= n; u++)
			edge[u] = pick(&seed, 0, 30);
		for (int j = 0; j < 4; j++) {
			inflight[j] = pick(&seed, 1, 4);
			outflight[j] = pick(&seed, 1, 4);
		}
		PartProblem pb = {.n = n, .k = k, .time = time};
		int mode = round % 4; // 0 times only; 1 + cut rules; 2 + memory; 3 + lengths
		if (mode >= 1) {
			pb.cut_ok = cut_ok;
			pb.pin = pin;
		}
		if (mode >= 2) {
			pb.stat = stat;
			pb.act = act;
			pb.inflight = inflight;
			pb.edge = edge;
			pb.outflight = outflight;
			pb.cap = pick(&seed, 100, 900);
		}
		if (mode == 3) {
			pb.min_len = n / k;
			pb.max_len = (n + k - 1) / k;
		}
		int cut[5] = {0}, want_cut[5] = {0};
		int64_t got = part_split(&pb, cut);
		int64_t want = k <= n ? exhaustive(&pb, want_cut, 0) : PART_NONE;
		assert_int_equal(got, want);
		cases++;
		constrained += mode > 0;
		if (got < 0) {
			infeasible++;
			continue;
		}
		/* the split returned is one the search allows, and has that bottleneck */
		assert_int_equal(cut[0], 0);
		assert_int_equal(cut[k], n);
		for (int j = 0; j < k; j++) {
			assert_true(stage_ok(&pb, j, cut[j], cut[j + 1]));
			if (pb.cap)
				assert_true(part_stage_mem(&pb, j, cut[j], cut[j + 1]) <= pb.cap);
		}
		assert_int_equal(part_bottleneck(&pb, cut), got);
	}
	/* the loop tried feasible and infeasible cases under every constraint */
	assert_int_equal(cases, 4000);
	assert_true(infeasible > 100 && infeasible < 3000);
	assert_int_equal(constrained, 3000);
}

/* k > n, and k = n (every stage one unit) */
static void part__dp__edges(void **state)
{
	(void)state;
	int64_t t[3] = {5, 7, 2};
	int cut[5];
	PartProblem pb = {.n = 3, .k = 4, .time = t};
	assert_int_equal(part_split(&pb, cut), PART_NONE);
	pb.k = 3;
	assert_int_equal(part_split(&pb, cut), 7);
	assert_int_equal(cut[1], 1);
	assert_int_equal(cut[2], 2);
	pb.k = 1;
	assert_int_equal(part_split(&pb, cut), 14);
}

/* 80 units cut 16 ways: the DP's bottleneck is at least the mean and the largest unit,
 * and below the mean plus the largest unit (a greedy fill's bound). */
static void part__dp__large_within_bounds(void **state)
{
	(void)state;
	uint64_t seed = 12345;
	int64_t t[80], total = 0, most = 0;
	for (int u = 0; u < 80; u++) {
		t[u] = pick(&seed, 1000, 50000);
		total += t[u];
		most = t[u] > most ? t[u] : most;
	}
	int cut[17];
	PartProblem pb = {.n = 80, .k = 16, .time = t};
	int64_t b = part_split(&pb, cut);
	assert_true(b * 16 >= total && b >= most);
	assert_true(b <= total / 16 + most);
}

static Plan *compile_src(const char *src, char **diags)
{
	PipeccOptions o = {0};
	Diag d;
	size_t len = 0;
	FILE *out = open_memstream(diags, &len);
	diag_init(&d, "t.pipe", src, strlen(src), out);
	Plan *p = pipecc_compile("t.pipe", src, strlen(src), &o, &d);
	fclose(out);
	return p;
}

/* Layers per stage of a compiled plan. */
static void layers_per_stage(const Plan *p, int *v)
{
	for (int s = 0; s < p->nstages; s++)
		v[s] = p->stages[s].nlayers;
}

/* A linear 8 times wider than the rest takes a stage of its own; names are s0.. */
static void part__model__heavy_layer_alone(void **state)
{
	(void)state;
	const char *src = "pipeline t;\nmesh pp=4;\nmicrobatches 8;\ninput 64x256;\n"
	                  "model { linear 256; linear 256; linear 2048; linear 256; linear 256;\n"
	                  "linear 256; linear 256; linear 256; loss mse; }\n"
	                  "stages auto;\nschedule 1f1b;\n";
	char *diags = NULL;
	Plan *p = compile_src(src, &diags);
	if (!p)
		fprintf(stderr, "%s", diags);
	assert_non_null(p);
	assert_int_equal(p->nstages, 4);
	int v[4];
	layers_per_stage(p, v);
	/* linear 2048 costs 8 x 256-wide ones; 2048 -> 256 another 8: alone each */
	assert_int_equal(v[0], 2);
	assert_int_equal(v[1], 1);
	assert_int_equal(v[2], 1);
	assert_int_equal(v[3], 5);
	assert_string_equal(p->stages[0].name, "s0");
	assert_string_equal(p->stages[3].name, "s3");
	plan_free(p);
	free(diags);
}

/* `cut;` pins a cut; `b x 6` is written out, twelve units; `stages 3` overrides the
 * count. */
static void part__model__pins_and_counts(void **state)
{
	(void)state;
	const char *src = "pipeline t;\nmesh pp=3;\nmicrobatches 8;\ninput 16x64;\n"
	                  "block b { linear 64; relu; }\n"
	                  "model { b x 6; cut; linear 64; loss mse; }\n"
	                  "stages 3;\nschedule 1f1b;\n";
	char *diags = NULL;
	Plan *p = compile_src(src, &diags);
	assert_non_null(p);
	assert_int_equal(p->nstages, 3);
	int v[3];
	layers_per_stage(p, v);
	assert_int_equal(v[0] + v[1], 12);      // the six block copies before the pin
	assert_int_equal(v[2], 2);              // linear 64; loss mse
	assert_true(v[0] >= 5 && v[1] >= 5);    // the twelve halved: 6 linears each side
	plan_free(p);
	free(diags);
}

/* A cap too small for the time-balanced split moves the cut (and the plan then fits
 * the memory model); a pinned cut that leaves no split within the cap is an error at
 * the pin. */
static void part__model__memory_cap(void **state)
{
	(void)state;
	const char *fmt = "pipeline t;\nmesh pp=4;\nmicrobatches 8;\ninput 4096x256;\n"
	                  "device peak=100TFLOPs memory=%s;\n"
	                  "model { linear 256; linear 256; linear 256; linear 256; linear 256;"
	                  " linear 256; linear 256; %s linear 256; loss mse; }\nschedule 1f1b;\n";
	char src[1024];
	char *diags = NULL;
	/* a linear: 526 kB of parameters and gradients, 4.19 MB saved and 4.19 MB out a
	 * microbatch; 1F1B's s0 of two holds 4 microbatches' saved and two out: 43 MB */
	snprintf(src, sizeof src, fmt, "60MB", "");
	Plan *p = compile_src(src, &diags);
	assert_non_null(p);
	for (int s = 0; s < 3; s++)
		assert_int_equal(p->stages[s].nlayers, 2); // by time: 2 | 2 | 2 | 2 + loss
	plan_free(p);
	free(diags);
	diags = NULL;
	snprintf(src, sizeof src, fmt, "40MB", "");
	p = compile_src(src, &diags);
	if (!p)
		fprintf(stderr, "%s", diags);
	assert_non_null(p);
	assert_int_equal(p->stages[0].nlayers, 1); // 43 MB do not fit in 40
	plan_free(p);
	free(diags);
	diags = NULL;
	/* seven linears before the last stage: the first three stages cannot hold them */
	snprintf(src, sizeof src, fmt, "40MB", "cut;");
	p = compile_src(src, &diags);
	assert_null(p);
	char want[160];
	const char *line = strstr(src, "model");
	snprintf(want, sizeof want, "t.pipe:6:%d: error: no split with the cuts pinned here fits "
	         "the device's memory", (int)(strstr(src, "cut;") - line) + 1);
	assert_non_null(strstr(diags, want));
	free(diags);
}

static int64_t overlap_step(const Plan *p)
{
	SimOptions so = {.model = SIM_OVERLAP};
	SimResult r;
	assert_int_equal(sim_run(p, &so, &r), 0);
	int64_t t = r.makespan;
	sim_result_free(&r);
	return t;
}

/* A small GPT with a 4096-word head at pp=2: its 16 units (the embedding, 12
 * residuals, the norm, the head and the loss), with `cut;` before unit `at` (0: none),
 * `stages` and `schedule` as given. */
static void gpt_src(char *buf, size_t n, int at, const char *stages, const char *sched)
{
	static const char *const unit[2] = {
		"residual { layernorm; attention heads=4 bias; }",
		"residual { layernorm; mlp 512 bias; }",
	};
	size_t k = (size_t)snprintf(buf, n, "pipeline t;\nmesh pp=2;\nmicrobatches 4;\n"
	                            "input tokens 4x64 vocab=4096;\ndevice h100;\n"
	                            "model { embed 128 positions;");
	for (int u = 1; u < 16; u++)
		k += (size_t)snprintf(buf + k, n - k, "%s %s", u == at ? " cut;" : "",
		                      u <= 12 ? unit[(u - 1) % 2] : u == 13 ? "layernorm;" :
		                      u == 14 ? "head;" : "loss xent;");
	snprintf(buf + k, n - k, " }\nstages %s;\nschedule %s;\n", stages, sched);
}

/* Compiles src; its step in the overlap model and its first stage's layer count. */
static int64_t gpt_step(const char *src, int *first)
{
	char *diags = NULL;
	Plan *p = compile_src(src, &diags);
	if (!p)
		fprintf(stderr, "%s", diags);
	assert_non_null(p);
	int64_t t = overlap_step(p);
	*first = p->stages[0].nlayers;
	plan_free(p);
	free(diags);
	return t;
}

/* Under schedule auto the search moves the DP's cut (the least slowest stage) where the
 * confirmed step is shorter: the plan's step is below the DP cut's, and equals the
 * best of every two-stage cut compiled by hand with `cut;` (one stage a rank wins
 * here, so those are all its cuts). */
static void part__move__confirmed_faster_than_dp(void **state)
{
	(void)state;
	char src[2048];
	int first, dp_first, at_first;
	gpt_src(src, sizeof src, 0, "2", "1f1b"); // the DP's cut: a registry row moves nothing
	gpt_step(src, &dp_first);
	int64_t dp = -1, best = -1;
	for (int at = 1; at < 16; at++) {
		gpt_src(src, sizeof src, at, "2", "auto");
		int64_t t = gpt_step(src, &at_first);
		if (at_first == dp_first)
			dp = t;
		best = best < 0 || t < best ? t : best;
	}
	gpt_src(src, sizeof src, 0, "auto", "auto");
	int64_t moved = gpt_step(src, &first);
	assert_true(dp > 0);
	assert_true(moved < dp);
	assert_true(first != dp_first);
	assert_int_equal(moved, best);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(part__dp__equals_exhaustive_search),
		cmocka_unit_test(part__dp__edges),
		cmocka_unit_test(part__dp__large_within_bounds),
		cmocka_unit_test(part__model__heavy_layer_alone),
		cmocka_unit_test(part__model__pins_and_counts),
		cmocka_unit_test(part__model__memory_cap),
		cmocka_unit_test(part__move__confirmed_faster_than_dp),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
