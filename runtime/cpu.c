/* The cpu device: tensor storage in host memory and the layers' math, for the threads
 * and mpi backends and for every --check reference.  The layers are one row of kernels
 * per layer kind (cpu_layers); the tensors each kind keeps are defined here too
 * (rt_layer_shapes), as this is the reference every other device agrees with.  GEMMs
 * go through OpenBLAS's cblas_sgemm; everything else is a plain loop.  Every kernel is
 * deterministic for given shapes, which is what lets --check compare a pipelined run
 * with the sequential reference bit for bit when summation orders agree.  Reductions
 * that produce a scalar (the loss) accumulate in double. */
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

/* ---- layers: one row of kernels per layer kind (rt_backend.h, "Layers") ---- */


/* linear: y = x w + b; w in x out (row-major), b 1 x out. */
static void linear_shapes(const PlanLayer *ly, int64_t rows, RtLayerTensors *t)
{
	(void)rows;
	t->nparams = 2;
	t->param[0] = (RtShape){ly->in, ly->out, RT_INIT_UNIFORM};
	t->param[1] = (RtShape){1, ly->out, RT_INIT_ZERO};
}

static int linear_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t m = c->rows, k = c->layer->in, n = c->layer->out;
	float *yd = F32(c->y);
	const float *bd = F32(&c->param[1]);
	for (int64_t i = 0; i < m; i++)
		memcpy(yd + i * n, bd, (size_t)n * sizeof(float));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
	            F32(c->x), (int)k, F32(&c->param[0]), (int)n, 1.0f, yd, (int)n);
	return RT_OK;
}

/* dx = dy w^T */
static int linear_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t m = c->rows, k = c->layer->in, n = c->layer->out;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)k, (int)n, 1.0f,
	            F32(c->dy), (int)n, F32(&c->param[0]), (int)n, 0.0f, F32(c->dx), (int)k);
	return RT_OK;
}

/* dw += x^T dy, db += column sums of dy */
static int linear_bwd_w(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	int64_t m = c->rows, k = c->layer->in, n = c->layer->out;
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)k, (int)n, (int)m, 1.0f,
	            F32(c->x), (int)k, F32(c->dy), (int)n, 1.0f, F32(&c->grad[0]), (int)n);
	float *bd = F32(&c->grad[1]);
	const float *g = F32(c->dy);
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++)
			bd[j] += g[i * n + j];
	return RT_OK;
}

#define GELU_C 0.7978845608f
#define GELU_A 0.044715f

static int relu_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x);
	float *o = F32(c->y);
	for (int64_t i = 0, n = c->rows * c->layer->in; i < n; i++)
		o[i] = a[i] > 0 ? a[i] : 0;
	return RT_OK;
}

static int relu_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x), *g = F32(c->dy);
	float *o = F32(c->dx);
	for (int64_t i = 0, n = c->rows * c->layer->in; i < n; i++)
		o[i] = a[i] > 0 ? g[i] : 0;
	return RT_OK;
}

static int gelu_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x);
	float *o = F32(c->y);
	for (int64_t i = 0, n = c->rows * c->layer->in; i < n; i++) {
		float v = a[i];
		o[i] = 0.5f * v * (1.0f + tanhf(GELU_C * (v + GELU_A * v * v * v)));
	}
	return RT_OK;
}

static int gelu_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x), *g = F32(c->dy);
	float *o = F32(c->dx);
	for (int64_t i = 0, n = c->rows * c->layer->in; i < n; i++) {
		float v = a[i];
		float th = tanhf(GELU_C * (v + GELU_A * v * v * v));
		float d = 0.5f * (1.0f + th) +
		          0.5f * v * (1.0f - th * th) * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
		o[i] = g[i] * d;
	}
	return RT_OK;
}

/* Mean of (x - target)^2 over all elements, accumulated in double, into loss[slot]. */
static int mse_fwd(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	if (c->slot < 0 || c->slot >= c->loss->cols)
		return rt_error(r, "internal: loss slot %d of %lld", c->slot, (long long)c->loss->cols);
	const float *a = F32(c->x), *b = F32(c->target);
	int64_t n = c->rows * c->layer->in;
	double s = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = (double)a[i] - (double)b[i];
		s += d * d;
	}
	F32(c->loss)[c->slot] = (float)(s / (double)n);
	return RT_OK;
}

/* dx = scale * 2 (x - target) / (rows * cols) */
static int mse_bwd_in(RtRank *r, const RtLayerCall *c)
{
	if (rt_layer_call_check(r, c))
		return RT_EFAIL;
	const float *a = F32(c->x), *b = F32(c->target);
	float *o = F32(c->dx);
	int64_t n = c->rows * c->layer->in;
	float k = (float)(2.0 * (double)c->scale / (double)n);
	for (int64_t i = 0; i < n; i++)
		o[i] = k * (a[i] - b[i]);
	return RT_OK;
}

const RtLayerShapeFn rt_layer_shapes[LAYER_COUNT] = {
	[LAYER_LINEAR] = linear_shapes,
};

static const RtLayerKernels cpu_layers[LAYER_COUNT] = {
	[LAYER_LINEAR] = {linear_fwd, linear_bwd_in, linear_bwd_w},
	[LAYER_RELU] = {relu_fwd, relu_bwd_in, NULL},
	[LAYER_GELU] = {gelu_fwd, gelu_bwd_in, NULL},
	[LAYER_MSE] = {mse_fwd, mse_bwd_in, NULL},
};

/* ---- the optimizer: one entry per OptimKind (rt_backend.h, "The optimizer") ---- */

static int cpu_sgd(RtRank *r, const RtOptStep *s)
{
	if (same_shape(r, s->w, s->g, "optimizer step"))
		return RT_EFAIL;
	float *w = F32(s->w);
	const float *g = F32(s->g);
	for (int64_t i = 0, n = s->w->rows * s->w->cols; i < n; i++)
		w[i] -= s->lr * g[i];
	return RT_OK;
}

static int cpu_adamw(RtRank *r, const RtOptStep *s)
{
	if (!s->m || !s->v)
		return rt_error(r, "internal: adamw step without its state");
	if (same_shape(r, s->w, s->g, "optimizer step") || same_shape(r, s->w, s->m, "adamw m") ||
	    same_shape(r, s->w, s->v, "adamw v"))
		return RT_EFAIL;
	float *w = F32(s->w), *m = F32(s->m), *v = F32(s->v);
	const float *g = F32(s->g);
	for (int64_t i = 0, n = s->w->rows * s->w->cols; i < n; i++) {
		float gi = g[i];
		float mi = s->beta1 * m[i] + s->one_minus_beta1 * gi;
		float vi = s->beta2 * v[i] + (s->one_minus_beta2 * gi) * gi;
		m[i] = mi;
		v[i] = vi;
		float denom = sqrtf(vi) / s->bc2 + s->eps;
		w[i] = w[i] * s->decay - s->step * (mi / denom);
	}
	return RT_OK;
}

static const RtOptimFn cpu_optim[OPTIM_COUNT] = {
	[OPTIM_SGD] = cpu_sgd,
	[OPTIM_ADAMW] = cpu_adamw,
};

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
	.layers = cpu_layers,
	.optim = cpu_optim,
	.sync = cpu_sync,
};
