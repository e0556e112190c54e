/* pipesim as a tool (pipesim.h): everything between the parsed command line and the
 * exit status.  Combinations and output paths are checked before the plan is read, so a
 * bad --svg path costs no simulation; the report goes to standard output unless an
 * output file took it ('-'), and every file is written whole or not at all through
 * cli_write.  docs/pipesim.md documents the options, output and exits. */
#include "../plan/par.h"
#include "../plan/io.h"
#include "pipesim.h"
#include "../plan/oom.h"
#include "../plan/line.h"
#include "../plan/link.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
	const Plan *p;
	const SimResult *res;
	int (*fn)(FILE *, const Plan *, const SimResult *);
} Writer;

static int write_one(FILE *f, void *arg)
{
	const Writer *w = arg;
	return w->fn(f, w->p, w->res);
}

static void print_plan_error(const char *file, const PlanError *e)
{
	if (e->at_byte) // a binary plan's reader: the byte offset
		fprintf(stderr, "%s: byte %lld: error: %s\n", file, (long long)e->line, e->msg);
	else if (e->line > 0)
		fprintf(stderr, "%s:%lld: error: %s\n", file, (long long)e->line, e->msg);
	else
		fprintf(stderr, "%s: error: %s\n", file, e->msg);
}

static int check_combinations(CliTool *t, const PipesimArgs *a)
{
	if (a->json && a->grid)
		return cli_usage_error(t, "--json and --grid both write to standard output");
	if (a->json && t->quiet)
		return cli_usage_error(t, "--json and --quiet contradict each other");
	if (t->quiet && a->grid)
		return cli_usage_error(t, "--quiet and --grid contradict each other");
	if (cli_given(t, &a->width) && !a->grid)
		return cli_usage_error(t, "--width only applies with --grid");
	if (a->no_record && (a->trace || a->svg || a->grid))
		return cli_usage_error(t, "--no-record keeps no op times; --trace, --svg and --grid "
		                          "need them");
	int to_stdout = (a->trace && cli_is_std(a->trace)) + (a->svg && cli_is_std(a->svg));
	if (to_stdout && (a->json || a->grid || to_stdout > 1))
		return cli_usage_error(t, "only one output may go to standard output");
	return 0;
}

/* With --threads, the run beside the verifier: both only read the plan, so the
 * simulation starts on a thread of its own as the verification does, and its result is
 * taken when the plan verifies, dropped (the run stopped) when it does not.  sim_run is
 * safe on any plan the reader accepts (tests/fuzz/fuzz_sim.c runs it on refused ones).
 * The result is the one run alone gives; a run out of memory beside the verifier is run
 * again alone, as one thread would (docs/architecture.md, "Threads"). */
typedef struct {
	const Plan *p;
	SimOptions opt;
	SimResult res;
	int rc, stop;
	ParTask *task;
} Ahead;

static void ahead_run(void *arg)
{
	Ahead *h = arg;
	h->rc = sim_run(h->p, &h->opt, &h->res);
}

static void ahead_start(Ahead *h, const Plan *p, const SimOptions *opt)
{
	*h = (Ahead){.p = p, .opt = *opt};
	h->opt.stop = &h->stop;
	/* Its result is taken only once plan_verify accepted the plan, which proves what
	 * `verified` skips (the pairs' identities, p2p.h): told so at once, the run reads
	 * no queued op back (about 8 ms of 160 on bench_io's plan).  On a plan refused it
	 * is as safe as any run (tests/fuzz/fuzz.h) and its result is dropped. */
	h->opt.verified = 1;
	/* The strict model's run takes half the threads (the larger half), the verifier's
	 * walk the rest (sim/psim.c; on two, the run one and the walk one), but no more
	 * than the machine has cores: its threads wait for each other by spinning, and
	 * one that shares a core waits for its turn (on 2 cores, --threads 8 took 0.92 s
	 * against 0.23 s with --threads 4 on bench_io's binary plan). */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	h->opt.threads = (plan_threads + 1) / 2;
	if (cpus > 0 && h->opt.threads > cpus)
		h->opt.threads = (int)cpus;
	h->task = par_spawn(ahead_run, h);
}

static void ahead_drop(Ahead *h)
{
	if (!h->task)
		return;
	__atomic_store_n(&h->stop, 1, __ATOMIC_RELAXED);
	par_join(h->task);
	h->task = NULL;
	sim_result_free(&h->res);
}

/* The plan verified: the run's result in *res and sim_run's return, or the run alone's
 * when none ran beside or it ran out of memory. */
static int ahead_take(Ahead *h, const Plan *p, const SimOptions *opt, SimResult *res)
{
	if (h->task) {
		par_join(h->task);
		h->task = NULL;
		if (h->rc >= 0) {
			*res = h->res;
			return h->rc;
		}
		sim_result_free(&h->res);
	}
	return sim_run(p, opt, res);
}

/* The plan verified and the run goes on beside: the memory model's figures for the
 * report or JSON are computed meanwhile, on the workers the run leaves (the verifier's
 * walk was all the calling thread had to do).  NULL when nothing reads them, or out of
 * memory: the report then computes them itself, and says so when it cannot. */
static PlanMem *mem_beside(const Ahead *h, const Plan *p, int wanted)
{
	if (!h->task || !wanted)
		return NULL;
	par_hold(h->opt.threads);
	PlanMem *mem = plan_mem_all(p);
	par_hold(-h->opt.threads);
	return mem;
}

/* The failure report on stderr, then JSON, or the report and the grid, on stdout.  0,
 * or -1 when one failed (out of memory, unless writing failed), after which nothing
 * more is printed: what failed would fail there too. */
static int print_reports(const CliTool *t, const PipesimArgs *a, const Plan *p,
                         const SimResult *res, const PlanMem *mem, int report)
{
	if (res->verdict != SIM_OK && sim_report_failure(stderr, p, res, t->in_name))
		return -1;
	if (a->json)
		return sim_write_json(stdout, p, res, NULL, t->in_name, mem);
	if (report && res->verdict == SIM_OK && sim_report_summary(stdout, p, res, mem))
		return -1;
	return report && a->grid ? sim_report_grid(stdout, p, res, a->width) : 0;
}

/* The run's clock saturated (sim.c): said as a finding about the plan, after the run's
 * own finding if it failed (a deadlock's cycle does not depend on the times, and its
 * report draws no picture of saturated ones), and nothing else printed, since no
 * figure of the run is true. */
static int too_long(const CliTool *t, Plan *p, SimResult *res, PlanMem *mem)
{
	if (res->verdict != SIM_OK)
		sim_report_failure(stderr, p, res, t->in_name);
	fprintf(stderr, "%s: error: the simulated %s more than 2^62 ns (146 years), "
	                "more than the run's times can be counted in: shorten the stages' costs or the "
	                "link's latency, or raise its bandwidth\n", t->in_name,
	        res->verdict == SIM_OK ? "step takes" : "steps before the failure take");
	sim_result_free(res);
	free(mem);
	plan_free(p);
	return CLI_EXIT_FAIL;
}

static int64_t ops_simulated(void *arg)
{
	return __atomic_load_n((int64_t *)arg, __ATOMIC_RELAXED);
}

int pipesim_drive(CliTool *t, PipesimArgs *a)
{
	int rc = check_combinations(t, a);
	if (rc || (rc = cli_check_outputs(t)))
		return rc;
	par_threads_auto();
	/* An output on standard output replaces the report. */
	int report = !t->quiet && !((a->trace && cli_is_std(a->trace)) ||
	                            (a->svg && cli_is_std(a->svg)));
	/* Every op's times (16 bytes an op) only when an output reads them: JSON, the grid,
	 * the pictures; the report's summary reads the critical path's alone (4 bytes an op,
	 * SIM_RECORD_PATH).  A run that fails without every op's times is simulated again
	 * with them, so its failure report (the grid before a deadlock) is what it always
	 * was. */
	int uses_times = a->json || a->grid || a->trace || a->svg;
	SimOptions opt = {.model = (SimModel)a->model, .eager = a->eager,
	                  .record_ops = a->no_record ? SIM_RECORD_NONE
	                                : uses_times ? SIM_RECORD_ALL
	                                : report     ? SIM_RECORD_PATH
	                                             : SIM_RECORD_NONE};
	int64_t simulated = 0; // ops the run has finished, for the progress line
	opt.progress = &simulated;

	PlanError perr;
	CliProgress *pr = cli_progress_start(t, "reading the plan");
	Plan *p = plan_read_file_as(t->in, 0, &perr); // writes no plan: no source lines
	if (p && p->tuned_overlap && !cli_given(t, &a->model))
		opt.model = SIM_OVERLAP; // the model the plan's order was made for
	/* A line plan simulated whole (below) is expanded first: it does not run beside. */
	int expand = p && p->line && (a->expand || !plan_line_uniform(p));
	Ahead ahead = {0};
	if (p && !expand && plan_threads > 1)
		ahead_start(&ahead, p, &opt);
	cli_progress_phase(pr, "verifying the plan");
	int held = ahead.task ? ahead.opt.threads : 0;
	par_hold(held); // the verifier's walk leaves the run its threads
	int bad = !p || plan_verify(p, &perr);
	par_hold(-held);
	opt.verified = !bad; // a run after this one skips what the verifier proved
	if (bad) {
		ahead_drop(&ahead);
		cli_progress_end(pr);
		print_plan_error(t->in_name, &perr);
		if (a->json)
			sim_write_json(stdout, p, NULL, &perr, t->in_name, NULL);
		if (p)
			plan_free(p);
		return CLI_EXIT_FAIL;
	}
	/* One line stands for all when every line's transfers and collectives take its
	 * times (docs/pipesim.md "Line plans"); otherwise, or when asked, the world runs. */
	if (expand) {
		if (!a->expand && !t->quiet)
			fprintf(stderr, "pipesim: note: the lines do not all sit on the nodes alike "
			                "(a pipeline pair or a tp or dp group shares a node on some lines "
			                "only): simulating every world rank\n");
		size_t failed;
		Plan *e = plan_expand(p, &failed);
		if (!e) {
			char m[512];
			cli_progress_end(pr);
			cli_error(t, "%s", plan_oom_text(m, sizeof m, 0, failed));
			plan_free(p);
			return CLI_EXIT_FAIL;
		}
		plan_free(p);
		p = e;
	}
	cli_progress_phase(pr, "simulating, ops");
	cli_progress_count(pr, ops_simulated, &simulated, plan_total_ops(p));
	/* The verifier's thread is free: it first pages in the per-op times the run will
	 * write (par_prefault, which the run left for a thread done with its own work). */
	if (ahead.task)
		par_help();
	PlanMem *mem = mem_beside(&ahead, p, report || a->json);
	SimResult res;
	rc = ahead_take(&ahead, p, &opt, &res);
	if (rc >= 0 && res.verdict != SIM_OK && !a->no_record && opt.record_ops != SIM_RECORD_ALL) {
		sim_result_free(&res);
		opt.record_ops = SIM_RECORD_ALL;
		rc = sim_run(p, &opt, &res);
	}
	cli_progress_end(pr);
	if (rc >= 0 && res.makespan >= SIM_TIME_MAX) // saturated: no figure is true
		return too_long(t, p, &res, mem);
	if (rc < 0) {
		cli_error(t, "%s", res.message);
		sim_result_free(&res);
		free(mem);
		plan_free(p);
		return CLI_EXIT_FAIL;
	}
	int status = res.verdict == SIM_OK ? CLI_EXIT_OK : CLI_EXIT_FAIL;
	int out = print_reports(t, a, p, &res, mem, report);
	if (cli_stdout_close(t)) {
		status = CLI_EXIT_FAIL;
	} else if (out) { // the report stops where it ran out: say so, and fail
		status = cli_error(t, "%s", plan_oom_text((char[512]){0}, 512, plan_total_ops(p), 0));
	}
	pr = cli_progress_start(t, "writing");
	if (out) // no picture either: what failed would fail there too
		a->trace = a->svg = NULL;
	Writer trace = {p, &res, sim_write_trace}, svg = {p, &res, sim_write_svg};
	if (a->trace && cli_write(t, a->trace, write_one, &trace))
		status = CLI_EXIT_FAIL;
	if (a->svg && cli_write(t, a->svg, write_one, &svg))
		status = CLI_EXIT_FAIL;
	cli_progress_end(pr);
	free(mem);
	sim_result_free(&res);
	plan_free(p);
	return status;
}
