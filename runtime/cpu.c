/* The cpu device: tensor storage in host memory and the layers' math, for the threads
 * and mpi backends and for every --check reference.  GEMMs go through OpenBLAS's
 * cblas_sgemm; everything else is a plain loop.  Every kernel is deterministic for
 * given shapes, which is what lets --check compare a pipelined run with the
 * sequential reference bit for bit when summation orders agree.  Reductions that
 * produce a scalar (the loss) accumulate in double. */
#include "rt_private.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define F32(t) ((float *)(t)->data)

static int cpu_alloc(RtRank *r, RtTensor *t)
{
	size_t n = (size_t)t->rows * (size_t)t->cols * sizeof(float);
	/* 64-byte alignment keeps GEMM kernels on their fast paths and identical between
	 * runs (alignment can change OpenBLAS's choice of kernel). */
	size_t sz = (n + 63) & ~(size_t)63;
	t->data = aligned_alloc(64, sz ? sz : 64);
	if (!t->data)
		return rt_error(r, "out of memory allocating %zu bytes", n);
	return RT_OK;
}

static void cpu_free(RtRank *r, RtTensor *t)
{
	(void)r;
	free(t->data);
	t->data = NULL;
}

static int cpu_upload(RtRank *r, RtTensor *t, const float *host)
{
	(void)r;
	memcpy(t->data, host, (size_t)t->bytes);
	return RT_OK;
}

static int cpu_download(RtRank *r, const RtTensor *t, float *host)
{
	(void)r;
	memcpy(host, t->data, (size_t)t->bytes);
	return RT_OK;
}

static int cpu_zero(RtRank *r, RtTensor *t)
{
	(void)r;
	memset(t->data, 0, (size_t)t->bytes);
	return RT_OK;
}

static int same_shape(RtRank *r, const RtTensor *a, const RtTensor *b, const char *what)
{
	if (a->rows != b->rows || a->cols != b->cols)
		return rt_error(r, "internal: %s of a %lldx%lld and a %lldx%lld tensor", what,
		                (long long)a->rows, (long long)a->cols, (long long)b->rows,
		                (long long)b->cols);
	return RT_OK;
}

static int cpu_copy(RtRank *r, RtTensor *dst, const RtTensor *src)
{
	if (same_shape(r, dst, src, "copy"))
		return RT_EFAIL;
	memcpy(dst->data, src->data, (size_t)src->bytes);
	return RT_OK;
}

static int cpu_add(RtRank *r, RtTensor *dst, const RtTensor *src)
{
	if (same_shape(r, dst, src, "sum"))
		return RT_EFAIL;
	float *d = F32(dst);
	const float *s = F32(src);
	int64_t n = dst->rows * dst->cols;
	for (int64_t i = 0; i < n; i++)
		d[i] += s[i];
	return RT_OK;
}

static int cpu_scale(RtRank *r, RtTensor *t, float alpha)
{
	(void)r;
	float *d = F32(t);
	int64_t n = t->rows * t->cols;
	for (int64_t i = 0; i < n; i++)
		d[i] *= alpha;
	return RT_OK;
}

static int cpu_linear_fwd(RtRank *r, const RtTensor *x, const RtTensor *w, const RtTensor *b,
                      RtTensor *y)
{
	int64_t m = x->rows, k = x->cols, n = w->cols;
	if (w->rows != k || y->rows != m || y->cols != n || b->cols != n)
		return rt_error(r, "internal: linear of shapes %lldx%lld by %lldx%lld into %lldx%lld",
		                (long long)m, (long long)k, (long long)w->rows, (long long)w->cols,
		                (long long)y->rows, (long long)y->cols);
	float *yd = F32(y);
	const float *bd = F32(b);
	for (int64_t i = 0; i < m; i++)
		memcpy(yd + i * n, bd, (size_t)n * sizeof(float));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
	            F32(x), (int)k, F32(w), (int)n, 1.0f, yd, (int)n);
	return RT_OK;
}

static int cpu_linear_bwd_in(RtRank *r, const RtTensor *dy, const RtTensor *w, RtTensor *dx)
{
	int64_t m = dy->rows, n = dy->cols, k = w->rows;
	if (w->cols != n || dx->rows != m || dx->cols != k)
		return rt_error(r, "internal: linear input gradient of mismatched shapes");
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)k, (int)n, 1.0f,
	            F32(dy), (int)n, F32(w), (int)n, 0.0f, F32(dx), (int)k);
	return RT_OK;
}

static int cpu_linear_bwd_w(RtRank *r, const RtTensor *x, const RtTensor *dy, RtTensor *dw,
                        RtTensor *db)
{
	int64_t m = x->rows, k = x->cols, n = dy->cols;
	if (dy->rows != m || dw->rows != k || dw->cols != n || db->cols != n)
		return rt_error(r, "internal: linear weight gradient of mismatched shapes");
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)n, (int)m, 1.0f,
	            F32(x), (int)k, F32(dy), (int)n, 1.0f, F32(dw), (int)n);
	float *bd = F32(db);
	const float *g = F32(dy);
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++)
			bd[j] += g[i * n + j];
	return RT_OK;
}

#define GELU_C 0.7978845608f
#define GELU_A 0.044715f

static void relu_fwd(const float *a, float *o, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		o[i] = a[i] > 0 ? a[i] : 0;
}

static void relu_bwd(const float *a, const float *g, float *o, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		o[i] = a[i] > 0 ? g[i] : 0;
}

static void gelu_fwd(const float *a, float *o, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float v = a[i];
		o[i] = 0.5f * v * (1.0f + tanhf(GELU_C * (v + GELU_A * v * v * v)));
	}
}

static void gelu_bwd(const float *a, const float *g, float *o, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float v = a[i];
		float th = tanhf(GELU_C * (v + GELU_A * v * v * v));
		float d = 0.5f * (1.0f + th) +
		          0.5f * v * (1.0f - th * th) * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
		o[i] = g[i] * d;
	}
}

/* The elementwise layers' kernels, one row per layer kind (plan/layer.c): y = f(x) and
 * dx = dy * f'(x).  A kind without a row has no elementwise kernel here. */
static const struct {
	void (*fwd)(const float *x, float *y, int64_t n);
	void (*bwd)(const float *x, const float *dy, float *dx, int64_t n);
} elementwise[LAYER_COUNT] = {
	[LAYER_RELU] = {relu_fwd, relu_bwd},
	[LAYER_GELU] = {gelu_fwd, gelu_bwd},
};

static int no_kernel(RtRank *r, int kind)
{
	return rt_error(r, "internal: no elementwise CPU kernel for layer kind %s",
	                kind >= 0 && kind < LAYER_COUNT ? plan_layers[kind].name : "?");
}

static int cpu_act_fwd(RtRank *r, int kind, const RtTensor *x, RtTensor *y)
{
	if (same_shape(r, y, x, "activation"))
		return RT_EFAIL;
	if (kind < 0 || kind >= LAYER_COUNT || !elementwise[kind].fwd)
		return no_kernel(r, kind);
	elementwise[kind].fwd(F32(x), F32(y), x->rows * x->cols);
	return RT_OK;
}

static int cpu_act_bwd(RtRank *r, int kind, const RtTensor *x, const RtTensor *dy, RtTensor *dx)
{
	if (same_shape(r, dy, x, "activation gradient") ||
	    same_shape(r, dx, x, "activation gradient"))
		return RT_EFAIL;
	if (kind < 0 || kind >= LAYER_COUNT || !elementwise[kind].bwd)
		return no_kernel(r, kind);
	elementwise[kind].bwd(F32(x), F32(dy), F32(dx), x->rows * x->cols);
	return RT_OK;
}

static int cpu_mse_fwd(RtRank *r, const RtTensor *y, const RtTensor *t, RtTensor *loss, int slot)
{
	if (same_shape(r, y, t, "loss"))
		return RT_EFAIL;
	if (slot < 0 || slot >= loss->cols)
		return rt_error(r, "internal: loss slot %d of %lld", slot, (long long)loss->cols);
	const float *a = F32(y), *b = F32(t);
	int64_t n = y->rows * y->cols;
	double s = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = (double)a[i] - (double)b[i];
		s += d * d;
	}
	F32(loss)[slot] = (float)(s / (double)n);
	return RT_OK;
}

static int cpu_mse_bwd(RtRank *r, const RtTensor *y, const RtTensor *t, float scale, RtTensor *dy)
{
	if (same_shape(r, y, t, "loss gradient") || same_shape(r, dy, y, "loss gradient"))
		return RT_EFAIL;
	const float *a = F32(y), *b = F32(t);
	float *o = F32(dy);
	int64_t n = y->rows * y->cols;
	float k = (float)(2.0 * (double)scale / (double)n);
	for (int64_t i = 0; i < n; i++)
		o[i] = k * (a[i] - b[i]);
	return RT_OK;
}

static int cpu_sgd(RtRank *r, RtTensor *w, const RtTensor *g, float lr)
{
	if (same_shape(r, w, g, "optimizer step"))
		return RT_EFAIL;
	float *a = F32(w);
	const float *b = F32(g);
	int64_t n = w->rows * w->cols;
	for (int64_t i = 0; i < n; i++)
		a[i] -= lr * b[i];
	return RT_OK;
}

/* OpenBLAS threads are process-wide: --blas-threads per rank means per process. */
static int cpu_open(RtWorld *w)
{
	openblas_set_num_threads(w->opt.blas_threads > 0 ? w->opt.blas_threads : 1);
	return RT_OK;
}

static int cpu_sync(RtRank *r)
{
	(void)r;
	return RT_OK;
}

const RtDevice rt_device_cpu = {
	.name = "cpu",
	.async = 0,
	.open = cpu_open,
	.close = NULL,
	.rank_open = NULL,
	.rank_close = NULL,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.upload = cpu_upload,
	.download = cpu_download,
	.zero = cpu_zero,
	.copy = cpu_copy,
	.add = cpu_add,
	.scale = cpu_scale,
	.linear_fwd = cpu_linear_fwd,
	.linear_bwd_in = cpu_linear_bwd_in,
	.linear_bwd_w = cpu_linear_bwd_w,
	.act_fwd = cpu_act_fwd,
	.act_bwd = cpu_act_bwd,
	.mse_fwd = cpu_mse_fwd,
	.mse_bwd = cpu_mse_bwd,
	.sgd = cpu_sgd,
	.sync = cpu_sync,
};
