/* --check: whether the pipelined run computed what a plain sequential run computes.
 *
 * Every rank keeps its stages' final weights on the host (rt_check_keep, after its last
 * step); the root gathers them, runs the sequential reference (reference.c) and compares
 * every step's loss and every rank's weights with the reference's (a tp rank's with its
 * slice of the whole model's), as docs/runtime.md "--check and its tolerance" defines
 * the errors. */
#include "rt_private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Parameters a rank holds: the stages on its pipeline index, in stage order. */
static int64_t rank_params(const RtWorld *w, int rank)
{
	const Plan *p = w->plan;
	int64_t n = 0;
	int c[DIM_COUNT];
	plan_mesh_coords(p, rank, c);
	for (int s = 0; s < p->nstages; s++)
		if (p->stages[s].pp == c[DIM_PP])
			n += w->model->st[s].nparams;
	return n;
}

int rt_check_keep(RtRank *r)
{
	RtWorld *w = r->w;
	const Plan *p = w->plan;
	r->weights = malloc((size_t)(rank_params(w, r->rank) + 1) * sizeof(float));
	if (!r->weights)
		return rt_error(r, "out of memory");
	int64_t off = 0;
	for (int s = 0; s < p->nstages; s++) {
		if (p->stages[s].pp != r->coord[DIM_PP])
			continue;
		if (rt_rank_weights(r, s, r->weights + off))
			return RT_EFAIL;
		off += w->model->st[s].nparams;
	}
	return r->dev->sync(r);
}

/* The root's buffer for rt_world_gather: world blocks of n bytes (NULL elsewhere). */
static int gather(RtWorld *w, const void *mine, int64_t n, void **all)
{
	*all = NULL;
	if (w->root && !(*all = calloc((size_t)w->plan->world, (size_t)(n ? n : 1))))
		return rt_world_error(w, "out of memory gathering %lld bytes per rank", (long long)n);
	return rt_world_gather(w, mine, n, w->root ? *all : NULL);
}

/* Both runs diverged alike (nan and nan, or the same infinity): no difference, since
 * piperun reports the divergence itself. */
static int same_nonfinite(double a, double b)
{
	return (isnan(a) && isnan(b)) || (isinf(a) && a == b);
}

/* Max |a - b| and that over max |b| (the normwise relative error, docs/runtime.md). */
static void compare(const float *a, const float *b, int64_t n, double *abs_err, double *rel_err)
{
	double d = 0, m = 0;
	for (int64_t i = 0; i < n; i++) {
		double x = same_nonfinite(a[i], b[i]) ? 0 : fabs((double)a[i] - (double)b[i]);
		if (x > d || isnan(x))
			d = isnan(x) ? INFINITY : x;
		if (fabs((double)b[i]) > m)
			m = fabs((double)b[i]);
	}
	*abs_err = d;
	*rel_err = d == 0 ? 0 : d / (m > 1e-30 ? m : 1e-30);
}

int rt_check(RtWorld *w, RtResult *res)
{
	const Plan *p = w->plan;
	int64_t maxp = 1;
	for (int r = 0; r < p->world; r++)
		if (rank_params(w, r) > maxp)
			maxp = rank_params(w, r);
	int64_t n = maxp * (int64_t)sizeof(float);
	char *mine = calloc((size_t)w->nlocal, (size_t)n);
	if (!mine)
		return rt_world_error(w, "out of memory");
	for (int i = 0; i < w->nlocal; i++)
		memcpy(mine + i * n, w->ranks[i].weights,
		       (size_t)rank_params(w, w->ranks[i].rank) * sizeof(float));
	void *all;
	int rc = gather(w, mine, n, &all);
	free(mine);
	if (rc || !w->root)
		return rc;
	double *loss = calloc((size_t)w->opt.steps, sizeof *loss);
	float **ref = calloc((size_t)p->nstages, sizeof *ref);
	if (!loss || !ref) {
		free(loss);
		free(ref);
		free(all);
		return rt_world_error(w, "out of memory");
	}
	rc = rt_reference(w, loss, ref);
	float *piece = NULL;
	if (rc == RT_OK && w->model != w->whole && !(piece = malloc((size_t)maxp * sizeof(float))))
		rc = rt_world_error(w, "out of memory");
	if (rc == RT_OK) {
		res->checked = 1;
		for (int s = 0; s < w->opt.steps; s++) {
			double d = same_nonfinite(res->loss[s], loss[s]) ? 0 : fabs(res->loss[s] - loss[s]);
			double rel = d == 0 ? 0 : d / fmax(fabs(loss[s]), 1e-30);
			if (isnan(d))
				d = rel = INFINITY;
			res->loss_abs = fmax(res->loss_abs, d);
			res->loss_rel = fmax(res->loss_rel, rel);
		}
		for (int r = 0; r < p->world; r++) {
			const float *wr = (const float *)((char *)all + r * n);
			int c[DIM_COUNT];
			plan_mesh_coords(p, r, c);
			int64_t off = 0;
			for (int s = 0; s < p->nstages; s++) {
				if (p->stages[s].pp != c[DIM_PP])
					continue;
				int64_t k = w->model->st[s].nparams;
				double a, b;
				if (piece) // the slice of the whole reference this rank holds
					rt_model_shard(w->model, s, c[DIM_TP], ref[s], piece);
				compare(wr + off, piece ? piece : ref[s], k, &a, &b);
				res->weight_abs = fmax(res->weight_abs, a);
				res->weight_rel = fmax(res->weight_rel, b);
				res->nweights += k;
				off += k;
			}
		}
		double tol = rt_check_tol(w->opt.dtype);
		res->check_ok = res->loss_rel <= tol && res->weight_rel <= tol;
	}
	for (int s = 0; s < p->nstages; s++)
		free(ref[s]);
	free(piece);
	free(ref);
	free(loss);
	free(all);
	return rc;
}
