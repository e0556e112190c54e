/* Running out of memory, said one way by every tool (plan/oom.c): it is a user
 * condition, not a crash, and the report names what the plan needed and what the
 * machine has. */
#ifndef PLAN_OOM_H
#define PLAN_OOM_H

#include "plan.h"

#include <stddef.h>
#include <stdint.h>

/* "out of memory: the plan needs 12.5 M ops (about 300 MB); allocating 537 MB
 * failed" into buf: ops is the plan size in ops (0 when unknown), failed the bytes of
 * the allocation that failed; where either is more than the machine has
 * (plan_sysmem_limit), ": more than the 24.6 GB available (MemAvailable,
 * /proc/meminfo)" follows.  Returns buf. */
char *plan_oom_text(char *buf, size_t n, int64_t ops, size_t failed);
/* Whether e is the reader's or the verifier's "out of memory" (plan_oom_text's words)
 * rather than anything the plan says: a caller that weighs plans must not take it as a
 * fact about the plan. */
int plan_error_is_oom(const PlanError *e);
/* strerror(e), except that ENOMEM reads "out of memory", as plan_oom_text does: every
 * report of running out of memory says it the same way. */
const char *plan_strerror(int e);

#endif
