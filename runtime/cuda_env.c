/* The CUDA parts' host-only logic (cuda_env.h): device choice, the check that no two
 * ranks of one host share a GPU, the text of a failed library call.  Plain C with no
 * CUDA headers, built and tested everywhere; device_cuda.cu and comm_nccl.cu call it. */
#include "cuda_env.h"
#include "../plan/line.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *rt_cuda_nccl_name(int res)
{
	static const char *const names[] = {
		"ncclSuccess",      "ncclUnhandledCudaError", "ncclSystemError",
		"ncclInternalError", "ncclInvalidArgument",   "ncclInvalidUsage",
		"ncclRemoteError",  "ncclInProgress",         "ncclTimeout",
	};
	if (res >= 0 && res < (int)(sizeof names / sizeof *names))
		return names[res];
	return "ncclResult (unknown)";
}

int rt_cuda_report(RtWorld *w, RtRank *r, const char *call, const char *name, const char *msg,
                   const char *detail, const char *file, int line)
{
	const char *host = w ? rt_world_host(w) : "?";
	char who[160];
	if (!r)
		snprintf(who, sizeof who, "host %s", host);
	else if (rt_rank_id(r) == RT_REF_RANK)
		snprintf(who, sizeof who, "host %s, the --check reference", host);
	else
		snprintf(who, sizeof who, "host %s, rank %d", host, rt_rank_id(r));
	name = name ? name : "?";
	msg = msg ? msg : "?";
	detail = detail ? detail : "";
	if (r)
		return rt_error(r, "%s:%d: %s failed on %s: %s: %s%s", file, line, call, who, name, msg,
		                detail);
	if (w)
		return rt_world_error(w, "%s:%d: %s failed on %s: %s: %s%s", file, line, call, who,
		                      name, msg, detail);
	return RT_EFAIL;
}

int rt_cuda_pick_device(int plan_device, int local_rank, int ndev, char *why, size_t n)
{
	if (ndev <= 0) {
		snprintf(why, n, "no CUDA device is visible");
		return -1;
	}
	if (plan_device >= 0 && plan_device < ndev)
		return plan_device;
	if (local_rank >= 0)
		return local_rank % ndev;
	snprintf(why, n, "the plan puts the rank on device %d, but this process sees %d CUDA "
	                 "device%s (CUDA_VISIBLE_DEVICES?)",
	         plan_device, ndev, ndev == 1 ? "" : "s");
	return -1;
}

typedef struct {
	const char *host;
	int device, rank;
} Seat;

static int seat_cmp(const void *a, const void *b)
{
	const Seat *x = a, *y = b;
	int c = strcmp(x->host, y->host);
	if (c)
		return c;
	if (x->device != y->device)
		return x->device < y->device ? -1 : 1;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Sorted by (host, device, rank), two ranks on one GPU are neighbours: n log n for
 * worlds of thousands of ranks. */
int rt_cuda_shared_device(const Plan *p, const char *hosts, size_t stride, const char *host,
                          int nccl_version, char *why, size_t n)
{
	Seat *s = malloc((size_t)p->world * sizeof *s);
	if (!s) {
		snprintf(why, n, "out of memory");
		return -1;
	}
	for (int r = 0; r < p->world; r++) {
		PlanRank tmp;
		const char *h = hosts ? hosts + (size_t)r * stride : host;
		s[r] = (Seat){h, plan_rank(p, r, &tmp)->device, r};
	}
	qsort(s, (size_t)p->world, sizeof *s, seat_cmp);
	int rc = 0;
	for (int k = 1; k < p->world && rc == 0; k++) {
		if (strcmp(s[k - 1].host, s[k].host) || s[k - 1].device != s[k].device)
			continue;
		char nccl[48];
		if (nccl_version >= 10000)
			snprintf(nccl, sizeof nccl, "%d.%d.%d", nccl_version / 10000,
			         nccl_version / 100 % 100, nccl_version % 100);
		else
			snprintf(nccl, sizeof nccl, "before 2.30");
		snprintf(why, n, "the plan puts ranks %d and %d on one GPU, device %d of host %s (its "
		                 "devices table), and NCCL %s refuses two ranks of one communicator on "
		                 "one GPU: give every rank of a host its own device (`devices [..]` or "
		                 "`devices per_node=N` in the .pipe)",
		         s[k - 1].rank, s[k].rank, s[k].device, s[k].host, nccl);
		rc = -1;
	}
	free(s);
	return rc;
}
