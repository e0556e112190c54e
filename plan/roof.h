/* The roofline cost model (docs/semantics.md "Costs"): the kernel classes, their default
 * efficiencies, and a kernel's time as the larger of its compute and its memory traffic.
 * The compiler times F, B and W of every layer (plan/layer.h states each kind's FLOPs
 * and bytes moved per class) and the optimizer step with it; with no memory bandwidth
 * the model is FLOPs over the peak rate alone, as before it. */
#ifndef PLAN_ROOF_H
#define PLAN_ROOF_H

#include <stdint.h>

typedef enum {
	ROOF_GEMM,        // weight GEMMs (linear, projections, mlp, head)
	ROOF_ELEMENTWISE, // norms, activations, residual adds, dropout, embedding lookups,
	                  // bias and gain gradient reductions
	ROOF_ATTENTION,   // attention's scores, softmax and P·V; the loss's softmax
	ROOF_OPTIMIZER,   // the optimizer step
	ROOF_COUNT
} RoofClass;

typedef struct {
	const char *name; // its `device` key: `device h100 gemm=0.8;`
	double eff;       // default efficiency: the share of peak rate and bandwidth it reaches
} RoofClassInfo;

extern const RoofClassInfo plan_roof_classes[ROOF_COUNT];

/* A device as the cost model sees it. */
typedef struct {
	double flops;          // FLOP/s of the plan's precision's GEMMs
	double bw;             // HBM bytes/s; 0: unknown (FLOPs alone, no efficiencies)
	double eff[ROOF_COUNT];
} PlanRoof;

/* One pass (F, B or W) of a layer: its FLOPs and bytes moved per kernel class. */
typedef struct {
	double flops[ROOF_COUNT], bytes[ROOF_COUNT];
} RoofWork;

/* A device of rate flops and bandwidth bw (0: unknown) at the default efficiencies. */
PlanRoof plan_roof(double flops, double bw);
/* Nanoseconds of work w on device d: the sum over classes of max(FLOPs / (rate x eff),
 * bytes / (bandwidth x eff)); with no bandwidth, every FLOP over the rate. */
double plan_roof_ns(const PlanRoof *d, const RoofWork *w);
/* Bytes the optimizer kind (OptimKind) reads and writes per parameter it steps at
 * precision prec: the gradient, the master weights (or the parameters) read and
 * written, the parameter written from the master copy, the state read and written. */
int plan_roof_optim_bytes(int kind, int prec);
/* Nanoseconds of a step over n parameters (a rank's shard) on device d: 0 with no
 * bandwidth. */
double plan_roof_optim_ns(const PlanRoof *d, int kind, int prec, int64_t n);

#endif
