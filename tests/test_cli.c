/* Tests of the shared command-line layer (plan/cli.c) as a library: values converted
 * and range-checked into their destinations, usage errors with exit 2, the help built
 * from the table with defaults read from the destinations and the exit statuses at the
 * end, output paths checked before work, and output files written whole or not at all.
 * The tools' use of it is tests/cli/cli.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../plan/cli.h"
#include "../plan/par_out.h"

typedef struct {
	int n, flag, kind;
	double x;
	uint64_t seed;
	const char *out, *out2, *name;
} Vals;

static const char *const kinds[] = {"red", "green", "blue"};

/* A tool with one option of each kind; messages are not printed.  The short letters
 * are the shared table's: -n (--steps), -c (--check), -o (--output). */
static CliTool tool_of(Vals *v, CliOpt *opts)
{
	CLI_TABLE_BEGIN
	const CliOpt rows[] = {
		{"steps", CLI_INT, &v->n, "N", "a number", 1, 1, 9},
		{"check", CLI_FLAG, &v->flag, NULL, "a flag"},
		{"kind", CLI_ENUM, &v->kind, "KIND", "a kind", 1, .names = kinds, .nnames = 3},
		{"real", CLI_REAL, &v->x, "X", "a real", 1, .rlo = 0, .rhi = 10},
		{"seed", CLI_U64, &v->seed, "S", "a seed"},
		{"output", CLI_OUT, &v->out, "FILE", "an output"},
		{"out2", CLI_OUT, &v->out2, "FILE", "another output"},
		{"name", CLI_STR, &v->name, "NAME", "a name"},
		{0},
	};
	CLI_TABLE_END
	memcpy(opts, rows, sizeof rows);
	return (CliTool){.tool = "t", .input = "IN", .input_what = "input", .opts = opts,
	                 .silent = 1};
}

static int parse(CliTool *t, const char *args)
{
	static char buf[1024];
	static char *argv[64];
	snprintf(buf, sizeof buf, "t %s", args);
	int argc = 0;
	for (char *s = strtok(buf, " "); s && argc < 63; s = strtok(NULL, " "))
		argv[argc++] = s;
	argv[argc] = NULL;
	return cli_parse(t, argc, argv);
}

static void cli__values__converted_into_destinations(void **state)
{
	(void)state;
	Vals v = {.n = 3};
	CliOpt opts[16];
	CliTool t = tool_of(&v, opts);
	assert_int_equal(parse(&t, "in -n 7 --check --kind blue --real 2.5 --seed 0x10 -q"),
	                 CLI_RUN);
	assert_int_equal(v.n, 7);
	assert_int_equal(v.flag, 1);
	assert_int_equal(v.kind, 2);
	assert_true(v.x == 2.5);
	assert_int_equal(v.seed, 16);
	assert_int_equal(t.quiet, 1);
	assert_string_equal(t.in, "in");
	assert_true(cli_given(&t, &v.n));
	assert_false(cli_given(&t, &v.out));
}

static void cli__bad_values__usage_error(void **state)
{
	(void)state;
	const char *bad[] = {"in -n 0", "in -n 10", "in -n x", "in --kind purple", "in --real 0",
	                     "in --real 11", "in --seed -1", "in --bogus", "in -z", "in -n",
	                     "", "in in2"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		Vals v = {0};
		CliOpt opts[16];
		CliTool t = tool_of(&v, opts);
		if (parse(&t, bad[i]) != CLI_EXIT_USAGE)
			fail_msg("'%s' is not a usage error", bad[i]);
	}
}

static void cli__help__defaults_from_destinations_and_exit_statuses(void **state)
{
	(void)state;
	Vals v = {.n = 4, .kind = 1, .x = 0.25};
	CliOpt opts[16];
	CliTool t = tool_of(&v, opts);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cli_help(&t, f);
	fclose(f);
	assert_non_null(strstr(buf, "usage: t IN [options]"));
	assert_non_null(strstr(buf, "-n, --steps N"));
	assert_non_null(strstr(buf, "(default: 4)"));
	assert_non_null(strstr(buf, "one of: red, green, blue (default: green)"));
	assert_non_null(strstr(buf, "(default: 0.25)"));
	assert_non_null(strstr(buf, "-q, --quiet"));
	assert_non_null(strstr(buf, "  0  ok"));
	assert_non_null(strstr(buf, "  2  a usage error"));
	free(buf);
}

static void cli__letters__one_meaning_from_the_shared_table(void **state)
{
	(void)state;
	assert_int_equal(cli_letter("schedule"), 's');
	assert_int_equal(cli_letter("steps"), 'n');
	assert_int_equal(cli_letter("quiet"), 'q');
	assert_int_equal(cli_letter("json"), 0); // -j is kept free
	assert_int_equal(cli_letter("svg"), 0);
	const char *taken[] = {"schedule", "microbatches", "emit", "output", "steps",
	                       "grid", "width", "backend", "check", "trace"};
	for (size_t i = 0; i < sizeof taken / sizeof *taken; i++)
		for (size_t k = 0; k < i; k++)
			if (cli_letter(taken[i]) == cli_letter(taken[k]))
				fail_msg("--%s and --%s share -%c", taken[i], taken[k], cli_letter(taken[i]));
	Vals v = {0};
	CliOpt opts[16];
	CliTool t = tool_of(&v, opts);
	assert_int_equal(parse(&t, "in -c -o /dev/null"), CLI_RUN);
	assert_int_equal(v.flag, 1);
	assert_string_equal(v.out, "/dev/null");
	t = tool_of(&v, opts);
	assert_int_equal(parse(&t, "in -s x"), CLI_EXIT_USAGE); // pipecc's letter, not t's
}

/* A letter a tool gave up is a usage error there, its long name still works, and the
 * same letter stays the other tools' (cli.sh pins the messages). */
static void cli__retired_letters__usage_errors_long_names_kept(void **state)
{
	(void)state;
	Vals v = {0};
	CliOpt opts[16];
	CLI_TABLE_BEGIN
	CliOpt rows[] = {
		{"seed", CLI_U64, &v.seed, "S", "a seed"},
		{"json", CLI_FLAG, &v.flag, NULL, "JSON"},
		{"steps", CLI_INT, &v.n, "N", "steps", 1, 1, 9},
		{0},
	};
	CLI_TABLE_END
	const struct {
		const char *tool, *args;
		int rc;
	} cases[] = {
		{"piperun", "in -s 3", CLI_EXIT_USAGE},
		{"piperun", "in -j", CLI_EXIT_USAGE},
		{"piperun", "in -qj", CLI_EXIT_USAGE},
		{"piperun", "in --seed 3 --json -n 2", CLI_RUN},
		{"pipesim", "in -j", CLI_EXIT_USAGE},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		memcpy(opts, rows, sizeof rows);
		CliTool t = {.tool = cases[i].tool, .input = "IN", .input_what = "input",
		             .opts = opts, .silent = 1};
		if (parse(&t, cases[i].args) != cases[i].rc)
			fail_msg("%s %s: wanted %d", cases[i].tool, cases[i].args, cases[i].rc);
	}
	assert_int_equal(v.seed, 3);
	assert_int_equal(v.n, 2);
}

static void cli__outputs__checked_before_work(void **state)
{
	(void)state;
	char dir[] = "/tmp/test_cli.XXXXXX";
	assert_non_null(mkdtemp(dir));
	char ok[256], missing[256], args[1024];
	snprintf(ok, sizeof ok, "%s/ok", dir);
	snprintf(missing, sizeof missing, "%s/no/x", dir);
	char twice[600], in_ok[300], in_missing[300], in_dir[300];
	snprintf(in_ok, sizeof in_ok, "in -o %s", ok);
	snprintf(in_missing, sizeof in_missing, "in -o %s", missing);
	snprintf(in_dir, sizeof in_dir, "in -o %s", dir);
	snprintf(twice, sizeof twice, "in -o %s --out2 %s", ok, ok);
	struct {
		const char *args;
		int check_rc;
	} cases[] = {
		{in_ok, 0},
		{"in -o -", 0},
		{"in -o /dev/null", 0},
		{in_missing, CLI_EXIT_FAIL},
		{in_dir, CLI_EXIT_FAIL},    // a folder
		{twice, CLI_EXIT_USAGE},    // the same file twice
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		snprintf(args, sizeof args, "%s", cases[i].args);
		Vals v = {0};
		CliOpt opts[16];
		CliTool t = tool_of(&v, opts);
		assert_int_equal(parse(&t, args), CLI_RUN);
		if (cli_check_outputs(&t) != cases[i].check_rc)
			fail_msg("'%s': wanted %d", cases[i].args, cases[i].check_rc);
	}
	assert_int_equal(access(ok, F_OK), -1); // checking creates nothing
	rmdir(dir);
}

static int write_hello(FILE *f, void *arg)
{
	(void)arg;
	return fputs("hello\n", f) < 0 ? -1 : 0;
}

static int write_then_fail(FILE *f, void *arg)
{
	(void)arg;
	fputs("partial\n", f);
	return -1;
}

static void cli__write__whole_or_not_at_all(void **state)
{
	(void)state;
	char dir[] = "/tmp/test_cli.XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[256], buf[64] = {0};
	snprintf(path, sizeof path, "%s/out", dir);
	Vals v = {0};
	CliOpt opts[16];
	CliTool t = tool_of(&v, opts);

	assert_int_equal(cli_write(&t, path, write_hello, NULL), 0);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof buf, f));
	fclose(f);
	assert_string_equal(buf, "hello\n");

	/* A failing writer: the old file stays, and no temporary is left beside it. */
	assert_int_equal(cli_write(&t, path, write_then_fail, NULL), CLI_EXIT_FAIL);
	f = fopen(path, "r");
	assert_non_null(fgets(buf, sizeof buf, f));
	fclose(f);
	assert_string_equal(buf, "hello\n");
	char cmd[512];
	snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) -eq 1", dir);
	assert_int_equal(system(cmd), 0);

	/* A device is written in place and stays a device; a full one fails. */
	assert_int_equal(cli_write(&t, "/dev/null", write_hello, NULL), 0);
	struct stat st;
	assert_int_equal(stat("/dev/null", &st), 0);
	assert_true(S_ISCHR(st.st_mode));
	if (access("/dev/full", W_OK) == 0)
		assert_int_equal(cli_write(&t, "/dev/full", write_hello, NULL), CLI_EXIT_FAIL);

	remove(path);
	rmdir(dir);
}

/* A writer that hands over 40000 bytes and then looks at what reached the file: one
 * whole PLAN_WRITE_PIECE (the stream's buffer is a piece, so writes are whole pieces
 * where the file starts one; the default buffer would have passed 36864 bytes). */
static int write_in_pieces(FILE *f, void *arg)
{
	static char text[40000];
	memset(text, 'x', sizeof text);
	if (fwrite(text, 1, sizeof text, f) != sizeof text)
		return -1;
	struct stat st;
	if (fstat(fileno(f), &st))
		return -1;
	*(off_t *)arg = st.st_size;
	return 0;
}

static void cli__write__whole_pieces_reach_the_file(void **state)
{
	(void)state;
	char dir[] = "/tmp/test_cli.XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[256];
	snprintf(path, sizeof path, "%s/out", dir);
	Vals v = {0};
	CliOpt opts[16];
	CliTool t = tool_of(&v, opts);
	off_t seen = -1;
	assert_int_equal(cli_write(&t, path, write_in_pieces, &seen), 0);
	assert_int_equal(seen, PLAN_WRITE_PIECE);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 40000);
	remove(path);
	rmdir(dir);
}

static void read_line(const char *path, char *buf, int n)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(buf, n, f));
	fclose(f);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Over an existing file (which an exchange of the two names and a removal replace, or a
 * rename): the name holds the new file and another hard link the old one, a symlink is
 * replaced and not followed, and nothing else is left in the folder. */
static void cli__write__replaces_existing_files(void **state)
{
	(void)state;
	char dir[] = "/tmp/test_cli.XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[256], keep[256], target[256], sym[256], buf[64], cmd[512];
	snprintf(path, sizeof path, "%s/out", dir);
	snprintf(keep, sizeof keep, "%s/keep", dir);
	snprintf(target, sizeof target, "%s/target", dir);
	snprintf(sym, sizeof sym, "%s/sym", dir);
	Vals v = {0};
	CliOpt opts[16];
	CliTool t = tool_of(&v, opts);
	write_text(path, "old\n");
	assert_int_equal(link(path, keep), 0);
	assert_int_equal(cli_write(&t, path, write_hello, NULL), 0);
	read_line(path, buf, sizeof buf);
	assert_string_equal(buf, "hello\n");
	read_line(keep, buf, sizeof buf);
	assert_string_equal(buf, "old\n");
	struct stat a, b;
	assert_int_equal(stat(path, &a), 0);
	assert_int_equal(stat(keep, &b), 0);
	assert_int_equal((int)b.st_nlink, 1); // the old file's name out is gone
	assert_true(a.st_ino != b.st_ino);
	snprintf(cmd, sizeof cmd, "test \"$(ls '%s' | tr '\\n' ' ')\" = 'keep out '", dir);
	assert_int_equal(system(cmd), 0);

	write_text(target, "target\n");
	assert_int_equal(symlink("target", sym), 0);
	assert_int_equal(cli_write(&t, sym, write_hello, NULL), 0);
	assert_int_equal(lstat(sym, &a), 0);
	assert_true(S_ISREG(a.st_mode));
	read_line(sym, buf, sizeof buf);
	assert_string_equal(buf, "hello\n");
	read_line(target, buf, sizeof buf);
	assert_string_equal(buf, "target\n");
	snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) -eq 4", dir);
	assert_int_equal(system(cmd), 0);

	remove(path);
	remove(keep);
	remove(target);
	remove(sym);
	rmdir(dir);
}

static void cli__progress__off_when_quiet_or_not_a_terminal(void **state)
{
	(void)state;
	Vals v = {0};
	CliOpt opts[16];
	CliTool t = tool_of(&v, opts);
	t.silent = 0;
	t.quiet = 1;
	assert_null(cli_progress_start(&t, "work"));
	t.quiet = 0;
	if (!isatty(STDERR_FILENO))
		assert_null(cli_progress_start(&t, "work"));
	cli_progress_phase(NULL, "x"); // NULL is accepted everywhere
	cli_progress_end(NULL);
}

static void cli__version__from_one_place(void **state)
{
	(void)state;
	FILE *f = fopen("VERSION", "r");
	if (!f)
		skip();
	char buf[64] = {0};
	assert_non_null(fgets(buf, sizeof buf, f));
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	assert_string_equal(cli_version, buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(cli__values__converted_into_destinations),
		cmocka_unit_test(cli__bad_values__usage_error),
		cmocka_unit_test(cli__help__defaults_from_destinations_and_exit_statuses),
		cmocka_unit_test(cli__letters__one_meaning_from_the_shared_table),
		cmocka_unit_test(cli__retired_letters__usage_errors_long_names_kept),
		cmocka_unit_test(cli__outputs__checked_before_work),
		cmocka_unit_test(cli__write__whole_or_not_at_all),
		cmocka_unit_test(cli__write__replaces_existing_files),
		cmocka_unit_test(cli__write__whole_pieces_reach_the_file),
		cmocka_unit_test(cli__progress__off_when_quiet_or_not_a_terminal),
		cmocka_unit_test(cli__version__from_one_place),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
