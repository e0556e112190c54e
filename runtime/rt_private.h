/* Inside the runtime: the model a plan describes, one stage's compute, the op
 * interpreter, the reference, the watchdog.  Shared by the runtime's own files and the
 * unit tests; parts (launchers, devices, communicators) need only rt_backend.h.
 *
 * Three layers, top to bottom:
 *  - the world (run.c): picks the backend's parts, opens them, builds the model from
 *    the plan, runs every rank this process owns under a watchdog, gathers the
 *    figures, and for --check replays the model sequentially on the cpu device
 *    (reference.c) and compares (check.c);
 *  - the op interpreter (interp.c): one per rank, written once.  It walks the rank's
 *    op list in order, keeps the saved activations, hand-offs and in-flight tensors of
 *    its stages, accounts activation memory per op, and calls the rank's device for
 *    every byte it touches and the communicator for every transfer;
 *  - the parts (rt_backend.h).  The interpreter never knows which ones it drives. */
#ifndef RT_PRIVATE_H
#define RT_PRIVATE_H

#include "rt_backend.h"
#include "data.h"

typedef struct RtInterp RtInterp;

/* The model the plan describes, read-only, shared by every rank. */
typedef struct {
	LayerTensors t; // the kind's tensors (plan_layer_tensors)
	int64_t off;      // element offset of its first parameter in the stage's buffer
	int slot;         // its first slot in a microbatch's saved slots: x, dy, saved...,
	                  // held...
	int64_t cut[DIR_COUNT]; // bytes of the tp all-reduce after it in F (DIR_ACT) and B
	                        // (DIR_GRAD) at the model's tp; 0: none (always at tp 1)
} RtLayerAt;

typedef struct {
	RtLayerAt *at;           // per layer
	int64_t nparams;         // f32 parameters (layer by layer, each layer's in order)
	int nslots;              // saved-tensor slots per microbatch (RtLayerAt.slot)
	int nin, nout;
	int *in_edges, *out_edges; // ascending edge indices
	int64_t save[3];         // fb, fw, bw bytes per microbatch the runtime holds
	int loss;                // last layer is the loss
	int64_t out_bytes;       // rows x out x 4
} RtStageModel;

typedef struct RtModel {
	const Plan *p;
	int tp;            // the tp group size whose one rank's share this model is (1: whole)
	int64_t rows;      // rows of a replicated layer's tensors and of those between stages:
	                   // the microbatch's, or under sequence parallelism the rank's 1/tp
	RtStageModel *st;
	int loss_stage;
	int embed_stage;   // the embedding's stage (-1: none), whose table a tied head borrows
	int64_t embed_off; // the table's offset in that stage's parameters
	int tied_head;     // the stage of a head tied to it in another stage (plan_tie), or -1
	int copy_head;     // the stage of a head tied to it on another rank, with its own copy
	int64_t copy_off;  // of the table at this offset (plan_tie_across), or -1
} RtModel;

/* Token ids travel in f32 (rt_backend.h), exact up to 2^24. */
#define RT_MAX_VOCAB (1 << 24)
/* Residual blocks nested inside one another in a stage, at most (plan/layer.h). */
#define RT_MAX_NEST PLAN_NEST_MAX

/* Builds and checks the model: layer widths chain, stage and edge widths agree,
 * params and bytes match the layer table, one loss at the very end.  NULL with a
 * message on error. */
RtModel *rt_model_new(const Plan *p, int tp, char *err, size_t errn);
/* Stage s's parameters on tp rank t of model m (out: m's layout) from the whole model's
 * (whole: the tp = 1 layout), each parameter cut as its LayerSplit says. */
void rt_model_shard(const RtModel *m, int s, int t, const float *whole, float *out);
/* NULL when device d has every kernel plan p's layers need, else why not ("the cuda
 * device has no kernel for layer kind gelu"), written into err.  rt_world_open()
 * refuses the plan with the message. */
const char *rt_device_check(const RtDevice *d, const Plan *p, char *err, size_t n);
void rt_model_free(RtModel *m);
/* The first embedding layer of p: its stage into *stage and its index, or -1. */
int rt_model_embed_layer(const Plan *p, int *stage);


/* Deterministic data (docs/semantics.md "Model"). */
uint64_t rt_splitmix64(uint64_t x);
/* A microbatch's key for its input or its target (the same every step), and the
 * values of a key, out[i] = u(mix(key, i)), which a device's `gen` makes on the device. */
enum { RT_GEN_INPUT = 1, RT_GEN_TARGET = 2 };
uint64_t rt_gen_key(uint64_t seed, int what, int replica, int mb);
void rt_gen_values(uint64_t key, float *out, int64_t n);
/* Token ids of a microbatch (sh.rows of them): the inputs (shift 0) or their next tokens,
 * the targets (shift 1). */
void rt_gen_tokens(uint64_t seed, int replica, int mb, const LayerShape *sh, int shift,
                   float *out);
/* The same from a token file (--data; eval: the --eval-data set, which has no step):
 * sequence b is the S + 1 tokens at an offset keyed by seed, step, replica, mb and b. */
void rt_data_tokens(const RtData *d, uint64_t seed, int eval, int step, int replica, int mb,
                    const LayerShape *sh, int shift, float *out);
void rt_gen_weights(uint64_t seed, const Plan *p, int stage, float *out); // whole stage

/* The key of the dropout masks of the layer at position g of the whole model
 * (rt_layer_position) on microbatch mb of a replica in a step: a fresh draw each step,
 * and the same key in the pipelined run, under full or selective recomputation, in the
 * --check reference and under any stage split of the same layers. */
uint64_t rt_drop_key(uint64_t seed, int step, int replica, int mb, int g);
/* The position of stage s's layer l in the whole model: the stages' layers in stage
 * order (what checkpoints name tensors by, and dropout keys its masks by). */
int rt_layer_position(const Plan *p, int s, int l);

/* Tensors through the rank's device, accounted per class: f32, or (rt_tensor_new_of)
 * a layer's tensor as the layer table states it, f32 or a mask. */
RtTensor *rt_tensor_new(RtRank *r, int64_t rows, int64_t cols, int cls);
RtTensor *rt_tensor_new_of(RtRank *r, const LayerTensor *sh, int cls);
/* A tensor at the plan's precision: the parameters the kernels read, an activation or
 * its gradient (a layer's output, a stage's input or output, a message), stored in
 * bf16 under precision bf16 (docs/semantics.md "Precision"), else f32. */
RtTensor *rt_tensor_new_prec(RtRank *r, int64_t rows, int64_t cols, int cls);
/* Rounds t to bf16 where it is stored so (RtTensor.half): after whatever wrote it. */
int rt_round(RtRank *r, RtTensor *t);
/* x rounded to bf16 (to nearest, ties to even), as f32 (cpu.c). */
float rt_bf16(float x);
void rt_tensor_free(RtRank *r, RtTensor *t);
void rt_tensor_reclass(RtRank *r, RtTensor *t, int cls);
/* Samples the memory model's total (every class but scratch) into r->peak_total at
 * op index op: after each op, inside a group before its sends release their tensors,
 * inside a recomputing B once its forward is rebuilt (docs/semantics.md "Memory"). */
void rt_mem_sample(RtRank *r, int64_t op);
RtTensor rt_tensor_view(const RtTensor *parent, int64_t off, int64_t rows, int64_t cols);
/* The dp size rank r's optimizer shards over: the plan's dp under a distributed
 * optimizer, else 1, and 1 for the --check reference, which steps whole (optim.c). */
int rt_optim_dp(const RtRank *r);

/* One stage's compute, shared by the interpreter and the reference.  `saved` holds a
 * microbatch's RtStageModel.nslots tensor pointers (each layer's from RtLayerAt.slot:
 * its input, its output gradient for W, its saved and held tensors). */
typedef struct RtStageBufs {
	RtTensor *params, *grads;  // flat; params at the plan's precision (rt_tensor_new_prec)
	RtTensor *master;          // precision bf16: the f32 master weights of the rank's
	                           // shard (rt_shard), which the optimizer updates; else NULL
	RtTensor *m, *v;           // optimizer state, params' shape (adamw; else NULL), or
	                           // the rank's shard's (rt_shard) under a distributed optimizer
	int64_t t;                 // optimizer steps taken
	RtTensor *loss;            // 1 x microbatches, for the loss stage
	float *host;               // scratch for synthetic data (rows x widest)
	struct RtStageBufs *embed; // the embedding stage's buffers on this rank (a tied head
	                           // borrows its table), set by whoever opens the stages
	int share_tie;             // the reference: a head's copy of the table (`copy`)
	                           // computes with the embedding's, gradients its own
	RtTensor *stale;           // a stale-weights wrong run (fault.c): the updated weights
	                           // while params holds the previous ones; else NULL
} RtStageBufs;

/* F: x (owned, consumed) -> *y (NULL for the loss stage).  target_key: step, replica. */
int rt_stage_forward(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                     RtTensor *x, RtTensor **saved, RtTensor **y);
/* B: dy (owned, consumed; NULL for the loss stage) -> *dx (NULL when the stage has no
 * in-edges). */
int rt_stage_backward(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                      RtTensor *dy, RtTensor **saved, RtTensor **dx);
int rt_stage_weights(RtRank *r, int s, RtStageBufs *b, RtTensor **saved);
/* W of layers [lo, hi) only: a BW part's own layers (docs/semantics.md, "Parts"). */
int rt_stage_weights_of(RtRank *r, int s, RtStageBufs *b, RtTensor **saved, int lo, int hi);
/* A stage's walk through its layers for one microbatch in one direction (F: first to
 * last, B: last to first; stage.c).  At tp > 1 it stops after each layer that ends in a
 * tp all-reduce (RtLayerAt.cut): the plan's TPREDUCE (rt_stage_tp_reduce) sums `red`
 * over the tp group and the next part resumes the walk. */
typedef struct {
	int n;
	int end[RT_MAX_NEST];     // residual bodies open in the walk: the layer each ends at,
	RtTensor *t[RT_MAX_NEST]; // and what it adds then (F: its input; B: a gradient copy)
} RtBodies;

typedef struct {
	int l;         // the next layer
	int back;      // 1: a backward walk (its bodies hold copies)
	RtTensor *cur; // between layers: F's activation, B's gradient (NULL: none wanted)
	RtTensor *red; // what the pending TPREDUCE sums: cur, or a vocabulary-split loss's
	               // statistics (3 x rows, rt_backend.h tp_fwd); NULL: none
	RtTensor *piece; // sequence parallelism: the rank's rows of red's sum when they are
	                 // the walk's result, made by its last part (rt_stage_walk_out)
	RtBodies bd;
} RtWalk;

/* A walk of stage s in direction dir from t (owned: F's input, B's output gradient). */
void rt_walk_begin(RtRank *r, int s, int dir, RtTensor *t, RtWalk *wk);
void rt_walk_free(RtRank *r, RtWalk *wk);
/* F's layers from wk->l up to end (exclusive), or to the first cut; B's from wk->l down
 * to end (inclusive), or to the first cut. */
int rt_stage_fwd_run(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                     RtWalk *wk, int end, RtTensor **saved);
int rt_stage_bwd_run(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                     RtWalk *wk, int end, RtTensor **saved);
/* The TPREDUCE after the walk's cut in direction dir (msg: the op, for matching), then
 * what waits for it: F's residual adds, or a vocabulary-split loss's two reductions and
 * its loss.  Under sequence parallelism a reduce-scatter instead of the all-reduce
 * (but the loss's): cur becomes the rank's rows of the sum. */
int rt_stage_tp_reduce(RtRank *r, int s, int mb, RtStageBufs *b, RtWalk *wk, RtTensor **saved,
                       int dir, const RtMsg *m);
/* Sequence parallelism: the parameters of stage s's replicated layers, whose weight
 * gradients each rank holds over its rows only (0 without it; the plan's SPREDUCE moves
 * them, plan_sp_bytes). */
int64_t rt_stage_seq_params(RtRank *r, int s);
/* Its SPREDUCE (m: the op, for matching): those gradients summed over the tp group, layer
 * by layer, after the dp reduction and before the step (Megatron's all-reduce of the
 * sequence-parallel parameters' gradients). */
int rt_stage_seq_grads(RtRank *r, int s, RtStageBufs *b, const RtMsg *m);
/* The last part of a walk has made its result, in flight from now (RT_MEM_COMM) as the
 * memory model counts it, though a TPREDUCE may still sum it; under sequence
 * parallelism that is the piece the reduce-scatter fills. */
int rt_stage_walk_out(RtRank *r, RtWalk *wk);
/* The walk's result, owned (F: the stage output, NULL after a loss; B: the input
 * gradient, NULL when not wanted), of class RT_MEM_COMM. */
void rt_stage_walk_end(RtRank *r, RtWalk *wk, RtTensor **out);
/* Recomputation (PlanStage.recompute): after F, rt_stage_drop frees every saved tensor
 * of the microbatch's span (plan_recompute_span: the stage's residual bodies, or all
 * its layers) but the span's input; before B, rt_stage_recompute re-runs F over the
 * span from that input to rebuild them (the same math, so the same values). */
void rt_stage_drop(RtRank *r, int s, RtTensor **saved);
int rt_stage_recompute(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                       RtTensor **saved);
/* Selective recomputation (PLAN_RECOMPUTE_SELECTIVE): after F, rt_stage_drop_probs
 * frees the attention probabilities of the stage's layers [lo, hi) (the layer table's
 * `rebuilt` tensors, with dropout=P their mask and dropped copy too); before B,
 * rt_stage_rebuild_probs holds those of layers [lo, hi) again and computes them from
 * the saved q, k (the device's rebuild kernel: the same math, so the same values; a
 * layer with dropout=P at its B, where its masks' key is known), and B frees each once
 * its layer's input gradient is done.  A whole F or B passes the whole stage; at tp > 1
 * each part passes its own layers (a rank's heads are its own: no communication). */
void rt_stage_drop_probs(RtRank *r, int s, RtTensor **saved, int lo, int hi);
int rt_stage_rebuild_probs(RtRank *r, int s, RtStageBufs *b, RtTensor **saved, int lo,
                           int hi);
/* The synthetic input of a microbatch as a new tensor of class cls. */
RtTensor *rt_stage_input(RtRank *r, int step, int replica, int mb, RtStageBufs *b, int cls);
/* The optimizer step (optim.c): params from the gradient g (the dp average; the
 * interpreter passes grads, the reference its replica sum) with the world's optimizer,
 * the stage's state and its next step number. */
int rt_stage_optim(RtRank *r, RtStageBufs *b, const RtTensor *g);
/* Allocates and initialises a stage's params, zeroed grads and zeroed optimizer state
 * (RT_MEM_OPTIM, for the world's optimizer). */
int rt_stage_bufs_open(RtRank *r, int s, RtStageBufs *b);
void rt_stage_bufs_close(RtRank *r, RtStageBufs *b);

/* Checkpoints (ckpt.c; rt.h has opening and closing).  rt_ckpt_save: rank r's part of
 * the checkpoint after step run_step of this run (0-based): the files of its n stages
 * (their buffers bufs) if it is of dp replica 0, a barrier over every rank, then on
 * world rank 0 the manifest and the renames.  rt_ckpt_check: 0 when c holds exactly the
 * tensors (names, shapes) of plan p run with optimizer kind optim, else -1 naming the
 * first that differs.  rt_ckpt_fill: state k (0 parameters, 1 and 2 the optimizer's
 * buffers) of stage s of p, in the whole (tp = 1) layout, from c (checked). */
int rt_ckpt_save(RtRank *r, int run_step, int n, const int *stages,
                 RtStageBufs *const *bufs);
int rt_ckpt_check(const RtCkpt *c, const Plan *p, int optim, char *err, size_t n);
int rt_ckpt_fill(const RtCkpt *c, const Plan *p, int s, int k, float *whole);

/* The interpreter: runs the rank's list opt.steps times. */
int rt_rank_main(RtRank *r);
/* Copies a local stage's weights to host (for --check). */
int rt_rank_weights(RtRank *r, int stage, float *out);
void rt_rank_free(RtRank *r);

/* The sequential reference (on the cpu device): every step's loss into loss[steps] and
 * each stage's final weights (the whole model's, malloc'd) into weights[stage].  With
 * shadow, the shadow instead: every weight moved one ulp before each step (check.c). */
int rt_reference(RtWorld *w, int shadow, double *loss, float **weights);
/* --eval-data (on the root): the reference's training run again, with a forward-only
 * pass over the held-out set after every opt.eval_every-th step and the last; fills
 * res->eval and res->eval_seqs. */
int rt_reference_eval(RtWorld *w, RtResult *res);

/* --check (check.c): rank r keeps its stages' final weights on the host, after its last
 * step; then every process takes part in gathering them, and the root runs the
 * reference and fills res's check figures. */
int rt_check_keep(RtRank *r);
int rt_check(RtWorld *w, RtResult *res);
/* The RtBound o's run is held to: a tolerance given, else bf16's, else the derived one. */
int rt_check_bound(const RtOptions *o);

/* Test-only faults (fault.c): PIPERUN_FAULT=stall:rank=R:op=N[:step=S] makes world
 * rank R's thread stop forever, ignoring aborts, when it reaches op N of its list in
 * step S (default 1), as a kernel that never returns would; hold:... the same until the
 * world is aborted, then it goes on (an op that returns late); stall-open:rank=R stops the
 * process of launcher rank R (0 without a launcher) before it opens the world, as a
 * process stuck while starting would; stall-save:rank=R[:step=S] stops rank R for good
 * once it wrote its files of the checkpoint after step S, before the rename (a save
 * interrupted by a crash).  rt_fault_parse fills w's fault fields from the
 * variable's text (NULL: none); -1 with w->err on a bad one. */
int rt_fault_parse(RtWorld *w, const char *spec);
/* Called by rt_world_open before the collective opening (stall-open). */
void rt_fault_open(const RtWorld *w);
/* Called by the interpreter before the group [op, end) of a step. */
void rt_fault_at(RtRank *r, int step, int64_t op, int64_t end);
/* Called by rt_ckpt_save once the rank's files of the checkpoint after step run_step
 * (0-based) are written, before the barrier (stall-save). */
void rt_fault_save(const RtRank *r, int run_step);
/* Test-only wrong runs (RtOptions.wrong, fault.c).  rt_wrong_check: 0 when o->wrong is
 * none or names a rank, step and microbatch of p's run, else -1 and why in err.  The
 * interpreter calls rt_wrong_optim before (after = 0) and after (after = 1) a stage's
 * optimizer step, and brackets a W with rt_wrong_w_begin, which may copy the gradients
 * into *keep, and rt_wrong_w_end, which then puts them back (the W's gradient is lost). */
int rt_wrong_check(const Plan *p, const RtOptions *o, char *err, size_t n);
int rt_wrong_optim(RtRank *r, RtStageBufs *b, int step, int after);
int rt_wrong_w_begin(RtRank *r, RtStageBufs *b, int step, int mb, RtTensor **keep);
int rt_wrong_w_end(RtRank *r, RtStageBufs *b, RtTensor *keep);
/* How long a launcher waits after an abort for its rank threads to return before it
 * leaves the stuck ones behind (their rank's op never returns: w->nstuck). */
#define RT_STUCK_GRACE_S 2

/* Watchdog thread over the local ranks' progress. */
typedef struct RtWatchdog RtWatchdog;
RtWatchdog *rt_watchdog_start(RtWorld *w);
void rt_watchdog_stop(RtWatchdog *wd);
/* Bounds opening the world (rt_world_open): past rt_start_limit_s(), the process
 * prints why and exits 1.  Stopped with rt_watchdog_stop once the world is open. */
RtWatchdog *rt_start_guard(RtWorld *w);
/* RT_START_FACTOR x the watchdog timeout, at least RT_START_MIN_S. */
double rt_start_limit_s(const RtOptions *o);
#define RT_START_FACTOR 5.0
#define RT_START_MIN_S 10.0

/* Called by the cpu device's open: notes (rt_world_unable) a run whose memory cannot
 * fit: the memory model's peaks of the ranks on this host (ranks_here: the device
 * holds them) and the --check reference, against plan_sysmem.  Skipped with
 * RtOptions.no_mem_check.  RT_EFAIL only when out of memory or a collective failed. */
int rt_host_mem_check(RtWorld *w, int ranks_here);

#endif
