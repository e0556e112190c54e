/* The shared command line (cli.h).  A tool describes its options as a table of CliOpt
 * rows; cli_parse turns the table into getopt_long's arrays, converts and range-checks
 * every value into its destination and prints the help from the same rows, so an
 * option, its parsing and its help line are one fact.  Defaults are not written in help
 * texts: a row with show_default prints the value its destination holds before
 * parsing, which the tool set from its named constant.
 * Short letters are not the tools' own: one table here gives each long option its
 * letter in all three, so a letter cannot mean two things.
 *
 * Output files are written whole or not at all: a regular file goes through a
 * temporary file beside it and a rename, every stdio error (at fwrite, fflush or
 * fclose) is reported with the file's name and the system's reason.  The progress line
 * is drawn by its own thread, so the libraries doing the work need no hooks. */
#include "cli.h"
#include "par_out.h"
#include "plan.h"
#include "oom.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef PIPECC_VERSION
#define PIPECC_VERSION "unknown"
#endif
const char cli_version[] = PIPECC_VERSION;

enum { LONG_BASE = 256, HELP_COL = 26 };

static void vmsg(const CliTool *t, const char *fmt, va_list ap)
{
	char line[2048];
	if (t->silent)
		return;
	/* One write for the whole line: processes under mpirun share the launcher's stderr. */
	int n = snprintf(line, sizeof line, "%s: ", t->tool);
	vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
	fprintf(stderr, "%s\n", line);
}

int cli_usage_error(const CliTool *t, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(t, fmt, ap);
	va_end(ap);
	if (!t->silent)
		fprintf(stderr, "Try '%s --help'.\n", t->tool);
	return CLI_EXIT_USAGE;
}

int cli_error(const CliTool *t, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg(t, fmt, ap);
	va_end(ap);
	return CLI_EXIT_FAIL;
}

int cli_is_std(const char *path)
{
	return !strcmp(path, "-");
}

static const char *out_name(const char *path)
{
	return cli_is_std(path) ? "standard output" : path;
}

/* ------------------------------------------------------------------------------------
 * Short options.  One table for the three tools: a letter is one long option wherever
 * it is typed, so `-s` after pipecc and after pipesim cannot mean two things.  A tool's
 * option has the letter of its long name's row here, and no option has another. */

CLI_TABLE_BEGIN
static const struct {
	int letter;
	const char *name;  // the long option, without "--"; NULL: a letter kept free
	const char *tools; // the tools that have it, for messages; NULL: every tool
	const char *free;  // a letter kept free: why
} letters[] = {
	{'o', "output", "pipecc"},
	{'s', "schedule", "pipecc"},
	{'m', "microbatches", "pipecc"},
	{'e', "emit", "pipecc"},
	{'g', "grid", "pipesim"},
	{'w', "width", "pipesim"},
	{'b', "backend", "piperun"},
	{'n', "steps", "piperun"},
	{'c', "check", "piperun"},
	{'t', "trace", "pipesim and piperun"},
	{'q', "quiet"},
	{'h', "help"},
	{'V', "version"},
	{'j', .free = "left free for the jobs make users expect"},
};
CLI_TABLE_END

/* The letters the tools gave up when their short options became one table: each
 * answers with the long option to write, and what the letter means now. */
static const struct {
	const char *tool;
	int letter;
	const char *name; // the long option it was
} retired[] = {
	{"pipesim", 'm', "model"},
	{"pipesim", 'e', "eager"},
	{"pipesim", 's', "svg"},
	{"pipesim", 'n', "no-record"},
	{"pipesim", 'j', "json"},
	{"piperun", 's', "seed"},
	{"piperun", 'j', "json"},
};

#define COUNT(a) (sizeof(a) / sizeof *(a))

int cli_letter(const char *name)
{
	for (size_t i = 0; i < COUNT(letters); i++)
		if (letters[i].name && !strcmp(letters[i].name, name))
			return letters[i].letter;
	return 0;
}

static int letter_row(int c)
{
	for (size_t i = 0; i < COUNT(letters); i++)
		if (letters[i].letter == c)
			return (int)i;
	return -1;
}

/* "-s is pipecc's --schedule" into buf: what letter c means across the tools. */
static void letter_meaning(int c, char *buf, size_t n)
{
	int r = letter_row(c);
	if (r < 0)
		snprintf(buf, n, "-%c is no tool's", c);
	else if (!letters[r].name)
		snprintf(buf, n, "-%c is %s", c, letters[r].free);
	else
		snprintf(buf, n, "-%c is %s%s--%s", c, letters[r].tools ? letters[r].tools : "",
		         letters[r].tools ? "'s " : "", letters[r].name);
}

static const char one_meaning[] = "short options mean one thing across pipecc, pipesim and piperun";

/* The usage error for -c, which t does not have: a retired letter names the long
 * option to write; a letter another tool has says whose it is. */
static int unknown_letter(const CliTool *t, int c)
{
	char now[160];
	letter_meaning(c, now, sizeof now);
	for (size_t i = 0; i < COUNT(retired); i++) {
		if (retired[i].letter != c || strcmp(retired[i].tool, t->tool))
			continue;
		const char *arg = NULL;
		for (const CliOpt *o = t->opts; o->name && !arg; o++)
			if (!strcmp(o->name, retired[i].name))
				arg = o->kind == CLI_FLAG || o->kind == CLI_LIST ? "" : o->arg;
		return cli_usage_error(t, "-%c is not --%s: write --%s%s%s (%s; %s)", c,
		                       retired[i].name, retired[i].name, arg && *arg ? " " : "",
		                       arg ? arg : "", now, one_meaning);
	}
	if (letter_row(c) >= 0)
		return cli_usage_error(t, "unknown option '-%c' (%s; %s)", c, now, one_meaning);
	return cli_usage_error(t, "unknown option '-%c'", c);
}

/* ------------------------------------------------------------------------------------
 * Help. */

/* The built-in rows every tool has, after its own. */
static const CliOpt builtin[] = {
	{.name = "quiet", .kind = CLI_FLAG, .help = "no progress line on stderr"},
	{.name = "help", .kind = CLI_FLAG, .help = "this text"},
	{.name = "version", .kind = CLI_FLAG, .help = "the version"},
};
enum { B_QUIET, B_HELP, B_VERSION, B_COUNT };

static int nopts(const CliTool *t)
{
	int n = 0;
	while (t->opts[n].name)
		n++;
	return n;
}

static void format_default(const CliOpt *o, char *buf, size_t n)
{
	buf[0] = 0;
	switch (o->kind) {
	case CLI_INT:
		snprintf(buf, n, "%d", *(const int *)o->dest);
		break;
	case CLI_U64:
		snprintf(buf, n, "%" PRIu64, *(const uint64_t *)o->dest);
		break;
	case CLI_REAL:
		snprintf(buf, n, "%g", *(const double *)o->dest);
		break;
	case CLI_ENUM: {
		int v = *(const int *)o->dest;
		snprintf(buf, n, "%s", v >= 0 && v < o->nnames ? o->names[v] : "none");
		break;
	}
	case CLI_STR:
	case CLI_IN:
	case CLI_OUT: {
		const char *s = *(const char *const *)o->dest;
		if (s)
			snprintf(buf, n, "%s", o->kind == CLI_OUT ? out_name(s)
			                       : o->kind == CLI_IN && cli_is_std(s) ? "standard input"
			                                                             : s);
		break;
	}
	default:
		break;
	}
}

static void help_row(FILE *f, const CliOpt *o, const char *extra)
{
	char head[128];
	int c = cli_letter(o->name);
	int n = snprintf(head, sizeof head, "  %c%c%s--%s%s%s", c ? '-' : ' ', c ? c : ' ',
	                 c ? ", " : "  ", o->name,
	                 o->kind == CLI_FLAG || o->kind == CLI_LIST ? "" : " ",
	                 o->kind == CLI_FLAG || o->kind == CLI_LIST ? "" : o->arg);
	fputs(head, f);
	const char *h = o->help;
	if (n >= HELP_COL - 1) { // too wide: the text starts on the next line
		fputc('\n', f);
		n = 0;
	}
	for (int first = 1; h && *h; first = 0) {
		const char *nl = strchr(h, '\n');
		int len = nl ? (int)(nl - h) : (int)strlen(h);
		fprintf(f, "%*s%.*s", (first ? HELP_COL - n : HELP_COL), "", len, h);
		h += len;
		if (*h)
			h++;
		if (*h)
			fputc('\n', f);
	}
	if (extra && *extra)
		fprintf(f, "\n%*s%s", HELP_COL, "", extra);
	char def[256];
	if (o->show_default && (format_default(o, def, sizeof def), def[0]))
		fprintf(f, " (default: %s)", def);
	fputc('\n', f);
}

void cli_help(const CliTool *t, FILE *f)
{
	fprintf(f, "usage: %s %s [options]\n", t->tool, t->input);
	if (t->about)
		fprintf(f, "%s\n", t->about);
	fputc('\n', f);
	for (const CliOpt *o = t->opts; o->name; o++) {
		const char *extra = NULL;
		if (o->kind == CLI_ENUM && o->names) {
			static char list[512];
			size_t k = (size_t)snprintf(list, sizeof list, "one of:");
			for (int i = 0; i < o->nnames && k < sizeof list; i++)
				k += (size_t)snprintf(list + k, sizeof list - k, "%s %s", i ? "," : "",
				                      o->names[i]);
			extra = list;
		}
		help_row(f, o, extra);
	}
	for (int b = 0; b < B_COUNT; b++) {
		CliOpt q = builtin[b];
		if (b == B_QUIET && t->quiet_help) {
			static char text[512];
			snprintf(text, sizeof text, "%s;\nno progress line on stderr", t->quiet_help);
			q.help = text;
		}
		help_row(f, &q, NULL);
	}
	fprintf(f, "\n'-' as %s or as any FILE option means standard input or output.\n", t->input);
	fprintf(f, "\nexit status:\n  %d  ok\n  %d  %s,\n     a bad input (unreadable or invalid) "
	           "or a failed write\n  %d  a usage error\n",
	        CLI_EXIT_OK, CLI_EXIT_FAIL, t->finding ? t->finding : "a finding", CLI_EXIT_USAGE);
}

/* ------------------------------------------------------------------------------------
 * Parsing. */

static int set_value(CliTool *t, const CliOpt *o, const char *v)
{
	char *end;
	errno = 0;
	switch (o->kind) {
	case CLI_FLAG:
		*(int *)o->dest = 1;
		return 0;
	case CLI_INT: {
		long x = strtol(v, &end, 10);
		if (errno || end == v || *end || x < o->lo || x > o->hi)
			return cli_usage_error(t, "--%s: wants a whole number from %ld to %ld, not '%s'",
			                       o->name, o->lo, o->hi, v);
		*(int *)o->dest = (int)x;
		return 0;
	}
	case CLI_U64: {
		unsigned long long x = strtoull(v, &end, 0);
		if (errno || end == v || *end || v[0] == '-')
			return cli_usage_error(t, "--%s: wants a non-negative whole number, not '%s'",
			                       o->name, v);
		*(uint64_t *)o->dest = x;
		return 0;
	}
	case CLI_REAL: {
		double x = strtod(v, &end);
		if (errno || end == v || *end || !isfinite(x) || x <= o->rlo || x > o->rhi)
			return cli_usage_error(t, "--%s: wants a number above %g and at most %g, not '%s'",
			                       o->name, o->rlo, o->rhi, v);
		*(double *)o->dest = x;
		return 0;
	}
	case CLI_ENUM:
		for (int i = 0; i < o->nnames; i++)
			if (!strcmp(v, o->names[i])) {
				*(int *)o->dest = i;
				return 0;
			}
		{
			char list[512];
			size_t k = 0;
			list[0] = 0;
			for (int i = 0; i < o->nnames && k < sizeof list; i++)
				k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "",
				                      o->names[i]);
			char what[32];
			size_t i;
			for (i = 0; o->arg[i] && i + 1 < sizeof what; i++)
				what[i] = (char)(o->arg[i] >= 'A' && o->arg[i] <= 'Z' ? o->arg[i] - 'A' + 'a'
				                                                      : o->arg[i]);
			what[i] = 0;
			return cli_usage_error(t, "--%s: unknown %s '%s' (valid: %s)", o->name, what, v,
			                       list);
		}
	case CLI_STR:
	case CLI_IN:
	case CLI_OUT:
		if (!*v)
			return cli_usage_error(t, "--%s: wants a %s, not an empty string", o->name,
			                       o->kind == CLI_STR ? "value" : "file name ('-' for standard "
			                                                      "input or output)");
		*(const char **)o->dest = v;
		return 0;
	default:
		return cli_usage_error(t, "--%s: internal error: bad option kind", o->name);
	}
}

int cli_parse(CliTool *t, int argc, char **argv)
{
	int n = nopts(t);
	if (n > CLI_MAX_OPTS)
		return cli_usage_error(t, "internal error: more than %d options", CLI_MAX_OPTS);
	memset(t->given, 0, sizeof t->given);
	struct option longs[CLI_MAX_OPTS + B_COUNT + 1];
	char shorts[3 * (CLI_MAX_OPTS + B_COUNT) + 2];
	size_t ns = 0;
	shorts[ns++] = ':'; // report a missing value as ':'
	for (int i = 0; i < n + B_COUNT; i++) {
		const CliOpt *o = i < n ? &t->opts[i] : &builtin[i - n];
		int has_arg = o->kind == CLI_FLAG || o->kind == CLI_LIST ? no_argument : required_argument;
		longs[i] = (struct option){o->name, has_arg, NULL, LONG_BASE + i};
		if (cli_letter(o->name)) {
			shorts[ns++] = (char)cli_letter(o->name);
			if (has_arg)
				shorts[ns++] = ':';
		}
	}
	longs[n + B_COUNT] = (struct option){0, 0, 0, 0};
	shorts[ns] = 0;

	int c;
	opterr = 0;
	optind = 0; // 0, not 1: glibc then also forgets a bundle (-qj) a parse left half read
	while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
		int i = -1;
		if (c >= LONG_BASE)
			i = c - LONG_BASE;
		else if (c != '?' && c != ':')
			for (int k = 0; k < n + B_COUNT && i < 0; k++)
				if (cli_letter(k < n ? t->opts[k].name : builtin[k - n].name) == c)
					i = k;
		if (c == ':') {
			if (optopt && optopt < LONG_BASE)
				return cli_usage_error(t, "option '-%c' needs an argument", optopt);
			return cli_usage_error(t, "option '%s' needs an argument", argv[optind - 1]);
		}
		if (i < 0) {
			if (optopt && optopt < LONG_BASE)
				return unknown_letter(t, optopt);
			return cli_usage_error(t, "unknown option '%s'", argv[optind - 1]);
		}
		if (i >= n) {
			switch (i - n) {
			case B_QUIET:
				t->quiet = 1;
				break;
			case B_HELP:
				cli_help(t, stdout);
				return fflush(stdout) ? CLI_EXIT_FAIL : CLI_EXIT_OK;
			default:
				printf("%s %s\n", t->tool, cli_version);
				if (t->version_extra)
					printf("%s\n", t->version_extra);
				return fflush(stdout) ? CLI_EXIT_FAIL : CLI_EXIT_OK;
			}
			continue;
		}
		if (t->opts[i].kind == CLI_LIST) {
			t->opts[i].list(stdout);
			return fflush(stdout) ? CLI_EXIT_FAIL : CLI_EXIT_OK;
		}
		int rc = set_value(t, &t->opts[i], optarg);
		if (rc)
			return rc;
		t->given[i] = 1;
	}
	if (optind >= argc)
		return cli_usage_error(t, "no %s given", t->input_what);
	if (argc - optind > 1)
		return cli_usage_error(t, "one %s only; extra argument '%s'", t->input_what,
		                       argv[optind + 1]);
	t->in = argv[optind];
	t->in_name = cli_is_std(t->in) ? "<stdin>" : t->in;
	return CLI_RUN;
}

int cli_given(const CliTool *t, const void *dest)
{
	for (int i = 0; t->opts[i].name; i++)
		if (t->opts[i].dest == dest && t->given[i])
			return 1;
	return 0;
}

/* ------------------------------------------------------------------------------------
 * Output files. */

/* Creates and removes the temporary file the write will use, so that a folder which
 * takes no new files (/proc, a read-only mount) is named before the work, with the
 * reason, rather than as "No such file or directory" after it. */
static int probe_temporary(const CliTool *t, const char *path)
{
	size_t n = strlen(path) + 32;
	char *tmp = malloc(n);
	if (!tmp)
		return cli_error(t, "cannot write %s: %s", path, plan_strerror(ENOMEM));
	snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
	int e = errno, rc = 0;
	if (fd >= 0) {
		close(fd);
		unlink(tmp);
	} else {
		struct stat st;
		int exists = stat(path, &st) == 0;
		if (exists && access(path, W_OK) != 0)
			rc = cli_error(t, "cannot write %s: %s", path, plan_strerror(errno));
		else if (e == ENOENT) // /proc: the folder refuses new names
			rc = cli_error(t, "cannot write %s: %sits folder takes no new files", path,
			               exists ? "it is not a regular file we can replace: " : "");
		else
			rc = cli_error(t, "cannot write %s: %s", path, plan_strerror(e));
	}
	free(tmp);
	return rc;
}

/* The folder holding path ("." for a bare name) in a new string, or NULL when out of
 * memory. */
static char *folder_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
}

static int check_output(const CliTool *t, const char *path)
{
	if (cli_is_std(path))
		return 0;
	struct stat st;
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return cli_error(t, "cannot write %s: %s", path, plan_strerror(EISDIR));
		if (!S_ISREG(st.st_mode)) // a device or pipe, written in place
			return access(path, W_OK) ? cli_error(t, "cannot write %s: %s", path,
			                                      plan_strerror(errno))
			                          : 0;
	}
	/* A regular or new file: its folder must take the temporary file. */
	char *d = folder_of(path);
	int rc = 0;
	if (!d || stat(d, &st) != 0)
		rc = cli_error(t, "cannot write %s: %s", path, plan_strerror(d ? errno : ENOMEM));
	else if (!S_ISDIR(st.st_mode))
		rc = cli_error(t, "cannot write %s: %s", path, plan_strerror(ENOTDIR));
	else if (access(d, W_OK | X_OK) != 0)
		rc = cli_error(t, "cannot write %s: %s", path, plan_strerror(errno));
	else
		rc = probe_temporary(t, path);
	free(d);
	return rc;
}

/* Whether paths a and b (neither standard input or output) name one file: the same
 * inode where both exist, else the same name in the same folder however spelled
 * (`x.svg` and `./x.svg`); one that exists and one that does not are two. */
static int same_file(const char *a, const char *b)
{
	struct stat sa, sb;
	int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
	if (ea || eb)
		return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
	const char *na = strrchr(a, '/'), *nb = strrchr(b, '/');
	if (strcmp(na ? na + 1 : a, nb ? nb + 1 : b))
		return 0;
	char *da = folder_of(a), *db = folder_of(b);
	int same = !da || !db ? !strcmp(a, b) // out of memory: by their spelling
	                      : stat(da, &sa) == 0 && stat(db, &sb) == 0 &&
	                            sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
	free(da);
	free(db);
	return same;
}

/* The input path of option row i (the tool's one input when i is -1), or NULL when it
 * is standard input or was not given. */
static const char *input_of(const CliTool *t, int i)
{
	const char *p = NULL;
	if (i < 0)
		p = t->in;
	else if (t->opts[i].kind == CLI_IN && t->given[i])
		p = *(const char *const *)t->opts[i].dest;
	return p && !cli_is_std(p) ? p : NULL;
}

/* Output p of option row i against the outputs before it and every input: 0, or the
 * usage error naming the two.  A device or pipe may be named twice (/dev/null). */
static int check_distinct(const CliTool *t, int i, const char *p)
{
	const CliOpt *o = &t->opts[i];
	struct stat st;
	int std = cli_is_std(p), dev = !std && stat(p, &st) == 0 && !S_ISREG(st.st_mode);
	for (int k = 0; k < i && !dev; k++) {
		const CliOpt *q = &t->opts[k];
		const char *pk = q->kind == CLI_OUT && t->given[k] ? *(const char *const *)q->dest : NULL;
		if (pk && (std ? cli_is_std(pk) : !cli_is_std(pk) && same_file(p, pk)))
			return cli_usage_error(t, "--%s and --%s both write %s", q->name, o->name,
			                       out_name(p));
	}
	for (int k = -1; !std && !dev && (k < 0 || t->opts[k].name); k++) {
		const char *in = input_of(t, k);
		if (in && same_file(p, in) && !(k < 0 && t->in_place))
			return cli_usage_error(t, "--%s would write over the input %s%s%s", o->name, in,
			                       k < 0 ? "" : " of --", k < 0 ? "" : t->opts[k].name);
	}
	return 0;
}

int cli_check_outputs(const CliTool *t)
{
	for (int i = 0; t->opts[i].name; i++) {
		const CliOpt *o = &t->opts[i];
		const char *p = o->kind == CLI_OUT ? *(const char *const *)o->dest : NULL;
		if (!p || !t->given[i])
			continue;
		int rc = check_distinct(t, i, p);
		if (!rc)
			rc = check_output(t, p);
		if (rc)
			return rc;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------
 * Temporary files and signals.  SIGINT, SIGTERM and SIGHUP during a write would leave
 * PATH.tmpPID behind: the open temporary files are kept in a small table that the
 * handler walks with unlink() only (async-signal-safe), then it restores the default
 * action and raises the signal again, so the exit status still says "killed by".  The
 * table is process state by nature (a signal handler has no context to be passed). */

enum { TMP_SLOTS = 16 };
static char *volatile tmp_slots[TMP_SLOTS];
static volatile sig_atomic_t handlers_set;
static const int tmp_signals[] = {SIGINT, SIGTERM, SIGHUP};

static void on_signal(int sig)
{
	for (int i = 0; i < TMP_SLOTS; i++) {
		char *p = tmp_slots[i];
		if (p)
			unlink(p);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void tmp_register(char *path)
{
	if (!handlers_set) {
		handlers_set = 1;
		for (size_t i = 0; i < sizeof tmp_signals / sizeof *tmp_signals; i++) {
			struct sigaction old, sa = {.sa_handler = on_signal};
			sigemptyset(&sa.sa_mask);
			for (size_t k = 0; k < sizeof tmp_signals / sizeof *tmp_signals; k++)
				sigaddset(&sa.sa_mask, tmp_signals[k]);
			/* A signal the caller ignores (nohup) stays ignored. */
			if (sigaction(tmp_signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
				sigaction(tmp_signals[i], &sa, NULL);
		}
	}
	for (int i = 0; i < TMP_SLOTS; i++)
		if (!tmp_slots[i]) {
			tmp_slots[i] = path;
			return;
		}
}

static void tmp_unregister(const char *path)
{
	for (int i = 0; i < TMP_SLOTS; i++)
		if (tmp_slots[i] == path)
			tmp_slots[i] = NULL;
}

FILE *cli_out_open(const CliTool *t, CliOut *o, const char *path)
{
	*o = (CliOut){.path = path};
	if (cli_is_std(path))
		return o->f = stdout;
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		o->f = fopen(path, "w"); // a device or pipe: there is no partial file to avoid
	} else {
		size_t n = strlen(path) + 32;
		o->tmp = malloc(n);
		if (o->tmp) {
			snprintf(o->tmp, n, "%s.tmp%ld", path, (long)getpid());
			tmp_register(o->tmp);
			o->f = fopen(o->tmp, "wx");
		} else {
			errno = ENOMEM;
		}
	}
	/* A buffer of one write piece: every write() a whole piece where the file starts one
	 * (plan_fwrite hands over a piece at a time, or more), so that each is one page-cache
	 * folio of its size (par_out.h, plan_write_piece).  Without it, the default. */
	if (o->f && (o->buf = malloc(PLAN_WRITE_PIECE)) &&
	    setvbuf(o->f, o->buf, _IOFBF, PLAN_WRITE_PIECE)) {
		free(o->buf);
		o->buf = NULL;
	}
	if (!o->f) {
		cli_error(t, "cannot write %s: %s", path, plan_strerror(errno));
		if (o->tmp)
			tmp_unregister(o->tmp);
		free(o->tmp);
		o->tmp = NULL;
	}
	return o->f;
}

/* The finished file at tmp takes path's place.  Where path exists, the two names are
 * exchanged (renameat2 RENAME_EXCHANGE, atomic as a rename) and the old file, now at
 * tmp, is removed: a rename over an existing file makes ext4 (auto_da_alloc) start
 * writing the new file's delayed blocks out inside the rename, 0.22-0.28 s for a 501
 * MiB plan on this project's VM, against nothing for the exchange and 0.09 s to remove
 * the old file.  Neither syncs the file (a plan's checksum catches one a crash cut
 * short).  Where path does not exist, or the file system cannot exchange, a rename.
 * 0, or -1 with errno. */
static int replace_file(const CliTool *t, const char *tmp, const char *path)
{
#ifdef RENAME_EXCHANGE
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) == 0) {
		if (unlink(tmp) != 0) // written all the same: say what is left behind
			cli_error(t, "note: cannot remove %s, the file %s replaced: %s", tmp,
			          out_name(path), plan_strerror(errno));
		return 0;
	}
#else
	(void)t;
#endif
	return rename(tmp, path);
}

int cli_out_close(const CliTool *t, CliOut *o, int failed)
{
	int err = failed ? errno : 0;
	int bad = failed != 0;
	if (!o->f)
		return CLI_EXIT_FAIL;
	if (ferror(o->f))
		bad = 1;
	errno = 0;
	if (o->f == stdout ? fflush(o->f) != 0 : fclose(o->f) != 0) {
		bad = 1;
		err = errno;
	}
	if (!bad && o->tmp && replace_file(t, o->tmp, o->path) != 0) {
		bad = 1;
		err = errno;
	}
	if (bad) {
		cli_error(t, "cannot write %s: %s", out_name(o->path),
		          err ? plan_strerror(err) : "write error");
		if (o->tmp)
			remove(o->tmp);
	}
	if (o->tmp)
		tmp_unregister(o->tmp);
	free(o->tmp);
	free(o->buf);
	*o = (CliOut){0};
	return bad ? CLI_EXIT_FAIL : 0;
}

int cli_write(const CliTool *t, const char *path, int (*fn)(FILE *f, void *arg), void *arg)
{
	CliOut o;
	FILE *f = cli_out_open(t, &o, path);
	if (!f)
		return CLI_EXIT_FAIL;
	errno = 0;
	int failed = fn(f, arg) != 0;
	return cli_out_close(t, &o, failed);
}

int cli_stdout_close(const CliTool *t)
{
	errno = 0;
	if (fflush(stdout) != 0 || ferror(stdout))
		return cli_error(t, "cannot write standard output: %s",
		                 errno ? plan_strerror(errno) : "write error");
	return 0;
}

/* ------------------------------------------------------------------------------------
 * The progress line. */

struct CliProgress {
	const char *tool;
	char what[128];
	int64_t (*done)(void *);
	void *arg;
	int64_t total;
	int (*text)(void *arg, char *buf, size_t n, int latest); // the caller's lines, or NULL
	void *targ;
	struct timespec t0, c0; // the start; the count's start (its rate's)
	long after_ms;
	int stop, drawn;
	int lines; // 1: not a terminal (cli_progress_lines): each text a line, no redrawing
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
};

static double since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* Called with p->mu held. */
static void draw(CliProgress *p)
{
	char line[256], own[200];
	if (p->lines) {
		while (p->text && p->text(p->targ, own, sizeof own, 0))
			fprintf(stderr, "%s: %s\n", p->tool, own);
		fflush(stderr);
		return;
	}
	int mine = p->text && p->text(p->targ, own, sizeof own, 1);
	int n = snprintf(line, sizeof line, "\r\033[K%s: %s", p->tool, mine ? own : p->what);
	if (!mine && p->done && p->total > 0 && n < (int)sizeof line) {
		int64_t d = p->done(p->arg);
		if (d > p->total)
			d = p->total;
		double s = since(&p->c0);
		n += snprintf(line + n, sizeof line - (size_t)n, " %" PRId64 "/%" PRId64 " (%.0f%%", d,
		              p->total, 100.0 * (double)d / (double)p->total);
		if (s > 0 && d > 0 && n < (int)sizeof line)
			n += snprintf(line + n, sizeof line - (size_t)n, ", %.0f a second", (double)d / s);
		if (n < (int)sizeof line)
			n += snprintf(line + n, sizeof line - (size_t)n, ")");
	}
	if (!mine && n < (int)sizeof line)
		snprintf(line + n, sizeof line - (size_t)n, " %.1f s", since(&p->t0));
	fputs(line, stderr);
	fflush(stderr);
	p->drawn = 1;
}

static void add_ms(struct timespec *t, long ms)
{
	t->tv_sec += ms / 1000;
	t->tv_nsec += (ms % 1000) * 1000000L;
	if (t->tv_nsec >= 1000000000L) {
		t->tv_sec++;
		t->tv_nsec -= 1000000000L;
	}
}

static void *progress_thread(void *arg)
{
	CliProgress *p = arg;
	pthread_mutex_lock(&p->mu);
	struct timespec next = p->t0;
	add_ms(&next, p->after_ms);
	while (!p->stop) {
		int rc = pthread_cond_timedwait(&p->cv, &p->mu, &next);
		if (p->stop)
			break;
		if (rc == ETIMEDOUT) {
			draw(p);
			add_ms(&next, CLI_PROGRESS_EVERY_MS);
		}
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static CliProgress *progress_open(const CliTool *t, const char *what, int force)
{
	int tty = isatty(STDERR_FILENO);
	if (t->quiet || t->silent || (!tty && !force))
		return NULL;
	CliProgress *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->lines = !tty;
	p->tool = t->tool;
	snprintf(p->what, sizeof p->what, "%s", what);
	p->after_ms = CLI_PROGRESS_AFTER_MS;
	const char *env = getenv("PIPECC_PROGRESS_AFTER_MS");
	if (env && *env)
		p->after_ms = strtol(env, NULL, 10);
	if (p->after_ms < 0)
		p->after_ms = 0;
	pthread_mutex_init(&p->mu, NULL);
	/* The condition variable waits on CLOCK_REALTIME by default; use the monotonic
	 * clock so that a clock change neither hides nor floods the line. */
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	clock_gettime(CLOCK_MONOTONIC, &p->t0);
	if (p->after_ms == 0) { // drawn at once (tests): no race with short work
		pthread_mutex_lock(&p->mu);
		draw(p);
		pthread_mutex_unlock(&p->mu);
	}
	if (pthread_create(&p->thread, NULL, progress_thread, p) != 0) {
		if (p->drawn)
			fputs("\r\033[K", stderr);
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p);
		return NULL;
	}
	return p;
}

CliProgress *cli_progress_start(const CliTool *t, const char *what)
{
	return progress_open(t, what, 0);
}

CliProgress *cli_progress_lines(const CliTool *t, const char *what)
{
	return progress_open(t, what, 1);
}

void cli_progress_phase(CliProgress *p, const char *what)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	snprintf(p->what, sizeof p->what, "%s", what);
	p->done = NULL;
	p->total = 0;
	if (p->drawn)
		draw(p);
	pthread_mutex_unlock(&p->mu);
}

void cli_progress_count(CliProgress *p, int64_t (*done)(void *arg), void *arg, int64_t total)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->done = done;
	p->arg = arg;
	p->total = total;
	clock_gettime(CLOCK_MONOTONIC, &p->c0);
	pthread_mutex_unlock(&p->mu);
}

void cli_progress_text(CliProgress *p, int (*text)(void *arg, char *buf, size_t n, int latest),
                       void *arg)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->text = text;
	p->targ = arg;
	pthread_mutex_unlock(&p->mu);
}

void cli_progress_end(CliProgress *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->thread, NULL);
	if (p->lines) // the lines that came after the last draw
		draw(p);
	if (p->drawn) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
