/* pipecc: the command line.  The options are a table for the shared layer (plan/cli.h);
 * the work is pipecc_drive (compiler/driver.c).  Exit 0 ok, 1 input error, 2 usage. */
#include "../plan/binary.h"
#include "../plan/par.h"
#include "pipecc.h"
#include "program.h"

static const char *const tunes[] = {"strict", "overlap"}; // --tune's models

int main(int argc, char **argv)
{
	PipeccArgs a = {.out = "-", .emit = EMIT_PLAN, .dump = -1, .same_rank = -1, .max_errors = DIAG_MAX_ERRORS};
	CLI_TABLE_BEGIN
	const CliOpt opts[] = {
		{"output", CLI_OUT, &a.out, "PLAN", "where to write (a plan goes to a terminal\nonly as -o -)", 1},
		{"schedule", CLI_STR, &a.o.schedule, "NAME", "override the program's schedule"},
		{"microbatches", CLI_INT, &a.o.microbatches, "N",
		 "override the program's microbatch count", 0, 1, 1 << 30},
		{"from-torch-csv", CLI_IN, &a.o.from_csv, "FILE",
		 "take the schedule from a PyTorch schedule CSV, as\n"
		 "`schedule csv \"FILE\";` would"},
		{"emit", CLI_ENUM, &a.emit, "KIND", "what to write", 1, .names = pipecc_emit_names, .nnames = EMIT_COUNT},
		{"comms", CLI_FLAG, &a.comms, NULL, "with torch-csv: also SEND/RECV cells and their\n"
		 "waits (torch's compute_comms form)"},
		{"dump", CLI_ENUM, &a.dump, "PASS", "print the state after PASS and stop", 0,
		 .names = pipecc_pass_names + 1, .nnames = PASS_COUNT - 1},
		{"tune", CLI_ENUM, &a.o.tune_overlap, "MODEL",
		 "order communication for the strict model (a transfer\n"
		 "waits until both ranks are between actions) or the\n"
		 "overlap model (GPU streams: each tensor moves as soon\n"
		 "as it is produced, and is used once the link's latency\n"
		 "and bandwidth have brought it)", 1, .names = tunes, .nnames = 2},
		{"same-rank", CLI_ENUM, &a.same_rank, "HOW",
		 "how a tensor between two stages on one rank moves:\n"
		 "handed over in memory (local) or sent to self through\n"
		 "the communicator (self-send); default: the program's\n"
		 "`peers` statement, else local", 0,
		 .names = prog_same_rank_names, .nnames = SAME_RANK_COUNT},
		{"explain", CLI_FLAG, &a.o.explain, NULL, "with `schedule auto;`: print to stderr every candidate\n"
		 "weighed (step, bubble, peak, fits) and why one won"},
		{"allow-deadlock", CLI_FLAG, &a.o.allow_deadlock, NULL, "emit a plan even when the order cannot run across\n"
		 "ranks, for pipesim to show the cycle"},
		{"max-errors", CLI_INT, &a.max_errors, "N", "stop after N errors", 1, 1, 1 << 30},
		{"expand", CLI_FLAG, &a.expand, NULL, "write every world rank's lists (plan format 2)\n"
		 "instead of one pipeline line's (format 3)"},
		{"rehash", CLI_FLAG, &a.rehash, NULL, "with a text plan as the input: take it though its\n"
		 "checksum disagrees (a hand edit), check it and write it\n"
		 "again with a new checksum"},
		{"plan-format", CLI_ENUM, &a.plan_format, "FORMAT", "the plan's form: text (the reference) or binary", 1, .names = plan_format_names, .nnames = PLAN_FORMAT_COUNT},
		{"stats", CLI_FLAG, &a.stats, NULL, "print time, ops per second and peak memory to stderr"},
		{"threads", CLI_INT, &plan_threads, "N", "worker threads for verifying and writing the plan\n(0: one per CPU)", 1, 0, PAR_MAX_THREADS},
		{"list-schedules", CLI_LIST, NULL, NULL, "print the schedule names, one a line",
		 .list = pipecc_list_schedules},
		{"list-layers", CLI_LIST, NULL, NULL,
		 "print the layer kinds (as a stage writes them)", .list = pipecc_list_layers},
		{0},
	};
	CLI_TABLE_END
	CliTool t = {
		.tool = "pipecc",
		.input = "FILE",
		.input_what = "input file",
		.about = "Compiles a .pipe program (docs/language.md) into a plan (docs/plan-format.md).\nGiven a plan (text or binary), verifies it and writes it again in --plan-format.",
		.finding = "errors in the program",
		.version_extra = "plan format " CLI_XSTR(PLAN_VERSION),
		.opts = opts,
	};
	int rc = cli_parse(&t, argc, argv);
	return rc != CLI_RUN ? rc : pipecc_drive(&t, &a);
}
