/* Transformer layer kernels on the CPU (see tkernels.h for the contract and
 * docs/layers.md for the math).  Every kernel works on caller-owned float32 row-major
 * arrays; GEMMs go through OpenBLAS's cblas_sgemm (attention as one GEMM per sequence
 * and head, reading heads in place through the leading dimension), everything else is a
 * plain loop in a fixed order, with row statistics and the loss summed in double, so a
 * kernel gives the same bits for the same inputs.  Each layer kind is split into
 * forward, input gradient and weight gradient; the input gradient leaves in the caller's
 * "held" buffers what the weight gradient reads, and nothing else passes between them. */
#include "tkernels.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* C (m x n) = alpha op(A) op(B) + beta C, row-major, leading dimensions given. */
static void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
	cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
	            (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* e^x in float without a libm call, so that the element-wise loops (GELU, SiLU, the
 * softmaxes) vectorize: x = n ln2 + r with |r| <= ln2/2 (round to nearest through the
 * 1.5 * 2^23 shift), e^r by Cephes' degree-6 polynomial (relative error about 2e-7,
 * against glibc's expf's 0.5 ulp), 2^n written into the exponent bits.  The same bits
 * on every x86-64 (plain float operations, no FMA, no table).  Flushes to 0 below -87
 * (e^-87 is 1.6e-38, near FLT_MIN: no denormals, which are slow), gives e^88 for x in
 * (88, 88.72] and +inf above; NaN stays NaN. */
static inline float tk_exp(float x)
{
	float c = x > 88.0f ? 88.0f : x < -87.0f ? -87.0f : x;
	float t = c * 1.44269504088896341f + 12582912.0f; // 1.5 * 2^23: rounds to an integer
	float n = t - 12582912.0f;
	uint32_t bits; // unsigned: a NaN's bits (replaced below) shift without overflow
	memcpy(&bits, &t, sizeof bits);
	bits = (bits - 0x4B400000u + 127u) << 23; // 2^n, n in [-126, 127]
	float scale;
	memcpy(&scale, &bits, sizeof scale);
	float r = c - n * 0.693359375f + n * 2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	float e = (p * r * r + r + 1.0f) * scale;
	e = x > 88.7228f ? INFINITY : x < -87.0f ? 0.0f : e;
	return x != x ? x : e;
}

/* db (n) += column sums of dy (N x n). */
static void colsum_add(const float *dy, float *db, int64_t N, int64_t n)
{
	for (int64_t i = 0; i < N; i++)
		for (int64_t j = 0; j < n; j++)
			db[j] += dy[i * n + j];
}

/* ---- linear ---- */

void tk_linear_fwd(const float *x, const float *w, const float *b, float *y, int64_t N,
                   int64_t k, int64_t n)
{
	if (b)
		for (int64_t i = 0; i < N; i++)
			memcpy(y + i * n, b, (size_t)n * sizeof(float));
	gemm(0, 0, N, n, k, 1.0f, x, k, w, n, b ? 1.0f : 0.0f, y, n);
}

void tk_linear_bwd_in(const float *dy, const float *w, float *dx, int64_t N, int64_t k,
                      int64_t n, int accumulate)
{
	gemm(0, 1, N, k, n, 1.0f, dy, n, w, n, accumulate ? 1.0f : 0.0f, dx, k);
}

void tk_linear_bwd_w(const float *x, const float *dy, float *dw, float *db, int64_t N,
                     int64_t k, int64_t n)
{
	gemm(1, 0, k, n, N, 1.0f, x, k, dy, n, 1.0f, dw, n);
	if (db)
		colsum_add(dy, db, N, n);
}

/* ---- token embedding ---- */

static int tokens_ok(const int32_t *tok, int64_t n, int64_t V)
{
	for (int64_t i = 0; i < n; i++)
		if (tok[i] < 0 || tok[i] >= V)
			return 0;
	return 1;
}

int tk_embed_fwd(const int32_t *tok, const float *wte, const float *wpe, float *x, int64_t B,
                 int64_t S, int64_t d, int64_t V)
{
	return tk_embed_fwd_tp(tok, wte, wpe, x, B, S, d, V, 0, V);
}

int tk_embed_fwd_tp(const int32_t *tok, const float *wte, const float *wpe, float *x,
                    int64_t B, int64_t S, int64_t d, int64_t V, int64_t lo, int64_t n)
{
	int64_t N = B * S;
	if (!tokens_ok(tok, N, V))
		return TK_EINVAL;
	for (int64_t t = 0; t < N; t++) {
		int in = tok[t] >= lo && tok[t] < lo + n;
		const float *e = wte + (in ? (int64_t)tok[t] - lo : 0) * d;
		float *o = x + t * d;
		if (wpe) {
			const float *p = wpe + (t % S) * d;
			for (int64_t j = 0; j < d; j++)
				o[j] = in ? e[j] + p[j] : p[j];
		} else if (in) {
			memcpy(o, e, (size_t)d * sizeof(float));
		} else {
			memset(o, 0, (size_t)d * sizeof(float));
		}
	}
	return TK_OK;
}

int tk_embed_bwd_w(const int32_t *tok, const float *dy, float *dwte, float *dwpe, int64_t B,
                   int64_t S, int64_t d, int64_t V)
{
	return tk_embed_bwd_w_tp(tok, dy, dwte, dwpe, B, S, d, V, 0, V);
}

int tk_embed_bwd_w_tp(const int32_t *tok, const float *dy, float *dwte, float *dwpe, int64_t B,
                      int64_t S, int64_t d, int64_t V, int64_t lo, int64_t n)
{
	int64_t N = B * S;
	if (!tokens_ok(tok, N, V))
		return TK_EINVAL;
	for (int64_t t = 0; t < N; t++) {
		const float *g = dy + t * d;
		if (tok[t] >= lo && tok[t] < lo + n) {
			float *e = dwte + ((int64_t)tok[t] - lo) * d;
			for (int64_t j = 0; j < d; j++)
				e[j] += g[j];
		}
		if (dwpe) {
			float *p = dwpe + (t % S) * d;
			for (int64_t j = 0; j < d; j++)
				p[j] += g[j];
		}
	}
	return TK_OK;
}

/* ---- layernorm and rmsnorm ---- */

void tk_layernorm_fwd(const float *x, const float *g, const float *b, float eps, float *y,
                      float *mean, float *rstd, int64_t N, int64_t d)
{
	for (int64_t i = 0; i < N; i++) {
		const float *r = x + i * d;
		double s = 0, v = 0;
		for (int64_t j = 0; j < d; j++)
			s += r[j];
		double mu = s / (double)d;
		for (int64_t j = 0; j < d; j++)
			v += ((double)r[j] - mu) * ((double)r[j] - mu);
		float m = (float)mu, rs = (float)(1.0 / sqrt(v / (double)d + (double)eps));
		mean[i] = m;
		rstd[i] = rs;
		for (int64_t j = 0; j < d; j++)
			y[i * d + j] = (r[j] - m) * rs * g[j] + b[j];
	}
}

void tk_layernorm_bwd_in(const float *x, const float *g, const float *mean,
                         const float *rstd, const float *dy, float *dx, int64_t N, int64_t d)
{
	for (int64_t i = 0; i < N; i++) {
		const float *r = x + i * d, *gy = dy + i * d;
		double m1 = 0, m2 = 0;
		for (int64_t j = 0; j < d; j++) {
			float xh = (r[j] - mean[i]) * rstd[i];
			double dxh = (double)gy[j] * (double)g[j];
			m1 += dxh;
			m2 += dxh * xh;
		}
		float a1 = (float)(m1 / (double)d), a2 = (float)(m2 / (double)d);
		for (int64_t j = 0; j < d; j++) {
			float xh = (r[j] - mean[i]) * rstd[i];
			dx[i * d + j] = rstd[i] * (gy[j] * g[j] - a1 - xh * a2);
		}
	}
}

void tk_layernorm_bwd_w(const float *x, const float *mean, const float *rstd,
                        const float *dy, float *dg, float *db, int64_t N, int64_t d)
{
	for (int64_t i = 0; i < N; i++)
		for (int64_t j = 0; j < d; j++) {
			float xh = (x[i * d + j] - mean[i]) * rstd[i];
			dg[j] += dy[i * d + j] * xh;
			db[j] += dy[i * d + j];
		}
}

void tk_layernorm_bwd(const float *x, const float *g, const float *mean, const float *rstd,
                      const float *dy, float *dx, float *dg, float *db, int64_t N, int64_t d)
{
	tk_layernorm_bwd_in(x, g, mean, rstd, dy, dx, N, d);
	tk_layernorm_bwd_w(x, mean, rstd, dy, dg, db, N, d);
}

void tk_rmsnorm_fwd(const float *x, const float *g, float eps, float *y, float *rstd,
                    int64_t N, int64_t d)
{
	for (int64_t i = 0; i < N; i++) {
		const float *r = x + i * d;
		double s = 0;
		for (int64_t j = 0; j < d; j++)
			s += (double)r[j] * (double)r[j];
		float rs = (float)(1.0 / sqrt(s / (double)d + (double)eps));
		rstd[i] = rs;
		for (int64_t j = 0; j < d; j++)
			y[i * d + j] = r[j] * rs * g[j];
	}
}

void tk_rmsnorm_bwd_in(const float *x, const float *g, const float *rstd, const float *dy,
                       float *dx, int64_t N, int64_t d)
{
	for (int64_t i = 0; i < N; i++) {
		const float *r = x + i * d, *gy = dy + i * d;
		double m2 = 0;
		for (int64_t j = 0; j < d; j++)
			m2 += (double)gy[j] * (double)g[j] * (double)(r[j] * rstd[i]);
		float a2 = (float)(m2 / (double)d);
		for (int64_t j = 0; j < d; j++)
			dx[i * d + j] = rstd[i] * (gy[j] * g[j] - r[j] * rstd[i] * a2);
	}
}

void tk_rmsnorm_bwd_w(const float *x, const float *rstd, const float *dy, float *dg, int64_t N,
                      int64_t d)
{
	for (int64_t i = 0; i < N; i++)
		for (int64_t j = 0; j < d; j++)
			dg[j] += dy[i * d + j] * (x[i * d + j] * rstd[i]);
}

void tk_rmsnorm_bwd(const float *x, const float *g, const float *rstd, const float *dy,
                    float *dx, float *dg, int64_t N, int64_t d)
{
	tk_rmsnorm_bwd_in(x, g, rstd, dy, dx, N, d);
	tk_rmsnorm_bwd_w(x, rstd, dy, dg, N, d);
}

/* ---- dropout ---- */

TkDrop tk_drop(double p, uint64_t key)
{
	TkDrop dr = {key, (uint64_t)llround(p * 4294967296.0), (float)(1.0 / (1.0 - p)), 0};
	return dr;
}

/* splitmix64's finalizer of key ^ i (the runtime's rt_splitmix64, and the CUDA
 * kernels' cu_splitmix64, bit for bit). */
int tk_drop_keep(const TkDrop *dr, uint64_t i)
{
	if (dr->thr == 0)
		return 1;
	uint64_t z = (dr->key ^ i) + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (z >> 32) >= dr->thr;
}

void tk_dropout_fwd(const TkDrop *dr, const float *x, uint8_t *mask, float *y, int64_t n,
                    uint64_t first)
{
	for (int64_t i = 0; i < n; i++) {
		int keep = tk_drop_keep(dr, first + (uint64_t)i);
		if (mask)
			mask[i] = (uint8_t)keep;
		y[i] = keep ? x[i] * dr->scale : 0.0f;
	}
}

void tk_dropout_bwd(const TkDrop *dr, const uint8_t *mask, const float *dy, float *dx, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dx[i] = !mask || mask[i] ? dy[i] * dr->scale : 0.0f;
}

/* ---- attention ---- */

/* Llama's convention: within a head, element i pairs with i + hd/2 and turns by angle
 * s * theta^(-2i/hd) at position s.  Angles are computed in double, once per (position,
 * i), and applied to every q and k head of that position in every sequence. */
/* The rank's share of a (TkAttn.tp): its heads, their width, its qkv row width. */
typedef struct {
	int64_t H, Hkv, hd, nqkv, di; // di: its heads side by side (att's width, wo's rows)
} Share;

static Share share(const TkAttn *a)
{
	int64_t tp = a->tp > 1 ? a->tp : 1, hd = a->d / a->H;
	Share s = {a->H / tp, a->Hkv / tp, hd, 0, 0};
	s.nqkv = (s.H + 2 * s.Hkv) * hd;
	s.di = s.H * hd;
	return s;
}

void tk_rope(const TkAttn *a, float *qkv, int inverse)
{
	Share sh = share(a);
	int64_t hd = sh.hd, half = hd / 2, nqkv = sh.nqkv, nh = sh.H + sh.Hkv;
	for (int64_t pos = 0; pos < a->S; pos++)
		for (int64_t i = 0; i < half; i++) {
			double ang = (double)pos * pow(a->rope_theta, -2.0 * (double)i / (double)hd);
			float c = (float)cos(ang), s = (float)sin(ang);
			if (inverse)
				s = -s;
			for (int64_t b = 0; b < a->B; b++) {
				float *row = qkv + (b * a->S + pos) * nqkv;
				for (int64_t h = 0; h < nh; h++) {
					float *p = row + h * hd;
					float x1 = p[i], x2 = p[i + half];
					p[i] = x1 * c - x2 * s;
					p[i + half] = x1 * s + x2 * c;
				}
			}
		}
}

/* P of head h of sequence b: scale q k^T, causal softmax per row, zeros above; with lb,
 * each row's log-sum-exp of its scaled scores into lb[i] (flash attention keeps it). */
static void probs_head(const TkAttn *a, const Share *sh, const float *qkv, int64_t b, int64_t h,
                       float *pb, float *lb)
{
	int64_t S = a->S, hd = sh->hd, nqkv = sh->nqkv;
	const float *base = qkv + b * S * nqkv;
	const float *q = base + h * hd, *k = base + (sh->H + h / (sh->H / sh->Hkv)) * hd;
	float scale = (float)(1.0 / sqrt((double)hd));
	gemm(0, 1, S, S, hd, scale, q, nqkv, k, nqkv, 0.0f, pb, S);
	for (int64_t i = 0; i < S; i++) {
		float *r = pb + i * S, mx = r[0];
		for (int64_t j = 1; j <= i; j++)
			mx = r[j] > mx ? r[j] : mx;
		for (int64_t j = 0; j <= i; j++) // apart from the sum: vectorizes
			r[j] = tk_exp(r[j] - mx);
		double sum = 0;
		for (int64_t j = 0; j <= i; j++)
			sum += r[j];
		if (lb)
			lb[i] = (float)((double)mx + log(sum));
		float inv = (float)(1.0 / sum);
		for (int64_t j = 0; j <= i; j++)
			r[j] *= inv;
		for (int64_t j = i + 1; j < S; j++)
			r[j] = 0.0f;
	}
}

/* Head h of sequence b of dr's mask over its probabilities pb: mb, and pdb = pb * mask
 * * scale.  Its elements are numbered over every head of the layer (TkDrop.head0). */
static void drop_head(const TkAttn *a, const TkDrop *dr, int64_t b, int64_t h, const float *pb,
                      uint8_t *mb, float *pdb)
{
	int64_t SS = a->S * a->S;
	uint64_t base = (uint64_t)((b * a->H + dr->head0 + h) * SS);
	for (int64_t k = 0; k < SS; k++) {
		int keep = tk_drop_keep(dr, base + (uint64_t)k);
		mb[k] = (uint8_t)keep;
		pdb[k] = keep ? pb[k] * dr->scale : 0.0f;
	}
}

void tk_attn_probs_drop(const TkAttn *a, const TkDrop *dr, const float *qkv, float *p,
                        uint8_t *mask, float *pd)
{
	Share sh = share(a);
	int64_t SS = a->S * a->S;
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t h = 0; h < sh.H; h++) {
			int64_t off = (b * sh.H + h) * SS;
			probs_head(a, &sh, qkv, b, h, p + off, NULL);
			if (dr)
				drop_head(a, dr, b, h, p + off, mask + off, pd + off);
		}
}

void tk_attn_probs_lse(const TkAttn *a, const TkDrop *dr, const float *qkv, const float *lse,
                       float *p, uint8_t *mask, float *pd)
{
	Share sh = share(a);
	int64_t S = a->S, hd = sh.hd, nqkv = sh.nqkv, SS = S * S;
	float scale = (float)(1.0 / sqrt((double)hd));
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t h = 0; h < sh.H; h++) {
			int64_t off = (b * sh.H + h) * SS;
			const float *base = qkv + b * S * nqkv, *lb = lse + (b * sh.H + h) * S;
			const float *q = base + h * hd, *k = base + (sh.H + h / (sh.H / sh.Hkv)) * hd;
			float *pb = p + off;
			gemm(0, 1, S, S, hd, scale, q, nqkv, k, nqkv, 0.0f, pb, S);
			for (int64_t i = 0; i < S; i++) {
				float *r = pb + i * S;
				for (int64_t j = 0; j <= i; j++)
					r[j] = tk_exp(r[j] - lb[i]);
				for (int64_t j = i + 1; j < S; j++)
					r[j] = 0.0f;
			}
			if (dr)
				drop_head(a, dr, b, h, pb, mask + off, pd + off);
		}
}

void tk_attn_probs(const TkAttn *a, const float *qkv, float *p)
{
	tk_attn_probs_drop(a, NULL, qkv, p, NULL, NULL);
}

void tk_attn_fwd_drop(const TkAttn *a, const TkDrop *dr, const float *x, const float *wqkv,
                      const float *bqkv, const float *wo, const float *bo, float *qkv,
                      float *p, uint8_t *mask, float *pd, float *att, float *y)
{
	tk_attn_fwd_flash(a, dr, x, wqkv, bqkv, wo, bo, qkv, p, mask, pd, NULL, att, y);
}

void tk_attn_fwd_flash(const TkAttn *a, const TkDrop *dr, const float *x, const float *wqkv,
                       const float *bqkv, const float *wo, const float *bo, float *qkv,
                       float *p, uint8_t *mask, float *pd, float *lse, float *att, float *y)
{
	Share sh = share(a);
	int64_t B = a->B, S = a->S, d = a->d, H = sh.H, Hkv = sh.Hkv, hd = sh.hd, di = sh.di;
	int64_t nqkv = sh.nqkv, N = B * S, grp = H / Hkv;
	tk_linear_fwd(x, wqkv, bqkv, qkv, N, d, nqkv);
	if (a->rope)
		tk_rope(a, qkv, 0);
	for (int64_t b = 0; b < B; b++) {
		const float *base = qkv + b * S * nqkv;
		for (int64_t h = 0; h < H; h++) {
			const float *v = base + (H + Hkv + h / grp) * hd;
			int64_t off = (b * H + h) * S * S;
			const float *pv = p + off; // what multiplies v: P, or P dropped
			probs_head(a, &sh, qkv, b, h, p + off, lse ? lse + (b * H + h) * S : NULL);
			if (dr) {
				drop_head(a, dr, b, h, p + off, mask + off, pd + off);
				pv = pd + off;
			}
			gemm(0, 0, S, hd, S, 1.0f, pv, S, v, nqkv, 0.0f, att + b * S * di + h * hd, di);
		}
	}
	tk_linear_fwd(att, wo, bo, y, N, di, d);
}

void tk_attn_fwd(const TkAttn *a, const float *x, const float *wqkv, const float *bqkv,
                 const float *wo, const float *bo, float *qkv, float *p, float *att, float *y)
{
	tk_attn_fwd_drop(a, NULL, x, wqkv, bqkv, wo, bo, qkv, p, NULL, NULL, att, y);
}

void tk_attn_bwd_in_drop(const TkAttn *a, const TkDrop *dr, const float *wqkv, const float *wo,
                         const float *qkv, const float *p, const uint8_t *mask, const float *pd,
                         const float *dy, float *dqkv, float *dx, float *work)
{
	Share sh = share(a);
	int64_t B = a->B, S = a->S, d = a->d, H = sh.H, Hkv = sh.Hkv, hd = sh.hd, di = sh.di;
	int64_t nqkv = sh.nqkv, N = B * S, grp = H / Hkv;
	float scale = (float)(1.0 / sqrt((double)hd));
	float *datt = work, *ds = work + N * di;
	tk_linear_bwd_in(dy, wo, datt, N, di, d, 0);
	memset(dqkv, 0, (size_t)(N * nqkv) * sizeof(float));
	for (int64_t b = 0; b < B; b++) {
		const float *base = qkv + b * S * nqkv;
		float *dbase = dqkv + b * S * nqkv;
		for (int64_t h = 0; h < H; h++) {
			int64_t g = h / grp, off = (b * H + h) * S * S;
			const float *q = base + h * hd, *k = base + (H + g) * hd;
			const float *v = base + (H + Hkv + g) * hd;
			float *dq = dbase + h * hd, *dk = dbase + (H + g) * hd;
			float *dv = dbase + (H + Hkv + g) * hd;
			const float *pb = p + off, *da = datt + b * S * di + h * hd;
			const float *pv = dr ? pd + off : pb; // what multiplied v in F
			gemm(0, 1, S, S, hd, 1.0f, da, di, v, nqkv, 0.0f, ds, S);    // dP = dO V^T
			gemm(1, 0, S, hd, S, 1.0f, pv, S, da, di, 1.0f, dv, nqkv);   // dV += P^T dO
			for (int64_t i = 0; dr && i < S * S; i++)                   // through the mask
				ds[i] = mask[off + i] ? ds[i] * dr->scale : 0.0f;
			for (int64_t i = 0; i < S; i++) {                           // softmax'
				const float *pr = pb + i * S;
				float *r = ds + i * S;
				double dot = 0;
				for (int64_t j = 0; j <= i; j++)
					dot += (double)pr[j] * (double)r[j];
				float fd = (float)dot;
				for (int64_t j = 0; j <= i; j++)
					r[j] = pr[j] * (r[j] - fd);
				for (int64_t j = i + 1; j < S; j++)
					r[j] = 0.0f;
			}
			gemm(0, 0, S, hd, S, scale, ds, S, k, nqkv, 1.0f, dq, nqkv); // dQ = c dS K
			gemm(1, 0, S, hd, S, scale, ds, S, q, nqkv, 1.0f, dk, nqkv); // dK += c dS^T Q
		}
	}
	if (a->rope)
		tk_rope(a, dqkv, 1);
	tk_linear_bwd_in(dqkv, wqkv, dx, N, d, nqkv, 0);
}

void tk_attn_bwd_in(const TkAttn *a, const float *wqkv, const float *wo, const float *qkv,
                    const float *p, const float *dy, float *dqkv, float *dx, float *work)
{
	tk_attn_bwd_in_drop(a, NULL, wqkv, wo, qkv, p, NULL, NULL, dy, dqkv, dx, work);
}

void tk_attn_bwd_w(const TkAttn *a, const float *x, const float *att, const float *dy,
                   const float *dqkv, float *dwqkv, float *dbqkv, float *dwo, float *dbo)
{
	Share sh = share(a);
	int64_t N = a->B * a->S, d = a->d;
	tk_linear_bwd_w(x, dqkv, dwqkv, dbqkv, N, d, sh.nqkv);
	tk_linear_bwd_w(att, dy, dwo, dbo, N, sh.di, d);
}

void tk_attn_bwd(const TkAttn *a, const float *x, const float *wqkv, const float *wo,
                 const float *qkv, const float *p, const float *att, const float *dy,
                 float *dqkv, float *dx, float *dwqkv, float *dbqkv, float *dwo, float *dbo,
                 float *work)
{
	tk_attn_bwd_in(a, wqkv, wo, qkv, p, dy, dqkv, dx, work);
	tk_attn_bwd_w(a, x, att, dy, dqkv, dwqkv, dbqkv, dwo, dbo);
}

/* ---- MLPs ---- */

/* GPT-2's tanh GELU, the function of runtime/cpu_layers.c, written through the identity
 * 0.5 (1 + tanh u) = sigmoid(2u): one exponential (tk_exp, which vectorizes) instead
 * of tanhf, which is several times slower in glibc and dominated small layers.  Equal
 * to the tanhf form to float rounding (not bit for bit). */
#define GELU_C 0.7978845608f // sqrt(2/pi)
#define GELU_A 0.044715f

static float gelu(float v)
{
	return v / (1.0f + tk_exp(-2.0f * GELU_C * (v + GELU_A * v * v * v)));
}

/* d/dv: s + v * 2 s (1 - s) * du/dv, with s = sigmoid(2u). */
static float gelu_grad(float v)
{
	float s = 1.0f / (1.0f + tk_exp(-2.0f * GELU_C * (v + GELU_A * v * v * v)));
	return s + 2.0f * v * s * (1.0f - s) * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
}

void tk_mlp_fwd(const float *x, const float *w1, const float *b1, const float *w2,
                const float *b2, float *h, float *a, float *y, int64_t N, int64_t d, int64_t f)
{
	tk_linear_fwd(x, w1, b1, h, N, d, f);
	for (int64_t i = 0; i < N * f; i++)
		a[i] = gelu(h[i]);
	tk_linear_fwd(a, w2, b2, y, N, f, d);
}

void tk_mlp_bwd_in(const float *w1, const float *w2, const float *h, const float *dy,
                   float *dh, float *dx, int64_t N, int64_t d, int64_t f)
{
	tk_linear_bwd_in(dy, w2, dh, N, f, d, 0);
	for (int64_t i = 0; i < N * f; i++)
		dh[i] *= gelu_grad(h[i]);
	tk_linear_bwd_in(dh, w1, dx, N, d, f, 0);
}

void tk_mlp_bwd_w(const float *x, const float *a, const float *dy, const float *dh,
                  float *dw1, float *db1, float *dw2, float *db2, int64_t N, int64_t d,
                  int64_t f)
{
	tk_linear_bwd_w(x, dh, dw1, db1, N, d, f);
	tk_linear_bwd_w(a, dy, dw2, db2, N, f, d);
}

void tk_mlp_bwd(const float *x, const float *w1, const float *w2, const float *h,
                const float *a, const float *dy, float *dh, float *dx, float *dw1, float *db1,
                float *dw2, float *db2, int64_t N, int64_t d, int64_t f)
{
	tk_mlp_bwd_in(w1, w2, h, dy, dh, dx, N, d, f);
	tk_mlp_bwd_w(x, a, dy, dh, dw1, db1, dw2, db2, N, d, f);
}

static float sigmoid(float v)
{
	return 1.0f / (1.0f + tk_exp(-v));
}

void tk_swiglu_fwd(const float *x, const float *wg, const float *wu, const float *wd, float *g,
                   float *u, float *a, float *y, int64_t N, int64_t d, int64_t f)
{
	tk_linear_fwd(x, wg, NULL, g, N, d, f);
	tk_linear_fwd(x, wu, NULL, u, N, d, f);
	for (int64_t i = 0; i < N * f; i++)
		a[i] = g[i] * sigmoid(g[i]) * u[i];
	tk_linear_fwd(a, wd, NULL, y, N, f, d);
}

void tk_swiglu_bwd_in(const float *wg, const float *wu, const float *wd, const float *g,
                      const float *u, const float *dy, float *dg, float *du, float *dx,
                      int64_t N, int64_t d, int64_t f)
{
	tk_linear_bwd_in(dy, wd, du, N, f, d, 0); // da, turned into du below in place
	for (int64_t i = 0; i < N * f; i++) {
		float da = du[i], s = sigmoid(g[i]);
		dg[i] = da * u[i] * s * (1.0f + g[i] * (1.0f - s));
		du[i] = da * g[i] * s;
	}
	tk_linear_bwd_in(dg, wg, dx, N, d, f, 0);
	tk_linear_bwd_in(du, wu, dx, N, d, f, 1);
}

void tk_swiglu_bwd_w(const float *x, const float *a, const float *dy, const float *dg,
                     const float *du, float *dwg, float *dwu, float *dwd, int64_t N, int64_t d,
                     int64_t f)
{
	tk_linear_bwd_w(x, dg, dwg, NULL, N, d, f);
	tk_linear_bwd_w(x, du, dwu, NULL, N, d, f);
	tk_linear_bwd_w(a, dy, dwd, NULL, N, f, d);
}

void tk_swiglu_bwd(const float *x, const float *wg, const float *wu, const float *wd,
                   const float *g, const float *u, const float *a, const float *dy, float *dg,
                   float *du, float *dx, float *dwg, float *dwu, float *dwd, int64_t N,
                   int64_t d, int64_t f)
{
	tk_swiglu_bwd_in(wg, wu, wd, g, u, dy, dg, du, dx, N, d, f);
	tk_swiglu_bwd_w(x, a, dy, dg, du, dwg, dwu, dwd, N, d, f);
}

void tk_geglu_fwd(const float *x, const float *wg, const float *wu, const float *wd, float *g,
                  float *u, float *a, float *y, int64_t N, int64_t d, int64_t f)
{
	tk_linear_fwd(x, wg, NULL, g, N, d, f);
	tk_linear_fwd(x, wu, NULL, u, N, d, f);
	for (int64_t i = 0; i < N * f; i++)
		a[i] = gelu(g[i]) * u[i];
	tk_linear_fwd(a, wd, NULL, y, N, f, d);
}

void tk_geglu_bwd_in(const float *wg, const float *wu, const float *wd, const float *g,
                     const float *u, const float *dy, float *dg, float *du, float *dx,
                     int64_t N, int64_t d, int64_t f)
{
	tk_linear_bwd_in(dy, wd, du, N, f, d, 0); // da, turned into du below in place
	for (int64_t i = 0; i < N * f; i++) {
		float da = du[i];
		dg[i] = da * u[i] * gelu_grad(g[i]);
		du[i] = da * gelu(g[i]);
	}
	tk_linear_bwd_in(dg, wg, dx, N, d, f, 0);
	tk_linear_bwd_in(du, wu, dx, N, d, f, 1);
}

/* ---- residual ---- */

void tk_residual_fwd(const float *x, const float *s, float *y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] + s[i];
}

void tk_residual_bwd(const float *dy, const float *dxs, float *dx, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dx[i] = dy[i] + dxs[i];
}

/* ---- vocabulary head and cross-entropy ---- */

void tk_head_fwd(const float *x, const float *wv, float *logits, int64_t N, int64_t d,
                 int64_t V)
{
	gemm(0, 1, N, V, d, 1.0f, x, d, wv, d, 0.0f, logits, V);
}

void tk_head_bwd_in(const float *wv, const float *dlogits, float *dx, int64_t N, int64_t d,
                    int64_t V)
{
	gemm(0, 0, N, d, V, 1.0f, dlogits, V, wv, d, 0.0f, dx, d);
}

void tk_head_bwd_w(const float *x, const float *dlogits, float *dwv, int64_t N, int64_t d,
                   int64_t V)
{
	gemm(1, 0, V, d, N, 1.0f, dlogits, V, x, d, 1.0f, dwv, d);
}

int tk_xent_fwd(const float *logits, const int32_t *tgt, float *lse, double *loss, int64_t N,
                int64_t V, int64_t Vp)
{
	if (!tokens_ok(tgt, N, V))
		return TK_EINVAL;
	double total = 0;
	for (int64_t i = 0; i < N; i++) {
		const float *r = logits + i * Vp; // columns V.. are padding, left out
		float mx = r[0];
		for (int64_t j = 1; j < V; j++)
			mx = r[j] > mx ? r[j] : mx;
		double s = 0;
		for (int64_t j = 0; j < V; j++)
			s += exp((double)r[j] - (double)mx);
		double l = (double)mx + log(s);
		lse[i] = (float)l;
		total += l - (double)r[tgt[i]];
	}
	*loss = total / (double)N;
	return TK_OK;
}

int tk_xent_bwd(const float *logits, const int32_t *tgt, const float *lse, float scale,
                float *dlogits, int64_t N, int64_t V, int64_t Vp)
{
	return tk_xent_tp_bwd(logits, tgt, lse, scale, dlogits, N, V, 0, Vp); // all columns
}

/* How many of a rank's columns [lo, lo + n) are real words of a vocabulary of V, the
 * rest being padding (tkernels.h): 0 to n. */
static int64_t real_cols(int64_t V, int64_t lo, int64_t n)
{
	return V - lo < 0 ? 0 : V - lo < n ? V - lo : n;
}


/* ---- cross-entropy split over the vocabulary (tp) ----
 * Each rank holds columns [lo, lo + n) of the logits.  The global row maximum M comes
 * first (a max all-reduce of tk_xent_tp_max's), so every exponential is taken against
 * the same M on every rank, as the whole kernel takes it: the sum of the ranks' sums is
 * then the whole sum (up to f32 rounding of the partial sums), without rescaling. */
void tk_xent_tp_max(const float *logits, float *mx, int64_t N, int64_t V, int64_t lo,
                    int64_t n)
{
	int64_t m_ = real_cols(V, lo, n);
	for (int64_t i = 0; i < N; i++) {
		const float *r = logits + i * n;
		float m = m_ ? r[0] : -INFINITY; // all padding: no say in the group's maximum
		for (int64_t j = 1; j < m_; j++)
			m = r[j] > m ? r[j] : m;
		mx[i] = m;
	}
}

int tk_xent_tp_sums(const float *logits, const int32_t *tgt, const float *mx, float *sum,
                    float *zt, int64_t N, int64_t V, int64_t lo, int64_t n)
{
	if (!tokens_ok(tgt, N, V))
		return TK_EINVAL;
	int64_t m = real_cols(V, lo, n);
	for (int64_t i = 0; i < N; i++) {
		const float *r = logits + i * n;
		double s = 0;
		for (int64_t j = 0; j < m; j++)
			s += exp((double)r[j] - (double)mx[i]);
		sum[i] = (float)s;
		zt[i] = tgt[i] >= lo && tgt[i] < lo + n ? r[tgt[i] - lo] : 0.0f;
	}
	return TK_OK;
}

void tk_xent_tp_end(const float *mx, const float *sum, const float *zt, float *lse,
                    double *loss, int64_t N)
{
	double total = 0;
	for (int64_t i = 0; i < N; i++) {
		double l = (double)mx[i] + log((double)sum[i]);
		lse[i] = (float)l;
		total += l - (double)zt[i];
	}
	*loss = total / (double)N;
}

int tk_xent_tp_bwd(const float *logits, const int32_t *tgt, const float *lse, float scale,
                   float *dlogits, int64_t N, int64_t V, int64_t lo, int64_t n)
{
	if (!tokens_ok(tgt, N, V))
		return TK_EINVAL;
	float k = (float)((double)scale / (double)N);
	int64_t m = real_cols(V, lo, n);
	for (int64_t i = 0; i < N; i++) {
		const float *r = logits + i * n;
		float *o = dlogits + i * n;
		for (int64_t j = 0; j < m; j++)
			o[j] = k * expf(r[j] - lse[i]);
		for (int64_t j = m; j < n; j++)
			o[j] = 0; // padding: never in the softmax, so no gradient
		if (tgt[i] >= lo && tgt[i] < lo + n)
			o[tgt[i] - lo] -= k;
	}
	return TK_OK;
}
