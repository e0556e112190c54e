/* The sequential reference for --check: the same model, one rank, no pipeline.
 *
 * Per step and dp replica it runs every microbatch through all stages in order (F),
 * back through them in reverse (B), then the weight gradients (W), then averages the
 * replicas and takes the optimizer step (the same rt_stage_optim, with the same state).  It calls the very stage code the interpreter
 * calls (stage.c) on the cpu device, and it keeps the summation orders the plan
 * implies, so a correct pipelined run agrees with it to the last bit on the threads
 * backend (cpu device, shared-memory communicator):
 *  - a stage's input (output gradient) is the sum of its in-edges' (out-edges')
 *    tensors in edge order, as the interpreter sums them;
 *  - weight gradients accumulate in the order of the W/BW ops on the replica's ranks
 *    (schedules reorder them; a tied head adds into the embedding's gradient between
 *    the embedding's own W ops);
 *  - replicas are summed in dp order, then scaled by 1/dp, as the shared-memory communicator's
 *    all-reduce does;
 *  - a head tied to an embedding on another rank computes with the embedding's table
 *    (one table here), its gradient kept apart and added to the embedding's after each
 *    replica's W ops, as the plan's TIEREDUCE sums the two copies (embedding's first);
 *    the head's copy is reported as the table, so --check proves the copies stay equal.
 * Only the MPI communicator's all-reduce (MPI's own order) leaves rounding differences,
 * as do the tp all-reduces of a tp > 1 plan (the reference runs the whole model, tp = 1,
 * whose sums the tp groups split), the cuda device's GEMMs and its math library.
 *
 * The shadow (rt_reference's `shadow`) is the same run with every weight moved one ulp,
 * up or down at random, before each step: it differs from the reference by rounding
 * alone, carried through the training as far as the training carries it, which is how
 * far a run that differs by rounding may be (check.c, docs/runtime.md "--check and its
 * bound"). */
#include "rt_private.h"
#include "../plan/tie.h"
#include "../plan/line.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	RtRank r;
	RtStageBufs *b;
	RtTensor **gacc;   // [stage] replica sum
	RtTensor ***saved; // [stage][mb * nslots]
	RtTensor **y, **dx;
	int **order;       // [d][2 k]: stage and microbatch of replica d's k-th W
	int shadow;        // move every weight one ulp before each step (nudge)
	double *eval;      // [steps] held-out losses (rt_reference_eval), or NULL
} Ref;

/* Stage and microbatch of every weight gradient of replica d (stages x microbatches
 * pairs into out), in the order of the W/BW ops of the replica's ranks, pp by pp.  A
 * plan without one W per stage and microbatch gets stage-major order. */
static void w_order(const Plan *p, int d, int *out)
{
	int S = p->nstages, M = p->microbatches, k = 0, ok = 1;
	int *seen = calloc((size_t)S * (size_t)M, sizeof *seen);
	for (int pp = 0; pp < p->dims[DIM_PP] && seen; pp++) {
		int c[DIM_COUNT] = {0};
		c[DIM_PP] = pp;
		c[DIM_DP] = d;
		PlanRank tmp;
		const PlanRank *pr = plan_rank(p, plan_rank_of(p, c), &tmp);
		for (int64_t i = 0; i < pr->nops; i++) {
			const PlanOp *o = &pr->ops[i];
			if (!(plan_ops[plan_op_kind(o)].makes & PLAN_DEP_WGRAD))
				continue;
			if (o->stage < 0 || o->stage >= S || o->mb < 0 || o->mb >= M ||
			    seen[o->stage * M + o->mb]++ || k == S * M) {
				ok = 0;
				break;
			}
			out[2 * k] = o->stage;
			out[2 * k++ + 1] = o->mb;
		}
	}
	if (!seen || !ok || k != S * M)
		for (k = 0; k < S * M; k++) {
			out[2 * k] = k / M;
			out[2 * k + 1] = k % M;
		}
	free(seen);
}

/* Microbatch m's saved slots of stage s. */
static RtTensor **saved_of(Ref *f, int s, int m)
{
	return f->saved[s] + (int64_t)m * f->r.model->st[s].nslots;
}

/* Sum of tensors ts[0..n) into a new tensor. */
static RtTensor *sum(RtRank *r, RtTensor **ts, int n)
{
	RtTensor *x = rt_tensor_new_prec(r, ts[0]->rows, ts[0]->cols, RT_MEM_TEMP);
	if (!x)
		return NULL;
	for (int i = 0; i < n; i++)
		if (i == 0 ? r->dev->copy(r, x, ts[0]) : r->dev->add(r, x, ts[i])) {
			rt_tensor_free(r, x);
			return NULL;
		}
	if (rt_round(r, x)) { // as the interpreter's sum of a stage's in-edges
		rt_tensor_free(r, x);
		return NULL;
	}
	return x;
}

static int microbatch(Ref *f, int step, int d, int m)
{
	RtRank *r = &f->r;
	const Plan *p = r->w->plan;
	const RtModel *md = r->model;
	RtTensor *ts[64];
	for (int s = 0; s < p->nstages; s++) {
		const RtStageModel *sm = &md->st[s];
		RtTensor *x;
		if (sm->nin == 0) {
			x = rt_stage_input(r, step, d, m, &f->b[s], RT_MEM_TEMP);
		} else {
			if (sm->nin > 64)
				return rt_error(r, "stage %s has more than 64 in-edges", p->stages[s].name);
			for (int k = 0; k < sm->nin; k++)
				ts[k] = f->y[p->edges[sm->in_edges[k]].src];
			x = sum(r, ts, sm->nin);
		}
		if (!x)
			return RT_EFAIL;
		if (rt_stage_forward(r, s, m, step, d, &f->b[s], x, saved_of(f, s, m), &f->y[s]))
			return RT_EFAIL;
	}
	for (int s = p->nstages - 1; s >= 0; s--) {
		const RtStageModel *sm = &md->st[s];
		RtTensor *dy = NULL;
		if (!sm->loss) {
			if (sm->nout > 64)
				return rt_error(r, "stage %s has more than 64 out-edges", p->stages[s].name);
			for (int k = 0; k < sm->nout; k++)
				ts[k] = f->dx[p->edges[sm->out_edges[k]].dst];
			if (!(dy = sum(r, ts, sm->nout)))
				return RT_EFAIL;
		}
		if (rt_stage_backward(r, s, m, step, d, &f->b[s], dy, saved_of(f, s, m), &f->dx[s]))
			return RT_EFAIL;
	}
	for (int s = 0; s < p->nstages; s++) {
		rt_tensor_free(r, f->y[s]);
		rt_tensor_free(r, f->dx[s]);
		f->y[s] = f->dx[s] = NULL;
	}
	return RT_OK;
}

/* The TIEREDUCE of replica d's copies: the embedding's table gradient += the head's. */
static int tie_sum(Ref *f)
{
	RtRank *r = &f->r;
	const RtModel *md = r->model;
	const Plan *p = r->w->plan;
	if (md->copy_head < 0)
		return RT_OK;
	int64_t d = plan_tie_bytes(p) * p->dims[DIM_TP] / 4 / p->vocab; // the whole table
	RtTensor e = rt_tensor_view(f->b[md->embed_stage].grads, md->embed_off, p->vocab, d);
	RtTensor h = rt_tensor_view(f->b[md->copy_head].grads, md->copy_off, p->vocab, d);
	return r->dev->add(r, &e, &h);
}

/* The shadow's rounding before step `step`: every nonzero finite weight one ulp up or
 * down, as a bit of a fixed stream keyed by seed, step, stage and index says. */
static int nudge(Ref *f, int step)
{
	RtRank *r = &f->r;
	const Plan *p = r->w->plan;
	uint64_t key = rt_splitmix64(rt_splitmix64(r->w->opt.seed) ^ (uint64_t)step);
	for (int s = 0; s < p->nstages; s++) {
		int64_t n = r->model->st[s].nparams;
		float *h = f->b[s].host; // room for the stage's parameters (rt_stage_bufs_open)
		uint64_t ks = rt_splitmix64(key ^ (uint64_t)s);
		if (!n)
			continue;
		if (r->dev->download(r, f->b[s].params, h))
			return RT_EFAIL;
		for (int64_t i = 0; i < n; i++)
			if (h[i] != 0 && isfinite(h[i]))
				h[i] = nextafterf(h[i], rt_splitmix64(ks ^ (uint64_t)i) >> 63 ? INFINITY
				                                                              : -INFINITY);
		if (r->dev->upload(r, f->b[s].params, h))
			return RT_EFAIL;
	}
	return RT_OK;
}

/* The held-out loss (rt_reference_eval): every replica's microbatches of the eval set
 * forward through all stages, as in training (dropout included), no backward; the
 * mean of their losses.  The saved tensors are dropped as each microbatch ends. */
static int eval_pass(Ref *f, double *out, float *lbuf)
{
	RtRank *r = &f->r;
	const Plan *p = r->w->plan;
	int D = p->dims[DIM_DP], M = p->microbatches, rc = RT_OK;
	RtTensor *ts[64];
	double total = 0;
	r->eval = 1;
	for (int d = 0; d < D && rc == RT_OK; d++) {
		for (int m = 0; m < M && rc == RT_OK; m++) {
			for (int s = 0; s < p->nstages && rc == RT_OK; s++) {
				const RtStageModel *sm = &r->model->st[s];
				RtTensor *x;
				if (sm->nin > 64)
					return rt_error(r, "stage %s has more than 64 in-edges", p->stages[s].name);
				for (int k = 0; k < sm->nin; k++)
					ts[k] = f->y[p->edges[sm->in_edges[k]].src];
				x = sm->nin ? sum(r, ts, sm->nin) : rt_stage_input(r, 0, d, m, &f->b[s], RT_MEM_TEMP);
				rc = x ? rt_stage_forward(r, s, m, 0, d, &f->b[s], x, saved_of(f, s, m), &f->y[s])
				       : RT_EFAIL;
			}
			for (int s = 0; s < p->nstages; s++) {
				RtTensor **sv = saved_of(f, s, m);
				for (int k = 0; k < r->model->st[s].nslots; k++) {
					rt_tensor_free(r, sv[k]);
					sv[k] = NULL;
				}
				rt_tensor_free(r, f->y[s]);
				f->y[s] = NULL;
			}
		}
		if (rc == RT_OK && (rc = r->dev->download(r, f->b[r->w->whole->loss_stage].loss, lbuf)) == RT_OK)
			for (int m = 0; m < M; m++)
				total += lbuf[m] / ((double)M * D);
	}
	r->eval = 0;
	*out = total;
	return rc;
}

static int run(Ref *f, double *loss)
{
	RtRank *r = &f->r;
	RtWorld *w = r->w;
	const Plan *p = w->plan;
	const RtDevice *dev = r->dev;
	int D = p->dims[DIM_DP], M = p->microbatches;
	float *lbuf = malloc((size_t)M * sizeof(float));
	if (!lbuf)
		return rt_error(r, "out of memory");
	int rc = RT_OK;
	for (int step = 0; step < w->opt.steps && rc == RT_OK; step++) {
		double total = 0;
		if (f->shadow)
			rc = nudge(f, step);
		for (int d = 0; d < D && rc == RT_OK; d++) {
			for (int m = 0; m < M && rc == RT_OK; m++)
				rc = microbatch(f, step, d, m);
			for (int k = 0; k < p->nstages * M && rc == RT_OK; k++) {
				int s = f->order[d][2 * k], m = f->order[d][2 * k + 1];
				rc = rt_stage_weights(r, s, &f->b[s], saved_of(f, s, m));
			}
			if (rc == RT_OK)
				rc = tie_sum(f);
			for (int s = 0; s < p->nstages && rc == RT_OK; s++) {
				if (rc == RT_OK)
					rc = d == 0 ? dev->copy(r, f->gacc[s], f->b[s].grads)
					            : dev->add(r, f->gacc[s], f->b[s].grads);
				if (rc == RT_OK)
					rc = dev->zero(r, f->b[s].grads);
			}
			if (rc == RT_OK && (rc = dev->download(r, f->b[w->whole->loss_stage].loss, lbuf)) == RT_OK) {
				double s = 0;
				for (int m = 0; m < M; m++)
					s += lbuf[m];
				total += s / ((double)M * D);
			}
		}
		for (int s = 0; s < p->nstages && rc == RT_OK; s++) {
			if (D > 1)
				rc = dev->scale(r, f->gacc[s], 1.0f / (float)D);
			if (rc == RT_OK)
				rc = rt_stage_optim(r, &f->b[s], f->gacc[s]);
		}
		loss[step] = total;
		int every = w->opt.eval_every ? w->opt.eval_every : w->opt.steps;
		if (f->eval && rc == RT_OK && ((step + 1) % every == 0 || step + 1 == w->opt.steps))
			rc = eval_pass(f, &f->eval[step], lbuf);
	}
	free(lbuf);
	return rc;
}

static int reference(RtWorld *w, int shadow, double *loss, float **weights, double *eval)
{
	const Plan *p = w->plan;
	int S = p->nstages, D = p->dims[DIM_DP];
	Ref f = {0};
	f.eval = eval;
	f.r.w = w;
	f.r.rank = RT_REF_RANK;
	f.r.local = -1;
	f.r.dev = &rt_device_cpu; // the reference always computes on the host
	f.r.model = w->whole;     // and the whole model, whatever the plan's tp
	f.shadow = shadow;
	f.b = calloc((size_t)S, sizeof *f.b);
	f.gacc = calloc((size_t)S, sizeof *f.gacc);
	f.saved = calloc((size_t)S, sizeof *f.saved);
	f.y = calloc((size_t)S, sizeof *f.y);
	f.dx = calloc((size_t)S, sizeof *f.dx);
	f.order = calloc((size_t)D, sizeof *f.order);
	int rc = RT_OK;
	if (!f.b || !f.gacc || !f.saved || !f.y || !f.dx || !f.order)
		rc = rt_error(&f.r, "out of memory");
	if (rc == RT_OK && f.r.dev->rank_open)
		rc = f.r.dev->rank_open(&f.r);
	for (int s = 0; s < S && rc == RT_OK; s++) {
		if ((rc = rt_stage_bufs_open(&f.r, s, &f.b[s])))
			break;
		if (!(f.gacc[s] = rt_tensor_new(&f.r, 1, f.b[s].params->cols, RT_MEM_GRAD)))
			rc = RT_EFAIL;
		f.saved[s] = calloc((size_t)p->microbatches * (size_t)w->whole->st[s].nslots,
		                    sizeof **f.saved);
		if (!f.saved[s])
			rc = rt_error(&f.r, "out of memory");
	}
	for (int s = 0; s < S && rc == RT_OK; s++) {
		f.b[s].embed = w->whole->embed_stage >= 0 ? &f.b[w->whole->embed_stage] : NULL;
		f.b[s].share_tie = 1;
	}
	for (int d = 0; d < D && rc == RT_OK; d++) {
		if (!(f.order[d] = malloc((size_t)S * (size_t)p->microbatches * 2 * sizeof(int))))
			rc = rt_error(&f.r, "out of memory");
		else
			w_order(p, d, f.order[d]);
	}
	if (rc == RT_OK)
		rc = run(&f, loss);
	for (int s = 0; s < S && rc == RT_OK; s++) {
		int64_t n = w->whole->st[s].nparams;
		if (!(weights[s] = malloc((size_t)(n + 1) * sizeof(float))))
			rc = rt_error(&f.r, "out of memory");
		else if (n)
			rc = f.r.dev->download(&f.r, f.b[s].params, weights[s]);
	}
	const RtModel *md = w->whole;
	if (rc == RT_OK && md->copy_head >= 0) // the one table, where the head keeps its copy
		memcpy(weights[md->copy_head] + md->copy_off, weights[md->embed_stage] + md->embed_off,
		       (size_t)(plan_tie_bytes(p) * p->dims[DIM_TP]));
	for (int s = 0; s < S; s++) {
		if (f.saved && f.saved[s]) {
			for (int64_t k = 0; k < (int64_t)p->microbatches * w->whole->st[s].nslots; k++)
				rt_tensor_free(&f.r, f.saved[s][k]);
			free(f.saved[s]);
		}
		if (f.y)
			rt_tensor_free(&f.r, f.y[s]);
		if (f.dx)
			rt_tensor_free(&f.r, f.dx[s]);
		if (f.gacc)
			rt_tensor_free(&f.r, f.gacc[s]);
		if (f.b)
			rt_stage_bufs_close(&f.r, &f.b[s]);
	}
	if (f.order)
		for (int i = 0; i < D; i++)
			free(f.order[i]);
	if (f.r.dev->rank_close)
		f.r.dev->rank_close(&f.r);
	if (rc && f.r.err[0])
		rt_world_error(w, "--check reference: %s", f.r.err);
	free(f.b);
	free(f.gacc);
	free(f.saved);
	free(f.y);
	free(f.dx);
	free(f.order);
	return rc;
}

int rt_reference(RtWorld *w, int shadow, double *loss, float **weights)
{
	return reference(w, shadow, loss, weights, NULL);
}

/* A run of its own rather than a pass inside --check's: the check's reference must stay
 * the plain one, and a run with --eval-data but no --check needs one anyway. */
int rt_reference_eval(RtWorld *w, RtResult *res)
{
	const Plan *p = w->plan;
	int steps = w->opt.steps;
	double *loss = malloc((size_t)steps * sizeof *loss);
	float **weights = calloc((size_t)p->nstages, sizeof *weights);
	res->eval = malloc((size_t)steps * sizeof *res->eval);
	if (!loss || !weights || !res->eval) {
		free(loss);
		free(weights);
		return rt_world_error(w, "out of memory");
	}
	for (int s = 0; s < steps; s++)
		res->eval[s] = NAN;
	LayerShape sh = plan_shape(p);
	res->eval_seqs = (int)(p->dims[DIM_DP] * p->microbatches * sh.batch);
	int rc = reference(w, 0, loss, weights, res->eval);
	for (int s = 0; s < p->nstages; s++)
		free(weights[s]);
	free(weights);
	free(loss);
	return rc;
}
