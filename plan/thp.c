/* Whether the plan's big blocks are offered for transparent huge pages (plan_block_new):
 * the machine's answer, read from sysfs.  Huge pages cut the kernel's share of a tool
 * holding millions of ops (one fault and one zeroing per huge page instead of per 4 KiB
 * page), except where a hypervisor takes back free memory: on a VM whose balloon reports
 * free blocks to its host, huge pages come from memory so given back, which the host
 * must back again at its first write.  On the 2-core VM we measure on, pipesim's report
 * on two threads after 3 s idle took 0.63-0.74 s in 2 MiB pages and 0.34-0.54 s in 64
 * KiB pages (their first runs), against 0.22-0.24 s in small pages (docs/performance.md,
 * "Huge pages, decided by the machine").  So the blocks are offered when the kernel
 * gives huge pages to regions that ask for them and nothing reports free memory to a
 * host.  PIPECC_HUGE_PAGES=1 or 0 overrides the answer.  The same fact sizes the plan
 * writers' write() calls (plan_write_piece, par_out.h). */
#include "plan.h"
#include "thp.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The first line of sys/rel into buf (its newline cut); 0, or -1 when it cannot be read. */
static int read_line(const char *sys, const char *rel, char *buf, size_t n)
{
	char path[512];
	if ((size_t)snprintf(path, sizeof path, "%s/%s", sys, rel) >= sizeof path)
		return -1;
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char *s = fgets(buf, (int)n, f);
	fclose(f);
	if (!s)
		return -1;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

/* A THP mode file's chosen word, the one in brackets ("always [madvise] never"). */
typedef enum {
	THP_UNKNOWN, // no file, or no word in brackets
	THP_ALWAYS,  // every anonymous region
	THP_MADVISE, // regions offered by madvise(MADV_HUGEPAGE)
	THP_INHERIT, // a page size following the top-level mode
	THP_NEVER,   // none
} ThpMode;

static ThpMode read_mode(const char *sys, const char *rel)
{
	static const char *const names[] = {"[always]", "[madvise]", "[inherit]", "[never]"};
	static const ThpMode modes[] = {THP_ALWAYS, THP_MADVISE, THP_INHERIT, THP_NEVER};
	char buf[256];
	if (read_line(sys, rel, buf, sizeof buf))
		return THP_UNKNOWN;
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (strstr(buf, names[i]))
			return modes[i];
	return THP_UNKNOWN;
}

static int gives(ThpMode m, ThpMode top)
{
	if (m == THP_INHERIT)
		m = top;
	return m == THP_ALWAYS || m == THP_MADVISE;
}

#define THP_DIR "kernel/mm/transparent_hugepage"

/* The largest page THP gives a region offered by madvise: of the page sizes under
 * THP_DIR (hugepages-<N>kB, Linux 6.8 and later) those in `always` or `madvise` mode,
 * or `inherit` with the top level in one of them; before 6.8, the PMD size when the top
 * level is.  The kernel tries the largest first. */
static int64_t thp_largest(const char *sys)
{
	ThpMode top = read_mode(sys, THP_DIR "/enabled");
	if (top == THP_UNKNOWN)
		return 0; // no THP in this kernel
	char path[512];
	snprintf(path, sizeof path, "%s/" THP_DIR, sys);
	DIR *d = opendir(path);
	int64_t largest = 0;
	int sizes = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		long kb;
		char rest[8], rel[300];
		if (sscanf(e->d_name, "hugepages-%ld%7s", &kb, rest) != 2 || strcmp(rest, "kB") ||
		    kb <= 0)
			continue;
		sizes++;
		snprintf(rel, sizeof rel, THP_DIR "/%s/enabled", e->d_name);
		if (gives(read_mode(sys, rel), top) && (int64_t)kb * 1024 > largest)
			largest = (int64_t)kb * 1024;
	}
	if (d)
		closedir(d);
	if (sizes || !gives(top, top))
		return largest;
	char buf[64];
	long long pmd = 0;
	if (read_line(sys, THP_DIR "/hpage_pmd_size", buf, sizeof buf) == 0)
		pmd = atoll(buf);
	return pmd > 0 ? pmd : (int64_t)2 << 20;
}

/* A virtio balloon (device 0x0005) that negotiated free page reporting (feature bit 5,
 * VIRTIO_BALLOON_F_REPORTING: the features file is one '0' or '1' per bit), or Hyper-V's
 * balloon driver loaded (it reports free pages whenever its host asks). */
static int reports_free_pages(const char *sys)
{
	char path[512], rel[320], buf[300];
	snprintf(path, sizeof path, "%s/bus/virtio/devices", sys);
	DIR *d = opendir(path);
	int found = 0;
	for (struct dirent *e; d && !found && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(rel, sizeof rel, "bus/virtio/devices/%s/device", e->d_name);
		if (read_line(sys, rel, buf, sizeof buf) || strcmp(buf, "0x0005"))
			continue;
		snprintf(rel, sizeof rel, "bus/virtio/devices/%s/features", e->d_name);
		found = read_line(sys, rel, buf, sizeof buf) == 0 && strlen(buf) > 5 && buf[5] == '1';
	}
	if (d)
		closedir(d);
	snprintf(path, sizeof path, "%s/bus/vmbus/drivers/hv_balloon", sys);
	DIR *h = found ? NULL : opendir(path);
	if (h) {
		found = 1;
		closedir(h);
	}
	return found;
}

PlanThp plan_thp_read(const char *sys)
{
	PlanThp t = {.largest = thp_largest(sys)};
	if (reports_free_pages(sys)) {
		char buf[64];
		int order = 9; // the kernel's default: a pageblock, 2 MiB of 4 KiB pages
		if (read_line(sys, "module/page_reporting/parameters/page_reporting_order", buf,
		              sizeof buf) == 0 && atoi(buf) >= 0 && atoi(buf) < 20)
			order = atoi(buf);
		long page = sysconf(_SC_PAGESIZE);
		t.reported = (int64_t)(page > 0 ? page : 4096) << order;
	}
	t.offer = t.largest > 0 && t.reported == 0;
	return t;
}

/* Not a state of the program's: a fact of the machine, read once. */
static PlanThp machine;
static pthread_once_t machine_once = PTHREAD_ONCE_INIT;

static void read_machine(void)
{
	machine = plan_thp_read("/sys");
}

const PlanThp *plan_thp_machine(void)
{
	pthread_once(&machine_once, read_machine);
	return &machine;
}

int plan_huge_pages(void)
{
	const char *e = getenv("PIPECC_HUGE_PAGES");
	if (e && (!strcmp(e, "0") || !strcmp(e, "1")))
		return e[0] == '1';
	return plan_thp_machine()->offer;
}

void plan_thp_describe(const PlanThp *t, char *buf, size_t n)
{
	if (!t->largest)
		snprintf(buf, n, "no: the kernel gives no huge pages to regions that ask");
	else if (!t->reported)
		snprintf(buf, n, "yes: %lld KiB pages, and nothing reports free memory to a host",
		         (long long)(t->largest >> 10));
	else
		snprintf(buf, n, "no: %lld KiB pages, but free blocks of %lld KiB are reported to "
		         "the host", (long long)(t->largest >> 10), (long long)(t->reported >> 10));
}
