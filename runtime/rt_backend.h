/* The backend contract: what a launcher, a device and a communicator implement, and
 * the runtime services they may call.  A backend name is a row of the registry
 * (registry.c) that composes one of each:
 *
 *   launcher      starts the ranks: which world ranks live in this process, running
 *                 them, the process-level collectives (gather, bcast), ending the job
 *                 (threads: launch_threads.c, mpi: launch_mpi.c)
 *   device        computes: tensor storage, the layer kernels, the optimizer step and
 *                 waiting for issued work (cpu: cpu.c, cuda: device_cuda.cu)
 *   communicator  moves tensors: grouped send/recv, the all-reduce over the dp or tp
 *                 group or a tied table's pair of ranks, one communicator per mesh
 *                 dimension, the step barrier, abort
 *                 (shm: comm_shm.c, mpi: comm_mpi.c, nccl: comm_nccl.cu)
 *
 * Calls come from one thread per rank (a rank's calls never run concurrently with
 * each other), except the process-level ones (open, close, gather, bcast), which the
 * world calls from the thread that opened it, and a communicator's abort, which the
 * watchdog or a failing rank calls from any thread.
 *
 * Ordering contract (what makes an asynchronous device fit): the interpreter issues
 * calls in plan order and may free or reuse a tensor right after the call that last
 * uses it.  A synchronous device (cpu) completes each call before returning.  An
 * asynchronous one (cuda: a compute stream, a comm stream, events) may return early
 * provided every later call on the same rank observes the results of earlier ones that
 * touched the same tensors, free() is deferred past pending uses, and download() and
 * sync() really wait.  Host pointers passed to upload() may be reused at once.
 *
 * Communication follows NCCL's group model: group_start(), then any number of send(),
 * recv() and allreduce() posts, then group_end().  On a synchronous communicator
 * group_end() returns when every op of the group has completed; an asynchronous one
 * enqueues the group and orders later work after it.  Sends are rendezvous; matching
 * is FIFO per ordered pair of ranks.  While waiting, a part polls rt_aborted() (or is
 * woken by the communicator's abort) and returns RT_EABORT, so the watchdog can end a
 * deadlock.
 *
 * Errors: a function that fails writes a message with rt_error(r, ...) (naming the
 * library call, its error string, host, rank and file:line, as nccl-tests' NCCLCHECK)
 * and returns RT_EFAIL.
 *
 * This header is C11 and C++ alike: C++ code (the CUDA parts) sees RtWorld and RtRank
 * as incomplete types and reaches them through the accessors below, so the atomics
 * inside them stay C11's. */
#ifndef RT_BACKEND_H
#define RT_BACKEND_H

#include "rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------
 * Tensors.  The interpreter owns the RtTensor header; the device owns the storage
 * behind `data`.  The core never dereferences `data`; it only offsets it to make views
 * (a stage's weights are one flat buffer, its layers views into it), so `data` must be
 * a linear address: host memory for the cpu device, device memory for cuda. */

typedef enum {
	RT_MEM_SAVED, // saved activations: what the plan's save_* figures count
	RT_MEM_PARAM, // weights and biases
	RT_MEM_GRAD,  // weight-gradient accumulators
	RT_MEM_OPTIM, // optimizer state (AdamW's two moments; none for SGD)
	RT_MEM_MASTER, // f32 master weights the optimizer updates (precision bf16)
	RT_MEM_COMM,  // stage outputs and input gradients between stages (sent, received,
	              // handed over locally)
	RT_MEM_TEMP,  // scratch that lives inside one op
	RT_MEM_COUNT
} RtMemClass;

typedef struct {
	void *data;   // device storage (host or device), f32, row-major rows x cols (a
	              // dropout mask: one byte an element, LayerTensor.mask)
	void *aux;    // device's per-tensor extra (say, a CUDA block); NULL if unused
	int64_t rows, cols;
	int64_t bytes;
	int64_t acct; // bytes the memory accounting counts: `bytes`, or half of them for a
	              // tensor stored in bf16 (half)
	uint8_t half; // stored in bf16 (precision bf16, docs/runtime.md "Precision"): its
	              // values are rounded to bf16 where it is written (rt_round)
	uint8_t cls;  // RtMemClass, for the core's memory accounting
	uint8_t view; // 1: borrows another tensor's storage; never freed itself
	int refs;     // hand-off references held by the interpreter's slots
} RtTensor;

/* What a point-to-point message or collective carries, for matching checks: the
 * k-th send from a to b must name what the k-th receive on b from a names. */
typedef struct {
	int32_t edge;   // edge for SEND/RECV, stage for the collectives
	int32_t mb;     // microbatch, -1 for ALLREDUCE and TIEREDUCE
	int32_t dir;    // Dir, or -1 for ALLREDUCE and TIEREDUCE
	int32_t op;     // index of the op in the rank's list (for messages)
	int64_t bytes;
} RtMsg;

/* ------------------------------------------------------------------------------------
 * Layers.  A device computes every layer kind through one row of three kernels, each
 * taking one RtLayerCall, so a kind's math is one row per device and the model
 * (stage.c) walks a stage's layers without knowing any kind:
 *
 *   fwd     y = f(x); fills the layer's saved tensors; a loss writes its loss instead
 *           of y (into element `slot` of `loss`, against `target`)
 *   bwd_in  B: dx from dy (overwriting dx), x and the saved tensors; fills the held
 *           tensors W needs.  Never touches a weight gradient: zero-bubble schedules
 *           run B and W apart.  A loss computes dx = scale * dloss/dy from x and
 *           `target` (dy is NULL).  dx is NULL when nobody wants the input gradient;
 *           the model then calls bwd_in only for a kind with held tensors.
 *   bwd_w   W: accumulates (+=) into the parameter gradients from x, dy, the saved
 *           and the held tensors; NULL for a kind without parameters.
 *
 * Between F and W the model keeps x and the saved tensors, between B and W dy and the
 * held tensors, unchanged; nothing else carries over.  Which tensors a kind has (its
 * parameters, saved, held and scratch tensors, with their shapes and named slots) is
 * its layer table row's `tensors` (plan_layer_tensors, plan/layer.h), one for every
 * device; the table's parameter, byte and FLOP figures are derived from the same row.
 *
 * Token data travels as f32 tensors of whole numbers (a token id per row, exact below
 * 2^24; the compiler bounds the vocabulary): an embedding's x is rows x 1, and a loss
 * on tokens (a kind whose row says `tokens`, cross-entropy) gets rows x 1 targets, the
 * next token of each position.  A kernel refuses an id that is not a whole number in
 * [0, vocab) with an error.
 *
 * A kind with a body (residual: LAYER_ARG_BODY) has no kernels: the model adds its
 * input to its body's output in F, and its output gradient to the body's input gradient
 * in B, through the device's copy and add.
 *
 * A tied head computes with the embedding's table: its call's param[0] and grad[0] are
 * views of the embedding's (the layer has no parameters of its own), so its kernels are
 * the untied head's.  On another pipeline rank than the embedding (`copy`), the head
 * keeps its own copy of the table, initialised as the embedding's, which the plan's
 * TIEREDUCE keeps equal (the communicator's allreduce over OP_OVER_TIE). */

/* One kernel call.  Arrays are in LayerTensors' order; unused members are NULL/0. */
typedef struct {
	const PlanLayer *layer;  // kind and widths (in, out)
	int64_t rows;            // rows it runs on (plan_layer_rows): the microbatch's
	                         // (sh.rows), a replicated layer's share under sp
	LayerShape sh;           // the microbatch: sequences, tokens each, vocabulary
	const RtTensor *x;       // input, rows x in (NULL in a split layer's B and rebuild
	                         // under sp, which do not read it; F and W get it gathered)
	RtTensor *y;             // F: output, rows x out (NULL for a loss)
	const RtTensor *dy;      // B, W: output gradient, rows x out (NULL for a loss)
	RtTensor *dx;            // B: input gradient, rows x in (NULL: not wanted)
	int nparams;
	const RtTensor *param;   // [nparams] views into the stage's parameters
	RtTensor *grad;          // [nparams] views into its gradient accumulators (W)
	int nsaved;
	RtTensor *const *saved;  // [nsaved]
	int nheld;
	RtTensor *const *held;   // [nheld]
	RtTensor *work;          // B: scratch, or NULL
	const RtTensor *target;  // a loss's target (F and B): rows x in, or rows x 1
	                         // token ids for a kind on tokens
	RtTensor *loss;          // F of a loss: 1 x microbatches
	int slot;                // ... and the element it writes (the microbatch)
	float scale;             // B of a loss: factor of the gradient (1/microbatches)
	int tp, tp_rank;         // the layer's tp group size (1: whole) and the rank's place
	int64_t row0;            // the call's first row in the microbatch: the rank's slice's
	                         // under sequence parallelism (dropout keys its mask by the
	                         // global position), else 0
	int phase;               // tp_fwd of a vocabulary-parallel loss: 1 or 2 (below)
	uint64_t key;            // a layer with dropout (PlanLayer.drop), F and rebuild: the
	                         // key its masks are drawn from (rt_drop_key; tk_drop)
} RtLayerCall;

/* The shapes every device's kernels rely on: x is rows x in, y and dy rows x out, dx
 * rows x in, a loss's target rows x in (rows x 1 on tokens), and the tensors of its
 * LayerTensors row.  RT_OK, or RT_EFAIL with an internal error. */
int rt_layer_call_check(RtRank *r, const RtLayerCall *c);

typedef int (*RtLayerFn)(RtRank *r, const RtLayerCall *c);

typedef struct {
	RtLayerFn fwd;    // required
	RtLayerFn bwd_in; // required, except for a kind that is only ever first (no dx)
	RtLayerFn bwd_w;  // required for a kind with parameters, else NULL
	/* A loss split over the vocabulary at tp > 1 (cross-entropy): fwd writes y, 3 x rows,
	 * row 0 the rows' local maximum logit; the model max-reduces row 0 over the tp group,
	 * calls tp_fwd with phase 1 (rows 1 and 2: the sum of exp(logit - max) and the target's
	 * logit, 0 outside the slice), sum-reduces rows 1 and 2, and calls it with phase 2 (the
	 * log-sum-exp into saved[0], the loss into loss[slot]).  NULL: no such split. */
	RtLayerFn tp_fwd;
	/* Selective recomputation (PlanRecompute): refills the saved tensors F dropped from
	 * the ones it kept, the same math as fwd's.  Attention: saved[ATTN_PROBS], the
	 * softmax probabilities, from saved[0], the projected (and rotated) q, k, v, and
	 * with dropout=P their mask and dropped copy (ATTN_MASK, ATTN_DROP) drawn again from
	 * the call's key.  NULL: the kind cannot. */
	RtLayerFn rebuild;
} RtLayerKernels;

/* ------------------------------------------------------------------------------------
 * The optimizer.  A device computes each OptimKind through one entry of its `optim`
 * table, over a stage's flat parameters w with their dp-averaged gradient g.  The f32
 * factors below are computed once on the host (rt_optim_step_init, the bias
 * corrections in double), so every device runs the same f32 operations in the same
 * order and agrees with the cpu to the bit (no fused multiply-adds):
 *
 *   sgd     w = w - lr * g
 *   adamw   m = beta1 * m + (1 - beta1) * g
 *           v = beta2 * v + ((1 - beta2) * g) * g
 *           w = w * decay - step * (m / (sqrt(v) / bc2 + eps))
 *           decay = 1 - lr * weight_decay (decoupled, as torch.optim.AdamW),
 *           step = lr / (1 - beta1^t), bc2 = sqrt(1 - beta2^t)
 *   momentum  m = momentum * m + g
 *             w = w - lr * m      (torch.optim.SGD with momentum, no dampening: its
 *                                  first buffer is g, which m = 0 gives)
 *
 * m and v are the stage's optimizer state (RT_MEM_OPTIM, zero before step 1); momentum
 * keeps m only. */
typedef struct {
	RtTensor *w;        // parameters, updated in place
	const RtTensor *g;  // their gradient, w's shape
	RtTensor *m, *v;    // adamw: first and second moments, w's shape; momentum: m is the
	                    // buffer, v NULL; NULL for sgd
	int64_t t;          // the step, from 1
	float lr;           // every kind
	float momentum;     // momentum
	float beta1, beta2, one_minus_beta1, one_minus_beta2, decay, step, bc2, eps; // adamw
} RtOptStep;

typedef int (*RtOptimFn)(RtRank *r, const RtOptStep *s);

/* The factors of step t (from 1) of optimizer o into s (runtime/optim.c); w, g, m, v
 * are the caller's. */
void rt_optim_step_init(const PlanOptim *o, int64_t t, RtOptStep *s);

/* ------------------------------------------------------------------------------------
 * The three parts.  Process-level state lives in the world (rt_world_state), rank
 * state in the rank (rt_rank_state), one slot per part. */

typedef enum {
	RT_PART_LAUNCHER, // RtLauncher's state
	RT_PART_DEVICE,   // RtDevice's state
	RT_PART_COMM,     // RtComm's state
	RT_PART_COUNT
} RtPart;

typedef struct {
	const char *name;
	/* Sets the world's rank set (rt_world_set_ranks: all of them for threads, one per
	 * process for mpi) and checks the world size.  May note that this process cannot
	 * run (rt_world_unable) instead of failing, so every process still takes part in
	 * the collective rest of opening. */
	int (*open)(RtWorld *w);
	/* Runs fn on every local rank concurrently and returns when all have returned;
	 * fn's return value is stored as the rank's status (rt_rank_run). */
	int (*launch)(RtWorld *w, int (*fn)(RtRank *));
	/* Every process contributes nlocal blocks of n bytes (one per local rank, in rank
	 * order); the root receives world blocks in `all`.  Collective over processes. */
	int (*gather)(RtWorld *w, const void *mine, int64_t n, void *all);
	/* Broadcasts n bytes from the root's buf to every process's buf. */
	int (*bcast)(RtWorld *w, void *buf, int64_t n);
	/* Ends the whole job after a failure (other processes may be stuck); NULL when
	 * every rank lives in this process. */
	void (*abort)(RtWorld *w);
	void (*close)(RtWorld *w);
} RtLauncher;

typedef struct {
	const char *name;
	int async;     // 1: calls may return before the work is done (see above)
	/* Process level, after the launcher's open; NULL when there is nothing to do.
	 * May note rt_world_unable() (no GPU, two ranks on one GPU). */
	int (*open)(RtWorld *w);
	void (*close)(RtWorld *w);
	/* Rank level, on the rank's own thread.  The --check reference is a rank too
	 * (rank RT_REF_RANK), always on the cpu device. */
	int (*rank_open)(RtRank *r);
	void (*rank_close)(RtRank *r);

	/* Tensors: alloc fills t->data for t->bytes (rows x cols f32, or bytes of a mask;
	 * contents undefined). */
	int (*alloc)(RtRank *r, RtTensor *t);
	void (*free)(RtRank *r, RtTensor *t);
	int (*upload)(RtRank *r, RtTensor *t, const float *host);
	int (*download)(RtRank *r, const RtTensor *t, float *host);
	int (*zero)(RtRank *r, RtTensor *t);
	int (*copy)(RtRank *r, RtTensor *dst, const RtTensor *src);
	int (*add)(RtRank *r, RtTensor *dst, const RtTensor *src);   // dst += src
	int (*scale)(RtRank *r, RtTensor *t, float alpha);            // t *= alpha

	/* Layers: one row per LayerKind (an array of LAYER_COUNT rows, RtLayerKernels
	 * below).  A kind the device cannot compute has an empty row, and a plan using it is
	 * refused when the world opens (rt_device_check). */
	const RtLayerKernels *layers;
	/* The optimizer step: one entry per OptimKind (an array of OPTIM_COUNT, RtOptStep
	 * above); a NULL entry is an optimizer the device cannot run, refused when the
	 * world opens. */
	const RtOptimFn *optim;
	/* Waits for everything the rank has issued (communication included). */
	int (*sync)(RtRank *r);
	/* Optional: t's elements set to the synthetic values of key on the device, bit for
	 * bit rt_gen_values(key) (rt_private.h).  NULL: the host makes them and uploads. */
	int (*gen)(RtRank *r, RtTensor *t, uint64_t key);
	/* 1: its layer rows compute one rank's shard of a tp group (RtLayerCall.tp and
	 * tp_rank, the split tensors of plan_layer_tensors); 0: plans with tp > 1 are refused
	 * when the world opens. */
	int tp_split;
	/* 1: its layer rows run a replicated layer on a rank's rows under sequence parallelism
	 * (RtLayerCall.row0: dropout keys its mask by the global position); 0: sp plans are
	 * refused when the world opens. */
	int seq_split;
	/* Optional, last: t's values rounded to bf16 in place (to nearest, ties to even; NaN
	 * stays NaN): what a bf16 store keeps.  NULL: the device does not emulate bf16
	 * storage, and bf16 plans are refused when the world opens. */
	int (*round_bf16)(RtRank *r, RtTensor *t);
} RtDevice;

typedef struct {
	const char *name;
	/* Process level, after the launcher's and the device's open (NCCL: the unique id,
	 * made by the root and broadcast through the launcher). */
	int (*open)(RtWorld *w);
	void (*close)(RtWorld *w);
	/* Makes every blocked wait of this process return RT_EABORT soon, from any thread
	 * (rt_aborted() is already true): wakes sleepers, or aborts the communicators
	 * (ncclCommAbort). */
	void (*abort)(RtWorld *w);
	/* Rank level, after the device's rank_open: the communicators of the rank, one
	 * per mesh dimension (split from the world's, collective over the world). */
	int (*rank_open)(RtRank *r);
	void (*rank_close)(RtRank *r);
	/* Groups as NCCL's.  peer: world rank. */
	int (*group_start)(RtRank *r);
	int (*send)(RtRank *r, const RtTensor *t, int peer, const RtMsg *m);
	int (*recv)(RtRank *r, RtTensor *t, int peer, const RtMsg *m);
	/* An all-reduce of t in place, alone in its group, over the group `over` names (the
	 * op table's OP_OVER_*, an op kind's OpInfo.over), in member order where the part can
	 * choose:
	 *   OP_OVER_DP   the rank's dp group (plan_dim_members(DIM_DP)): the sum times 1/dp
	 *                (ALLREDUCE: the gradients' average)
	 *   OP_OVER_TP   the rank's tp group (plan_dim_members(DIM_TP)): the sum, or with
	 *                max 1 the elementwise maximum (TPREDUCE)
	 *   OP_OVER_TIE  the pair holding a table tied across pipeline ranks (plan_tie_peer),
	 *                the embedding's rank first: the sum (TIEREDUCE)
	 * (max is 0 over the others).  The part makes its groups when the rank opens. */
	int (*allreduce)(RtRank *r, RtTensor *t, int over, int max, const RtMsg *m);
	/* The distributed optimizer's collectives over the rank's dp group, on t (a stage's
	 * flat gradients or parameters) cut into shards as rt_shard says (member i owns
	 * [off_i, off_i + len_i)), alone in their group: gather 0, a reduce-scatter
	 * (REDUCESCATTER): member i's shard becomes the dp average of every member's, in
	 * member order where the part can choose, the rest of t undefined; gather 1, an
	 * all-gather (ALLGATHER): every member's shard i becomes member i's. */
	int (*shard)(RtRank *r, RtTensor *t, int gather, const RtMsg *m);
	int (*group_end)(RtRank *r);
	/* All ranks of the world (between steps, so steps are timed alike). */
	int (*barrier)(RtRank *r);
	/* Optional, last: sequence parallelism's collectives over the rank's tp group, alone
	 * in their group: member i's piece is rows [i n, (i + 1) n) of the whole (n = piece's rows).  gather 0,
	 * a reduce-scatter: piece becomes the sum of every member's whole's rows of it, in
	 * member order where the part can choose (the all-reduce's order: the same bits);
	 * gather 1, an all-gather: whole's rows of member i become member i's piece.  m->bytes:
	 * the whole's.  NULL: the part does not run sequence parallelism. */
	int (*seq)(RtRank *r, RtTensor *whole, RtTensor *piece, int gather, const RtMsg *m);
} RtComm;

/* A backend: a name for a combination.  auto_launcher: the launcher is chosen from
 * the environment (mpi when started by a launcher with several processes, else
 * threads).  A part that is not built into this binary is NULL in its row (the
 * name stays known, for messages). */
typedef struct {
	const char *name;
	const RtLauncher *launcher;
	const RtDevice *device;
	const RtComm *comm;
	int auto_launcher; // 1: the launcher is rt_launcher_auto()'s choice (launcher NULL)
} RtBackend;

/* The registries (registry.c): arrays walked by loops, NULL entries for parts not
 * built into this binary. */
extern const RtLauncher *const rt_launchers[];
extern const int rt_nlaunchers;
extern const RtDevice *const rt_devices[];
extern const int rt_ndevices;
extern const RtComm *const rt_comms[];
extern const int rt_ncomms;
extern const RtBackend rt_backends[];
extern const int rt_nbackends;

/* The cpu device (cpu.c), which every --check reference runs on.  The other parts are
 * reached through the registries only (their declarations are registry.c's). */
extern const RtDevice rt_device_cpu;
/* Its layer kernels, one row per LayerKind (cpu_layers.c), which the device points to. */
extern const RtLayerKernels rt_cpu_layers[LAYER_COUNT];
/* Piece t (of a tp group) of a whole parameter, cut as sp says, into out (piece's shape);
 * a whole copy when sp says none. */
void rt_split_copy(const LayerTensor *piece, const LayerSplit *sp, int tp, int t, const float *whole,
                   float *out);
/* The inverse: piece t (in, piece's shape) into its place in the whole. */
void rt_split_put(const LayerTensor *piece, const LayerSplit *sp, int tp, int t, const float *in,
                  float *whole);

/* A backend by name, built or not; NULL when unknown. */
const RtBackend *rt_backend_find(const char *name);
/* 1 when every part of b is built into this binary. */
int rt_backend_built(const RtBackend *b);
/* The launcher for an auto row: mpi when rt_launch_env_nprocs() > 1 and built, else
 * threads. */
const RtLauncher *rt_launcher_auto(void);

/* ------------------------------------------------------------------------------------
 * Launch environment (launch_env.c): pure functions of a getenv-like lookup, so tests
 * can fake one. */

typedef char *(*RtGetenv)(const char *name);
/* Processes the launcher started (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE,
 * SLURM_STEP_NUM_TASKS, first one set: srun sets the last for its tasks, not for the
 * batch script, whose SLURM_NTASKS describes the allocation); 0 when not started by a
 * launcher or the value is not a positive number. */
int rt_launch_env_nprocs(RtGetenv get);
/* This process's rank among all the launcher started (OMPI_COMM_WORLD_RANK, PMI_RANK,
 * PMIX_RANK, SLURM_PROCID, first one set); -1 when none is set or not a number >= 0. */
int rt_launch_env_rank(RtGetenv get);
/* This process's rank among the processes of its node (OMPI_COMM_WORLD_LOCAL_RANK,
 * MPI_LOCALRANKID, SLURM_LOCALID, MV2_COMM_WORLD_LOCAL_RANK, LOCAL_RANK, first one
 * set); -1 when none is set or the value is not a whole number >= 0. */
int rt_launch_env_local_rank(RtGetenv get);
/* Local rank from every process's host name: hosts holds nproc NUL-terminated names,
 * `stride` bytes apart, in world order; the answer is how many processes before `me`
 * run on the same host.  -1 when me is out of range. */
int rt_launch_hosts_local_rank(const char *hosts, size_t stride, int nproc, int me);
/* The process's real getenv, as an RtGetenv. */
char *rt_real_getenv(const char *name);

/* ------------------------------------------------------------------------------------
 * Services of the runtime (base.c), for every part.  Plain functions, so C++ calls
 * them too. */

#define RT_REF_RANK (-1)
#define RT_HOST_BYTES 64 // a host name's bytes, NUL included (RtWorld.host)

/* Errors: the first message wins. */
int rt_error(RtRank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rt_world_error(RtWorld *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Notes why this process cannot run (the first reason wins); opening goes on, so
 * collective steps complete everywhere, and rt_world_run fails with the reason. */
int rt_world_unable(RtWorld *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int rt_aborted(const RtWorld *w);
/* Marks the world failed and wakes every waiting rank of this process. */
void rt_abort(RtWorld *w);
int64_t rt_now_ns(void);

/* The world, for parts.  State slots: one per RtPart. */
const Plan *rt_world_plan(const RtWorld *w);
const char *rt_world_host(const RtWorld *w);
const char *rt_world_unable_reason(const RtWorld *w); // "" when able
void **rt_world_state(RtWorld *w, RtPart part);
int rt_world_first_local(const RtWorld *w);
int rt_world_nlocal(const RtWorld *w);
/* Sets the ranks this process runs: [first, first + n), and whether it is the root. */
void rt_world_set_ranks(RtWorld *w, int first, int n, int root);
RtRank *rt_world_rank(RtWorld *w, int local);
/* The launcher's collectives, for devices and communicators. */
int rt_world_gather(RtWorld *w, const void *mine, int64_t n, void *all);
int rt_world_bcast(RtWorld *w, void *buf, int64_t n);
/* Every rank's host name (rt_world_host), RT_HOST_BYTES apart, in world order, into a
 * new array (the caller frees it); collective under a multi-process launcher.  NULL
 * when one process holds every rank. */
int rt_world_hosts(RtWorld *w, char **hosts);

/* The shard of n parameters that dp-group member i of dp keeps under a distributed
 * optimizer (docs/semantics.md "Data flow"): [*off, *off + *len), shards of
 * plan_optim_shard's ceil(n / dp) (called, not restated), the last ones shorter or empty.  Returns the shard's
 * allocated size, ceil(n / dp).  With dp = 1 (or no distributed optimizer: dp given as
 * 1) the whole of it. */
int64_t rt_shard(int64_t n, int dp, int i, int64_t *off, int64_t *len);

/* The rank, for parts. */
RtWorld *rt_rank_world(const RtRank *r);
int rt_rank_id(const RtRank *r);        // world rank, or RT_REF_RANK
int rt_rank_local(const RtRank *r);     // index among the process's ranks
const int *rt_rank_coord(const RtRank *r);
void **rt_rank_state(RtRank *r, RtPart part);
/* The rank's first error ("" when none). */
const char *rt_rank_error(const RtRank *r);
/* Stores what a launcher's fn returned. */
void rt_rank_set_status(RtRank *r, int status);
/* Names the group [op, op_end) as what the rank is blocked in (for the report). */
void rt_rank_blame(RtRank *r, int64_t op, int64_t op_end);

#ifdef __cplusplus
}
#endif

/* ------------------------------------------------------------------------------------
 * The world and the rank, for C parts (C++ sees incomplete types). */
#ifndef __cplusplus
#include <stdatomic.h>

struct RtWorld {
	const Plan *plan;
	RtOptions opt;
	PlanOptim optim;          // the optimizer the ranks run (rt_optim_resolve)
	const RtBackend *be;      // the combination named by --backend
	const RtLauncher *launcher;
	const RtDevice *dev;      // the ranks' device (the reference: rt_device_cpu)
	const RtComm *comm;
	void *state[RT_PART_COUNT]; // each part's process-level state
	int first_local;       // world ranks [first_local, first_local + nlocal) live here
	int nlocal;
	int root;              // 1 in the process that holds world rank 0
	int quiet;             // 1: another process reports this one's failure too
	RtRank *ranks;         // nlocal entries
	struct RtModel *model;  // the ranks' model: their tp shards (plan_stage_parts)
	struct RtModel *whole;  // the whole model (tp = 1): the reference's; model at tp 1
	int64_t t0;            // start time (ns, CLOCK_MONOTONIC), the root's
	atomic_int abort;      // set on the first failure or by the watchdog
	atomic_int timed_out;  // the watchdog fired
	atomic_llong progress; // ops completed by the local ranks, for the watchdog
	char unable[1024];     // why this process cannot run (rt_world_unable)
	char err[1024];        // process-level error
	char host[RT_HOST_BYTES];
	int64_t step0;         // steps done before this run (--resume's checkpoint)
	int saves;             // checkpoints written, and world rank 0's time in them
	int64_t save_ns;
	/* Test-only fault (PIPERUN_FAULT, fault.c): world rank fault_rank stalls at op
	 * fault_op of its list in step fault_step (0-based), for good or (fault_hold)
	 * until the world is aborted, or (fault_open) the process of launcher rank
	 * fault_rank while opening; fault_rank -1: none. */
	int fault_rank, fault_step, fault_open, fault_hold;
	int64_t fault_op;
	int fault_save;        // ... or (stall-save) after writing its checkpoint files
	int nstuck;            // rank threads still in an op when the launcher gave up
};

struct RtRank {
	RtWorld *w;
	int rank;              // world rank, or RT_REF_RANK
	int local;             // index in w->ranks
	int coord[DIM_COUNT];
	const PlanRank *pr;    // NULL for the reference
	const RtDevice *dev;   // where this rank computes (the reference: rt_device_cpu)
	int eval;              // the reference's held-out pass: tokens from opt.eval_data
	void *state[RT_PART_COUNT]; // each part's per-rank state (no launcher state)
	int status;            // what launch()'s fn returned
	char err[1024];        // first error of this rank
	/* Watchdog: the op (or group [cur_op, cur_end)) in progress, and the step. */
	atomic_llong cur_op;
	atomic_llong cur_end;
	atomic_int cur_step;
	atomic_int done;
	/* The same when the watchdog fired, for the report: a rank whose op returns after
	 * the abort (a late allocation, a slow kernel) moves on from what it was blocked in. */
	int64_t wd_op, wd_end;
	int wd_step, wd_done;
	/* Memory accounting (bytes held per RtMemClass) and the saved-activation peak
	 * sampled after each op. */
	int64_t mem[RT_MEM_COUNT];
	int64_t peak_act;
	/* The memory model's peak (docs/semantics.md "Memory", rt_mem_sample): total bytes of
	 * every class but RT_MEM_TEMP, its saved and in-flight parts then, and the op. */
	int64_t peak_total[4];
	/* The highest total sampled since the last recorded event: total, saved, in flight
	 * (the event's memory, RtEvent.mem). */
	int64_t ev_hi[3];
	/* Figures. */
	int64_t held_end;      // saved-activation bytes still held after the last step
	int64_t model_bytes[4]; // parameter, gradient, optimizer-state, master bytes (RtResult's)
	float *weights;        // --check: final weights of its stages, host copy
	int64_t busy_ns;
	double *loss_sum;      // [steps] sum of this rank's microbatch losses
	int loss_rank;         // 1: its loss_sum counts (the loss stage, tp rank 0)
	atomic_int steps_done; // steps completed, loss_sum and step_t1 set (a progress line's)
	int64_t *step_t0, *step_t1; // [steps] start (after the barrier) and end, ns since
	                            // the world's start
	RtEvent *ev;
	int64_t nev, ev_cap;
	struct RtInterp *in;   // interpreter state (interp.c)
	const struct RtModel *model; // what the rank computes: its tp shard of every stage
	                             // (the reference: the whole model)
};
#endif

#endif
