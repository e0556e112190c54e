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
	int calibrate;     // --calibrate
	const char *trace; // --trace FILE, or NULL
	const char *data;  // --data FILE, or NULL (synthetic tokens)
	const char *eval_data; // --eval-data FILE, or NULL
	int data_format;   // RtDataFormat (--data-format), both files'
} PiperunArgs;

extern const char *const piperun_dtype_names[RT_DTYPE_COUNT];

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
