/* pipesim's library: executes a plan under docs/semantics.md and reports what happened.
 *
 * sim_run() is exact about the semantics: sends rendezvous with their receives (unless
 * SimOptions.eager), p2p matching is FIFO per ordered pair of ranks, a collective waits
 * for every member of its dp group, and a rank inside a group posts nothing later.  It
 * either runs every rank to the end of its op list (SIM_OK, with timing, memory and
 * traffic figures) or proves a deadlock (SIM_DEADLOCK, with the blocked ops and a
 * wait-for cycle).  The run is O(ops): ranks advance as far as they can and are woken
 * by the match that unblocks them; no global clock, no scans over ranks per op.
 *
 * The caller is expected to have run plan_verify() first (pipesim does): sim_run never
 * crashes on an unverified plan, but the static mismatches it finds on the way are
 * reported only as well as a run can see them (SIM_MISMATCH).
 *
 * Convention: every time is integer nanoseconds from the start of the step, every size
 * integer bytes.  The JSON, trace and SVG writers convert to microseconds. */
#ifndef SIM_H
#define SIM_H

#include <stdint.h>
#include <stdio.h>

#include "../plan/mem.h"
#include "../plan/plan.h"
#include "../plan/io.h"

#define SIM_VERSION "1.0"

typedef enum {
	SIM_STRICT,  // a rank waits for each group before its next op (default for verdicts)
	SIM_OVERLAP, // compute and comm streams; compute waits only on what it consumes
	SIM_MODEL_COUNT
} SimModel;

typedef enum {
	SIM_OK,       // every rank finished its op list
	SIM_DEADLOCK, // some rank can never finish; see SimResult.stuck and .cycle
	SIM_MISMATCH, // a run-time pairing error (only on plans plan_verify rejects)
	SIM_VERDICT_COUNT
} SimVerdict;

typedef enum {
	SIM_STREAM_RANK,    // strict model: the rank as a whole
	SIM_STREAM_COMPUTE, // overlap model: the compute stream
	SIM_STREAM_COMM,    // overlap model: the communication stream
	SIM_STREAM_COUNT
} SimStream;

/* What a run keeps of its ops (SimOptions.record_ops). */
enum {
	SIM_RECORD_NONE, // the figures alone
	SIM_RECORD_ALL,  // every op's times (SimRankResult.recs, 16 B an op) and the whole
	                 // critical path
	SIM_RECORD_PATH, // the critical path alone, for the report's summary: 4 B an op while
	                 // the run lasts (each op's predecessor); the path's first
	                 // SIM_PATH_TIMED stretches carry their times, the rest -1 (below)
};

/* SIM_RECORD_PATH: the stretches whose times the path keeps (the summary prints at most
 * so many), and the ops at each end of a rank's list whose times the run keeps
 * (SimOptions.path_window 0) to give them.  A path whose timed stretches begin or end
 * elsewhere is found by running the plan again with SIM_RECORD_ALL (the result then
 * holds every op's times too). */
#define SIM_PATH_TIMED 12
#define SIM_PATH_WINDOW 256

typedef struct {
	SimModel model;
	int eager;       // 1: sends complete when posted (buffered), as with --eager
	int record_ops;  // SIM_RECORD_*; 1 is SIM_RECORD_ALL
	int path_window; // SIM_RECORD_PATH: the window's ops at each end, 0 for
	                 // SIM_PATH_WINDOW (tests make it small to take the second run)
	int verified;    // p passed plan_verify, which proved what the run then skips: that
	                 // the k-th SEND and RECV of a pair move the same tensor (p2p.h); or
	                 // the result is used only if it passes (pipesim's run beside the
	                 // verifier): on any other plan the run is safe, its result moot
	/* Not NULL: another thread may set *stop to end the run early; sim_run then
	 * returns -1 with "stopped" in res->message (pipesim drops a run beside the
	 * verifier when the plan does not verify). */
	const int *stop;
	/* Above 1: the strict model runs on up to this many threads (psim.c), with the
	 * result of one thread to the bit, on a plan that is verified, has no collectives
	 * (dp = tp = 1, no table tied across ranks) and is not eager, and without
	 * SIM_RECORD_ALL; any other run, and one the threads find stuck, runs on one. */
	int threads;
	/* Not NULL: the run adds the ops it has finished to *progress as it goes (relaxed
	 * atomics; pipesim's progress line reads it from its own thread). */
	int64_t *progress;
} SimOptions;

/* Times of one op.  Compute ops: when they ran.  Comm ops: start is when their group
 * was posted, end when the op itself completed (its group completes at the latest end
 * of its ops).  start is -1 for ops never reached, end -1 for ops never completed (a
 * deadlock's blocked ops have a start and no end). */
typedef struct {
	int64_t start, end;
} SimOpTime;

/* How a run with record_ops keeps an op's times: 16 bytes an op, one array a rank,
 * read through sim_op_time.  Each time t is held as the 48-bit number t + 1 (so -1 is
 * 0, the zeroed array's value), below SIM_T48_WIDE; a time too large for that (78 hours
 * of simulated time and more, the saturated INT64_MAX) is SIM_T48_WIDE there and its
 * value is in the result's wide table.  lo: start's number, then the low 16 bits of
 * end's; hi: end's high 32 bits, then the run's own critical-path code. */
typedef struct {
	uint64_t lo, hi;
} SimOpRec;

#define SIM_T48_WIDE 0xffffffffffffull
#define SIM_T48_MASK 0xffffffffffffull

/* A time too large for 48 bits: op `op` of rank `rank`, its start (field 0) or end (1). */
typedef struct {
	int rank;
	int field;
	int64_t op;
	int64_t value;
} SimWide;

typedef struct {
	int64_t busy;           // ns of compute (sum of costs of the compute ops it ran);
	                        // the reports print it as compute and sim_busy's fraction
	int64_t idle;           // makespan - busy
	int64_t finish;         // ns when its last op completed (or when it stalled)
	int64_t ops_done;       // ops completed (nops when it finished)
	int64_t peak_act_bytes; // peak activation memory, docs/semantics.md "Memory"
	int64_t peak_act_units; // peak number of live (stage, microbatch) activations
	SimOpRec *recs;         // nops entries with SIM_RECORD_ALL, else NULL:
	                        // read through sim_op_time
} SimRankResult;

/* Bytes moved from src to dst over p2p (one entry per ordered pair that talked). */
typedef struct {
	int src, dst;
	int64_t bytes;
	int64_t transfers;
} SimLink;

/* All-reduce traffic of one dp group (or tp group, or pair holding a tied table's two
 * copies), named by its first member. */
typedef struct {
	int first_rank, members;
	int64_t bytes;          // sum of the all-reduced sizes
	int64_t count;          // all-reduces done
	int tie_head;           // a tied table's pair: the head's rank (first_rank the
	                        // embedding's); else -1
} SimCollective;

/* One op of a rank (or of one of its streams). */
typedef struct {
	int rank;
	int64_t op;             // index into ranks[rank].ops; -1 when none
	uint8_t stream;         // SimStream
} SimOpRef;

/* One edge of the wait-for graph: `from` (the op its stream is blocked at) waits for
 * `on`, an op of another stream that has not been posted yet (the matching receive,
 * send or all-reduce, the compute op producing a send's data, or the group holding a
 * receive a compute op consumes), which itself waits behind `behind`, the op that
 * stream is blocked at.  `on` equals `behind` when the blocked op itself is awaited. */
typedef struct {
	SimOpRef from, on, behind;
} SimWait;

/* A stretch of the critical path: consecutive ops of one rank, [start, end] in ns. */
typedef struct {
	int rank;
	int64_t first_op, last_op;
	int64_t start, end;
	int64_t compute;        // ns of compute inside the stretch
} SimPathStep;

/* Times saturate (sim.c); a run whose makespan reaches SIM_TIME_MAX ns (2^62, 146
 * years) has times past what 64 bits count, and pipesim refuses to report them. */
#define SIM_TIME_MAX PLAN_TIME_MAX

typedef struct {
	SimVerdict verdict;
	SimModel model;
	int eager;
	int world;
	int threads;            // the threads the run took: 1, or SimOptions.threads' (psim.c)
	int64_t makespan;       // ns the last rank finished (or the last progress at a stall)
	int64_t ops;            // ops in the plan
	int64_t ops_done;       // ops completed
	int64_t busy;           // sum of ranks' busy
	double bubble;          // 1 - busy / (world * makespan); 0 when makespan is 0
	SimRankResult *ranks;   // world entries
	void *recblock;         // record_ops: every rank's recs, one block (plan_block_new)
	int64_t nwide;          // record_ops: the times SimOpRec cannot hold, sorted by
	SimWide *wide;          // (rank, op, field)

	int nlinks;
	SimLink *links;         // sorted by (src, dst)
	int ncollectives;
	SimCollective *collectives;
	int ntp;                // tp all-reduce traffic, one entry per tp group (tp > 1)
	SimCollective *tp;

	int64_t npath;          // critical path, first stretch first (record_ops ALL or
	                        // PATH; PATH: stretches from the SIM_PATH_TIMED-th on have
	                        // start and end -1, and a run that did not finish has none)
	SimPathStep *path;

	/* SIM_DEADLOCK: every blocked stream (strict: one per stuck rank) and its op, and
	 * one cycle of the wait-for graph, cycle[i].on's stream blocked at
	 * cycle[(i + 1) % ncycle].from.  SIM_MISMATCH: stuck[0] and stuck[1] are the two
	 * ops that do not pair (op -1 when one side has no op at all). */
	int nstuck;
	SimOpRef *stuck;
	int ncycle;
	SimWait *cycle;
	int64_t stall_time;     // ns of the last completion before the stall

	char message[512];      // one-line explanation when verdict != SIM_OK
} SimResult;

/* Runs the plan.  Returns 0 when every rank finished, 1 for a finding (deadlock or
 * mismatch; res->verdict says which), -1 when out of memory (res->message).  res is
 * always initialised and must be released with sim_result_free(). */
int sim_run(const Plan *p, const SimOptions *opt, SimResult *res);
void sim_result_free(SimResult *res);

/* A time of op i of rank r held as SIM_T48_WIDE (sim.c). */
int64_t sim_wide_time(const SimResult *res, int r, int64_t i, int field);

static inline int64_t sim_t48(const SimResult *res, int r, int64_t i, int field, uint64_t v)
{
	return v < SIM_T48_WIDE ? (int64_t)v - 1 : sim_wide_time(res, r, i, field);
}

/* The times of op i of rank r of a run with record_ops. */
static inline SimOpTime sim_op_time(const SimResult *res, int r, int64_t i)
{
	const SimOpRec *x = &res->ranks[r].recs[i];
	return (SimOpTime){sim_t48(res, r, i, 0, x->lo & SIM_T48_MASK),
	                   sim_t48(res, r, i, 1, x->lo >> 48 | (x->hi & 0xffffffffu) << 16)};
}

extern const char *const sim_model_names[SIM_MODEL_COUNT];
extern const char *const sim_verdict_names[SIM_VERDICT_COUNT];
/* Parses "strict" / "overlap"; -1 when neither. */
int sim_model_parse(const char *s);

/* Transfer and collective times: plan/link.h. */

/* Plan-file line of op i of rank r (first_line + i), 0 when the plan was not read
 * from a file. */
int64_t sim_op_line(const Plan *p, int rank, int64_t op);

/* busy of rank r (rank -1: the mean over ranks): the fraction of the step it spends
 * computing, its compute time / makespan, in [0, 1]; 0 when the makespan is 0.  The
 * one definition pipesim prints (text: percent, JSON: fraction) and piperun measures
 * (docs/pipesim.md "Summary").  The mean is 1 - bubble. */
double sim_busy(const SimResult *res, int r);

/* Reports.  Each returns 0, or -1 when writing failed or memory ran out for what it
 * would print (it then stops or leaves that out: the caller must not pass it off as
 * whole; the writers below likewise).
 * sim_report_summary: makespan, per-rank busy/idle/memory, bubble, links, critical path.
 * sim_report_failure: the verdict with every op named by `file:line` and text, the
 *   wait-for cycle and (when ops were recorded) a grid of the last steps before it.
 * sim_report_grid: ranks as rows, time as columns, F/B/W and microbatch in each cell;
 *   max_cols bounds the width (columns are scaled to fit).
 * mem, where a report takes it: the memory model's figures of every rank
 * (plan_mem_all) when the caller has them already, or NULL to have them computed. */
int sim_report_summary(FILE *f, const Plan *p, const SimResult *res, const PlanMem *mem);
/* sim_report_memory: per rank the memory model's peak and its parts (plan/mem.h). */
int sim_report_memory(FILE *f, const Plan *p, const PlanMem *mem);
int sim_report_failure(FILE *f, const Plan *p, const SimResult *res, const char *file);
int sim_report_grid(FILE *f, const Plan *p, const SimResult *res, int max_cols);

/* One JSON object (docs/pipesim.md).  verr, when not NULL, is a plan_verify() or
 * plan_read() failure reported instead of a run (res may then be NULL); mem as for the
 * reports above. */
int sim_write_json(FILE *f, const Plan *p, const SimResult *res, const PlanError *verr,
                   const char *file, const PlanMem *mem);
/* Chrome trace / Perfetto JSON: a process per rank, compute and comm threads.  Needs
 * record_ops. */
int sim_write_trace(FILE *f, const Plan *p, const SimResult *res);
/* The timeline as the schedule papers draw it.  Needs record_ops. */
int sim_write_svg(FILE *f, const Plan *p, const SimResult *res);

#endif
