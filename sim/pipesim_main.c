/* pipesim: reads a plan, verifies it, runs it under docs/semantics.md and says whether
 * it finishes (with timing and memory) or why it cannot (deadlock, mismatch).  A thin
 * command line over sim/sim.h; docs/pipesim.md documents options, output and exits.
 * Exit 0: the plan runs; 1: a finding or an input error; 2: a usage error. */
#include "sim.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: pipesim [options] PLAN     (PLAN may be '-')\n"
    "  -m, --model MODEL     strict (default: a rank waits for each group) or overlap\n"
    "                        (compute and communication streams)\n"
    "  -e, --eager           sends complete without a receiver (buffered), to see which\n"
    "                        verdicts depend on buffering\n"
    "  -j, --json            print one JSON object instead of text (docs/pipesim.md)\n"
    "  -t, --trace FILE      write a Chrome trace / Perfetto JSON timeline\n"
    "  -s, --svg FILE        write the timeline as an SVG picture\n"
    "  -g, --grid            print a text grid of the timeline\n"
    "  -w, --width N         grid columns at most (default 60)\n"
    "  -n, --no-record       keep no per-op times (20 bytes per op less): no critical\n"
    "                        path, grid or pictures\n"
    "  -q, --quiet           print nothing when the plan runs; only the exit status\n"
    "  -h, --help            this text\n"
    "  -V, --version         the version\n"
    "exit status: 0 the plan runs, 1 a finding (deadlock, mismatch, dependency) or a bad\n"
    "input, 2 a usage error\n";

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "pipesim: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'pipesim --help'.\n");
	return 2;
}

static int write_file(const char *path, const Plan *p, const SimResult *res,
                      int (*fn)(FILE *, const Plan *, const SimResult *))
{
	FILE *f = strcmp(path, "-") ? fopen(path, "w") : stdout;
	if (!f) {
		fprintf(stderr, "pipesim: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	int rc = fn(f, p, res);
	if (f != stdout)
		rc |= fclose(f);
	else
		rc |= fflush(f);
	if (rc) {
		fprintf(stderr, "pipesim: error writing %s\n", path);
		return -1;
	}
	return 0;
}

static void print_plan_error(const char *file, const PlanError *e)
{
	if (e->line > 0)
		fprintf(stderr, "%s:%lld: error: %s\n", file, (long long)e->line, e->msg);
	else
		fprintf(stderr, "%s: error: %s\n", file, e->msg);
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
	    {"model", required_argument, 0, 'm'}, {"eager", no_argument, 0, 'e'},
	    {"json", no_argument, 0, 'j'},        {"trace", required_argument, 0, 't'},
	    {"svg", required_argument, 0, 's'},   {"grid", no_argument, 0, 'g'},
	    {"width", required_argument, 0, 'w'}, {"no-record", no_argument, 0, 'n'},
	    {"quiet", no_argument, 0, 'q'},       {"help", no_argument, 0, 'h'},
	    {"version", no_argument, 0, 'V'},     {0, 0, 0, 0},
	};
	SimOptions opt = {.model = SIM_STRICT, .record_ops = 1};
	int json = 0, grid = 0, width = 60, quiet = 0, width_set = 0;
	const char *trace = NULL, *svg = NULL;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":m:ejt:s:gw:nqhV", longs, NULL)) != -1) {
		switch (c) {
		case 'm': {
			int m = sim_model_parse(optarg);
			if (m < 0)
				return usage_error("unknown model '%s' (strict or overlap)", optarg);
			opt.model = m;
			break;
		}
		case 'e':
			opt.eager = 1;
			break;
		case 'j':
			json = 1;
			break;
		case 't':
			trace = optarg;
			break;
		case 's':
			svg = optarg;
			break;
		case 'g':
			grid = 1;
			break;
		case 'w': {
			char *end;
			errno = 0;
			long v = strtol(optarg, &end, 10);
			if (*end || end == optarg || errno || v < 1 || v > 100000)
				return usage_error("--width wants a number from 1 to 100000, not '%s'", optarg);
			width = (int)v;
			width_set = 1;
			break;
		}
		case 'n':
			opt.record_ops = 0;
			break;
		case 'q':
			quiet = 1;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		case 'V':
			printf("pipesim %s (plan format %d)\n", SIM_VERSION, PLAN_VERSION);
			return 0;
		case ':':
			return usage_error("option '%s' needs an argument", argv[optind - 1]);
		default:
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	/* Combinations, before any work. */
	if (optind == argc)
		return usage_error("%s", "no plan file given");
	if (argc - optind > 1)
		return usage_error("one plan file only; extra argument '%s'", argv[optind + 1]);
	if (json && grid)
		return usage_error("%s", "--json and --grid both write to standard output");
	if (json && quiet)
		return usage_error("%s", "--json and --quiet contradict each other");
	if (quiet && grid)
		return usage_error("%s", "--quiet and --grid contradict each other");
	if (width_set && !grid)
		return usage_error("%s", "--width only applies with --grid");
	if (!opt.record_ops && (trace || svg || grid))
		return usage_error("%s", "--no-record keeps no op times; --trace, --svg and --grid need them");
	if ((trace && !strcmp(trace, "-")) || (svg && !strcmp(svg, "-"))) {
		if (json || grid || (trace && svg))
			return usage_error("%s", "only one output may go to standard output");
		quiet = 1;
	}
	if (trace && svg && !strcmp(trace, svg))
		return usage_error("--trace and --svg both write '%s'", trace);
	const char *file = argv[optind];
	const char *name = strcmp(file, "-") ? file : "<stdin>";

	PlanError perr;
	Plan *p = plan_read_file(file, &perr);
	if (!p) {
		print_plan_error(name, &perr);
		if (json)
			sim_write_json(stdout, NULL, NULL, &perr, name);
		return 1;
	}
	if (plan_verify(p, &perr)) {
		print_plan_error(name, &perr);
		if (json)
			sim_write_json(stdout, p, NULL, &perr, name);
		plan_free(p);
		return 1;
	}
	SimResult res;
	int rc = sim_run(p, &opt, &res);
	if (rc < 0) {
		fprintf(stderr, "pipesim: %s\n", res.message);
		sim_result_free(&res);
		plan_free(p);
		return 1;
	}
	int status = res.verdict == SIM_OK ? 0 : 1;
	if (res.verdict != SIM_OK)
		sim_report_failure(stderr, p, &res, name);
	if (json) {
		if (sim_write_json(stdout, p, &res, NULL, name) || fflush(stdout))
			status = 1;
	} else if (!quiet) {
		if (res.verdict == SIM_OK)
			sim_report_summary(stdout, p, &res);
		if (grid)
			sim_report_grid(stdout, p, &res, width);
		if (fflush(stdout))
			status = 1;
	}
	if (trace && write_file(trace, p, &res, sim_write_trace))
		status = 1;
	if (svg && write_file(svg, p, &res, sim_write_svg))
		status = 1;
	sim_result_free(&res);
	plan_free(p);
	return status;
}
