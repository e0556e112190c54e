/* The watchdog: a thread that ends a run nobody is advancing.
 *
 * Every rank adds the ops it completes to the world's progress counter.  When the
 * counter has not moved for opt.timeout_s while some local rank is still running,
 * the watchdog marks the world timed out and aborts it: the communicator's abort()
 * makes every blocked wait return RT_EABORT, the interpreters unwind, and
 * rt_world_report() prints each rank's blocked ops (plan line and text).  A deadlocked
 * plan therefore ends with a report instead of hanging.
 *
 * Under MPI each process watches its own rank: in a deadlock they all stall, so each
 * fires and reports its own blocked op, and the mpi launcher ends the job.
 *
 * Before the ranks run, opening the world is collective too (MPI_Init, the
 * communicators' set-up): a process of the job that stops or hangs there would hold
 * every other one forever, and no interpreter is counting progress yet.  The start
 * guard bounds it: if opening has not finished within rt_start_limit_s(), the process
 * says so and exits 1 (the launcher then ends the job). */
#include "rt_private.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct RtWatchdog {
	RtWorld *w;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;
};

static int all_done(RtWorld *w)
{
	for (int i = 0; i < w->nlocal; i++)
		if (!atomic_load(&w->ranks[i].done))
			return 0;
	return 1;
}

static void *watch(void *arg)
{
	RtWatchdog *wd = arg;
	RtWorld *w = wd->w;
	int64_t limit = (int64_t)(w->opt.timeout_s * 1e9);
	int64_t tick = limit / 20;
	if (tick < 5000000)
		tick = 5000000;
	if (tick > 100000000)
		tick = 100000000;
	long long last = atomic_load(&w->progress);
	int64_t since = rt_now_ns();
	pthread_mutex_lock(&wd->mu);
	while (!wd->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t ns = ts.tv_nsec + tick;
		ts.tv_sec += ns / 1000000000;
		ts.tv_nsec = ns % 1000000000;
		pthread_cond_timedwait(&wd->cv, &wd->mu, &ts);
		if (wd->stop || rt_aborted(w))
			break;
		long long now = atomic_load(&w->progress);
		int64_t t = rt_now_ns();
		if (now != last) {
			last = now;
			since = t;
			continue;
		}
		if (t - since >= limit && !all_done(w)) {
			for (int i = 0; i < w->nlocal; i++) {
				RtRank *r = &w->ranks[i];
				r->wd_op = atomic_load(&r->cur_op);
				r->wd_end = atomic_load(&r->cur_end);
				r->wd_step = atomic_load(&r->cur_step);
				r->wd_done = atomic_load(&r->done);
			}
			atomic_store(&w->timed_out, 1);
			rt_abort(w);
			break;
		}
	}
	pthread_mutex_unlock(&wd->mu);
	return NULL;
}

/* Waits on wd->cv until wd->stop or until `ns` from now; 1 when stopped. */
static int wait_stop(RtWatchdog *wd, int64_t ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t end = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + ns;
	ts.tv_sec = end / 1000000000;
	ts.tv_nsec = end % 1000000000;
	pthread_mutex_lock(&wd->mu);
	while (!wd->stop && pthread_cond_timedwait(&wd->cv, &wd->mu, &ts) == 0)
		;
	int stopped = wd->stop;
	pthread_mutex_unlock(&wd->mu);
	return stopped;
}

static void *guard(void *arg)
{
	RtWatchdog *wd = arg;
	double limit = rt_start_limit_s(&wd->w->opt);
	if (wait_stop(wd, (int64_t)(limit * 1e9)))
		return NULL;
	/* The world is half open and other threads may be inside MPI: say why, and go. */
	fprintf(stderr, "piperun: error: %s: opening the job took longer than %g s (a process "
	        "of the job stopped, died or hangs while starting); exiting\n", wd->w->host,
	        limit);
	fflush(stderr);
	_exit(1);
}

double rt_start_limit_s(const RtOptions *o)
{
	double t = RT_START_FACTOR * o->timeout_s;
	return t > RT_START_MIN_S ? t : RT_START_MIN_S;
}

static RtWatchdog *start(RtWorld *w, void *(*fn)(void *))
{
	RtWatchdog *wd = calloc(1, sizeof *wd);
	if (!wd) {
		rt_world_error(w, "out of memory");
		return NULL;
	}
	wd->w = w;
	pthread_mutex_init(&wd->mu, NULL);
	pthread_cond_init(&wd->cv, NULL);
	if (pthread_create(&wd->th, NULL, fn, wd)) {
		rt_world_error(w, "cannot start the watchdog thread");
		free(wd);
		return NULL;
	}
	return wd;
}

RtWatchdog *rt_start_guard(RtWorld *w)
{
	return start(w, guard);
}

RtWatchdog *rt_watchdog_start(RtWorld *w)
{
	return start(w, watch);
}

void rt_watchdog_stop(RtWatchdog *wd)
{
	pthread_mutex_lock(&wd->mu);
	wd->stop = 1;
	pthread_cond_signal(&wd->cv);
	pthread_mutex_unlock(&wd->mu);
	pthread_join(wd->th, NULL);
	pthread_mutex_destroy(&wd->mu);
	pthread_cond_destroy(&wd->cv);
	free(wd);
}
