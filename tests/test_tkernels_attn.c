/* Attention and dropout kernel tests: causal self-attention in each variant (biases or
 * not, multi-head or grouped-query, rotary or not) against central finite differences of
 * L = sum(y * r) and a naive double-precision reference, causal masking, rotary scores
 * that depend on relative position only, the shapes tk_attn_check refuses; dropout's
 * masks by hand (splitmix64), its kept fraction within a binomial bound, and attention's
 * dropout (its mask over every head, its gradients against finite differences).  The
 * buffers, finite differences and attention's context are tkernels_lib.h's; the other
 * kernels are test_tkernels.c's.  Shapes are tiny (B=2, S=5, d=8). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "tkernels_lib.h"

/* ---- attention ---- */

static void attn_fd(TkAttn a, int bias, uint64_t seed)
{
	Arena A = {.rng = seed};
	AttnCtx c = attn_setup(&A, a, bias);
	int64_t N = a.B * a.S, d = a.d, nq = tk_attn_nqkv(&a);
	float *dqkv = buf(&A, N * nq), *dx = buf(&A, N * d), *work = buf(&A, tk_attn_workspace(&a));
	float *dwqkv = zeros(&A, d * nq), *dwo = zeros(&A, d * d);
	float *dbqkv = bias ? zeros(&A, nq) : NULL, *dbo = bias ? zeros(&A, d) : NULL;
	attn_loss(&c);
	tk_attn_bwd_in(&c.a, c.wqkv, c.wo, c.qkv, c.p, c.r, dqkv, dx, work);
	tk_attn_bwd_w(&c.a, c.x, c.att, c.r, dqkv, dwqkv, dbqkv, dwo, dbo);
	check_grad("attention dx", attn_loss, &c, c.x, dx, N * d);
	check_grad("attention dwqkv", attn_loss, &c, c.wqkv, dwqkv, d * nq);
	check_grad("attention dwo", attn_loss, &c, c.wo, dwo, d * d);
	if (bias) {
		check_grad("attention dbqkv", attn_loss, &c, c.bqkv, dbqkv, nq);
		check_grad("attention dbo", attn_loss, &c, c.bo, dbo, d);
	}
	arena_free(&A);
}

/* Attention with dropout=0.3 on its probabilities: the same mask every F (one key), so
 * L is a smooth function of x and the weights, and B's gradients through the mask and
 * its scale match its finite differences. */
static void tk__attention_dropout__matches_finite_differences(void **state)
{
	(void)state;
	Arena A = {.rng = 47};
	TkAttn a = shape(2, 1, 1);
	TkDrop dr = tk_drop(0.3, 0xd0);
	AttnCtx c = attn_setup(&A, a, 1);
	int64_t N = a.B * a.S, d = a.d, nq = tk_attn_nqkv(&a), np = tk_attn_p_elems(&a);
	uint8_t *mask = malloc((size_t)np);
	assert_non_null(mask);
	c.dr = &dr, c.mask = mask, c.pd = buf(&A, np);
	float *dqkv = buf(&A, N * nq), *dx = buf(&A, N * d), *work = buf(&A, tk_attn_workspace(&a));
	float *dwqkv = zeros(&A, d * nq), *dwo = zeros(&A, d * d), *dbqkv = zeros(&A, nq);
	float *dbo = zeros(&A, d);
	attn_loss(&c);
	int dropped = 0;
	for (int64_t i = 0; i < np; i++)
		dropped += !mask[i];
	assert_true(dropped > 0 && dropped < np); // a mask that does something
	tk_attn_bwd_in_drop(&c.a, &dr, c.wqkv, c.wo, c.qkv, c.p, mask, c.pd, c.r, dqkv, dx, work);
	tk_attn_bwd_w(&c.a, c.x, c.att, c.r, dqkv, dwqkv, dbqkv, dwo, dbo);
	check_grad("dropped attention dx", attn_loss, &c, c.x, dx, N * d);
	check_grad("dropped attention dwqkv", attn_loss, &c, c.wqkv, dwqkv, d * nq);
	check_grad("dropped attention dbqkv", attn_loss, &c, c.bqkv, dbqkv, nq);
	free(mask);
	arena_free(&A);
}

/* |got - want| <= tol (1 + |want|) element by element. */
static void near(const float *got, const float *want, int64_t n, double tol, const char *what)
{
	for (int64_t i = 0; i < n; i++)
		if (!(fabs((double)got[i] - want[i]) <= tol * (1 + fabs((double)want[i]))))
			fail_msg("%s element %lld: %.9g, materialised %.9g", what, (long long)i,
			         (double)got[i], (double)want[i]);
}

/* Flash attention against the materialised form (GQA, rotary, dropout=0.3, and at
 * tp = 2 a rank's heads): F gives the same output with only the rows' log-sum-exp kept
 * (P, mask and pd are scratch, poisoned after F); B rebuilds P from q, k and the
 * log-sum-exp, draws the same mask bit for bit, and gives the same input gradient and
 * dqkv, all within 1e-5 (float rounding: exp(s - lse) against exp(s - max) / sum). */
static void tk__attention_flash__equals_materialised(void **state)
{
	(void)state;
	for (int tp = 1; tp <= 2; tp++) {
		Arena A = {.rng = 53};
		TkAttn a = shape(4, 2, 1);
		TkDrop dr = tk_drop(0.3, 0xf1a5);
		AttnCtx c = attn_setup(&A, a, 1);
		c.a.tp = tp;
		dr.head0 = tp > 1 ? a.H / tp : 0; // rank 1 of 2
		int64_t N = a.B * a.S, d = a.d, di = d / tp, nq = tk_attn_nqkv(&a) / tp;
		int64_t np = tk_attn_p_elems(&a) / tp, nl = a.B * (a.H / tp) * a.S;
		uint8_t *mask = malloc((size_t)np), *mask2 = malloc((size_t)np);
		assert_true(mask && mask2);
		float *pd = buf(&A, np), *att = buf(&A, N * di), *y = buf(&A, N * d);
		float *qkv2 = buf(&A, N * nq), *p2 = buf(&A, np), *pd2 = buf(&A, np);
		float *att2 = buf(&A, N * di), *y2 = buf(&A, N * d), *lse = buf(&A, nl);
		tk_attn_fwd_drop(&c.a, &dr, c.x, c.wqkv, c.bqkv, c.wo, c.bo, c.qkv, c.p, mask, pd, att,
		                 y);
		tk_attn_fwd_flash(&c.a, &dr, c.x, c.wqkv, c.bqkv, c.wo, c.bo, qkv2, p2, mask2, pd2, lse,
		                  att2, y2);
		same_bits(qkv2, c.qkv, N * nq, "flash qkv");
		near(y2, y, N * d, 1e-5, "flash y");
		fully_written(lse, nl, "flash lse");
		memset(p2, 0xff, (size_t)np * sizeof *p2); // scratch: gone after F
		memset(pd2, 0xff, (size_t)np * sizeof *pd2);
		memset(mask2, 7, (size_t)np);
		tk_attn_probs_lse(&c.a, &dr, qkv2, lse, p2, mask2, pd2);
		assert_memory_equal(mask2, mask, (size_t)np);
		near(p2, c.p, np, 1e-6, "flash P rebuilt");
		float *dq = buf(&A, N * nq), *dx = buf(&A, N * d), *w = buf(&A, tk_attn_workspace(&a));
		float *dq2 = buf(&A, N * nq), *dx2 = buf(&A, N * d);
		tk_attn_bwd_in_drop(&c.a, &dr, c.wqkv, c.wo, c.qkv, c.p, mask, pd, c.r, dq, dx, w);
		tk_attn_bwd_in_drop(&c.a, &dr, c.wqkv, c.wo, qkv2, p2, mask2, pd2, c.r, dq2, dx2, w);
		near(dq2, dq, N * nq, 1e-5, "flash dqkv");
		near(dx2, dx, N * d, 1e-5, "flash dx");
		free(mask);
		free(mask2);
		arena_free(&A);
	}
}

static void tk__attention_mha_bias__matches_finite_differences(void **state)
{
	(void)state;
	attn_fd(shape(2, 2, 0), 1, 41);
}

static void tk__attention_gqa_rope__matches_finite_differences(void **state)
{
	(void)state;
	attn_fd(shape(2, 1, 1), 0, 42);
	attn_fd(shape(4, 2, 1), 1, 43);
	attn_fd(shape(2, 1, 0), 0, 44);
}

/* The definition, in double: projections, rotary by angle s * theta^(-2i/hd) on pairs
 * (i, i + hd/2), softmax over j <= i, heads grouped h / (H/Hkv), output projection. */
static void attn_reference(const AttnCtx *c, double *y)
{
	const TkAttn *a = &c->a;
	int64_t N = a->B * a->S, d = a->d, hd = d / a->H, nq = tk_attn_nqkv(a);
	double *qkv = malloc((size_t)(N * nq) * sizeof(double));
	double *out = malloc((size_t)(N * d) * sizeof(double));
	assert_true(qkv && out);
	for (int64_t t = 0; t < N; t++)
		for (int64_t j = 0; j < nq; j++) {
			double s = c->bqkv ? c->bqkv[j] : 0;
			for (int64_t k = 0; k < d; k++)
				s += (double)c->x[t * d + k] * c->wqkv[k * nq + j];
			qkv[t * nq + j] = s;
		}
	if (a->rope)
		for (int64_t t = 0; t < N; t++)
			for (int64_t h = 0; h < a->H + a->Hkv; h++)
				for (int64_t i = 0; i < hd / 2; i++) {
					double ang = (double)(t % a->S) / pow(a->rope_theta, 2.0 * i / hd);
					double *v = qkv + t * nq + h * hd, x1 = v[i], x2 = v[i + hd / 2];
					v[i] = x1 * cos(ang) - x2 * sin(ang);
					v[i + hd / 2] = x1 * sin(ang) + x2 * cos(ang);
				}
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t h = 0; h < a->H; h++) {
			int64_t g = h / (a->H / a->Hkv);
			for (int64_t i = 0; i < a->S; i++) {
				double sc[64], mx = -1e300, sum = 0;
				const double *q = qkv + (b * a->S + i) * nq + h * hd;
				for (int64_t j = 0; j <= i; j++) {
					const double *k = qkv + (b * a->S + j) * nq + (a->H + g) * hd;
					sc[j] = 0;
					for (int64_t e = 0; e < hd; e++)
						sc[j] += q[e] * k[e] / sqrt((double)hd);
					mx = fmax(mx, sc[j]);
				}
				for (int64_t j = 0; j <= i; j++)
					sum += exp(sc[j] - mx);
				for (int64_t e = 0; e < hd; e++) {
					double o = 0;
					for (int64_t j = 0; j <= i; j++)
						o += exp(sc[j] - mx) / sum *
						     qkv[(b * a->S + j) * nq + (a->H + a->Hkv + g) * hd + e];
					out[(b * a->S + i) * d + h * hd + e] = o;
				}
			}
		}
	for (int64_t t = 0; t < N; t++)
		for (int64_t j = 0; j < d; j++) {
			double s = c->bo ? c->bo[j] : 0;
			for (int64_t k = 0; k < d; k++)
				s += out[t * d + k] * c->wo[k * d + j];
			y[t * d + j] = s;
		}
	free(qkv);
	free(out);
}

static void tk__attention__matches_naive_reference(void **state)
{
	(void)state;
	const struct {
		int64_t H, Hkv;
		int rope, bias;
	} cases[] = {{2, 2, 0, 1}, {2, 1, 1, 0}, {4, 2, 1, 1}, {4, 1, 0, 0}, {1, 1, 1, 1}};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		Arena A = {.rng = 51 + k};
		AttnCtx c = attn_setup(&A, shape(cases[k].H, cases[k].Hkv, cases[k].rope), cases[k].bias);
		double want[N_ * D_];
		attn_loss(&c);
		attn_reference(&c, want);
		close_to(c.y, want, N_ * D_, 2e-5, "attention y");
		arena_free(&A);
	}
}

static void tk__attention__future_tokens_do_not_change_earlier_outputs(void **state)
{
	(void)state;
	for (int rope = 0; rope < 2; rope++) {
		Arena A = {.rng = 61 + (uint64_t)rope};
		AttnCtx c = attn_setup(&A, shape(2, 1, rope), 1);
		attn_loss(&c);
		float *y0 = copy_of(&A, c.y, N_ * D_);
		for (int64_t pb = 0; pb < tk_attn_p_elems(&c.a); pb += S_ * S_)
			for (int i = 0; i < S_; i++)
				for (int j = 0; j < S_; j++)
					assert_true(j <= i ? c.p[pb + i * S_ + j] > 0 : c.p[pb + i * S_ + j] == 0);
		const int b = 1, s = 3; // change token 3 of sequence 1
		for (int j = 0; j < D_; j++)
			c.x[(b * S_ + s) * D_ + j] += 0.5f;
		attn_loss(&c);
		same_bits(c.y, y0, S_ * D_, "sequence 0");
		same_bits(c.y + b * S_ * D_, y0 + b * S_ * D_, s * D_, "earlier tokens of sequence 1");
		for (int t = s; t < S_; t++)
			assert_true(memcmp(c.y + (b * S_ + t) * D_, y0 + (b * S_ + t) * D_,
			                   D_ * sizeof(float)) != 0);
		arena_free(&A);
	}
}

static void tk__rope__scores_depend_on_relative_position_only(void **state)
{
	(void)state;
	Arena A = {.rng = 71};
	TkAttn a = {.B = 1, .S = 7, .d = 8, .H = 1, .Hkv = 1, .rope = 1, .rope_theta = TK_ROPE_THETA};
	int64_t nq = tk_attn_nqkv(&a);
	float *q = rnd(&A, 8, 1), *k = rnd(&A, 8, 1), *qkv = buf(&A, 7 * nq);
	for (int t = 0; t < 7; t++)
		for (int e = 0; e < 8; e++) {
			qkv[t * nq + e] = q[e];
			qkv[t * nq + 8 + e] = k[e];
			qkv[t * nq + 16 + e] = 0;
		}
	float *orig = copy_of(&A, qkv, 7 * nq);
	tk_rope(&a, qkv, 0);
	same_bits(qkv, orig, nq, "position 0 (identity)");
	for (int t = 0; t < 7; t++) // v is not rotated
		same_bits(qkv + t * nq + 16, orig + t * nq + 16, 8, "v");
	double score[7][7];
	for (int m = 0; m < 7; m++)
		for (int n = 0; n < 7; n++)
			score[m][n] = dot(qkv + m * nq, qkv + n * nq + 8, 8);
	for (int m = 1; m < 7; m++)
		for (int n = 1; n < 7; n++)
			assert_float_equal(score[m][n], score[m - 1][n - 1], 1e-5);
	assert_true(fabs(score[2][0] - score[1][0]) > 1e-3); // but offsets matter
	tk_rope(&a, qkv, 1);
	for (int i = 0; i < 7 * nq; i++)
		assert_float_equal(qkv[i], orig[i], 1e-6);
	arena_free(&A);
}

static void tk__attn_check__rejects_bad_shapes(void **state)
{
	(void)state;
	TkAttn ok = shape(2, 1, 1);
	assert_null(tk_attn_check(&ok));
	TkAttn bad[] = {shape(3, 1, 0), shape(4, 3, 0), shape(2, 0, 0), ok, ok};
	bad[3].d = 6, bad[3].H = 2; // hd 3, odd, with rotary
	bad[4].rope_theta = 0;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_non_null(tk_attn_check(&bad[i]));
	assert_non_null(strstr(tk_attn_check(&bad[1]), "key/value heads"));
}

/* ---- dropout ---- */

/* splitmix64's output function as published (Vigna's splitmix64.c): the first output
 * from state 0 is 0xe220a8397b1dcdaf. */
static uint64_t splitmix(uint64_t x)
{
	uint64_t z = x + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Masks by hand: element i under key k is kept when splitmix64(k ^ i) >> 32 is at least
 * round(P 2^32).  Key 0, element 0 hashes to 0xe220a8397b1dcdaf, top word 3793791033:
 * kept at P = 0.88 (threshold round(3779571220.48) = 3779571220), dropped at P = 0.89
 * (round(3822520893.44) = 3822520893).  F keeps x * 1/(1-P) or 0 as the mask says, B
 * gives dy * mask * 1/(1-P), bit for bit; P = 0 is the identity without a mask; the same
 * key draws the same mask, another key another. */
static void tk__dropout__masks_scale_and_backward_by_hand(void **state)
{
	(void)state;
	assert_true(splitmix(0) == 0xe220a8397b1dcdafull);
	TkDrop lo = tk_drop(0.88, 0), hi = tk_drop(0.89, 0);
	assert_true(lo.thr == 3779571220u && hi.thr == 3822520893u);
	assert_true(tk_drop_keep(&lo, 0) && !tk_drop_keep(&hi, 0));
	enum { n = 4096 };
	Arena A = {.rng = 191};
	float *x = rnd(&A, n, 2), *y = buf(&A, n), *dy = rnd(&A, n, 2), *dx = buf(&A, n);
	float *y2 = buf(&A, n);
	static uint8_t mask[n], mask2[n];
	TkDrop dr = tk_drop(0.25, 0xfeed);
	assert_true(dr.thr == 1073741824u && dr.scale == 4.0f / 3.0f);
	tk_dropout_fwd(&dr, x, mask, y, n, 0);
	tk_dropout_bwd(&dr, mask, dy, dx, n);
	for (int i = 0; i < n; i++) {
		int keep = (splitmix(0xfeedull ^ (uint64_t)i) >> 32) >= 1073741824u;
		float want = keep ? x[i] * (4.0f / 3.0f) : 0.0f, dwant = keep ? dy[i] * (4.0f / 3.0f) : 0.0f;
		if (mask[i] != keep || memcmp(&y[i], &want, 4) || memcmp(&dx[i], &dwant, 4))
			fail_msg("dropout element %d: mask %d (want %d), y %g (%g), dx %g (%g)", i,
			         mask[i], keep, (double)y[i], (double)want, (double)dx[i], (double)dwant);
	}
	tk_dropout_fwd(&dr, x, mask2, y2, n, 0); // the same key: the same mask
	assert_memory_equal(mask, mask2, n);
	/* a slice from element n/4 on (a rank's rows under sequence parallelism): the whole's bits */
	memset(mask2, 7, n);
	tk_dropout_fwd(&dr, x + n / 4, mask2, y2, n / 2, n / 4);
	assert_memory_equal(mask + n / 4, mask2, n / 2);
	same_bits(y2, y + n / 4, n / 2, "dropout of a slice: y");
	TkDrop other = tk_drop(0.25, 0xfeee);
	tk_dropout_fwd(&other, x, mask2, y2, n, 0);
	int differ = 0;
	for (int i = 0; i < n; i++)
		differ += mask[i] != mask2[i];
	assert_true(differ > n / 8); // independent masks differ in 2 P (1 - P) = 3/8 of them
	TkDrop none = tk_drop(0, 0xfeed);
	assert_true(none.thr == 0 && none.scale == 1.0f);
	x[0] = -0.0f;
	tk_dropout_fwd(&none, x, NULL, y, n, 0);
	tk_dropout_bwd(&none, NULL, dy, dx, n);
	same_bits(y, x, n, "dropout at P = 0: y");
	same_bits(dx, dy, n, "dropout at P = 0: dx");
	arena_free(&A);
}

/* The kept fraction of a 2^22-element mask, for P = 0.1, 0.5, 0.9, is within t of 1 - P'
 * (P' = thr / 2^32, P to 2^-33): by Hoeffding, a fair draw of n independent elements
 * leaves it by t or more with probability at most 2 exp(-2 n t^2), so with t =
 * sqrt(ln(6e9) / (2n)) (6,871 elements of 4,194,304) the three cases together fail by
 * chance less than once in 1e9 runs; a wrong threshold or scale of P by 1% fails. */
static void tk__dropout__kept_fraction_within_binomial_bound(void **state)
{
	(void)state;
	enum { n = 1 << 22 };
	const double ps[] = {0.1, 0.5, 0.9}, t = sqrt(log(6e9) / (2.0 * n));
	for (int k = 0; k < 3; k++) {
		TkDrop dr = tk_drop(ps[k], 0x1234 + (uint64_t)k);
		int64_t kept = 0;
		for (int64_t i = 0; i < n; i++)
			kept += tk_drop_keep(&dr, (uint64_t)i);
		double q = 1.0 - (double)dr.thr / 4294967296.0, f = (double)kept / n;
		if (!(fabs(f - q) < t))
			fail_msg("P = %g: kept %.6f of %d elements, expected %.6f +- %.6f", ps[k], f, n, q, t);
		assert_true(fabs(q - (1.0 - ps[k])) < 1e-9);
	}
}

/* Attention's dropout: pd is p * mask * 1/(1-P) and p itself is the plain softmax; a
 * mask element's index counts every head of the layer ([b][h][i][j]), so tp rank 1 of 2
 * (head0 = 1) draws for its one head what the whole layer draws for head 1. */
static void tk__attention_dropout__masks_count_over_every_head(void **state)
{
	(void)state;
	Arena A = {.rng = 53};
	TkAttn a = shape(2, 2, 0), half = a;
	half.tp = 2;
	int64_t np = tk_attn_p_elems(&a), SS = a.S * a.S, nq = tk_attn_nqkv(&a);
	TkDrop dr = tk_drop(0.4, 77), shard = dr;
	shard.head0 = 1;
	float *qkv = rnd(&A, a.B * a.S * nq, 1), *p = buf(&A, np), *pd = buf(&A, np);
	float *p0 = buf(&A, np), *qh = rnd(&A, a.B * a.S * nq / 2, 1), *ph = buf(&A, np / 2);
	float *pdh = buf(&A, np / 2);
	uint8_t *mask = malloc((size_t)np), *mh = malloc((size_t)np / 2);
	assert_true(mask && mh);
	tk_attn_probs_drop(&a, &dr, qkv, p, mask, pd);
	tk_attn_probs(&a, qkv, p0);
	same_bits(p, p0, np, "p with and without dropout");
	for (int64_t e = 0; e < np; e++) {
		float want = mask[e] ? p[e] * dr.scale : 0.0f;
		assert_int_equal(mask[e], tk_drop_keep(&dr, (uint64_t)e));
		assert_memory_equal(&pd[e], &want, sizeof want);
	}
	tk_attn_probs_drop(&half, &shard, qh, ph, mh, pdh);
	for (int64_t b = 0; b < a.B; b++)
		assert_memory_equal(mh + b * SS, mask + (b * 2 + 1) * SS, (size_t)SS);
	free(mask);
	free(mh);
	arena_free(&A);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tk__attention_mha_bias__matches_finite_differences),
		cmocka_unit_test(tk__attention_gqa_rope__matches_finite_differences),
		cmocka_unit_test(tk__attention__matches_naive_reference),
		cmocka_unit_test(tk__attention__future_tokens_do_not_change_earlier_outputs),
		cmocka_unit_test(tk__rope__scores_depend_on_relative_position_only),
		cmocka_unit_test(tk__attn_check__rejects_bad_shapes),
		cmocka_unit_test(tk__dropout__masks_scale_and_backward_by_hand),
		cmocka_unit_test(tk__dropout__kept_fraction_within_binomial_bound),
		cmocka_unit_test(tk__attention_dropout__masks_count_over_every_head),
		cmocka_unit_test(tk__attention_dropout__matches_finite_differences),
		cmocka_unit_test(tk__attention_flash__equals_materialised),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
