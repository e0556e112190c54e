/* The optimizers a plan can name, with the language's defaults for each. */
#include "optim.h"

const char *const plan_optim_names[OPTIM_COUNT] = {"sgd", "adamw", "momentum"};

PlanOptim plan_optim_default(int kind)
{
	return (PlanOptim){.kind = (uint8_t)kind, .given = 1, .lr = 1e-3, .beta1 = 0.9,
	                   .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .momentum = 0.9};
}

int plan_optim_state_bytes(int kind)
{
	return kind == OPTIM_ADAMW ? 8 : kind == OPTIM_MOMENTUM ? 4 : 0;
}

int64_t plan_optim_shard(const PlanOptim *o, int64_t params, int dp)
{
	return o->distributed && dp > 1 ? params / dp + (params % dp != 0) : params;
}
