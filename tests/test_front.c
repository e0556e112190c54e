/* Front end tests: the examples and every statement form parse into the right Program;
 * every diagnostic matches its golden text byte for byte (tests/golden/front/NAME.pipe
 * with NAME.err; run with PIPECC_UPDATE_GOLDEN=1 to rewrite the .err files, then read
 * the diff); and no input, however broken, crashes, leaks or hangs the parser. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>

#include "../compiler/program.h"
#include "../compiler/schedule.h"

#define GOLDEN_DIR "tests/golden/front"

/* One front_parse run with its diagnostics captured. */
typedef struct {
	Arena arena;
	Diag diag;
	char *out;
	size_t outlen;
	Program *prog;
} Run;

static Program *run_len(Run *r, const char *file, const char *src, size_t len, int max_errors)
{
	memset(r, 0, sizeof *r);
	FILE *f = open_memstream(&r->out, &r->outlen);
	assert_non_null(f);
	diag_init(&r->diag, file, src, len, f);
	r->diag.max_errors = max_errors;
	r->prog = front_parse(&r->arena, &r->diag, file, src, len);
	fclose(f);
	/* the contract: a program exactly when there is nothing to report */
	assert_int_equal(r->prog == NULL, r->diag.nerrors > 0);
	return r->prog;
}

static Program *run(Run *r, const char *src)
{
	return run_len(r, "test.pipe", src, strlen(src), 0);
}

static void run_free(Run *r)
{
	arena_free(&r->arena);
	free(r->out);
}

/* Parses src, failing with its diagnostics if it does not parse. */
static Program *ok(Run *r, const char *src)
{
	Program *p = run(r, src);
	if (!p)
		fail_msg("unexpected diagnostics:\n%s", r->out);
	return p;
}

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	size_t k;
	while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
		n += k;
		if (n == cap)
			buf = realloc(buf, cap *= 2);
	}
	fclose(f);
	buf[n] = 0;
	*len = n;
	return buf;
}

static int find_stage(const Program *p, const char *name)
{
	for (int i = 0; i < p->nstages; i++)
		if (strcmp(p->stages[i].name, name) == 0)
			return i;
	return -1;
}

/* A valid program around `extra`, which starts on line 7: stages a, b, c of width 8,
 * and schedule gpipe unless extra has a schedule. */
static const char *prog3(const char *extra)
{
	static char buf[4096];
	snprintf(buf, sizeof buf,
		"pipeline t;\nmicrobatches 4;\ninput 4x8;\n"
		"stage a { linear 8; relu; }\nstage b { linear 8; gelu; }\n"
		"stage c { linear 8; loss mse; }\n%s\n%s", extra,
		strstr(extra, "schedule") ? "" : "schedule gpipe;\n");
	return buf;
}

/* ---- good inputs ---------------------------------------------------------------- */

static void front__mlp4__parses(void **state)
{
	(void)state;
	size_t len;
	char *src = read_all("examples/mlp4.pipe", &len);
	assert_non_null(src);
	Run r;
	Program *p = run_len(&r, "examples/mlp4.pipe", src, len, 0);
	if (!p)
		fail_msg("%s", r.out);
	assert_string_equal(p->name, "mlp4");
	assert_int_equal(p->name_loc.line, 2);
	assert_int_equal(p->name_loc.col, 10);
	assert_int_equal(p->name_loc.len, 4);
	assert_int_equal(p->dims[DIM_PP], 4);
	assert_int_equal(p->dims[DIM_DP], 2);
	assert_int_equal(p->dims[DIM_TP], 1);
	assert_int_equal(p->ndims, DIM_COUNT);
	assert_int_equal(p->dim_order[0], DIM_PP);
	assert_int_equal(p->dim_order[1], DIM_DP);
	assert_int_equal(p->dim_order[2], DIM_TP);
	assert_int_equal(p->microbatches, 8);
	assert_int_equal(p->rows, 16);
	assert_int_equal(p->cols, 512);
	assert_int_equal(p->nstages, 4);
	static const int outs[] = {1024, 1024, 1024, 512};
	static const uint8_t act[] = {LAYER_RELU, LAYER_GELU, LAYER_RELU, LAYER_MSE};
	for (int i = 0; i < 4; i++) {
		ProgStage *s = &p->stages[i];
		char name[16];
		snprintf(name, sizeof name, "s%d", i);
		assert_string_equal(s->name, name);
		assert_int_equal(s->loc.line, 7 + i);
		assert_int_equal(s->in, i == 0 ? 512 : 1024);
		assert_int_equal(s->out, outs[i]);
		assert_int_equal(s->nlayers, 2);
		assert_int_equal(s->layers[0].kind, LAYER_LINEAR);
		assert_int_equal(s->layers[0].in, s->in);
		assert_int_equal(s->layers[0].out, outs[i]);
		assert_int_equal(s->layers[1].kind, act[i]);
		assert_int_equal(s->layers[1].in, outs[i]);
		assert_int_equal(s->layers[1].out, outs[i]);
		assert_int_equal(s->has_cost, i == 3);
		if (i < 3) {
			assert_int_equal(s->cost[0], 1000);
			assert_int_equal(s->cost[1], 1000);
			assert_int_equal(s->cost[2], 1000);
		}
	}
	assert_int_equal(p->stages[3].cost[0], 2000);
	assert_int_equal(p->stages[3].cost[1], 2000);
	assert_int_equal(p->stages[3].cost[2], 1500);
	assert_int_equal(p->stages[3].cost_loc.line, 18);
	assert_int_equal(p->nskips, 1);
	assert_int_equal(p->skips[0].src, 0);
	assert_int_equal(p->skips[0].dst, 2);
	assert_int_equal(p->skips[0].loc.line, 12);
	assert_string_equal(p->schedule, "1f1b");
	assert_int_equal(p->ncustom, 0);
	assert_null(p->csv_path);
	assert_int_equal(p->place, PLACE_LOOP);
	assert_int_equal(p->link_ideal, 0);
	assert_int_equal(p->latency_ns, 5000);
	assert_true(p->bandwidth == 50e9);
	assert_int_equal(p->device_per_node, PROG_DEFAULT_DEVICES_PER_NODE);
	assert_int_equal(p->ndevices, 0);
	assert_string_equal(p->file, "examples/mlp4.pipe");
	assert_int_equal(r.outlen, 0);
	run_free(&r);
	free(src);
}

static void front__examples__parse(void **state)
{
	(void)state;
	static const char *const files[] = {"examples/tiny.pipe", "examples/skips.pipe"};
	for (int i = 0; i < 2; i++) {
		size_t len;
		char *src = read_all(files[i], &len);
		assert_non_null(src);
		Run r;
		Program *p = run_len(&r, files[i], src, len, 0);
		if (!p)
			fail_msg("%s", r.out);
		if (i == 0) {
			assert_int_equal(p->dims[DIM_PP], 2);
			assert_int_equal(p->nstages, 2);
			assert_int_equal(p->link_ideal, 1);
			assert_int_equal(p->latency_ns, 0);
			assert_int_equal(p->place, PLACE_DEFAULT);
		} else {
			assert_int_equal(p->dims[DIM_PP], 4);
			assert_int_equal(p->nskips, 2);
			assert_string_equal(p->schedule, "gpipe");
		}
		run_free(&r);
		free(src);
	}
}

static void front__defaults__filled(void **state)
{
	(void)state;
	Run r;
	Program *p = ok(&r, "pipeline d; microbatches 1; input 1x1;\n"
		"stage only { relu; loss mse; }\nschedule gpipe;");
	for (int d = 0; d < DIM_COUNT; d++) {
		assert_int_equal(p->dims[d], 1);
		assert_int_equal(p->dim_order[d], d);
	}
	assert_int_equal(p->place, PLACE_DEFAULT);
	assert_int_equal(p->nplace, 0);
	assert_int_equal(p->link_ideal, 0);
	assert_int_equal(p->latency_ns, PROG_DEFAULT_LATENCY_NS);
	assert_true(p->bandwidth == PROG_DEFAULT_BANDWIDTH);
	assert_int_equal(p->device_per_node, PROG_DEFAULT_DEVICES_PER_NODE);
	/* no FLOPs at all: the 1 ns floor */
	for (int k = 0; k < 3; k++)
		assert_int_equal(p->stages[0].cost[k], 1);
	assert_int_equal(p->stages[0].in, 1);
	assert_int_equal(p->stages[0].out, 1);
	run_free(&r);
}

static void front__cost_units__convert(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		int64_t ns;
	} cases[] = {
		{"1", 1000}, {"1.5", 1500}, {"800ns", 800}, {"3ms", 3000000}, {"2s", 2000000000},
		{"0.5us", 500}, {"1e3", 1000000}, {"2.5e-1ms", 250000}, {"0", 0}, {"0.0004", 0},
		{"0.0006", 1}, {"1000s", 1000000000000}, {"-0", 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char line[128];
		snprintf(line, sizeof line, "cost * f=%s;", cases[i].text);
		Run r;
		Program *p = ok(&r, prog3(line));
		for (int s = 0; s < 3; s++)
			assert_int_equal(p->stages[s].cost[0], cases[i].ns);
		run_free(&r);
	}
}

static void front__cost_fill__stage_then_star_then_flops(void **state)
{
	(void)state;
	Run r;
	/* input 4x8, linear 8: 2*4*8*8 = 512 FLOPs -> 0.005 ns -> the 1 ns floor */
	Program *p = ok(&r, prog3("cost * f=5;\ncost b b=7 w=3ms;"));
	int a = find_stage(p, "a"), b = find_stage(p, "b");
	assert_int_equal(p->stages[a].cost[0], 5000);
	assert_int_equal(p->stages[a].cost[1], 1);
	assert_int_equal(p->stages[a].cost[2], 1);
	assert_int_equal(p->stages[a].has_cost, 0);
	assert_int_equal(p->stages[b].cost[0], 5000);
	assert_int_equal(p->stages[b].cost[1], 7000);
	assert_int_equal(p->stages[b].cost[2], 3000000);
	assert_int_equal(p->stages[b].has_cost, 1);
	assert_int_equal(p->stages[b].cost_loc.line, 8);
	run_free(&r);

	/* mlp4's shapes without cost lines: 2*16*512*1024 FLOPs at 100 TFLOP/s = 167.8 ns */
	p = ok(&r, "pipeline m; microbatches 8; input 16x512;\n"
		"stage s0 { linear 1024; relu; }\nstage s1 { linear 512; loss mse; }\n"
		"schedule 1f1b;");
	for (int k = 0; k < 3; k++) {
		assert_int_equal(p->stages[0].cost[k], 168);
		assert_int_equal(p->stages[1].cost[k], 168);
	}
	run_free(&r);
}

static void front__link_units__convert(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		int64_t ns;
		double bw;
	} cases[] = {
		{"link latency=5us bandwidth=50GB/s;", 5000, 50e9},
		{"link bandwidth=1GiB/s;", PROG_DEFAULT_LATENCY_NS, 1073741824.0},
		{"link latency=800ns;", 800, PROG_DEFAULT_BANDWIDTH},
		{"link latency=2ms bandwidth=100MB/s;", 2000000, 100e6},
		{"link bandwidth=1.5TB/s latency=0;", 0, 1.5e12},
		{"link bandwidth=512MiB/s;", PROG_DEFAULT_LATENCY_NS, 536870912.0},
		{"link bandwidth=2000KB/s;", PROG_DEFAULT_LATENCY_NS, 2e6},
		{"link bandwidth=1000000B/s;", PROG_DEFAULT_LATENCY_NS, 1e6},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		Run r;
		Program *p = ok(&r, prog3(cases[i].text));
		assert_int_equal(p->link_ideal, 0);
		assert_int_equal(p->latency_ns, cases[i].ns);
		assert_true(p->bandwidth == cases[i].bw);
		run_free(&r);
	}
	Run r;
	Program *p = ok(&r, prog3("link ideal;"));
	assert_int_equal(p->link_ideal, 1);
	assert_int_equal(p->latency_ns, 0);
	assert_true(p->bandwidth > 0);
	run_free(&r);
}

static void front__mesh_orders__written_first(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		int dims[DIM_COUNT];
		uint8_t order[DIM_COUNT];
	} cases[] = {
		{"mesh pp=4 dp=2;", {4, 2, 1}, {DIM_PP, DIM_DP, DIM_TP}},
		{"mesh dp=2 pp=4;", {4, 2, 1}, {DIM_DP, DIM_PP, DIM_TP}},
		{"mesh tp=1 dp=3;", {1, 3, 1}, {DIM_TP, DIM_DP, DIM_PP}},
		{"mesh dp=5;", {1, 5, 1}, {DIM_DP, DIM_PP, DIM_TP}},
		{"mesh tp=1 dp=2 pp=3;", {3, 2, 1}, {DIM_TP, DIM_DP, DIM_PP}},
		{"mesh pp=1024 dp=1024;", {1024, 1024, 1}, {DIM_PP, DIM_DP, DIM_TP}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		Run r;
		Program *p = ok(&r, prog3(cases[i].text));
		for (int d = 0; d < DIM_COUNT; d++) {
			assert_int_equal(p->dims[d], cases[i].dims[d]);
			assert_int_equal(p->dim_order[d], cases[i].order[d]);
		}
		assert_int_equal(p->mesh_loc.line, 7);
		run_free(&r);
	}
}

static void front__custom_schedule__parses(void **state)
{
	(void)state;
	Run r;
	Program *p = ok(&r, prog3("mesh pp=2;\nschedule custom {\n"
		"\trank 0: 0F0 0F1 0B0 0B1 2F0 2I0 2W0;\n"
		"\trank 1: 1F0 1B0 1F1 1B1 1I3;\n"
		"\trank 0: ;\n}"));
	assert_string_equal(p->schedule, "custom");
	assert_int_equal(p->sched_loc.line, 8);
	assert_int_equal(p->ncustom, 3);
	assert_int_equal(p->custom[0].rank, 0);
	assert_int_equal(p->custom[0].nacts, 7);
	assert_int_equal(p->custom[0].loc.line, 9);
	assert_int_equal(p->custom[1].rank, 1);
	assert_int_equal(p->custom[2].nacts, 0);
	ProgAction *a = p->custom[0].acts;
	assert_int_equal(a[0].kind, OP_F);
	assert_int_equal(a[0].stage, 0);
	assert_int_equal(a[0].mb, 0);
	assert_int_equal(a[3].kind, OP_BW);
	assert_int_equal(a[3].mb, 1);
	assert_int_equal(a[5].kind, OP_B);
	assert_int_equal(a[5].stage, 2);
	assert_int_equal(a[6].kind, OP_W);
	assert_int_equal(a[6].loc.line, 9);
	assert_int_equal(a[6].loc.col, 34);
	assert_int_equal(a[6].loc.len, 3);
	assert_int_equal(p->custom[1].acts[4].kind, OP_B);
	assert_int_equal(p->custom[1].acts[4].mb, 3);
	run_free(&r);
}

static void front__custom_schedule__stage_range(void **state)
{
	(void)state;
	Run r;
	/* stage 3 of 3 does not exist; microbatch range is not the front end's business */
	assert_null(run(&r, prog3("schedule custom { rank 0: 0F99 3F0; }")));
	assert_non_null(strstr(r.out, "test.pipe:7:32: error: stage index 3 in '3F0' is out of range"));
	run_free(&r);
}

static void front__csv_schedule__resolves_path(void **state)
{
	(void)state;
	static const struct {
		const char *file, *path, *want;
	} cases[] = {
		{"dir/sub/x.pipe", "order.csv", "dir/sub/order.csv"},
		{"dir/sub/x.pipe", "/abs/order.csv", "/abs/order.csv"},
		{"x.pipe", "order.csv", "order.csv"},
		{"-", "a/order.csv", "a/order.csv"},
		{"/x.pipe", "o.csv", "/o.csv"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char line[256];
		snprintf(line, sizeof line, "schedule csv \"%s\";", cases[i].path);
		const char *src = prog3(line);
		Run r;
		Program *p = run_len(&r, cases[i].file, src, strlen(src), 0);
		if (!p)
			fail_msg("%s", r.out);
		assert_string_equal(p->schedule, "csv");
		assert_string_equal(p->csv_path, cases[i].want);
		run_free(&r);
	}
}

static void front__devices__parses(void **state)
{
	(void)state;
	Run r;
	Program *p = ok(&r, prog3("mesh pp=3 dp=2;\ndevices per_node=4;"));
	assert_int_equal(p->device_per_node, 4);
	assert_int_equal(p->ndevices, 0);
	run_free(&r);
	p = ok(&r, prog3("mesh pp=3 dp=2;\ndevices [0, 1, 2, 3, 0, 1];"));
	assert_int_equal(p->device_per_node, 0);
	assert_int_equal(p->ndevices, 6);
	assert_int_equal(p->devices[3], 3);
	assert_int_equal(p->devices[5], 1);
	assert_int_equal(p->devices_loc.line, 8);
	run_free(&r);
}

/* Two ranks of one node on one GPU: a warning, and the program still comes out. */
static void front__devices_shared_gpu__warns(void **state)
{
	(void)state;
	Run r;
	Program *p = ok(&r, prog3("mesh pp=3;\ndevices [0, 0, 1];"));
	assert_int_equal(p->ndevices, 3);
	assert_int_equal(r.diag.nwarnings, 1);
	assert_string_equal(r.out,
		"test.pipe:8:13: warning: ranks 0 and 1 share GPU 0 of one node; NCCL before "
		"2.30 refuses two ranks on one GPU, so this plan runs on CPU backends only\n"
		" devices [0, 0, 1];\n"
		"             ^\n"
		"test.pipe:8:9: note: the list is read as nodes of 2 consecutive ranks, one per "
		"GPU it names\n"
		" devices [0, 0, 1];\n"
		"         ^~~~~~~~~\n");
	run_free(&r);
	/* nodes of one rank per GPU named: these share nothing */
	static const char *const fine[] = {
		"mesh pp=3 dp=2;\ndevices [0, 1, 2, 3, 0, 1];",
		"mesh pp=2 dp=2;\ndevices [1, 0, 1, 0];",
		"mesh pp=3;\ndevices [0, 0, 0];",
		"mesh pp=2 dp=2;\ndevices [0, 2, 0, 2];",
		"mesh pp=3 dp=2;\ndevices per_node=2;",
	};
	for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
		ok(&r, prog3(fine[i]));
		if (r.diag.nwarnings)
			fail_msg("%s: %s", fine[i], r.out);
		run_free(&r);
	}
	/* the second node repeats a GPU */
	ok(&r, prog3("mesh pp=3 dp=2;\ndevices [0, 1, 2, 2, 1, 1];"));
	assert_int_equal(r.diag.nwarnings, 1);
	assert_non_null(strstr(r.out, "warning: ranks 4 and 5 share GPU 1 of one node"));
	run_free(&r);
}

static void front__placement__forms(void **state)
{
	(void)state;
	Run r;
	Program *p = ok(&r, prog3("mesh pp=2;\nplacement v;"));
	assert_int_equal(p->place, PLACE_V);
	run_free(&r);
	p = ok(&r, prog3("mesh pp=2;\nplacement [1, 0, 1];"));
	assert_int_equal(p->place, PLACE_LIST);
	assert_int_equal(p->nplace, 3);
	assert_int_equal(p->place_list[0], 1);
	assert_int_equal(p->place_list[1], 0);
	assert_int_equal(p->place_loc.line, 8);
	assert_int_equal(p->place_loc.col, 11);
	run_free(&r);
	p = ok(&r, prog3("placement loop;"));
	assert_int_equal(p->place, PLACE_LOOP);
	run_free(&r);
}

static void front__free_order__accepted(void **state)
{
	(void)state;
	/* statements in any order, blank statements, comments, tabs and CRLF */
	Run r;
	Program *p = ok(&r, "# reversed\r\nschedule gpipe;;\r\nlink ideal;\t# free\r\n"
		"stage a { linear 4; }\nstage b { loss mse; }\n"
		"input 2x3; microbatches 2; pipeline r;");
	(void)p;
	run_free(&r);
}

static void front__names__digits_first(void **state)
{
	(void)state;
	/* 1f1b is a name, but 2nd reads as the number 2 with unit "nd" */
	Run r;
	Program *p = ok(&r, "pipeline n; microbatches 2; input 2x3;\n"
		"stage a1 { linear 4; }\nstage b_2 { loss mse; }\ncost b_2 f=1;\nschedule 1f1b;");
	assert_string_equal(p->stages[1].name, "b_2");
	assert_int_equal(p->stages[1].cost[0], 1000);
	assert_string_equal(p->schedule, "1f1b");
	run_free(&r);
	assert_null(run(&r, "stage 2nd { loss mse; }"));
	const char *want = "test.pipe:1:7: error: syntax error: unexpected number '2nd', "
		"expected name\n stage 2nd { loss mse; }\n       ^~~\n";
	assert_true(r.outlen >= strlen(want));
	assert_memory_equal(r.out, want, strlen(want));
	run_free(&r);
}

/* ---- diagnostics ---------------------------------------------------------------- */

static void front__every_registered_schedule__accepted(void **state)
{
	(void)state;
	for (int i = 0; i < sched_count; i++) {
		const char *n = sched_registry[i]->name;
		if (!strcmp(n, "custom") || !strcmp(n, "csv"))
			continue; // they need a body or a file
		char line[64];
		snprintf(line, sizeof line, "schedule %s;", n);
		Run r;
		Program *p = run(&r, prog3(line));
		if (!p)
			fail_msg("%s", r.out);
		assert_string_equal(p->schedule, n);
		run_free(&r);
	}
	Run r;
	assert_null(run(&r, prog3("schedule zbh3;")));
	const char *want = "test.pipe:7:10: error: unknown schedule 'zbh3'; did you mean 'zbh1'?\n";
	assert_memory_equal(r.out, want, strlen(want));
	run_free(&r);
}

/* Command-line values are checked like the file's and located on the command line. */
static void front__override__located_on_the_command_line(void **state)
{
	(void)state;
	Run r;
	Program *p = ok(&r, prog3("schedule gpipe;"));
	FILE *f = open_memstream(&r.out, &r.outlen);
	assert_non_null(f);
	free(r.out);
	r.diag.out = f;
	ProgOverrides o = {.schedule = "gpipee", .microbatches = 2000000};
	assert_int_not_equal(front_override(&r.arena, &r.diag, p, &o), 0);
	fclose(f);
	assert_string_equal(r.out,
		"<command line>: error: unknown schedule 'gpipee'; did you mean 'gpipe'?\n"
		" --schedule gpipee --microbatches 2000000\n"
		"            ^~~~~~\n"
		"<command line>: error: microbatches must be at most 1048576, got 2000000\n"
		" --schedule gpipee --microbatches 2000000\n"
		"                                  ^~~~~~~\n");
	run_free(&r);

	p = ok(&r, prog3("schedule gpipe;"));
	o = (ProgOverrides){.schedule = "1f1b", .microbatches = 6};
	assert_int_equal(front_override(&r.arena, &r.diag, p, &o), 0);
	assert_string_equal(p->schedule, "1f1b");
	assert_int_equal(p->microbatches, 6);
	assert_int_equal(p->sched_loc.line, DIAG_CMDLINE);
	assert_int_equal(p->mb_loc.line, DIAG_CMDLINE);
	run_free(&r);
}

static void front__suggest__closest_within_a_third_or_abbreviated(void **state)
{
	(void)state;
	static const char *const names[] = {"gpipe", "1f1b", "interleaved", "zbv", NULL};
	assert_string_equal(diag_suggest("gpip", names, 5), "gpipe");
	assert_string_equal(diag_suggest("1f1", names, 5), "1f1b");
	assert_string_equal(diag_suggest("interleave", names, 5), "interleaved");
	assert_string_equal(diag_suggest("intreleaved", names, 5), "interleaved");
	assert_null(diag_suggest("zzzzzz", names, 5));
	assert_null(diag_suggest("gp", names, 5));
	assert_string_equal(diag_suggest("zb", names, 5), "zbv");
	assert_null(diag_suggest("x", names, 0));
	/* case aside, and a first part for the whole */
	assert_string_equal(diag_suggest("1F1B", names, 5), "1f1b");
	assert_string_equal(diag_suggest("ZBV", names, 5), "zbv");
	static const char *const keys[] = {"heads", "kv_heads", "node_latency", "node_bandwidth"};
	assert_string_equal(diag_suggest("kv", keys, 4), "kv_heads");
	assert_string_equal(diag_suggest("KV", keys, 4), "kv_heads");
	assert_null(diag_suggest("node", keys, 4)); // two names begin so
	assert_null(diag_suggest("he", keys, 4));   // too short a part of "heads"
}

static void front__caret__keeps_tabs_and_spans(void **state)
{
	(void)state;
	Run r;
	assert_null(run(&r, prog3("\t\tcost  zz f=1;")));
	assert_string_equal(r.out,
		"test.pipe:7:9: error: unknown stage 'zz'\n"
		" \t\tcost  zz f=1;\n"
		" \t\t      ^~\n");
	run_free(&r);
}

static void front__long_line__quote_is_cut(void **state)
{
	(void)state;
	size_t n = 1 << 20;
	char *src = malloc(n + 64);
	memset(src, ' ', n);
	memcpy(src + n / 2, "@", 1);
	strcpy(src + n, "\n");
	Run r;
	assert_null(run_len(&r, "long.pipe", src, strlen(src), 0));
	char want[64];
	snprintf(want, sizeof want, "long.pipe:1:%zu: error: stray character '@'\n", n / 2 + 1);
	assert_memory_equal(r.out, want, strlen(want));
	assert_true(r.outlen < 600); // a window, not the megabyte
	run_free(&r);
	free(src);
}

static void front__max_errors__stops_with_one_line(void **state)
{
	(void)state;
	char src[1024] = "";
	for (int i = 0; i < 30; i++)
		strcat(src, "@\n");
	Run r;
	assert_null(run_len(&r, "m.pipe", src, strlen(src), 5));
	int errors = 0;
	for (char *s = r.out; (s = strstr(s, ": error: ")); s++)
		errors++;
	assert_int_equal(errors, 5);
	assert_non_null(strstr(r.out, "m.pipe:5:1: error: stray character '@'\n"));
	const char *tail = "too many errors, stopping\n";
	assert_true(r.outlen > strlen(tail));
	assert_string_equal(r.out + r.outlen - strlen(tail), tail);
	run_free(&r);
}

/* Syntax errors recover on every line, so the cap is what stops them too. */
static void front__max_errors__caps_syntax_errors(void **state)
{
	(void)state;
	char src[1024] = "";
	for (int i = 0; i < 30; i++)
		strcat(src, "backward s1 -> s0;\n");
	Run r;
	assert_null(run_len(&r, "m.pipe", src, strlen(src), 5));
	int errors = 0;
	for (char *s = r.out; (s = strstr(s, ": error: ")); s++)
		errors++;
	assert_int_equal(errors, 5);
	assert_non_null(strstr(r.out, "m.pipe:5:1: error: unknown statement 'backward'\n"));
	const char *tail = "too many errors, stopping\n";
	assert_true(r.outlen > strlen(tail));
	assert_string_equal(r.out + r.outlen - strlen(tail), tail);
	run_free(&r);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void front__golden__diagnostics_match(void **state)
{
	(void)state;
	DIR *dir = opendir(GOLDEN_DIR);
	assert_non_null(dir);
	char *names[512];
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dir)) && n < 512) {
		size_t l = strlen(e->d_name);
		if (l > 5 && strcmp(e->d_name + l - 5, ".pipe") == 0)
			names[n++] = strndup(e->d_name, l - 5);
	}
	closedir(dir);
	qsort(names, (size_t)n, sizeof names[0], by_name);
	int update = getenv("PIPECC_UPDATE_GOLDEN") != NULL, failed = 0;
	for (int i = 0; i < n; i++) {
		char path[512], errpath[512];
		snprintf(path, sizeof path, GOLDEN_DIR "/%s.pipe", names[i]);
		snprintf(errpath, sizeof errpath, GOLDEN_DIR "/%s.err", names[i]);
		size_t len, wlen;
		char *src = read_all(path, &len);
		assert_non_null(src);
		Run r;
		Program *p = run_len(&r, path, src, len, 0);
		if (p) {
			fprintf(stderr, "%s: parsed without a diagnostic\n", path);
			failed++;
		}
		if (update) {
			FILE *f = fopen(errpath, "wb");
			assert_non_null(f);
			fwrite(r.out, 1, r.outlen, f);
			fclose(f);
		}
		char *want = read_all(errpath, &wlen);
		if (!want) {
			fprintf(stderr, "%s: missing\n", errpath);
			failed++;
		} else if (wlen != r.outlen || memcmp(want, r.out, wlen) != 0) {
			fprintf(stderr, "%s: mismatch\n--- expected\n%s--- got\n%s---\n", path, want,
				r.out);
			failed++;
		}
		free(want);
		run_free(&r);
		free(src);
		free(names[i]);
	}
	assert_true(n >= 25);
	assert_int_equal(failed, 0);
}

/* ---- inputs that must not crash --------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Parses and throws away; the checks are the Run contract and the sanitizers. */
static void survive(const char *src, size_t len)
{
	Run r;
	run_len(&r, "fuzz.pipe", src, len, 0);
	run_free(&r);
}

static void front__empty__reports(void **state)
{
	(void)state;
	Run r;
	assert_null(run(&r, ""));
	assert_string_equal(r.out, "test.pipe: error: empty program: expected 'pipeline NAME;'\n");
	run_free(&r);
	assert_null(run_len(&r, "nul.pipe", "\0\0\0", 3, 0));
	assert_string_equal(r.out, "nul.pipe:1:1: error: stray byte 0x00\n ???\n ^~~\n");
	run_free(&r);
}

static void front__random_bytes__survive(void **state)
{
	(void)state;
	char buf[1024];
	for (int it = 0; it < 3000; it++) {
		size_t len = next() % sizeof buf;
		for (size_t i = 0; i < len; i++)
			buf[i] = (char)next();
		survive(buf, len);
	}
}

static void front__token_soup__survives(void **state)
{
	(void)state;
	static const char *const toks[] = {
		"pipeline", "mesh", "microbatches", "input", "stage", "skip", "schedule",
		"placement", "cost", "link", "devices", "s0", "s1", "s2", "pp=2", "dp=2", "tp=2",
		"=", ";", ";", ";", "{", "}", "[", "]", ",", ":", "->", "-", "*", "1", "0", "8",
		"16x512", "0F0", "1B1", "2W0", "1e999", "99999999999999999999", "1.5ms", "5us",
		"50GB/s", "linear", "relu", "gelu", "loss", "mse", "custom", "csv", "rank",
		"\"a.csv\"", "\"", "loop", "v", "ideal", "f=1", "b=2", "w=3", "per_node=2",
		"latency=1", "bandwidth=1GB/s", "gpipe", "1f1b", "zbv", "#c\n", "\n", "\t", "\x01",
	};
	enum { NT = sizeof toks / sizeof toks[0] };
	char buf[4096];
	for (int it = 0; it < 4000; it++) {
		size_t len = 0;
		int n = (int)(next() % 80);
		for (int i = 0; i < n; i++) {
			const char *t = toks[next() % NT];
			size_t l = strlen(t);
			if (len + l + 1 >= sizeof buf)
				break;
			memcpy(buf + len, t, l);
			len += l;
			buf[len++] = ' ';
		}
		survive(buf, len);
	}
}

static void front__mutated_mlp4__survives(void **state)
{
	(void)state;
	size_t len;
	char *src = read_all("examples/mlp4.pipe", &len);
	assert_non_null(src);
	static const char *const ins[] = {
		";", "{", "}", "->", "[", "]", "stage", "1e999", "0F0", "\"", "#", "\n", "\t", "x",
		"-", "*", "=", ",", ":", "99999999999999999999", "s9", "loss mse;", "\0",
	};
	size_t cap = len * 2 + 256;
	char *buf = malloc(cap);
	int parsed = 0;
	for (int it = 0; it < 3000; it++) {
		memcpy(buf, src, len);
		size_t n = len;
		int edits = 1 + (int)(next() % 6);
		for (int e = 0; e < edits; e++) {
			size_t at = n ? next() % n : 0;
			switch (next() % 4) {
			case 0: // change a byte
				if (n)
					buf[at] = (char)next();
				break;
			case 1: { // delete a span
				size_t k = next() % 16;
				if (k > n - at)
					k = n - at;
				memmove(buf + at, buf + at + k, n - at - k);
				n -= k;
				break;
			}
			case 2: { // insert a token
				const char *t = ins[next() % (sizeof ins / sizeof ins[0])];
				size_t k = *t ? strlen(t) : 1;
				if (n + k < cap) {
					memmove(buf + at + k, buf + at, n - at);
					memcpy(buf + at, t, k);
					n += k;
				}
				break;
			}
			default: { // duplicate a span
				size_t k = next() % 64;
				if (k > n - at)
					k = n - at;
				if (n + k < cap) {
					memmove(buf + at + k, buf + at, n - at);
					n += k;
				}
				break;
			}
			}
		}
		Run r;
		parsed += run_len(&r, "fuzz.pipe", buf, n, 0) != NULL;
		run_free(&r);
	}
	assert_true(parsed < 3000); // the mutations did break things
	free(buf);
	free(src);
}

static void front__huge_inputs__survive(void **state)
{
	(void)state;
	size_t n = 1 << 20;
	char *buf = malloc(3 * n + 64);
	/* a megabyte of one name, of digits, of a comment before a valid program */
	static const char fills[] = {'x', '7', '#'};
	for (int k = 0; k < 3; k++) {
		memset(buf, fills[k], n);
		size_t len = n;
		if (k == 2) {
			const char *p = prog3("schedule gpipe;");
			buf[len++] = '\n';
			strcpy(buf + len, p);
			len += strlen(p);
			Run r;
			if (!run_len(&r, "big.pipe", buf, len, 0))
				fail_msg("%s", r.out);
			run_free(&r);
		} else {
			Run r;
			assert_null(run_len(&r, "big.pipe", buf, len, 0));
			assert_true(r.outlen < 2000);
			run_free(&r);
		}
	}
	/* 10000 nested braces, at the top and inside a stage and a custom schedule */
	static const char *const heads[] = {"", "pipeline p; stage s ", "schedule custom "};
	for (int k = 0; k < 3; k++) {
		size_t len = strlen(heads[k]);
		memcpy(buf, heads[k], len);
		memset(buf + len, '{', 10000);
		memset(buf + len + 10000, '}', 10000);
		len += 20000;
		Run r;
		assert_null(run_len(&r, "deep.pipe", buf, len, 0));
		assert_true(r.outlen < 4000);
		run_free(&r);
	}
	/* a long statement list: many stages, skips and costs */
	size_t len = (size_t)sprintf(buf, "pipeline many; microbatches 1; input 1x1;\n");
	for (int i = 0; i < 20000; i++)
		len += (size_t)sprintf(buf + len, "stage s%d { relu; }\nskip s0 -> s%d;\ncost s%d f=1;\n",
			i, i, i);
	len += (size_t)sprintf(buf + len, "stage last { loss mse; }\nschedule gpipe;\n");
	Run r;
	assert_null(run_len(&r, "many.pipe", buf, len, 0)); // s0 -> s0 and s0 -> s1
	assert_non_null(strstr(r.out, "skip from stage 's0' to itself"));
	run_free(&r);
	free(buf);
}

static void front__huge_numbers__rejected(void **state)
{
	(void)state;
	static const char *const lines[] = {
		"microbatches 1e999;", "microbatches 99999999999999999999999;",
		"cost * f=1e999;", "cost * f=1e308s;", "cost * f=1001s;", "link bandwidth=1e999GB/s;",
		"mesh pp=2147483648;", "mesh pp=1048576 dp=2;", "placement [4294967296, 0, 0];",
		"schedule custom { rank 0: 99999999999F0; }", "schedule custom { rank 0: 0F99999999999; }",
		"devices [99999999999];", "input 99999999999x2;",
	};
	for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
		Run r;
		if (run(&r, prog3(lines[i])))
			fail_msg("accepted: %s", lines[i]);
		run_free(&r);
	}
}

/* An allocation the arena cannot make jumps to its owner with the size (here a size
 * that does not fit a size_t with the block header; malloc refusing one is the
 * failalloc CLI test's, since ASan aborts on a huge malloc); blocks allocated before
 * stay owned by the arena. */
static void arena__impossible_size__jumps_with_the_size(void **state)
{
	(void)state;
	static const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 40};
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		jmp_buf jb;
		Arena a = {.oom = &jb};
		char *keep = arena_strdup(&a, "kept");
		volatile int jumped = 0;
		if (setjmp(jb) == 0) {
			(void)arena_alloc(&a, sizes[i]);
		} else {
			jumped = 1;
		}
		assert_true(jumped);
		assert_true(a.failed >= sizes[i]);
		assert_string_equal(keep, "kept");
		arena_free(&a);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(front__mlp4__parses),
		cmocka_unit_test(front__examples__parse),
		cmocka_unit_test(front__defaults__filled),
		cmocka_unit_test(front__cost_units__convert),
		cmocka_unit_test(front__cost_fill__stage_then_star_then_flops),
		cmocka_unit_test(front__link_units__convert),
		cmocka_unit_test(front__mesh_orders__written_first),
		cmocka_unit_test(front__custom_schedule__parses),
		cmocka_unit_test(front__custom_schedule__stage_range),
		cmocka_unit_test(front__csv_schedule__resolves_path),
		cmocka_unit_test(front__devices__parses),
		cmocka_unit_test(front__devices_shared_gpu__warns),
		cmocka_unit_test(front__placement__forms),
		cmocka_unit_test(front__free_order__accepted),
		cmocka_unit_test(front__names__digits_first),
		cmocka_unit_test(front__every_registered_schedule__accepted),
		cmocka_unit_test(front__override__located_on_the_command_line),
		cmocka_unit_test(front__suggest__closest_within_a_third_or_abbreviated),
		cmocka_unit_test(front__caret__keeps_tabs_and_spans),
		cmocka_unit_test(front__long_line__quote_is_cut),
		cmocka_unit_test(front__max_errors__stops_with_one_line),
		cmocka_unit_test(front__max_errors__caps_syntax_errors),
		cmocka_unit_test(front__golden__diagnostics_match),
		cmocka_unit_test(front__empty__reports),
		cmocka_unit_test(front__random_bytes__survive),
		cmocka_unit_test(front__token_soup__survives),
		cmocka_unit_test(front__mutated_mlp4__survives),
		cmocka_unit_test(front__huge_inputs__survive),
		cmocka_unit_test(front__huge_numbers__rejected),
		cmocka_unit_test(arena__impossible_size__jumps_with_the_size),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
