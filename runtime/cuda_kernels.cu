/* The cuda device's tensor operations, GEMMs and the layer rows of the matrix and
 * elementwise kinds (linear, relu, squared_relu, gelu, mse, dropout), on the rank's
 * compute stream, ordered by cu_cs_begin()/cu_cs_end() (cuda_stream.cu); the transformer kinds' rows are
 * cuda_tf.cu's, and device_cuda.cu puts both lists of rows in the table by kind.
 *
 * Kernels are grid-stride loops; the arithmetic mirrors cpu.c and cpu_layers.c (rounded
 * intrinsics where nvcc would otherwise fuse a multiply-add the CPU does not), so everything but the
 * GEMMs, tanh and the mse loss's summation order matches the cpu device bit for bit.
 * GEMMs are cuBLAS's, column-major on row-major tensors (cu_gemm: one matrix or a
 * strided batch); with --dtype bf16 both operands are rounded to bf16 by a small kernel
 * and cuBLAS accumulates in f32; f32 GEMMs use CUBLAS_DEFAULT_MATH, which never uses
 * TF32.  A layer call runs through cu_layer_run, which checks it, orders it on the
 * stream and frees its scratch past it. */
#include <cuda_bf16.h>
#include <string.h>

#include "cuda_dev.h"

extern "C" {
#include "tkernels.h" // tk_drop: a dropout's threshold and scale, as the cpu's
}

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

/* One momentum step, operation for operation as cpu.c's cpu_momentum. */
static __global__ void k_momentum(float *w, const float *g, float *m, float mu, float lr,
                                  int64_t n)
{
	FOR_EACH(i, n)
	{
		float mi = __fadd_rn(__fmul_rn(mu, m[i]), g[i]);
		m[i] = mi;
		w[i] = __fsub_rn(w[i], __fmul_rn(lr, mi));
	}
}

/* One AdamW step, operation for operation as cpu.c's cpu_adamw (rt_backend.h "The
 * optimizer"); the factors come from the host (rt_optim_step_init). */
static __global__ void k_adamw(float *w, const float *g, float *m, float *v, RtOptStep s,
                               int64_t n)
{
	FOR_EACH(i, n)
	{
		float gi = g[i];
		float mi = __fadd_rn(__fmul_rn(s.beta1, m[i]), __fmul_rn(s.one_minus_beta1, gi));
		float vi = __fadd_rn(__fmul_rn(s.beta2, v[i]), __fmul_rn(__fmul_rn(s.one_minus_beta2, gi), gi));
		m[i] = mi;
		v[i] = vi;
		float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2), s.eps);
		w[i] = __fsub_rn(__fmul_rn(w[i], s.decay), __fmul_rn(s.step, __fdiv_rn(mi, denom)));
	}
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

/* squared_relu: y = relu(x)^2, dx = (2 relu(x)) dy, as cpu_layers.c multiplies. */
static __global__ void k_squared_relu_fwd(const float *x, float *y, int64_t n)
{
	FOR_EACH(i, n)
	{
		float p = x[i] > 0 ? x[i] : 0;
		y[i] = __fmul_rn(p, p);
	}
}

static __global__ void k_squared_relu_bwd(const float *x, const float *dy, float *dx, int64_t n)
{
	FOR_EACH(i, n)
	{
		float p = x[i] > 0 ? x[i] : 0;
		dx[i] = __fmul_rn(__fmul_rn(2.0f, p), dy[i]);
	}
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

/* db[j] += sum over rows of dy[i][j], rows in order: the CPU's order exactly.  The
 * adds of a column are one chain, so a block takes COLSUM_COLS columns and walks them a
 * tile of COLSUM_ROWS rows at a time: while one warp adds a tile's rows in order (out of
 * shared memory), every thread already has its COLSUM_PER loads of the next tile in
 * flight, which it then stores into the other half of the double buffer. */
enum {
	COLSUM_COLS = 32,
	COLSUM_ROWS = 128,
	COLSUM_THREADS = 256,
	COLSUM_STRIDE = COLSUM_THREADS / COLSUM_COLS,         // rows between a thread's loads
	COLSUM_PER = COLSUM_ROWS * COLSUM_COLS / COLSUM_THREADS, // loads per thread and tile
};
typedef float ColsumTile[COLSUM_ROWS][COLSUM_COLS];

static __device__ void colsum_load(float *v, const float *dy, int64_t i0, int64_t m, int64_t n,
                                   int64_t j, int first)
{
#pragma unroll
	for (int k = 0; k < COLSUM_PER; k++) {
		int64_t i = i0 + first + k * COLSUM_STRIDE;
		v[k] = i < m && j < n ? dy[i * n + j] : 0.0f;
	}
}

static __device__ void colsum_store(const float *v, ColsumTile t, int first, int lane)
{
#pragma unroll
	for (int k = 0; k < COLSUM_PER; k++)
		t[first + k * COLSUM_STRIDE][lane] = v[k];
}

static __global__ void k_colsum(const float *dy, float *db, int64_t m, int64_t n)
{
	__shared__ ColsumTile tile[2];
	const int lane = threadIdx.x % COLSUM_COLS, first = threadIdx.x / COLSUM_COLS;
	const int adder = threadIdx.x < COLSUM_COLS;
	float v[COLSUM_PER];
	for (int64_t j0 = (int64_t)blockIdx.x * COLSUM_COLS; j0 < n;
	     j0 += (int64_t)gridDim.x * COLSUM_COLS) {
		int64_t j = j0 + lane;
		float s = adder && j < n ? db[j] : 0.0f;
		colsum_load(v, dy, 0, m, n, j, first);
		colsum_store(v, tile[0], first, lane);
		__syncthreads();
		int b = 0;
		for (int64_t i0 = 0; i0 < m; i0 += COLSUM_ROWS, b ^= 1) {
			int64_t next = i0 + COLSUM_ROWS; // the same in every thread: the syncs match
			if (next < m)
				colsum_load(v, dy, next, m, n, j, first);
			if (adder) {
				const ColsumTile &t = tile[b];
				if (m - i0 >= COLSUM_ROWS) {
#pragma unroll 16
					for (int k = 0; k < COLSUM_ROWS; k++)
						s = __fadd_rn(s, t[k][lane]);
				} else {
					for (int k = 0; k < (int)(m - i0); k++)
						s = __fadd_rn(s, t[k][lane]);
				}
			}
			if (next < m)
				colsum_store(v, tile[b ^ 1], first, lane);
			__syncthreads();
		}
		if (adder && j < n)
			db[j] = s;
	}
}

/* y[i] = u(splitmix64(key ^ i)): model.c's rt_gen_values, bit for bit (integer
 * arithmetic, then a 24-bit integer scaled by a power of two, exact in double). */
static __global__ void k_gen(float *y, uint64_t key, int64_t n)
{
	FOR_EACH(i, n)
	{
		uint64_t z = cu_splitmix64(key ^ (uint64_t)i);
		y[i] = (float)((double)(z >> 40) / 8388608.0 - 1.0);
	}
}

/* dropout (tkernels.c's tk_dropout_fwd and _bwd): the same mask bits from the same key;
 * mask NULL at P = 0. */
static __global__ void k_dropout_fwd(const float *x, uint8_t *mask, float *y, uint64_t key,
                                     uint64_t thr, float scale, int64_t n)
{
	FOR_EACH(i, n)
	{
		int keep = cu_drop_keep(key, (uint64_t)i, thr);
		if (mask)
			mask[i] = (uint8_t)keep;
		y[i] = keep ? __fmul_rn(x[i], scale) : 0.0f;
	}
}

static __global__ void k_dropout_bwd(const uint8_t *mask, const float *dy, float *dx, float scale,
                                     int64_t n)
{
	FOR_EACH(i, n)
	dx[i] = !mask || mask[i] ? __fmul_rn(dy[i], scale) : 0.0f;
}

/* loss[0] = mean of (y - t)^2 in double, in an order fixed whatever the scheduling:
 * MSE_BLOCKS blocks each sum a fixed share (grid thread g takes elements g, g + G, ...
 * for G = MSE_BLOCKS * MSE_THREADS, then a tree in the block) into part[block], and one
 * block adds the parts by the same tree. */
enum { MSE_BLOCKS = 256, MSE_THREADS = 256 };
static __device__ double block_tree(double s, double *sh)
{
	sh[threadIdx.x] = s;
	__syncthreads();
	for (int w = MSE_THREADS / 2; w > 0; w /= 2) {
		if ((int)threadIdx.x < w)
			sh[threadIdx.x] += sh[threadIdx.x + w];
		__syncthreads();
	}
	return sh[0];
}

static __global__ void k_mse_part(const float *y, const float *t, double *part, int64_t n)
{
	__shared__ double sh[MSE_THREADS];
	double s = 0;
	for (int64_t i = (int64_t)blockIdx.x * MSE_THREADS + threadIdx.x; i < n;
	     i += (int64_t)MSE_BLOCKS * MSE_THREADS) {
		double d = (double)y[i] - (double)t[i];
		s += d * d;
	}
	s = block_tree(s, sh);
	if (threadIdx.x == 0)
		part[blockIdx.x] = s;
}

static __global__ void k_mse_sum(const double *part, float *loss, int64_t n)
{
	__shared__ double sh[MSE_THREADS];
	double s = block_tree(part[threadIdx.x], sh); // MSE_BLOCKS == MSE_THREADS
	if (threadIdx.x == 0)
		*loss = (float)(s / (double)n);
}

static __global__ void k_to_bf16(const float *x, __nv_bfloat16 *y, int64_t n)
{
	FOR_EACH(i, n)
	y[i] = __float2bfloat16_rn(x[i]);
}

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

int cu_gen(RtRank *r, RtTensor *t, uint64_t key)
{
	Use u[] = {{t, 1}};
	if (cu_cs_begin(r, u, 1))
		return RT_EFAIL;
	cu_cs_end(r, u, 1);
	LAUNCH(r, k_gen, numel(t), F32(t), key, numel(t));
	return RT_OK;
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

static int cu_sgd(RtRank *r, const RtOptStep *s)
{
	if (same_shape(r, s->w, s->g, "optimizer step"))
		return RT_EFAIL;
	Use u[] = {{s->w, 1}, {s->g, 0}};
	if (cu_cs_begin(r, u, 2))
		return RT_EFAIL;
	cu_cs_end(r, u, 2);
	LAUNCH(r, k_sgd, numel(s->w), F32(s->w), F32(s->g), s->lr, numel(s->w));
	return RT_OK;
}

static int cu_adamw(RtRank *r, const RtOptStep *s)
{
	if (!s->m || !s->v)
		return rt_error(r, "internal: adamw step without its state");
	if (same_shape(r, s->w, s->g, "optimizer step") || same_shape(r, s->w, s->m, "adamw m") ||
	    same_shape(r, s->w, s->v, "adamw v"))
		return RT_EFAIL;
	Use u[] = {{s->w, 1}, {s->g, 0}, {s->m, 1}, {s->v, 1}};
	if (cu_cs_begin(r, u, 4))
		return RT_EFAIL;
	cu_cs_end(r, u, 4);
	RtOptStep k = *s; // by value to the kernel; its pointers stay the host's
	LAUNCH(r, k_adamw, numel(s->w), F32(s->w), F32(s->g), F32(s->m), F32(s->v), k,
	       numel(s->w));
	return RT_OK;
}

static int cu_momentum(RtRank *r, const RtOptStep *s)
{
	if (!s->m)
		return rt_error(r, "internal: momentum step without its buffer");
	if (same_shape(r, s->w, s->g, "optimizer step") || same_shape(r, s->w, s->m, "momentum buffer"))
		return RT_EFAIL;
	Use u[] = {{s->w, 1}, {s->g, 0}, {s->m, 1}};
	if (cu_cs_begin(r, u, 3))
		return RT_EFAIL;
	cu_cs_end(r, u, 3);
	LAUNCH(r, k_momentum, numel(s->w), F32(s->w), F32(s->g), F32(s->m), s->momentum, s->lr,
	       numel(s->w));
	return RT_OK;
}

/* The optimizer's entries by kind, as device_cuda.cu places the layer rows. */
static constexpr CuOptimTable make_optim()
{
	CuOptimTable t = {};
	t.f[OPTIM_SGD] = cu_sgd;
	t.f[OPTIM_ADAMW] = cu_adamw;
	t.f[OPTIM_MOMENTUM] = cu_momentum;
	return t;
}

extern const CuOptimTable cu_optim = make_optim();

/* ---- GEMMs: cuBLAS is column-major, and a row-major M x N matrix is its N x M
 * transpose, so the row-major C = op(A) op(B) is cuBLAS's C^T = op(B)^T op(A)^T: the
 * call names B first (tb, ta, N, M, K, B, A). ---- */

/* The floats a product reads of an operand stored rows x cols, batch matrices deep:
 * from its start to the end of the last matrix's last row (bf16 copies convert those). */
static int64_t span_of(const Opd *o, int64_t rows, int64_t cols, int64_t batch)
{
	int64_t s = (batch - 1) * o->stride + (rows - 1) * o->ld + cols;
	return s < o->n - o->off ? s : o->n - o->off;
}

/* One matrix is cublasSgemm (bf16: cublasGemmEx), a batch cublasSgemmStridedBatched
 * (bf16: cublasGemmStridedBatchedEx). */
int cu_gemm(RtRank *r, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, Opd A,
            Opd B, float beta, float *C, int64_t ldc, int64_t sc, int64_t batch)
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
		k_to_bf16<<<cu_grid(na), 256, 0, c->cs>>>(A.base + A.off, (__nv_bfloat16 *)a16->ptr, na);
		k_to_bf16<<<cu_grid(nb), 256, 0, c->cs>>>(B.base + B.off, (__nv_bfloat16 *)b16->ptr, nb);
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
 * tensors are the cpu device's (plan_layer_tensors) ---- */

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

static int squared_relu_fwd(RtRank *r, const RtLayerCall *c)
{
	return ew_fwd(r, c, k_squared_relu_fwd);
}

static int squared_relu_bwd_in(RtRank *r, const RtLayerCall *c)
{
	return ew_bwd_in(r, c, k_squared_relu_bwd);
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
	Block *part = cu_get_block(r, MSE_BLOCKS * (int64_t)sizeof(double), 0);
	if (!part)
		return RT_EFAIL;
	cu_cs_end(r, u, 3);
	double *pp = (double *)part->ptr;
	k_mse_part<<<MSE_BLOCKS, MSE_THREADS, 0, cur(r)->cs>>>(F32(c->x), F32(c->target), pp,
	                                                      numel(c->x));
	k_mse_sum<<<1, MSE_THREADS, 0, cur(r)->cs>>>(pp, F32(c->loss) + c->slot, numel(c->x));
	part->cs_last = cur(r)->cs_pos; // the kernels just issued use it: free it past them
	cu_release(r, &cur(r)->free_dev, part);
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
	float k = (float)(2.0 * (double)c->scale / (double)n); // as cpu_layers.c
	LAUNCH(r, k_mse_bwd, n, F32(c->x), F32(c->target), k, F32(c->dx), n);
	return RT_OK;
}

/* ---- layer calls: every row's kernels run through cu_layer_run ---- */

void *cu_scratch(RtRank *r, CuScratch *s, int64_t bytes)
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
		if (ph == CU_W && c->grad)
			u[n++] = Use{&c->grad[j], 1};
	}
	for (int j = 0; j < c->nsaved; j++) // NULL: dropped (selective recomputation)
		if (c->saved[j])
			u[n++] = Use{c->saved[j], ph == CU_F};
	for (int j = 0; j < c->nheld; j++)
		if (c->held[j])
			u[n++] = Use{c->held[j], ph == CU_B};
	return n;
}

int cu_layer_run(RtRank *r, const RtLayerCall *c, int ph, CuBody body)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	Use u[7 + 4 * LAYER_MAX_TENSORS];
	int n = call_uses(c, ph, u);
	if (cu_cs_begin(r, u, n))
		return RT_EFAIL;
	CuScratch s = {};
	int rc = body(r, c, &s);
	for (int i = 0; i < s.n; i++) {
		s.b[i]->cs_last = cur(r)->cs_pos + 1; // used by this call: free past it
		cu_release(r, &cur(r)->free_dev, s.b[i]);
	}
	cu_cs_end(r, u, n);
	return rc;
}

/* y (m x n) = x (m x k) w (k x n) (+ b) */
int cu_proj_fwd(RtRank *r, const RtTensor *x, const RtTensor *w, const RtTensor *b, RtTensor *y)
{
	int64_t m = x->rows, k = x->cols, n = w->cols;
	if (b)
		LAUNCH(r, k_bias_rows, m * n, F32(y), F32(b), m, n);
	return cu_gemm(r, 0, 0, m, n, k, 1.0f, cu_mat(x), cu_mat(w), b ? 1.0f : 0.0f, F32(y), n, 0, 1);
}

/* dx (m x k) = dy (m x n) w^T (+ beta dx), w k x n */
int cu_proj_bwd_in(RtRank *r, const float *dy, const RtTensor *w, float *dx, int64_t m,
                   float beta)
{
	int64_t k = w->rows, n = w->cols;
	return cu_gemm(r, 0, 1, m, k, n, 1.0f, cu_mat(dy, m, n), cu_mat(w), beta, dx, k, 0, 1);
}

/* dw (k x n) += x^T (k x m) dy (m x n); db += column sums of dy (rows in order) */
int cu_proj_bwd_w(RtRank *r, const float *x, const float *dy, RtTensor *dw, RtTensor *db,
                  int64_t m)
{
	int64_t k = dw->rows, n = dw->cols;
	if (cu_gemm(r, 1, 0, k, n, m, 1.0f, cu_mat(x, m, k), cu_mat(dy, m, n), 1.0f, F32(dw), n, 0, 1))
		return RT_EFAIL;
	if (db) {
		int64_t blocks = (n + COLSUM_COLS - 1) / COLSUM_COLS;
		k_colsum<<<(int)(blocks < 65536 ? blocks : 65536), COLSUM_THREADS, 0, cur(r)->cs>>>(
			dy, F32(db), m, n);
		CUDACHECK(r, cudaGetLastError());
	}
	return RT_OK;
}

/* linear: y = x w + b; w in x out (row-major), b 1 x out. */
static int linear_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	return cu_proj_fwd(r, c->x, &c->param[0], &c->param[1], c->y);
}

static int linear_bwd_in_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	return cu_proj_bwd_in(r, F32(c->dy), &c->param[0], F32(c->dx), c->rows, 0.0f);
}

static int linear_bwd_w_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	return cu_proj_bwd_w(r, F32(c->x), F32(c->dy), &c->grad[0], &c->grad[1], c->rows);
}

/* dropout: its mask (none at P = 0) from the call's key; B reads only the mask (its x
 * is gone: the row's drops_x). */
static uint8_t *drop_mask(const RtLayerCall *c)
{
	return c->nsaved ? (uint8_t *)c->saved[DROPOUT_MASK]->data : NULL;
}

static int dropout_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	TkDrop dr = tk_drop(c->layer->drop, c->key);
	LAUNCH(r, k_dropout_fwd, numel(c->y), F32(c->x), drop_mask(c), F32(c->y), dr.key, dr.thr,
	       dr.scale, numel(c->y));
	return RT_OK;
}

static int dropout_bwd_in_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	TkDrop dr = tk_drop(c->layer->drop, c->key);
	LAUNCH(r, k_dropout_bwd, numel(c->dy), drop_mask(c), F32(c->dy), F32(c->dx), dr.scale,
	       numel(c->dy));
	return RT_OK;
}

CU_ROW_FN(linear_fwd, CU_F)
CU_ROW_FN(linear_bwd_in, CU_B)
CU_ROW_FN(linear_bwd_w, CU_W)
CU_ROW_FN(dropout_fwd, CU_F)
CU_ROW_FN(dropout_bwd_in, CU_B)

/* This file's rows (the matrix and elementwise kinds), merged into the device's table
 * (device_cuda.cu). */
extern const CuLayerRow cu_mat_rows[] = {
	{LAYER_LINEAR, {linear_fwd, linear_bwd_in, linear_bwd_w}},
	{LAYER_RELU, {relu_fwd, relu_bwd_in, nullptr}},
	{LAYER_GELU, {gelu_fwd, gelu_bwd_in, nullptr}},
	{LAYER_SQUARED_RELU, {squared_relu_fwd, squared_relu_bwd_in, nullptr}},
	{LAYER_MSE, {mse_fwd, mse_bwd_in, nullptr}},
	{LAYER_DROPOUT, {dropout_fwd, dropout_bwd_in, nullptr}},
};
extern const int cu_mat_nrows = sizeof cu_mat_rows / sizeof *cu_mat_rows;
