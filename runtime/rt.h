/* The runtime: executes a plan (docs/semantics.md) for real, on some backend.
 *
 * Three layers, top to bottom:
 *  - the world (run.c): picks a backend, opens it, builds the model from the plan,
 *    runs every rank this process owns under a watchdog, gathers the figures, and
 *    for --check replays the model sequentially (reference.c) and compares;
 *  - the op interpreter (interp.c): one per rank, written once.  It walks the rank's
 *    op list in order, keeps the saved activations, hand-offs and in-flight tensors of
 *    its stages, accounts activation memory per op, and calls the backend for every
 *    byte it touches;
 *  - the backend (backend_*.c, backend_*.cu): a struct of function pointers, like
 *    QBE's Target or nccl-tests' testEngine.  It owns tensor storage, the layer
 *    kernels and communication.  The interpreter never knows which one it drives.
 *
 * No mutable globals: a world is a value, so many ranks run inside one process (the
 * threads backend) and everything runs inside the unit tests.  Library code returns
 * errors (rank->err, RtWorld.err); only piperun_main.c exits.
 *
 * docs/runtime.md describes the design, the backend contract and the command line. */
#ifndef RT_H
#define RT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../plan/plan.h"

#define RT_VERSION "0.1"

/* Return codes of every rt_ and backend function. */
enum {
	RT_OK = 0,       // done
	RT_EFAIL = -1,   // failed; the message is in rank->err (or world->err)
	RT_EABORT = -2,  // woken because another rank failed or the watchdog fired
};

/* ------------------------------------------------------------------------------------
 * Tensors.  The interpreter owns the RtTensor header; the backend owns the storage
 * behind `data`.  The core never dereferences `data`; it only offsets it to make views
 * (a stage's weights are one flat buffer, its layers views into it), so `data` must be
 * a linear address: host memory for CPU backends, device memory for CUDA. */

typedef enum {
	RT_MEM_SAVED, // saved activations: what the plan's save_* figures count
	RT_MEM_PARAM, // weights and biases
	RT_MEM_GRAD,  // weight-gradient accumulators
	RT_MEM_COMM,  // stage outputs and input gradients between stages (sent, received,
	              // handed over locally)
	RT_MEM_TEMP,  // scratch that lives inside one op
	RT_MEM_COUNT
} RtMemClass;

typedef struct {
	void *data;   // backend storage (host or device), f32, row-major rows x cols
	void *aux;    // backend's per-tensor extra (say, a CUDA event); NULL if unused
	int64_t rows, cols;
	int64_t bytes;
	uint8_t cls;  // RtMemClass, for the core's memory accounting
	uint8_t view; // 1: borrows another tensor's storage; never freed itself
	int refs;     // hand-off references held by the interpreter's slots
} RtTensor;

/* What a point-to-point message or collective carries, for matching checks: the
 * k-th send from a to b must name what the k-th receive on b from a names. */
typedef struct {
	int32_t edge;   // edge for SEND/RECV, stage for ALLREDUCE
	int32_t mb;     // microbatch, -1 for ALLREDUCE
	int32_t dir;    // Dir, or -1 for ALLREDUCE
	int32_t op;     // index of the op in the rank's list (for messages)
	int64_t bytes;
} RtMsg;

typedef struct RtWorld RtWorld;
typedef struct RtRank RtRank;
typedef struct RtInterp RtInterp;

/* ------------------------------------------------------------------------------------
 * The backend interface.
 *
 * Calls come from one thread per rank (a rank's calls never run concurrently with
 * each other), except the process-level ones, which the world calls from the thread
 * that opened it, and wake(), which the watchdog calls from its own thread.
 *
 * Ordering contract (what makes an asynchronous backend fit): the interpreter issues
 * calls in plan order and may free or reuse a tensor right after the call that last
 * uses it.  A synchronous backend (threads, MPI) completes each call before
 * returning.  An asynchronous one (CUDA: a compute stream, a comm stream, events) may
 * return early provided every later call on the same rank observes the results of
 * earlier ones that touched the same tensors (stream order plus events between the
 * streams), free() is deferred past pending uses (stream-ordered allocation), and
 * download() and sync() really wait.  Host pointers passed to upload() may be reused
 * as soon as it returns.
 *
 * Communication follows NCCL's group model: group_start(), then any number of send(),
 * recv() and allreduce_avg() posts, then group_end().  On a synchronous backend
 * group_end() returns when every op of the group has completed; an asynchronous one
 * enqueues the group (ncclGroupEnd) and orders later work after it.  Sends are
 * rendezvous: a send completes only when its receive is posted and the data has
 * moved.  Matching is FIFO per ordered pair of ranks.  While waiting, a backend polls
 * rt_aborted() (or is woken by wake()) and returns RT_EABORT, so the watchdog can end
 * a deadlock.
 *
 * Errors: a function that fails writes a message with rt_error(r, ...) (naming the
 * library call, its error string, host, rank and file:line, as nccl-tests' NCCLCHECK)
 * and returns RT_EFAIL. */
typedef struct {
	const char *name;
	int async;     // 1: calls may return before the work is done (see above)

	/* Process level. */
	/* Opens the backend for world->plan: sets world->first_local and world->nlocal
	 * (the contiguous world ranks this process runs) and checks the world size. */
	int (*world_open)(RtWorld *w);
	/* Runs fn on every local rank concurrently and returns when all have returned.
	 * fn's return value is stored in rank->status. */
	int (*launch)(RtWorld *w, int (*fn)(RtRank *));
	/* Makes every blocked wait of this process return RT_EABORT soon (from any
	 * thread; rt_aborted() is already true when it is called).  A backend whose
	 * waits cannot be interrupted otherwise aborts its communicators here
	 * (ncclCommAbort). */
	void (*wake)(RtWorld *w);
	/* Every process contributes nlocal blocks of n bytes (one per local rank, in
	 * rank order); the root (world rank 0's process) receives world blocks in
	 * `all`.  Collective over all processes; called from the opening thread. */
	int (*gather)(RtWorld *w, const void *mine, int64_t n, void *all);
	/* Broadcasts n bytes from the root's buf to every process's buf. */
	int (*bcast)(RtWorld *w, void *buf, int64_t n);
	/* Closes the backend.  failed: the run failed on this process, and other
	 * processes may be stuck; a multi-process backend then ends the job. */
	void (*world_close)(RtWorld *w, int failed);

	/* Rank level.  rank_open is called on the rank's own thread; with
	 * r->rank == RT_REF_RANK it sets up compute only (the --check reference). */
	int (*rank_open)(RtRank *r);
	void (*rank_close)(RtRank *r);

	/* Tensors: alloc fills t->data for t->rows x t->cols f32 (contents undefined). */
	int (*alloc)(RtRank *r, RtTensor *t);
	void (*free)(RtRank *r, RtTensor *t);
	int (*upload)(RtRank *r, RtTensor *t, const float *host);
	int (*download)(RtRank *r, const RtTensor *t, float *host);
	int (*zero)(RtRank *r, RtTensor *t);
	int (*copy)(RtRank *r, RtTensor *dst, const RtTensor *src);
	int (*add)(RtRank *r, RtTensor *dst, const RtTensor *src);   // dst += src
	int (*scale)(RtRank *r, RtTensor *t, float alpha);            // t *= alpha

	/* Layers.  x: rows x in, w: in x out (row-major), b: 1 x out, y: rows x out. */
	int (*linear_fwd)(RtRank *r, const RtTensor *x, const RtTensor *w, const RtTensor *b,
	                  RtTensor *y);
	/* dx = dy w^T */
	int (*linear_bwd_in)(RtRank *r, const RtTensor *dy, const RtTensor *w, RtTensor *dx);
	/* dw += x^T dy, db += column sums of dy */
	int (*linear_bwd_w)(RtRank *r, const RtTensor *x, const RtTensor *dy, RtTensor *dw,
	                    RtTensor *db);
	/* kind: LAYER_RELU or LAYER_GELU.  act_bwd: dx = dy * f'(x). */
	int (*act_fwd)(RtRank *r, int kind, const RtTensor *x, RtTensor *y);
	int (*act_bwd)(RtRank *r, int kind, const RtTensor *x, const RtTensor *dy, RtTensor *dx);
	/* Mean of (y - t)^2 over all elements, accumulated in double, stored as element
	 * `slot` of the 1 x n tensor `loss`. */
	int (*mse_fwd)(RtRank *r, const RtTensor *y, const RtTensor *t, RtTensor *loss, int slot);
	/* dy = scale * 2 (y - t) / (rows * cols) */
	int (*mse_bwd)(RtRank *r, const RtTensor *y, const RtTensor *t, float scale, RtTensor *dy);
	/* w -= lr * g */
	int (*sgd)(RtRank *r, RtTensor *w, const RtTensor *g, float lr);

	/* Communication (groups as NCCL's).  peer: world rank.  allreduce_avg sums t over
	 * the rank's dp group (the members of plan_dim_members(DIM_DP)), summing in dp
	 * order where the backend can choose, then multiplies by 1/dp. */
	int (*group_start)(RtRank *r);
	int (*send)(RtRank *r, const RtTensor *t, int peer, const RtMsg *m);
	int (*recv)(RtRank *r, RtTensor *t, int peer, const RtMsg *m);
	int (*allreduce_avg)(RtRank *r, RtTensor *t, const RtMsg *m);
	int (*group_end)(RtRank *r);
	/* Waits for everything the rank has issued. */
	int (*sync)(RtRank *r);
	/* All ranks of the world (between steps, so steps are timed alike). */
	int (*barrier)(RtRank *r);
} RtBackend;

extern const RtBackend rt_backend_threads;
#ifdef HAVE_MPI
extern const RtBackend rt_backend_mpi;
#endif
#ifdef HAVE_CUDA
extern const RtBackend rt_backend_cuda;
#endif

/* Backends in this binary, for --backend and --help. */
const RtBackend *rt_backend_find(const char *name);
/* Names of the backends built in, space separated. */
const char *rt_backend_names(void);
/* The backend to use when none is named: "mpi" when started by mpirun or srun with
 * more than one process (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE), else "threads". */
const char *rt_backend_default(void);

/* ------------------------------------------------------------------------------------
 * Options and results. */

typedef struct {
	const char *backend;  // NULL: rt_backend_default()
	int steps;
	uint64_t seed;
	double lr;
	int check;            // run the sequential reference and compare
	double timeout_s;     // watchdog: no progress for this long ends the run
	int trace;            // record per-op timestamps (for --trace and --calibrate)
	int blas_threads;     // BLAS threads per rank (CPU backends); 0: 1
	const char *plan_path; // for messages: "file:line" of blocked ops
	int dtype;            // RtDtype of the GEMM operands (bf16: cuda backend only)
} RtOptions;

#define RT_DEFAULT_STEPS 5
#define RT_DEFAULT_SEED 1
#define RT_DEFAULT_LR 0.5
#define RT_DEFAULT_TIMEOUT 60.0
#define RT_CHECK_TOL 1e-5  // --check: relative error bound (docs/runtime.md)

/* --dtype: what GEMM operands are.  Storage, accumulation and everything else stay f32;
 * bf16 rounds both GEMM operands to bf16 (cuda backend, docs/gpu.md), which needs the
 * looser --check bound RT_CHECK_TOL_BF16. */
typedef enum {
	RT_DTYPE_F32,  // f32 operands (no TF32)
	RT_DTYPE_BF16, // bf16 operands, f32 accumulation
	RT_DTYPE_COUNT
} RtDtype;
#define RT_CHECK_TOL_BF16 3e-2 // --check bound with --dtype bf16 (docs/gpu.md)
static inline double rt_check_tol(int dtype)
{
	return dtype == RT_DTYPE_BF16 ? RT_CHECK_TOL_BF16 : RT_CHECK_TOL;
}

/* One recorded op, for traces and calibration. */
typedef struct {
	int64_t t0, t1;   // ns since the world's start
	int64_t op;       // index in the rank's list (first op of a group)
	int64_t op_end;   // one past the group's last op (op + 1 for compute)
	int32_t step;
	int32_t split;    // BW: ns spent in its B part; 0 otherwise
} RtEvent;

typedef struct {
	int world, steps;
	double *loss;          // [steps] mean over microbatches and dp replicas
	int64_t *step_ns;      // [steps] first rank's start (after the step barrier) to the
	                       // last rank's end
	int64_t *busy_ns;      // [world] compute time summed over all steps
	int64_t *peak_act;     // [world] peak saved activation bytes (per op, list order)
	int64_t *held_end;     // [world] activation bytes still held after the last op
	/* Events per rank, when options.trace: ev[r][0..nev[r]). */
	int64_t *nev;
	RtEvent **ev;
	/* --check */
	int checked;
	double loss_abs, loss_rel;     // largest step-loss errors
	double weight_abs, weight_rel; // largest final-weight errors (rel: see docs)
	int check_ok;
	int64_t nweights;
} RtResult;

/* ------------------------------------------------------------------------------------
 * The world: one per process. */

#define RT_REF_RANK (-1)

struct RtWorld {
	const Plan *plan;
	RtOptions opt;
	const RtBackend *be;
	void *bw;              // backend's process-level state
	int first_local;       // world ranks [first_local, first_local + nlocal) live here
	int nlocal;
	int root;              // 1 in the process that holds world rank 0
	RtRank *ranks;         // nlocal entries
	struct RtModel *model;
	int64_t t0;            // start time (ns, CLOCK_MONOTONIC), the root's
	atomic_int abort;      // set on the first failure or by the watchdog
	atomic_int timed_out;  // the watchdog fired
	atomic_llong progress; // ops completed by the local ranks, for the watchdog
	char err[1024];        // process-level error
	char host[64];
};

struct RtRank {
	RtWorld *w;
	int rank;              // world rank, or RT_REF_RANK
	int local;             // index in w->ranks
	int coord[DIM_COUNT];
	const PlanRank *pr;    // NULL for the reference
	void *be;              // backend's per-rank state
	int status;            // what launch()'s fn returned
	char err[1024];        // first error of this rank
	/* Watchdog: the op (or group [cur_op, cur_end)) in progress, and the step. */
	atomic_llong cur_op;
	atomic_llong cur_end;
	atomic_int cur_step;
	atomic_int done;
	/* Memory accounting (bytes held per RtMemClass) and the saved-activation peak
	 * sampled after each op. */
	int64_t mem[RT_MEM_COUNT];
	int64_t peak_act;
	/* Figures. */
	int64_t held_end;      // saved-activation bytes still held after the last step
	float *weights;        // --check: final weights of its stages, host copy
	int64_t busy_ns;
	double *loss_sum;      // [steps] sum of this rank's microbatch losses
	int64_t *step_t0, *step_t1; // [steps] start (after the barrier) and end, ns since
	                            // the world's start
	RtEvent *ev;
	int64_t nev, ev_cap;
	RtInterp *in;          // interpreter state (interp.c)
};

/* Error helpers: the first message wins. */
int rt_error(RtRank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rt_world_error(RtWorld *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A backend's launch() for in-process ranks: one thread per local rank running fn,
 * its result in rank->status; returns when all have returned. */
int rt_launch_threads(RtWorld *w, int (*fn)(RtRank *));
static inline int rt_aborted(const RtWorld *w)
{
	return atomic_load_explicit(&w->abort, memory_order_relaxed);
}
/* Marks the world failed and wakes every waiting rank of this process. */
void rt_abort(RtWorld *w);
int64_t rt_now_ns(void);

/* Opens a world for plan p with backend o->backend (after MPI_Init for mpi).
 * Returns NULL with a message in err on failure. */
RtWorld *rt_world_open(const Plan *p, const RtOptions *o, char *err, size_t errn);
/* Runs the plan o->steps times on every local rank, then gathers the figures into res
 * (on the root; other processes get only their own ranks') and, with --check,
 * compares against the sequential reference.  Returns RT_OK, or RT_EFAIL with the
 * messages available from rt_world_report(). */
int rt_world_run(RtWorld *w, RtResult *res);
/* Writes what went wrong (each failed rank's error, or for a watchdog timeout every
 * local rank's blocked ops with plan lines) to f. */
void rt_world_report(RtWorld *w, FILE *f);
void rt_world_close(RtWorld *w, int failed);
void rt_result_free(RtResult *res);

/* Per-rank figures of the sequential reference, filled by rt_reference(). */
int rt_reference(RtWorld *w, double *loss, float **weights);

/* Trace in pipesim's Chrome trace format (docs/runtime.md). */
int rt_trace_write(const Plan *p, const RtResult *res, FILE *f);
/* --calibrate: prints `cost STAGE f=.. b=.. w=..;` lines (means over steps but the
 * first) for the .pipe file. */
int rt_calibrate_write(const Plan *p, const RtResult *res, FILE *f);

/* ------------------------------------------------------------------------------------
 * Inside the runtime (shared by its files, not by piperun_main.c). */

/* The model the plan describes, read-only, shared by every rank. */
typedef struct {
	int64_t w_off, b_off; // element offsets of a linear layer's weights and bias
} RtLayerAt;

typedef struct {
	RtLayerAt *at;           // per layer
	int64_t nparams;         // f32 parameters (w then b, layer by layer)
	int nin, nout;
	int *in_edges, *out_edges; // ascending edge indices
	int64_t save[3];         // fb, fw, bw bytes per microbatch the runtime holds
	int loss;                // last layer is mse
	int64_t out_bytes;       // rows x out x 4
} RtStageModel;

typedef struct RtModel {
	const Plan *p;
	RtStageModel *st;
	int loss_stage;
} RtModel;

/* Builds and checks the model: layer widths chain, stage and edge widths agree,
 * params and bytes match, one mse at the very end.  NULL with a message on error. */
RtModel *rt_model_new(const Plan *p, char *err, size_t errn);
void rt_model_free(RtModel *m);

/* Deterministic data (docs/semantics.md "Model"). */
uint64_t rt_splitmix64(uint64_t x);
void rt_gen_input(uint64_t seed, int step, int replica, int mb, float *out, int64_t n);
void rt_gen_target(uint64_t seed, int step, int replica, int mb, float *out, int64_t n);
void rt_gen_weights(uint64_t seed, const Plan *p, int stage, float *out); // whole stage

/* Tensors through the backend, accounted per class. */
RtTensor *rt_tensor_new(RtRank *r, int64_t rows, int64_t cols, int cls);
void rt_tensor_free(RtRank *r, RtTensor *t);
void rt_tensor_reclass(RtRank *r, RtTensor *t, int cls);
RtTensor rt_tensor_view(const RtTensor *parent, int64_t off, int64_t rows, int64_t cols);

/* One stage's compute, shared by the interpreter and the reference.  `saved` holds
 * 2 x nlayers tensor pointers: layer inputs, then the output gradients W needs. */
typedef struct {
	RtTensor *params, *grads;  // flat
	RtTensor *loss;            // 1 x microbatches, for the loss stage
	float *host;               // scratch for synthetic data (rows x widest)
} RtStageBufs;

/* F: x (owned, consumed) -> *y (NULL for the loss stage).  target_key: step, replica. */
int rt_stage_forward(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                     RtTensor *x, RtTensor **saved, RtTensor **y);
/* B: dy (owned, consumed; NULL for the loss stage) -> *dx (NULL when the stage has no
 * in-edges). */
int rt_stage_backward(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                      RtTensor *dy, RtTensor **saved, RtTensor **dx);
int rt_stage_weights(RtRank *r, int s, RtStageBufs *b, RtTensor **saved);
/* The synthetic input of a microbatch as a new tensor of class cls. */
RtTensor *rt_stage_input(RtRank *r, int step, int replica, int mb, RtStageBufs *b, int cls);
/* Allocates and initialises a stage's params and zeroed grads. */
int rt_stage_bufs_open(RtRank *r, int s, RtStageBufs *b);
void rt_stage_bufs_close(RtRank *r, RtStageBufs *b);

/* The interpreter: runs the rank's list opt.steps times. */
int rt_rank_main(RtRank *r);
/* Copies a local stage's weights to host (for --check). */
int rt_rank_weights(RtRank *r, int stage, float *out);
void rt_rank_free(RtRank *r);

/* Watchdog thread over the local ranks' progress. */
typedef struct RtWatchdog RtWatchdog;
RtWatchdog *rt_watchdog_start(RtWorld *w);
void rt_watchdog_stop(RtWatchdog *wd);

/* CPU kernels (cpu.c) shared by the threads and MPI backends. */
int rt_cpu_alloc(RtRank *r, RtTensor *t);
void rt_cpu_free(RtRank *r, RtTensor *t);
int rt_cpu_upload(RtRank *r, RtTensor *t, const float *host);
int rt_cpu_download(RtRank *r, const RtTensor *t, float *host);
int rt_cpu_zero(RtRank *r, RtTensor *t);
int rt_cpu_copy(RtRank *r, RtTensor *dst, const RtTensor *src);
int rt_cpu_add(RtRank *r, RtTensor *dst, const RtTensor *src);
int rt_cpu_scale(RtRank *r, RtTensor *t, float alpha);
int rt_cpu_linear_fwd(RtRank *r, const RtTensor *x, const RtTensor *w, const RtTensor *b,
                      RtTensor *y);
int rt_cpu_linear_bwd_in(RtRank *r, const RtTensor *dy, const RtTensor *w, RtTensor *dx);
int rt_cpu_linear_bwd_w(RtRank *r, const RtTensor *x, const RtTensor *dy, RtTensor *dw,
                        RtTensor *db);
int rt_cpu_act_fwd(RtRank *r, int kind, const RtTensor *x, RtTensor *y);
int rt_cpu_act_bwd(RtRank *r, int kind, const RtTensor *x, const RtTensor *dy, RtTensor *dx);
int rt_cpu_mse_fwd(RtRank *r, const RtTensor *y, const RtTensor *t, RtTensor *loss, int slot);
int rt_cpu_mse_bwd(RtRank *r, const RtTensor *y, const RtTensor *t, float scale, RtTensor *dy);
int rt_cpu_sgd(RtRank *r, RtTensor *w, const RtTensor *g, float lr);
/* The tensor and layer members of an RtBackend initializer, for host-memory backends. */
#define RT_CPU_COMPUTE                                                                       \
	.alloc = rt_cpu_alloc, .free = rt_cpu_free, .upload = rt_cpu_upload,                     \
	.download = rt_cpu_download, .zero = rt_cpu_zero, .copy = rt_cpu_copy, .add = rt_cpu_add, \
	.scale = rt_cpu_scale, .linear_fwd = rt_cpu_linear_fwd,                                  \
	.linear_bwd_in = rt_cpu_linear_bwd_in, .linear_bwd_w = rt_cpu_linear_bwd_w,              \
	.act_fwd = rt_cpu_act_fwd, .act_bwd = rt_cpu_act_bwd, .mse_fwd = rt_cpu_mse_fwd,         \
	.mse_bwd = rt_cpu_mse_bwd, .sgd = rt_cpu_sgd
/* Sets OpenBLAS to n threads (process-wide). */
void rt_cpu_blas_threads(int n);

#endif
