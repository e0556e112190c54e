/* What the transformer kernel tests share (test_tkernels.c, test_tkernels_attn.c): the
 * tiny shapes; buffers poisoned with a NaN pattern and followed by guard floats, freed
 * together; central finite differences of L = sum(y * r); bit and tolerance comparisons;
 * and attention's test context (its buffers, forward and loss), which the attention tests
 * and the kernels-together tests (split backward, a GPT block, saved sizes) build on.
 * Included once per test program, after cmocka.h, math.h and string.h. */
#ifndef TESTS_TKERNELS_LIB_H
#define TESTS_TKERNELS_LIB_H

#include "../runtime/tkernels.h"

enum { B_ = 2, S_ = 5, D_ = 8, V_ = 11, F_ = 12, N_ = B_ * S_ };

/* ---- buffers: poisoned, guarded, freed together ---- */

#define GUARD 16
#define POISON 0x7fa5a5a5u // a quiet NaN: an unwritten element poisons whatever reads it
#define MAXBUF 160

typedef struct Arena {
	float *p[MAXBUF];
	int64_t n[MAXBUF];
	int count;
	uint64_t rng;
} Arena;

static inline int is_poison(float v)
{
	uint32_t u;
	memcpy(&u, &v, sizeof u);
	return u == POISON;
}

static inline float *buf(Arena *a, int64_t n)
{
	assert_true(a->count < MAXBUF);
	float *p = malloc((size_t)(n + GUARD) * sizeof(float));
	assert_non_null(p);
	uint32_t u = POISON;
	for (int64_t i = 0; i < n + GUARD; i++)
		memcpy(p + i, &u, sizeof u);
	a->p[a->count] = p;
	a->n[a->count++] = n;
	return p;
}

static inline float uniform(Arena *a)
{
	a->rng ^= a->rng << 13;
	a->rng ^= a->rng >> 7;
	a->rng ^= a->rng << 17;
	return (float)((double)(a->rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static inline float *rnd(Arena *a, int64_t n, float scale)
{
	float *p = buf(a, n);
	for (int64_t i = 0; i < n; i++)
		p[i] = scale * uniform(a);
	return p;
}

static inline float *zeros(Arena *a, int64_t n)
{
	float *p = buf(a, n);
	memset(p, 0, (size_t)n * sizeof(float));
	return p;
}

static inline float *copy_of(Arena *a, const float *s, int64_t n)
{
	float *p = buf(a, n);
	memcpy(p, s, (size_t)n * sizeof(float));
	return p;
}

/* Gains near 1, so norms neither vanish nor dominate. */
static inline float *gains(Arena *a, int64_t n)
{
	float *p = rnd(a, n, 0.3f);
	for (int64_t i = 0; i < n; i++)
		p[i] += 1.0f;
	return p;
}

static inline void guards_intact(const Arena *a)
{
	for (int k = 0; k < a->count; k++)
		for (int64_t i = 0; i < GUARD; i++)
			if (!is_poison(a->p[k][a->n[k] + i]))
				fail_msg("buffer %d (%lld floats): guard float %lld was written", k,
				         (long long)a->n[k], (long long)i);
}

static inline void fully_written(const float *p, int64_t n, const char *what)
{
	for (int64_t i = 0; i < n; i++)
		if (is_poison(p[i]))
			fail_msg("%s: element %lld of %lld was not written", what, (long long)i,
			         (long long)n);
}

static inline void arena_free(Arena *a)
{
	guards_intact(a);
	for (int k = 0; k < a->count; k++)
		free(a->p[k]);
	a->count = 0;
}

static inline double dot(const float *y, const float *r, int64_t n)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++)
		s += (double)y[i] * (double)r[i];
	return s;
}

/* ---- finite differences ---- */

typedef double (*LossFn)(void *ctx);

/* Central differences of loss() in every element of param against grad:
 * |g - n| <= 1e-2 |n| + 1e-3 max|n|, and the objective must really depend on param
 * (max|n| > 1e-3).  TK_FD_MARGIN in the environment prints the worst error/tolerance. */
static inline void check_grad(const char *what, LossFn loss, void *ctx, float *param,
                              const float *grad, int64_t n)
{
	const float eps = 1e-3f;
	double *num = malloc((size_t)n * sizeof(double)), peak = 0, worst = 0;
	assert_non_null(num);
	for (int64_t i = 0; i < n; i++) {
		float v = param[i], hi = v + eps, lo = v - eps;
		param[i] = hi;
		double lp = loss(ctx);
		param[i] = lo;
		double lm = loss(ctx);
		param[i] = v;
		num[i] = (lp - lm) / ((double)hi - (double)lo);
		peak = fmax(peak, fabs(num[i]));
	}
	for (int64_t i = 0; i < n; i++) {
		double tol = 1e-2 * fabs(num[i]) + 1e-3 * peak, err = fabs((double)grad[i] - num[i]);
		if (!(err <= tol)) {
			double g = grad[i], f = num[i];
			free(num);
			fail_msg("%s[%lld]: analytic %.6g, finite difference %.6g", what, (long long)i, g, f);
		}
		worst = fmax(worst, err / tol);
	}
	free(num);
	if (getenv("TK_FD_MARGIN"))
		print_message("%-18s worst error/tolerance %.3f (max |grad| %.3g)\n", what, worst, peak);
	if (!(peak > 1e-3))
		fail_msg("%s: the objective does not depend on it (largest derivative %g)", what, peak);
}

static inline void same_bits(const float *a, const float *b, int64_t n, const char *what)
{
	if (memcmp(a, b, (size_t)n * sizeof(float)))
		fail_msg("%s: results differ in bits", what);
}

static inline void close_to(const float *got, const double *want, int64_t n, double tol,
                            const char *what)
{
	for (int64_t i = 0; i < n; i++)
		if (!(fabs((double)got[i] - want[i]) <= tol))
			fail_msg("%s[%lld]: %.7g, reference %.7g", what, (long long)i, (double)got[i],
			         want[i]);
}

/* ---- attention's context ---- */

typedef struct AttnCtx {
	TkAttn a;
	float *x, *wqkv, *bqkv, *wo, *bo, *qkv, *p, *att, *y, *r;
	const TkDrop *dr; // with dropout on the probabilities: its mask and dropped p
	uint8_t *mask;
	float *pd;
} AttnCtx;

static inline double attn_loss(void *ctx)
{
	AttnCtx *c = ctx;
	tk_attn_fwd_drop(&c->a, c->dr, c->x, c->wqkv, c->bqkv, c->wo, c->bo, c->qkv, c->p,
	                 c->mask, c->pd, c->att, c->y);
	return dot(c->y, c->r, c->a.B * c->a.S * c->a.d);
}

static inline TkAttn shape(int64_t H, int64_t Hkv, int rope)
{
	return (TkAttn){.B = B_, .S = S_, .d = D_, .H = H, .Hkv = Hkv, .rope = rope,
	                .rope_theta = TK_ROPE_THETA};
}

static inline AttnCtx attn_setup(Arena *A, TkAttn a, int bias)
{
	assert_null(tk_attn_check(&a));
	int64_t N = a.B * a.S, d = a.d, nq = tk_attn_nqkv(&a);
	AttnCtx c = {.a = a};
	c.x = rnd(A, N * d, 1);
	c.wqkv = rnd(A, d * nq, 0.6f);
	c.bqkv = bias ? rnd(A, nq, 0.5f) : NULL;
	c.wo = rnd(A, d * d, 0.5f);
	c.bo = bias ? rnd(A, d, 0.5f) : NULL;
	c.qkv = buf(A, N * nq);
	c.p = buf(A, tk_attn_p_elems(&a));
	c.att = buf(A, N * d);
	c.y = buf(A, N * d);
	c.r = rnd(A, N * d, 1);
	return c;
}
#endif
