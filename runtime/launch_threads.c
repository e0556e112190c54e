/* The threads launcher: every rank of the world in this process, a thread each.  The
 * process-level collectives are trivial (one process holds every block).
 *
 * Started by mpirun or srun with several processes, this launcher would run the whole
 * world once per process, each copy unaware of the others.  So it refuses: the run
 * fails (exit 1) with a message that names the launcher's process count, printed by the
 * launcher's rank 0 only.  Without --backend piperun picks the mpi launcher there
 * itself (rt_backend_default); docs/runtime.md. */
#include "rt_private.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static int th_open(RtWorld *w)
{
	rt_world_set_ranks(w, 0, w->plan->world, 1);
	int n = rt_launch_env_nprocs(rt_real_getenv);
	if (n <= 1)
		return RT_OK;
	/* Only the launcher's first process speaks: every copy would say the same. */
	w->quiet = rt_launch_env_rank(rt_real_getenv) > 0;
	return rt_world_unable(
		w,
		"piperun was started by a launcher (mpirun, srun) as %d processes, but the %s "
		"backend runs every rank of the plan in one process, so each would run the whole "
		"world; use --backend mpi (a process per rank), or run piperun without the launcher",
		n, w->be->name);
}

static void th_close(RtWorld *w)
{
	(void)w;
}

/* One thread per local rank, each running fn; returns when all have returned. */
typedef struct {
	RtRank *r;
	int (*fn)(RtRank *);
} Start;

static void *thread_main(void *arg)
{
	Start *s = arg;
	s->r->status = s->fn(s->r);
	return NULL;
}

static int th_launch(RtWorld *w, int (*fn)(RtRank *))
{
	int n = w->nlocal;
	pthread_t *th = calloc((size_t)n, sizeof *th);
	Start *st = calloc((size_t)n, sizeof *st);
	if (!th || !st) {
		free(th);
		free(st);
		return rt_world_error(w, "out of memory");
	}
	int started = 0, rc = RT_OK;
	for (int i = 0; i < n; i++) {
		st[i] = (Start){&w->ranks[i], fn};
		if (pthread_create(&th[i], NULL, thread_main, &st[i])) {
			rc = rt_world_error(w, "cannot start a thread for rank %d", i);
			rt_abort(w);
			break;
		}
		started++;
	}
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	free(st);
	return rc;
}

static int th_gather(RtWorld *w, const void *mine, int64_t n, void *all)
{
	memcpy(all, mine, (size_t)(n * w->nlocal));
	return RT_OK;
}

static int th_bcast(RtWorld *w, void *buf, int64_t n)
{
	(void)w;
	(void)buf;
	(void)n;
	return RT_OK;
}

const RtLauncher rt_launcher_threads = {
	.name = "threads",
	.open = th_open,
	.launch = th_launch,
	.gather = th_gather,
	.bcast = th_bcast,
	.abort = NULL,
	.close = th_close,
};
