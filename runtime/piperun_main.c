/* piperun: runs a plan for real.  A thin main: parse and check the options, read and
 * verify the plan, open a world on the chosen backend, run it, print the figures.
 * Everything else lives in the runtime library (rt.h).
 *
 * Exit status: 0 ok, 1 a runtime failure (deadlock ended by the watchdog, mismatch,
 * backend error) or a --check difference beyond tolerance, 2 a usage error or a plan
 * that cannot be read or is invalid (`file:line: error: message`). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

static const char usage_text[] =
	"usage: piperun PLAN [options]\n"
	"Runs a pipecc plan: every rank executes its op list, a thread per rank (threads) or\n"
	"a process per rank (mpi, under mpirun or srun).\n"
	"\n"
	"  -b, --backend NAME   one of: %s (default: mpi when started by\n"
	"                       mpirun or srun with more than one process, else threads)\n"
	"  -n, --steps N        training steps to run (default 5)\n"
	"  -s, --seed S         seed of weights, inputs and targets (default 1)\n"
	"      --lr X           SGD learning rate (default 0.5)\n"
	"  -c, --check          also run the model sequentially and compare every step's\n"
	"                       loss and the final weights (exit 1 beyond 1e-5 relative)\n"
	"  -j, --json           print the figures as one JSON object\n"
	"  -t, --trace FILE     write the measured timeline (Chrome trace, as pipesim's)\n"
	"      --timeout SEC    watchdog: end the run when no rank progresses for SEC\n"
	"                       seconds (default 60)\n"
	"      --calibrate      print measured per-stage `cost` lines for the .pipe file\n"
	"      --blas-threads N BLAS threads per rank on CPU backends (default 1)\n"
	"      --dtype T        GEMM operands: f32 (default) or bf16 (cuda backend only;\n"
	"                       f32 accumulation, --check bound 3e-2; docs/gpu.md)\n"
	"  -h, --help           this text\n"
	"  -V, --version        version\n"
	"\n"
	"Exit status: 0 ok, 1 runtime failure or --check difference, 2 usage or plan error.\n";

/* Under a launcher only the first process prints what every process would. */
static int first_process(void)
{
	const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
	for (int i = 0; i < 4; i++) {
		const char *v = getenv(vars[i]);
		if (v)
			return atoi(v) == 0;
	}
	return 1;
}

static int usage_error(const char *fmt, const char *arg)
{
	if (first_process()) {
		fprintf(stderr, "piperun: ");
		fprintf(stderr, fmt, arg);
		fprintf(stderr, "\nTry 'piperun --help'.\n");
	}
	return 2;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v <= lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static void print_text(const Plan *p, const RtWorld *w, const RtResult *res)
{
	printf("piperun: %s (%s, pp=%d dp=%d tp=%d, %d ranks, %d microbatches of %dx%d) on %s, "
	       "%d steps\n",
	       p->name, p->schedule, p->dims[DIM_PP], p->dims[DIM_DP], p->dims[DIM_TP], p->world,
	       p->microbatches, p->rows, p->cols, rt_world_backend(w), res->steps);
	for (int s = 0; s < res->steps; s++)
		printf("step %d: loss %.6f time %.3f ms\n", s + 1, res->loss[s], res->step_ns[s] / 1e6);
	if (res->steps > 1) {
		double t = 0;
		for (int s = 1; s < res->steps; s++)
			t += (double)res->step_ns[s];
		printf("mean step time (steps 2-%d): %.3f ms\n", res->steps, t / (res->steps - 1) / 1e6);
	}
	printf("rank  pp  dp  tp   busy_ms  peak_act_bytes\n");
	for (int r = 0; r < res->world; r++) {
		const int *c = p->ranks[r].coord;
		printf("%4d %3d %3d %3d %9.3f  %14" PRId64 "\n", r, c[DIM_PP], c[DIM_DP], c[DIM_TP],
		       res->busy_ns[r] / 1e6, res->peak_act[r]);
	}
	if (res->checked)
		printf("check: loss max abs err %.3g rel %.3g; weights max abs err %.3g rel %.3g "
		       "(%" PRId64 " weights): %s (tolerance %g relative)\n",
		       res->loss_abs, res->loss_rel, res->weight_abs, res->weight_rel, res->nweights,
		       res->check_ok ? "ok" : "FAILED", rt_check_tol(rt_world_options(w)->dtype));
}

static void jstr(const char *s)
{
	putchar('"');
	for (; s && *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

static void print_json(const Plan *p, const RtWorld *w, const RtResult *res)
{
	printf("{\"pipeline\": ");
	jstr(p->name);
	printf(", \"schedule\": ");
	jstr(p->schedule);
	printf(", \"backend\": \"%s\", \"world\": %d, \"pp\": %d, \"dp\": %d, \"tp\": %d, "
	       "\"microbatches\": %d,\n \"steps\": [",
	       rt_world_backend(w), p->world, p->dims[DIM_PP], p->dims[DIM_DP], p->dims[DIM_TP],
	       p->microbatches);
	for (int s = 0; s < res->steps; s++)
		printf("%s{\"step\": %d, \"loss\": %.9g, \"time_us\": %.3f}", s ? ", " : "", s + 1,
		       res->loss[s], res->step_ns[s] / 1e3);
	double mean = res->step_ns[0];
	if (res->steps > 1) {
		mean = 0;
		for (int s = 1; s < res->steps; s++)
			mean += (double)res->step_ns[s];
		mean /= res->steps - 1;
	}
	printf("],\n \"mean_step_us\": %.3f,\n \"ranks\": [", mean / 1e3);
	for (int r = 0; r < res->world; r++)
		printf("%s{\"rank\": %d, \"busy_us\": %.3f, \"peak_act_bytes\": %" PRId64
		       ", \"held_at_end_bytes\": %" PRId64 "}",
		       r ? ", " : "", r, res->busy_ns[r] / 1e3, res->peak_act[r], res->held_end[r]);
	printf("]");
	if (res->checked)
		printf(",\n \"check\": {\"ok\": %s, \"loss_abs\": %.6g, \"loss_rel\": %.6g, "
		       "\"weight_abs\": %.6g, \"weight_rel\": %.6g, \"weights\": %" PRId64
		       ", \"tolerance\": %g}",
		       res->check_ok ? "true" : "false", res->loss_abs, res->loss_rel, res->weight_abs,
		       res->weight_rel, res->nweights, rt_check_tol(rt_world_options(w)->dtype));
	printf("}\n");
}

static void plan_error(const char *path, const Plan *p, const PlanError *e)
{
	if (!first_process())
		return;
	int64_t line = e->line;
	if (!line && p && e->rank >= 0 && e->rank < p->world && e->op >= 0 &&
	    p->ranks[e->rank].first_line)
		line = p->ranks[e->rank].first_line + e->op;
	if (line)
		fprintf(stderr, "%s:%" PRId64 ": error: %s\n", path, line, e->msg);
	else
		fprintf(stderr, "%s: error: %s\n", path, e->msg);
}

int main(int argc, char **argv)
{
	enum { OPT_LR = 256, OPT_TIMEOUT, OPT_CALIBRATE, OPT_BLAS, OPT_DTYPE };
	static const struct option longopts[] = {
		{"backend", required_argument, NULL, 'b'},
		{"steps", required_argument, NULL, 'n'},
		{"seed", required_argument, NULL, 's'},
		{"lr", required_argument, NULL, OPT_LR},
		{"check", no_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'},
		{"trace", required_argument, NULL, 't'},
		{"timeout", required_argument, NULL, OPT_TIMEOUT},
		{"calibrate", no_argument, NULL, OPT_CALIBRATE},
		{"blas-threads", required_argument, NULL, OPT_BLAS},
		{"dtype", required_argument, NULL, OPT_DTYPE},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	RtOptions o = {
		.steps = RT_DEFAULT_STEPS,
		.seed = RT_DEFAULT_SEED,
		.lr = RT_DEFAULT_LR,
		.timeout_s = RT_DEFAULT_TIMEOUT,
		.blas_threads = 1,
	};
	int json = 0, calibrate = 0;
	char names[512];
	const char *trace = NULL;
	int c;
	long v;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":b:n:s:cjt:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'b':
			o.backend = optarg;
			break;
		case 'n':
			if (parse_int(optarg, 1, 1000000, &v))
				return usage_error("--steps wants a whole number from 1 to 1000000, not '%s'",
				                   optarg);
			o.steps = (int)v;
			break;
		case 's': {
			char *end;
			errno = 0;
			unsigned long long s = strtoull(optarg, &end, 0);
			if (errno || end == optarg || *end || optarg[0] == '-')
				return usage_error("--seed wants a non-negative whole number, not '%s'", optarg);
			o.seed = s;
			break;
		}
		case OPT_LR:
			if (parse_double(optarg, 0, 1e6, &o.lr))
				return usage_error("--lr wants a positive number, not '%s'", optarg);
			break;
		case 'c':
			o.check = 1;
			break;
		case 'j':
			json = 1;
			break;
		case 't':
			trace = optarg;
			break;
		case OPT_TIMEOUT:
			if (parse_double(optarg, 0, 1e7, &o.timeout_s))
				return usage_error("--timeout wants a positive number of seconds, not '%s'",
				                   optarg);
			break;
		case OPT_CALIBRATE:
			calibrate = 1;
			break;
		case OPT_DTYPE:
			if (!strcmp(optarg, "f32"))
				o.dtype = RT_DTYPE_F32;
			else if (!strcmp(optarg, "bf16"))
				o.dtype = RT_DTYPE_BF16;
			else
				return usage_error("--dtype wants f32 or bf16, not '%s'", optarg);
			break;
		case OPT_BLAS:
			if (parse_int(optarg, 1, 1024, &v))
				return usage_error("--blas-threads wants a whole number from 1 to 1024, not '%s'",
				                   optarg);
			o.blas_threads = (int)v;
			break;
		case 'h':
			printf(usage_text, rt_backend_names(names, sizeof names));
			return 0;
		case 'V':
			printf("piperun %s (plan format %d; backends: %s)\n", RT_VERSION, PLAN_VERSION,
			       rt_backend_names(names, sizeof names));
			return 0;
		case ':':
			return usage_error("option '%s' needs a value", argv[optind - 1]);
		default:
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return usage_error("%s", "no plan file given");
	if (argc - optind > 1)
		return usage_error("one plan file only; extra argument '%s'", argv[optind + 1]);
	const char *path = argv[optind];
	if (calibrate && (o.check || json || trace))
		return usage_error("%s", "--calibrate prints cost lines; it takes no --check, --json "
		                         "or --trace");
	if (o.backend && rt_backend_check(o.backend, names, sizeof names))
		return usage_error("%s", names);
	if (o.dtype == RT_DTYPE_BF16 && strcmp(o.backend ? o.backend : rt_backend_default(), "cuda"))
		return usage_error("%s", "--dtype bf16 needs --backend cuda (the CPU backends compute "
		                         "in f32 only)");
	o.trace = trace || calibrate;
	o.plan_path = path;

	PlanError err;
	Plan *p = plan_read_file(path, &err);
	if (!p) {
		plan_error(path, NULL, &err);
		return 2;
	}
	if (plan_verify(p, &err)) {
		plan_error(path, p, &err);
		plan_free(p);
		return 2;
	}
	char msg[1024];
	RtWorld *w = rt_world_open(p, &o, msg, sizeof msg);
	if (!w) {
		if (first_process())
			fprintf(stderr, "%s: error: %s\n", path, msg);
		plan_free(p);
		return 2;
	}
	RtResult res;
	int rc = rt_world_run(w, &res);
	if (rc) {
		rt_world_report(w, stderr);
		fflush(stderr);
		rt_result_free(&res);
		rt_world_close(w, 1);
		plan_free(p);
		return 1;
	}
	int status = 0;
	if (rt_world_root(w)) {
		if (calibrate)
			rt_calibrate_write(p, &res, stdout);
		else if (json)
			print_json(p, w, &res);
		else
			print_text(p, w, &res);
		if (trace) {
			FILE *f = fopen(trace, "w");
			int bad = !f || rt_trace_write(p, &res, f);
			if (f && fclose(f))
				bad = 1;
			if (bad) {
				fprintf(stderr, "piperun: error: cannot write the trace to %s: %s\n", trace,
				        strerror(errno));
				status = 1;
			}
		}
		if (res.checked && !res.check_ok) {
			fprintf(stderr, "piperun: error: --check: the pipelined run differs from the "
			                "sequential one beyond %g relative\n",
			        rt_check_tol(rt_world_options(w)->dtype));
			status = 1;
		}
		fflush(stdout);
	}
	rt_result_free(&res);
	rt_world_close(w, 0);
	plan_free(p);
	return status;
}
