/* The compiler as a library: the pass pipeline and the emitters.  pipecc_main.c is a
 * thin command line over this; tests and benchmarks call it directly. */
#ifndef PIPECC_H
#define PIPECC_H

#include <stdio.h>

#include "../plan/cli.h"
#include "../plan/plan.h"
#include "diag.h"

typedef enum {
	PASS_NONE,     // run everything
	PASS_PARSE,    // the checked program
	PASS_PLACE,    // stage -> pipeline index
	PASS_SCHEDULE, // compute order per pipeline index
	PASS_LOWER,    // the plan, before verification
	PASS_COUNT
} PipeccPass;

typedef struct {
	const char *schedule;   // overrides the program's schedule, or NULL
	int microbatches;       // overrides the program's, or 0
	int allow_deadlock;     // emit orders that cannot run (for pipesim to show)
	int tune_overlap;       // order communication for the overlap model (--tune=overlap)
	const char *from_csv;   // take the schedule from this torch CSV, as `schedule csv`
	int same_rank;          // 1 + SameRank (--same-rank), or 0 for the program's `peers`
	int explain;            // schedule auto: print the candidates weighed to stderr (and
	                        // a model's cut, compiler/part.h)
	int balance_warn;       // warn when a written split's slowest stage is more than
	                        // 10% above the mean (--emit summary)
	PipeccPass dump;        // print the state after this pass and stop
	FILE *dump_out;
	int line;               // lower one pipeline line: a line plan (docs/plan-format.md)
} PipeccOptions;

extern const char *const pipecc_pass_names[PASS_COUNT];

/* Reads a whole file ("-": standard input) into a malloc'd buffer; NULL on failure. */
char *pipecc_read_file(const char *path, size_t *len);

/* Compiles src; NULL when diagnostics were reported to d (or after a dump). */
Plan *pipecc_compile(const char *file, const char *src, size_t len, const PipeccOptions *o,
                     Diag *d);

/* PyTorch's schedule CSV: a row per pipeline rank (of the first pipeline line).  With
 * comms, also SEND_F/RECV_F/SEND_B/RECV_B cells. */
int pipecc_emit_torch_csv(const Plan *p, FILE *f, int comms);
/* Human summary: ranks, stages per rank, ops per kind, bytes moved, memory per rank.
 * 0, or -1 when writing failed or memory ran out for the memory model (errno ENOMEM:
 * the summary is then not whole). */
int pipecc_emit_summary(const Plan *p, FILE *f);

/* --emit: what pipecc writes. */
typedef enum {
	EMIT_PLAN,      // the plan file (docs/plan-format.md)
	EMIT_TORCH_CSV, // PyTorch's schedule CSV
	EMIT_SUMMARY,   // the human summary
	EMIT_COUNT
} PipeccEmit;
extern const char *const pipecc_emit_names[EMIT_COUNT];

/* The command line's settings (pipecc_main.c fills them from its option table). */
typedef struct {
	PipeccOptions o;
	const char *out;  // -o: where to write ("-": standard output)
	int emit;         // PipeccEmit
	int comms;        // --comms (torch-csv only)
	int dump;         // --dump: index into pipecc_pass_names + 1, or -1
	int same_rank;    // --same-rank: a SameRank, or -1
	int max_errors;   // --max-errors
	int stats;        // --stats
	int expand;       // --expand: write every world rank (format 2)
	int rehash;       // --rehash: a plan input's checksum is not checked (a hand edit)
	int plan_format;  // --plan-format: a PlanFormat (plan/binary.h)
} PipeccArgs;

/* The tool: checks option combinations, reads the source, compiles, writes the output
 * (checked before the work, written whole or not at all).  An input that is a plan
 * (text or binary, told by its first bytes) is verified and written again in
 * --plan-format: the converter.  Returns the exit status. */
int pipecc_drive(CliTool *t, PipeccArgs *a);
/* The registries, one name a line, for scripts and tests that loop over them:
 * pipecc --list-schedules, pipecc --list-layers. */
void pipecc_list_schedules(FILE *f);
void pipecc_list_layers(FILE *f);

#endif
