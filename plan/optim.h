/* The optimizer a plan names (plan/optim.c): its kinds, settings and state per
 * parameter, which pipecc writes, pipesim counts in memory and piperun runs. */
#ifndef PLAN_OPTIM_H
#define PLAN_OPTIM_H

#include <stdint.h>

typedef enum {
	OPTIM_SGD,   // w -= lr * g
	OPTIM_ADAMW, // Adam with decoupled weight decay (two f32 moments per parameter)
	OPTIM_MOMENTUM, // SGD with momentum: b = momentum b + g, w -= lr * b (one f32 buffer)
	OPTIM_COUNT
} OptimKind;

/* The optimizer a program names; given 0 when it names none (SGD, piperun's --lr). */
typedef struct {
	uint8_t kind;  // OptimKind
	uint8_t given; // 1: the program has an `optimizer` statement (the plan says it)
	uint8_t distributed; // 1: its master weights and state sharded over the dp group
	                     // (ZeRO stage 1, Megatron's distributed optimizer): the step's
	                     // REDUCESCATTER, OPTIM on the rank's shard, ALLGATHER
	double lr, beta1, beta2, eps, weight_decay;
	double momentum; // OPTIM_MOMENTUM: the buffer's decay
} PlanOptim;

extern const char *const plan_optim_names[OPTIM_COUNT];
/* The language's settings for an optimizer statement that gives none: lr 1e-3; adamw
 * beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0.01; momentum 0.9 (given 1). */
PlanOptim plan_optim_default(int kind);
/* Optimizer state bytes per parameter: 0 for SGD, 4 for momentum (one f32 buffer), 8 for
 * AdamW (two f32 moments). */
int plan_optim_state_bytes(int kind);
/* The parameters of a stage of `params` whose master weights and optimizer state a
 * rank keeps: a dp group of `dp` shards a distributed optimizer's flat buffer into dp
 * equal pieces, the last padded (ceil(params / dp)); otherwise all of them. */
int64_t plan_optim_shard(const PlanOptim *o, int64_t params, int dp);

#endif
