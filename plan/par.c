/* Worker threads for the per-rank passes (par.h): one shared counter hands out items. */
#include "par.h"

#include <pthread.h>
#include <stdatomic.h>

int plan_threads = 1;

typedef struct {
	ParFn fn;
	void *arg;
	int64_t n;
	atomic_llong next; // the next item to hand out
	atomic_int stop;   // the first nonzero result, 0 while none
} Pass;

typedef struct {
	Pass *pass;
	int w;
} Worker;

static void work(Pass *ps, int w)
{
	while (!atomic_load_explicit(&ps->stop, memory_order_relaxed)) {
		int64_t i = atomic_fetch_add_explicit(&ps->next, 1, memory_order_relaxed);
		if (i >= ps->n)
			return;
		int rc = ps->fn(ps->arg, i, w);
		if (rc) {
			int none = 0;
			atomic_compare_exchange_strong(&ps->stop, &none, rc);
			return;
		}
	}
}

static void *thread_main(void *a)
{
	Worker *wk = a;
	work(wk->pass, wk->w);
	return NULL;
}

int par_workers(int64_t n)
{
	int t = plan_threads < 1 ? 1 : plan_threads > PAR_MAX_THREADS ? PAR_MAX_THREADS : plan_threads;
	return n < t ? (n < 1 ? 1 : (int)n) : t;
}

int par_for(int64_t n, ParFn fn, void *arg)
{
	Pass ps = {.fn = fn, .arg = arg, .n = n};
	atomic_init(&ps.next, 0);
	atomic_init(&ps.stop, 0);
	int nw = par_workers(n), started = 0;
	pthread_t th[PAR_MAX_THREADS];
	Worker wk[PAR_MAX_THREADS];
	for (int w = 1; w < nw; w++) {
		wk[started] = (Worker){&ps, started + 1};
		if (pthread_create(&th[started], NULL, thread_main, &wk[started]))
			break; // fewer workers: the others take its share
		started++;
	}
	work(&ps, 0);
	for (int k = 0; k < started; k++)
		pthread_join(th[k], NULL);
	return atomic_load(&ps.stop);
}
