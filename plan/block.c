/* A rank's op arrays: its own allocations, grown by half as ops are pushed, or arrays
 * carved from the plan's blocks, which start on a 2 MiB boundary and are offered for
 * huge pages when the machine is worth it (plan/thp.h).  An array in a block never
 * shrinks or moves; growing past it copies the rank's ops into arrays of its own. */
#include "block.h"
#include "sysmem.h"
#include "thp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void plan_rank_drop_ops(PlanRank *r)
{
	if (!r->inblock && !r->borrowed) {
		free(r->ops);
		free(r->lines);
	}
	r->ops = NULL;
	r->lines = NULL;
	r->nops = r->ops_cap = 0;
	r->inblock = 0;
}

#define HUGE_ALIGN ((uintptr_t)2 << 20)

/* One allocation HUGE_ALIGN bytes longer than asked, the block starting at its first
 * 2 MiB boundary; only the block's own bytes are hinted, so no huge page reaches past
 * it (its last part short of 2 MiB stays in small pages) and none holds a neighbour's
 * memory or bytes nobody uses. */
void *plan_block_new(size_t bytes, int zero, void **raw)
{
	if (bytes < PLAN_HUGE_MIN) {
		*raw = zero ? calloc(bytes ? bytes : 1, 1) : malloc(bytes ? bytes : 1);
		return *raw;
	}
	/* Overcommit would grant a block the machine cannot hold, and the OOM killer end
	 * the tool as its ops are written: refuse it (plan_oom_text then says so). */
	if (bytes > SIZE_MAX - HUGE_ALIGN ||
	    (bytes >= PLAN_FIT_MIN && !plan_sysmem_fits((double)bytes))) {
		*raw = NULL;
		errno = ENOMEM;
		return NULL;
	}
	*raw = zero ? calloc(bytes + HUGE_ALIGN, 1) : malloc(bytes + HUGE_ALIGN);
	if (!*raw)
		return NULL;
	char *a = (char *)(((uintptr_t)*raw + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1));
#ifdef MADV_HUGEPAGE
	if (plan_huge_pages())
		(void)madvise(a, bytes, MADV_HUGEPAGE); // EINVAL without THP: only a hint
#endif
	return a;
}

void plan_populate_step(uintptr_t step, uintptr_t end)
{
#ifdef MADV_POPULATE_WRITE
	static int refused; // the kernel cannot (before Linux 5.14): faults do it
	uintptr_t e = step + PLAN_POPULATE_STEP;
	if (e > end)
		e = end & ~(uintptr_t)4095; // a last page in part: left to its fault
	if (step < e && !__atomic_load_n(&refused, __ATOMIC_RELAXED) &&
	    madvise((void *)step, e - step, MADV_POPULATE_WRITE))
		__atomic_store_n(&refused, 1, __ATOMIC_RELAXED);
#else
	(void)step, (void)end;
#endif
}

size_t plan_block_ops(Plan *p, PlanRank *const *rk, const int64_t *n, int count, int lines)
{
	size_t total = 0, per = sizeof(PlanOp) + (lines ? sizeof(int32_t) : 0);
	for (int i = 0; i < count; i++) {
		if ((size_t)n[i] > SIZE_MAX / per - total)
			return SIZE_MAX; // no machine has it
		total += (size_t)n[i];
	}
	void **bl = realloc(p->blocks, ((size_t)p->nblocks + 1) * sizeof *bl), *raw;
	if (!bl)
		return ((size_t)p->nblocks + 1) * sizeof *bl;
	p->blocks = bl;
	char *a = plan_block_new(total * per, 0, &raw);
	if (!a)
		return total * per + HUGE_ALIGN;
	p->blocks[p->nblocks++] = raw;
	/* Every rank's ops first, then every rank's lines. */
	PlanOp *ops = (PlanOp *)a;
	int32_t *ln = (int32_t *)(ops + total);
	for (int i = 0; i < count; i++) {
		PlanRank *r = rk ? rk[i] : &p->ranks[i];
		plan_rank_drop_ops(r);
		r->ops = ops;
		r->lines = lines ? ln : NULL;
		r->ops_cap = n[i];
		r->inblock = 1;
		ops += n[i];
		ln += n[i];
	}
	return 0;
}

size_t plan_block_take(Plan *p, PlanRank *r, int64_t n, int lines)
{
	size_t per = sizeof(PlanOp) + (lines ? sizeof(int32_t) : 0);
	if (n <= 0 || (size_t)n > (SIZE_MAX - HUGE_ALIGN) / 2 / per || (size_t)n * per < PLAN_TAKE_MIN)
		return plan_reserve_ops(r, n, lines);
	size_t need = ((size_t)n * per + 63) & ~(size_t)63; // the next rank's ops on a cache line
	if (!p->take_at || (size_t)(p->take_end - p->take_at) < need) {
		size_t bytes = need > PLAN_TAKE_BLOCK ? need : PLAN_TAKE_BLOCK;
		void **bl = realloc(p->blocks, ((size_t)p->nblocks + 1) * sizeof *bl), *raw;
		if (!bl)
			return ((size_t)p->nblocks + 1) * sizeof *bl;
		p->blocks = bl;
		char *a = plan_block_new(bytes, 0, &raw);
		if (!a)
			return bytes + HUGE_ALIGN;
		p->blocks[p->nblocks++] = raw;
		p->take_at = a;
		p->take_end = a + bytes;
	}
	plan_rank_drop_ops(r);
	r->ops = (PlanOp *)p->take_at;
	r->lines = lines ? (int32_t *)(r->ops + n) : NULL;
	r->ops_cap = n;
	r->inblock = 1;
	p->take_at += need;
	return 0;
}

/* plan_reserve_ops on a rank whose arrays are in a block: both copied into arrays of
 * its own, or nothing changed. */
static size_t move_out(PlanRank *r, int64_t cap, int lines)
{
	PlanOp *ops = malloc((size_t)cap * sizeof *ops);
	int32_t *l = lines || r->lines ? malloc((size_t)cap * sizeof *l) : NULL;
	if (!ops || (!l && (lines || r->lines))) {
		free(ops);
		free(l);
		return (size_t)cap * (ops ? sizeof *l : sizeof *ops);
	}
	memcpy(ops, r->ops, (size_t)r->nops * sizeof *ops);
	if (l && r->lines)
		memcpy(l, r->lines, (size_t)r->nops * sizeof *l);
	else if (l) // the ops so far stem from no line
		memset(l, 0, (size_t)r->nops * sizeof *l);
	r->ops = ops;
	r->lines = l;
	r->ops_cap = cap;
	r->inblock = 0;
	return 0;
}

size_t plan_reserve_ops(PlanRank *r, int64_t cap, int lines)
{
	cap = cap > 0 ? cap : 1;
	if (r->inblock && cap <= r->ops_cap && (!lines || r->lines))
		return 0; // a block's arrays do not shrink
	if (r->inblock)
		return move_out(r, cap > r->nops ? cap : r->nops, lines);
	PlanOp *ops = realloc(r->ops, (size_t)cap * sizeof *ops);
	if (!ops)
		return (size_t)cap * sizeof *ops;
	r->ops = ops;
	if (lines || r->lines) {
		int32_t *l = realloc(r->lines, (size_t)cap * sizeof *l);
		if (!l)
			return (size_t)cap * sizeof *l;
		if (!r->lines) // the ops so far stem from no line
			memset(l, 0, (size_t)r->nops * sizeof *l);
		r->lines = l;
	}
	r->ops_cap = cap;
	return 0;
}

PlanOp *plan_push_op(PlanRank *r, PlanOp op, int32_t line)
{
	int64_t cap = r->ops_cap;
	if (r->nops == cap)
		cap = cap ? cap + cap / 2 : 64;
	if ((cap != r->ops_cap || (line && !r->lines)) && plan_reserve_ops(r, cap, line != 0))
		return NULL;
	r->ops[r->nops] = op;
	if (r->lines)
		r->lines[r->nops] = line;
	return &r->ops[r->nops++];
}
