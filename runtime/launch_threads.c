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
#include <time.h>

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

/* One thread per local rank, each running fn; returns when all have returned, or, after
 * an abort, when the others have and RT_STUCK_GRACE_S more seconds have passed: a rank
 * stuck in an op that never returns (a hung kernel) is left running, detached, and
 * counted in w->nstuck, so the run still ends by the watchdog.  Its Start and the
 * shared Join stay allocated for it. */
typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int running;
} Join;

typedef struct {
	RtRank *r;
	int (*fn)(RtRank *);
	Join *j;
	int finished; // under j->mu
} Start;

static void *thread_main(void *arg)
{
	Start *s = arg;
	s->r->status = s->fn(s->r);
	pthread_mutex_lock(&s->j->mu);
	s->finished = 1;
	s->j->running--;
	pthread_cond_broadcast(&s->j->cv);
	pthread_mutex_unlock(&s->j->mu);
	return NULL;
}

/* Waits until no thread runs, or until RT_STUCK_GRACE_S after the world was seen
 * aborted; returns how many still run. */
static int wait_threads(RtWorld *w, Join *j)
{
	int64_t aborted_at = -1;
	pthread_mutex_lock(&j->mu);
	while (j->running > 0) {
		int64_t now = rt_now_ns();
		if (aborted_at < 0 && rt_aborted(w))
			aborted_at = now;
		if (aborted_at >= 0 && now - aborted_at >= (int64_t)RT_STUCK_GRACE_S * 1000000000)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100000000; // the abort flag has no condition variable: poll it
		ts.tv_sec += ts.tv_nsec / 1000000000;
		ts.tv_nsec %= 1000000000;
		pthread_cond_timedwait(&j->cv, &j->mu, &ts);
	}
	int left = j->running;
	pthread_mutex_unlock(&j->mu);
	return left;
}

static int th_launch(RtWorld *w, int (*fn)(RtRank *))
{
	int n = w->nlocal;
	pthread_t *th = calloc((size_t)n, sizeof *th);
	Start *st = calloc((size_t)n, sizeof *st);
	Join *j = calloc(1, sizeof *j);
	if (!th || !st || !j) {
		free(th);
		free(st);
		free(j);
		return rt_world_error(w, "out of memory");
	}
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	int started = 0, rc = RT_OK;
	for (int i = 0; i < n; i++) {
		st[i] = (Start){&w->ranks[i], fn, j, 0};
		pthread_mutex_lock(&j->mu);
		j->running++;
		pthread_mutex_unlock(&j->mu);
		if (pthread_create(&th[i], NULL, thread_main, &st[i])) {
			pthread_mutex_lock(&j->mu);
			j->running--;
			pthread_mutex_unlock(&j->mu);
			rc = rt_world_error(w, "cannot start a thread for rank %d", i);
			rt_abort(w);
			break;
		}
		started++;
	}
	int stuck = wait_threads(w, j);
	for (int i = 0; i < started; i++) {
		pthread_mutex_lock(&j->mu);
		int done = st[i].finished;
		pthread_mutex_unlock(&j->mu);
		if (done) {
			pthread_join(th[i], NULL);
		} else {
			pthread_detach(th[i]);
			w->ranks[i].status = RT_EABORT;
		}
	}
	free(th);
	if (stuck) { // the stuck threads still hold st and j
		w->nstuck = stuck;
		return RT_EFAIL;
	}
	pthread_mutex_destroy(&j->mu);
	pthread_cond_destroy(&j->cv);
	free(j);
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
