/* The roofline (roof.h): one row per kernel class with its default efficiency, and the
 * time of a pass from its per-class FLOPs and bytes.  Classes are timed one after the
 * other (a pass's kernels run in sequence on the device), each at the larger of its
 * compute and memory time, so a memory-bound norm adds to a compute-bound GEMM. */
#include "roof.h"
#include "optim.h"
#include "prec.h"

/* Defaults (docs/semantics.md "Costs"): large bf16 GEMMs reach about three quarters of
 * the datasheet rate; streaming kernels about 80% of HBM bandwidth; attention's small
 * batched products and softmax about half. */
const RoofClassInfo plan_roof_classes[ROOF_COUNT] = {
	[ROOF_GEMM] = {"gemm", 0.75},
	[ROOF_ELEMENTWISE] = {"elementwise", 0.8},
	[ROOF_ATTENTION] = {"attention", 0.5},
	[ROOF_OPTIMIZER] = {"optim", 0.8},
};

PlanRoof plan_roof(double flops, double bw)
{
	PlanRoof d = {.flops = flops, .bw = bw};
	for (int k = 0; k < ROOF_COUNT; k++)
		d.eff[k] = plan_roof_classes[k].eff;
	return d;
}

double plan_roof_ns(const PlanRoof *d, const RoofWork *w)
{
	double ns = 0;
	for (int k = 0; k < ROOF_COUNT; k++) {
		if (!(d->bw > 0)) {
			ns += w->flops[k] * 1e9 / d->flops;
			continue;
		}
		double c = w->flops[k] * 1e9 / (d->flops * d->eff[k]);
		double m = w->bytes[k] * 1e9 / (d->bw * d->eff[k]);
		ns += c > m ? c : m;
	}
	return ns;
}

int plan_roof_optim_bytes(int kind, int prec)
{
	const PlanPrecInfo *r = plan_prec(prec);
	int weights = r->master ? 2 * r->master + r->param : 2 * r->param;
	return r->grad + weights + 2 * plan_optim_state_bytes(kind);
}

double plan_roof_optim_ns(const PlanRoof *d, int kind, int prec, int64_t n)
{
	if (!(d->bw > 0))
		return 0;
	return (double)n * plan_roof_optim_bytes(kind, prec) * 1e9 /
	       (d->bw * d->eff[ROOF_OPTIMIZER]);
}
