/* Tensor parallelism: a stage's parts (plan/tp.c, docs/semantics.md).
 *
 * With tp > 1 a stage's forward and backward are cut after every layer that ends in a tp
 * all-reduce (the layer table's tp_bytes): the forward after a row-parallel output
 * (attention, mlp, swiglu, the embedding) and the cross-entropy's reductions, the
 * backward after a column-parallel input (attention, mlp, swiglu, the head).  Each piece
 * is a part; F, B and BW ops name one, and a TPREDUCE follows every part that ends in a
 * cut.  Which layers a part covers is a function of the layers and tp alone, so the
 * plan stores no layer ranges.  With tp = 1 every stage has one part each way. */
#ifndef PLAN_TP_H
#define PLAN_TP_H

#include "plan.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
	int first, n;     // layers [first, first + n) of the stage
	int64_t reduce;   // bytes of the TPREDUCE after it; 0: none
	int64_t cost[3];  // its share of the stage's F, B, W ns (by its layers' FLOPs)
	int64_t save[3];  // its layers' save_fb, save_fw, save_bw (selective: less rebuilt)
	int64_t rebuilt;  // backward parts of a selective stage: the bytes its B (BW) rebuilds
	                  // at its start (its attention layers' rebuilt tensors) and frees
	                  // by its end; 0 otherwise
} PlanPart;

typedef struct {
	int n[DIR_COUNT];          // parts of the forward (F) and of the backward (B, BW)
	PlanPart *part[DIR_COUNT]; // the backward's in its order: the last layers first
} PlanParts;

/* Rank rk's list with every F, B and BW cut into its parts, each followed by its
 * TPREDUCE when it has one (the lowering's last step at tp > 1); -1 when out of memory,
 * with the bytes that failed in *failed (rk unchanged). */
int plan_tp_expand(Plan *p, PlanRank *rk, size_t *failed);
/* Fills *pp for stage s of p (tp = p->dims[DIM_TP]); -1 when out of memory. */
int plan_stage_parts(const Plan *p, int s, PlanParts *pp);
void plan_parts_free(PlanParts *pp);
/* Ops in one direction's sequence (parts and their TPREDUCEs): part 0, its TPREDUCE if
 * any, part 1, ...  */
int plan_part_steps(const PlanParts *pp, int dir);
/* Place of a part (red 0) or of the TPREDUCE after it (red 1) in that sequence; -1 when
 * there is no such op. */
int plan_part_step(const PlanParts *pp, int dir, int red, int part);
/* Per (stage, microbatch): how far each direction's sequence has run. */
typedef struct {
	uint16_t step[DIR_COUNT];
	uint8_t fused; // the backward's parts are BW
} PlanPartState;
/* The part rule: may op o (F, B or BW with its part, or a TPREDUCE) run now on its stage
 * and microbatch, whose PLAN_DEP_MB bits are mb?  NULL: yes, *ps is advanced, and *done
 * is the kind whose whole sequence o completes (OP_F, OP_B, OP_BW: the caller applies
 * plan_dep_apply for it then), else OP_COUNT; otherwise why not. */
const char *plan_part_apply(const PlanParts *pp, const PlanOp *o, uint8_t mb,
                            PlanPartState *ps, OpKind *done);
/* ns and saved-byte change of compute op o (F, B, W, BW of a part) on a stage with parts pp. */
int64_t plan_part_cost(const PlanParts *pp, const PlanOp *o, const int64_t stage_cost[3]);
int64_t plan_part_mem(const PlanParts *pp, const PlanOp *o);
/* The bytes of stage s's SPREDUCE: under sequence parallelism at tp > 1 each rank's
 * gradient of a replicated layer (LAYER_TP_WHOLE: a norm, a replicated linear) covers
 * only its rows, and the stage sums them over the tp group before its step: those
 * layers' own parameters times the precision's gradient bytes (f32 under bf16); 0 without
 * sequence parallelism, at tp = 1, or on a stage without such parameters. */
int64_t plan_sp_bytes(const Plan *p, int s);
/* The TPREDUCE's time: plan_dim_coll_ns over DIM_TP (plan/link.h). */

#endif
