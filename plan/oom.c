/* The one wording of running out of memory: what the plan needed, what failed, and
 * where that is more than the machine has (plan_sysmem_limit), what it has. */
#include "oom.h"
#include "sysmem.h"
#include "units.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

char *plan_oom_text(char *buf, size_t n, int64_t ops, size_t failed)
{
	char need[32], got[32], what[2400];
	double bytes = (double)ops * (double)sizeof(PlanOp);
	plan_mem_text(need, sizeof need, (int64_t)bytes);
	plan_mem_text(got, sizeof got, (int64_t)failed);
	int k = snprintf(buf, n, "out of memory");
	if (ops > 0 && k < (int)n)
		k += snprintf(buf + k, n - (size_t)k, ": the plan needs %.1f M ops (about %s)",
		              (double)ops / 1e6, need);
	if (failed && k < (int)n)
		k += snprintf(buf + k, n - (size_t)k, "%sallocating %s failed", ops > 0 ? "; " : ": ",
		              got);
	/* Say so where the machine has less than that (plan_block_new refuses such a block,
	 * pipecc such a plan): no retry can help. */
	if ((double)failed > bytes)
		bytes = (double)failed;
	int64_t limit = bytes > 0 ? plan_sysmem_limit(what, sizeof what) : -1;
	if (limit >= 0 && bytes > (double)limit && k < (int)n) {
		plan_mem_text(got, sizeof got, limit);
		snprintf(buf + k, n - (size_t)k, ": more than the %s %s", got, what);
	}
	return buf;
}

int plan_error_is_oom(const PlanError *e)
{
	return !strncmp(e->msg, "out of memory", 13);
}

const char *plan_strerror(int e)
{
	return e == ENOMEM ? "out of memory" : strerror(e);
}
