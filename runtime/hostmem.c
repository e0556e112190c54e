/* Host memory: a CPU run that cannot fit is refused before any rank allocates.
 *
 * Linux grants allocations it cannot back (overcommit), so a plan too big for the
 * machine does not fail its malloc: it fills the memory until the kernel's OOM killer
 * ends the process, or another one, a minute later.  So the cpu device's open compares
 * what the run will hold with what the host and the process may give (plan/sysmem.h),
 * and notes (rt_world_unable) a run that cannot fit, with both figures.  The need is a
 * lower bound: the memory model's peak of every rank this host runs (plan/mem.h, the
 * figures pipesim prints and piperun measures), their sum, as the ranks run side by
 * side, and under --check on the root at least the sequential reference (the whole
 * model with its gradients, their sum, the optimizer state and every microbatch's
 * saved activations), which runs after the ranks have ended.  A need that is only a
 * bound refuses no run that fits; --no-memory-check skips the check. */
#include "rt_private.h"
#include "../plan/block.h"
#include "../plan/line.h"

#include "../plan/mem.h"
#include "../plan/sysmem.h"
#include "../plan/tfcount.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the need ---- */

/* The --check reference's bytes at least: the whole model's weights, gradients, their
 * replica sum and optimizer state, and every microbatch's saved activations. */
static int64_t reference_bytes(const RtWorld *w)
{
	const Plan *p = w->plan;
	int64_t n = 0;
	int state = plan_optim_state_bytes(w->optim.kind);
	for (int s = 0; s < p->nstages; s++) {
		const RtStageModel *st = &w->whole->st[s];
		n = sat_add(n, sat_mul(st->nparams, 12 + state));
		n = sat_add(n, sat_mul(sat_add(sat_add(st->save[0], st->save[1]), st->save[2]),
		                     p->microbatches));
	}
	return n;
}

/* The memory model's peak of world rank r.  In a one-rank view (piperun under MPI)
 * every rank runs the lists of line 0's rank at its pipeline index (plan_expand_for). */
static int rank_peak(const Plan *p, int r, int64_t *peak)
{
	if (p->view) {
		int c[DIM_COUNT];
		plan_mesh_coords(p, r, c);
		r = c[DIM_PP];
	}
	PlanMem m;
	if (plan_mem_rank(p, r, &m))
		return -1;
	*peak = m.peak;
	return 0;
}

/* What the ranks on this host hold at least: the sum of their peaks into need[0] and
 * their count into *count, the sum of this process's ranks' into need[1]; *later: a
 * process before this one runs on the host.  -1 when out of memory. */
static int ranks_need(RtWorld *w, int64_t need[2], int *count, int *later)
{
	const Plan *p = w->plan;
	char *hosts = NULL;
	if (rt_world_hosts(w, &hosts))
		return -1;
	int rc = 0;
	for (int r = 0; r < p->world && !rc; r++) {
		int mine = r >= w->first_local && r < w->first_local + w->nlocal;
		int64_t peak;
		if (!mine && (!hosts || strcmp(hosts + (size_t)r * RT_HOST_BYTES, w->host)))
			continue;
		*later |= r < w->first_local;
		if ((rc = rank_peak(p, r, &peak)))
			break;
		need[0] = sat_add(need[0], peak); // each below PLAN_MEM_MAX, not their sum
		++*count;
		need[1] = sat_add(need[1], mine ? peak : 0);
	}
	free(hosts);
	return rc;
}

int rt_host_mem_check(RtWorld *w, int ranks_here)
{
	const Plan *p = w->plan;
	int64_t need[2] = {0, 0};
	int count = 0, later = 0;
	if (w->opt.no_mem_check)
		return RT_OK;
	if (ranks_here && ranks_need(w, need, &count, &later))
		return rt_world_error(w, "out of memory");
	int64_t ref = w->opt.check && w->root ? reference_bytes(w) : 0;
	PlanSysMem have;
	plan_sysmem("", &have);
	char a[32], b[32], who[128];
	const char *tail = "; run fewer ranks on a host (mpirun over several), make the plan "
	                   "smaller, or give --no-memory-check to try anyway";
	int by_ref = ref > need[0];
	int64_t host = by_ref ? ref : need[0], proc = need[1] > ref ? need[1] : ref;
	if (by_ref)
		snprintf(who, sizeof who, "the --check reference: the whole model");
	else if (count == 1)
		snprintf(who, sizeof who, "its rank's peak, as pipesim's memory table gives it");
	else
		snprintf(who, sizeof who, "%s %d ranks' peaks together, as pipesim's memory table "
		         "gives them", count == p->world ? "its" : "the host's", count);
	/* A host's processes fail alike: its first one says why. */
	if (host < (int64_t)PLAN_FIT_MIN) // small runs never wait on a moment's pressure
		host = proc = 0;
	w->quiet |= later && ((have.host >= 0 && host > have.host) ||
	                      (have.proc >= 0 && proc > have.proc));
	if (have.host >= 0 && host > have.host)
		return rt_world_unable(w, "the run needs at least %s on host %s (%s), more than "
		                          "the %s %s%s",
		                       plan_mem_text(a, sizeof a, host), w->host, who,
		                       plan_mem_text(b, sizeof b, have.host), have.host_what, tail);
	if (have.proc >= 0 && proc > have.proc)
		return rt_world_unable(w, "the run needs at least %s in this process (%s), more "
		                          "than the %s %s%s",
		                       plan_mem_text(a, sizeof a, proc),
		                       ref > need[1] ? "the --check reference" : "its ranks' peaks",
		                       plan_mem_text(b, sizeof b, have.proc), have.proc_what, tail);
	return RT_OK;
}
