/* Services every part of the runtime uses: errors (the first message wins), the abort
 * flag, the clock, and accessors to the world and the rank.  A leaf: it calls nothing
 * of the runtime but the parts' abort and collectives through the world's tables, so
 * the interpreter, the model and the watchdog depend on it and on nothing above them.
 *
 * The accessors exist for the CUDA parts, which are C++ and see RtWorld and RtRank as
 * incomplete types (their atomics are C11's); C parts may use the fields directly. */
#include "rt_private.h"
#include "../plan/line.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int vnote(char *buf, size_t n, const char *fmt, va_list ap)
{
	if (!buf[0])
		vsnprintf(buf, n, fmt, ap);
	return RT_EFAIL;
}

int rt_error(RtRank *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vnote(r->err, sizeof r->err, fmt, ap);
	va_end(ap);
	return RT_EFAIL;
}

int rt_world_error(RtWorld *w, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vnote(w->err, sizeof w->err, fmt, ap);
	va_end(ap);
	return RT_EFAIL;
}

int rt_world_unable(RtWorld *w, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vnote(w->unable, sizeof w->unable, fmt, ap);
	va_end(ap);
	return RT_OK;
}

int rt_aborted(const RtWorld *w)
{
	return atomic_load_explicit(&w->abort, memory_order_relaxed);
}

void rt_abort(RtWorld *w)
{
	atomic_store(&w->abort, 1);
	if (w->comm && w->comm->abort && w->state[RT_PART_COMM])
		w->comm->abort(w);
}

int64_t rt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

const Plan *rt_world_plan(const RtWorld *w)
{
	return w->plan;
}

const RtOptions *rt_world_options(const RtWorld *w)
{
	return &w->opt;
}

const char *rt_world_host(const RtWorld *w)
{
	return w->host;
}

const char *rt_world_unable_reason(const RtWorld *w)
{
	return w->unable;
}

void **rt_world_state(RtWorld *w, RtPart part)
{
	return &w->state[part];
}

int rt_world_first_local(const RtWorld *w)
{
	return w->first_local;
}

int rt_world_nlocal(const RtWorld *w)
{
	return w->nlocal;
}

void rt_world_set_ranks(RtWorld *w, int first, int n, int root)
{
	w->first_local = first;
	w->nlocal = n;
	w->root = root;
}

RtRank *rt_world_rank(RtWorld *w, int local)
{
	return &w->ranks[local];
}

int rt_world_gather(RtWorld *w, const void *mine, int64_t n, void *all)
{
	return w->launcher->gather(w, mine, n, all);
}

int rt_world_bcast(RtWorld *w, void *buf, int64_t n)
{
	return w->launcher->bcast(w, buf, n);
}

int rt_world_hosts(RtWorld *w, char **hosts)
{
	*hosts = NULL;
	if (w->nlocal == w->plan->world)
		return RT_OK;
	char *all = calloc((size_t)w->plan->world, RT_HOST_BYTES);
	if (!all)
		return rt_world_error(w, "out of memory");
	char me[RT_HOST_BYTES] = {0};
	snprintf(me, sizeof me, "%s", w->host);
	int rc = rt_world_gather(w, me, RT_HOST_BYTES, w->root ? all : NULL);
	if (rc == RT_OK)
		rc = rt_world_bcast(w, all, (int64_t)w->plan->world * RT_HOST_BYTES);
	if (rc) {
		free(all);
		return rc;
	}
	*hosts = all;
	return RT_OK;
}

RtWorld *rt_rank_world(const RtRank *r)
{
	return r->w;
}

int rt_rank_id(const RtRank *r)
{
	return r->rank;
}

int rt_rank_local(const RtRank *r)
{
	return r->local;
}

const int *rt_rank_coord(const RtRank *r)
{
	return r->coord;
}

void **rt_rank_state(RtRank *r, RtPart part)
{
	return &r->state[part];
}

void rt_rank_set_status(RtRank *r, int status)
{
	r->status = status;
}

void rt_rank_blame(RtRank *r, int64_t op, int64_t op_end)
{
	atomic_store(&r->cur_end, op_end);
	atomic_store(&r->cur_op, op);
}

const char *rt_rank_error(const RtRank *r)
{
	return r->err;
}

const char *rt_world_backend(const RtWorld *w)
{
	return w->be->name;
}

int rt_world_root(const RtWorld *w)
{
	return w->root;
}

int64_t rt_world_progress(const RtWorld *w)
{
	return (int64_t)atomic_load(&((RtWorld *)w)->progress);
}

int rt_world_step_live(const RtWorld *w, int step, double *loss, int64_t *ns)
{
	double sum = 0;
	int nloss = 0;
	int64_t t0 = 0, t1 = 0;
	for (int i = 0; i < w->nlocal; i++) {
		RtRank *r = &w->ranks[i];
		if (atomic_load_explicit(&r->steps_done, memory_order_acquire) <= step)
			return -1;
		if (i == 0 || r->step_t0[step] < t0)
			t0 = r->step_t0[step];
		if (i == 0 || r->step_t1[step] > t1)
			t1 = r->step_t1[step];
		if (r->loss_rank) {
			sum += r->loss_sum[step];
			nloss++;
		}
	}
	*loss = nloss ? sum / ((double)nloss * w->plan->microbatches) : NAN;
	*ns = t1 - t0;
	return 0;
}

int64_t rt_world_local_ops(const RtWorld *w)
{
	int64_t n = 0;
	for (int r = w->first_local; r < w->first_local + w->nlocal; r++)
		n += plan_rank(w->plan, r, NULL)->nops; // local ranks have entries
	return n;
}

static int wrong_shape(RtRank *r, const RtLayerCall *c, const RtTensor *t, int64_t rows,
                       int64_t cols)
{
	return rt_error(r, "internal: %s layer given a %lldx%lld tensor where it takes %lldx%lld",
	                plan_layers[c->layer->kind].name, (long long)t->rows, (long long)t->cols,
	                (long long)rows, (long long)cols);
}

/* Tensors of one list (parameters, saved, held) against the kind's row. */
static int check_list(RtRank *r, const RtLayerCall *c, const RtTensor *t, RtTensor *const *tp,
                      int n, const LayerTensor *sh, int want)
{
	if (n != want)
		return rt_error(r, "internal: %s layer given %d tensors where it keeps %d",
		                plan_layers[c->layer->kind].name, n, want);
	for (int i = 0; i < n; i++) {
		const RtTensor *x = t ? &t[i] : tp[i];
		if (x && (x->rows != sh[i].rows || x->cols != sh[i].cols))
			return wrong_shape(r, c, x, sh[i].rows, sh[i].cols);
	}
	return RT_OK;
}

int rt_layer_call_check(RtRank *r, const RtLayerCall *c)
{
	const PlanLayer *ly = c->layer;
	LayerTensors k;
	plan_layer_tensors(ly, &c->sh, c->tp, &k);
	int64_t tcols = plan_layers[ly->kind].tokens ? 1 : k.in;
	/* A loss split over the vocabulary writes its 3 x rows statistics into y. */
	int stats = c->tp > 1 && plan_layers[ly->kind].loss && c->y;
	const RtTensor *t[] = {c->x, c->y, c->dy, c->dx, c->target};
	const int64_t cols[] = {k.in, stats ? c->rows : k.out, k.out, k.in, tcols};
	for (int i = 0; i < 5; i++) {
		int64_t rows = i == 1 && stats ? 3 : c->rows;
		if (t[i] && (t[i]->rows != rows || t[i]->cols != cols[i]))
			return wrong_shape(r, c, t[i], rows, cols[i]);
	}
	int64_t want = plan_layer_rows(ly, &c->sh, c->tp);
	if (c->rows != want)
		return rt_error(r, "internal: %s layer called on %lld rows where it runs on %lld",
		                plan_layers[ly->kind].name, (long long)c->rows, (long long)want);
	if (check_list(r, c, c->param, NULL, c->nparams, k.param, k.nparams) ||
	    (c->grad && check_list(r, c, c->grad, NULL, c->nparams, k.param, k.nparams)) ||
	    check_list(r, c, NULL, c->saved, c->nsaved, k.saved, k.nsaved) ||
	    check_list(r, c, NULL, c->held, c->nheld, k.held, k.nheld))
		return RT_EFAIL;
	if (c->work && (c->work->rows != k.work.rows || c->work->cols != k.work.cols))
		return wrong_shape(r, c, c->work, k.work.rows, k.work.cols);
	return RT_OK;
}
