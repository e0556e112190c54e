/* Software prefetch for passes over the plan's long arrays, its op lists above all. */
#ifndef PLAN_PREFETCH_H
#define PLAN_PREFETCH_H

/* A pass reading array a[0, n) at element i fetches element i + PLAN_AHEAD now (for
 * ops, 12 cache lines on).  The hardware prefetcher follows few streams and follows them
 * late, so a pass that reads many ranks' lists side by side (the simulator's group
 * posting, the verifier's walk over senders' lists beside the rank's own) would wait on
 * a load an op without it (docs/performance.md, "How the tools are fast").  A pass
 * that reads one list at a time (the memory model, the writers) fetches twice as far
 * ahead, plan_prefetch_one; that distance costs a pass over many lists side by side.
 * Macros: GCC drops the calls of the same as a static inline function, which it takes
 * for one without effects. */
#define PLAN_AHEAD 32
#define PLAN_AHEAD_ONE 64
#define plan_prefetch(a, i, n) plan_prefetch_at(a, i, n, PLAN_AHEAD)
#define plan_prefetch_one(a, i, n) plan_prefetch_at(a, i, n, PLAN_AHEAD_ONE)
#define plan_prefetch_at(a, i, n, ahead)                \
	do {                                                \
		if ((i) + (ahead) < (n))                        \
			__builtin_prefetch(&(a)[(i) + (ahead)]); \
	} while (0)

#endif
