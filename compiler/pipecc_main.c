/* pipecc: the command line.  Parses options, reads the source, runs the pass pipeline
 * (compiler/pipecc.c) and writes what --emit asks for.  Exit 0 ok, 1 input error,
 * 2 usage error. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pipecc.h"
#include "schedule.h"

#define PIPECC_VERSION "0.1.0"

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: pipecc FILE [-o PLAN] [options]     (FILE or PLAN may be '-')\n"
	        "  -o, --output PLAN        where to write (default: stdout)\n"
	        "  -s, --schedule NAME      override the program's schedule\n"
	        "  -m, --microbatches N     override the program's microbatch count\n"
	        "      --from-torch-csv FILE\n"
	        "                           take the schedule from a PyTorch schedule CSV, as\n"
	        "                           `schedule csv \"FILE\";` would\n"
	        "  -e, --emit KIND          plan (default) | torch-csv | summary\n"
	        "      --comms              with torch-csv: also SEND/RECV cells\n"
	        "      --dump PASS          print the state after PASS (parse, place, schedule,\n"
	        "                           lower) and stop\n"
	        "      --tune MODEL         order communication for the strict model (default:\n"
	        "                           a transfer waits until both ranks are between\n"
	        "                           actions) or the overlap model (GPU streams: each\n"
	        "                           tensor moves as soon as it is produced)\n"
	        "      --allow-deadlock     emit a plan even when the order cannot run across\n"
	        "                           ranks, for pipesim to show the cycle\n"
	        "      --max-errors N       stop reporting after N errors (default 20)\n"
	        "      --stats              print time, ops per second and peak memory to stderr\n"
        "      --list-schedules     print the schedule names, one a line, and exit\n"
        "      --list-layers        print the layer kinds (as a stage writes them) and exit\n"
	        "  -h, --help               this text\n"
	        "  -V, --version            the version\n");
}

static int parse_int(const char *s, int lo, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > 1 << 30)
		return -1;
	*out = (int)v;
	return 0;
}

int main(int argc, char **argv)
{
	enum { OPT_TUNE = 300, OPT_COMMS = 256, OPT_DUMP, OPT_ALLOW, OPT_MAXERR, OPT_STATS, OPT_FROM_CSV,
	       OPT_LIST_SCHED, OPT_LIST_LAYERS };
	static const struct option longs[] = {
		{"output", required_argument, 0, 'o'},
		{"schedule", required_argument, 0, 's'},
		{"microbatches", required_argument, 0, 'm'},
		{"from-torch-csv", required_argument, 0, OPT_FROM_CSV},
		{"emit", required_argument, 0, 'e'},
		{"comms", no_argument, 0, OPT_COMMS},
		{"dump", required_argument, 0, OPT_DUMP},
		{"allow-deadlock", no_argument, 0, OPT_ALLOW},
		{"tune", required_argument, 0, OPT_TUNE},
		{"max-errors", required_argument, 0, OPT_MAXERR},
		{"stats", no_argument, 0, OPT_STATS},
		{"list-schedules", no_argument, 0, OPT_LIST_SCHED},
		{"list-layers", no_argument, 0, OPT_LIST_LAYERS},
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, 'V'},
		{0, 0, 0, 0},
	};
	PipeccOptions o = {0};
	const char *out = "-", *emit = "plan";
	int comms = 0, max_errors = 20, stats = 0, c;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((c = getopt_long(argc, argv, "o:s:m:e:hV", longs, NULL)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case 's':
			o.schedule = optarg;
			break;
		case 'm':
			if (parse_int(optarg, 1, &o.microbatches)) {
				fprintf(stderr, "pipecc: --microbatches wants a whole number >= 1, not '%s'\n",
				        optarg);
				return 2;
			}
			break;
		case 'e':
			emit = optarg;
			break;
		case OPT_COMMS:
			comms = 1;
			break;
		case OPT_DUMP: {
			int k;
			for (k = 1; k < PASS_COUNT; k++)
				if (!strcmp(optarg, pipecc_pass_names[k]))
					break;
			if (k == PASS_COUNT) {
				fprintf(stderr, "pipecc: --dump wants parse, place, schedule or lower, not '%s'\n",
				        optarg);
				return 2;
			}
			o.dump = k;
			break;
		}
		case OPT_STATS:
			stats = 1;
			break;
		case OPT_TUNE:
			if (strcmp(optarg, "strict") && strcmp(optarg, "overlap")) {
				fprintf(stderr, "pipecc: --tune wants strict or overlap, not '%s'\n", optarg);
				return 2;
			}
			o.tune_overlap = !strcmp(optarg, "overlap");
			break;
		case OPT_ALLOW:
			o.allow_deadlock = 1;
			break;
		case OPT_FROM_CSV:
			o.from_csv = optarg;
			break;
		case OPT_MAXERR:
			if (parse_int(optarg, 1, &max_errors)) {
				fprintf(stderr, "pipecc: --max-errors wants a whole number >= 1\n");
				return 2;
			}
			break;
		case OPT_LIST_SCHED: // the registries, for scripts and tests that loop over them
			for (int i = 0; i < sched_count; i++)
				printf("%s\n", sched_registry[i]->name);
			return 0;
		case OPT_LIST_LAYERS:
			for (int k = 0; k < LAYER_COUNT; k++)
				printf("%s\n", plan_layers[k].example);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("pipecc %s (plan format %d)\n", PIPECC_VERSION, PLAN_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "pipecc: %s\n", optind >= argc ? "no input file" : "one input file only");
		usage(stderr);
		return 2;
	}
	if (strcmp(emit, "plan") && strcmp(emit, "torch-csv") && strcmp(emit, "summary")) {
		fprintf(stderr, "pipecc: --emit wants plan, torch-csv or summary, not '%s'\n", emit);
		return 2;
	}
	if (o.from_csv && o.schedule) {
		fprintf(stderr, "pipecc: --from-torch-csv and --schedule both name the schedule\n");
		return 2;
	}
	if (comms && strcmp(emit, "torch-csv")) {
		fprintf(stderr, "pipecc: --comms goes with --emit torch-csv\n");
		return 2;
	}
	const char *file = argv[optind];
	size_t len = 0;
	char *src = pipecc_read_file(file, &len);
	if (!src) {
		fprintf(stderr, "pipecc: cannot read %s: %s\n", file, strerror(errno));
		return 1;
	}
	Diag d;
	diag_init(&d, strcmp(file, "-") ? file : "<stdin>", src, len, stderr);
	d.max_errors = max_errors;
	o.dump_out = stdout;
	Plan *plan = pipecc_compile(file, src, len, &o, &d);
	int rc = d.nerrors ? 1 : 0;
	if (plan) {
		/* Write beside the target and rename, so a failed write never leaves a
		 * half plan where a good one was. */
		int to_file = strcmp(out, "-") != 0;
		struct stat st;
		int regular = to_file && (stat(out, &st) != 0 || S_ISREG(st.st_mode));
		char *tmp = NULL;
		FILE *f = stdout;
		if (to_file && !regular) { // a device or pipe (/dev/null, /dev/stdout): write to it
			f = fopen(out, "w");
			to_file = 0;
		} else if (to_file) {
			size_t n = strlen(out) + 16;
			tmp = malloc(n);
			snprintf(tmp, n, "%s.tmp%d", out, (int)getpid());
			f = fopen(tmp, "w");
		}
		if (!f) {
			fprintf(stderr, "pipecc: cannot write %s: %s\n", out, strerror(errno));
			rc = 1;
		} else {
			int bad = 0;
			if (!strcmp(emit, "plan"))
				bad = plan_write(plan, f);
			else if (!strcmp(emit, "torch-csv"))
				bad = pipecc_emit_torch_csv(plan, f, comms);
			else
				pipecc_emit_summary(plan, f);
			if (f != stdout ? fclose(f) != 0 : fflush(f) != 0)
				bad = 1;
			if (!bad && to_file && rename(tmp, out) != 0)
				bad = 1;
			if (bad) {
				fprintf(stderr, "pipecc: error writing %s: %s\n", out, strerror(errno));
				if (to_file)
					remove(tmp);
				rc = 1;
			}
		}
		free(tmp);
		if (stats) {
			clock_gettime(CLOCK_MONOTONIC, &t1);
			double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
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
		plan_free(plan);
	}
	free(src);
	return rc;
}
