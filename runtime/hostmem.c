/* Host memory: a CPU run that cannot fit is refused before any rank allocates.
 *
 * Linux grants allocations it cannot back (overcommit), so a plan too big for the
 * machine does not fail its malloc: it fills the memory until the kernel's OOM killer
 * ends the process, or another one, a minute later.  So the cpu device's open compares
 * what the run will hold with what the host and the process may give, and notes
 * (rt_world_unable) a run that cannot fit, with both figures:
 *  - the need is a lower bound: the memory model's peak of every rank this host runs
 *    (plan/mem.h, the figures pipesim prints and piperun measures), their sum, as the
 *    ranks run side by side, and under --check on the root at least the sequential
 *    reference (the whole model with its gradients, their sum, the optimizer state and
 *    every microbatch's saved activations), which runs after the ranks have ended;
 *  - the supply is the smallest known limit: the host's MemAvailable + SwapFree
 *    (/proc/meminfo), the memory limit of the process's cgroup or of any cgroup above it
 *    (v2 memory.max, v1 memory.limit_in_bytes; plus SwapFree), and for this process's
 *    own share its address-space and data limits (ulimit -v, -d).
 * A need that is only a bound refuses no run that fits; --no-memory-check skips the
 * check (a run that may fit in swap the figures leave out).  The files are read under
 * a root folder (the real one is ""), so tests give a made-up /proc and /sys. */
#include "rt_private.h"

#include "../plan/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* A cgroup limit at or above this is "no limit" (v1 writes 2^63 rounded to pages). */
#define NO_LIMIT (INT64_C(1) << 60)

/* Reads ROOT/path, up to n - 1 bytes, NUL-terminated; 0, or -1 when unreadable. */
static int slurp(const char *root, const char *path, char *buf, size_t n)
{
	char name[4096];
	snprintf(name, sizeof name, "%s%s", root, path);
	FILE *f = fopen(name, "r");
	if (!f)
		return -1;
	size_t got = fread(buf, 1, n - 1, f);
	buf[got] = 0;
	fclose(f);
	return got ? 0 : -1;
}

/* The value of `Key:  N kB` in meminfo text, in bytes; -1 when missing. */
static int64_t meminfo_field(const char *text, const char *key)
{
	size_t k = strlen(key);
	for (const char *s = text; s; s = strchr(s, '\n'), s = s ? s + 1 : NULL)
		if (!strncmp(s, key, k) && s[k] == ':') {
			char *end;
			long long v = strtoll(s + k + 1, &end, 10);
			if (end == s + k + 1 || v < 0)
				return -1;
			while (*end == ' ')
				end++;
			return !strncmp(end, "kB", 2) ? v * 1024 : v;
		}
	return -1;
}

int64_t rt_meminfo_available(const char *text, int64_t *swap)
{
	int64_t avail = meminfo_field(text, "MemAvailable");
	int64_t sw = meminfo_field(text, "SwapFree");
	*swap = sw < 0 ? 0 : sw;
	return avail < 0 ? -1 : avail + *swap;
}

int rt_cgroup_path(const char *text, char *path, size_t n)
{
	int found = 0;
	for (const char *s = text; s && *s; s = strchr(s, '\n'), s = s ? s + 1 : NULL) {
		const char *c1 = strchr(s, ':'), *eol = strchr(s, '\n');
		const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c1 || !c2 || (eol && c2 > eol))
			continue;
		size_t len = eol ? (size_t)(eol - c2 - 1) : strlen(c2 + 1);
		if (len + 1 > n || c2[1] != '/')
			continue;
		/* v1: a hierarchy whose controllers include memory; v2: "0::PATH", taken
		 * only when no v1 memory controller is mounted (a hybrid system's). */
		int v1 = 0;
		for (const char *c = c1 + 1; c < c2;) {
			const char *e = memchr(c, ',', (size_t)(c2 - c));
			size_t cl = e ? (size_t)(e - c) : (size_t)(c2 - c);
			v1 |= cl == 6 && !strncmp(c, "memory", 6);
			c += cl + 1;
		}
		int v2 = c2 == c1 + 1 && !strncmp(s, "0:", 2);
		if (v1 || (v2 && !found)) {
			memcpy(path, c2 + 1, len);
			path[len] = 0;
			found = v1 ? 1 : 2;
			if (v1)
				break;
		}
	}
	return found;
}

/* The smallest memory limit of the cgroup at path and the cgroups above it (version
 * 1 or 2), and in `file` the one that sets it; -1 when none is set. */
static int64_t cgroup_limit(const char *root, int version, const char *path, char *file,
                            size_t n)
{
	const char *dir = version == 1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
	const char *leaf = version == 1 ? "memory.limit_in_bytes" : "memory.max";
	char p[2048], f[2300], buf[64];
	int64_t best = -1;
	snprintf(p, sizeof p, "%s", path);
	for (;;) {
		size_t len = strlen(p);
		while (len > 1 && p[len - 1] == '/')
			p[--len] = 0;
		snprintf(f, sizeof f, "%s%s/%s", dir, len > 1 ? p : "", leaf);
		if (!slurp(root, f, buf, sizeof buf)) {
			char *end;
			long long v = strtoll(buf, &end, 10);
			if (end != buf && v >= 0 && v < NO_LIMIT && (best < 0 || v < best)) {
				best = v;
				snprintf(file, n, "%s", f);
			}
		}
		char *slash = strrchr(p, '/');
		if (!slash || len <= 1)
			break;
		slash[slash == p ? 1 : 0] = 0;
	}
	return best;
}

void rt_host_mem(const char *root, RtHostMem *m)
{
	char text[8192], path[2048], file[2300];
	int64_t swap = 0;
	memset(m, 0, sizeof *m);
	m->host = m->proc = -1;
	if (!slurp(root, "/proc/meminfo", text, sizeof text) &&
	    (m->host = rt_meminfo_available(text, &swap)) >= 0)
		snprintf(m->host_what, sizeof m->host_what, "%s",
		         swap ? "available (MemAvailable + SwapFree, /proc/meminfo)"
		              : "available (MemAvailable, /proc/meminfo)");
	int version = slurp(root, "/proc/self/cgroup", text, sizeof text)
	                      ? 0
	                      : rt_cgroup_path(text, path, sizeof path);
	int64_t cg = version ? cgroup_limit(root, version, path, file, sizeof file) : -1;
	if (cg >= 0 && (m->host < 0 || cg + swap < m->host)) {
		m->host = cg + swap;
		snprintf(m->host_what, sizeof m->host_what, "allowed by the cgroup limit %s%s",
		         file, swap ? " (and SwapFree)" : "");
	}
	static const struct {
		int res;
		const char *what;
	} lim[] = {{RLIMIT_AS, "the address-space limit (ulimit -v)"},
	           {RLIMIT_DATA, "the data limit (ulimit -d)"}};
	for (size_t i = 0; i < sizeof lim / sizeof *lim; i++) {
		struct rlimit rl;
		if (getrlimit(lim[i].res, &rl) || rl.rlim_cur == RLIM_INFINITY ||
		    rl.rlim_cur >= (rlim_t)NO_LIMIT)
			continue;
		if (m->proc < 0 || (int64_t)rl.rlim_cur < m->proc) {
			m->proc = (int64_t)rl.rlim_cur;
			snprintf(m->proc_what, sizeof m->proc_what, "%s", lim[i].what);
		}
	}
}

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
		n += st->nparams * (12 + state);
		n += (st->save[0] + st->save[1] + st->save[2]) * p->microbatches;
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

/* What the ranks on this host hold at least: the sum of their peaks into need[0],
 * their count into count[0]; the same of this process's ranks into need[1], count[1];
 * *later: a process before this one runs on the host.  -1 when out of memory. */
static int ranks_need(RtWorld *w, int64_t need[2], int count[2], int *later)
{
	const Plan *p = w->plan;
	char *hosts = NULL;
	if (rt_world_hosts(w, &hosts))
		return -1;
	need[0] = need[1] = 0;
	count[0] = count[1] = 0;
	int rc = 0;
	for (int r = 0; r < p->world && !rc; r++) {
		int mine = r >= w->first_local && r < w->first_local + w->nlocal;
		int64_t peak;
		if (!mine && (!hosts || strcmp(hosts + (size_t)r * RT_HOST_BYTES, w->host)))
			continue;
		*later |= r < w->first_local;
		if ((rc = rank_peak(p, r, &peak)))
			break;
		need[0] += peak;
		count[0]++;
		need[1] += mine ? peak : 0;
		count[1] += mine;
	}
	free(hosts);
	return rc;
}

int rt_host_mem_check(RtWorld *w, int ranks_here)
{
	const Plan *p = w->plan;
	int64_t need[2] = {0, 0};
	int count[2] = {0, 0}, later = 0;
	if (w->opt.no_mem_check)
		return RT_OK;
	if (ranks_here && ranks_need(w, need, count, &later))
		return rt_world_error(w, "out of memory");
	int64_t ref = w->opt.check && w->root ? reference_bytes(w) : 0;
	RtHostMem have;
	rt_host_mem("", &have);
	char a[32], b[32], who[128];
	const char *tail = "; run fewer ranks on a host (mpirun over several), make the plan "
	                   "smaller, or give --no-memory-check to try anyway";
	int by_ref = ref > need[0];
	int64_t host = by_ref ? ref : need[0], proc = need[1] > ref ? need[1] : ref;
	if (by_ref)
		snprintf(who, sizeof who, "the --check reference: the whole model");
	else if (count[0] == 1)
		snprintf(who, sizeof who, "its rank's peak, as pipesim's memory table gives it");
	else
		snprintf(who, sizeof who, "%s %d ranks' peaks together, as pipesim's memory table "
		         "gives them", count[0] == p->world ? "its" : "the host's", count[0]);
	/* A host's processes fail alike: its first one says why. */
	w->quiet |= later && ((have.host >= 0 && host > have.host) ||
	                      (have.proc >= 0 && proc > have.proc));
	if (have.host >= 0 && host > have.host)
		return rt_world_unable(w, "the run needs at least %s on host %s (%s), more than "
		                          "the %s %s%s",
		                       plan_mem_text(a, sizeof a, host), w->host, who,
		                       plan_mem_text(b, sizeof b, have.host), have.host_what, tail);
	if (have.proc >= 0 && proc > have.proc)
		return rt_world_unable(w, "the run needs at least %s in this process (%s), more "
		                          "than the %s that %s allows%s",
		                       plan_mem_text(a, sizeof a, proc),
		                       ref > need[1] ? "the --check reference" : "its ranks' peaks",
		                       plan_mem_text(b, sizeof b, have.proc), have.proc_what, tail);
	return RT_OK;
}
