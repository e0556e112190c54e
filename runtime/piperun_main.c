/* piperun: runs a plan for real.  The options are a table for the shared layer
 * (plan/cli.h); the work is piperun_drive (runtime/piperun.c) over the runtime library
 * (rt.h).  Exit 0 ok, 1 a runtime failure, a --check difference or a bad plan, 2 usage. */
#include "piperun.h"

#include <math.h>

int main(int argc, char **argv)
{
	PiperunArgs a = {.o = {.steps = RT_DEFAULT_STEPS, .seed = RT_DEFAULT_SEED,
	                       .optim = {.lr = RT_DEFAULT_LR}, .timeout_s = RT_DEFAULT_TIMEOUT,
	                       .blas_threads = PIPERUN_BLAS_THREADS}};
	CLI_TABLE_BEGIN
	const CliOpt opts[] = {
		{"backend", CLI_STR, &a.o.backend, "NAME", piperun_backend_help()},
		{"steps", CLI_INT, &a.o.steps, "N", "training steps to run", 1, 1, 1000000},
		{"seed", CLI_U64, &a.o.seed, "S", "seed of weights, inputs, targets and dropout masks", 1},
		{"optimizer", CLI_ENUM, &a.optim, "NAME",
		 "the optimizer (default: the plan's optimizer line,\nelse sgd)", 0,
		 .names = plan_optim_names, .nnames = OPTIM_COUNT},
		{"lr", CLI_REAL, &a.o.optim.lr, "X",
		 "learning rate over the plan's; sgd's", 1, .rlo = 0, .rhi = 1e6},
		{"beta1", CLI_REAL, &a.o.optim.beta1, "X", "adamw: first-moment decay, in [0, 1)\n"
		 "(default: the plan's, else 0.9)", 0, .rlo = -INFINITY, .rhi = INFINITY},
		{"beta2", CLI_REAL, &a.o.optim.beta2, "X", "adamw: second-moment decay, in [0, 1)\n"
		 "(default: the plan's, else 0.999)", 0, .rlo = -INFINITY, .rhi = INFINITY},
		{"eps", CLI_REAL, &a.o.optim.eps, "X",
		 "adamw: added to the second moment's root, in (0, 1]\n(default: the plan's, else 1e-8)",
		 0, .rlo = -INFINITY, .rhi = INFINITY},
		{"weight-decay", CLI_REAL, &a.o.optim.weight_decay, "X",
		 "adamw: decoupled weight decay, in [0, 1e6] (default:\nthe plan's, else 0.01)", 0,
		 .rlo = -INFINITY, .rhi = INFINITY},
		{"momentum", CLI_REAL, &a.o.optim.momentum, "X", "momentum: its buffer's decay, in [0, 1)\n"
		 "(default: the plan's, else 0.9)", 0, .rlo = -INFINITY, .rhi = INFINITY},
		{"check", CLI_FLAG, &a.o.check, NULL, piperun_check_help()},
		{"tolerance", CLI_REAL, &a.o.tolerance, "X", "with --check: the bound by hand, the largest\n"
		 "relative error that passes, in (0, 1] (no shadow)", 0, .rlo = 0, .rhi = RT_CHECK_TOL_MAX},
		{"no-memory-check", CLI_FLAG, &a.o.no_mem_check, NULL, "run even if it cannot fit in memory"},
		{"json", CLI_FLAG, &a.json, NULL, "print the figures as one JSON object"},
		{"progress", CLI_FLAG, &a.progress, NULL, "a progress line per step on stderr (step, loss,\n"
		 "tokens/s, time left, MFU) when not a terminal too"},
		{"trace", CLI_OUT, &a.trace, "FILE",
		 "write the measured timeline (Chrome trace, as pipesim's)"},
		{"timeout", CLI_REAL, &a.o.timeout_s, "SEC",
		 "watchdog: end the run when no rank progresses for SEC\nseconds", 1, .rlo = 0, .rhi = 1e7},
		{"calibrate", CLI_FLAG, &a.calibrate, NULL,
		 "print measured per-stage `cost` lines for the .pipe file"},
		{"blas-threads", CLI_INT, &a.o.blas_threads, "N", "BLAS threads per rank on CPU backends", 1, 1, 1024},
		{"dtype", CLI_ENUM, &a.dtype, "TYPE",
		 "GEMM operands (bf16: cuda backend only; f32\naccumulation, --check bound "
		 CLI_XSTR(RT_CHECK_TOL_BF16) "; docs/gpu.md)", 1,
		 .names = piperun_dtype_names, .nnames = RT_DTYPE_COUNT},
		PIPERUN_DATA_OPTIONS(a), PIPERUN_CKPT_OPTIONS(a), {0}, // piperun.h's rows, the end
	};
	CLI_TABLE_END
	CliTool t = {
		.tool = "piperun", .input = "PLAN", .input_what = "plan file",
		.about = "Runs a pipecc plan: every rank executes its op list, a thread per rank (threads)\n"
		         "or a process per rank (mpi, under mpirun or srun).",
		.finding = "a runtime failure (deadlock, mismatch, backend error, a diverged loss)\n     or a --check difference",
		.version_extra = piperun_version_extra(),
		.opts = opts,
		.silent = !piperun_first_process(),
	};
	int rc = cli_parse(&t, argc, argv);
	return rc != CLI_RUN ? rc : piperun_drive(&t, &a);
}
