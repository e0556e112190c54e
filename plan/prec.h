/* The precision regimes a plan may name (`precision NAME;`, docs/semantics.md
 * "Precision"): one row each, saying what every class of tensor is stored in.  The
 * layer table's byte counts, the memory model, the lowering's message sizes and the
 * compiler's GEMM rate read the row; nothing else knows a regime by name. */
#ifndef PLAN_PREC_H
#define PLAN_PREC_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
	PREC_F32,  // everything f32; GEMMs at the device's f32 rate (the default)
	PREC_TF32, // f32 storage; GEMMs on tensor cores at the device's tf32 rate
	PREC_BF16, // Megatron's mixed precision: bf16 parameters, activations and messages,
	           // f32 main gradients, master weights and optimizer state
	PREC_COUNT
} PlanPrec;

typedef struct {
	const char *name; // as written and in the plan file
	uint8_t act;      // bytes of an activation element: saved tensors, stage outputs and
	                  // input gradients, messages, tp collectives
	uint8_t param;    // bytes of a parameter as the GEMMs read it
	uint8_t grad;     // bytes of a gradient accumulator (the dp all-reduce's element)
	uint8_t master;   // bytes of the optimizer's own copy of a parameter; 0: it updates
	                  // the parameters themselves
} PlanPrecInfo;

extern const PlanPrecInfo plan_precs[PREC_COUNT];

/* Row of regime k, or the f32 row for an out-of-range k. */
const PlanPrecInfo *plan_prec(int k);
/* The regime called the n bytes at s, or PREC_COUNT. */
PlanPrec plan_prec_find(const char *s, size_t n);
/* Bytes per parameter besides the optimizer's state: parameter, gradient and master. */
int plan_prec_param_bytes(int k);

#endif
