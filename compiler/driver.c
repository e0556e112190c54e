/* pipecc as a tool: what happens between the parsed command line (pipecc_main.c) and
 * the exit status.  Option combinations are checked first, then the output path, so a
 * bad command line or an unwritable output costs no compilation; the pass pipeline is
 * pipecc_compile (pipecc.c) and the output goes through cli_out_open/cli_out_close, so
 * a failed write leaves nothing behind. */
#include "../plan/binary.h"
#include "../plan/io.h"
#include "../plan/par.h"
#include "../plan/sysmem.h"
#include "pipecc.h"
#include "schedule.h"
#include "../plan/oom.h"
#include "../plan/line.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *const pipecc_emit_names[EMIT_COUNT] = {"plan", "torch-csv", "summary"};

static double seconds_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void print_stats(const Plan *plan, const struct timespec *t0)
{
	double sec = seconds_since(t0);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	             (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
	double ops = (double)plan_total_ops(plan);
	fprintf(stderr,
	        "pipecc: %.0f ops in %.3f s wall (%.2f M ops/s), %.3f s cpu (%.2f M ops/s); "
	        "peak RSS %.1f MiB = %.1f bytes/op\n",
	        ops, sec, ops / sec / 1e6, cpu, ops / cpu / 1e6, (double)ru.ru_maxrss / 1024,
	        (double)ru.ru_maxrss * 1024 / (ops > 0 ? ops : 1));
}

static int write_output(CliTool *t, const PipeccArgs *a, const Plan *plan)
{
	/* --expand copies the lists for every line: more than the machine has is said
	 * before the output is opened (plan_expand would refuse it then, less clearly). */
	int64_t lines = plan->line ? plan_mesh_world(plan) / plan->dims[DIM_PP] : 1;
	int64_t ops = plan_total_ops(plan) * lines;
	if (a->emit == EMIT_PLAN && a->expand && !plan_sysmem_fits((double)ops * sizeof(PlanOp))) {
		char m[512];
		return cli_error(t, "%s", plan_oom_text(m, sizeof m, ops, 0));
	}
	CliOut out;
	FILE *f = cli_out_open(t, &out, a->out);
	if (!f)
		return CLI_EXIT_FAIL;
	errno = 0;
	int bad = 0;
	if (a->emit == EMIT_PLAN)
		bad = plan_write_as(plan, f, a->plan_format, a->expand);
	else if (a->emit == EMIT_TORCH_CSV)
		bad = pipecc_emit_torch_csv(plan, f, a->comms);
	else
		bad = pipecc_emit_summary(plan, f);
	return cli_out_close(t, &out, bad);
}

/* What pipecc takes with a plan as its input; the rest are about compiling a program. */
static const char *const convert_opts[] = {"output", "plan-format", "expand", "stats", "emit",
                                           "threads", "rehash"};

/* Whether the first n bytes of an input s are a plan's, text or binary. */
static int starts_as_plan(const char *s, size_t n)
{
	static const char text[] = PLAN_FORMAT " ";
	return (n > 0 && plan_is_binary_start((unsigned char)s[0])) ||
	       (n >= sizeof text - 1 && !memcmp(s, text, sizeof text - 1));
}

/* Whether the regular file at path starts as a plan (anything else, a pipe say, is
 * looked at once read: a peek would take its bytes). */
static int file_is_plan(const char *path)
{
	char b[16];
	struct stat st;
	int reg = !cli_is_std(path) && stat(path, &st) == 0 && S_ISREG(st.st_mode);
	FILE *f = reg ? fopen(path, "rb") : NULL;
	size_t n = f ? fread(b, 1, sizeof b, f) : 0;
	if (f)
		fclose(f);
	return starts_as_plan(b, n);
}

/* A plan as the input (from its file, or src[0, len) when standard input was read):
 * read in either form, verified, written in --plan-format. */
static int convert(CliTool *t, PipeccArgs *a, const struct timespec *t0, char *src, size_t len)
{
	for (int i = 0; t->opts[i].name; i++) {
		size_t k = 0, n = sizeof convert_opts / sizeof *convert_opts;
		while (k < n && strcmp(t->opts[i].name, convert_opts[k]))
			k++;
		if (t->given[i] && k == n)
			return cli_usage_error(t, "the input is a plan: --%s is for compiling a program",
			                       t->opts[i].name);
	}
	if (a->emit != EMIT_PLAN)
		return cli_usage_error(t, "the input is a plan: it is written again as a plan, not "
		                          "--emit %s", pipecc_emit_names[a->emit]);
	t->in_place = a->rehash; // read whole before the output replaces it
	int rc = cli_check_outputs(t);
	if (rc)
		return rc;
	PlanError e;
	unsigned keep = PLAN_KEEP_ALL | (a->rehash ? PLAN_READ_REHASH : 0);
	FILE *f = src ? fmemopen(src, len, "r") : NULL;
	Plan *p = src ? (f ? plan_read_as(f, t->in_name, keep, &e) : NULL)
	              : plan_read_file_as(t->in, keep, &e);
	if (f)
		fclose(f);
	if (src && !f)
		return cli_error(t, "out of memory");
	if (!p || plan_verify(p, &e)) {
		if (e.at_byte)
			fprintf(stderr, "%s: byte %" PRId64 ": error: %s\n", t->in_name, e.line, e.msg);
		else if (e.line > 0)
			fprintf(stderr, "%s:%" PRId64 ": error: %s\n", t->in_name, e.line, e.msg);
		else
			fprintf(stderr, "%s: error: %s\n", t->in_name, e.msg);
		plan_free(p);
		return CLI_EXIT_FAIL;
	}
	rc = write_output(t, a, p) ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	if (a->stats)
		print_stats(p, t0);
	plan_free(p);
	return rc;
}

/* A plan on a terminal by default is a mistake: a binary one garbles it (gzip refuses
 * so too), a text one is thousands of lines no one reads there.  Refused before any
 * work, with the way out; `-o -` asks for a text plan on the terminal all the same.
 * Refusing beats writing NAME.plan: a file appears only where the command line names
 * one, and what goes to standard output does not depend on where it leads. */
static int plan_to_terminal(CliTool *t, const PipeccArgs *a)
{
	int binary = a->plan_format == PLAN_FORMAT_BINARY;
	if (a->emit != EMIT_PLAN || a->dump >= 0 || !cli_is_std(a->out) ||
	    !isatty(STDOUT_FILENO) || (!binary && cli_given(t, &a->out)))
		return 0;
	return cli_usage_error(t, binary ? "the binary plan would go to a terminal: give -o FILE, "
	                                   "or redirect standard output"
	                                 : "the plan would go to a terminal: give -o FILE, "
	                                   "redirect standard output, or -o - to see it there");
}

int pipecc_drive(CliTool *t, PipeccArgs *a)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	par_threads_auto();
	int rc = plan_to_terminal(t, a);
	if (rc)
		return rc;
	if (file_is_plan(t->in))
		return convert(t, a, &t0, NULL, 0);
	if (a->rehash && !cli_is_std(t->in))
		return cli_usage_error(t, "--rehash is for a plan as the input, not a program");
	if (cli_given(t, &a->plan_format) && a->emit != EMIT_PLAN)
		return cli_usage_error(t, "--plan-format goes with --emit plan");
	if (a->o.from_csv && a->o.schedule)
		return cli_usage_error(t, "--from-torch-csv and --schedule both name the schedule");
	if (a->comms && a->emit != EMIT_TORCH_CSV)
		return cli_usage_error(t, "--comms goes with --emit torch-csv");
	if (a->o.from_csv && cli_is_std(a->o.from_csv) && cli_is_std(t->in))
		return cli_usage_error(t, "the source and --from-torch-csv cannot both be standard "
		                          "input");
	rc = a->dump < 0 ? cli_check_outputs(t) : 0;
	if (rc)
		return rc;
	if (a->expand && a->emit != EMIT_PLAN)
		return cli_usage_error(t, "--expand goes with --emit plan");
	a->o.same_rank = a->same_rank + 1;
	a->o.line = 1; // every emitter reads a line plan (pipecc --expand expands it to write)
	a->o.dump = a->dump >= 0 ? (PipeccPass)(a->dump + 1) : PASS_NONE;
	a->o.dump_out = stdout;
	a->o.balance_warn = a->emit == EMIT_SUMMARY;

	size_t len = 0;
	char *src = pipecc_read_file(t->in, &len);
	if (!src)
		return cli_error(t, "cannot read %s: %s", t->in_name, plan_strerror(errno));
	if (starts_as_plan(src, len)) {
		rc = convert(t, a, &t0, src, len);
		free(src);
		return rc;
	}
	if (a->rehash) {
		free(src);
		return cli_usage_error(t, "--rehash is for a plan as the input, not a program");
	}
	CliProgress *pr = cli_progress_start(t, "compiling");
	Diag d;
	diag_init(&d, t->in_name, src, len, stderr);
	d.max_errors = a->max_errors;
	Plan *plan = pipecc_compile(t->in, src, len, &a->o, &d);
	rc = d.nerrors ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	if (plan) {
		cli_progress_phase(pr, a->emit == EMIT_PLAN ? "writing the plan" : "writing");
		if (write_output(t, a, plan))
			rc = CLI_EXIT_FAIL;
		cli_progress_end(pr);
		pr = NULL;
		if (a->stats)
			print_stats(plan, &t0);
		plan_free(plan);
	}
	cli_progress_end(pr);
	if (a->dump >= 0 && cli_stdout_close(t))
		rc = CLI_EXIT_FAIL;
	free(src);
	return rc;
}

void pipecc_list_schedules(FILE *f)
{
	for (int i = 0; i < sched_count; i++)
		fprintf(f, "%s\n", sched_registry[i]->name);
}

void pipecc_list_layers(FILE *f)
{
	for (int k = 0; k < LAYER_COUNT; k++)
		fprintf(f, "%s\n", plan_layers[k].example);
}
