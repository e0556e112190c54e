/* The runtime's public face: what piperun's main (and a program embedding the runtime)
 * needs to run a plan for real and read the figures.  Everything else is behind it:
 *  - rt_backend.h, the contract a launcher, a device and a communicator implement;
 *  - rt_private.h, the interpreter, the model and the world's internals.
 *
 * A backend name (`--backend threads|mpi|cuda`) names a combination of three parts:
 * a launcher that starts the ranks (threads in this process, or one process per rank
 * under MPI), a device that computes (cpu or cuda) and a communicator that moves
 * tensors (shared memory, MPI or NCCL).  docs/runtime.md describes the design.
 *
 * No mutable globals: a world is a value, so many ranks run inside one process and
 * everything runs inside the unit tests.  Library code returns errors; only the main
 * exits. */
#ifndef RT_H
#define RT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" { // the CUDA parts are C++; plan.h has no guard of its own
#endif

#include "../plan/plan.h"

#define RT_VERSION "0.1"

/* Return codes of every rt_ function and every part's entry. */
enum {
	RT_OK = 0,       // done
	RT_EFAIL = -1,   // failed; the message is in rank->err (or world->err)
	RT_EABORT = -2,  // woken because another rank failed or the watchdog fired
};

/* --dtype: what GEMM operands are.  Storage, accumulation and everything else stay f32;
 * bf16 rounds both GEMM operands to bf16 (cuda device, docs/gpu.md), which has a --check
 * bound of its own, RT_CHECK_TOL_BF16. */
typedef enum {
	RT_DTYPE_F32,  // f32 operands (no TF32)
	RT_DTYPE_BF16, // bf16 operands, f32 accumulation
	RT_DTYPE_COUNT
} RtDtype;

/* A deliberately wrong run, for the tests of --check only: tests/test_check.c sets
 * RtOptions.wrong (piperun has no option for it, and a zero RtWrong is a correct run).
 * World rank `rank` computes in step `step` (0-based) what a broken plan or runtime
 * would; --check must fail it.  runtime/fault.c. */
typedef enum {
	RT_WRONG_NONE,      // a correct run
	RT_WRONG_DROP_GRAD, // the rank's gradients are dropped (zeroed) before its optimizer
	                    // step: at tp > 1, one shard's share of the update is lost
	RT_WRONG_SKIP_MB,   // microbatch `mb`'s weight gradient is left out of the rank's sum
	RT_WRONG_STALE,     // the rank computes step `step` (>= 1) with the weights from before
	                    // the previous step's update (which it still applies)
	RT_WRONG_COUNT
} RtWrongKind;

typedef struct {
	int kind; // RtWrongKind
	int rank, step, mb;
} RtWrong;

typedef struct {
	const char *backend;  // NULL: rt_backend_default()
	int steps;
	uint64_t seed;
	/* The optimizer: the plan's `optimizer` line, else sgd at RT_DEFAULT_LR; each field
	 * of `optim` whose bit is in optim_set replaces that (piperun's --optimizer, --lr,
	 * --beta1 ...).  rt_optim_resolve. */
	PlanOptim optim;
	unsigned optim_set;   // RT_OPTIM_SET(RT_HYPER_*) and RT_OPTIM_SET_KIND bits
	int check;            // run the sequential reference (on the cpu device) and compare
	double tolerance;     // --check's bound by hand (--tolerance); 0: RtBound's own
	int no_mem_check;     // skip the check that the run fits in the host's memory
	double timeout_s;     // watchdog: no progress for this long ends the run
	int trace;            // record per-op timestamps (for --trace and --calibrate)
	int blas_threads;     // BLAS threads per rank (cpu device); 0: 1
	const char *plan_path; // for messages: "file:line" of blocked ops
	int dtype;            // RtDtype of the GEMM operands (bf16: cuda device only)
	RtWrong wrong;        // test-only: a deliberately wrong run (above); zero: none
	/* --data: the token file a transformer plan trains on (data.h), mapped by the caller
	 * and shared by every rank; NULL: synthetic tokens (docs/semantics.md "Model"). */
	const struct RtData *data;
	/* --eval-data, --eval-every: the held-out file, and every how many steps (and after
	 * the last) the reference computes its loss (RtResult.eval); NULL: none. */
	const struct RtData *eval_data;
	int eval_every;
	/* --save DIR, --save-every N: a checkpoint after every N-th step (0: none) and the
	 * last, into DIR (rt_ckpt_prepare'd); NULL: none.  --resume: the checkpoint the run
	 * starts from (rt_ckpt_open), whose seed and step it continues; NULL: none. */
	const char *save;
	int save_every;
	const struct RtCkpt *resume;
	/* --init: the Hugging Face file the weights start from (rt_hf_open); NULL: none. */
	const struct RtHf *init;
} RtOptions;

#define RT_DEFAULT_STEPS 5
#define RT_DEFAULT_SEED 1
#define RT_DEFAULT_LR 0.5
#define RT_DEFAULT_TIMEOUT 60.0

/* --check's bound on the relative errors (docs/runtime.md "--check and its bound").  A
 * correct run whose sums are ordered otherwise than the reference's (tp, MPI, a GPU)
 * differs from it by rounding, carried through the training.  The shadow reference
 * (reference.c: every weight moved one ulp before each step) differs from the reference
 * by rounding alone, carried alike, so its distance (the larger of its loss and weight
 * errors) measures what rounding does to this run; the run may be RT_CHECK_NOISE_FACTOR
 * times as far, plus RT_CHECK_FLOOR. */
#define RT_CHECK_NOISE_FACTOR 8.0
#define RT_CHECK_FLOOR 0x1p-20   // 9.5e-7: 16 roundings of f32 (2^-24 each)
#define RT_CHECK_TOL_BF16 3e-2   // --dtype bf16's (docs/gpu.md)
#define RT_CHECK_TOL_MAX 1.0     // --tolerance, at most

typedef enum {
	RT_BOUND_NOISE, // RT_CHECK_NOISE_FACTOR x the shadow's distance + RT_CHECK_FLOOR
	RT_BOUND_GIVEN, // RtOptions.tolerance (--tolerance)
	RT_BOUND_BF16,  // RT_CHECK_TOL_BF16 (--dtype bf16)
	RT_BOUND_COUNT
} RtBound;

extern const char *const rt_bound_names[RT_BOUND_COUNT]; // "noise", "tolerance", "bf16"

/* The optimizer's hyper-parameters (runtime/optim.c): one row each, walked by loops
 * (piperun's checks, the resolution below, the tests). */
typedef enum {
	RT_HYPER_LR,           // learning rate (every optimizer)
	RT_HYPER_BETA1,        // adamw: decay of the first moment
	RT_HYPER_BETA2,        // adamw: decay of the second moment
	RT_HYPER_EPS,          // adamw: added to the second moment's root
	RT_HYPER_WEIGHT_DECAY, // adamw: decoupled weight decay
	RT_HYPER_MOMENTUM,     // momentum: decay of the momentum buffer
	RT_HYPER_COUNT
} RtHyper;

#define RT_OPTIM_SET(h) (1u << (h))                // RtOptions.optim_set: hyper h given
#define RT_OPTIM_SET_KIND (1u << RT_HYPER_COUNT)    // ... the kind given

typedef struct {
	const char *name;    // as the plan and the language spell it: "weight_decay"
	const char *option;  // piperun's option: "weight-decay"
	double lo, hi;       // the valid range ...
	int lo_open, hi_open; // ... its ends excluded
	unsigned kinds;      // the optimizers that have it: bit (1u << OptimKind) each
} RtHyperInfo;

/* Whether optimizer kind k has hyper-parameter h. */
#define RT_HYPER_OF(h, k) ((rt_hypers[h].kinds >> (k)) & 1u)

extern const RtHyperInfo rt_hypers[RT_HYPER_COUNT];
/* The field of o that hyper h is. */
double *rt_hyper_field(PlanOptim *o, int h);
/* 0 when v is in h's range, else -1 and "beta1 must be in [0, 1), not 1" in msg. */
int rt_hyper_check(int h, double v, char *msg, size_t n);
/* The optimizer the ranks run (RtOptions.optim above): out is the plan's, or sgd at
 * RT_DEFAULT_LR, or, when o names another kind, that kind's defaults (sgd: lr
 * RT_DEFAULT_LR; adamw: the language's, plan_optim_default), then o's given fields.
 * Returns 0, or -1 and why in msg: a value out of range, an adamw setting for sgd. */
int rt_optim_resolve(const Plan *p, const RtOptions *o, PlanOptim *out, char *msg, size_t n);

/* One recorded op, for traces and calibration. */
typedef struct {
	int64_t t0, t1;   // ns since the world's start
	int64_t op;       // index in the rank's list (first op of a group)
	int64_t op_end;   // one past the group's last op (op + 1 for compute)
	int32_t step;
	int32_t split;    // BW: ns spent in its B part; 0 otherwise
	int64_t mem[3];   // memory at the op's highest point (rt_mem_sample): model state,
	                  // saved activations, in flight
} RtEvent;

typedef struct {
	int world, steps;
	double *loss;          // [steps] mean over microbatches and dp replicas
	int64_t *step_ns;      // [steps] first rank's start (after the step barrier) to the
	                       // last rank's end
	int64_t *busy_ns;      // [world] compute time summed over all steps
	int64_t *peak_act;     // [world] peak saved activation bytes (per op, list order)
	int64_t *held_end;     // [world] activation bytes still held after the last op
	int master;            // the plan keeps f32 master weights (precision bf16)
	int64_t *model_bytes;  // [world * 4] parameter, gradient, optimizer-state and (bf16)
	                       // master-weight bytes
	                       // of the rank's stages (RT_MEM_PARAM, _GRAD, _OPTIM)
	int64_t *mem_peak;     // [world * 4] the memory model's peak total, its saved and
	                       // in-flight bytes then, and the op (docs/semantics.md "Memory")
	PlanOptim optim;       // the optimizer run (rt_optim_resolve)
	/* Events per rank, when options.trace: ev[r][0..nev[r]). */
	int64_t *nev;
	RtEvent **ev;
	/* --check */
	int checked;
	double loss_abs, loss_rel;     // largest step-loss errors
	double weight_abs, weight_rel; // largest final-weight errors (rel: see docs)
	int bound;                     // RtBound: what set the tolerance
	double tolerance;              // both relative errors' bound
	int shadow;                    // the shadow ran (RT_BOUND_NOISE and an error above
	                               // RT_CHECK_FLOOR); then its distance from the
	double noise;                  // reference: the larger of its two errors
	int check_ok;
	int64_t nweights;
	/* --eval-data: the held-out loss after step s, NAN where none was computed; NULL
	 * without (and off the root).  eval_seqs: the sequences it is the mean over. */
	double *eval;
	int eval_seqs;
	/* Checkpoints: the steps done before this run (--resume's), the checkpoints written
	 * and world rank 0's time in them (its files, the barrier, the manifest, renames). */
	int64_t first_step;
	int saves;
	int64_t save_ns;
} RtResult;

typedef struct RtWorld RtWorld;
typedef struct RtRank RtRank;

/* ---- backends (combinations of launcher, device and communicator) ---- */

/* Names of the backends built into this binary, space separated, in registry order,
 * written into buf (returned). */
const char *rt_backend_names(char *buf, size_t n);
/* The backend to use when none is named: "mpi" when started by a launcher with more
 * than one process (rt_launch_env_nprocs), else "threads". */
const char *rt_backend_default(void);
/* 0 when `name` is a backend this binary can run; else -1 and why in msg ("unknown
 * backend 'x' (valid backends are ...)", "the cuda backend is not built ..."). */
int rt_backend_check(const char *name, char *msg, size_t n);

/* ---- running ---- */

/* The world rank this process alone runs when a launcher (mpirun, srun) started one
 * process per rank of a world of `world` ranks; -1 otherwise (one process runs them all,
 * or it is not known).  piperun gives only that rank lists of its own (plan_expand_for). */
int rt_launch_one_rank(int world);
/* Before a process that a launcher started among others exits non-zero outside a run
 * (a refused plan, a world that would not open): flushes stdout and stderr and waits a
 * second.  The launcher ends the job at the first such exit, and without the wait it
 * can drop what the processes printed (measured: Open MPI 4.1 lost every process's
 * message in one run of six).  Does nothing without a launcher. */
void rt_launch_linger(void);
/* Opens a world for plan p with backend o->backend.  Returns NULL with a message in
 * err on failure. */
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
/* The backend's name ("threads"), and whether this process holds world rank 0 (and
 * so the gathered figures). */
const char *rt_world_backend(const RtWorld *w);
int rt_world_root(const RtWorld *w);
/* The options the world runs with. */
const RtOptions *rt_world_options(const RtWorld *w);
/* Ops completed so far by this process's ranks (any thread may ask, any time), and the
 * ops of one step on those ranks: a progress count. */
int64_t rt_world_progress(const RtWorld *w);
int64_t rt_world_local_ops(const RtWorld *w);
/* A step's figures while the run goes on (a progress line; any thread): 0 once every rank
 * of this process completed step `step` of this run (0-based), with its time (the
 * ranks' first start to last end) and its loss, the mean per microbatch over the dp
 * replicas whose loss stage runs in this process (all on threads; NAN: none here);
 * -1 until then. */
int rt_world_step_live(const RtWorld *w, int step, double *loss, int64_t *ns);
void rt_result_free(RtResult *res);

/* ---- checkpoints (docs/runtime.md "Checkpoints") ---- */

typedef struct RtCkpt RtCkpt;
/* Opens the checkpoint at path: a --save directory (its `latest`) or one of its step-N
 * directories.  Reads the manifest, maps every file, checks sizes, checksums and
 * headers.  NULL with a located message ("DIR/step-4/rank1.safetensors: error: tensor
 * 'layer3.linear.0' ...: checksum mismatch") in err. */
RtCkpt *rt_ckpt_open(const char *path, char *err, size_t n);
void rt_ckpt_close(RtCkpt *c);
int64_t rt_ckpt_step(const RtCkpt *c);  // steps done
uint64_t rt_ckpt_seed(const RtCkpt *c); // the run's seed
const char *rt_ckpt_dir(const RtCkpt *c); // the step directory read
/* --save DIR before a run: creates DIR and removes what an interrupted save left in it
 * (.tmp-*).  0, or -1 with why in err. */
int rt_ckpt_prepare(const char *dir, char *err, size_t n);

/* Trace in pipesim's Chrome trace format (docs/runtime.md). */
int rt_trace_write(const Plan *p, const RtResult *res, FILE *f);
/* --calibrate: prints `cost STAGE f=.. b=.. w=..;` lines (means over steps but the
 * first) for the .pipe file. */
int rt_calibrate_write(const Plan *p, const RtResult *res, FILE *f);

#ifdef __cplusplus
}
#endif

#endif
