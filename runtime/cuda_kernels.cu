/* The cuda device's kernels and GEMMs: every tensor and layer call of the device on the
 * rank's compute stream, ordered by cu_cs_begin()/cu_cs_end() (cuda_stream.cu).
 *
 * Kernels are grid-stride loops; the arithmetic mirrors cpu.c (rounded intrinsics where
 * nvcc would otherwise fuse a multiply-add the CPU does not), so everything but the
 * GEMMs, tanh and the loss's summation order matches the cpu device bit for bit.  GEMMs
 * are cuBLAS's, column-major on row-major tensors; with --dtype bf16 both operands are
 * rounded to bf16 by a small kernel and cublasGemmEx accumulates in f32; f32 GEMMs use
 * CUBLAS_DEFAULT_MATH, which never uses TF32. */
#include <cuda_bf16.h>
#include <string.h>

#include "cuda_dev.h"

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

/* The optimizer's entries by kind, as make_layers() below places layer rows. */
static constexpr CuOptimTable make_optim()
{
	CuOptimTable t = {};
	t.f[OPTIM_SGD] = cu_sgd;
	t.f[OPTIM_ADAMW] = cu_adamw;
	return t;
}

extern const CuOptimTable cu_optim = make_optim();

/* ---- GEMMs: column-major cuBLAS on row-major tensors (a row-major M is M^T to it) ---- */

/* C = A op B (+ beta C) in cuBLAS's terms; A has na elements, B nb (for bf16 copies). */
static int gemm(RtRank *r, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                int64_t k, const float *A, int64_t lda, int64_t na, const float *B, int64_t ldb,
                int64_t nb, float beta, float *C, int64_t ldc)
{
	CuRank *c = cur(r);
	const int64_t lim = 0x7fffffff;
	if (m > lim || n > lim || k > lim || lda > lim || ldb > lim || ldc > lim)
		return rt_error(r, "GEMM of %lldx%lldx%lld is too large for cuBLAS's int sizes",
		                (long long)m, (long long)n, (long long)k);
	const float one = 1.0f;
	if (m == 0 || n == 0)
		return RT_OK;
	if (!c->bf16) {
		CUBLASCHECK(r, cublasSgemm(c->blas, ta, tb, (int)m, (int)n, (int)k, &one, A, (int)lda,
		                           B, (int)ldb, &beta, C, (int)ldc));
		return RT_OK;
	}
	Block *a16 = cu_get_block(r, na * 2, 0), *b16 = a16 ? cu_get_block(r, nb * 2, 0) : NULL;
	int rc = RT_OK;
	if (!a16 || !b16)
		rc = RT_EFAIL;
	if (rc == RT_OK) {
		k_to_bf16<<<grid_of(na), 256, 0, c->cs>>>(A, (__nv_bfloat16 *)a16->ptr, na);
		k_to_bf16<<<grid_of(nb), 256, 0, c->cs>>>(B, (__nv_bfloat16 *)b16->ptr, nb);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess)
			rc = rt_cuda_fail(rt_rank_world(r), r, RT_LIB_CUDA, e, "k_to_bf16<<<>>>", __FILE__, __LINE__);
	}
	if (rc == RT_OK) {
		cublasStatus_t st = cublasGemmEx(c->blas, ta, tb, (int)m, (int)n, (int)k, &one, a16->ptr,
		                                 CUDA_R_16BF, (int)lda, b16->ptr, CUDA_R_16BF, (int)ldb,
		                                 &beta, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
		                                 CUBLAS_GEMM_DEFAULT);
		if (st != CUBLAS_STATUS_SUCCESS)
			rc = rt_cuda_fail(rt_rank_world(r), r, RT_LIB_CUBLAS, st, "cublasGemmEx(bf16)", __FILE__,
			                  __LINE__);
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

static int linear_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t m = c->rows, k = c->layer->in, n = c->layer->out;
	const RtTensor *w = &c->param[0], *b = &c->param[1];
	Use u[] = {{c->x, 0}, {w, 0}, {b, 0}, {c->y, 1}};
	if (cu_cs_begin(r, u, 4))
		return RT_EFAIL;
	LAUNCH(r, k_bias_rows, m * n, F32(c->y), F32(b), m, n);
	/* y^T (n x m) = w^T (n x k) x^T (k x m) */
	int rc = gemm(r, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, F32(w), n, k * n, F32(c->x), k, m * k,
	              1.0f, F32(c->y), n);
	cu_cs_end(r, u, 4);
	return rc;
}

/* dx = dy w^T */
static int linear_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t m = c->rows, k = c->layer->in, n = c->layer->out;
	const RtTensor *w = &c->param[0];
	Use u[] = {{c->dy, 0}, {w, 0}, {c->dx, 1}};
	if (cu_cs_begin(r, u, 3))
		return RT_EFAIL;
	/* dx^T (k x m) = (w^T)^T (k x n) dy^T (n x m) */
	int rc = gemm(r, CUBLAS_OP_T, CUBLAS_OP_N, k, m, n, F32(w), n, k * n, F32(c->dy), n, m * n,
	              0.0f, F32(c->dx), k);
	cu_cs_end(r, u, 3);
	return rc;
}

/* dw += x^T dy, db += column sums of dy */
static int linear_bwd_w(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t m = c->rows, k = c->layer->in, n = c->layer->out;
	RtTensor *dw = &c->grad[0], *db = &c->grad[1];
	Use u[] = {{c->x, 0}, {c->dy, 0}, {dw, 1}, {db, 1}};
	if (cu_cs_begin(r, u, 4))
		return RT_EFAIL;
	/* dw^T (n x k) += dy^T (n x m) (x^T)^T (m x k) */
	int rc = gemm(r, CUBLAS_OP_N, CUBLAS_OP_T, n, k, m, F32(c->dy), n, m * n, F32(c->x), k, m * k,
	              1.0f, F32(dw), n);
	if (rc == RT_OK) {
		k_colsum<<<grid_of(n), 256, 0, cur(r)->cs>>>(F32(c->dy), F32(db), m, n);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess)
			rc = rt_cuda_fail(rt_rank_world(r), r, RT_LIB_CUDA, e, "k_colsum<<<>>>", __FILE__, __LINE__);
	}
	cu_cs_end(r, u, 4);
	return rc;
}

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

/* The rows by kind, as C's designated initializers would place them (C++ has none for
 * arrays); a kind left out stays empty and rt_device_check refuses plans using it. */
static constexpr CuLayerTable make_layers()
{
	CuLayerTable t = {};
	t.k[LAYER_LINEAR] = {linear_fwd, linear_bwd_in, linear_bwd_w};
	t.k[LAYER_RELU] = {relu_fwd, relu_bwd_in, nullptr};
	t.k[LAYER_GELU] = {gelu_fwd, gelu_bwd_in, nullptr};
	t.k[LAYER_MSE] = {mse_fwd, mse_bwd_in, nullptr};
	return t;
}

extern const CuLayerTable cu_layers = make_layers();
