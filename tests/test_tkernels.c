/* Transformer kernel tests, layer by layer: linear, embedding, the norms, the MLPs (GELU
 * or SwiGLU), residual, the head (tied or not) and cross-entropy against central finite
 * differences of L = sum(y * r) for dx and every parameter gradient and against naive
 * double-precision references; then the kernels together: split backward == fused
 * backward bit for bit, a GPT block's determinism, the documented saved/held/workspace
 * sizes (buffers are poisoned with a NaN pattern and followed by guard floats that must
 * stay untouched), and the parameter and FLOP counts against published GPT-2 / Llama-2
 * and Megatron figures.  Attention and dropout are test_tkernels_attn.c's.  Shapes are
 * tiny (B=2, S=5, d=8). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "../plan/layer.h"
#include "../runtime/tkernels.h"
#include "tkernels_lib.h"

#define FLAG(k) LAYER_FLAG(LAYER_KEY_##k)

/* The layer table's statement of one layer's tensors (whole: tp 1). */
static LayerTensors tensors_of(PlanLayer l, LayerShape sh)
{
	LayerTensors t;
	plan_layer_tensors(&l, &sh, 1, &t);
	return t;
}

static int64_t elems(const LayerTensor *t, int n)
{
	int64_t e = 0;
	for (int i = 0; i < n; i++)
		e += t[i].rows * t[i].cols;
	return e;
}

/* ---- linear ---- */

typedef struct LinCtx {
	float *x, *w, *b, *y, *r;
	int64_t N, k, n;
} LinCtx;

static double lin_loss(void *p)
{
	LinCtx *c = p;
	tk_linear_fwd(c->x, c->w, c->b, c->y, c->N, c->k, c->n);
	return dot(c->y, c->r, c->N * c->n);
}

static void tk__linear__matches_reference_and_finite_differences(void **state)
{
	(void)state;
	for (int bias = 0; bias < 2; bias++) {
		Arena A = {.rng = 11 + (uint64_t)bias};
		LinCtx c = {.N = N_, .k = D_, .n = F_};
		c.x = rnd(&A, N_ * D_, 1);
		c.w = rnd(&A, D_ * F_, 0.5f);
		c.b = bias ? rnd(&A, F_, 0.5f) : NULL;
		c.y = buf(&A, N_ * F_);
		c.r = rnd(&A, N_ * F_, 1);
		float *dx = buf(&A, N_ * D_), *dw = zeros(&A, D_ * F_);
		float *db = bias ? zeros(&A, F_) : NULL;
		lin_loss(&c);
		double want[N_ * F_];
		for (int t = 0; t < N_; t++)
			for (int j = 0; j < F_; j++) {
				want[t * F_ + j] = bias ? c.b[j] : 0;
				for (int k = 0; k < D_; k++)
					want[t * F_ + j] += (double)c.x[t * D_ + k] * c.w[k * F_ + j];
			}
		close_to(c.y, want, N_ * F_, 1e-5, "linear y");
		tk_linear_bwd_in(c.r, c.w, dx, N_, D_, F_, 0);
		tk_linear_bwd_w(c.x, c.r, dw, db, N_, D_, F_);
		check_grad("linear dx", lin_loss, &c, c.x, dx, N_ * D_);
		check_grad("linear dw", lin_loss, &c, c.w, dw, D_ * F_);
		if (bias)
			check_grad("linear db", lin_loss, &c, c.b, db, F_);
		/* accumulate adds to what is there */
		float *dx2 = copy_of(&A, dx, N_ * D_);
		tk_linear_bwd_in(c.r, c.w, dx2, N_, D_, F_, 1);
		for (int64_t i = 0; i < N_ * D_; i++)
			assert_float_equal(dx2[i], 2 * dx[i], 1e-5);
		arena_free(&A);
	}
}

/* ---- embedding ---- */

typedef struct EmbCtx {
	int32_t tok[N_];
	float *wte, *wpe, *x, *r;
} EmbCtx;

static double emb_loss(void *p)
{
	EmbCtx *c = p;
	assert_int_equal(tk_embed_fwd(c->tok, c->wte, c->wpe, c->x, B_, S_, D_, V_), TK_OK);
	return dot(c->x, c->r, N_ * D_);
}

static void tk__embed_positions__matches_reference_and_finite_differences(void **state)
{
	(void)state;
	for (int learned = 0; learned < 2; learned++) {
		Arena A = {.rng = 21 + (uint64_t)learned};
		EmbCtx c;
		for (int t = 0; t < N_; t++)
			c.tok[t] = (int32_t)((t * 7 + 3) % 6); // repeats: rows accumulate
		c.wte = rnd(&A, V_ * D_, 1);
		c.wpe = learned ? rnd(&A, S_ * D_, 1) : NULL;
		c.x = buf(&A, N_ * D_);
		c.r = rnd(&A, N_ * D_, 1);
		emb_loss(&c);
		for (int t = 0; t < N_; t++)
			for (int j = 0; j < D_; j++)
				assert_true(c.x[t * D_ + j] ==
				            c.wte[c.tok[t] * D_ + j] + (learned ? c.wpe[(t % S_) * D_ + j] : 0));
		float *dwte = zeros(&A, V_ * D_), *dwpe = learned ? zeros(&A, S_ * D_) : NULL;
		assert_int_equal(tk_embed_bwd_w(c.tok, c.r, dwte, dwpe, B_, S_, D_, V_), TK_OK);
		check_grad("embed dwte", emb_loss, &c, c.wte, dwte, V_ * D_);
		if (learned)
			check_grad("embed dwpe", emb_loss, &c, c.wpe, dwpe, S_ * D_);
		arena_free(&A);
	}
}

static void tk__embed_bad_token__is_rejected_untouched(void **state)
{
	(void)state;
	Arena A = {.rng = 23};
	int32_t tok[N_] = {0};
	float *wte = rnd(&A, V_ * D_, 1), *x = buf(&A, N_ * D_), *dw = zeros(&A, V_ * D_);
	for (int bad = 0; bad < 2; bad++) {
		tok[N_ - 1] = bad ? V_ : -1;
		assert_int_equal(tk_embed_fwd(tok, wte, NULL, x, B_, S_, D_, V_), TK_EINVAL);
		assert_int_equal(tk_embed_bwd_w(tok, x, dw, NULL, B_, S_, D_, V_), TK_EINVAL);
		assert_true(is_poison(x[0]));
		assert_true(dw[0] == 0.0f);
	}
	arena_free(&A);
}

/* ---- norms ---- */

typedef struct NormCtx {
	int rms;
	float *x, *g, *b, *y, *mean, *rstd, *r;
} NormCtx;

static double norm_loss(void *p)
{
	NormCtx *c = p;
	if (c->rms)
		tk_rmsnorm_fwd(c->x, c->g, TK_NORM_EPS, c->y, c->rstd, N_, D_);
	else
		tk_layernorm_fwd(c->x, c->g, c->b, TK_NORM_EPS, c->y, c->mean, c->rstd, N_, D_);
	return dot(c->y, c->r, N_ * D_);
}

static void norm_case(int rms)
{
	Arena A = {.rng = 31 + (uint64_t)rms};
	NormCtx c = {.rms = rms};
	c.x = rnd(&A, N_ * D_, 1);
	c.g = gains(&A, D_);
	c.b = rms ? NULL : rnd(&A, D_, 0.5f);
	c.y = buf(&A, N_ * D_);
	c.mean = rms ? NULL : buf(&A, N_);
	c.rstd = buf(&A, N_);
	c.r = rnd(&A, N_ * D_, 1);
	norm_loss(&c);

	/* forward against the definition, in double */
	double want[N_ * D_];
	for (int i = 0; i < N_; i++) {
		double mu = 0, var = 0;
		for (int j = 0; j < D_; j++)
			mu += c.x[i * D_ + j] / (double)D_;
		if (rms)
			mu = 0;
		for (int j = 0; j < D_; j++)
			var += (c.x[i * D_ + j] - mu) * (c.x[i * D_ + j] - mu) / D_;
		for (int j = 0; j < D_; j++)
			want[i * D_ + j] = (c.x[i * D_ + j] - mu) / sqrt(var + 1e-5) * c.g[j] +
			                   (rms ? 0 : c.b[j]);
	}
	close_to(c.y, want, N_ * D_, 1e-5, rms ? "rmsnorm y" : "layernorm y");

	float *dx = buf(&A, N_ * D_), *dg = zeros(&A, D_), *db = rms ? NULL : zeros(&A, D_);
	if (rms) {
		tk_rmsnorm_bwd_in(c.x, c.g, c.rstd, c.r, dx, N_, D_);
		tk_rmsnorm_bwd_w(c.x, c.rstd, c.r, dg, N_, D_);
	} else {
		tk_layernorm_bwd_in(c.x, c.g, c.mean, c.rstd, c.r, dx, N_, D_);
		tk_layernorm_bwd_w(c.x, c.mean, c.rstd, c.r, dg, db, N_, D_);
	}
	check_grad("norm dx", norm_loss, &c, c.x, dx, N_ * D_);
	check_grad("norm dg", norm_loss, &c, c.g, dg, D_);
	if (!rms)
		check_grad("norm db", norm_loss, &c, c.b, db, D_);
	arena_free(&A);
}

static void tk__layernorm__matches_reference_and_finite_differences(void **state)
{
	(void)state;
	norm_case(0);
}

static void tk__rmsnorm__matches_reference_and_finite_differences(void **state)
{
	(void)state;
	norm_case(1);
}

/* ---- MLPs ---- */

typedef struct MlpCtx {
	int swiglu;
	float *x, *w1, *b1, *w2, *b2, *wg, *wu, *wd, *h, *a, *g, *u, *y, *r;
} MlpCtx;

static double mlp_loss(void *p)
{
	MlpCtx *c = p;
	if (c->swiglu)
		tk_swiglu_fwd(c->x, c->wg, c->wu, c->wd, c->g, c->u, c->a, c->y, N_, D_, F_);
	else
		tk_mlp_fwd(c->x, c->w1, c->b1, c->w2, c->b2, c->h, c->a, c->y, N_, D_, F_);
	return dot(c->y, c->r, N_ * D_);
}

static MlpCtx mlp_setup(Arena *A, int swiglu, int bias)
{
	MlpCtx c = {.swiglu = swiglu};
	c.x = rnd(A, N_ * D_, 1);
	if (swiglu) {
		c.wg = rnd(A, D_ * F_, 0.6f);
		c.wu = rnd(A, D_ * F_, 0.6f);
		c.wd = rnd(A, F_ * D_, 0.5f);
		c.g = buf(A, N_ * F_);
		c.u = buf(A, N_ * F_);
	} else {
		c.w1 = rnd(A, D_ * F_, 0.6f);
		c.b1 = bias ? rnd(A, F_, 0.5f) : NULL;
		c.w2 = rnd(A, F_ * D_, 0.5f);
		c.b2 = bias ? rnd(A, D_, 0.5f) : NULL;
		c.h = buf(A, N_ * F_);
	}
	c.a = buf(A, N_ * F_);
	c.y = buf(A, N_ * D_);
	c.r = rnd(A, N_ * D_, 1);
	return c;
}

static void mlp_reference(const MlpCtx *c, double *y)
{
	for (int t = 0; t < N_; t++) {
		double a[F_];
		for (int j = 0; j < F_; j++) {
			double h = c->swiglu ? 0 : c->b1 ? c->b1[j] : 0, u = 0;
			for (int k = 0; k < D_; k++) {
				h += (double)c->x[t * D_ + k] * (c->swiglu ? c->wg : c->w1)[k * F_ + j];
				if (c->swiglu)
					u += (double)c->x[t * D_ + k] * c->wu[k * F_ + j];
			}
			a[j] = c->swiglu ? h / (1 + exp(-h)) * u
			                 : 0.5 * h * (1 + tanh(sqrt(2 / M_PI) * (h + 0.044715 * h * h * h)));
		}
		for (int j = 0; j < D_; j++) {
			double s = c->swiglu ? 0 : c->b2 ? c->b2[j] : 0;
			for (int k = 0; k < F_; k++)
				s += a[k] * (c->swiglu ? c->wd : c->w2)[k * D_ + j];
			y[t * D_ + j] = s;
		}
	}
}

static void tk__mlp_gelu__matches_reference_and_finite_differences(void **state)
{
	(void)state;
	for (int bias = 0; bias < 2; bias++) {
		Arena A = {.rng = 81 + (uint64_t)bias};
		MlpCtx c = mlp_setup(&A, 0, bias);
		double want[N_ * D_];
		mlp_loss(&c);
		mlp_reference(&c, want);
		close_to(c.y, want, N_ * D_, 2e-5, "mlp y");
		float *dh = buf(&A, N_ * F_), *dx = buf(&A, N_ * D_);
		float *dw1 = zeros(&A, D_ * F_), *dw2 = zeros(&A, F_ * D_);
		float *db1 = bias ? zeros(&A, F_) : NULL, *db2 = bias ? zeros(&A, D_) : NULL;
		tk_mlp_bwd_in(c.w1, c.w2, c.h, c.r, dh, dx, N_, D_, F_);
		tk_mlp_bwd_w(c.x, c.a, c.r, dh, dw1, db1, dw2, db2, N_, D_, F_);
		check_grad("mlp dx", mlp_loss, &c, c.x, dx, N_ * D_);
		check_grad("mlp dw1", mlp_loss, &c, c.w1, dw1, D_ * F_);
		check_grad("mlp dw2", mlp_loss, &c, c.w2, dw2, F_ * D_);
		if (bias) {
			check_grad("mlp db1", mlp_loss, &c, c.b1, db1, F_);
			check_grad("mlp db2", mlp_loss, &c, c.b2, db2, D_);
		}
		arena_free(&A);
	}
}

/* With d = f = 1 and unit weights the MLP is gelu itself (and B gives gelu'): the tanh
 * form of GPT-2 and runtime/cpu_layers.c, in double, over a range with saturated ends. */
static void tk__mlp_gelu__equals_tanh_form_across_range(void **state)
{
	(void)state;
	enum { M = 203 };
	float x[M], h[M], a[M], y[M], dy[M], dh[M], dx[M], one = 1.0f;
	for (int i = 0; i < M; i++)
		x[i] = i < 201 ? (float)(i - 100) * 0.12f : (i == 201 ? -100.0f : 100.0f), dy[i] = 1;
	tk_mlp_fwd(x, &one, NULL, &one, NULL, h, a, y, M, 1, 1);
	tk_mlp_bwd_in(&one, &one, h, dy, dh, dx, M, 1, 1);
	for (int i = 0; i < M; i++) {
		double v = x[i], c = sqrt(2 / M_PI), u = c * (v + 0.044715 * v * v * v), t = tanh(u);
		double g = 0.5 * v * (1 + t);
		double dg = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v);
		assert_true(isfinite(y[i]) && isfinite(dx[i]));
		assert_float_equal(y[i], g, 1e-6 * fmax(1, fabs(g)));
		assert_float_equal(dx[i], dg, 1e-5);
	}
}

static void tk__mlp_swiglu__matches_reference_and_finite_differences(void **state)
{
	(void)state;
	Arena A = {.rng = 91};
	MlpCtx c = mlp_setup(&A, 1, 0);
	double want[N_ * D_];
	mlp_loss(&c);
	mlp_reference(&c, want);
	close_to(c.y, want, N_ * D_, 2e-5, "swiglu y");
	float *dg = buf(&A, N_ * F_), *du = buf(&A, N_ * F_), *dx = buf(&A, N_ * D_);
	float *dwg = zeros(&A, D_ * F_), *dwu = zeros(&A, D_ * F_), *dwd = zeros(&A, F_ * D_);
	tk_swiglu_bwd_in(c.wg, c.wu, c.wd, c.g, c.u, c.r, dg, du, dx, N_, D_, F_);
	tk_swiglu_bwd_w(c.x, c.a, c.r, dg, du, dwg, dwu, dwd, N_, D_, F_);
	check_grad("swiglu dx", mlp_loss, &c, c.x, dx, N_ * D_);
	check_grad("swiglu dwg", mlp_loss, &c, c.wg, dwg, D_ * F_);
	check_grad("swiglu dwu", mlp_loss, &c, c.wu, dwu, D_ * F_);
	check_grad("swiglu dwd", mlp_loss, &c, c.wd, dwd, F_ * D_);
	arena_free(&A);
}

/* With d = f = 1 and unit weights SwiGLU is silu(x) x (and B gives its derivative,
 * dg + du): the libm form in double over a range with saturated ends and past the
 * exponential's flush and overflow points (|x| = 87..89, 100), and NaN stays NaN. */
static void tk__mlp_swiglu__equals_libm_form_across_range(void **state)
{
	(void)state;
	enum { M = 210 };
	float x[M], g[M], u[M], a[M], y[M], dy[M], dg[M], du[M], dx[M], one = 1.0f;
	const float ends[] = {-100, -89, -88.5f, -87.5f, 87.5f, 88.5f, 89, 100, NAN};
	for (int i = 0; i < M; i++)
		x[i] = i < 201 ? (float)(i - 100) * 0.12f : ends[i - 201], dy[i] = 1;
	tk_swiglu_fwd(x, &one, &one, &one, g, u, a, y, M, 1, 1);
	tk_swiglu_bwd_in(&one, &one, &one, g, u, dy, dg, du, dx, M, 1, 1);
	for (int i = 0; i < M - 1; i++) {
		double v = x[i], s = 1 / (1 + exp(-v)), want = v * s * v;
		double dwant = v * s * (1 + v * (1 - s)) + v * s;
		assert_true(isfinite(y[i]) && isfinite(dx[i]));
		assert_float_equal(y[i], want, 1e-6 * fmax(1, fabs(want)));
		assert_float_equal(dx[i], dwant, 1e-5 * fmax(1, fabs(dwant)));
	}
	assert_true(isnan(y[M - 1]) && isnan(dx[M - 1]));
}

/* ---- residual ---- */

typedef struct ResCtx {
	float *x, *w, *s, *y, *r;
} ResCtx;

static double res_loss(void *p)
{
	ResCtx *c = p;
	tk_linear_fwd(c->x, c->w, NULL, c->s, N_, D_, D_);
	tk_residual_fwd(c->x, c->s, c->y, N_ * D_);
	return dot(c->y, c->r, N_ * D_);
}

static void tk__residual__routes_gradient_through_skip_and_sub_block(void **state)
{
	(void)state;
	Arena A = {.rng = 101};
	ResCtx c = {.x = rnd(&A, N_ * D_, 1), .w = rnd(&A, D_ * D_, 0.5f)};
	c.s = buf(&A, N_ * D_);
	c.y = buf(&A, N_ * D_);
	c.r = rnd(&A, N_ * D_, 1);
	res_loss(&c);
	float *dxs = buf(&A, N_ * D_), *dx = buf(&A, N_ * D_);
	tk_linear_bwd_in(c.r, c.w, dxs, N_, D_, D_, 0);
	tk_residual_bwd(c.r, dxs, dx, N_ * D_);
	check_grad("residual dx", res_loss, &c, c.x, dx, N_ * D_);
	/* in place: y over the sub-block's output, dx over dxs */
	res_loss(&c); // check_grad left perturbed results behind
	float *y = copy_of(&A, c.y, N_ * D_);
	tk_residual_fwd(c.x, c.s, c.s, N_ * D_);
	same_bits(c.s, y, N_ * D_, "residual in place");
	tk_residual_bwd(c.r, dxs, dxs, N_ * D_);
	same_bits(dxs, dx, N_ * D_, "residual gradient in place");
	arena_free(&A);
}

/* ---- head and cross-entropy ---- */

typedef struct HeadCtx {
	int32_t tok[N_], tgt[N_];
	float *wte, *x, *logits, *lse, *r;
	int xent; // 0: L = sum(logits * r) over x given; 1: embedding -> tied head -> loss
	float scale;
} HeadCtx;

static double head_loss(void *p)
{
	HeadCtx *c = p;
	if (!c->xent) {
		tk_head_fwd(c->x, c->wte, c->logits, N_, D_, V_);
		return dot(c->logits, c->r, N_ * V_);
	}
	double loss;
	assert_int_equal(tk_embed_fwd(c->tok, c->wte, NULL, c->x, B_, S_, D_, V_), TK_OK);
	tk_head_fwd(c->x, c->wte, c->logits, N_, D_, V_);
	assert_int_equal(tk_xent_fwd(c->logits, c->tgt, c->lse, &loss, N_, V_, V_), TK_OK);
	return loss;
}

static void tk__head_untied__matches_reference_and_finite_differences(void **state)
{
	(void)state;
	Arena A = {.rng = 111};
	HeadCtx c = {.xent = 0};
	c.wte = rnd(&A, V_ * D_, 0.5f);
	c.x = rnd(&A, N_ * D_, 1);
	c.logits = buf(&A, N_ * V_);
	c.r = rnd(&A, N_ * V_, 1);
	head_loss(&c);
	double want[N_ * V_];
	for (int t = 0; t < N_; t++)
		for (int v = 0; v < V_; v++) {
			want[t * V_ + v] = 0;
			for (int j = 0; j < D_; j++)
				want[t * V_ + v] += (double)c.x[t * D_ + j] * c.wte[v * D_ + j];
		}
	close_to(c.logits, want, N_ * V_, 1e-5, "head logits");
	float *dx = buf(&A, N_ * D_), *dw = zeros(&A, V_ * D_);
	tk_head_bwd_in(c.wte, c.r, dx, N_, D_, V_);
	tk_head_bwd_w(c.x, c.r, dw, N_, D_, V_);
	check_grad("head dx", head_loss, &c, c.x, dx, N_ * D_);
	check_grad("head dwv", head_loss, &c, c.wte, dw, V_ * D_);
	arena_free(&A);
}

/* Embedding and head share wte: its gradient is the sum of both uses. */
static void tk__head_tied_with_xent__matches_finite_differences(void **state)
{
	(void)state;
	Arena A = {.rng = 121};
	HeadCtx c = {.xent = 1};
	for (int t = 0; t < N_; t++) {
		c.tok[t] = (int32_t)((t * 5 + 1) % V_);
		c.tgt[t] = (int32_t)((t * 3 + 2) % V_); // next-token targets, made up
	}
	c.wte = rnd(&A, V_ * D_, 1);
	c.x = buf(&A, N_ * D_);
	c.logits = buf(&A, N_ * V_);
	c.lse = buf(&A, N_);
	head_loss(&c);
	float *dx = buf(&A, N_ * D_), *dwte = zeros(&A, V_ * D_);
	assert_int_equal(tk_xent_bwd(c.logits, c.tgt, c.lse, 1.0f, c.logits, N_, V_, V_), TK_OK);
	tk_head_bwd_in(c.wte, c.logits, dx, N_, D_, V_);
	tk_head_bwd_w(c.x, c.logits, dwte, N_, D_, V_);
	assert_int_equal(tk_embed_bwd_w(c.tok, dx, dwte, NULL, B_, S_, D_, V_), TK_OK);
	check_grad("tied dwte", head_loss, &c, c.wte, dwte, V_ * D_);
	arena_free(&A);
}

typedef struct XentCtx {
	int32_t tgt[N_];
	float *logits, *lse;
	float scale;
} XentCtx;

static double xent_loss(void *p)
{
	XentCtx *c = p;
	double loss;
	assert_int_equal(tk_xent_fwd(c->logits, c->tgt, c->lse, &loss, N_, V_, V_), TK_OK);
	return c->scale * loss;
}

static void tk__xent__matches_reference_and_finite_differences(void **state)
{
	(void)state;
	Arena A = {.rng = 131};
	XentCtx c = {.scale = 0.5f};
	for (int t = 0; t < N_; t++)
		c.tgt[t] = (int32_t)((t * 4 + 3) % V_);
	c.logits = rnd(&A, N_ * V_, 3);
	c.logits[7] = 80.0f; // a large logit must not overflow
	c.lse = buf(&A, N_);
	double loss = xent_loss(&c) / c.scale, want = 0;
	for (int t = 0; t < N_; t++) {
		double s = 0;
		for (int j = 0; j < V_; j++)
			s += exp((double)c.logits[t * V_ + j]);
		want += (log(s) - c.logits[t * V_ + c.tgt[t]]) / N_;
	}
	assert_float_equal(loss, want, 1e-6);
	float *dl = buf(&A, N_ * V_);
	assert_int_equal(tk_xent_bwd(c.logits, c.tgt, c.lse, c.scale, dl, N_, V_, V_), TK_OK);
	check_grad("xent dlogits", xent_loss, &c, c.logits, dl, N_ * V_);
	/* in place gives the same bits */
	xent_loss(&c); // check_grad left perturbed statistics behind
	float *inplace = copy_of(&A, c.logits, N_ * V_);
	assert_int_equal(tk_xent_bwd(inplace, c.tgt, c.lse, c.scale, inplace, N_, V_, V_), TK_OK);
	same_bits(inplace, dl, N_ * V_, "xent in place");
	arena_free(&A);
}

static void tk__xent_uniform_logits__loss_is_log_v(void **state)
{
	(void)state;
	Arena A = {.rng = 141};
	float *logits = zeros(&A, N_ * V_), *lse = buf(&A, N_);
	int32_t tgt[N_];
	for (int t = 0; t < N_; t++)
		tgt[t] = t % V_;
	for (int k = 0; k < 2; k++) {
		double loss = -1;
		assert_int_equal(tk_xent_fwd(logits, tgt, lse, &loss, N_, V_, V_), TK_OK);
		assert_float_equal(loss, log((double)V_), 1e-6);
		for (int i = 0; i < N_ * V_; i++)
			logits[i] = 4.25f; // any constant is uniform too
	}
	tgt[3] = V_;
	double loss = -1;
	assert_int_equal(tk_xent_fwd(logits, tgt, lse, &loss, N_, V_, V_), TK_EINVAL);
	assert_int_equal(tk_xent_bwd(logits, tgt, lse, 1.0f, logits, N_, V_, V_), TK_EINVAL);
	assert_true(loss == -1 && logits[0] == 4.25f);
	arena_free(&A);
}

/* ---- split backward, determinism, sizes ---- */

/* Two microbatches: fused backward of each in turn against both input gradients first
 * and both weight gradients after (a zero-bubble order); same bits. */
static void tk__split_backward__equals_fused_bit_for_bit(void **state)
{
	(void)state;
	Arena A = {.rng = 151};
	TkAttn a = shape(2, 1, 1);
	int64_t nq = tk_attn_nqkv(&a), N = N_, d = D_;
	AttnCtx m[2] = {attn_setup(&A, a, 1), attn_setup(&A, a, 1)};
	m[1].wqkv = m[0].wqkv, m[1].bqkv = m[0].bqkv, m[1].wo = m[0].wo, m[1].bo = m[0].bo;
	MlpCtx s[2] = {mlp_setup(&A, 1, 0), mlp_setup(&A, 1, 0)};
	s[1].wg = s[0].wg, s[1].wu = s[0].wu, s[1].wd = s[0].wd;
	MlpCtx g[2] = {mlp_setup(&A, 0, 1), mlp_setup(&A, 0, 1)};
	g[1].w1 = g[0].w1, g[1].b1 = g[0].b1, g[1].w2 = g[0].w2, g[1].b2 = g[0].b2;
	NormCtx n[2];
	float *lg = gains(&A, D_), *lb = rnd(&A, D_, 0.5f);
	for (int k = 0; k < 2; k++) {
		attn_loss(&m[k]);
		mlp_loss(&s[k]);
		mlp_loss(&g[k]);
		n[k] = (NormCtx){.x = rnd(&A, N * d, 1), .g = lg, .b = lb, .y = buf(&A, N * d),
		                 .mean = buf(&A, N), .rstd = buf(&A, N), .r = rnd(&A, N * d, 1)};
		norm_loss(&n[k]);
	}
	float *work = buf(&A, tk_attn_workspace(&a));
	struct {
		float *dx[2], *dqkv[2], *dwqkv, *dbqkv, *dwo, *dbo;
		float *sdx[2], *sg[2], *su[2], *dwg, *dwu, *dwd;
		float *gdx[2], *gdh[2], *dw1, *db1, *dw2, *db2;
		float *ndx[2], *ndg, *ndb;
	} o[2];
	for (int v = 0; v < 2; v++) {
		for (int k = 0; k < 2; k++) {
			o[v].dx[k] = buf(&A, N * d), o[v].dqkv[k] = buf(&A, N * nq);
			o[v].sdx[k] = buf(&A, N * d), o[v].sg[k] = buf(&A, N * F_),
			o[v].su[k] = buf(&A, N * F_);
			o[v].gdx[k] = buf(&A, N * d), o[v].gdh[k] = buf(&A, N * F_);
			o[v].ndx[k] = buf(&A, N * d);
		}
		o[v].dwqkv = zeros(&A, d * nq), o[v].dbqkv = zeros(&A, nq);
		o[v].dwo = zeros(&A, d * d), o[v].dbo = zeros(&A, d);
		o[v].dwg = zeros(&A, d * F_), o[v].dwu = zeros(&A, d * F_), o[v].dwd = zeros(&A, F_ * d);
		o[v].dw1 = zeros(&A, d * F_), o[v].db1 = zeros(&A, F_);
		o[v].dw2 = zeros(&A, F_ * d), o[v].db2 = zeros(&A, d);
		o[v].ndg = zeros(&A, d), o[v].ndb = zeros(&A, d);
	}
	for (int k = 0; k < 2; k++) { // fused, microbatch by microbatch
		tk_attn_bwd(&a, m[k].x, m[k].wqkv, m[k].wo, m[k].qkv, m[k].p, m[k].att, m[k].r,
		            o[0].dqkv[k], o[0].dx[k], o[0].dwqkv, o[0].dbqkv, o[0].dwo, o[0].dbo, work);
		tk_swiglu_bwd(s[k].x, s[k].wg, s[k].wu, s[k].wd, s[k].g, s[k].u, s[k].a, s[k].r,
		              o[0].sg[k], o[0].su[k], o[0].sdx[k], o[0].dwg, o[0].dwu, o[0].dwd, N, d,
		              F_);
		tk_mlp_bwd(g[k].x, g[k].w1, g[k].w2, g[k].h, g[k].a, g[k].r, o[0].gdh[k], o[0].gdx[k],
		           o[0].dw1, o[0].db1, o[0].dw2, o[0].db2, N, d, F_);
		tk_layernorm_bwd(n[k].x, lg, n[k].mean, n[k].rstd, n[k].r, o[0].ndx[k], o[0].ndg,
		                 o[0].ndb, N, d);
	}
	for (int k = 0; k < 2; k++) { // every B first ...
		tk_attn_bwd_in(&a, m[k].wqkv, m[k].wo, m[k].qkv, m[k].p, m[k].r, o[1].dqkv[k],
		               o[1].dx[k], work);
		tk_swiglu_bwd_in(s[k].wg, s[k].wu, s[k].wd, s[k].g, s[k].u, s[k].r, o[1].sg[k],
		                 o[1].su[k], o[1].sdx[k], N, d, F_);
		tk_mlp_bwd_in(g[k].w1, g[k].w2, g[k].h, g[k].r, o[1].gdh[k], o[1].gdx[k], N, d, F_);
		tk_layernorm_bwd_in(n[k].x, lg, n[k].mean, n[k].rstd, n[k].r, o[1].ndx[k], N, d);
	}
	memset(work, 0xff, (size_t)tk_attn_workspace(&a) * sizeof(float)); // W must not need it
	for (int k = 0; k < 2; k++) { // ... then every W
		tk_attn_bwd_w(&a, m[k].x, m[k].att, m[k].r, o[1].dqkv[k], o[1].dwqkv, o[1].dbqkv,
		              o[1].dwo, o[1].dbo);
		tk_swiglu_bwd_w(s[k].x, s[k].a, s[k].r, o[1].sg[k], o[1].su[k], o[1].dwg, o[1].dwu,
		                o[1].dwd, N, d, F_);
		tk_mlp_bwd_w(g[k].x, g[k].a, g[k].r, o[1].gdh[k], o[1].dw1, o[1].db1, o[1].dw2,
		             o[1].db2, N, d, F_);
		tk_layernorm_bwd_w(n[k].x, n[k].mean, n[k].rstd, n[k].r, o[1].ndg, o[1].ndb, N, d);
	}
	for (int k = 0; k < 2; k++) {
		same_bits(o[0].dx[k], o[1].dx[k], N * d, "attention dx");
		same_bits(o[0].sdx[k], o[1].sdx[k], N * d, "swiglu dx");
		same_bits(o[0].gdx[k], o[1].gdx[k], N * d, "mlp dx");
		same_bits(o[0].ndx[k], o[1].ndx[k], N * d, "layernorm dx");
	}
	same_bits(o[0].dwqkv, o[1].dwqkv, d * nq, "dwqkv");
	same_bits(o[0].dbqkv, o[1].dbqkv, nq, "dbqkv");
	same_bits(o[0].dwo, o[1].dwo, d * d, "dwo");
	same_bits(o[0].dbo, o[1].dbo, d, "dbo");
	same_bits(o[0].dwg, o[1].dwg, d * F_, "dwg");
	same_bits(o[0].dwu, o[1].dwu, d * F_, "dwu");
	same_bits(o[0].dwd, o[1].dwd, d * F_, "dwd");
	same_bits(o[0].dw1, o[1].dw1, d * F_, "dw1");
	same_bits(o[0].db1, o[1].db1, F_, "db1");
	same_bits(o[0].dw2, o[1].dw2, d * F_, "dw2");
	same_bits(o[0].db2, o[1].db2, d, "db2");
	same_bits(o[0].ndg, o[1].ndg, d, "layernorm dg");
	same_bits(o[0].ndb, o[1].ndb, d, "layernorm db");
	arena_free(&A);
}

/* A GPT-style block on tokens: embedding with learned positions, layernorm, attention,
 * residual, rmsnorm, SwiGLU, residual, tied head, cross-entropy; forward and backward.
 * Writes the loss and every gradient (dwte, dwpe, dwqkv, dwo, dwg, dwu, dwd) to out. */
enum { BLOCK_OUT = 1 + V_ * D_ + S_ * D_ + D_ * 3 * D_ + D_ * D_ + 3 * D_ * F_ };

static void run_block(double *loss, float *out)
{
	Arena A = {.rng = 161};
	TkAttn a = shape(2, 2, 0);
	int64_t N = N_, d = D_, nq = tk_attn_nqkv(&a);
	int32_t tok[N_], tgt[N_];
	for (int t = 0; t < N_; t++)
		tok[t] = (int32_t)((t * 5 + 2) % V_), tgt[t] = (int32_t)((t * 5 + 7) % V_);
	float *wte = rnd(&A, V_ * d, 1), *wpe = rnd(&A, S_ * d, 0.5f), *g1 = gains(&A, d);
	float *b1 = rnd(&A, d, 0.3f), *g2 = gains(&A, d);
	float *wqkv = rnd(&A, d * nq, 0.5f), *wo = rnd(&A, d * d, 0.5f);
	float *wg = rnd(&A, d * F_, 0.5f), *wu = rnd(&A, d * F_, 0.5f), *wd = rnd(&A, F_ * d, 0.5f);
	float *x0 = buf(&A, N * d), *n1 = buf(&A, N * d), *mean1 = buf(&A, N), *rs1 = buf(&A, N);
	float *qkv = buf(&A, N * nq), *p = buf(&A, tk_attn_p_elems(&a)), *att = buf(&A, N * d);
	float *x1 = buf(&A, N * d), *n2 = buf(&A, N * d), *rs2 = buf(&A, N);
	float *gg = buf(&A, N * F_), *uu = buf(&A, N * F_), *aa = buf(&A, N * F_);
	float *x2 = buf(&A, N * d), *logits = buf(&A, N * V_), *lse = buf(&A, N);
	assert_int_equal(tk_embed_fwd(tok, wte, wpe, x0, B_, S_, d, V_), TK_OK);
	tk_layernorm_fwd(x0, g1, b1, TK_NORM_EPS, n1, mean1, rs1, N, d);
	tk_attn_fwd(&a, n1, wqkv, NULL, wo, NULL, qkv, p, att, x1);
	tk_residual_fwd(x0, x1, x1, N * d);
	tk_rmsnorm_fwd(x1, g2, TK_NORM_EPS, n2, rs2, N, d);
	tk_swiglu_fwd(n2, wg, wu, wd, gg, uu, aa, x2, N, d, F_);
	tk_residual_fwd(x1, x2, x2, N * d);
	tk_head_fwd(x2, wte, logits, N, d, V_);
	assert_int_equal(tk_xent_fwd(logits, tgt, lse, loss, N, V_, V_), TK_OK);

	float *dwte = zeros(&A, V_ * d), *dwpe = zeros(&A, S_ * d), *dg1 = zeros(&A, d);
	float *db1 = zeros(&A, d), *dg2 = zeros(&A, d), *dwqkv = zeros(&A, d * nq);
	float *dwo = zeros(&A, d * d), *dwg = zeros(&A, d * F_), *dwu = zeros(&A, d * F_);
	float *dwd = zeros(&A, F_ * d), *dx = buf(&A, N * d), *dsub = buf(&A, N * d);
	float *dn = buf(&A, N * d), *dgg = buf(&A, N * F_), *duu = buf(&A, N * F_);
	float *dqkv = buf(&A, N * nq), *work = buf(&A, tk_attn_workspace(&a));
	float *dres = buf(&A, N * d);
	assert_int_equal(tk_xent_bwd(logits, tgt, lse, 1.0f, logits, N, V_, V_), TK_OK);
	tk_head_bwd_in(wte, logits, dx, N, d, V_);
	tk_head_bwd_w(x2, logits, dwte, N, d, V_);
	tk_swiglu_bwd(n2, wg, wu, wd, gg, uu, aa, dx, dgg, duu, dn, dwg, dwu, dwd, N, d, F_);
	tk_rmsnorm_bwd(x1, g2, rs2, dn, dsub, dg2, N, d);
	tk_residual_bwd(dx, dsub, dres, N * d);
	tk_attn_bwd(&a, n1, wqkv, wo, qkv, p, att, dres, dqkv, dn, dwqkv, NULL, dwo, NULL, work);
	tk_layernorm_bwd(x0, g1, mean1, rs1, dn, dsub, dg1, db1, N, d);
	tk_residual_bwd(dres, dsub, dx, N * d);
	assert_int_equal(tk_embed_bwd_w(tok, dx, dwte, dwpe, B_, S_, d, V_), TK_OK);
	float *w = out;
	const struct {
		const float *p;
		int64_t n;
	} parts[] = {{dwte, V_ * d}, {dwpe, S_ * d}, {dwqkv, d * nq}, {dwo, d * d},
	             {dwg, d * F_}, {dwu, d * F_}, {dwd, F_ * d}, {dg1, 1}};
	for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
		memcpy(w, parts[k].p, (size_t)parts[k].n * sizeof(float));
		w += parts[k].n;
	}
	assert_int_equal(w - out, BLOCK_OUT);
	arena_free(&A);
}

static void tk__gpt_block__is_deterministic(void **state)
{
	(void)state;
	float *r1 = malloc(BLOCK_OUT * sizeof(float)), *r2 = malloc(BLOCK_OUT * sizeof(float));
	assert_true(r1 && r2);
	double l1, l2;
	run_block(&l1, r1);
	run_block(&l2, r2);
	assert_true(isfinite(l1) && l1 > 0);
	assert_memory_equal(&l1, &l2, sizeof l1);
	same_bits(r1, r2, BLOCK_OUT, "block gradients");
	int nonzero = 0;
	for (int i = 0; i < BLOCK_OUT; i++)
		nonzero += r1[i] != 0 && isfinite(r1[i]);
	assert_true(nonzero > BLOCK_OUT * 3 / 4);
	free(r1);
	free(r2);
}

/* Buffers of exactly the documented sizes: forward and backward write every element
 * of each saved, held and workspace buffer and nothing past it (guards). */
static void tk__saved_buffers__match_documented_sizes(void **state)
{
	(void)state;
	for (int v = 0; v < 2; v++) {
		Arena A = {.rng = 171 + (uint64_t)v};
		TkAttn a = v ? shape(2, 1, 1) : shape(2, 2, 0);
		int64_t N = a.B * a.S, d = a.d, nq = tk_attn_nqkv(&a);
		assert_int_equal(nq, (a.H + 2 * a.Hkv) * (d / a.H));
		assert_int_equal(tk_attn_p_elems(&a), a.B * a.H * a.S * a.S);
		assert_int_equal(tk_attn_workspace(&a), N * d + a.S * a.S);
		PlanLayer at = {LAYER_ATTN, (int)d, (int)d, (int)a.H, (int)a.Hkv, 0, 0, a.rope ? FLAG(ROPE) : 0, 0};
		LayerTensors t = tensors_of(at, (LayerShape){N, a.B, a.S, 0, 0, PREC_F32, 1});
		assert_int_equal(elems(t.saved, t.nsaved), N * nq + a.B * a.H * a.S * a.S + N * d);
		assert_int_equal(elems(t.held, t.nheld), N * nq);
		assert_int_equal(elems(&t.work, 1), N * d + a.S * a.S);
		AttnCtx c = attn_setup(&A, a, v);
		float *dqkv = buf(&A, N * nq), *dx = buf(&A, N * d), *work = buf(&A, N * d + a.S * a.S);
		float *dwqkv = zeros(&A, d * nq), *dwo = zeros(&A, d * d);
		float *dbqkv = v ? zeros(&A, nq) : NULL, *dbo = v ? zeros(&A, d) : NULL;
		attn_loss(&c);
		fully_written(c.qkv, N * nq, "attention qkv");
		fully_written(c.p, a.B * a.H * a.S * a.S, "attention p");
		fully_written(c.att, N * d, "attention att");
		tk_attn_bwd(&c.a, c.x, c.wqkv, c.wo, c.qkv, c.p, c.att, c.r, dqkv, dx, dwqkv, dbqkv,
		            dwo, dbo, work);
		fully_written(dqkv, N * nq, "attention dqkv");
		fully_written(dx, N * d, "attention dx");
		fully_written(work, N * d + a.S * a.S, "attention workspace");
		arena_free(&A);
	}
	Arena A = {.rng = 181};
	/* the buffers below, kind by kind */
	LayerShape sh = {N_, 1, N_, V_, 0, PREC_F32, 1};
	LayerTensors t = tensors_of((PlanLayer){LAYER_MLP, D_, D_, 0, 0, F_, 0, 0, 0}, sh);
	assert_int_equal(elems(t.saved, t.nsaved), 2 * N_ * F_); // h, a
	assert_int_equal(elems(t.held, t.nheld), N_ * F_);       // dh
	t = tensors_of((PlanLayer){LAYER_SWIGLU, D_, D_, 0, 0, F_, 0, 0, 0}, sh);
	assert_int_equal(elems(t.saved, t.nsaved), 3 * N_ * F_); // g, u, a
	assert_int_equal(elems(t.held, t.nheld), 2 * N_ * F_);   // dg, du
	t = tensors_of((PlanLayer){LAYER_LAYERNORM, D_, D_, 0, 0, 0, 0, 0, 0}, sh);
	assert_int_equal(elems(t.saved, t.nsaved), 2 * N_); // mean, rstd
	t = tensors_of((PlanLayer){LAYER_RMSNORM, D_, D_, 0, 0, 0, 0, 0, 0}, sh);
	assert_int_equal(elems(t.saved, t.nsaved), N_); // rstd
	t = tensors_of((PlanLayer){LAYER_XENT, V_, V_, 0, 0, 0, 0, 0, 0}, sh);
	assert_int_equal(elems(t.saved, t.nsaved), 2 * N_); // lse, targets
	t = tensors_of((PlanLayer){LAYER_HEAD, D_, V_, 0, 0, 0, 0, 0, 0}, sh);
	assert_int_equal(t.nsaved + t.nheld, 0); // dy is dlogits
	t = tensors_of((PlanLayer){LAYER_EMBED, 1, D_, 0, 0, 0, 0, 0, 0}, sh);
	assert_int_equal(t.nsaved + t.nheld, 0);
	MlpCtx g = mlp_setup(&A, 0, 1), s = mlp_setup(&A, 1, 0);
	mlp_loss(&g);
	mlp_loss(&s);
	fully_written(g.h, N_ * F_, "mlp h");
	fully_written(g.a, N_ * F_, "mlp a");
	fully_written(s.g, N_ * F_, "swiglu g");
	fully_written(s.u, N_ * F_, "swiglu u");
	fully_written(s.a, N_ * F_, "swiglu a");
	float *dh = buf(&A, N_ * F_), *dg = buf(&A, N_ * F_), *du = buf(&A, N_ * F_);
	float *dx = buf(&A, N_ * D_);
	tk_mlp_bwd_in(g.w1, g.w2, g.h, g.r, dh, dx, N_, D_, F_);
	tk_swiglu_bwd_in(s.wg, s.wu, s.wd, s.g, s.u, s.r, dg, du, dx, N_, D_, F_);
	fully_written(dh, N_ * F_, "mlp dh");
	fully_written(dg, N_ * F_, "swiglu dg");
	fully_written(du, N_ * F_, "swiglu du");
	NormCtx n = {.x = rnd(&A, N_ * D_, 1), .g = gains(&A, D_), .b = rnd(&A, D_, 1),
	             .y = buf(&A, N_ * D_), .mean = buf(&A, N_), .rstd = buf(&A, N_)};
	n.r = n.y;
	norm_loss(&n);
	fully_written(n.mean, N_, "layernorm mean");
	fully_written(n.rstd, N_, "layernorm rstd");
	n.rms = 1, n.rstd = buf(&A, N_);
	norm_loss(&n);
	fully_written(n.rstd, N_, "rmsnorm rstd");
	float *logits = rnd(&A, N_ * V_, 1), *lse = buf(&A, N_);
	int32_t tgt[N_] = {0};
	double loss;
	assert_int_equal(tk_xent_fwd(logits, tgt, lse, &loss, N_, V_, V_), TK_OK);
	fully_written(lse, N_, "xent lse");
	arena_free(&A);
}

/* ---- parameter and FLOP counts: the layer table's, derived from its tensors ---- */

/* One layer's figures on one sequence of S tokens (sequences Bm) with vocabulary V. */
static LayerCost fig(PlanLayer l, int64_t Bm, int64_t S, int64_t V)
{
	LayerShape sh = {Bm * S, Bm, S, V, 0, PREC_F32, 1};
	return plan_layer_figures(&l, &sh);
}

static int64_t params(PlanLayer l, int64_t S, int64_t V)
{
	return fig(l, 1, S, V).params;
}

/* F + B + W FLOPs of one layer. */
static int64_t fbw(LayerCost c)
{
	return (int64_t)c.flops[0] + (int64_t)c.flops[1] + (int64_t)c.flops[2];
}

static int64_t gpt2_params(int tied)
{
	int d = 768, S = 1024, V = 50257, L = 12;
	PlanLayer ln = {LAYER_LAYERNORM, d, d, 0, 0, 0, 0, 0, 0};
	PlanLayer at = {LAYER_ATTN, d, d, 12, 12, 0, 0, FLAG(BIAS), 0};
	PlanLayer mlp = {LAYER_MLP, d, d, 0, 0, 4 * d, 0, FLAG(BIAS), 0};
	PlanLayer em = {LAYER_EMBED, 1, d, 0, 0, 0, 0, FLAG(POSITIONS), 0};
	PlanLayer hd = {LAYER_HEAD, d, V, 0, 0, 0, 0, tied ? FLAG(TIED) : 0, 0};
	int64_t layer = 2 * params(ln, S, V) + params(at, S, V) + params(mlp, S, V);
	return params(em, S, V) + L * layer + params(ln, S, V) + params(hd, S, V);
}

static void tk__params__match_published_gpt2_and_llama2(void **state)
{
	(void)state;
	assert_int_equal(gpt2_params(1), 124439808);
	assert_int_equal(gpt2_params(0), 163037184);
	int d = 4096, S = 4096, V = 32000, L = 32;
	PlanLayer rn = {LAYER_RMSNORM, d, d, 0, 0, 0, 0, 0, 0};
	PlanLayer at = {LAYER_ATTN, d, d, 32, 32, 0, 0, FLAG(ROPE), 0};
	PlanLayer sw = {LAYER_SWIGLU, d, d, 0, 0, 11008, 0, 0, 0};
	PlanLayer em = {LAYER_EMBED, 1, d, 0, 0, 0, 0, 0, 0};
	PlanLayer hd = {LAYER_HEAD, d, V, 0, 0, 0, 0, 0, 0};
	int64_t layer = 2 * params(rn, S, V) + params(at, S, V) + params(sw, S, V);
	int64_t llama = params(em, S, V) + L * layer + params(rn, S, V) + params(hd, S, V);
	assert_int_equal(llama, 6738415616LL);
	/* grouped-query attention shrinks only the k and v projections */
	at.kv_heads = 8;
	assert_int_equal(params(at, S, V), (int64_t)d * d + 2 * (int64_t)d * (d / 4) + (int64_t)d * d);
	assert_int_equal(plan_layer_cost(LAYER_LINEAR, 1, 3, 4).params, 16);
}

/* docs/layers.md's worked example: one GPT-2 small layer at B = 1, S = 1024 keeps its
 * four layer inputs (layernorm, attention, layernorm, MLP) and what each kind saves. */
static void tk__mem__gpt2_layer_matches_worked_example(void **state)
{
	(void)state;
	int d = 768, S = 1024;
	PlanLayer ln = {LAYER_LAYERNORM, d, d, 0, 0, 0, 0, 0, 0};
	PlanLayer at = {LAYER_ATTN, d, d, 12, 12, 0, 0, 0, 0};
	PlanLayer mlp = {LAYER_MLP, d, d, 0, 0, 4 * d, 0, 0, 0};
	int64_t fw = 2 * fig(ln, 1, S, 0).save_fw + fig(at, 1, S, 0).save_fw + fig(mlp, 1, S, 0).save_fw;
	assert_int_equal(fw / 4, 25169920);
	assert_int_equal(fig(at, 1, S, 0).save_fw / 4, 16515072);
}

/* Megatron-LM's count for GPT (Narayanan et al. 2021): forward + backward of L layers and
 * the logits = 72 B S L h^2 (1 + S/(6h) + V/(12 h L)). */
static void tk__flops__match_megatron_formula(void **state)
{
	(void)state;
	int64_t Bm = 8, S = 1024, h = 768, L = 12, V = 50257, N = Bm * S;
	PlanLayer atl = {LAYER_ATTN, (int)h, (int)h, 12, 12, 0, 0, 0, 0};
	PlanLayer mlpl = {LAYER_MLP, (int)h, (int)h, 0, 0, 4 * (int)h, 0, 0, 0};
	PlanLayer hdl = {LAYER_HEAD, (int)h, (int)V, 0, 0, 0, 0, 0, 0};
	LayerCost at = fig(atl, Bm, S, V), ml = fig(mlpl, Bm, S, V), hd = fig(hdl, Bm, S, V);
	int64_t total = L * (fbw(at) + fbw(ml)) + fbw(hd);
	assert_int_equal(total, 72 * Bm * S * L * h * h + 12 * Bm * S * S * L * h + 6 * Bm * S * h * V);
	/* backward (B + W) is twice the forward, layer by layer */
	assert_true(at.flops[1] + at.flops[2] == 2 * at.flops[0]);
	assert_true(ml.flops[1] + ml.flops[2] == 2 * ml.flops[0]);
	/* forward attention: 2 N d (3d) + 2 N d^2 + 4 B S^2 d */
	assert_true(at.flops[0] == (double)(8 * N * h * h + 4 * Bm * S * S * h));
	/* Llama-2-7B, one sequence of 4096: the forward is 2 FLOPs per token per GEMM weight
	 * (all parameters but the embedding and the norms) plus attention's 4 S^2 d per layer */
	int64_t ld = 4096, lS = 4096, lN = lS, lL = 32;
	PlanLayer la = {LAYER_ATTN, (int)ld, (int)ld, 32, 32, 0, 0, FLAG(ROPE), 0};
	PlanLayer ls = {LAYER_SWIGLU, (int)ld, (int)ld, 0, 0, 11008, 0, 0, 0};
	PlanLayer lh = {LAYER_HEAD, (int)ld, 32000, 0, 0, 0, 0, 0, 0};
	int64_t fwd = lL * ((int64_t)fig(la, 1, lS, 32000).flops[0] + (int64_t)fig(ls, 1, lS, 32000).flops[0]) +
	              (int64_t)fig(lh, 1, lS, 32000).flops[0];
	int64_t gemm_weights = 6738415616LL - 32000 * ld - (2 * lL + 1) * ld;
	assert_int_equal(fwd, 2 * lN * gemm_weights + lL * 4 * lS * lS * ld);
	assert_true(plan_layer_cost(LAYER_LINEAR, 2, 3, 5).flops[2] == 60.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tk__linear__matches_reference_and_finite_differences),
		cmocka_unit_test(tk__embed_positions__matches_reference_and_finite_differences),
		cmocka_unit_test(tk__embed_bad_token__is_rejected_untouched),
		cmocka_unit_test(tk__layernorm__matches_reference_and_finite_differences),
		cmocka_unit_test(tk__rmsnorm__matches_reference_and_finite_differences),
		cmocka_unit_test(tk__mlp_gelu__matches_reference_and_finite_differences),
		cmocka_unit_test(tk__mlp_gelu__equals_tanh_form_across_range),
		cmocka_unit_test(tk__mlp_swiglu__equals_libm_form_across_range),
		cmocka_unit_test(tk__mlp_swiglu__matches_reference_and_finite_differences),
		cmocka_unit_test(tk__residual__routes_gradient_through_skip_and_sub_block),
		cmocka_unit_test(tk__head_untied__matches_reference_and_finite_differences),
		cmocka_unit_test(tk__head_tied_with_xent__matches_finite_differences),
		cmocka_unit_test(tk__xent__matches_reference_and_finite_differences),
		cmocka_unit_test(tk__xent_uniform_logits__loss_is_log_v),
		cmocka_unit_test(tk__split_backward__equals_fused_bit_for_bit),
		cmocka_unit_test(tk__gpt_block__is_deterministic),
		cmocka_unit_test(tk__saved_buffers__match_documented_sizes),
		cmocka_unit_test(tk__params__match_published_gpt2_and_llama2),
		cmocka_unit_test(tk__mem__gpt2_layer_matches_worked_example),
		cmocka_unit_test(tk__flops__match_megatron_formula),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
