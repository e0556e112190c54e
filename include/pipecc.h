/* libpipecc: the compiler, the plan and the simulator as a C library (docs/api.md,
 * pipecc(3)).  Every name is prefixed pcc_; every handle is opaque and freed by its own
 * function.  Nothing is printed: each error, warning and note comes back as a PccDiag,
 * located in the file it concerns.  There is no global state: calls on different
 * handles may run on different threads at once. */
#ifndef PIPECC_API_H
#define PIPECC_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PCC_API_MAJOR 0 // the soname's number: libpipecc.so.0

/* The library's version, "MAJOR.MINOR.PATCH" (the tools' --version). */
const char *pcc_version(void);

typedef enum {
	PCC_ERROR,   // the input is wrong; the call failed
	PCC_WARNING, // worth saying; the call went on
	PCC_NOTE,    // more about the message before it
	PCC_SEVERITY_COUNT
} PccSeverity;

/* One message.  line and col are 1-based, 0 when unknown; file is "<command line>"
 * for a value an option gave (PccOptions), a plan's name for a plan's errors (line
 * then its plan-file line, or a binary plan's byte offset), and rank and op the rank
 * and op index a plan error is about (-1 when none). */
typedef struct {
	PccSeverity severity;
	const char *file;
	int64_t line;
	int col;
	int rank;
	int64_t op;
	const char *message;
} PccDiag;

/* The messages of one call, in order. */
typedef struct PccDiags PccDiags;
int pcc_diags_count(const PccDiags *ds);
const PccDiag *pcc_diag(const PccDiags *ds, int i); // NULL past the end
int pcc_diags_errors(const PccDiags *ds);           // how many are PCC_ERROR
void pcc_diags_free(PccDiags *ds);

/* A plan (docs/plan-format.md). */
typedef struct PccPlan PccPlan;
void pcc_plan_free(PccPlan *p);
int pcc_plan_world(const PccPlan *p); // ranks
int64_t pcc_plan_ops(const PccPlan *p); // ops over every rank

/* What a compilation may override of the source: NULL or 0 keeps the source's. */
typedef struct {
	const char *schedule; // a schedule's name (pipecc --list-schedules)
	int microbatches;
} PccOptions;

/* Every call below that takes PccDiags **diags sets *diags (when diags is not NULL) to
 * the call's messages, to be freed with pcc_diags_free, or to NULL when out of memory. */

/* Compiles the len bytes at src, named file in messages; o may be NULL.  The plan, or
 * NULL with at least one error in *diags. */
PccPlan *pcc_compile(const char *file, const char *src, size_t len, const PccOptions *o,
                     PccDiags **diags);
PccPlan *pcc_compile_file(const char *path, const PccOptions *o, PccDiags **diags);

typedef enum {
	PCC_FORMAT_TEXT,   // the text form, the reference
	PCC_FORMAT_BINARY, // the binary form (pipecc --plan-format=binary)
	PCC_FORMAT_COUNT
} PccFormat;

/* Reading takes either form.  NULL with the error in *diags. */
PccPlan *pcc_plan_read_file(const char *path, PccDiags **diags);
PccPlan *pcc_plan_read_buffer(const char *name, const void *buf, size_t len,
                              PccDiags **diags);
/* 0, or -1 with the error in *diags.  The buffer is the caller's, freed with pcc_free. */
int pcc_plan_write_file(const PccPlan *p, const char *path, PccFormat fmt, PccDiags **diags);
int pcc_plan_write_buffer(const PccPlan *p, PccFormat fmt, char **buf, size_t *len,
                          PccDiags **diags);

/* The plan's invariants (the verifier pipecc and pipesim run): 0, or -1 with the first
 * broken one in *diags, located at its plan line, rank and op. */
int pcc_plan_verify(const PccPlan *p, PccDiags **diags);

/* The memory model of one rank over a step (docs/semantics.md "Memory"), in bytes. */
typedef struct {
	int64_t params, grads, master, optim; // held all step
	int64_t saved, comm;                  // saved activations and bytes in flight at the peak
	int64_t peak;                         // the six parts' sum at the peak
} PccMemory;
/* Fills mem[pcc_plan_world(p)]: 0, or -1 with the error in *diags. */
int pcc_plan_memory(const PccPlan *p, PccMemory *mem, PccDiags **diags);

typedef enum {
	PCC_MODEL_STRICT,  // a rank waits for each group before its next op
	PCC_MODEL_OVERLAP, // compute and comm streams
	PCC_MODEL_COUNT
} PccModel;

typedef struct {
	int64_t busy_ns;        // compute time
	int64_t finish_ns;      // when its last op completed
	int64_t peak_act_bytes; // peak saved activations (pipesim's "peak act")
	int64_t peak_mem_bytes; // the memory model's peak (PccMemory.peak)
} PccRankStats;

typedef struct {
	int64_t makespan_ns;
	double bubble;       // 1 - busy / (world * makespan)
	int world;
	PccRankStats *ranks; // world entries; freed by pcc_sim_free
} PccSimResult;

/* Simulates the plan (pipesim): 0 with *res filled, 1 when it deadlocks or its sends
 * and receives do not pair (the finding in *diags), -1 on an error (*diags).  *res is
 * always set and must be freed with pcc_sim_free. */
int pcc_simulate(const PccPlan *p, PccModel model, PccSimResult *res, PccDiags **diags);
void pcc_sim_free(PccSimResult *res);

/* PyTorch's schedule CSV (pipecc --emit torch-csv, with --comms when comms is set)
 * into a buffer freed with pcc_free: 0, or -1 with the error in *diags. */
int pcc_emit_torch_csv(const PccPlan *p, int comms, char **buf, size_t *len,
                       PccDiags **diags);

void pcc_free(void *buf);

#ifdef __cplusplus
}
#endif

#endif
