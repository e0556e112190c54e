/* The optimizer step around the devices' kernels: which optimizer a run uses, its
 * hyper-parameters checked against one table (rt_hypers: a row per setting with its
 * range, walked by piperun's option checks and by the tests), and the f32 factors of
 * a step computed once on the host, so that every device (and the --check reference)
 * runs the very same f32 arithmetic.  The math itself is each device's `optim` row
 * (cpu.c, cuda_kernels.cu); rt_backend.h "The optimizer" states it.
 *
 * The optimizer is the plan's `optimizer` line when it has one, else SGD at
 * RT_DEFAULT_LR (piperun's --lr default, as before plans named optimizers); piperun's
 * options replace single fields of it (rt_optim_resolve). */
#include "rt_private.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define ALL ((1u << OPTIM_COUNT) - 1)
#define ADAMW (1u << OPTIM_ADAMW)
#define MOMENTUM (1u << OPTIM_MOMENTUM)
const RtHyperInfo rt_hypers[RT_HYPER_COUNT] = {
	[RT_HYPER_LR] = {"lr", "lr", 0, 1e6, 1, 0, ALL},
	[RT_HYPER_BETA1] = {"beta1", "beta1", 0, 1, 0, 1, ADAMW},
	[RT_HYPER_BETA2] = {"beta2", "beta2", 0, 1, 0, 1, ADAMW},
	[RT_HYPER_EPS] = {"eps", "eps", 0, 1, 1, 0, ADAMW},
	[RT_HYPER_WEIGHT_DECAY] = {"weight_decay", "weight-decay", 0, 1e6, 0, 0, ADAMW},
	[RT_HYPER_MOMENTUM] = {"momentum", "momentum", 0, 1, 0, 1, MOMENTUM},
};

double *rt_hyper_field(PlanOptim *o, int h)
{
	switch ((RtHyper)h) {
	case RT_HYPER_LR:
		return &o->lr;
	case RT_HYPER_BETA1:
		return &o->beta1;
	case RT_HYPER_BETA2:
		return &o->beta2;
	case RT_HYPER_EPS:
		return &o->eps;
	case RT_HYPER_WEIGHT_DECAY:
		return &o->weight_decay;
	case RT_HYPER_MOMENTUM:
		return &o->momentum;
	case RT_HYPER_COUNT:
		break;
	}
	return NULL;
}

int rt_hyper_check(int h, double v, char *msg, size_t n)
{
	const RtHyperInfo *hi = &rt_hypers[h];
	int ok = isfinite(v) && (hi->lo_open ? v > hi->lo : v >= hi->lo) &&
	         (hi->hi_open ? v < hi->hi : v <= hi->hi);
	if (ok)
		return 0;
	snprintf(msg, n, "%s must be in %c%g, %g%c, not %g", hi->name, hi->lo_open ? '(' : '[',
	         hi->lo, hi->hi, hi->hi_open ? ')' : ']', v);
	return -1;
}

int rt_optim_resolve(const Plan *p, const RtOptions *o, PlanOptim *out, char *msg, size_t n)
{
	PlanOptim e = p->optim.given ? p->optim : (PlanOptim){.kind = OPTIM_SGD, .lr = RT_DEFAULT_LR};
	if ((o->optim_set & RT_OPTIM_SET_KIND) && o->optim.kind != e.kind) {
		if (o->optim.kind >= OPTIM_COUNT) {
			snprintf(msg, n, "unknown optimizer %d", o->optim.kind);
			return -1;
		}
		e = plan_optim_default(o->optim.kind);
		if (e.kind == OPTIM_SGD)
			e.lr = RT_DEFAULT_LR;
	}
	e.given = 1;
	e.distributed = p->optim.distributed; // the plan's ops say how it steps
	for (int h = 0; h < RT_HYPER_COUNT; h++) {
		if (!(o->optim_set & RT_OPTIM_SET(h)))
			continue;
		if (!RT_HYPER_OF(h, e.kind)) {
			int k = 0; // the optimizer that has it (each such setting has one)
			while (k + 1 < OPTIM_COUNT && !RT_HYPER_OF(h, k))
				k++;
			const char *kn = plan_optim_names[k];
			snprintf(msg, n, "%s is %s %s setting and the optimizer is %s (%s: the plan's "
			         "optimizer line or --optimizer %s)", rt_hypers[h].name,
			         strchr("aeiou", kn[0]) ? "an" : "a", kn, plan_optim_names[e.kind], kn, kn);
			return -1;
		}
		*rt_hyper_field(&e, h) = *rt_hyper_field((PlanOptim *)&o->optim, h);
	}
	for (int h = 0; h < RT_HYPER_COUNT; h++) {
		if (!RT_HYPER_OF(h, e.kind))
			continue;
		char why[160];
		if (rt_hyper_check(h, *rt_hyper_field(&e, h), why, sizeof why)) {
			snprintf(msg, n, "the %s optimizer's %s", plan_optim_names[e.kind], why);
			return -1;
		}
	}
	*out = e;
	return 0;
}

void rt_optim_step_init(const PlanOptim *o, int64_t t, RtOptStep *s)
{
	s->t = t;
	s->lr = (float)o->lr;
	s->momentum = (float)o->momentum;
	if (o->kind != OPTIM_ADAMW)
		return;
	double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
	s->beta1 = (float)o->beta1;
	s->beta2 = (float)o->beta2;
	s->one_minus_beta1 = (float)(1.0 - o->beta1);
	s->one_minus_beta2 = (float)(1.0 - o->beta2);
	s->decay = (float)(1.0 - o->lr * o->weight_decay);
	s->step = (float)(o->lr / bc1);
	s->bc2 = (float)sqrt(bc2);
	s->eps = (float)o->eps;
}

int rt_optim_dp(const RtRank *r)
{
	const Plan *p = r->w->plan;
	return p->optim.distributed && r->rank != RT_REF_RANK ? p->dims[DIM_DP] : 1;
}

int rt_stage_optim(RtRank *r, RtStageBufs *b, const RtTensor *g)
{
	const PlanOptim *o = &r->w->optim;
	RtOptimFn fn = r->dev->optim ? r->dev->optim[o->kind] : NULL;
	if (!fn)
		return rt_error(r, "internal: the %s device has no %s step", r->dev->name,
		                plan_optim_names[o->kind]);
	/* A distributed optimizer steps the rank's shard alone, its state being the shard's. */
	int64_t off, len, n = b->params->rows * b->params->cols;
	rt_shard(n, rt_optim_dp(r), r->coord[DIM_DP], &off, &len);
	RtTensor w = rt_tensor_view(b->params, off, 1, len), gs = rt_tensor_view(g, off, 1, len);
	RtTensor m, v;
	if (b->m)
		m = rt_tensor_view(b->m, 0, 1, len);
	if (b->v)
		v = rt_tensor_view(b->v, 0, 1, len);
	RtOptStep s = {.w = &w, .g = &gs, .m = b->m ? &m : NULL, .v = b->v ? &v : NULL};
	rt_optim_step_init(o, ++b->t, &s);
	return len ? fn(r, &s) : RT_OK;
}
