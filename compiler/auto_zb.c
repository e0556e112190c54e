/* Zero Bubble's greedy heuristic as one more order generator for `schedule auto;`, and
 * the comparison bench/auto_bench.c measures auto against.  A reimplementation, written
 * from a reading of the heuristic Zero Bubble's automatic scheduler starts from
 * (sail-sg/zero-bubble-pipeline-parallelism, branch legacy-main,
 * megatron/core/pipeline_parallel/auto_schedule.py: `initial_solution` over
 * `manual_order`): one stage per rank in a chain, F/B/W costs and memory per stage, the
 * chain's transfer times, a memory limit per stage for saved activations.
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
 * does.  Its memory model is saved activations only: the tensors in flight that pipecc's
 * memory model also counts are the caller's to leave room for (auto_search.c cuts the
 * limit by the overshoot until the order fits).  Times in ns, sizes in bytes. */
#include "auto.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
	const AutoModel *md;
	const int64_t *maxmem;
	int p, m;
	int *st;                     // pipeline position -> stage
	int64_t *fwd, *bwd;          // pipeline position: transfer into it from before/after
	int *f, *b, *w;              // per position: ops placed of each kind
	int64_t *e, *mem, *bub, *top;
	int64_t *t;                  // end times: (kind * p + j) * m + mb; -1 not yet
	SchedAct **acts;
	int *nacts;
	int failed;
} Zb;

static int64_t zcost(const Zb *z, int k, int j)
{
	return z->md->cost[z->st[j]][k];
}

static int64_t zmem(const Zb *z, int k, int j)
{
	const int64_t *sv = z->md->save[z->st[j]];
	return k == 0 ? sv[0] + sv[1] : k == 1 ? sv[2] - sv[0] : -(sv[1] + sv[2]);
}

static int64_t *tt(const Zb *z, int k, int j, int mb)
{
	return &z->t[((size_t)k * (size_t)z->p + (size_t)j) * (size_t)z->m + (size_t)mb];
}

static int64_t max_bubble(const Zb *z)
{
	int64_t b = 0;
	for (int j = 0; j < z->p; j++)
		if (z->bub[j] > b)
			b = z->bub[j];
	return b;
}

static void put(Zb *z, int j, int k)
{
	static const OpKind kinds[3] = {OP_F, OP_B, OP_W};
	int *cnt = k == 0 ? z->f : k == 1 ? z->b : z->w;
	int mb = cnt[j];
	if (mb >= z->m) {
		z->failed = 1;
		return;
	}
	int64_t cost = zcost(z, k, j), end = z->e[j] + cost, plain = end;
	if (k == 0 && j > 0) {
		int64_t dep = *tt(z, 0, j - 1, mb);
		if (dep < 0)
			z->failed = 1;
		else if (dep + z->fwd[j] + cost > end)
			end = dep + z->fwd[j] + cost;
	}
	if (k == 1 && j < z->p - 1) {
		int64_t dep = *tt(z, 1, j + 1, mb);
		if (dep < 0)
			z->failed = 1;
		else if (dep + z->bwd[j] + cost > end)
			end = dep + z->bwd[j] + cost;
	}
	if (k == 1 && *tt(z, 0, j, mb) < 0)
		z->failed = 1;
	if (z->f[j] > 0)
		z->bub[j] += end - plain;
	z->e[j] = end;
	*tt(z, k, j, mb) = end;
	z->mem[j] += zmem(z, k, j);
	if (z->mem[j] > z->top[j])
		z->top[j] = z->mem[j];
	cnt[j]++;
	int q = z->md->stage_pp[z->st[j]];
	z->acts[q][z->nacts[q]++] = (SchedAct){.kind = kinds[k], .stage = z->st[j], .mb = mb};
}

/* W's before an op whose input arrives at `arr` on position j. */
static void fill_w(Zb *z, int j, int64_t arr, int greedy)
{
	while (z->w[j] < z->b[j] && z->e[j] + zcost(z, 2, j) <= arr)
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

/* W's until op kind k of position j fits in memory; -1 when none is left to free it. */
static int make_room(Zb *z, int j, int k)
{
	while (z->mem[j] + zmem(z, k, j) > z->maxmem[j]) {
		if (z->w[j] >= z->b[j])
			return -1;
		put(z, j, 2);
	}
	return 0;
}

static void first_microbatch(Zb *z, int allow_bubble, int *need)
{
	int p = z->p;
	for (int j = 0; j < p; j++) {
		need[j] = 0;
		put(z, j, 0);
	}
	int64_t last = 0;
	for (int j = p - 1; j >= 0; j--) {
		if (j == p - 1) {
			last = *tt(z, 0, j, 0) + zcost(z, 1, j);
			continue;
		}
		int64_t mem = z->mem[j], cost = z->e[j], comm = z->bwd[j];
		while (z->f[j] + need[j] < z->m && mem + zmem(z, 0, j) <= z->maxmem[j]) {
			if (allow_bubble ? cost + zcost(z, 0, j) > last + comm : cost >= last + comm)
				break;
			mem += zmem(z, 0, j);
			cost += zcost(z, 0, j);
			need[j]++;
		}
		last = (cost > last + comm ? cost : last + comm) + zcost(z, 1, j);
	}
	for (int j = 1; j < p; j++)
		while (need[j] > 0 && need[j] >= need[j - 1] && z->f[j] + need[j] < z->m)
			need[j]--;
	for (int j = 0; j < p; j++)
		for (int k = 0; k < need[j]; k++)
			put(z, j, 0);
	for (int j = p - 1; j >= 0; j--)
		put(z, j, 1);
}

/* Whether position j takes a forward in this round (prioritize_b may hold it back). */
static int wants_f(Zb *z, int j, int prio)
{
	if (z->f[j] >= z->m)
		return 0;
	if (!(prio && j + 1 < z->p && z->f[j] >= z->f[j + 1] + 2))
		return 1;
	int64_t next = z->e[j + 1] + zcost(z, 0, j + 1) + zcost(z, 1, j + 1) + z->bwd[j];
	if (z->e[j] >= next)
		return 0;
	int64_t mem = z->mem[j] + zmem(z, 0, j), wcost = 0;
	for (int k = 0; mem > z->maxmem[j] && z->w[j] + k < z->b[j]; k++) {
		wcost += zcost(z, 2, j);
		mem += zmem(z, 2, j);
	}
	if (z->e[j] + zcost(z, 0, j) + wcost <= next)
		return 1;
	return !(next - z->e[j] <= max_bubble(z) - z->bub[j]);
}

/* One round per later microbatch: forwards down, backwards up. */
static int rounds(Zb *z, int prio, int greedy, int *need)
{
	int p = z->p;
	for (int i = 1; i < z->m && !z->failed; i++) {
		for (int j = 0; j < p; j++)
			need[j] = wants_f(z, j, prio);
		for (int j = p - 2; j >= 0; j--)
			if (need[j + 1] < need[j])
				need[j] = need[j + 1];
		for (int j = 0; j < p && !z->failed; j++) {
			if (!need[j])
				continue;
			if (make_room(z, j, 0))
				return -1;
			if (j > 0 && *tt(z, 0, j - 1, z->f[j]) >= 0)
				fill_w(z, j, *tt(z, 0, j - 1, z->f[j]) + z->fwd[j], greedy);
			put(z, j, 0);
		}
		for (int j = p - 1; j >= 0 && !z->failed; j--) {
			if (make_room(z, j, 1))
				return -1;
			if (j + 1 < p && *tt(z, 1, j + 1, i) >= 0)
				fill_w(z, j, *tt(z, 1, j + 1, i) + z->bwd[j], greedy);
			if (j == 0 && z->f[j] == z->m)
				while (z->w[j] < z->b[j])
					put(z, j, 2);
			put(z, j, 1);
		}
	}
	return 0;
}

/* One flag combination; the largest per-position span, or -1 when it does not finish. */
static int64_t run(Zb *z, int allow_bubble, int prio, int greedy, int *need, AutoZbOut *out)
{
	int p = z->p;
	for (int j = 0; j < p; j++) {
		z->f[j] = z->b[j] = z->w[j] = 0;
		z->e[j] = z->mem[j] = z->bub[j] = z->top[j] = 0;
		z->nacts[z->md->stage_pp[z->st[j]]] = 0;
	}
	for (size_t i = 0; i < (size_t)3 * (size_t)p * (size_t)z->m; i++)
		z->t[i] = -1;
	z->failed = 0;
	first_microbatch(z, allow_bubble, need);
	if (rounds(z, prio, greedy, need))
		return -1;
	for (int j = 0; j < p; j++)
		while (z->w[j] < z->m && !z->failed)
			put(z, j, 2);
	if (z->failed)
		return -1;
	int64_t span = 0;
	out->makespan = 0;
	for (int j = 0; j < p; j++) {
		int64_t s = *tt(z, 2, j, z->m - 1) - *tt(z, 0, j, 0) + zcost(z, 0, j);
		if (s > span)
			span = s;
		if (z->e[j] > out->makespan)
			out->makespan = z->e[j];
		out->peak[z->md->stage_pp[z->st[j]]] = z->top[j];
	}
	out->span = span;
	return span;
}

/* The pipeline positions of a chain of one stage per rank, with its transfer times;
 * -1 when the model is not such a chain. */
static int chain(Zb *z)
{
	const AutoModel *md = z->md;
	if (md->ns != md->pp)
		return -1;
	for (int s = 0; s < md->ns; s++) {
		int ni = md->ioff[s + 1] - md->ioff[s], no = md->ooff[s + 1] - md->ooff[s];
		if (ni != (s > 0) || no != (s < md->ns - 1))
			return -1;
		if (s > 0 && md->edges[md->ein[md->ioff[s]]].src != s - 1)
			return -1;
		z->st[s] = s;
		z->fwd[s] = s > 0 ? md->edges[md->ein[md->ioff[s]]].ns : 0;
		z->bwd[s] = s < md->ns - 1 ? md->edges[md->eout[md->ooff[s]]].ns : 0;
	}
	return 0;
}

int auto_zb_fill(const AutoModel *md, const int64_t *maxmem, SchedAct **acts, int *nacts,
                 AutoZbOut *out)
{
	int p = md->pp, m = md->m, found = 0, rc = -1;
	size_t n = (size_t)p;
	Zb z = {.md = md, .maxmem = maxmem, .p = p, .m = m};
	int *iv = calloc(5 * n, sizeof *iv);
	int64_t *lv = calloc(7 * n + 3 * n * (size_t)(m > 0 ? m : 1), sizeof *lv);
	SchedAct **tmp = calloc(n, sizeof *tmp);
	int *tn = calloc(n, sizeof *tn);
	if (!iv || !lv || !tmp || !tn) {
		auto_oom(md);
		goto out;
	}
	if (m < 1)
		goto out;
	z.st = iv, z.f = iv + n, z.b = iv + 2 * n, z.w = iv + 3 * n;
	z.fwd = lv, z.bwd = lv + n, z.e = lv + 2 * n, z.mem = lv + 3 * n, z.bub = lv + 4 * n;
	z.top = lv + 5 * n, z.t = lv + 7 * n;
	if (chain(&z))
		goto out;
	for (size_t q = 0; q < n; q++)
		if (!(tmp[q] = malloc((size_t)3 * (size_t)m * sizeof **tmp))) {
			auto_oom(md);
			goto out;
		}
	z.acts = tmp, z.nacts = tn;
	for (int a = 1; a >= 0; a--)
		for (int pr = 1; pr >= 0; pr--)
			for (int g = 1; g >= 0; g--) {
				AutoZbOut o = {.peak = lv + 6 * n};
				int64_t span = run(&z, a, pr, g, iv + 4 * n, &o);
				if (span < 0 || (found && span >= out->span))
					continue;
				found = 1;
				out->span = o.span;
				out->makespan = o.makespan;
				if (out->peak)
					memcpy(out->peak, o.peak, n * sizeof *out->peak);
				for (size_t q = 0; q < n; q++) {
					memcpy(acts[q], tmp[q], (size_t)tn[q] * sizeof **tmp);
					nacts[q] = tn[q];
				}
			}
	rc = found ? 0 : -1;
out:
	for (size_t q = 0; tmp && q < n; q++)
		free(tmp[q]);
	free(tmp), free(tn), free(iv), free(lv);
	return rc;
}
