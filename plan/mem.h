/* The memory model: what a rank holds over one step, from its op list alone.
 *
 * docs/semantics.md "Memory" defines it; pipesim reports it, pipecc checks it against
 * the device's capacity, and piperun measures the same figures at the same points (they
 * are equal on the cpu device).  plan_mem_rank() is a pure function of the plan: no
 * timing, no I/O, one pass over the rank's ops, so a search can call it per candidate. */
#ifndef PLAN_MEM_H
#define PLAN_MEM_H

#include "plan.h"
#include "units.h"

/* One rank's memory.  The static parts are held all step; saved and comm are the
 * dynamic parts at the moment of the peak (peak = the five parts' sum). */
typedef struct {
	int64_t params;     // weights of the rank's stages (the precision's parameter bytes)
	int64_t grads;      // their f32 gradient accumulators
	int64_t master;     // their f32 master copy the optimizer updates (bf16; else 0)
	int64_t optim;      // optimizer state (plan_optim_state_bytes per parameter)
	                    // (master and optim: of the rank's shard, plan_optim_shard, when
	                    // the optimizer is distributed)
	int64_t saved;      // saved activations at the peak
	int64_t comm;       // stage outputs and input gradients in flight at the peak
	int64_t peak;       // peak total bytes
	int64_t peak_op;    // op index at (or inside) which the peak is reached, -1 before any
	int64_t peak_saved; // peak of the saved activations alone (pipesim's peak act bytes)
	int64_t peak_comm;  // peak of the in-flight bytes alone
} PlanMem;

/* PlanMem's static part, held all step: params + grads + master + optim (the
 * pictures' and schedule auto's model state). */
static inline int64_t plan_mem_static(const PlanMem *m)
{
	return m->params + m->grads + m->master + m->optim;
}

/* The parts of m's peak in the order every report lists them: params, grads, master
 * (only under a precision with master weights, plan/prec.h), optim, saved, comm.  Into
 * v[], returns how many. */
enum { PLAN_MEM_PARTS = 6 };
int plan_mem_parts(const Plan *p, const PlanMem *m, int64_t v[PLAN_MEM_PARTS]);

/* The model state of stage s on each of its ranks: its parameters and gradients, and
 * the master weights and optimizer state of the rank's shard (plan_optim_shard: all of
 * them unless the optimizer is distributed); PlanMem's static part. */
int64_t plan_stage_state_bytes(const Plan *p, int s);
/* The memory of world rank r over one step.  Returns 0, or -1 when out of memory. */
int plan_mem_rank(const Plan *p, int r, PlanMem *m);
/* One op's dynamic memory at its highest point: saved activations and bytes in flight
 * (the static part, plan_mem_static, adds to both). */
typedef struct {
	int64_t saved, comm;
} PlanMemAt;
/* plan_mem_rank, also filling at[the rank's nops] (at may be NULL): each op's
 * highest point, a comm group's for each of its ops, so that the largest static +
 * saved + comm is m->peak; the pictures draw it (pipesim --svg, --trace). */
int plan_mem_track(const Plan *p, int r, PlanMem *m, PlanMemAt *at);
/* plan_mem_rank of every rank into m[world], the ranks on par_for's workers with
 * `--threads` (plan/par.h): the same figures.  0, or -1 when out of memory. */
int plan_mem_ranks(const Plan *p, PlanMem *m);
/* plan_mem_ranks into a new array of world entries (the caller frees it), or NULL when
 * out of memory. */
PlanMem *plan_mem_all(const Plan *p);
/* The peak total of every rank into peak[world] and the largest of them; -1 when out
 * of memory. */
int64_t plan_mem_peaks(const Plan *p, int64_t *peak);
/* The memory model's sums fit in 64 bits: a plan whose stages' and edges' shares
 * below add up to less than PLAN_MEM_MAX (2^62 bytes, 4.6 EB) keeps every rank's and the
 * step's figures below it (a verified plan makes, saves and receives each tensor once a
 * microbatch).  The plan reader refuses the stage or edge past it, pipecc the stage.
 * A stage's share: PLAN_MEM_PARAM_BYTES(prec) a parameter (weights, gradients, master
 * copy, the largest optimizer state) and its saved bytes for each of m microbatches; an edge's: four copies of its
 * tensor a microbatch (made and received, forward and backward).  Saturating. */
#define PLAN_MEM_MAX ((int64_t)1 << 62)
#define PLAN_MEM_PARAM_BYTES(prec) \
	(plan_prec_param_bytes(prec) + plan_optim_state_bytes(OPTIM_ADAMW)) // AdamW's is the largest
int64_t plan_mem_stage_share(const PlanStage *st, int m, int prec);
int64_t plan_mem_edge_share(int64_t bytes, int m);
/* The layers [*lo, *hi) full recomputation drops after F and re-runs in B (docs/
 * semantics.md "Memory"): from the stage's first residual body to the end of its last,
 * as Megatron recomputes transformer layers and leaves the embedding, the final norm,
 * the output layer and the loss alone; a stage without bodies, all its layers. */
void plan_recompute_span(const PlanStage *st, int *lo, int *hi);
/* The bytes of the input of layer l of stage s (l = 0: the stage's input), what full
 * recomputation keeps of its span from F to B: the precision's activation bytes an
 * element, four for the token ids an embedding takes. */
int64_t plan_layer_in_bytes(const Plan *p, int s, int l);
/* The bytes of stage s's input, what a recomputing stage keeps from F to B: the
 * precision's activation bytes an element, four for the token ids an embedding takes. */
int64_t plan_stage_in_bytes(const Plan *p, int s);
/* The bytes of stage s's output (and of its gradient): an edge's tensor. */
int64_t plan_stage_out_bytes(const Plan *p, int s);

#endif
