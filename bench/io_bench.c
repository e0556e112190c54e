/* The plan text's two ends, timed alone (bench/bench_io.sh): plan_read of a plan file
 * (no verify), then plan_write of it to a regular file (one pass, the header put in its
 * place last) and to /dev/null (not seekable: two passes, as into a pipe); then the
 * binary form's: plan_write_binary to OUT.bin and plan_read of that.  Prints CPU
 * seconds and M ops/s of each; the best of REPS runs, since the machine may be shared. */
#include "../plan/binary.h"

#include <stdlib.h>
#include <time.h>

static double cpu(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void show(const char *what, double s, int64_t ops)
{
	printf("  %-28s %7.3f s cpu  %6.1f M ops/s\n", what, s, s > 0 ? (double)ops / s / 1e6 : 0);
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
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: io_bench PLAN OUT [REPS]\n");
		return 2;
	}
	int reps = argc == 4 ? atoi(argv[3]) : 3;
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
	plan_free(p);
	return 0;
}
