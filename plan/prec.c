/* The precision regimes (prec.h): the one table of what each regime stores in what. */
#include <string.h>

#include "prec.h"

const PlanPrecInfo plan_precs[PREC_COUNT] = {
	[PREC_F32] = {"f32", 4, 4, 4, 0},
	[PREC_TF32] = {"tf32", 4, 4, 4, 0},
	[PREC_BF16] = {"bf16", 2, 2, 4, 4},
};

const PlanPrecInfo *plan_prec(int k)
{
	return &plan_precs[k >= 0 && k < PREC_COUNT ? k : PREC_F32];
}

PlanPrec plan_prec_find(const char *s, size_t n)
{
	for (int k = 0; k < PREC_COUNT; k++)
		if (strlen(plan_precs[k].name) == n && !memcmp(s, plan_precs[k].name, n))
			return (PlanPrec)k;
	return PREC_COUNT;
}

int plan_prec_param_bytes(int k)
{
	const PlanPrecInfo *r = plan_prec(k);
	return r->param + r->grad + r->master;
}
