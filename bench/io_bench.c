/* The plan text's two ends, timed alone (bench/bench_io.sh): plan_read of a plan file
 * (no verify), then plan_write of it to a regular file (one pass, the header put in its
 * place last) and to /dev/null (not seekable: two passes, as into a pipe); then the
 * binary form's: plan_write_binary to OUT.bin and plan_read of that.  Prints CPU
 * seconds and M ops/s of each; the best of REPS runs, since the machine may be shared.
 * Then the machine's floor for any tool that holds the plan as PlanOps (24 bytes an op):
 * the kernel's cost of handing out that many fresh pages (touched once each), and of
 * writing them once they are in, as a ceiling in M ops/s that no such tool passes; and
 * the same for a block of them offered for huge pages, as the tools hold their ops
 * with PIPECC_HUGE_PAGES=1 (plan_block_new).  Last, the passes pipesim runs on the plan
 * once it is read, each alone on one thread, in memory: the verifier, the strict
 * simulation without and with the per-op times, the memory model; with IO_SIM_THREADS
 * above 1, the readers (text and binary) with plan_threads at that many, and the strict
 * simulation on that many threads (sim/psim.c), in wall seconds (pipesim's report runs
 * it on half of --threads).  With IO_WC set to
 * `wc -l`'s seconds on the plan's text, every figure is also printed as a ratio to it.
 * `io_bench --thp` prints what decides whether the tools offer their blocks for huge
 * pages on this machine (plan/thp.c), and how big the plan writers' writes are
 * (plan_write_piece). */
#include "../plan/binary.h"
#include "../plan/io.h"
#include "../plan/mem.h"
#include "../plan/par.h"
#include "../plan/par_out.h"
#include "../sim/sim.h"
#include "../plan/block.h"
#include "../plan/thp.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double cpu(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double wall(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double wc_s; // IO_WC: wc -l's seconds on the plan's text; 0: not given
static int sim_threads; // IO_SIM_THREADS: the strict run's passes again on these threads

static const char *unit = "cpu"; // what show's seconds are

static void show(const char *what, double s, int64_t ops)
{
	printf("  %-28s %7.3f s %-4s %6.1f M ops/s", what, s, unit, s > 0 ? (double)ops / s / 1e6 : 0);
	if (wc_s > 0)
		printf("  %5.1fx wc -l", s / wc_s);
	printf("\n");
}

/* CPU seconds (user and system) to fault in n fresh bytes, a byte a page, and then to
 * write all of them (*fill); the best of reps.  Mapped here, not malloc'd: the heap
 * would hand back the plan's freed pages, already in.  huge: in a block as the tools
 * get one (plan_block_new; this many bytes malloc maps fresh). */
static double fresh_pages(size_t n, int reps, double *fill, int huge)
{
	double best = 1e30;
	*fill = 1e30;
	for (int i = 0; i < reps; i++) {
		double t = cpu();
		void *raw = NULL;
		char *b = huge ? plan_block_new(n, 0, &raw)
		               : mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (b == MAP_FAILED || !b) {
			fprintf(stderr, "io_bench: out of memory for %zu bytes\n", n);
			exit(1);
		}
		for (size_t k = 0; k < n; k += 4096)
			((volatile char *)b)[k] = 1;
		double u = cpu();
		memset(b, 2, n);
		__asm__ volatile("" : : "r"(b) : "memory"); // the stores count: nothing elides them
		double v = cpu();
		if (huge)
			free(raw);
		else
			munmap(b, n);
		best = u - t < best ? u - t : best;
		*fill = v - u < *fill ? v - u : *fill;
	}
	return best;
}

/* CPU seconds of one pass over p; the best of reps.  which: 0 plan_verify, 1 sim_run
 * (strict), 2 the same keeping the per-op times, 3 plan_mem_all, 4 sim_run keeping the
 * critical path alone (the report's).  The runs are told the plan verified, as
 * pipesim's run after the verifier is (on one thread).  With threads above 1, the run on
 * that many (sim/psim.c), and wall seconds. */
static double pass(const Plan *p, int which, int reps, int threads)
{
	double best = 1e30;
	for (int i = 0; i < reps; i++) {
		PlanError err;
		SimResult res;
		SimOptions opt = {.model = SIM_STRICT,
		                  .verified = 1,
		                  .record_ops = which == 2   ? SIM_RECORD_ALL
		                                : which == 4 ? SIM_RECORD_PATH
		                                             : SIM_RECORD_NONE,
		                  .threads = threads};
		PlanMem *mem = NULL;
		int rc = 0;
		double (*clock)(void) = threads > 1 ? wall : cpu;
		double t = clock();
		if (which == 0)
			rc = plan_verify(p, &err);
		else if (which == 3)
			rc = (mem = plan_mem_all(p)) ? 0 : -1;
		else
			rc = sim_run(p, &opt, &res);
		t = clock() - t;
		if (which == 1 || which == 2 || which == 4) {
			rc = rc || res.verdict != SIM_OK || (threads > 1 && res.threads < 2);
			sim_result_free(&res);
		}
		free(mem);
		if (rc) {
			fprintf(stderr, "io_bench: pass %d failed on the plan\n", which);
			exit(1);
		}
		best = t < best ? t : best;
	}
	return best;
}

/* Wall seconds of plan_read of path with plan_threads = threads, the best of reps. */
static double read_wall(const char *path, int threads, int reps)
{
	double best = 1e30;
	for (int i = 0; i < reps; i++) {
		PlanError err;
		plan_threads = threads;
		double t = wall();
		Plan *p = plan_read_file(path, &err);
		t = wall() - t;
		plan_threads = 1;
		if (!p) {
			fprintf(stderr, "%s:%lld: error: %s\n", path, (long long)err.line, err.msg);
			exit(1);
		}
		plan_free(p);
		best = t < best ? t : best;
	}
	return best;
}

static void passes(const Plan *p, const char *text, const char *bin, int reps)
{
	static const char *const name[] = {"plan_verify", "sim_run, strict",
	                                   "  keeping per-op times", "plan_mem_all",
	                                   "  keeping the critical path"};
	int64_t ops = plan_total_ops(p);
	double t[5];
	printf("pipesim's passes alone, in memory, one thread (best of %d):\n", reps);
	for (int i = 0; i < 5; i++)
		show(name[i], t[i] = pass(p, i, reps, 1), ops);
	show("verify + path + memory", t[0] + t[4] + t[3], ops); // the report's passes
	if (sim_threads < 2)
		return;
	printf("on %d threads (plan/read_par.c, sim/psim.c), wall seconds (best of %d):\n",
	       sim_threads, reps);
	unit = "wall";
	show("plan_read (no verify)", read_wall(text, sim_threads, reps), ops);
	show("plan_read, binary (no verify)", read_wall(bin, sim_threads, reps), ops);
	show("sim_run, strict", pass(p, 1, reps, sim_threads), ops);
	show("  keeping the critical path", pass(p, 4, reps, sim_threads), ops);
	unit = "cpu";
}

static double write_to(const Plan *p, const char *path, int fmt)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	double t = cpu();
	if (plan_write_as(p, f, fmt, 0) || fclose(f)) {
		fprintf(stderr, "io_bench: writing %s failed\n", path);
		exit(1);
	}
	return cpu() - t;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--thp")) { // what the tools decide here, and why
		PlanThp t = plan_thp_read("/sys");
		char why[200];
		plan_thp_describe(&t, why, sizeof why);
		printf("%s; the tools: %s; plan writes of %s\n", why,
		       plan_huge_pages() ? "offered" : "not offered",
		       plan_write_piece() == PLAN_WRITE_PIECE ? "32 KiB" : "any size");
		return 0;
	}
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: io_bench PLAN OUT [REPS] | io_bench --thp\n");
		return 2;
	}
	int reps = argc == 4 ? atoi(argv[3]) : 3;
	wc_s = getenv("IO_WC") ? atof(getenv("IO_WC")) : 0;
	sim_threads = getenv("IO_SIM_THREADS") ? atoi(getenv("IO_SIM_THREADS")) : 0;
	double rd = 1e30, wf = 1e30, wp = 1e30, rb = 1e30, wb = 1e30;
	char bin[4096];
	snprintf(bin, sizeof bin, "%s.bin", argv[2]);
	Plan *p = NULL;
	for (int i = 0; i < reps; i++) {
		PlanError err;
		if (p)
			plan_free(p);
		double t = cpu();
		p = plan_read_file(argv[1], &err);
		t = cpu() - t;
		if (!p) {
			fprintf(stderr, "%s:%lld: error: %s\n", argv[1], (long long)err.line, err.msg);
			return 1;
		}
		rd = t < rd ? t : rd;
		t = write_to(p, argv[2], PLAN_FORMAT_TEXT);
		wf = t < wf ? t : wf;
		t = write_to(p, "/dev/null", PLAN_FORMAT_TEXT);
		wp = t < wp ? t : wp;
		t = write_to(p, bin, PLAN_FORMAT_BINARY);
		wb = t < wb ? t : wb;
		t = cpu();
		Plan *q = plan_read_file(bin, &err);
		t = cpu() - t;
		if (!q) {
			fprintf(stderr, "%s: byte %lld: error: %s\n", bin, (long long)err.line, err.msg);
			return 1;
		}
		plan_free(q);
		rb = t < rb ? t : rb;
	}
	int64_t ops = plan_total_ops(p);
	show("plan_read (no verify)", rd, ops);
	show("plan_write, file (1 pass)", wf, ops);
	show("plan_write, pipe (2 passes)", wp, ops);
	show("plan_write_binary, file", wb, ops);
	show("plan_read, binary (no verify)", rb, ops);
	passes(p, argv[1], bin, reps);
	plan_free(p);
	double fill, fault = fresh_pages((size_t)ops * sizeof(PlanOp), reps, &fill, 0);
	printf("the machine's floor for %.0f MiB of PlanOps (%zu bytes an op):\n",
	       (double)ops * sizeof(PlanOp) / 1048576, sizeof(PlanOp));
	show("fault the pages in", fault, ops);
	show("then write them whole", fill, ops);
	setenv("PIPECC_HUGE_PAGES", "1", 1); // the hint, as the tools take it when asked
	fault = fresh_pages((size_t)ops * sizeof(PlanOp), reps, &fill, 1);
	show("... in huge pages (a block)", fault, ops);
	show("then write them whole", fill, ops);
	return 0;
}
