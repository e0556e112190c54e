/* Where a rank's op arrays live (plan/block.c): allocations of the rank's own, grown as
 * ops are pushed, or arrays carved from big blocks the plan owns, which start on a huge
 * page boundary and are paged in a step at a time ahead of the thread that fills them. */
#ifndef PLAN_BLOCK_H
#define PLAN_BLOCK_H

#include "plan.h"

#include <stddef.h>
#include <stdint.h>

/* Appends op, stemming from .pipe line `line` (0 unknown), growing the arrays; NULL: out
 * of memory. */
PlanOp *plan_push_op(PlanRank *r, PlanOp op, int32_t line);
/* Resizes r's op arrays to cap entries (at least 1, and at least its nops), lines[] too
 * when it is set or `lines` asks for it (the ops already there then stem from no line).
 * 0, or the bytes of the allocation that failed (r unchanged but for what succeeded). */
size_t plan_reserve_ops(PlanRank *r, int64_t cap, int lines);
/* Gives the count ranks rk[i] of p (rk NULL: ranks[0 .. count)) arrays for n[i] ops
 * each, and lines[] too when `lines` asks, all in one block of p's (plan_block_new):
 * ops they held are dropped, ops_cap = n[i], nops = 0, inblock set.  For writers that
 * know every count first (the readers of a whole file, the lowering): a block of
 * millions of ops is paged in 2 MiB at a time.  plan_reserve_ops within ops_cap leaves
 * such arrays be; past it, it copies them out.  0, or the bytes of the allocation that
 * failed (nothing changed). */
size_t plan_block_ops(Plan *p, PlanRank *const *rk, const int64_t *n, int count, int lines);
/* plan_block_ops for a writer that learns the counts rank by rank (the text reader):
 * r (holding no ops) gets arrays for n ops, and lines when `lines` asks, carved from a
 * block of p's of PLAN_TAKE_BLOCK bytes or more, a new one when the last is full;
 * arrays under PLAN_TAKE_MIN bytes are r's own (plan_reserve_ops).  A block's unused
 * end costs address space, not memory: the kernel gives pages only as they are
 * touched.  0, or the bytes of the allocation that failed (r unchanged). */
size_t plan_block_take(Plan *p, PlanRank *r, int64_t n, int lines);
#define PLAN_TAKE_MIN ((size_t)256 << 10)
#define PLAN_TAKE_BLOCK ((size_t)64 << 20)
/* r's ops and lines freed (unless they are in a block or borrowed): r holds none. */
void plan_rank_drop_ops(PlanRank *r);
/* A block for many arrays of per-op data, written soon after (zeroed when `zero`): at
 * least PLAN_HUGE_MIN bytes of it start on a 2 MiB boundary, so that a kernel giving
 * transparent huge pages can back it with them whole, one page fault per 2 MiB instead
 * of per 4 KiB (the kernel's share of a tool holding millions of ops, most of its time
 * in faults).  The block is also offered for them (madvise MADV_HUGEPAGE, which a kernel
 * in its default `madvise` mode needs) when plan_huge_pages() says so.  *raw: what to
 * free() (NULL when out of memory, or when a block of PLAN_FIT_MIN bytes or more is
 * more than the machine has, plan_sysmem_limit: overcommit would grant it, and the OOM
 * killer end the tool as it is written). */
void *plan_block_new(size_t bytes, int zero, void **raw);
#define PLAN_HUGE_MIN ((size_t)2 << 20)
/* From this size on plan_block_new reads the machine's limit for a block. */
#define PLAN_FIT_MIN ((size_t)64 << 20)
/* A thread filling fresh memory front to back (a reader's op lists, the simulator's
 * per-op times) calls plan_populate(p, end) before it writes each element *p of an
 * array ending at end: where *p reaches into a new PLAN_POPULATE_STEP of the address
 * space, that step is paged in at once, by one system call (madvise
 * MADV_POPULATE_WRITE) instead of a page fault per 4 KiB, just before this thread
 * writes it, so its pages are still in this core's cache.  Changes no byte; nothing at
 * or past end is touched.  Worth it for one array written at a time (a reader decodes
 * rank after rank) or a few hundred side by side (the simulator's records); not for the
 * lowering's 256 lists side by side, whose steps paged in ahead leave the cache before
 * they are written. */
#define PLAN_POPULATE_STEP ((uintptr_t)64 << 10)
void plan_populate_step(uintptr_t step, uintptr_t end);
#define plan_populate(p, end) plan_populate_at((uintptr_t)(p), sizeof *(p), (uintptr_t)(end))
static inline void plan_populate_at(uintptr_t a, size_t size, uintptr_t end)
{
	if (((a - 1) ^ (a + size - 1)) >= PLAN_POPULATE_STEP)
		plan_populate_step((a + size - 1) & ~(PLAN_POPULATE_STEP - 1), end);
}

#endif
