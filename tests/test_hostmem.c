/* Host memory (plan/sysmem.c, runtime/hostmem.c): the limits a tool is held to, read
 * from a made-up /proc and /sys (meminfo, the process's cgroup of either version and
 * the cgroups above it); a block of ops beyond them refused at once; and the world
 * refusing a plan that cannot fit before any rank allocates, with the need and the
 * limit in its message, while a plan that fits runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../compiler/pipecc.h"
#include "../plan/sysmem.h"
#include "../runtime/rt_private.h"
#include "plan_lib.h" // compile_pipe
#include "../plan/block.h"
#include "../plan/oom.h"

static void hostmem__meminfo__available_plus_swap(void **state)
{
	(void)state;
	int64_t swap = -5;
	const char *both = "MemTotal:       32000000 kB\nMemFree:  100 kB\nMemAvailable:    1000 kB\n"
	                   "SwapTotal: 50 kB\nSwapFree:         24 kB\n";
	assert_int_equal(plan_meminfo_available(both, &swap), 1024 * 1024);
	assert_int_equal(swap, 24 * 1024);
	assert_int_equal(plan_meminfo_available("MemAvailable: 2048 kB\n", &swap), 2048 * 1024);
	assert_int_equal(swap, 0);
	/* A kernel before 3.14 has no MemAvailable: nothing is known. */
	assert_int_equal(plan_meminfo_available("MemTotal: 1 kB\nMemFree: 1 kB\n", &swap), -1);
	assert_int_equal(plan_meminfo_available("MemAvailable: lots\n", &swap), -1);
	/* A longer name that starts with the key is another field. */
	assert_int_equal(plan_meminfo_available("MemAvailableX: 1 kB\nMemAvailable: 3 kB\n", &swap),
	                 3 * 1024);
}

static void hostmem__cgroup_path__v1_memory_first_else_v2(void **state)
{
	(void)state;
	char path[64];
	/* A hybrid system: the v1 memory controller holds the limits. */
	assert_int_equal(plan_cgroup_path("9:name=systemd:/\n4:memory:/jobs/7\n0::/\n", path,
	                                sizeof path), 1);
	assert_string_equal(path, "/jobs/7");
	assert_int_equal(plan_cgroup_path("0::/\n3:cpu,memory,pids:/a/b\n", path, sizeof path), 1);
	assert_string_equal(path, "/a/b");
	assert_int_equal(plan_cgroup_path("0::/user.slice/run-1.scope\n", path, sizeof path), 2);
	assert_string_equal(path, "/user.slice/run-1.scope");
	/* memoryx is not memory; no entry at all is none. */
	assert_int_equal(plan_cgroup_path("4:memoryx:/a\n", path, sizeof path), 0);
	assert_int_equal(plan_cgroup_path("", path, sizeof path), 0);
	assert_int_equal(plan_cgroup_path("0::/a-path-longer-than-the-buffer-we-give-it\n", path, 8), 0);
}

/* Writes text into root/rel, making the folders on the way. */
static void put(const char *root, const char *rel, const char *text)
{
	char name[1024];
	snprintf(name, sizeof name, "%s/%s", root, rel);
	for (char *s = name + strlen(root) + 1; (s = strchr(s, '/')); s++) {
		*s = 0;
		mkdir(name, 0700);
		*s = '/';
	}
	FILE *f = fopen(name, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void hostmem__limits__smallest_known_and_what_sets_it(void **state)
{
	(void)state;
	char root[] = "/tmp/pipecc-hostmem-XXXXXX";
	assert_non_null(mkdtemp(root));
	PlanSysMem m;
	/* Nothing readable: no limit known. */
	plan_sysmem(root, &m);
	assert_int_equal(m.host, -1);

	put(root, "proc/meminfo", "MemAvailable: 8388608 kB\nSwapFree: 0 kB\n");
	plan_sysmem(root, &m);
	assert_int_equal(m.host, INT64_C(8) << 30);
	assert_non_null(strstr(m.host_what, "MemAvailable"));

	/* v2: the leaf says max, its parent 2 GiB; the parent's limit holds. */
	put(root, "proc/self/cgroup", "0::/a/b\n");
	put(root, "sys/fs/cgroup/a/b/memory.max", "max\n");
	put(root, "sys/fs/cgroup/a/memory.max", "2147483648\n");
	plan_sysmem(root, &m);
	assert_int_equal(m.host, INT64_C(2) << 30);
	assert_non_null(strstr(m.host_what, "/sys/fs/cgroup/a/memory.max"));
	/* A limit above what the host has left does not count. */
	put(root, "sys/fs/cgroup/a/memory.max", "17179869184\n");
	plan_sysmem(root, &m);
	assert_int_equal(m.host, INT64_C(8) << 30);

	/* v1 wins where its memory controller is mounted; its "no limit" is no limit; the
	 * swap left adds to a cgroup's limit as to the host's. */
	put(root, "proc/self/cgroup", "0::/a/b\n5:memory:/job\n");
	put(root, "proc/meminfo", "MemAvailable: 8388608 kB\nSwapFree: 1024 kB\n");
	put(root, "sys/fs/cgroup/memory/job/memory.limit_in_bytes", "9223372036854771712\n");
	plan_sysmem(root, &m);
	assert_int_equal(m.host, (INT64_C(8) << 30) + (1 << 20));
	put(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n");
	plan_sysmem(root, &m);
	assert_int_equal(m.host, (INT64_C(1) << 30) + (1 << 20));
	assert_non_null(strstr(m.host_what, "/sys/fs/cgroup/memory/memory.limit_in_bytes"));
	char cmd[1100];
	snprintf(cmd, sizeof cmd, "rm -r '%s'", root);
	assert_int_equal(system(cmd), 0);
}

/* A block of per-op data more than the machine has is refused at once (overcommit
 * would grant it), and the out-of-memory text says so; a small one is not read for. */
static void hostmem__block__refused_beyond_the_limit(void **state)
{
	(void)state;
	char what[2400], t[512];
	int64_t limit = plan_sysmem_limit(what, sizeof what);
	if (limit < 0) {
		print_message("no memory limit known here: nothing to refuse\n");
		return;
	}
	size_t big = (size_t)limit + PLAN_FIT_MIN;
	void *raw = (void *)1;
	errno = 0;
	assert_null(plan_block_new(big, 0, &raw));
	assert_null(raw);
	assert_int_equal(errno, ENOMEM);
	assert_non_null(strstr(plan_oom_text(t, sizeof t, 0, big), ": more than the "));
	assert_non_null(strstr(t, what));
	assert_null(strstr(plan_oom_text(t, sizeof t, 1000, 4096), "more than"));
	void *ok = plan_block_new((size_t)1 << 20, 1, &raw);
	assert_non_null(ok);
	free(raw);
}

/* Runs p on the threads backend; returns rt_world_run's code and the report. */
static int run(const Plan *p, int check, char *report, size_t n)
{
	RtOptions o = {.backend = "threads", .steps = 1, .seed = 1, .check = check,
	               .timeout_s = 20, .blas_threads = 1};
	RtWorld *w = rt_world_open(p, &o, report, n);
	assert_non_null(w);
	RtResult res;
	int rc = rt_world_run(w, &res);
	FILE *f = fmemopen(report, n, "w");
	rt_world_report(w, f);
	fclose(f);
	if (!rc)
		rt_result_free(&res);
	rt_world_close(w, rc != 0);
	return rc;
}

static void hostmem__world__refuses_what_cannot_fit_runs_what_fits(void **state)
{
	(void)state;
	/* 65536 microbatches of a 2^22 x 65536 output (1.1 TB) held from F to B: 72 PB,
	 * more than any host has, refused before a byte of it is allocated.  (Were it not,
	 * the first output's malloc would fail at once rather than fill the memory.) */
	const char *big = "pipeline big;\nmesh pp=2;\nmicrobatches 65536;\ninput 4194304x4;\n"
	                  "stage s0 { linear 65536; }\nstage s1 { linear 4; loss mse; }\n"
	                  "schedule gpipe;\n";
	Plan *p = compile_pipe(big, (PipeccOptions){0}, NULL, 0);
	assert_non_null(p);
	char report[2048];
	assert_int_not_equal(run(p, 0, report, sizeof report), 0);
	assert_non_null(strstr(report, "the run needs at least"));
	assert_non_null(strstr(report, "PB on host"));
	assert_non_null(strstr(report, "its 2 ranks' peaks together"));
	assert_non_null(strstr(report, "--no-memory-check"));
	plan_free(p);

	const char *small = "pipeline small;\nmesh pp=2;\nmicrobatches 4;\ninput 8x16;\n"
	                    "stage s0 { linear 16; relu; }\nstage s1 { linear 16; loss mse; }\n"
	                    "schedule 1f1b;\n";
	p = compile_pipe(small, (PipeccOptions){0}, NULL, 0);
	assert_non_null(p);
	assert_int_equal(run(p, 1, report, sizeof report), 0);
	plan_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(hostmem__meminfo__available_plus_swap),
	    cmocka_unit_test(hostmem__cgroup_path__v1_memory_first_else_v2),
	    cmocka_unit_test(hostmem__limits__smallest_known_and_what_sets_it),
	    cmocka_unit_test(hostmem__block__refused_beyond_the_limit),
	    cmocka_unit_test(hostmem__world__refuses_what_cannot_fit_runs_what_fits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
