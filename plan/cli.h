/* The command-line layer the three tools share: one usage shape (`TOOL INPUT
 * [options]`), options declared as a table and parsed with getopt_long, the version
 * string, the exit statuses, output files that are checked before the work and written
 * whole or not at all, and the progress line.  Each tool's main declares its table and
 * calls its library; see docs/architecture.md "Command lines". */
#ifndef CLI_H
#define CLI_H

#include <stdint.h>
#include <stdio.h>

/* Exit statuses, the same in every tool and listed at the end of every --help. */
enum {
	CLI_EXIT_OK = 0,    // done; for pipesim: the plan runs
	CLI_EXIT_FAIL = 1,  // a finding, or bad input (unreadable, invalid), or a failed write
	CLI_EXIT_USAGE = 2, // the command line itself is wrong
};
#define CLI_RUN (-1) // cli_parse: go on and do the work
#define CLI_MAX_OPTS 32 // rows of a tool's table
#define CLI_STR_(x) #x
#define CLI_XSTR(x) CLI_STR_(x) // a number macro as a string literal

/* The progress line appears when the work has taken this long and stderr is a
 * terminal, and is redrawn at most this often. */
#define CLI_PROGRESS_AFTER_MS 2000
#define CLI_PROGRESS_EVERY_MS 250

extern const char cli_version[]; // from the VERSION file, through the Makefile

typedef enum {
	CLI_FLAG, // no value; sets *(int *)dest to 1
	CLI_INT,  // a whole number in [lo, hi] into *(int *)dest
	CLI_U64,  // a non-negative whole number into *(uint64_t *)dest
	CLI_REAL, // a number x with rlo < x <= rhi into *(double *)dest
	CLI_ENUM, // one of names[0 .. nnames) into *(int *)dest, as its index
	CLI_STR,  // any text into *(const char **)dest
	CLI_IN,   // an input file ('-': standard input) into *(const char **)dest
	CLI_OUT,  // an output file ('-': standard output), checked by cli_check_outputs
	CLI_LIST, // no value and no input: prints with list(stdout), then exits 0 (a registry)
	CLI_KIND_COUNT
} CliKind;

typedef struct {
	const char *name; // long name, without "--"; its letter, if any, is cli_letter's
	CliKind kind;
	void *dest;
	const char *arg;  // value placeholder in the help ("N", "FILE"); unused for flags
	const char *help; // one or more '\n'-separated lines
	int show_default; // append "(default: V)", V read from *dest before parsing
	long lo, hi;      // CLI_INT
	double rlo, rhi;  // CLI_REAL
	const char *const *names; // CLI_ENUM
	int nnames;
	void (*list)(FILE *f);    // CLI_LIST
} CliOpt;

/* A table's rows name the fields they use, in order, and leave the rest zero:
 * {"steps", CLI_INT, &steps, "N", "steps to run", 1, 1, 1000000}.  These two
 * macros around the table keep -Wextra from asking for every field of every row. */
#define CLI_TABLE_BEGIN                                                                    \
	_Pragma("GCC diagnostic push")                                                      \
	    _Pragma("GCC diagnostic ignored \"-Wmissing-field-initializers\"")
#define CLI_TABLE_END _Pragma("GCC diagnostic pop")

typedef struct {
	const char *tool;       // "pipesim"
	const char *input;      // placeholder of the one input: "PLAN", "FILE"
	const char *input_what; // for messages: "plan file"
	const char *about;      // lines printed under the usage line
	const char *finding;    // what exit 1 means besides bad input ("a deadlock or ...")
	const char *quiet_help; // what --quiet does besides hiding the progress line, or NULL
	const char *version_extra; // a second --version line ("plan format 1"), or NULL
	const CliOpt *opts;     // ended by a row whose name is NULL
	int silent;             // print no messages (piperun's processes other than the first)
	int in_place;           // the input may be an output too: it is read whole before
	                        // the output replaces it (pipecc PLAN --rehash -o PLAN)
	/* Filled by cli_parse. */
	int quiet;              // -q, --quiet
	const char *in;         // the input path ("-": standard input)
	const char *in_name;    // the input for messages ("<stdin>" for "-")
	unsigned char given[CLI_MAX_OPTS]; // per row of opts: given on the command line
} CliTool;

/* The short form of the long option NAME ("schedule": 's'), or 0.  One table in cli.c
 * gives every letter for the three tools, so a letter means one long option wherever
 * it is typed; a row of a tool's table has no letter of its own. */
int cli_letter(const char *name);

/* Parses argv by t->opts plus -q/--quiet, -h/--help and -V/--version, and wants
 * exactly one input.  Returns CLI_RUN, or the exit status to end with: 0 after --help
 * or --version, CLI_EXIT_USAGE after a message on a bad command line. */
int cli_parse(CliTool *t, int argc, char **argv);
/* "TOOL: message" and a pointer to --help on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const CliTool *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "TOOL: message" on stderr; returns CLI_EXIT_FAIL. */
int cli_error(const CliTool *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_help(const CliTool *t, FILE *f);
/* Whether an option of the table was given (its dest was set by the command line). */
int cli_given(const CliTool *t, const void *dest);

/* Checks every CLI_OUT option that was given, before the work: its folder exists and
 * can be written, it is not a folder, no two name the same file and none names an
 * input (the tool's or a CLI_IN option's; the same inode, or the same name in the same
 * folder however spelled; devices and pipes aside).  Returns 0, or CLI_EXIT_FAIL after
 * a message naming the file (CLI_EXIT_USAGE for two the same). */
int cli_check_outputs(const CliTool *t);
/* Whether path means standard output or input. */
int cli_is_std(const char *path);

/* One output file.  A regular file (or a new one) is written to a temporary file in
 * the same folder and renamed over the target by cli_out_close, so a failure leaves
 * no partial or empty file; a device or pipe (/dev/null) is written in place; "-" is
 * standard output.  SIGINT, SIGTERM and SIGHUP remove the open temporary files and
 * then end the process by the same signal.  cli_check_outputs creates and removes the
 * temporary file once, so a folder that takes no new files (/proc) is named first. */
typedef struct {
	const char *path;
	FILE *f;
	char *tmp; // the temporary file, NULL when written in place
	char *buf; // the stream's buffer, PLAN_WRITE_PIECE bytes; NULL for standard output
} CliOut;
/* Returns the stream to write, or NULL after a message naming the file. */
FILE *cli_out_open(const CliTool *t, CliOut *o, const char *path);
/* Flushes and closes (standard output: flushes), renames the temporary file into
 * place; with failed (the writer's own result), or when any of that fails, removes it.
 * Returns 0, or CLI_EXIT_FAIL after a message naming the file and the system error. */
int cli_out_close(const CliTool *t, CliOut *o, int failed);
/* Opens, writes with fn(f, arg), closes: cli_out_open + cli_out_close. */
int cli_write(const CliTool *t, const char *path, int (*fn)(FILE *f, void *arg), void *arg);
/* Flushes standard output; CLI_EXIT_FAIL after a message when it could not be written
 * (a full disk, a closed pipe), else 0. */
int cli_stdout_close(const CliTool *t);

/* The progress line: "TOOL: WHAT [DONE/TOTAL (P%, R a second)] S s" on stderr, drawn by a thread
 * once the work has taken CLI_PROGRESS_AFTER_MS (the environment variable
 * PIPECC_PROGRESS_AFTER_MS overrides it, for tests), only when stderr is a terminal and
 * without --quiet; cleared by cli_progress_end.  cli_progress_start returns NULL when
 * the line is off; every other call accepts NULL. */
typedef struct CliProgress CliProgress;
CliProgress *cli_progress_start(const CliTool *t, const char *what);
/* Names the current phase ("writing the plan"). */
void cli_progress_phase(CliProgress *p, const char *what);
/* Shows done(arg) out of total; done is called from the progress thread. */
void cli_progress_count(CliProgress *p, int64_t (*done)(void *arg), void *arg, int64_t total);
/* The caller's own lines instead ("TOOL: TEXT"): text(arg, buf, n, latest) writes one
 * into buf and returns 1, or returns 0 when it has none (yet).  A terminal shows the
 * latest (latest 1); with lines (cli_progress_lines) each is written once, in order
 * (latest 0: the next one), as text of its own, the last ones by cli_progress_end. */
void cli_progress_text(CliProgress *p, int (*text)(void *arg, char *buf, size_t n, int latest),
                       void *arg);
/* cli_progress_start, but when stderr is not a terminal the line is on too, as lines
 * of text ending in newlines (a flag that forces it: piperun's --progress). */
CliProgress *cli_progress_lines(const CliTool *t, const char *what);
void cli_progress_end(CliProgress *p);

#endif
