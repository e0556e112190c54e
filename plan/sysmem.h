/* What this machine lets a tool hold (plan/sysmem.c): the smallest memory limit known,
 * for refusing work that cannot fit before allocating it. */
#ifndef PLAN_SYSMEM_H
#define PLAN_SYSMEM_H

#include <stddef.h>
#include <stdint.h>

/* In bytes (-1: none known), and what sets each, for messages:
 * host: MemAvailable (+ SwapFree) of ROOT/proc/meminfo, or the memory limit of the
 * process's cgroup or one above it (ROOT/proc/self/cgroup, ROOT/sys/fs/cgroup), plus
 * SwapFree; proc: the process's own RLIMIT_AS and RLIMIT_DATA. */
typedef struct {
	int64_t host, proc;
	char host_what[2400], proc_what[64];
} PlanSysMem;
void plan_sysmem(const char *root, PlanSysMem *m);
/* The smaller of plan_sysmem's two limits on this machine (-1: none known), what a
 * tool alone may hold, and what sets it into what: words that follow the figure, as
 * in "more than the 22.9 GiB available (MemAvailable, /proc/meminfo)" or "... allowed
 * by the data limit (ulimit -d)". */
int64_t plan_sysmem_limit(char *what, size_t n);
/* 0 when bytes are more than plan_sysmem_limit (no limit known, or fewer than
 * PLAN_FIT_MIN bytes: 1, so that a moment of memory pressure refuses no small work). */
int plan_sysmem_fits(double bytes);
/* MemAvailable + SwapFree of /proc/meminfo's text in bytes (SwapFree alone, 0 when
 * missing, into *swap); -1 without MemAvailable. */
int64_t plan_meminfo_available(const char *text, int64_t *swap);
/* The memory controller's cgroup path in /proc/self/cgroup's text into path: returns
 * 1 for a v1 hierarchy with the memory controller, else 2 for the v2 entry "0::PATH",
 * 0 when neither is there (or the path is longer than n - 1). */
int plan_cgroup_path(const char *text, char *path, size_t n);

#endif
