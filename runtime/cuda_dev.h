/* What the CUDA files share (C++, internal to them): a rank's streams, markers and
 * storage blocks, which the cuda device (device_cuda.cu, cuda_kernels.cu, cuda_tf.cu,
 * cuda_stream.cu) owns and the NCCL communicator (comm_nccl.cu) orders its groups
 * against.  The runtime is reached through rt_backend.h's plain C interface only.
 *
 * Streams and events.  Every rank has a compute stream `cs` and a comm stream `ms`.
 * Work on each is counted (cs: one count per device call, ms: one per group), and
 * markers (events) record positions: one after each group on ms, and on cs lazily, just
 * before the next call after one that wrote a tensor (and on demand).  Each tensor's
 * storage (a Block, in RtTensor.aux) remembers the cs call that last wrote it and the
 * groups that last read or wrote it.  So:
 *  - a group waits (cudaStreamWaitEvent on ms) only for the compute that wrote the
 *    tensors it sends; an all-reduce waits for all compute issued before it (the
 *    stage's W ops write the gradients through views, which carry no Block);
 *  - a compute call waits only for the groups that received (or all-reduced) the
 *    tensors it reads, and for writes also for the groups still sending them.
 * The host issues everything in plan order and never waits, except in download(),
 * sync() and barrier(), as rt_backend.h's contract for asynchronous devices says.
 *
 * Memory.  free() cannot hand storage back at once: either stream may still use it.
 * Freed Blocks go to a list with the positions of their last uses and are reused only
 * once both streams have passed them (an event query, no waiting), so a fresh tensor is
 * idle on both streams and a receive may write it at once.  Host staging for upload()
 * and download() is pinned memory kept the same way. */
#ifndef CUDA_DEV_H
#define CUDA_DEV_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_env.h"

/* Device or pinned host storage and the positions of its last uses. */
typedef struct Block {
	void *ptr;
	size_t size;
	int64_t cs_last, ms_last; // last use on each stream (0: none)
	int64_t cs_write;         // cs call that last wrote it
	int64_t ms_write;         // group that last wrote it (a receive or all-reduce)
	int64_t ms_read;          // group that last read it (a send)
	struct Block *next;
} Block;

/* Markers of one stream: events at increasing positions, oldest first. */
typedef struct {
	cudaEvent_t *ev;
	int64_t *pos;
	int64_t *op;              // ms: first and last plan op of the group (2 per marker)
	int cap, head, n;
	int64_t last;             // position of the newest marker (0: none)
	int64_t done;             // every position <= done has completed
} Ring;

/* The first bad token id a kernel met (mapped pinned host memory, written by the
 * device, read by the host at download and sync: cu_tokens_report). */
typedef struct {
	int bad;          // 1: a kernel met one
	int what;         // 0: an input token, 1: a target token
	long long index;  // its row in that call's tensor
	long long vocab;
	float value;
} CuTokBad;

/* A rank on the cuda device. */
typedef struct {
	int dev;
	cudaStream_t cs, ms;
	cublasHandle_t blas;
	int bf16;
	Ring csr, msr;
	int64_t cs_pos, ms_pos;   // calls issued on cs, groups issued on ms
	int mark_due;             // a tracked tensor was written since the last cs marker
	int64_t cs_waits_ms;      // newest group cs already waits for
	int64_t ms_waits_cs;      // newest cs position ms already waits for
	Block *free_dev;          // freed device blocks (ready or not)
	Block *free_host;         // pinned host staging
	CuTokBad *tok, *tok_dev;  // the bad-token flag: host and device addresses
	/* Set by the communicator on ms, so every wait also watches it: poll reports its
	 * asynchronous errors (RT_EFAIL with the message), abort ends its work. */
	int (*comm_poll)(RtRank *r);
	void (*comm_abort)(RtRank *r);
} CuRank;

static inline CuRank *cur(RtRank *r)
{
	return (CuRank *)*rt_rank_state(r, RT_PART_DEVICE);
}

static inline Block *blk(const RtTensor *t)
{
	return t ? (Block *)t->aux : NULL;
}

static inline int64_t numel(const RtTensor *t)
{
	return t->rows * t->cols;
}

/* A tensor a compute call touches, and whether it writes it. */
typedef struct {
	const RtTensor *t;
	int write;
} Use;

/* ---- cuda_stream.cu: markers, waiting, storage ---- */
void cu_backoff(long spins);
int cu_ring_open(RtRank *r, Ring *g, int cap);
void cu_ring_close(Ring *g);
/* Retires the markers that completed. */
int cu_ring_poll(RtRank *r, Ring *g);
/* The oldest pending marker at or after pos; NULL when pos has completed already. */
cudaEvent_t cu_ring_find(const Ring *g, int64_t pos);
int cu_ring_record(RtRank *r, Ring *g, cudaStream_t s, int64_t pos, int64_t op0, int64_t op1);
/* Makes sure a cs marker covers position pos (records one now if needed). */
int cu_cs_cover(RtRank *r, int64_t pos);
/* Polls until cs has passed cs_need and ms has passed ms_need, watching rt_aborted()
 * and the communicator's asynchronous errors. */
int cu_wait_pos(RtRank *r, int64_t cs_need, int64_t ms_need);
int cu_wait_idle(RtRank *r);
/* A compute-stream call: cu_cs_begin() orders it after the groups it depends on,
 * cu_cs_end() records what it touched. */
int cu_cs_begin(RtRank *r, const Use *u, int n);
void cu_cs_end(RtRank *r, const Use *u, int n);
/* A block of `bytes` bytes (host: pinned), reused when both streams are done with one. */
Block *cu_get_block(RtRank *r, int64_t bytes, int host);
void cu_release(RtRank *r, Block **list, Block *b);
/* Frees every block of the list (the streams must be idle: cudaFree synchronizes). */
void cu_drop_all(Block **list, int host);
/* RT_OK, or RT_EFAIL naming the first bad token id the kernels met (the rank's
 * CuTokBad; call after waiting for the compute stream). */
int cu_tokens_report(RtRank *r);

/* ---- cuda_kernels.cu and cuda_tf.cu: the device's tensor and layer calls ---- */
int cu_upload(RtRank *r, RtTensor *t, const float *host);
int cu_download(RtRank *r, const RtTensor *t, float *host);
int cu_gen(RtRank *r, RtTensor *t, uint64_t key);
int cu_zero(RtRank *r, RtTensor *t);
int cu_copy(RtRank *r, RtTensor *dst, const RtTensor *src);
int cu_add(RtRank *r, RtTensor *dst, const RtTensor *src);
int cu_scale(RtRank *r, RtTensor *t, float alpha);
/* The optimizer's entries, one per OptimKind (RtDevice.optim). */
struct CuOptimTable {
	RtOptimFn f[OPTIM_COUNT];
};
extern const CuOptimTable cu_optim;
/* ---- what the kernel files share (cuda_kernels.cu, cuda_tf.cu) ---- */

#define GELU_C 0.7978845608f // sqrt(2/pi)
#define GELU_A 0.044715f

/* Blocks of 256 threads for n elements (grid-stride loops cover the rest). */
static inline int cu_grid(int64_t n)
{
	int64_t b = (n + 255) / 256;
	return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

/* splitmix64's finalizer (model.c's rt_splitmix64): the synthetic data's and the
 * dropout masks' bits, as the host draws them. */
static __device__ inline uint64_t cu_splitmix64(uint64_t x)
{
	uint64_t z = x + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* tkernels.c's tk_drop_keep: element i of the mask keyed key, threshold thr (TkDrop). */
static __device__ inline int cu_drop_keep(uint64_t key, uint64_t i, uint64_t thr)
{
	return thr == 0 || (cu_splitmix64(key ^ i) >> 32) >= thr;
}

#define FOR_EACH(i, n)                                                                       \
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
	     i += (int64_t)gridDim.x * blockDim.x)

#define F32(t) ((float *)(t)->data)
/* Launches kernel over n elements on the rank's compute stream (returns on failure). */
#define LAUNCH(r, kernel, n, ...)                                                            \
	do {                                                                                     \
		kernel<<<cu_grid(n), 256, 0, cur(r)->cs>>>(__VA_ARGS__);                             \
		CUDACHECK((r), cudaGetLastError());                                                  \
	} while (0)

/* A row-major GEMM operand: an array of n floats, where the (first) matrix starts in
 * it, its leading dimension and, in a batch, the distance between consecutive
 * matrices. */
typedef struct {
	const float *base;
	int64_t n, off, ld, stride;
} Opd;

/* A whole rows x cols matrix. */
static inline Opd cu_mat(const float *p, int64_t rows, int64_t cols)
{
	return Opd{p, rows * cols, 0, cols, 0};
}

static inline Opd cu_mat(const RtTensor *t)
{
	return cu_mat((const float *)t->data, t->rows, t->cols);
}

/* C = alpha op(A) op(B) + beta C, all row-major, for `batch` matrices (C's ldc and
 * stride sc; op(A) is M x K, op(B) K x N); ta, tb: 1 transposes.  cuBLAS on the
 * compute stream, bf16 operands under --dtype bf16. */
int cu_gemm(RtRank *r, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, Opd A,
            Opd B, float beta, float *C, int64_t ldc, int64_t sc, int64_t batch);

/* Device scratch of one layer call, freed past it by cu_layer_run. */
typedef struct {
	Block *b[4];
	int n;
} CuScratch;
void *cu_scratch(RtRank *r, CuScratch *s, int64_t bytes);

enum { CU_F, CU_B, CU_W }; // which kernel of a row (fwd, bwd_in, bwd_w): what it writes

/* A row's kernel: checks the call (rt_layer_call_check), orders it on the compute
 * stream after what it reads and records what it writes, whatever body returns. */
typedef int (*CuBody)(RtRank *r, const RtLayerCall *c, CuScratch *s);
int cu_layer_run(RtRank *r, const RtLayerCall *c, int ph, CuBody body);
/* A row's entry point NAME, running NAME_body for phase ph through cu_layer_run. */
#define CU_ROW_FN(name, ph)                                                                    \
	static int name(RtRank *r, const RtLayerCall *c)                                           \
	{                                                                                          \
		return cu_layer_run(r, c, ph, name##_body);                                            \
	}

/* Projections (inside a body): y = x w (+ b); dx = dy w^T (+ beta dx) over m rows;
 * dw += x^T dy and db += column sums of dy (rows in order; db may be NULL). */
int cu_proj_fwd(RtRank *r, const RtTensor *x, const RtTensor *w, const RtTensor *b, RtTensor *y);
int cu_proj_bwd_in(RtRank *r, const float *dy, const RtTensor *w, float *dx, int64_t m,
                   float beta);
int cu_proj_bwd_w(RtRank *r, const float *x, const float *dy, RtTensor *dw, RtTensor *db,
                  int64_t m);

/* Each file's rows by kind (cuda_kernels.cu: the matrix kinds, cuda_tf.cu: the
 * transformer kinds), put in the device's table by device_cuda.cu. */
typedef struct {
	LayerKind kind;
	RtLayerKernels k;
} CuLayerRow;
extern const CuLayerRow cu_mat_rows[], cu_tf_rows[];
extern const int cu_mat_nrows, cu_tf_nrows;

#endif
