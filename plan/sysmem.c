/* What this machine lets a tool hold: the smallest memory limit known, read before a
 * big allocation, so a plan too big for the machine is refused with the figures.
 *
 * Linux grants allocations it cannot back (overcommit): a plan too big for the machine
 * does not fail its malloc but fills the memory until the kernel's OOM killer ends the
 * process, or another one, a minute later.  So pipecc compares the ops a plan will
 * hold at least with this limit before it schedules (compiler/pipecc.c) and before
 * --expand copies every line (compiler/driver.c), plan_block_new refuses a block above
 * it (the readers', the lowering's and the simulator's per-op arrays), plan_expand an
 * expansion above it, and piperun compares its ranks' memory peaks with it
 * (runtime/hostmem.c).  The limits:
 *  - the host: MemAvailable + SwapFree (/proc/meminfo);
 *  - the memory limit of the process's cgroup or any cgroup above it (v2 memory.max,
 *    v1 memory.limit_in_bytes), plus SwapFree;
 *  - the process's own address-space and data limits (ulimit -v, -d), apart: what the
 *    process holds alone.
 * The files are read under a root folder (the real one is ""), so tests give a made-up
 * /proc and /sys. */
#include "plan.h"
#include "block.h"
#include "sysmem.h"

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

int64_t plan_meminfo_available(const char *text, int64_t *swap)
{
	int64_t avail = meminfo_field(text, "MemAvailable");
	int64_t sw = meminfo_field(text, "SwapFree");
	*swap = sw < 0 ? 0 : sw;
	return avail < 0 ? -1 : avail + *swap;
}

int plan_cgroup_path(const char *text, char *path, size_t n)
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

void plan_sysmem(const char *root, PlanSysMem *m)
{
	char text[8192], path[2048], file[2300];
	int64_t swap = 0;
	memset(m, 0, sizeof *m);
	m->host = m->proc = -1;
	if (!slurp(root, "/proc/meminfo", text, sizeof text) &&
	    (m->host = plan_meminfo_available(text, &swap)) >= 0)
		snprintf(m->host_what, sizeof m->host_what, "%s",
		         swap ? "available (MemAvailable + SwapFree, /proc/meminfo)"
		              : "available (MemAvailable, /proc/meminfo)");
	int version = slurp(root, "/proc/self/cgroup", text, sizeof text)
	                      ? 0
	                      : plan_cgroup_path(text, path, sizeof path);
	int64_t cg = version ? cgroup_limit(root, version, path, file, sizeof file) : -1;
	if (cg >= 0 && (m->host < 0 || cg + swap < m->host)) {
		m->host = cg + swap;
		snprintf(m->host_what, sizeof m->host_what, "allowed by the cgroup limit %s%s",
		         file, swap ? " (and SwapFree)" : "");
	}
	static const struct {
		int res;
		const char *what;
	} lim[] = {{RLIMIT_AS, "allowed by the address-space limit (ulimit -v)"},
	           {RLIMIT_DATA, "allowed by the data limit (ulimit -d)"}};
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

int plan_sysmem_fits(double bytes)
{
	if (bytes < (double)PLAN_FIT_MIN) // a machine short of that is full for a moment
		return 1;                     // (malloc then fails cleanly), not too small
	int64_t limit = plan_sysmem_limit(NULL, 0);
	return limit < 0 || bytes <= (double)limit;
}

int64_t plan_sysmem_limit(char *what, size_t n)
{
	PlanSysMem m;
	plan_sysmem("", &m);
	int proc = m.proc >= 0 && (m.host < 0 || m.proc < m.host);
	if (what)
		snprintf(what, n, "%s", proc ? m.proc_what : m.host_what);
	return proc ? m.proc : m.host;
}
