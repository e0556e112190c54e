/* Ordered output from worker threads (par.h): a writer cuts its plan into pieces, the
 * workers format pieces into memory, and the calling thread writes them out in order,
 * so the bytes, their checksum and any write error are exactly the one-thread writer's
 * (docs/architecture.md, "Threads").  Also the one way every plan writer, on any number
 * of threads, hands its bytes to the stream (plan_fwrite). */
#ifndef PLAN_PAR_OUT_H
#define PLAN_PAR_OUT_H

#include "plan.h"
#include "io.h"

#include <stdint.h>
#include <stdio.h>

/* Where a piece starts: op `op` of rank `rank` (op 0: the rank's own lines too). */
typedef struct {
	int32_t rank;
	int64_t op;
} PlanPos;

/* Cuts p's ranks into pieces of about `ops` ops each (a rank's own lines count one and
 * one per peer), inside a rank when `split`, else only between ranks.  Returns the
 * starts, *n pieces, cut[*n] = {world, 0} closing the last; NULL when out of memory. */
PlanPos *par_cut(const Plan *p, int64_t ops, int split, int64_t *n);

/* Formats piece i on worker w into slot, the writer's own output buffer (uninitialized
 * the first time, else as the slot's last piece left it), and what does not fit in it
 * into spill; 0 when it did. */
typedef int (*ParPieceFn)(void *arg, int64_t i, int w, void *slot, FILE *spill);

/* Writes piece i on the calling thread: the n bytes spilled, then what slot holds; or,
 * when slot is NULL (its worker could not format it), formats it there itself. */
typedef void (*ParEmitFn)(void *arg, int64_t i, void *slot, const char *spill, size_t n);

/* Pieces [0, n) on par_workers(n) workers, `batch` pieces a worker at a time, each in a
 * slot of slot_size bytes: emit sees every piece once, in increasing order, on the
 * calling thread, which writes one batch while the workers format the next (so two
 * batches of slots are held).  Out of memory anywhere, the pieces concerned go to emit
 * as NULL. */
void par_ordered(int64_t n, int batch, size_t slot_size, ParPieceFn piece, ParEmitFn emit,
                 void *arg);

/* A writer's pass over p on worker threads: p cut into pieces of at most max_ops ops
 * (fewer in a small plan, so that every worker gets several; inside a rank when
 * `split`), *cut set to the starts while par_ordered runs the pieces (the callbacks read
 * it through arg), then freed and cleared.  1 when the pass ran; 0 when it did not start
 * (no ops, too few pieces to share, out of memory): the writer then writes on its own. */
int par_write(const Plan *p, int64_t max_ops, int split, PlanPos **cut, int batch,
              size_t slot_size, ParPieceFn piece, ParEmitFn emit, void *arg);

/* fwrite(s, 1, n, f) in pieces of at most plan_write_piece() bytes: 0, or -1 when one
 * fell short.  Every writer of a plan's bulk writes through it.  The tools' output
 * files have a stream buffer of PLAN_WRITE_PIECE bytes (cli_out_open), so that each
 * piece reaches the file as one aligned write(). */
int plan_fwrite(const void *s, size_t n, FILE *f);
/* PLAN_WRITE_PIECE where a balloon reports free memory to the host
 * (plan_thp_machine()->reported), else no limit.  A write() of a megabyte makes the page
 * cache hold it in large folios (ext4 on Linux 6.18, ours), which come from memory such a
 * balloon reported free, and a host that took that memory back must back it again as
 * the copy first touches it; folios of 32 KiB or less come from memory still backed.
 * On the 2-core VM we measure on, 501 MiB after 3 s idle took 0.43-1.51 s of system
 * time in 1 MiB writes and 0.20-0.34 s in 32 KiB ones (64 KiB ones 0.19-0.53 s); back
 * to back 0.18-0.20 s either way (docs/performance.md, "pipecc"). */
size_t plan_write_piece(void);
#define PLAN_WRITE_PIECE ((size_t)32 << 10)

#endif
