/* --check: whether the pipelined run computed what a plain sequential run computes.
 *
 * Every rank keeps its stages' final weights on the host (rt_check_keep, after its last
 * step); the root gathers them, runs the sequential reference (reference.c) and compares
 * every step's loss and every rank's weights with the reference's (a tp rank's with its
 * slice of the whole model's), as docs/runtime.md "--check and its bound" defines the
 * errors.  Each error is held to a bound: one given (--tolerance, or bf16's), or derived
 * from the run itself, RT_CHECK_NOISE_FACTOR times the distance of the shadow reference
 * (every weight moved one ulp before each step) from the reference, plus RT_CHECK_FLOOR.
 * The shadow runs only when an error exceeds the floor. */
#include "rt_private.h"
#include "../plan/line.h"

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

/* Max |a - b|, and ||a - b|| / ||b|| in the 2-norm: the normwise relative error
 * (docs/runtime.md), in which weights near zero do not inflate it, and a few weights
 * that differ count little beside many. */
static void compare(const float *a, const float *b, int64_t n, double *abs_err, double *rel_err)
{
	double d = 0, dd = 0, bb = 0;
	for (int64_t i = 0; i < n; i++) {
		double x = same_nonfinite(a[i], b[i]) ? 0 : fabs((double)a[i] - (double)b[i]);
		if (isnan(x))
			x = INFINITY;
		d = fmax(d, x);
		dd += x * x;
		if (isfinite(b[i]))
			bb += (double)b[i] * (double)b[i];
	}
	*abs_err = d;
	*rel_err = dd == 0 ? 0 : sqrt(dd) / fmax(sqrt(bb), 1e-30);
}

/* The largest errors of the step losses against want's, into *abs_err and *rel_err. */
static void loss_errors(const double *loss, const double *want, int steps, double *abs_err,
                        double *rel_err)
{
	*abs_err = *rel_err = 0;
	for (int s = 0; s < steps; s++) {
		double d = same_nonfinite(loss[s], want[s]) ? 0 : fabs(loss[s] - want[s]);
		double rel = d == 0 ? 0 : d / fmax(fabs(want[s]), 1e-30);
		if (isnan(d))
			d = rel = INFINITY;
		*abs_err = fmax(*abs_err, d);
		*rel_err = fmax(*rel_err, rel);
	}
}

/* One sequential run (reference.c): its step losses and the whole model's final
 * weights, per stage. */
typedef struct {
	double *loss;
	float **w;
} Seq;

static void seq_free(const Plan *p, Seq *q)
{
	for (int s = 0; q->w && s < p->nstages; s++)
		free(q->w[s]);
	free(q->w);
	free(q->loss);
	memset(q, 0, sizeof *q);
}

static int seq_run(RtWorld *w, int shadow, Seq *q)
{
	q->loss = calloc((size_t)w->opt.steps, sizeof *q->loss);
	q->w = calloc((size_t)w->plan->nstages, sizeof *q->w);
	if (!q->loss || !q->w)
		return rt_world_error(w, "out of memory");
	return rt_reference(w, shadow, q->loss, q->w);
}

/* The shadow's distance from the reference: the larger of its two errors, measured as
 * the run's are (the step losses; the weights over the slices the ranks hold, each
 * stage's tp pieces, which every dp replica holds alike).  pa, pb: room for a piece. */
static int shadow_noise(RtWorld *w, const Seq *ref, RtResult *res, float *pa, float *pb)
{
	const Plan *p = w->plan;
	Seq sh = {0};
	int rc = seq_run(w, 1, &sh);
	if (rc == RT_OK) {
		double a, b;
		loss_errors(sh.loss, ref->loss, w->opt.steps, &a, &res->noise);
		for (int s = 0; s < p->nstages; s++)
			for (int t = 0; t < p->dims[DIM_TP]; t++) {
				const float *x = sh.w[s], *y = ref->w[s];
				if (w->model != w->whole) {
					rt_model_shard(w->model, s, t, sh.w[s], pa);
					rt_model_shard(w->model, s, t, ref->w[s], pb);
					x = pa;
					y = pb;
				}
				compare(x, y, w->model->st[s].nparams, &a, &b);
				res->noise = fmax(res->noise, b);
			}
		res->shadow = 1;
	}
	seq_free(p, &sh);
	return rc;
}

const char *const rt_bound_names[RT_BOUND_COUNT] = {"noise", "tolerance", "bf16"};

int rt_check_bound(const RtOptions *o)
{
	return o->tolerance > 0              ? RT_BOUND_GIVEN
	       : o->dtype == RT_DTYPE_BF16 ? RT_BOUND_BF16
	                                     : RT_BOUND_NOISE;
}

/* The bound both errors are held to (docs/runtime.md "--check and its bound"), then the
 * verdict.  A derived bound needs the shadow only when an error exceeds the floor, since
 * the bound is never below it.  One noise serves both errors: a step's loss is computed
 * from the weights, and the shadow's loss error alone is one draw, too variable to bound
 * it.  A shadow whose distance is not finite (the training diverged at the rounding
 * level) bounds nothing: the floor stays. */
static int judge(RtWorld *w, const Seq *ref, RtResult *res, float *pa, float *pb)
{
	const RtOptions *o = &w->opt;
	res->bound = rt_check_bound(o);
	res->tolerance = res->bound == RT_BOUND_GIVEN  ? o->tolerance
	                 : res->bound == RT_BOUND_BF16 ? RT_CHECK_TOL_BF16
	                                               : RT_CHECK_FLOOR;
	if (res->bound == RT_BOUND_NOISE &&
	    (res->loss_rel > res->tolerance || res->weight_rel > res->tolerance)) {
		if (shadow_noise(w, ref, res, pa, pb))
			return RT_EFAIL;
		if (isfinite(res->noise))
			res->tolerance = RT_CHECK_NOISE_FACTOR * res->noise + RT_CHECK_FLOOR;
	}
	res->check_ok = res->loss_rel <= res->tolerance && res->weight_rel <= res->tolerance;
	return RT_OK;
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
	Seq ref = {0};
	rc = seq_run(w, 0, &ref);
	/* Room for a rank's slice of the whole model, and one more for the shadow's. */
	float *piece = NULL, *piece2 = NULL;
	if (rc == RT_OK && w->model != w->whole &&
	    (!(piece = malloc((size_t)maxp * sizeof(float))) ||
	     !(piece2 = malloc((size_t)maxp * sizeof(float)))))
		rc = rt_world_error(w, "out of memory");
	if (rc == RT_OK) {
		res->checked = 1;
		loss_errors(res->loss, ref.loss, w->opt.steps, &res->loss_abs, &res->loss_rel);
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
					rt_model_shard(w->model, s, c[DIM_TP], ref.w[s], piece);
				compare(wr + off, piece ? piece : ref.w[s], k, &a, &b);
				res->weight_abs = fmax(res->weight_abs, a);
				res->weight_rel = fmax(res->weight_rel, b);
				res->nweights += k;
				off += k;
			}
		}
		rc = judge(w, &ref, res, piece, piece2);
	}
	seq_free(p, &ref);
	free(piece);
	free(piece2);
	free(all);
	return rc;
}
