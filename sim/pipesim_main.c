/* pipesim: reads a plan, verifies it, runs it under docs/semantics.md and says whether
 * it finishes (with timing and memory) or why it cannot (deadlock, mismatch).  The
 * options are a table for the shared layer (plan/cli.h); the work is pipesim_drive
 * (sim/pipesim.c); docs/pipesim.md documents options, output and exits. */
#include "../plan/par.h"
#include "pipesim.h"

int main(int argc, char **argv)
{
	PipesimArgs a = {.model = SIM_STRICT, .width = PIPESIM_GRID_WIDTH};
	CLI_TABLE_BEGIN
	const CliOpt opts[] = {
		{"model", CLI_ENUM, &a.model, "MODEL",
		 "strict: a rank waits for each group; overlap: compute\n"
		 "and communication streams", 1, .names = sim_model_names, .nnames = SIM_MODEL_COUNT},
		{"eager", CLI_FLAG, &a.eager, NULL,
		 "sends complete without a receiver (buffered), to see\n"
		 "which verdicts depend on buffering"},
		{"json", CLI_FLAG, &a.json, NULL,
		 "print one JSON object instead of text (docs/pipesim.md)"},
		{"trace", CLI_OUT, &a.trace, "FILE", "write a Chrome trace / Perfetto JSON timeline"},
		{"svg", CLI_OUT, &a.svg, "FILE", "write the timeline as an SVG picture"},
		{"grid", CLI_FLAG, &a.grid, NULL, "print a text grid of the timeline"},
		{"width", CLI_INT, &a.width, "N", "grid columns at most", 1, 1, 100000},
		{"expand", CLI_FLAG, &a.expand, NULL,
		 "simulate every world rank, not one pipeline line\n"
		 "(cross-checks a line plan's verdict, docs/pipesim.md)"},
		{"no-record", CLI_FLAG, &a.no_record, NULL,
		 "keep no per-op times (16 bytes per op less): no\n"
		 "critical path, grid or pictures"},
		{"threads", CLI_INT, &plan_threads, "N",
		 "worker threads for reading and verifying the plan,\nthe simulation beside (0: one per CPU)", 1, 0, PAR_MAX_THREADS},
		{0},
	};
	CLI_TABLE_END
	CliTool t = {
		.tool = "pipesim",
		.input = "PLAN",
		.input_what = "plan file",
		.about = "Simulates a pipecc plan: does it run, how long, how much memory, and if not, why.",
		.finding = "a finding (deadlock, mismatch, dependency)",
		.quiet_help = "print nothing when the plan runs; only the exit status",
		.version_extra = "plan format " CLI_XSTR(PLAN_VERSION),
		.opts = opts,
	};
	int rc = cli_parse(&t, argc, argv);
	return rc != CLI_RUN ? rc : pipesim_drive(&t, &a);
}
