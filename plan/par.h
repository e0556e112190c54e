/* Opt-in worker threads.  The tools run on one thread unless `--threads N` asks for
 * more (pipecc, pipesim); then the passes over every rank that need nothing from the
 * others' results (reading a plan, text or binary; verifying; writing, par_out.h) hand
 * ranks out to N workers, and a task pages the lowering's op lists and the simulator's
 * per-op times in ahead of their writer (par_prefault).  Each such pass gives the same
 * result as on one thread: a worker that meets anything but the common case (a fault,
 * a refused line, out of memory) stops the pass, and the caller runs it again on one
 * thread, which reports exactly what it always did (docs/architecture.md, "Threads"). */
#ifndef PLAN_PAR_H
#define PLAN_PAR_H

#include <stddef.h>
#include <stdint.h>

#define PAR_MAX_THREADS 256

/* Workers the passes may use, 1 by default; the tools' `--threads` sets it. */
extern int plan_threads;

/* `--threads 0`: plan_threads becomes the count of online CPUs (at most
 * PAR_MAX_THREADS); any other value stays.  The tools call it before any work. */
void par_threads_auto(void);

/* Item i of a pass, on worker w (0 .. workers - 1, one item at a time per worker);
 * 0 to go on, anything else to stop the pass (no item is started after it). */
typedef int (*ParFn)(void *arg, int64_t i, int w);

/* The workers par_for would run n items on: min(plan_threads - held, n), at least 1,
 * where held is what par_hold added: n threads busy with a task of their own (pipesim's
 * simulation beside the verifier) until par_hold(-n).  The calling thread only. */
int par_workers(int64_t n);
void par_hold(int n);

/* Runs fn(arg, i, w) for every i in [0, n) on par_workers(n) workers, the calling
 * thread being worker 0, items handed out in increasing order as workers free up.
 * Returns 0 when every item returned 0, else the first nonzero value a worker returned
 * (other workers finish the item they hold).  When a thread cannot be started, the
 * workers that did start do the work. */
int par_for(int64_t n, ParFn fn, void *arg);

/* free()s the n malloc'd blocks raw[i] (NULL: none): with plan_threads > 1 their pages
 * are first handed back to the kernel on the workers, 16 MiB slices side by side
 * (madvise MADV_DONTNEED), which leaves free() little to do.  The kernel's unmapping of
 * a tool's millions of ops took 15-25 ms on one thread (docs/performance.md, "How
 * the tools are fast"). */
void par_free(void *const *raw, int n);

/* A task on a thread of its own, beside the caller. */
typedef struct ParTask ParTask;

/* Starts fn(arg) on a thread of its own when plan_threads > 1; NULL when it does not
 * (one thread asked for, or none could start): fn is then not run at all. */
ParTask *par_spawn(void (*fn)(void *arg), void *arg);
/* Waits for t's fn to return and frees t; NULL: nothing to wait for.  A par_prefault
 * task is asked to stop first (its writer is done), and one no thread took is dropped. */
void par_join(ParTask *t);
/* Runs, on the calling thread, the par_prefault work left for a thread done with its
 * own (where none was left over for a task); returns when none is waiting. */
void par_help(void);

/* Arrays about to be written once from start to end, side by side (a lowering's op
 * lists): a task pages them in ahead of the writer, a slice of every array at a time,
 * without changing a byte (the kernel's MADV_POPULATE_WRITE), so that on more than one
 * thread the writer meets no page faults.  Join it before any array is freed or moved.
 * The task takes a thread of its own where one is left over: plan_threads above 1 (the
 * caller's) plus the par_spawn tasks still running; else it waits for par_help, and is
 * dropped at par_join if no thread helped by then.  NULL (nothing to do) on one thread,
 * or where the kernel cannot. */
ParTask *par_prefault(void *const *arr, const size_t *bytes, int n);

#endif
