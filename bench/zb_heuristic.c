/* A reimplementation, for comparison only, of the heuristic Zero Bubble's automatic
 * scheduler starts from (sail-sg/zero-bubble-pipeline-parallelism, branch legacy-main,
 * megatron/core/pipeline_parallel/auto_schedule.py: `initial_solution` over
 * `manual_order`), written from a reading of it: one stage per rank, F/B/W costs and
 * memory per stage, one communication cost per transfer, a memory limit per stage.
 *
 * The heuristic walks microbatches.  Microbatch 0 goes forward through every stage; then,
 * from the last stage up, each stage takes as many extra forwards as fit in its memory
 * before the first backward comes back (counts made non-increasing down the pipeline),
 * and the first backward runs up.  Every later microbatch is one forward per stage
 * (with `prioritize_b`, a stage already two forwards ahead of the next one skips it when
 * the next stage would wait) and then one backward per stage, bottom up; before each, W's
 * run when memory demands it, while they fit before the input arrives, and (by
 * `no_bubble_greedy` and the bubble budget) into the gap before it.  The remaining W's
 * close each stage.  Eight flag combinations are tried and the one with the smallest
 * largest per-stage span (first F's start to last W's end) is kept, as the original
 * does.  Times in the caller's units (integers). */
#include "zb_heuristic.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
	const ZbIn *in;
	int f[ZB_MAXP], b[ZB_MAXP], w[ZB_MAXP];
	long e[ZB_MAXP], mem[ZB_MAXP], bub[ZB_MAXP];
	long t[3][ZB_MAXP][ZB_MAXM];
	ZbOut *out;
	int failed;
} Zb;

static long max_bubble(const Zb *z)
{
	long b = 0;
	for (int j = 0; j < z->in->p; j++)
		if (z->bub[j] > b)
			b = z->bub[j];
	return b;
}

static void put(Zb *z, int j, int k)
{
	const ZbIn *in = z->in;
	int *cnt = k == 0 ? z->f : k == 1 ? z->b : z->w;
	int mb = cnt[j];
	if (mb >= in->m) {
		z->failed = 1;
		return;
	}
	long cost = in->cost[k][j], end = z->e[j] + cost, plain = end;
	if (k == 0 && j > 0) {
		long dep = z->t[0][j - 1][mb];
		if (dep < 0)
			z->failed = 1;
		else if (dep + in->comm + cost > end)
			end = dep + in->comm + cost;
	}
	if (k == 1 && j < in->p - 1) {
		long dep = z->t[1][j + 1][mb];
		if (dep < 0)
			z->failed = 1;
		else if (dep + in->comm + cost > end)
			end = dep + in->comm + cost;
	}
	if (k == 1 && z->t[0][j][mb] < 0)
		z->failed = 1;
	if (z->f[j] > 0)
		z->bub[j] += end - plain;
	z->e[j] = end;
	z->t[k][j][mb] = end;
	z->mem[j] += in->mem[k][j];
	cnt[j]++;
	ZbOut *o = z->out;
	o->kind[j][o->n[j]] = (char)k;
	o->mb[j][o->n[j]++] = mb;
}

/* W's before an op whose input arrives at `arr` on stage j. */
static void fill_w(Zb *z, int j, long arr, int greedy)
{
	const ZbIn *in = z->in;
	while (z->w[j] < z->b[j] && z->e[j] + in->cost[2][j] <= arr)
		put(z, j, 2);
	if (z->w[j] < z->b[j] && z->e[j] < arr) {
		if (arr - z->e[j] <= max_bubble(z) - z->bub[j]) {
			if (greedy)
				put(z, j, 2);
		} else {
			put(z, j, 2);
		}
	}
}

/* W's until op kind k of stage j fits in memory; -1 when none is left to free it. */
static int make_room(Zb *z, int j, int k)
{
	while (z->mem[j] + z->in->mem[k][j] > z->in->maxmem[j]) {
		if (z->w[j] >= z->b[j])
			return -1;
		put(z, j, 2);
	}
	return 0;
}

static void first_microbatch(Zb *z, int allow_bubble)
{
	const ZbIn *in = z->in;
	int p = in->p, need[ZB_MAXP] = {0};
	for (int j = 0; j < p; j++)
		put(z, j, 0);
	long last = 0;
	for (int j = p - 1; j >= 0; j--) {
		if (j == p - 1) {
			last = z->t[0][j][0] + in->cost[1][j];
			continue;
		}
		long mem = z->mem[j], cost = z->e[j];
		while (z->f[j] + need[j] < in->m && mem + in->mem[0][j] <= in->maxmem[j]) {
			if (allow_bubble ? cost + in->cost[0][j] > last + in->comm
			                 : cost >= last + in->comm)
				break;
			mem += in->mem[0][j];
			cost += in->cost[0][j];
			need[j]++;
		}
		last = (cost > last + in->comm ? cost : last + in->comm) + in->cost[1][j];
	}
	for (int j = 1; j < p; j++)
		while (need[j] > 0 && need[j] >= need[j - 1] && z->f[j] + need[j] < in->m)
			need[j]--;
	for (int j = 0; j < p; j++)
		for (int k = 0; k < need[j]; k++)
			put(z, j, 0);
	for (int j = p - 1; j >= 0; j--)
		put(z, j, 1);
}

/* Whether stage j takes a forward in this round (prioritize_b may hold it back). */
static int wants_f(Zb *z, int j, int prio)
{
	const ZbIn *in = z->in;
	if (z->f[j] >= in->m)
		return 0;
	if (!(prio && j + 1 < in->p && z->f[j] >= z->f[j + 1] + 2))
		return 1;
	long next = z->e[j + 1] + in->cost[0][j + 1] + in->cost[1][j + 1] + in->comm;
	if (z->e[j] >= next)
		return 0;
	long mem = z->mem[j] + in->mem[0][j], wcost = 0;
	for (int k = 0; mem > in->maxmem[j] && z->w[j] + k < z->b[j]; k++) {
		wcost += in->cost[2][j];
		mem += in->mem[2][j];
	}
	if (z->e[j] + in->cost[0][j] + wcost <= next)
		return 1;
	return !(next - z->e[j] <= max_bubble(z) - z->bub[j]);
}

static long run(Zb *zp, const ZbIn *in, int allow_bubble, int prio, int greedy, ZbOut *out)
{
	Zb z0 = {0};
	*zp = z0;
#define z (*zp)
	memset(out, 0, sizeof *out);
	z.in = in;
	z.out = out;
	int p = in->p;
	for (int k = 0; k < 3; k++)
		for (int j = 0; j < p; j++)
			for (int i = 0; i < in->m; i++)
				z.t[k][j][i] = -1;
	first_microbatch(&z, allow_bubble);
	for (int i = 1; i < in->m && !z.failed; i++) {
		int need[ZB_MAXP];
		for (int j = 0; j < p; j++)
			need[j] = wants_f(&z, j, prio);
		for (int j = p - 2; j >= 0; j--)
			if (need[j + 1] < need[j])
				need[j] = need[j + 1];
		for (int j = 0; j < p && !z.failed; j++) {
			if (!need[j])
				continue;
			if (make_room(&z, j, 0))
				return -1;
			if (j > 0 && z.t[0][j - 1][z.f[j]] >= 0)
				fill_w(&z, j, z.t[0][j - 1][z.f[j]] + in->comm, greedy);
			put(&z, j, 0);
		}
		for (int j = p - 1; j >= 0 && !z.failed; j--) {
			if (make_room(&z, j, 1))
				return -1;
			if (j + 1 < p && z.t[1][j + 1][i] >= 0)
				fill_w(&z, j, z.t[1][j + 1][i] + in->comm, greedy);
			if (j == 0 && z.f[j] == in->m)
				while (z.w[j] < z.b[j])
					put(&z, j, 2);
			put(&z, j, 1);
		}
	}
	for (int j = 0; j < p; j++)
		while (z.w[j] < in->m && !z.failed)
			put(&z, j, 2);
	if (z.failed)
		return -1;
	long span = 0;
	out->makespan = 0;
	for (int j = 0; j < p; j++) {
		long s = z.t[2][j][in->m - 1] - z.t[0][j][0] + in->cost[0][j];
		if (s > span)
			span = s;
		if (z.e[j] > out->makespan)
			out->makespan = z.e[j];
	}
	out->span = span;
	return span;
#undef z
}

int zb_initial_solution(const ZbIn *in, ZbOut *best)
{
	Zb *z = malloc(sizeof *z);
	ZbOut *o = malloc(sizeof *o);
	int found = 0;
	if (!z || !o) {
		free(z);
		free(o);
		return -1;
	}
	for (int a = 1; a >= 0; a--)
		for (int pr = 1; pr >= 0; pr--)
			for (int g = 1; g >= 0; g--) {
				long span = run(z, in, a, pr, g, o);
				if (span >= 0 && (!found || span < best->span)) {
					*best = *o;
					found = 1;
				}
			}
	free(z);
	free(o);
	return found ? 0 : -1;
}
