/* piperun as a tool: the settings its command line fills (runtime/piperun_main.c) and
 * the function that runs it over the public runtime API (rt.h). */
#ifndef PIPERUN_H
#define PIPERUN_H

#include "../plan/cli.h"
#include "rt.h"
#include "data.h"

#define PIPERUN_BLAS_THREADS 1 // --blas-threads unless given

typedef struct {
	RtOptions o;       // steps, seed, optimizer, check, timeout, blas threads, backend
	int dtype;         // RtDtype (--dtype)
	int optim;         // OptimKind (--optimizer)
	int json;          // --json
	int progress;      // --progress: the progress line as lines when not on a terminal
	int calibrate;     // --calibrate
	const char *trace; // --trace FILE, or NULL
	const char *data;  // --data FILE, or NULL (synthetic tokens)
	const char *eval_data; // --eval-data FILE, or NULL
	int data_format;   // RtDataFormat (--data-format), both files'
	const char *resume; // --resume DIR, or NULL
	const char *export_path; // --export FILE, or NULL
	char *export_ck;   // without --save: the scratch checkpoint FILE.ckpt-tmp, removed after
	const char *init;  // --init FILE, or NULL
} PiperunArgs;

extern const char *const piperun_dtype_names[RT_DTYPE_COUNT];

/* The rows of main's option table (CliOpt, plan/cli.h) that say where the tokens come
 * from, over PiperunArgs a: a macro, since their destinations are main's locals. */
#define PIPERUN_DATA_OPTIONS(a)                                                            \
	{"data", CLI_STR, &(a).data, "FILE",                                               \
	 "train on the token ids in FILE, not synthetic ones\n(formats: --data-format)"},  \
	{"data-format", CLI_ENUM, &(a).data_format, "FMT",                                 \
	 "how the files' bytes are ids: auto (by magic, else\nby .npy .u8 .u16 .bin .u32)", 1,\
	 .names = rt_data_format_names, .nnames = RT_DATA_COUNT},                          \
	{"eval-data", CLI_STR, &(a).eval_data, "FILE",                                     \
	 "print a held-out loss on a fixed set of FILE's\nsequences (forward only)"},      \
	{"eval-every", CLI_INT, &(a).o.eval_every, "N",                                    \
	 "with --eval-data: every N steps too, not only after\nthe last", 0, 1, 1000000}

/* The rows of main's option table for checkpoints (docs/runtime.md "Checkpoints"). */
#define PIPERUN_CKPT_OPTIONS(a)                                                            \
	{"save", CLI_STR, &(a).o.save, "DIR",                                              \
	 "write a checkpoint into DIR/step-N after the last\nstep (and see --save-every)"},  \
	{"save-every", CLI_INT, &(a).o.save_every, "N",                                    \
	 "with --save: after every N-th step too", 0, 1, 1000000},                         \
	{"resume", CLI_STR, &(a).resume, "DIR",                                            \
	 "start from the checkpoint DIR (a --save directory:\nits latest; or its step-N), "  \
	 "with its seed and\nstep count; any mesh of the same layers"},                       \
	{"export", CLI_OUT, &(a).export_path, "FILE",                                      \
	 "the final weights as FILE, with Hugging Face's\nGPT-2 or Llama names"},               \
	{"init", CLI_STR, &(a).init, "FILE",                                               \
	 "start from the weights in FILE (safetensors with\nHugging Face's names, as --export writes)"}

/* Whether this is the process that prints (the first under mpirun or srun). */
int piperun_first_process(void);
/* The --backend help line: the backends built in, and the default. */
const char *piperun_backend_help(void);
/* The --check help lines: the bound's factor and floor. */
const char *piperun_check_help(void);
/* The second --version line: plan format and backends. */
const char *piperun_version_extra(void);
/* Checks option combinations and the trace path, reads and verifies the plan, runs it,
 * prints the figures and writes the trace.  Returns the exit status (cli.h). */
int piperun_drive(CliTool *t, PiperunArgs *a);

#endif
