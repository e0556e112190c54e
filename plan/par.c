/* Worker threads for the per-rank passes (par.h): one shared counter hands out items. */
#include "par.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

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

void par_threads_auto(void)
{
	if (plan_threads != 0)
		return;
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	plan_threads = n < 1 ? 1 : n > PAR_MAX_THREADS ? PAR_MAX_THREADS : (int)n;
}

static int held; // threads busy with tasks of their own (par_hold)

void par_hold(int n)
{
	held += n;
}

int par_workers(int64_t n)
{
	int t = plan_threads - held;
	t = t < 1 ? 1 : t > PAR_MAX_THREADS ? PAR_MAX_THREADS : t;
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

/* par_free's slices: PAR_FREE_SLICE bytes of a block each, page-aligned within it. */
#define PAR_FREE_SLICE ((size_t)16 << 20)

typedef struct {
	char *const *lo; // [n]: each block's first whole page
	const size_t *len;
	const int64_t *first; // [n + 1]: each block's first slice
	int n;
} Slices;

static int give_back(void *arg, int64_t i, int w)
{
	(void)w;
	const Slices *s = arg;
	int b = 0;
	while (s->first[b + 1] <= i)
		b++;
	size_t off = (size_t)(i - s->first[b]) * PAR_FREE_SLICE;
	size_t len = s->len[b] - off < PAR_FREE_SLICE ? s->len[b] - off : PAR_FREE_SLICE;
	(void)madvise(s->lo[b] + off, len, MADV_DONTNEED); // a failure leaves it to free()
	return 0;
}

void par_free(void *const *raw, int n)
{
	enum { MAX = 64 };
	char *lo[MAX];
	size_t len[MAX];
	int64_t first[MAX + 1] = {0};
	long page = sysconf(_SC_PAGESIZE);
	int k = 0;
	for (int i = 0; i < n && k < MAX && plan_threads > 1 && page > 0; i++) { // the rest: free()
		size_t u = raw[i] ? malloc_usable_size(raw[i]) : 0;
		uintptr_t a = ((uintptr_t)raw[i] + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
		uintptr_t e = ((uintptr_t)raw[i] + u) & ~((uintptr_t)page - 1);
		if (u < PAR_FREE_SLICE || e <= a)
			continue; // small: free() alone
		lo[k] = (char *)a;
		len[k] = e - a;
		first[k + 1] = first[k] + (int64_t)((len[k] + PAR_FREE_SLICE - 1) / PAR_FREE_SLICE);
		k++;
	}
	if (k && first[k] > 1)
		par_for(first[k], give_back, &(Slices){lo, len, first, k});
	for (int i = 0; i < n; i++)
		free(raw[i]);
}

struct ParTask {
	pthread_t th;
	void (*fn)(void *);
	void *arg;
	atomic_int *stop;   // set by par_join, for an fn that can stop early; or NULL
	void (*done)(void *arg); // par_join's last step (frees arg), fn run or not; or NULL
	int deferred;       // no thread of its own: par_help runs it, or par_join drops it
	int state;          // deferred: TASK_WAITING, TASK_RUNNING or TASK_DONE, under lock
	ParTask *next;      // deferred and waiting: the list par_help takes from
};

enum { TASK_WAITING, TASK_RUNNING, TASK_DONE };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static ParTask *waiting; // deferred tasks no thread has taken yet

static atomic_int tasks; // par_spawn's tasks whose fn has not returned

static void *task_main(void *a)
{
	ParTask *t = a;
	t->fn(t->arg);
	atomic_fetch_sub(&tasks, 1);
	return NULL;
}

static ParTask *spawn(void (*fn)(void *arg), void *arg, atomic_int *stop,
                      void (*done)(void *arg))
{
	if (plan_threads < 2)
		return NULL;
	ParTask *t = malloc(sizeof *t);
	if (!t)
		return NULL;
	*t = (ParTask){.fn = fn, .arg = arg, .stop = stop, .done = done};
	atomic_fetch_add(&tasks, 1);
	if (pthread_create(&t->th, NULL, task_main, t)) {
		atomic_fetch_sub(&tasks, 1);
		free(t);
		return NULL;
	}
	return t;
}

ParTask *par_spawn(void (*fn)(void *arg), void *arg)
{
	return spawn(fn, arg, NULL, NULL);
}

void par_join(ParTask *t)
{
	if (!t)
		return;
	if (t->stop)
		atomic_store(t->stop, 1);
	if (!t->deferred) {
		pthread_join(t->th, NULL);
	} else {
		pthread_mutex_lock(&lock);
		if (t->state == TASK_WAITING) { // never taken: unlink it, fn is not run
			ParTask **l = &waiting;
			while (*l != t)
				l = &(*l)->next;
			*l = t->next;
			t->state = TASK_DONE;
		}
		while (t->state != TASK_DONE)
			pthread_cond_wait(&done_cond, &lock);
		pthread_mutex_unlock(&lock);
	}
	if (t->done)
		t->done(t->arg);
	free(t);
}

void par_help(void)
{
	for (;;) {
		pthread_mutex_lock(&lock);
		ParTask *t = waiting;
		if (t) {
			waiting = t->next;
			t->state = TASK_RUNNING;
		}
		pthread_mutex_unlock(&lock);
		if (!t)
			return;
		t->fn(t->arg);
		pthread_mutex_lock(&lock);
		t->state = TASK_DONE;
		pthread_cond_broadcast(&done_cond);
		pthread_mutex_unlock(&lock);
	}
}

#ifdef MADV_POPULATE_WRITE
/* fn(arg) kept for par_help: a task that takes no thread of its own, dropped by
 * par_join when no thread has taken it. */
static ParTask *defer(void (*fn)(void *arg), void *arg, atomic_int *stop,
                      void (*done)(void *arg))
{
	ParTask *t = malloc(sizeof *t);
	if (!t)
		return NULL;
	*t = (ParTask){.fn = fn, .arg = arg, .stop = stop, .done = done, .deferred = 1,
	               .state = TASK_WAITING};
	pthread_mutex_lock(&lock);
	t->next = waiting;
	waiting = t;
	pthread_mutex_unlock(&lock);
	return t;
}

/* par_prefault's work: the arrays' page-aligned insides, PREFAULT_SLICE bytes of each
 * in turn, so that the front of paged-in memory moves along every array as the writer
 * does. */
#define PREFAULT_SLICE ((uintptr_t)256 << 10)

typedef struct {
	int n;
	uintptr_t *lo, *hi; // [n]: each array's first and past-last whole page
	atomic_int stop;    // the writer is done (par_join): the rest is not worth paging in
} Prefault;

static void prefault_free(void *a)
{
	Prefault *pf = a;
	free(pf->lo);
	free(pf);
}

static void prefault_run(void *a)
{
	Prefault *pf = a;
	for (uintptr_t off = 0, more = 1; more; off += PREFAULT_SLICE) {
		more = 0;
		if (atomic_load_explicit(&pf->stop, memory_order_relaxed))
			break;
		for (int i = 0; i < pf->n; i++) {
			uintptr_t s = pf->lo[i] + off, e = s + PREFAULT_SLICE;
			if (s >= pf->hi[i])
				continue;
			more = 1;
			if (madvise((void *)s, (e < pf->hi[i] ? e : pf->hi[i]) - s, MADV_POPULATE_WRITE))
				return; // the kernel cannot (EINVAL before Linux 5.14): leave it to faults
		}
	}
}

ParTask *par_prefault(void *const *arr, const size_t *bytes, int n)
{
	long page = sysconf(_SC_PAGESIZE);
	Prefault *pf = plan_threads > 1 && page > 0 ? malloc(sizeof *pf) : NULL;
	uintptr_t *lh = pf ? malloc(2 * ((size_t)n + 1) * sizeof *lh) : NULL;
	if (!lh) {
		free(pf);
		return NULL;
	}
	*pf = (Prefault){.n = n, .lo = lh, .hi = lh + n};
	atomic_init(&pf->stop, 0);
	for (int i = 0; i < n; i++) {
		uintptr_t p = (uintptr_t)arr[i], m = (uintptr_t)page - 1;
		pf->lo[i] = (p + m) & ~m;
		pf->hi[i] = (p + bytes[i]) & ~m;
		if (pf->hi[i] < pf->lo[i])
			pf->hi[i] = pf->lo[i];
	}
	/* The caller's thread and every running task hold a thread each: a task of its own
	 * only with one left over; else the work waits for a thread done with its own
	 * (par_help: pipesim's verifier, beside the simulation that writes the arrays). */
	ParTask *t = plan_threads > 1 + atomic_load(&tasks)
	                     ? spawn(prefault_run, pf, &pf->stop, prefault_free)
	                     : defer(prefault_run, pf, &pf->stop, prefault_free);
	if (!t)
		prefault_free(pf);
	return t;
}
#else
ParTask *par_prefault(void *const *arr, const size_t *bytes, int n)
{
	(void)arr, (void)bytes, (void)n;
	return NULL;
}
#endif
