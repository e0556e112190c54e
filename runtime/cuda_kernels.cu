/* The cuda device's kernels and GEMMs: every tensor and layer call of the device on the
 * rank's compute stream, ordered by cu_cs_begin()/cu_cs_end() (cuda_stream.cu).  Every
 * layer kind with a cpu row has a row here, computing into the same tensors
 * (rt_layer_shapes) with tkernels.c's math (docs/layers.md, docs/gpu.md).
 *
 * Kernels are grid-stride loops, one thread per element, or per row where a row is
 * reduced (norms, softmax, the loss: in the CPU's order, in double where the CPU sums
 * in double), or per column where columns are summed over rows (bias and norm-gain
 * gradients, the embedding's scatter: no float atomics anywhere).  The arithmetic
 * mirrors the CPU's with rounded intrinsics where nvcc would otherwise fuse a
 * multiply-add the CPU does not, so what differs from the cpu device is the GEMMs,
 * the math library's exp/tanh/log and the order of the mse loss's sum; a kernel gives
 * the same bits run after run.  GEMMs are cuBLAS's, column-major on row-major tensors;
 * attention's per-(sequence, head) products are strided-batched.  With --dtype bf16
 * both operands are rounded to bf16 by a small kernel and cuBLAS accumulates in f32;
 * f32 GEMMs use CUBLAS_DEFAULT_MATH, which never uses TF32.
 *
 * Token ids are checked on the device: a bad one is noted in the rank's mapped host
 * flag (CuTokBad, the first one wins) and reported at the rank's next download or
 * sync, which then fails with the CPU's message; until then the kernels read row 0 for
 * it, so nothing reads outside a table. */
#include <cuda_bf16.h>
#include <string.h>

#include "cuda_dev.h"

extern "C" {
#include "tkernels.h" // TK_NORM_EPS, and the attention shape (plan/tfcount.h)
}

#define GELU_C 0.7978845608f
#define GELU_A 0.044715f

static int grid_of(int64_t n)
{
	int64_t b = (n + 255) / 256;
	return (int)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

#define FOR_EACH(i, n)                                                                       \
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
	     i += (int64_t)gridDim.x * blockDim.x)

static __global__ void k_bias_rows(float *y, const float *b, int64_t m, int64_t n)
{
	FOR_EACH(i, m * n)
	y[i] = b[i % n];
}

static __global__ void k_add(float *d, const float *s, int64_t n)
{
	FOR_EACH(i, n)
	d[i] = __fadd_rn(d[i], s[i]);
}

static __global__ void k_scale(float *d, float a, int64_t n)
{
	FOR_EACH(i, n)
	d[i] = __fmul_rn(d[i], a);
}

static __global__ void k_sgd(float *w, const float *g, float lr, int64_t n)
{
	FOR_EACH(i, n)
	w[i] = __fsub_rn(w[i], __fmul_rn(lr, g[i]));
}

static __global__ void k_relu_fwd(const float *x, float *y, int64_t n)
{
	FOR_EACH(i, n)
	y[i] = x[i] > 0 ? x[i] : 0;
}

static __global__ void k_relu_bwd(const float *x, const float *dy, float *dx, int64_t n)
{
	FOR_EACH(i, n)
	dx[i] = x[i] > 0 ? dy[i] : 0;
}

static __global__ void k_gelu_fwd(const float *x, float *y, int64_t n)
{
	FOR_EACH(i, n)
	{
		float v = x[i];
		y[i] = 0.5f * v * (1.0f + tanhf(GELU_C * (v + GELU_A * v * v * v)));
	}
}

static __global__ void k_gelu_bwd(const float *x, const float *dy, float *dx, int64_t n)
{
	FOR_EACH(i, n)
	{
		float v = x[i];
		float th = tanhf(GELU_C * (v + GELU_A * v * v * v));
		float d = 0.5f * (1.0f + th) +
		          0.5f * v * (1.0f - th * th) * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
		dx[i] = dy[i] * d;
	}
}

static __global__ void k_mse_bwd(const float *y, const float *t, float k, float *dy, int64_t n)
{
	FOR_EACH(i, n)
	dy[i] = __fmul_rn(k, __fsub_rn(y[i], t[i]));
}

/* db[j] += sum over rows of dy[i][j], rows in order: the CPU's order exactly. */
static __global__ void k_colsum(const float *dy, float *db, int64_t m, int64_t n)
{
	FOR_EACH(j, n)
	{
		float s = db[j];
		for (int64_t i = 0; i < m; i++)
			s = __fadd_rn(s, dy[i * n + j]);
		db[j] = s;
	}
}

/* loss[0] = mean of (y - t)^2, summed in double by one block in a fixed order, so the
 * result never depends on scheduling. */
enum { MSE_THREADS = 1024 };
static __global__ void k_mse_fwd(const float *y, const float *t, float *loss, int64_t n)
{
	__shared__ double part[MSE_THREADS];
	double s = 0;
	for (int64_t i = threadIdx.x; i < n; i += MSE_THREADS) {
		double d = (double)y[i] - (double)t[i];
		s += d * d;
	}
	part[threadIdx.x] = s;
	__syncthreads();
	for (int w = MSE_THREADS / 2; w > 0; w /= 2) {
		if ((int)threadIdx.x < w)
			part[threadIdx.x] += part[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		*loss = (float)(part[0] / (double)n);
}

static __global__ void k_to_bf16(const float *x, __nv_bfloat16 *y, int64_t n)
{
	FOR_EACH(i, n)
	y[i] = __float2bfloat16_rn(x[i]);
}

#define F32(t) ((float *)(t)->data)
#define LAUNCH(r, kernel, n, ...)                                                            \
	do {                                                                                     \
		kernel<<<grid_of(n), 256, 0, cur(r)->cs>>>(__VA_ARGS__);                             \
		CUDACHECK((r), cudaGetLastError());                                                  \
	} while (0)

static int same_shape(RtRank *r, const RtTensor *a, const RtTensor *b, const char *what)
{
	if (a->rows != b->rows || a->cols != b->cols)
		return rt_error(r, "internal: %s of a %lldx%lld and a %lldx%lld tensor", what,
		                (long long)a->rows, (long long)a->cols, (long long)b->rows,
		                (long long)b->cols);
	return RT_OK;
}

/* ---- tensor operations ---- */

int cu_upload(RtRank *r, RtTensor *t, const float *host)
{
	Block *h = cu_get_block(r, t->bytes, 1);
	if (!h)
		return RT_EFAIL;
	memcpy(h->ptr, host, (size_t)t->bytes);
	Use u[] = {{t, 1}};
	int rc = cu_cs_begin(r, u, 1);
	if (rc == RT_OK) {
		cudaError_t e =
			cudaMemcpyAsync(t->data, h->ptr, (size_t)t->bytes, cudaMemcpyHostToDevice, cur(r)->cs);
		if (e != cudaSuccess)
			rc = rt_cuda_fail(rt_rank_world(r), r, RT_LIB_CUDA, e, "cudaMemcpyAsync(H2D)", __FILE__, __LINE__);
	}
	cu_cs_end(r, u, 1);
	h->cs_last = cur(r)->cs_pos;
	cu_release(r, &cur(r)->free_host, h);
	return rc;
}

int cu_download(RtRank *r, const RtTensor *t, float *host)
{
	Block *h = cu_get_block(r, t->bytes, 1);
	if (!h)
		return RT_EFAIL;
	Use u[] = {{t, 0}};
	int rc = cu_cs_begin(r, u, 1);
	if (rc == RT_OK) {
		cudaError_t e =
			cudaMemcpyAsync(h->ptr, t->data, (size_t)t->bytes, cudaMemcpyDeviceToHost, cur(r)->cs);
		if (e != cudaSuccess)
			rc = rt_cuda_fail(rt_rank_world(r), r, RT_LIB_CUDA, e, "cudaMemcpyAsync(D2H)", __FILE__, __LINE__);
	}
	cu_cs_end(r, u, 1);
	h->cs_last = cur(r)->cs_pos;
	if (rc == RT_OK)
		rc = cu_wait_pos(r, cur(r)->cs_pos, 0);
	if (rc == RT_OK)
		rc = cu_tokens_report(r);
	if (rc == RT_OK)
		memcpy(host, h->ptr, (size_t)t->bytes);
	cu_release(r, &cur(r)->free_host, h);
	return rc;
}

int cu_zero(RtRank *r, RtTensor *t)
{
	Use u[] = {{t, 1}};
	if (cu_cs_begin(r, u, 1))
		return RT_EFAIL;
	cu_cs_end(r, u, 1);
	CUDACHECK(r, cudaMemsetAsync(t->data, 0, (size_t)t->bytes, cur(r)->cs));
	return RT_OK;
}

int cu_copy(RtRank *r, RtTensor *dst, const RtTensor *src)
{
	if (same_shape(r, dst, src, "copy"))
		return RT_EFAIL;
	Use u[] = {{dst, 1}, {src, 0}};
	if (cu_cs_begin(r, u, 2))
		return RT_EFAIL;
	cu_cs_end(r, u, 2);
	CUDACHECK(r, cudaMemcpyAsync(dst->data, src->data, (size_t)src->bytes,
	                             cudaMemcpyDeviceToDevice, cur(r)->cs));
	return RT_OK;
}

int cu_add(RtRank *r, RtTensor *dst, const RtTensor *src)
{
	if (same_shape(r, dst, src, "sum"))
		return RT_EFAIL;
	Use u[] = {{dst, 1}, {src, 0}};
	if (cu_cs_begin(r, u, 2))
		return RT_EFAIL;
	cu_cs_end(r, u, 2);
	LAUNCH(r, k_add, numel(dst), F32(dst), F32(src), numel(dst));
	return RT_OK;
}

int cu_scale(RtRank *r, RtTensor *t, float alpha)
{
	Use u[] = {{t, 1}};
	if (cu_cs_begin(r, u, 1))
		return RT_EFAIL;
	cu_cs_end(r, u, 1);
	LAUNCH(r, k_scale, numel(t), F32(t), alpha, numel(t));
	return RT_OK;
}

int cu_sgd(RtRank *r, RtTensor *w, const RtTensor *g, float lr)
{
	if (same_shape(r, w, g, "optimizer step"))
		return RT_EFAIL;
	Use u[] = {{w, 1}, {g, 0}};
	if (cu_cs_begin(r, u, 2))
		return RT_EFAIL;
	cu_cs_end(r, u, 2);
	LAUNCH(r, k_sgd, numel(w), F32(w), F32(g), lr, numel(w));
	return RT_OK;
}

/* ---- GEMMs: cuBLAS is column-major, and a row-major M x N matrix is its N x M
 * transpose, so the row-major C = op(A) op(B) is cuBLAS's C^T = op(B)^T op(A)^T: the
 * call names B first (tb, ta, N, M, K, B, A). ---- */

/* A row-major operand: an array of n floats, where the (first) matrix starts in it,
 * its leading dimension and, in a batch, the distance between consecutive matrices. */
typedef struct {
	const float *base;
	int64_t n, off, ld, stride;
} Opd;

/* A whole rows x cols matrix. */
static Opd mat(const float *p, int64_t rows, int64_t cols)
{
	return Opd{p, rows * cols, 0, cols, 0};
}

static Opd mat(const RtTensor *t)
{
	return mat((const float *)t->data, t->rows, t->cols);
}

/* The floats a product reads of an operand stored rows x cols, batch matrices deep:
 * from its start to the end of the last matrix's last row (bf16 copies convert those). */
static int64_t span_of(const Opd *o, int64_t rows, int64_t cols, int64_t batch)
{
	int64_t s = (batch - 1) * o->stride + (rows - 1) * o->ld + cols;
	return s < o->n - o->off ? s : o->n - o->off;
}

/* C = alpha op(A) op(B) + beta C, all row-major, for `batch` matrices (C's ldc and
 * stride sc; op(A) is M x K, op(B) K x N); ta, tb: 1 transposes.  One matrix is
 * cublasSgemm (bf16: cublasGemmEx), a batch cublasSgemmStridedBatched (bf16:
 * cublasGemmStridedBatchedEx), so a batch sums in the same order as one matrix. */
static int gemm(RtRank *r, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                Opd A, Opd B, float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
{
	CuRank *c = cur(r);
	const int64_t lim = 0x7fffffff;
	if (M > lim || N > lim || K > lim || A.ld > lim || B.ld > lim || ldc > lim || batch > lim)
		return rt_error(r, "GEMM of %lldx%lldx%lld is too large for cuBLAS's int sizes",
		                (long long)M, (long long)N, (long long)K);
	if (M == 0 || N == 0 || batch == 0)
		return RT_OK;
	cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	if (!c->bf16) {
		const float *pa = A.base + A.off, *pb = B.base + B.off;
		if (batch == 1)
			CUBLASCHECK(r, cublasSgemm(c->blas, ob, oa, (int)N, (int)M, (int)K, &alpha, pb,
			                           (int)B.ld, pa, (int)A.ld, &beta, C, (int)ldc));
		else
			CUBLASCHECK(r, cublasSgemmStridedBatched(
			                   c->blas, ob, oa, (int)N, (int)M, (int)K, &alpha, pb, (int)B.ld,
			                   (long long)B.stride, pa, (int)A.ld, (long long)A.stride, &beta, C,
			                   (int)ldc, (long long)sc, (int)batch));
		return RT_OK;
	}
	/* bf16: both operands rounded into scratch copies of the span the product reads. */
	int64_t na = span_of(&A, ta ? K : M, ta ? M : K, batch);
	int64_t nb = span_of(&B, tb ? N : K, tb ? K : N, batch);
	Block *a16 = cu_get_block(r, na * 2, 0), *b16 = a16 ? cu_get_block(r, nb * 2, 0) : NULL;
	int rc = RT_OK;
	if (!a16 || !b16)
		rc = RT_EFAIL;
	if (rc == RT_OK) {
		k_to_bf16<<<grid_of(na), 256, 0, c->cs>>>(A.base + A.off, (__nv_bfloat16 *)a16->ptr, na);
		k_to_bf16<<<grid_of(nb), 256, 0, c->cs>>>(B.base + B.off, (__nv_bfloat16 *)b16->ptr, nb);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess)
			rc = rt_cuda_fail(rt_rank_world(r), r, RT_LIB_CUDA, e, "k_to_bf16<<<>>>", __FILE__, __LINE__);
	}
	if (rc == RT_OK) {
		cublasStatus_t st =
			batch == 1
				? cublasGemmEx(c->blas, ob, oa, (int)N, (int)M, (int)K, &alpha, b16->ptr,
			                   CUDA_R_16BF, (int)B.ld, a16->ptr, CUDA_R_16BF, (int)A.ld, &beta, C,
			                   CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
				: cublasGemmStridedBatchedEx(
					  c->blas, ob, oa, (int)N, (int)M, (int)K, &alpha, b16->ptr, CUDA_R_16BF,
					  (int)B.ld, (long long)B.stride, a16->ptr, CUDA_R_16BF, (int)A.ld,
					  (long long)A.stride, &beta, C, CUDA_R_32F, (int)ldc, (long long)sc,
					  (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
		if (st != CUBLAS_STATUS_SUCCESS)
			rc = rt_cuda_fail(rt_rank_world(r), r, RT_LIB_CUBLAS, st,
			                  batch == 1 ? "cublasGemmEx(bf16)" : "cublasGemmStridedBatchedEx(bf16)",
			                  __FILE__, __LINE__);
	}
	/* The scratch is used by the call being issued: free it past it. */
	Block *scratch[2] = {a16, b16};
	for (int i = 0; i < 2; i++)
		if (scratch[i]) {
			scratch[i]->cs_last = c->cs_pos + 1;
			cu_release(r, &c->free_dev, scratch[i]);
		}
	return rc;
}

/* ---- layers: one row of kernels per layer kind (rt_backend.h, "Layers"); the
 * tensors are the cpu device's (rt_layer_shapes) ---- */

/* An elementwise layer's F: y = f(x). */
static int ew_fwd(RtRank *r, const RtLayerCall *c, void (*kernel)(const float *, float *, int64_t))
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	Use u[] = {{c->x, 0}, {c->y, 1}};
	if (cu_cs_begin(r, u, 2))
		return RT_EFAIL;
	cu_cs_end(r, u, 2);
	LAUNCH(r, kernel, numel(c->x), F32(c->x), F32(c->y), numel(c->x));
	return RT_OK;
}

/* An elementwise layer's B: dx = dy * f'(x). */
static int ew_bwd_in(RtRank *r, const RtLayerCall *c,
                     void (*kernel)(const float *, const float *, float *, int64_t))
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	Use u[] = {{c->x, 0}, {c->dy, 0}, {c->dx, 1}};
	if (cu_cs_begin(r, u, 3))
		return RT_EFAIL;
	cu_cs_end(r, u, 3);
	LAUNCH(r, kernel, numel(c->x), F32(c->x), F32(c->dy), F32(c->dx), numel(c->x));
	return RT_OK;
}

static int relu_fwd(RtRank *r, const RtLayerCall *c)
{
	return ew_fwd(r, c, k_relu_fwd);
}

static int relu_bwd_in(RtRank *r, const RtLayerCall *c)
{
	return ew_bwd_in(r, c, k_relu_bwd);
}

static int gelu_fwd(RtRank *r, const RtLayerCall *c)
{
	return ew_fwd(r, c, k_gelu_fwd);
}

static int gelu_bwd_in(RtRank *r, const RtLayerCall *c)
{
	return ew_bwd_in(r, c, k_gelu_bwd);
}

static int mse_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	if (c->slot < 0 || c->slot >= c->loss->cols)
		return rt_error(r, "internal: loss slot %d of %lld", c->slot, (long long)c->loss->cols);
	Use u[] = {{c->x, 0}, {c->target, 0}, {c->loss, 1}};
	if (cu_cs_begin(r, u, 3))
		return RT_EFAIL;
	cu_cs_end(r, u, 3);
	k_mse_fwd<<<1, MSE_THREADS, 0, cur(r)->cs>>>(F32(c->x), F32(c->target),
	                                             F32(c->loss) + c->slot, numel(c->x));
	CUDACHECK(r, cudaGetLastError());
	return RT_OK;
}

static int mse_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	Use u[] = {{c->x, 0}, {c->target, 0}, {c->dx, 1}};
	if (cu_cs_begin(r, u, 3))
		return RT_EFAIL;
	cu_cs_end(r, u, 3);
	int64_t n = numel(c->x);
	float k = (float)(2.0 * (double)c->scale / (double)n); // as cpu.c
	LAUNCH(r, k_mse_bwd, n, F32(c->x), F32(c->target), k, F32(c->dx), n);
	return RT_OK;
}

/* ---- the transformer kinds (and linear): tkernels.c's math on the call's tensors.
 * Each row is a body run by layer_run(), which checks the call, orders it on the
 * compute stream after what it reads (cu_cs_begin) and records what it wrote
 * (cu_cs_end), whatever the body returns.  Per-row statistics (norms, softmax rows,
 * the loss) are one thread per row looping in the CPU's order, in double where the CPU
 * sums in double; elementwise math is one thread per element.  ---- */

#define HAS(ly, key) (((ly)->flags & LAYER_FLAG(LAYER_KEY_##key)) != 0)

/* f32 and f64 arithmetic without fused multiply-adds, as the CPU computes. */
static __device__ float fadd_rn(float a, float b)
{
	return __fadd_rn(a, b);
}
static __device__ float fsub_rn(float a, float b)
{
	return __fsub_rn(a, b);
}
static __device__ float fmul_rn(float a, float b)
{
	return __fmul_rn(a, b);
}
static __device__ double dadd_rn(double a, double b)
{
	return __dadd_rn(a, b);
}
static __device__ double dsub_rn(double a, double b)
{
	return __dsub_rn(a, b);
}
static __device__ double dmul_rn(double a, double b)
{
	return __dmul_rn(a, b);
}

/* ---- token ids: f32 whole numbers in [0, V) ---- */

static __device__ int tok_ok(float v, int64_t V)
{
	return v >= 0 && v < (float)V && v == floorf(v);
}

/* The row of token v; a bad id (reported through the rank's CuTokBad) reads row 0, so
 * no kernel reads outside its table. */
static __device__ int64_t tok_id(float v, int64_t V)
{
	return tok_ok(v, V) ? (int64_t)v : 0;
}

/* One block finds the first bad id of x (each thread its stride's first, then the
 * minimum) and, when none was noted yet, notes it in the mapped host flag. */
enum { TOK_THREADS = 256 };
static __global__ void k_tokens(const float *x, int64_t n, int64_t V, int what, CuTokBad *bad)
{
	const long long none = 0x7fffffffffffffffLL;
	__shared__ long long first[TOK_THREADS];
	long long mine = none;
	for (int64_t i = threadIdx.x; i < n; i += TOK_THREADS)
		if (!tok_ok(x[i], V)) {
			mine = (long long)i;
			break;
		}
	first[threadIdx.x] = mine;
	__syncthreads();
	for (int w = TOK_THREADS / 2; w > 0; w /= 2) {
		if ((int)threadIdx.x < w && first[threadIdx.x + w] < first[threadIdx.x])
			first[threadIdx.x] = first[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0 && first[0] != none && !bad->bad) {
		bad->index = first[0];
		bad->value = x[first[0]];
		bad->vocab = (long long)V;
		bad->what = what;
		__threadfence_system();
		bad->bad = 1;
	}
}

static const char *const tok_what[] = {"input token", "target token"};

int cu_tokens_report(RtRank *r)
{
	const volatile CuTokBad *t = cur(r)->tok;
	if (!t || !t->bad)
		return RT_OK;
	return rt_error(r, "%s %lld is %g, not a token id in [0, %lld)", tok_what[t->what & 1],
	                (long long)t->index, (double)t->value, (long long)t->vocab);
}

/* Checks the ids of t on the device (what: 0 input, 1 target); the answer is read at
 * the rank's next download or sync (cu_tokens_report). */
static int check_tokens(RtRank *r, const RtTensor *t, int64_t V, int what)
{
	k_tokens<<<1, TOK_THREADS, 0, cur(r)->cs>>>((const float *)t->data, numel(t), V, what,
	                                             cur(r)->tok_dev);
	CUDACHECK(r, cudaGetLastError());
	return RT_OK;
}

/* ---- kernels ---- */

/* y[t] = wte[tok[t]] (+ wpe[t mod S]), an element a thread. */
static __global__ void k_embed_fwd(const float *tok, const float *wte, const float *wpe,
                                   float *y, int64_t N, int64_t S, int64_t d, int64_t V)
{
	FOR_EACH(e, N * d)
	{
		int64_t t = e / d, j = e % d;
		float v = wte[tok_id(tok[t], V) * d + j];
		y[e] = wpe ? fadd_rn(v, wpe[(t % S) * d + j]) : v;
	}
}

/* dwte[tok[t]] += dy[t] (dwpe[t mod S] too): a thread per column j walks the tokens in
 * order, so every element sums in the CPU's order with no atomics (bit for bit the
 * CPU's, run after run). */
static __global__ void k_embed_bwd_w(const float *tok, const float *dy, float *dwte,
                                     float *dwpe, int64_t N, int64_t S, int64_t d, int64_t V)
{
	FOR_EACH(j, d)
	{
		for (int64_t t = 0; t < N; t++) {
			float g = dy[t * d + j];
			float *e = dwte + tok_id(tok[t], V) * d + j;
			*e = fadd_rn(*e, g);
			if (dwpe) {
				float *p = dwpe + (t % S) * d + j;
				*p = fadd_rn(*p, g);
			}
		}
	}
}

static __global__ void k_layernorm_fwd(const float *x, const float *g, const float *b, float eps,
                                       float *y, float *mean, float *rstd, int64_t N, int64_t d)
{
	FOR_EACH(i, N)
	{
		const float *r = x + i * d;
		double s = 0, v = 0;
		for (int64_t j = 0; j < d; j++)
			s = dadd_rn(s, (double)r[j]);
		double mu = s / (double)d;
		for (int64_t j = 0; j < d; j++) {
			double t = dsub_rn((double)r[j], mu);
			v = dadd_rn(v, dmul_rn(t, t));
		}
		float m = (float)mu, rs = (float)(1.0 / sqrt(dadd_rn(v / (double)d, (double)eps)));
		mean[i] = m;
		rstd[i] = rs;
		for (int64_t j = 0; j < d; j++)
			y[i * d + j] = fadd_rn(fmul_rn(fmul_rn(fsub_rn(r[j], m), rs), g[j]), b[j]);
	}
}

static __global__ void k_layernorm_bwd_in(const float *x, const float *g, const float *mean,
                                          const float *rstd, const float *dy, float *dx,
                                          int64_t N, int64_t d)
{
	FOR_EACH(i, N)
	{
		const float *r = x + i * d, *gy = dy + i * d;
		float mi = mean[i], si = rstd[i];
		double m1 = 0, m2 = 0;
		for (int64_t j = 0; j < d; j++) {
			float xh = fmul_rn(fsub_rn(r[j], mi), si);
			double dxh = dmul_rn((double)gy[j], (double)g[j]);
			m1 = dadd_rn(m1, dxh);
			m2 = dadd_rn(m2, dmul_rn(dxh, (double)xh));
		}
		float a1 = (float)(m1 / (double)d), a2 = (float)(m2 / (double)d);
		for (int64_t j = 0; j < d; j++) {
			float xh = fmul_rn(fsub_rn(r[j], mi), si);
			dx[i * d + j] = fmul_rn(si, fsub_rn(fsub_rn(fmul_rn(gy[j], g[j]), a1), fmul_rn(xh, a2)));
		}
	}
}

/* dg += dy * xhat, db += dy: a thread per column, rows in order (the CPU's order). */
static __global__ void k_layernorm_bwd_w(const float *x, const float *mean, const float *rstd,
                                         const float *dy, float *dg, float *db, int64_t N,
                                         int64_t d)
{
	FOR_EACH(j, d)
	{
		float sg = dg[j], sb = db[j];
		for (int64_t i = 0; i < N; i++) {
			float xh = fmul_rn(fsub_rn(x[i * d + j], mean[i]), rstd[i]);
			sg = fadd_rn(sg, fmul_rn(dy[i * d + j], xh));
			sb = fadd_rn(sb, dy[i * d + j]);
		}
		dg[j] = sg;
		db[j] = sb;
	}
}

static __global__ void k_rmsnorm_fwd(const float *x, const float *g, float eps, float *y,
                                     float *rstd, int64_t N, int64_t d)
{
	FOR_EACH(i, N)
	{
		const float *r = x + i * d;
		double s = 0;
		for (int64_t j = 0; j < d; j++)
			s = dadd_rn(s, dmul_rn((double)r[j], (double)r[j]));
		float rs = (float)(1.0 / sqrt(dadd_rn(s / (double)d, (double)eps)));
		rstd[i] = rs;
		for (int64_t j = 0; j < d; j++)
			y[i * d + j] = fmul_rn(fmul_rn(r[j], rs), g[j]);
	}
}

static __global__ void k_rmsnorm_bwd_in(const float *x, const float *g, const float *rstd,
                                        const float *dy, float *dx, int64_t N, int64_t d)
{
	FOR_EACH(i, N)
	{
		const float *r = x + i * d, *gy = dy + i * d;
		float si = rstd[i];
		double m2 = 0;
		for (int64_t j = 0; j < d; j++)
			m2 = dadd_rn(m2, dmul_rn(dmul_rn((double)gy[j], (double)g[j]), (double)fmul_rn(r[j], si)));
		float a2 = (float)(m2 / (double)d);
		for (int64_t j = 0; j < d; j++)
			dx[i * d + j] = fmul_rn(si, fsub_rn(fmul_rn(gy[j], g[j]), fmul_rn(fmul_rn(r[j], si), a2)));
	}
}

static __global__ void k_rmsnorm_bwd_w(const float *x, const float *rstd, const float *dy,
                                       float *dg, int64_t N, int64_t d)
{
	FOR_EACH(j, d)
	{
		float sg = dg[j];
		for (int64_t i = 0; i < N; i++)
			sg = fadd_rn(sg, fmul_rn(dy[i * d + j], fmul_rn(x[i * d + j], rstd[i])));
		dg[j] = sg;
	}
}

/* Rotary on the first nh heads (q and k) of every qkv row, in place: element i of a
 * head pairs with i + hd/2 and turns by pos * theta^(-2i/hd) (angle in double, as
 * tk_rope); inverse turns back (the gradient).  A thread per (row, head, i). */
static __global__ void k_rope(float *qkv, int64_t N, int64_t S, int64_t nh, int64_t hd,
                              int64_t nqkv, double theta, int inverse)
{
	int64_t half = hd / 2;
	FOR_EACH(e, N * nh * half)
	{
		int64_t t = e / (nh * half), h = e / half % nh, i = e % half;
		double ang = (double)(t % S) * pow(theta, -2.0 * (double)i / (double)hd);
		float c = (float)cos(ang), s = (float)sin(ang);
		if (inverse)
			s = -s;
		float *p = qkv + t * nqkv + h * hd;
		float x1 = p[i], x2 = p[i + half];
		p[i] = fsub_rn(fmul_rn(x1, c), fmul_rn(x2, s));
		p[i + half] = fadd_rn(fmul_rn(x1, s), fmul_rn(x2, c));
	}
}

/* Causal softmax of every S-long row of p in place (row R is query R mod S), zeros
 * above the diagonal; a thread per row. */
static __global__ void k_softmax_causal(float *p, int64_t rows, int64_t S)
{
	FOR_EACH(R, rows)
	{
		int64_t i = R % S;
		float *r = p + R * S, mx = r[0];
		for (int64_t j = 1; j <= i; j++)
			mx = r[j] > mx ? r[j] : mx;
		double sum = 0;
		for (int64_t j = 0; j <= i; j++) {
			r[j] = expf(fsub_rn(r[j], mx));
			sum = dadd_rn(sum, (double)r[j]);
		}
		float inv = (float)(1.0 / sum);
		for (int64_t j = 0; j <= i; j++)
			r[j] = fmul_rn(r[j], inv);
		for (int64_t j = i + 1; j < S; j++)
			r[j] = 0.0f;
	}
}

/* The softmax's gradient for head h: ds (B matrices S x S, dP in, dS out) from the
 * probabilities p (B*H matrices S x S, matrix b*H + h); a thread per (b, row). */
static __global__ void k_softmax_bwd(const float *p, float *ds, int64_t B, int64_t H, int64_t h,
                                     int64_t S)
{
	FOR_EACH(R, B * S)
	{
		int64_t b = R / S, i = R % S;
		const float *pr = p + ((b * H + h) * S + i) * S;
		float *r = ds + R * S;
		double dot = 0;
		for (int64_t j = 0; j <= i; j++)
			dot = dadd_rn(dot, dmul_rn((double)pr[j], (double)r[j]));
		float fd = (float)dot;
		for (int64_t j = 0; j <= i; j++)
			r[j] = fmul_rn(pr[j], fsub_rn(r[j], fd));
		for (int64_t j = i + 1; j < S; j++)
			r[j] = 0.0f;
	}
}

/* tkernels.c's GELU (tanh form through the sigmoid) and its derivative. */
static __device__ float tk_gelu(float v)
{
	return v / (1.0f + expf(-2.0f * GELU_C * (v + GELU_A * v * v * v)));
}

static __device__ float tk_gelu_grad(float v)
{
	float s = 1.0f / (1.0f + expf(-2.0f * GELU_C * (v + GELU_A * v * v * v)));
	return s + 2.0f * v * s * (1.0f - s) * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
}

static __global__ void k_mlp_act(const float *h, float *a, int64_t n)
{
	FOR_EACH(i, n)
	a[i] = tk_gelu(h[i]);
}

/* dh *= gelu'(h) */
static __global__ void k_mlp_act_bwd(const float *h, float *dh, int64_t n)
{
	FOR_EACH(i, n)
	dh[i] = fmul_rn(dh[i], tk_gelu_grad(h[i]));
}

static __device__ float sigmoid(float v)
{
	return 1.0f / (1.0f + expf(-v));
}

/* a = silu(g) u */
static __global__ void k_swiglu_act(const float *g, const float *u, float *a, int64_t n)
{
	FOR_EACH(i, n)
	a[i] = fmul_rn(fmul_rn(g[i], sigmoid(g[i])), u[i]);
}

/* du holds da on entry; dg = da u silu'(g), du = da silu(g) */
static __global__ void k_swiglu_act_bwd(const float *g, const float *u, float *dg, float *du,
                                        int64_t n)
{
	FOR_EACH(i, n)
	{
		float da = du[i], s = sigmoid(g[i]);
		dg[i] = fmul_rn(fmul_rn(fmul_rn(da, u[i]), s), fadd_rn(1.0f, fmul_rn(g[i], fsub_rn(1.0f, s))));
		du[i] = fmul_rn(fmul_rn(da, g[i]), s);
	}
}

/* Each row's log-sum-exp (saved) and its loss term (double, into rl); a thread per row. */
static __global__ void k_xent_rows(const float *x, const float *tgt, float *lse, double *rl,
                                   int64_t N, int64_t V)
{
	FOR_EACH(i, N)
	{
		const float *r = x + i * V;
		float mx = r[0];
		for (int64_t j = 1; j < V; j++)
			mx = r[j] > mx ? r[j] : mx;
		double s = 0;
		for (int64_t j = 0; j < V; j++)
			s = dadd_rn(s, exp(dsub_rn((double)r[j], (double)mx)));
		double l = dadd_rn((double)mx, log(s));
		lse[i] = (float)l;
		rl[i] = dsub_rn(l, (double)r[tok_id(tgt[i], V)]);
	}
}

/* The mean of the rows' terms, summed by one thread in row order (the CPU's). */
static __global__ void k_xent_sum(const double *rl, int64_t N, float *loss)
{
	double t = 0;
	for (int64_t i = 0; i < N; i++)
		t = dadd_rn(t, rl[i]);
	*loss = (float)(t / (double)N);
}

/* dx = k (softmax(x) - onehot(tgt)); may run in place (an element reads only itself). */
static __global__ void k_xent_bwd(const float *x, const float *tgt, const float *lse, float k,
                                  float *dx, int64_t N, int64_t V)
{
	FOR_EACH(e, N * V)
	{
		int64_t i = e / V, j = e % V;
		float o = fmul_rn(k, expf(fsub_rn(x[e], lse[i])));
		if (j == tok_id(tgt[i], V))
			o = fsub_rn(o, k);
		dx[e] = o;
	}
}

/* ---- the calls ---- */

/* Device scratch of one call, freed past it. */
typedef struct {
	Block *b[4];
	int n;
} Scratch;

static void *scratch(RtRank *r, Scratch *s, int64_t bytes)
{
	if (s->n == 4) {
		rt_error(r, "internal: more than 4 scratch blocks in one layer call");
		return NULL;
	}
	Block *b = cu_get_block(r, bytes, 0);
	if (!b)
		return NULL;
	s->b[s->n++] = b;
	return b->ptr;
}

enum { PH_F, PH_B, PH_W }; // which kernel of a row: what it writes

/* The tensors a call touches, and which it writes (for cu_cs_begin/end). */
static int call_uses(const RtLayerCall *c, int ph, Use *u)
{
	int n = 0;
	const RtTensor *rd[] = {c->x, c->dy, c->target};
	for (int i = 0; i < 3; i++)
		if (rd[i])
			u[n++] = Use{rd[i], 0};
	const RtTensor *wr[] = {c->y, c->dx, c->work, c->loss};
	for (int i = 0; i < 4; i++)
		if (wr[i])
			u[n++] = Use{wr[i], 1};
	for (int j = 0; j < c->nparams; j++) {
		u[n++] = Use{&c->param[j], 0};
		if (ph == PH_W && c->grad)
			u[n++] = Use{&c->grad[j], 1};
	}
	for (int j = 0; j < c->nsaved; j++)
		u[n++] = Use{c->saved[j], ph == PH_F};
	for (int j = 0; j < c->nheld; j++)
		u[n++] = Use{c->held[j], ph == PH_B};
	return n;
}

typedef int (*Body)(RtRank *r, const RtLayerCall *c, Scratch *s);

static int layer_run(RtRank *r, const RtLayerCall *c, int ph, Body body)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	Use u[7 + 4 * RT_LAYER_MAX_TENSORS];
	int n = call_uses(c, ph, u);
	if (cu_cs_begin(r, u, n))
		return RT_EFAIL;
	Scratch s = {};
	int rc = body(r, c, &s);
	for (int i = 0; i < s.n; i++) {
		s.b[i]->cs_last = cur(r)->cs_pos + 1; // used by this call: free past it
		cu_release(r, &cur(r)->free_dev, s.b[i]);
	}
	cu_cs_end(r, u, n);
	return rc;
}

/* y (m x n) = x (m x k) w (k x n) (+ b) */
static int proj_fwd(RtRank *r, const RtTensor *x, const RtTensor *w, const RtTensor *b,
                    RtTensor *y)
{
	int64_t m = x->rows, k = x->cols, n = w->cols;
	if (b)
		LAUNCH(r, k_bias_rows, m * n, F32(y), F32(b), m, n);
	return gemm(r, 0, 0, m, n, k, 1.0f, mat(x), mat(w), b ? 1.0f : 0.0f, F32(y), n, 0, 1);
}

/* dx (m x k) = dy (m x n) w^T (+ beta dx), w k x n */
static int proj_bwd_in(RtRank *r, const float *dy, const RtTensor *w, float *dx, int64_t m,
                       float beta)
{
	int64_t k = w->rows, n = w->cols;
	return gemm(r, 0, 1, m, k, n, 1.0f, mat(dy, m, n), mat(w), beta, dx, k, 0, 1);
}

/* dw (k x n) += x^T (k x m) dy (m x n); db += column sums of dy (rows in order) */
static int proj_bwd_w(RtRank *r, const float *x, const float *dy, RtTensor *dw, RtTensor *db,
                      int64_t m)
{
	int64_t k = dw->rows, n = dw->cols;
	if (gemm(r, 1, 0, k, n, m, 1.0f, mat(x, m, k), mat(dy, m, n), 1.0f, F32(dw), n, 0, 1))
		return RT_EFAIL;
	if (db)
		LAUNCH(r, k_colsum, n, dy, F32(db), m, n);
	return RT_OK;
}

/* linear: y = x w + b; w in x out (row-major), b 1 x out. */
static int linear_fwd_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	return proj_fwd(r, c->x, &c->param[0], &c->param[1], c->y);
}

static int linear_bwd_in_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	return proj_bwd_in(r, F32(c->dy), &c->param[0], F32(c->dx), c->rows, 0.0f);
}

static int linear_bwd_w_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	return proj_bwd_w(r, F32(c->x), F32(c->dy), &c->grad[0], &c->grad[1], c->rows);
}

/* embed: y = wte[x] (+ wpe[position]); W scatters dy into the tokens' rows. */
static int embed_fwd_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	int64_t N = c->rows, d = c->layer->out, V = c->sh.vocab;
	if (check_tokens(r, c->x, V, 0))
		return RT_EFAIL;
	LAUNCH(r, k_embed_fwd, N * d, F32(c->x), F32(&c->param[0]),
	       c->nparams > 1 ? F32(&c->param[1]) : (float *)NULL, F32(c->y), N, c->sh.seq, d, V);
	return RT_OK;
}

static int embed_bwd_w_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	int64_t N = c->rows, d = c->layer->out, V = c->sh.vocab;
	if (check_tokens(r, c->x, V, 0))
		return RT_EFAIL;
	LAUNCH(r, k_embed_bwd_w, d, F32(c->x), F32(c->dy), F32(&c->grad[0]),
	       c->nparams > 1 ? F32(&c->grad[1]) : (float *)NULL, N, c->sh.seq, d, V);
	return RT_OK;
}

/* layernorm and rmsnorm: per-row statistics saved for B and W. */
static int layernorm_fwd_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	LAUNCH(r, k_layernorm_fwd, c->rows, F32(c->x), F32(&c->param[0]), F32(&c->param[1]),
	       TK_NORM_EPS, F32(c->y), F32(c->saved[0]), F32(c->saved[1]), c->rows, c->layer->in);
	return RT_OK;
}

static int layernorm_bwd_in_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	LAUNCH(r, k_layernorm_bwd_in, c->rows, F32(c->x), F32(&c->param[0]), F32(c->saved[0]),
	       F32(c->saved[1]), F32(c->dy), F32(c->dx), c->rows, c->layer->in);
	return RT_OK;
}

static int layernorm_bwd_w_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	LAUNCH(r, k_layernorm_bwd_w, c->layer->in, F32(c->x), F32(c->saved[0]), F32(c->saved[1]),
	       F32(c->dy), F32(&c->grad[0]), F32(&c->grad[1]), c->rows, c->layer->in);
	return RT_OK;
}

static int rmsnorm_fwd_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	LAUNCH(r, k_rmsnorm_fwd, c->rows, F32(c->x), F32(&c->param[0]), TK_NORM_EPS, F32(c->y),
	       F32(c->saved[0]), c->rows, c->layer->in);
	return RT_OK;
}

static int rmsnorm_bwd_in_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	LAUNCH(r, k_rmsnorm_bwd_in, c->rows, F32(c->x), F32(&c->param[0]), F32(c->saved[0]),
	       F32(c->dy), F32(c->dx), c->rows, c->layer->in);
	return RT_OK;
}

static int rmsnorm_bwd_w_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	LAUNCH(r, k_rmsnorm_bwd_w, c->layer->in, F32(c->x), F32(c->saved[0]), F32(c->dy),
	       F32(&c->grad[0]), c->rows, c->layer->in);
	return RT_OK;
}

/* Parameters laid out weight, bias, weight, bias (attention: wqkv, bqkv, wo, bo; mlp: w1,
 * b1, w2, b2), the biases NULL when absent. */
static void wb_params(const RtLayerCall *c, const RtTensor *pt, const RtTensor *w[4])
{
	int b = HAS(c->layer, BIAS);
	w[0] = &pt[0];
	w[1] = b ? &pt[1] : NULL;
	w[2] = &pt[1 + b];
	w[3] = b ? &pt[3] : NULL;
}

/* attention (tk_attn_*).  The per-(sequence, head) products are strided-batched GEMMs:
 * one call per query head h, batched over the B sequences (a sequence's q, k and v
 * are S*nqkv floats after the previous one's, its P matrix for head h H*S*S after).
 * Grouped-query attention is the mapping of head h to key/value head h / (H/Hkv) in
 * that loop, so a kv head's gradient sums its query heads in head order, as the CPU
 * does.  P's softmax and its gradient are plain kernels. */
typedef struct {
	int64_t B, S, d, H, Hkv, hd, nqkv, N, grp;
	float scale;
} AttnDims;

static AttnDims attn_dims(const TkAttn *a)
{
	AttnDims m;
	m.B = a->B, m.S = a->S, m.d = a->d, m.H = a->H, m.Hkv = a->Hkv, m.hd = a->d / a->H;
	m.nqkv = tk_attn_nqkv(a), m.N = a->B * a->S, m.grp = a->H / a->Hkv;
	m.scale = (float)(1.0 / sqrt((double)m.hd));
	return m;
}

/* Head j's columns of every sequence in qkv (j counts q heads, then k, then v). */
static Opd qkv_head(const float *qkv, const AttnDims *m, int64_t j)
{
	return Opd{qkv, m->N * m->nqkv, j * m->hd, m->nqkv, m->S * m->nqkv};
}

static int attn_fwd_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	TkAttn a = plan_layer_attn(c->layer, &c->sh);
	AttnDims m = attn_dims(&a);
	const RtTensor *w[4];
	wb_params(c, c->param, w);
	float *qkv = F32(c->saved[0]), *p = F32(c->saved[1]), *att = F32(c->saved[2]);
	int64_t S = m.S, H = m.H, np = m.B * H * S * S;
	if (proj_fwd(r, c->x, w[0], w[1], c->saved[0]))
		return RT_EFAIL;
	if (a.rope)
		LAUNCH(r, k_rope, m.N * (H + m.Hkv) * (m.hd / 2), qkv, m.N, S, H + m.Hkv, m.hd, m.nqkv,
		       a.rope_theta, 0);
	for (int64_t h = 0; h < H; h++) // P = scale q k^T
		if (gemm(r, 0, 1, S, S, m.hd, m.scale, qkv_head(qkv, &m, h),
		         qkv_head(qkv, &m, H + h / m.grp), 0.0f, p + h * S * S, S, H * S * S, m.B))
			return RT_EFAIL;
	LAUNCH(r, k_softmax_causal, m.B * H * S, p, m.B * H * S, S);
	for (int64_t h = 0; h < H; h++) // att = P v
		if (gemm(r, 0, 0, S, m.hd, S, 1.0f, Opd{p, np, h * S * S, S, H * S * S},
		         qkv_head(qkv, &m, H + m.Hkv + h / m.grp), 0.0f, att + h * m.hd, m.d, S * m.d,
		         m.B))
			return RT_EFAIL;
	return proj_fwd(r, c->saved[2], w[2], w[3], c->y);
}

/* B: datt (the workspace's first N*d floats) = dy wo^T, then per head dP, dV, dS, dQ,
 * dK into dqkv (held), rotary back, dx = dqkv wqkv^T.  dS takes B*S*S floats of
 * scratch (one head of every sequence at once). */
static int attn_bwd_in_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	TkAttn a = plan_layer_attn(c->layer, &c->sh);
	AttnDims m = attn_dims(&a);
	const RtTensor *w[4];
	wb_params(c, c->param, w);
	const float *qkv = F32(c->saved[0]), *p = F32(c->saved[1]);
	float *dqkv = F32(c->held[0]), *datt = F32(c->work);
	int64_t S = m.S, H = m.H, np = m.B * H * S * S, nds = m.B * S * S;
	float *ds = (float *)scratch(r, s, nds * (int64_t)sizeof(float));
	if (!ds || proj_bwd_in(r, F32(c->dy), w[2], datt, m.N, 0.0f))
		return RT_EFAIL;
	CUDACHECK(r, cudaMemsetAsync(dqkv, 0, (size_t)(m.N * m.nqkv) * sizeof(float), cur(r)->cs));
	Opd dO0 = {datt, m.N * m.d, 0, m.d, S * m.d}, dS = {ds, nds, 0, S, S * S};
	for (int64_t h = 0; h < H; h++) {
		int64_t g = h / m.grp, jk = H + g, jv = H + m.Hkv + g;
		Opd dO = dO0, P = {p, np, h * S * S, S, H * S * S};
		dO.off = h * m.hd;
		if (gemm(r, 0, 1, S, S, m.hd, 1.0f, dO, qkv_head(qkv, &m, jv), 0.0f, ds, S, S * S,
		         m.B) || // dP = dO v^T
		    gemm(r, 1, 0, S, m.hd, S, 1.0f, P, dO, 1.0f, dqkv + jv * m.hd, m.nqkv, S * m.nqkv,
		         m.B)) // dv += P^T dO
			return RT_EFAIL;
		LAUNCH(r, k_softmax_bwd, m.B * S, p, ds, m.B, H, h, S);
		if (gemm(r, 0, 0, S, m.hd, S, m.scale, dS, qkv_head(qkv, &m, jk), 1.0f, dqkv + h * m.hd,
		         m.nqkv, S * m.nqkv, m.B) || // dq += c dS k
		    gemm(r, 1, 0, S, m.hd, S, m.scale, dS, qkv_head(qkv, &m, h), 1.0f, dqkv + jk * m.hd,
		         m.nqkv, S * m.nqkv, m.B)) // dk += c dS^T q
			return RT_EFAIL;
	}
	if (a.rope)
		LAUNCH(r, k_rope, m.N * (H + m.Hkv) * (m.hd / 2), dqkv, m.N, S, H + m.Hkv, m.hd, m.nqkv,
		       a.rope_theta, 1);
	return c->dx ? proj_bwd_in(r, dqkv, w[0], F32(c->dx), m.N, 0.0f) : RT_OK;
}

static int attn_bwd_w_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	const RtTensor *g[4];
	wb_params(c, c->grad, g);
	if (proj_bwd_w(r, F32(c->x), F32(c->held[0]), (RtTensor *)g[0], (RtTensor *)g[1], c->rows))
		return RT_EFAIL;
	return proj_bwd_w(r, F32(c->saved[2]), F32(c->dy), (RtTensor *)g[2], (RtTensor *)g[3],
	                  c->rows);
}

/* mlp: gelu between two projections; saved h and gelu(h), held dh. */
static int mlp_fwd_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	const RtTensor *w[4];
	wb_params(c, c->param, w);
	if (proj_fwd(r, c->x, w[0], w[1], c->saved[0]))
		return RT_EFAIL;
	LAUNCH(r, k_mlp_act, numel(c->saved[0]), F32(c->saved[0]), F32(c->saved[1]),
	       numel(c->saved[0]));
	return proj_fwd(r, c->saved[1], w[2], w[3], c->y);
}

static int mlp_bwd_in_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	const RtTensor *w[4];
	wb_params(c, c->param, w);
	float *dh = F32(c->held[0]);
	if (proj_bwd_in(r, F32(c->dy), w[2], dh, c->rows, 0.0f))
		return RT_EFAIL;
	LAUNCH(r, k_mlp_act_bwd, numel(c->held[0]), F32(c->saved[0]), dh, numel(c->held[0]));
	return c->dx ? proj_bwd_in(r, dh, w[0], F32(c->dx), c->rows, 0.0f) : RT_OK;
}

static int mlp_bwd_w_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	const RtTensor *g[4];
	wb_params(c, c->grad, g);
	if (proj_bwd_w(r, F32(c->x), F32(c->held[0]), (RtTensor *)g[0], (RtTensor *)g[1], c->rows))
		return RT_EFAIL;
	return proj_bwd_w(r, F32(c->saved[1]), F32(c->dy), (RtTensor *)g[2], (RtTensor *)g[3],
	                  c->rows);
}

/* swiglu: silu(x wg) * (x wu), then wd; saved g, u, a; held dg, du. */
static int swiglu_fwd_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	if (proj_fwd(r, c->x, &c->param[0], NULL, c->saved[0]) ||
	    proj_fwd(r, c->x, &c->param[1], NULL, c->saved[1]))
		return RT_EFAIL;
	int64_t n = numel(c->saved[0]);
	LAUNCH(r, k_swiglu_act, n, F32(c->saved[0]), F32(c->saved[1]), F32(c->saved[2]), n);
	return proj_fwd(r, c->saved[2], &c->param[2], NULL, c->y);
}

static int swiglu_bwd_in_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	float *dg = F32(c->held[0]), *du = F32(c->held[1]);
	int64_t n = numel(c->held[0]);
	if (proj_bwd_in(r, F32(c->dy), &c->param[2], du, c->rows, 0.0f)) // da, into du
		return RT_EFAIL;
	LAUNCH(r, k_swiglu_act_bwd, n, F32(c->saved[0]), F32(c->saved[1]), dg, du, n);
	if (!c->dx)
		return RT_OK;
	if (proj_bwd_in(r, dg, &c->param[0], F32(c->dx), c->rows, 0.0f))
		return RT_EFAIL;
	return proj_bwd_in(r, du, &c->param[1], F32(c->dx), c->rows, 1.0f);
}

static int swiglu_bwd_w_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	if (proj_bwd_w(r, F32(c->x), F32(c->held[0]), &c->grad[0], NULL, c->rows) ||
	    proj_bwd_w(r, F32(c->x), F32(c->held[1]), &c->grad[1], NULL, c->rows))
		return RT_EFAIL;
	return proj_bwd_w(r, F32(c->saved[2]), F32(c->dy), &c->grad[2], NULL, c->rows);
}

/* head: logits = x wv^T, wv V x d (the embedding's table when tied). */
static int head_fwd_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	int64_t N = c->rows, d = c->layer->in, V = c->layer->out;
	return gemm(r, 0, 1, N, V, d, 1.0f, mat(c->x), mat(&c->param[0]), 0.0f, F32(c->y), V, 0, 1);
}

static int head_bwd_in_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	int64_t N = c->rows, d = c->layer->in, V = c->layer->out;
	return gemm(r, 0, 0, N, d, V, 1.0f, mat(c->dy), mat(&c->param[0]), 0.0f, F32(c->dx), d, 0,
	            1);
}

static int head_bwd_w_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	int64_t N = c->rows, d = c->layer->in, V = c->layer->out;
	return gemm(r, 1, 0, V, d, N, 1.0f, mat(c->dy), mat(c->x), 1.0f, F32(&c->grad[0]), d, 0, 1);
}

/* xent: mean cross-entropy of the rows against their next tokens, into loss[slot];
 * saves each row's log-sum-exp and the targets. */
static int xent_fwd_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	int64_t N = c->rows, V = c->layer->in;
	if (c->slot < 0 || c->slot >= c->loss->cols)
		return rt_error(r, "internal: loss slot %d of %lld", c->slot, (long long)c->loss->cols);
	double *rl = (double *)scratch(r, s, N * (int64_t)sizeof(double));
	if (!rl || check_tokens(r, c->target, V, 1))
		return RT_EFAIL;
	LAUNCH(r, k_xent_rows, N, F32(c->x), F32(c->target), F32(c->saved[0]), rl, N, V);
	k_xent_sum<<<1, 1, 0, cur(r)->cs>>>(rl, N, F32(c->loss) + c->slot);
	CUDACHECK(r, cudaGetLastError());
	CUDACHECK(r, cudaMemcpyAsync(c->saved[1]->data, c->target->data, (size_t)c->target->bytes,
	                             cudaMemcpyDeviceToDevice, cur(r)->cs));
	return RT_OK;
}

static int xent_bwd_in_body(RtRank *r, const RtLayerCall *c, Scratch *s)
{
	(void)s;
	int64_t N = c->rows, V = c->layer->in;
	if (check_tokens(r, c->saved[1], V, 1))
		return RT_EFAIL;
	float k = (float)((double)c->scale / (double)N); // as tk_xent_bwd
	LAUNCH(r, k_xent_bwd, N * V, F32(c->x), F32(c->saved[1]), F32(c->saved[0]), k, F32(c->dx),
	       N, V);
	return RT_OK;
}

/* The rows' entry points: the bodies run by layer_run for their phase. */
#define ROW_FN(name, ph)                                                                       \
	static int name(RtRank *r, const RtLayerCall *c)                                           \
	{                                                                                          \
		return layer_run(r, c, ph, name##_body);                                               \
	}
ROW_FN(linear_fwd, PH_F)
ROW_FN(linear_bwd_in, PH_B)
ROW_FN(linear_bwd_w, PH_W)
ROW_FN(embed_fwd, PH_F)
ROW_FN(embed_bwd_w, PH_W)
ROW_FN(layernorm_fwd, PH_F)
ROW_FN(layernorm_bwd_in, PH_B)
ROW_FN(layernorm_bwd_w, PH_W)
ROW_FN(rmsnorm_fwd, PH_F)
ROW_FN(rmsnorm_bwd_in, PH_B)
ROW_FN(rmsnorm_bwd_w, PH_W)
ROW_FN(attn_fwd, PH_F)
ROW_FN(attn_bwd_in, PH_B)
ROW_FN(attn_bwd_w, PH_W)
ROW_FN(mlp_fwd, PH_F)
ROW_FN(mlp_bwd_in, PH_B)
ROW_FN(mlp_bwd_w, PH_W)
ROW_FN(swiglu_fwd, PH_F)
ROW_FN(swiglu_bwd_in, PH_B)
ROW_FN(swiglu_bwd_w, PH_W)
ROW_FN(head_fwd, PH_F)
ROW_FN(head_bwd_in, PH_B)
ROW_FN(head_bwd_w, PH_W)
ROW_FN(xent_fwd, PH_F)
ROW_FN(xent_bwd_in, PH_B)
#undef ROW_FN

/* The rows by kind, as C's designated initializers would place them (C++ has none for
 * arrays); a kind left out stays empty and rt_device_check refuses plans using it. */
static constexpr CuLayerTable make_layers()
{
	CuLayerTable t = {};
	t.k[LAYER_LINEAR] = {linear_fwd, linear_bwd_in, linear_bwd_w};
	t.k[LAYER_RELU] = {relu_fwd, relu_bwd_in, nullptr};
	t.k[LAYER_GELU] = {gelu_fwd, gelu_bwd_in, nullptr};
	t.k[LAYER_MSE] = {mse_fwd, mse_bwd_in, nullptr};
	t.k[LAYER_EMBED] = {embed_fwd, nullptr, embed_bwd_w};
	t.k[LAYER_LAYERNORM] = {layernorm_fwd, layernorm_bwd_in, layernorm_bwd_w};
	t.k[LAYER_RMSNORM] = {rmsnorm_fwd, rmsnorm_bwd_in, rmsnorm_bwd_w};
	t.k[LAYER_ATTN] = {attn_fwd, attn_bwd_in, attn_bwd_w};
	t.k[LAYER_MLP] = {mlp_fwd, mlp_bwd_in, mlp_bwd_w};
	t.k[LAYER_SWIGLU] = {swiglu_fwd, swiglu_bwd_in, swiglu_bwd_w};
	t.k[LAYER_HEAD] = {head_fwd, head_bwd_in, head_bwd_w};
	t.k[LAYER_XENT] = {xent_fwd, xent_bwd_in, nullptr};
	return t;
}

extern const CuLayerTable cu_layers = make_layers();
