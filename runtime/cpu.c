/* The cpu device: tensor storage in host memory, the tensor operations and the
 * optimizer, for the threads and mpi backends and for every --check reference.  Its
 * layer kernels are a table of their own (rt_cpu_layers, cpu_layers.c), which this
 * device's struct points to.  Every operation here is a plain loop over f32 elements in
 * index order, so the cpu agrees with itself bit for bit from run to run; OpenBLAS is
 * here only for its thread count (the layers' GEMMs use it). */
#include "rt_private.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define F32(t) ((float *)(t)->data)

static int cpu_alloc(RtRank *r, RtTensor *t)
{
	size_t n = (size_t)t->bytes; // f32, or a mask's bytes
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

/* Round to nearest bf16, ties to even (the 16 bits kept are f32's top half); a NaN
 * stays a NaN (quieted), an infinity an infinity, and a finite value past bf16's
 * largest rounds to infinity, as a cast does. */
float rt_bf16(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		u = (u | 0x00400000u) & 0xffff0000u;
	else
		u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
	memcpy(&x, &u, 4);
	return x;
}

static int cpu_round_bf16(RtRank *r, RtTensor *t)
{
	(void)r;
	float *d = F32(t);
	for (int64_t i = 0, n = t->rows * t->cols; i < n; i++)
		d[i] = rt_bf16(d[i]);
	return RT_OK;
}

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

static int cpu_momentum(RtRank *r, const RtOptStep *s)
{
	if (!s->m)
		return rt_error(r, "internal: momentum step without its buffer");
	if (same_shape(r, s->w, s->g, "optimizer step") || same_shape(r, s->w, s->m, "momentum buffer"))
		return RT_EFAIL;
	float *w = F32(s->w), *m = F32(s->m);
	const float *g = F32(s->g);
	for (int64_t i = 0, n = s->w->rows * s->w->cols; i < n; i++) {
		float mi = s->momentum * m[i] + g[i];
		m[i] = mi;
		w[i] -= s->lr * mi;
	}
	return RT_OK;
}

static const RtOptimFn cpu_optim[OPTIM_COUNT] = {
	[OPTIM_SGD] = cpu_sgd,
	[OPTIM_ADAMW] = cpu_adamw,
	[OPTIM_MOMENTUM] = cpu_momentum,
};

/* OpenBLAS threads are process-wide: --blas-threads per rank means per process. */
/* Also opened for --check's reference under another device: then the ranks are not
 * in this host's memory. */
static int cpu_open(RtWorld *w)
{
	openblas_set_num_threads(w->opt.blas_threads > 0 ? w->opt.blas_threads : 1);
	return rt_host_mem_check(w, w->dev == &rt_device_cpu);
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
	.round_bf16 = cpu_round_bf16,
	.layers = rt_cpu_layers,
	.optim = cpu_optim,
	.sync = cpu_sync,
	.tp_split = 1,
	.seq_split = 1,
};
