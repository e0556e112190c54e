/* Test-only fault injection: what a real fault does to a rank, on demand, so the
 * chaos tests (tests/cli/reliability.sh) can show that the run still ends, and the
 * tests of --check (tests/test_check.c) that a wrong run fails it.
 *
 * PIPERUN_FAULT=stall:rank=R:op=N[:step=S] stops world rank R for good when it reaches
 * op N of its plan list (0-based: the op on the rank's first op line + N) in step S
 * (1-based, default 1).  The rank's thread sleeps forever and never looks at the
 * world's abort flag: a kernel that never returns.  The other ranks
 * block on it, the watchdog fires after --timeout, and the launcher leaves the stuck
 * thread behind (launch_threads.c) or the job is aborted (MPI).  Unset, it costs one
 * comparison per group.
 *
 * PIPERUN_FAULT=hold:rank=R:op=N[:step=S] stops rank R there only until the world is
 * aborted, then lets it go on: an op that returns late (an allocator that retries until
 * memory frees up), which moves the rank past what it was blocked in.
 *
 * PIPERUN_FAULT=stall-open:rank=R stops the process of launcher rank R (the only one,
 * rank 0, without a launcher) for good before it opens the world: the others block in
 * the collective opening until their start guard ends them (watchdog.c).
 *
 * PIPERUN_FAULT=stall-save:rank=R[:step=S] stops world rank R for good once it wrote its
 * files of the checkpoint after step S (--save, ckpt.c), before the barrier that lets
 * rank 0 rename it: a save interrupted by a crash (the test kills the process there).
 *
 * RtOptions.wrong, set by a C test, makes one rank compute something wrong (rt.h,
 * RtWrongKind): its gradients dropped before an optimizer step, one microbatch's weight
 * gradient lost, or a step computed with the weights from before the previous update. */
#include "rt_private.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The value of "key=N" in tok (N a non-negative integer); -1 when tok is another key,
 * -2 when the value is not such a number. */
static long long field(const char *tok, const char *key)
{
	size_t k = strlen(key);
	if (strncmp(tok, key, k) != 0 || tok[k] != '=')
		return -1;
	char *end;
	long long v = strtoll(tok + k + 1, &end, 10);
	return end != tok + k + 1 && *end == 0 && v >= 0 ? v : -2;
}

int rt_fault_parse(RtWorld *w, const char *spec)
{
	w->fault_rank = -1;
	if (!spec || !*spec)
		return RT_OK;
	long long rank = -1, op = -1, step = 1;
	char buf[128], *save = NULL;
	snprintf(buf, sizeof buf, "%s", spec);
	char *tok = strtok_r(buf, ":", &save);
	if (!tok || (strcmp(tok, "stall") && strcmp(tok, "hold") && strcmp(tok, "stall-open") &&
	             strcmp(tok, "stall-save")))
		goto bad;
	int open = !strcmp(tok, "stall-open"), hold = !strcmp(tok, "hold");
	int at_save = !strcmp(tok, "stall-save");
	while ((tok = strtok_r(NULL, ":", &save))) {
		long long v, *to = NULL;
		if ((v = field(tok, "rank")) != -1)
			to = &rank;
		else if ((v = field(tok, "op")) != -1)
			to = &op;
		else if ((v = field(tok, "step")) != -1)
			to = &step;
		if (!to || v < 0)
			goto bad;
		*to = v;
	}
	if (strlen(spec) >= sizeof buf || rank < 0 || (op >= 0) != !(open || at_save) || step < 1 ||
	    rank >= w->plan->world)
		goto bad;
	w->fault_open = open;
	w->fault_save = at_save;
	w->fault_hold = hold;
	w->fault_rank = (int)rank;
	w->fault_op = op;
	w->fault_step = (int)(step - 1);
	return RT_OK;
bad:
	return rt_world_error(w, "PIPERUN_FAULT='%s': expected stall:rank=R:op=N[:step=S], "
	                      "hold:rank=R:op=N[:step=S], stall-open:rank=R or stall-save:rank=R[:step=S], R a "
	                      "rank of the "
	                      "plan (0 to %d)", spec,
	                      w->plan->world - 1);
}

void rt_fault_open(const RtWorld *w)
{
	int me = rt_launch_env_rank(rt_real_getenv);
	if (!w->fault_open || w->fault_rank != (me < 0 ? 0 : me))
		return;
	for (;;)
		sleep(3600);
}

void rt_fault_at(RtRank *r, int step, int64_t op, int64_t end)
{
	const RtWorld *w = r->w;
	if (w->fault_open || w->fault_save || r->rank != w->fault_rank || step != w->fault_step ||
	    w->fault_op < op ||
	    w->fault_op >= end)
		return;
	while (!w->fault_hold || !rt_aborted(w))
		usleep(10000);
}

void rt_fault_save(const RtRank *r, int run_step)
{
	const RtWorld *w = r->w;
	if (!w->fault_save || r->rank != w->fault_rank || run_step != w->fault_step)
		return;
	for (;;)
		sleep(3600);
}

/* ---- wrong runs (RtOptions.wrong) ---- */

int rt_wrong_check(const Plan *p, const RtOptions *o, char *err, size_t n)
{
	const RtWrong *x = &o->wrong;
	if (x->kind == RT_WRONG_NONE)
		return 0;
	const char *why = x->kind < 0 || x->kind >= RT_WRONG_COUNT ? "an unknown kind"
	                  : x->rank < 0 || x->rank >= p->world     ? "a rank outside the plan"
	                  : x->step < (x->kind == RT_WRONG_STALE) || x->step >= o->steps
	                      ? "a step outside the run (a stale step follows another)"
	                  : x->kind == RT_WRONG_SKIP_MB && (x->mb < 0 || x->mb >= p->microbatches)
	                      ? "a microbatch outside the plan"
	                      : NULL;
	if (!why)
		return 0;
	snprintf(err, n, "the wrong run (kind %d, rank %d, step %d, microbatch %d) names %s",
	         x->kind, x->rank, x->step, x->mb, why);
	return -1;
}

/* Whether the wrong run is of this kind on this rank. */
static int wrong_here(const RtRank *r, int kind)
{
	const RtWrong *x = &r->w->opt.wrong;
	return x->kind == kind && x->rank == r->rank;
}

int rt_wrong_optim(RtRank *r, RtStageBufs *b, int step, int after)
{
	const RtWrong *x = &r->w->opt.wrong;
	if (wrong_here(r, RT_WRONG_DROP_GRAD) && step == x->step && !after)
		return r->dev->zero(r, b->grads);
	if (!wrong_here(r, RT_WRONG_STALE))
		return RT_OK;
	/* Before the previous step's update: keep the weights it replaces.  After it: swap
	 * them in, so this step computes with them.  Before this step's update: swap back,
	 * and update the updated weights. */
	if (step == x->step - 1 && !after) {
		b->stale = rt_tensor_new(r, b->params->rows, b->params->cols, RT_MEM_TEMP);
		return b->stale ? r->dev->copy(r, b->stale, b->params) : RT_EFAIL;
	}
	if (b->stale && ((step == x->step - 1 && after) || (step == x->step && !after))) {
		RtTensor *t = b->params;
		b->params = b->stale;
		b->stale = t;
		if (!after) {
			rt_tensor_free(r, b->stale);
			b->stale = NULL;
		}
	}
	return RT_OK;
}

int rt_wrong_w_begin(RtRank *r, RtStageBufs *b, int step, int mb, RtTensor **keep)
{
	const RtWrong *x = &r->w->opt.wrong;
	*keep = NULL;
	if (!wrong_here(r, RT_WRONG_SKIP_MB) || step != x->step || mb != x->mb)
		return RT_OK;
	if (!(*keep = rt_tensor_new(r, b->grads->rows, b->grads->cols, RT_MEM_TEMP)))
		return RT_EFAIL;
	return r->dev->copy(r, *keep, b->grads);
}

int rt_wrong_w_end(RtRank *r, RtStageBufs *b, RtTensor *keep)
{
	if (!keep)
		return RT_OK;
	int rc = r->dev->copy(r, b->grads, keep);
	rt_tensor_free(r, keep);
	return rc;
}
