/* The cuda device's rows of the transformer kinds (embed, layernorm, rmsnorm,
 * attention with its dropout=P and flash, mlp, swiglu, head, xent): tkernels.c's math
 * (docs/layers.md) on the GPU, into the tensors the layer table gives each kind, run
 * through cu_layer_run (cuda_kernels.cu) on the rank's compute stream.  docs/gpu.md
 * describes the choices.
 *
 * Kernels are grid-stride loops: a thread per element; per row where a row is reduced
 * (norms, softmax rows, the loss: in the CPU's order, in double where the CPU sums in
 * double); per column where columns are summed over rows (norm-gain gradients, the
 * embedding's scatter), so no kernel uses float atomics and every result is the same
 * bits run after run.  Arithmetic uses rounded intrinsics where nvcc would otherwise
 * fuse what the CPU keeps apart, so what differs from the cpu device is the GEMMs and
 * the math library's exp/log.  Attention's per-(sequence, head) products are
 * strided-batched GEMMs, a call per query head batched over the sequences; grouped-query
 * attention is the head-to-kv-head mapping in that loop.
 *
 * At tp > 1 the rows compute one rank's shard (RtLayerCall.tp, tp_rank; docs/runtime.md
 * "Tensor parallelism"): attention over its heads, the MLPs over their hidden slice
 * (both from the shapes of the layer table's tensors), the embedding and head over their rows
 * of the vocabulary, the cross-entropy split as the cpu's (tp_fwd between the model's
 * all-reduces); a whole bias after a row-parallel output is added by tp rank 0 only.
 *
 * Token ids are checked on the device: a bad one is noted in the rank's mapped host
 * flag (CuTokBad, the first one wins) and reported at the rank's next download or
 * sync, with the cpu device's message; until then the kernels read row 0 for it, so
 * nothing reads outside a table. */
#include "cuda_dev.h"

extern "C" {
#include "tkernels.h" // TK_NORM_EPS, and the attention shape (plan/tfcount.h)
}

#define HAS(ly, key) (((ly)->flags & LAYER_FLAG(LAYER_KEY_##key)) != 0)

/* The call's tp group size (1: the whole layer). */
static int64_t tp_of(const RtLayerCall *c)
{
	return c->tp > 1 ? c->tp : 1;
}

/* A whole tensor added after a row-parallel output: by tp rank 0 only. */
static const RtTensor *once(const RtLayerCall *c, const RtTensor *t)
{
	return c->tp_rank == 0 ? t : NULL;
}

/* f32 and f64 arithmetic without fused multiply-adds, as the CPU computes: the
 * rounded intrinsics, which nvcc never contracts. */
#define fadd_rn __fadd_rn
#define fsub_rn __fsub_rn
#define fmul_rn __fmul_rn
#define dadd_rn __dadd_rn
#define dsub_rn __dsub_rn
#define dmul_rn __dmul_rn

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
/* The table's rows [lo, lo + n) on this rank (all of them at tp = 1): a token outside
 * them gives 0 (plus its position). */
static __global__ void k_embed_fwd(const float *tok, const float *wte, const float *wpe,
                                   float *y, int64_t N, int64_t S, int64_t d, int64_t V,
                                   int64_t lo, int64_t n)
{
	FOR_EACH(e, N * d)
	{
		int64_t t = e / d, j = e % d, id = tok_id(tok[t], V);
		int in = id >= lo && id < lo + n;
		float v = in ? wte[(id - lo) * d + j] : 0.0f;
		y[e] = wpe ? (in ? fadd_rn(v, wpe[(t % S) * d + j]) : wpe[(t % S) * d + j]) : v;
	}
}

/* dwte[tok[t]] += dy[t] (dwpe[t mod S] too): a thread per column j walks the tokens in
 * order, so every element sums in the CPU's order with no atomics (bit for bit the
 * CPU's, run after run). */
static __global__ void k_embed_bwd_w(const float *tok, const float *dy, float *dwte,
                                     float *dwpe, int64_t N, int64_t S, int64_t d, int64_t V,
                                     int64_t lo, int64_t n)
{
	FOR_EACH(j, d)
	{
		for (int64_t t = 0; t < N; t++) {
			float g = dy[t * d + j];
			int64_t id = tok_id(tok[t], V);
			if (id >= lo && id < lo + n) {
				float *e = dwte + (id - lo) * d + j;
				*e = fadd_rn(*e, g);
			}
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
 * above the diagonal; a thread per row.  Flash attention: with lo, each row's
 * log-sum-exp into lo[R] (F); with li, P = exp(p - li[R]) from a kept one (B). */
static __global__ void k_softmax_causal(float *p, int64_t rows, int64_t S, float *lo,
                                        const float *li)
{
	FOR_EACH(R, rows)
	{
		int64_t i = R % S;
		float *r = p + R * S, mx = r[0];
		for (int64_t j = 0; li && j < S; j++) // flash B: from the kept log-sum-exp
			r[j] = j <= i ? expf(fsub_rn(r[j], li[R])) : 0.0f;
		if (li)
			continue;
		for (int64_t j = 1; j <= i; j++)
			mx = r[j] > mx ? r[j] : mx;
		double sum = 0;
		for (int64_t j = 0; j <= i; j++) {
			r[j] = expf(fsub_rn(r[j], mx));
			sum = dadd_rn(sum, (double)r[j]);
		}
		if (lo) // flash F: the row's log-sum-exp
			lo[R] = (float)dadd_rn((double)mx, log(sum));
		float inv = (float)(1.0 / sum);
		for (int64_t j = 0; j <= i; j++)
			r[j] = fmul_rn(r[j], inv);
		for (int64_t j = i + 1; j < S; j++)
			r[j] = 0.0f;
	}
}

/* The softmax's gradient for head h: ds (B matrices S x S, dP in, dS out) from the
 * probabilities p (B*H matrices S x S, matrix b*H + h); a thread per (b, row).  With a
 * dropout mask (p's layout), dP is first taken through it (times scale). */
static __global__ void k_softmax_bwd(const float *p, float *ds, int64_t B, int64_t H, int64_t h,
                                     int64_t S, const uint8_t *mask, float scale)
{
	FOR_EACH(R, B * S)
	{
		int64_t b = R / S, i = R % S;
		const float *pr = p + ((b * H + h) * S + i) * S;
		float *r = ds + R * S;
		for (int64_t j = 0; mask && j <= i; j++)
			r[j] = mask[((b * H + h) * S + i) * S + j] ? fmul_rn(r[j], scale) : 0.0f;
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

/* Attention's dropout over the call's probabilities p (n = B x Hl x S x S, Hl heads
 * from head0 of the layer's H): its mask and pd = p * mask * scale, each element drawn
 * at its index over every head (tkernels.c's drop_head). */
static __global__ void k_attn_drop(const float *p, uint8_t *mask, float *pd, int64_t n, int64_t Hl,
                                   int64_t H, int64_t head0, int64_t SS, uint64_t key,
                                   uint64_t thr, float scale)
{
	FOR_EACH(e, n)
	{
		int64_t b = e / (Hl * SS), rest = e % (Hl * SS);
		int keep = cu_drop_keep(key, (uint64_t)((b * H + head0) * SS + rest), thr);
		mask[e] = (uint8_t)keep;
		pd[e] = keep ? fmul_rn(p[e], scale) : 0.0f;
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

/* a = gelu(g) u */
static __global__ void k_geglu_act(const float *g, const float *u, float *a, int64_t n)
{
	FOR_EACH(i, n)
	a[i] = fmul_rn(tk_gelu(g[i]), u[i]);
}

/* du holds da on entry; dg = da u gelu'(g), du = da gelu(g) */
static __global__ void k_geglu_act_bwd(const float *g, const float *u, float *dg, float *du,
                                       int64_t n)
{
	FOR_EACH(i, n)
	{
		float da = du[i];
		dg[i] = fmul_rn(fmul_rn(da, u[i]), tk_gelu_grad(g[i]));
		du[i] = fmul_rn(da, tk_gelu(g[i]));
	}
}

/* A thread per row: its lse (saved), its loss term (double, into rl); columns V.. padding. */
static __global__ void k_xent_rows(const float *x, const float *tgt, float *lse, double *rl,
                                   int64_t N, int64_t V, int64_t Vp)
{
	FOR_EACH(i, N)
	{
		const float *r = x + i * Vp;
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

/* dx = k (softmax(x) - onehot(tgt)) over the rank's columns [lo, lo + n) of V (all of
 * them at tp = 1); may run in place (an element reads only itself). */
static __global__ void k_xent_bwd(const float *x, const float *tgt, const float *lse, float k,
                                  float *dx, int64_t N, int64_t V, int64_t lo, int64_t n)
{
	FOR_EACH(e, N * n)
	{
		int64_t i = e / n, j = e % n;
		float o = fmul_rn(k, expf(fsub_rn(x[e], lse[i])));
		if (lo + j == tok_id(tgt[i], V))
			o = fsub_rn(o, k);
		dx[e] = lo + j < V ? o : 0.0f; // a padded column: no gradient
	}
}

/* The vocabulary-parallel loss (tkernels.h tk_xent_tp_*): each row's local maximum;
 * after its max all-reduce, the sum of exp(x - max) and the target's logit (0 outside
 * the rank's columns); after their sum all-reduce, lse and the row's loss term. */
static __global__ void k_xent_tp_max(const float *x, float *mx, int64_t N, int64_t V,
                                     int64_t lo, int64_t n)
{
	int64_t m_ = max((int64_t)0, min(n, V - lo)); // real columns: V.. is padding
	FOR_EACH(i, N)
	{
		const float *r = x + i * n;
		float m = m_ ? r[0] : -INFINITY;
		for (int64_t j = 1; j < m_; j++)
			m = r[j] > m ? r[j] : m;
		mx[i] = m;
	}
}

static __global__ void k_xent_tp_sums(const float *x, const float *tgt, const float *mx,
                                      float *sum, float *zt, int64_t N, int64_t V, int64_t lo,
                                      int64_t n)
{
	int64_t m = max((int64_t)0, min(n, V - lo));
	FOR_EACH(i, N)
	{
		const float *r = x + i * n;
		double s = 0;
		for (int64_t j = 0; j < m; j++)
			s = dadd_rn(s, exp(dsub_rn((double)r[j], (double)mx[i])));
		sum[i] = (float)s;
		int64_t id = tok_id(tgt[i], V);
		zt[i] = id >= lo && id < lo + n ? r[id - lo] : 0.0f;
	}
}

static __global__ void k_xent_tp_end(const float *mx, const float *sum, const float *zt,
                                     float *lse, double *rl, int64_t N)
{
	FOR_EACH(i, N)
	{
		double l = dadd_rn((double)mx[i], log((double)sum[i]));
		lse[i] = (float)l;
		rl[i] = dsub_rn(l, (double)zt[i]);
	}
}

/* ---- the rows ---- */

/* embed: y = wte[x] (+ wpe[position]); W scatters dy into the tokens' rows. */
static int embed_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	int64_t N = c->rows, d = c->layer->out, V = plan_vocab_real(&c->sh);
	int64_t n = c->sh.vocab / tp_of(c);
	if (check_tokens(r, c->x, V, 0))
		return RT_EFAIL;
	const RtTensor *wpe = c->nparams > 1 ? once(c, &c->param[EMBED_WPE]) : NULL;
	LAUNCH(r, k_embed_fwd, N * d, F32(c->x), F32(&c->param[EMBED_WTE]),
	       wpe ? F32(wpe) : (float *)NULL, F32(c->y), N, c->sh.seq, d, V, c->tp_rank * n, n);
	return RT_OK;
}

static int embed_bwd_w_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	int64_t N = c->rows, d = c->layer->out, V = plan_vocab_real(&c->sh);
	int64_t n = c->sh.vocab / tp_of(c);
	if (check_tokens(r, c->x, V, 0))
		return RT_EFAIL;
	LAUNCH(r, k_embed_bwd_w, d, F32(c->x), F32(c->dy), F32(&c->grad[EMBED_WTE]),
	       c->nparams > 1 ? F32(&c->grad[EMBED_WPE]) : (float *)NULL, N, c->sh.seq, d, V,
	       c->tp_rank * n, n);
	return RT_OK;
}

/* layernorm and rmsnorm: per-row statistics saved for B and W. */
static int layernorm_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	LAUNCH(r, k_layernorm_fwd, c->rows, F32(c->x), F32(&c->param[LAYERNORM_GAIN]),
	       F32(&c->param[LAYERNORM_BIAS]), TK_NORM_EPS, F32(c->y),
	       F32(c->saved[LAYERNORM_MEAN]), F32(c->saved[LAYERNORM_RSTD]), c->rows, c->layer->in);
	return RT_OK;
}

static int layernorm_bwd_in_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	LAUNCH(r, k_layernorm_bwd_in, c->rows, F32(c->x), F32(&c->param[LAYERNORM_GAIN]),
	       F32(c->saved[LAYERNORM_MEAN]), F32(c->saved[LAYERNORM_RSTD]), F32(c->dy), F32(c->dx),
	       c->rows, c->layer->in);
	return RT_OK;
}

static int layernorm_bwd_w_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	LAUNCH(r, k_layernorm_bwd_w, c->layer->in, F32(c->x), F32(c->saved[LAYERNORM_MEAN]),
	       F32(c->saved[LAYERNORM_RSTD]), F32(c->dy), F32(&c->grad[LAYERNORM_GAIN]),
	       F32(&c->grad[LAYERNORM_BIAS]), c->rows, c->layer->in);
	return RT_OK;
}

static int rmsnorm_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	LAUNCH(r, k_rmsnorm_fwd, c->rows, F32(c->x), F32(&c->param[RMSNORM_GAIN]), TK_NORM_EPS,
	       F32(c->y), F32(c->saved[RMSNORM_RSTD]), c->rows, c->layer->in);
	return RT_OK;
}

static int rmsnorm_bwd_in_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	LAUNCH(r, k_rmsnorm_bwd_in, c->rows, F32(c->x), F32(&c->param[RMSNORM_GAIN]),
	       F32(c->saved[RMSNORM_RSTD]), F32(c->dy), F32(c->dx), c->rows, c->layer->in);
	return RT_OK;
}

static int rmsnorm_bwd_w_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	LAUNCH(r, k_rmsnorm_bwd_w, c->layer->in, F32(c->x), F32(c->saved[RMSNORM_RSTD]), F32(c->dy),
	       F32(&c->grad[RMSNORM_GAIN]), c->rows, c->layer->in);
	return RT_OK;
}

/* The parameters by slot (ATTN_WQKV .. ATTN_BO, MLP_W1 .. MLP_B2): the layer table lays
 * them out weight, bias, weight, bias, without the biases when absent (NULL here). */
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
	int64_t di; // the rank's heads side by side: att's width, wo's rows (d at tp = 1)
	float scale;
} AttnDims;

/* The rank's heads at tp > 1 (TkAttn.tp): H / tp and Hkv / tp of width d / H. */
static AttnDims attn_dims(const TkAttn *a)
{
	AttnDims m;
	int64_t tp = a->tp > 1 ? a->tp : 1;
	m.B = a->B, m.S = a->S, m.d = a->d, m.H = a->H / tp, m.Hkv = a->Hkv / tp, m.hd = a->d / a->H;
	m.nqkv = (m.H + 2 * m.Hkv) * m.hd, m.N = a->B * a->S, m.grp = m.H / m.Hkv;
	m.di = m.H * m.hd;
	m.scale = (float)(1.0 / sqrt((double)m.hd));
	return m;
}

/* Head j's columns of every sequence in qkv (j counts q heads, then k, then v). */
static Opd qkv_head(const float *qkv, const AttnDims *m, int64_t j)
{
	return Opd{qkv, m->N * m->nqkv, j * m->hd, m->nqkv, m->S * m->nqkv};
}

/* P = softmax(scale q k^T), causal, from qkv (F, and selective recomputation's rebuild);
 * flash attention's F also writes the rows' log-sum-exp lo, its B rebuilds P from li. */
static int attn_probs(RtRank *r, const AttnDims *m, const float *qkv, float *p, float *lo,
                      const float *li)
{
	int64_t S = m->S, H = m->H;
	for (int64_t h = 0; h < H; h++)
		if (cu_gemm(r, 0, 1, S, S, m->hd, m->scale, qkv_head(qkv, m, h),
		            qkv_head(qkv, m, H + h / m->grp), 0.0f, p + h * S * S, S, H * S * S, m->B))
			return RT_EFAIL;
	LAUNCH(r, k_softmax_causal, m->B * H * S, p, m->B * H * S, S, lo, li);
	return RT_OK;
}

/* With dropout=P: its mask and the dropped P from P (k_attn_drop).  *pv: what
 * multiplies v, P or P dropped. */
static int attn_drop(RtRank *r, const RtLayerCall *c, const TkAttn *a, const AttnDims *m,
                     const float **pv)
{
	*pv = F32(c->saved[ATTN_PROBS]);
	if (!(c->layer->drop > 0))
		return RT_OK;
	TkDrop dr = tk_drop(c->layer->drop, c->key);
	int64_t SS = m->S * m->S, n = m->B * m->H * SS;
	LAUNCH(r, k_attn_drop, n, F32(c->saved[ATTN_PROBS]), (uint8_t *)c->saved[ATTN_MASK]->data,
	       F32(c->saved[ATTN_DROP]), n, m->H, a->H, c->tp_rank * m->H, SS, dr.key, dr.thr,
	       dr.scale);
	*pv = F32(c->saved[ATTN_DROP]);
	return RT_OK;
}

static int attn_rebuild_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	TkAttn a = plan_layer_attn(c->layer, &c->sh);
	a.tp = tp_of(c);
	AttnDims m = attn_dims(&a);
	const float *pv;
	int l = plan_attn_lse_slot(c->layer); // flash: P, mask and pd are scratch
	if (attn_probs(r, &m, F32(c->saved[ATTN_QKV]), F32(c->saved[ATTN_PROBS]), nullptr,
	               l < 0 ? nullptr : F32(c->saved[l])))
		return RT_EFAIL;
	return attn_drop(r, c, &a, &m, &pv);
}

static int attn_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	TkAttn a = plan_layer_attn(c->layer, &c->sh);
	a.tp = tp_of(c);
	AttnDims m = attn_dims(&a);
	const RtTensor *w[4];
	wb_params(c, c->param, w);
	float *qkv = F32(c->saved[ATTN_QKV]), *p = F32(c->saved[ATTN_PROBS]),
	      *att = F32(c->saved[ATTN_ATT]);
	int64_t S = m.S, H = m.H, np = m.B * H * S * S;
	if (cu_proj_fwd(r, c->x, w[ATTN_WQKV], w[ATTN_BQKV], c->saved[ATTN_QKV]))
		return RT_EFAIL;
	if (a.rope)
		LAUNCH(r, k_rope, m.N * (H + m.Hkv) * (m.hd / 2), qkv, m.N, S, H + m.Hkv, m.hd, m.nqkv,
		       a.rope_theta, 0);
	int l = plan_attn_lse_slot(c->layer);
	if (attn_probs(r, &m, qkv, p, l < 0 ? nullptr : F32(c->saved[l]), nullptr))
		return RT_EFAIL;
	const float *pv; // P, or P dropped
	if (attn_drop(r, c, &a, &m, &pv))
		return RT_EFAIL;
	for (int64_t h = 0; h < H; h++) // att = P v
		if (cu_gemm(r, 0, 0, S, m.hd, S, 1.0f, Opd{pv, np, h * S * S, S, H * S * S},
		            qkv_head(qkv, &m, H + m.Hkv + h / m.grp), 0.0f, att + h * m.hd, m.di,
		            S * m.di, m.B))
			return RT_EFAIL;
	return cu_proj_fwd(r, c->saved[ATTN_ATT], w[ATTN_WO],
	                   w[ATTN_BO] ? once(c, w[ATTN_BO]) : NULL, c->y);
}

/* B: datt (the workspace's first N*d floats) = dy wo^T, then per head dP, dV, dS, dQ,
 * dK into dqkv (held), rotary back, dx = dqkv wqkv^T.  dS takes B*S*S floats of
 * scratch (one head of every sequence at once). */
static int attn_bwd_in_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	TkAttn a = plan_layer_attn(c->layer, &c->sh);
	a.tp = tp_of(c);
	AttnDims m = attn_dims(&a);
	const RtTensor *w[4];
	wb_params(c, c->param, w);
	const float *qkv = F32(c->saved[ATTN_QKV]), *p = F32(c->saved[ATTN_PROBS]);
	int drop = c->layer->drop > 0; // dropout=P: P dropped multiplied v
	const float *pv = drop ? F32(c->saved[ATTN_DROP]) : p;
	const uint8_t *mask = drop ? (const uint8_t *)c->saved[ATTN_MASK]->data : NULL;
	float scale = drop ? tk_drop(c->layer->drop, 0).scale : 1.0f;
	float *dqkv = F32(c->held[ATTN_DQKV]), *datt = F32(c->work);
	int64_t S = m.S, H = m.H, np = m.B * H * S * S, nds = m.B * S * S;
	float *ds = (float *)cu_scratch(r, s, nds * (int64_t)sizeof(float));
	if (!ds || cu_proj_bwd_in(r, F32(c->dy), w[ATTN_WO], datt, m.N, 0.0f))
		return RT_EFAIL;
	CUDACHECK(r, cudaMemsetAsync(dqkv, 0, (size_t)(m.N * m.nqkv) * sizeof(float), cur(r)->cs));
	Opd dO0 = {datt, m.N * m.di, 0, m.di, S * m.di}, dS = {ds, nds, 0, S, S * S};
	for (int64_t h = 0; h < H; h++) {
		int64_t g = h / m.grp, jk = H + g, jv = H + m.Hkv + g;
		Opd dO = dO0, P = {pv, np, h * S * S, S, H * S * S};
		dO.off = h * m.hd;
		if (cu_gemm(r, 0, 1, S, S, m.hd, 1.0f, dO, qkv_head(qkv, &m, jv), 0.0f, ds, S, S * S,
		            m.B) || // dP = dO v^T
		    cu_gemm(r, 1, 0, S, m.hd, S, 1.0f, P, dO, 1.0f, dqkv + jv * m.hd, m.nqkv, S * m.nqkv,
		            m.B)) // dv += P^T dO
			return RT_EFAIL;
		LAUNCH(r, k_softmax_bwd, m.B * S, p, ds, m.B, H, h, S, mask, scale);
		if (cu_gemm(r, 0, 0, S, m.hd, S, m.scale, dS, qkv_head(qkv, &m, jk), 1.0f, dqkv + h * m.hd,
		            m.nqkv, S * m.nqkv, m.B) || // dq += c dS k
		    cu_gemm(r, 1, 0, S, m.hd, S, m.scale, dS, qkv_head(qkv, &m, h), 1.0f, dqkv + jk * m.hd,
		            m.nqkv, S * m.nqkv, m.B)) // dk += c dS^T q
			return RT_EFAIL;
	}
	if (a.rope)
		LAUNCH(r, k_rope, m.N * (H + m.Hkv) * (m.hd / 2), dqkv, m.N, S, H + m.Hkv, m.hd, m.nqkv,
		       a.rope_theta, 1);
	return c->dx ? cu_proj_bwd_in(r, dqkv, w[ATTN_WQKV], F32(c->dx), m.N, 0.0f) : RT_OK;
}

static int attn_bwd_w_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	const RtTensor *g[4];
	wb_params(c, c->grad, g);
	if (cu_proj_bwd_w(r, F32(c->x), F32(c->held[ATTN_DQKV]), (RtTensor *)g[ATTN_WQKV],
	                  (RtTensor *)g[ATTN_BQKV], c->rows))
		return RT_EFAIL;
	return cu_proj_bwd_w(r, F32(c->saved[ATTN_ATT]), F32(c->dy), (RtTensor *)g[ATTN_WO],
	                     (RtTensor *)g[ATTN_BO], c->rows);
}

/* mlp: gelu between two projections; saved h and gelu(h), held dh. */
static int mlp_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	const RtTensor *w[4];
	wb_params(c, c->param, w);
	if (cu_proj_fwd(r, c->x, w[MLP_W1], w[MLP_B1], c->saved[MLP_H]))
		return RT_EFAIL;
	LAUNCH(r, k_mlp_act, numel(c->saved[MLP_H]), F32(c->saved[MLP_H]), F32(c->saved[MLP_A]),
	       numel(c->saved[MLP_H]));
	return cu_proj_fwd(r, c->saved[MLP_A], w[MLP_W2], w[MLP_B2] ? once(c, w[MLP_B2]) : NULL,
	                   c->y);
}

static int mlp_bwd_in_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	const RtTensor *w[4];
	wb_params(c, c->param, w);
	float *dh = F32(c->held[MLP_DH]);
	if (cu_proj_bwd_in(r, F32(c->dy), w[MLP_W2], dh, c->rows, 0.0f))
		return RT_EFAIL;
	LAUNCH(r, k_mlp_act_bwd, numel(c->held[MLP_DH]), F32(c->saved[MLP_H]), dh,
	       numel(c->held[MLP_DH]));
	return c->dx ? cu_proj_bwd_in(r, dh, w[MLP_W1], F32(c->dx), c->rows, 0.0f) : RT_OK;
}

static int mlp_bwd_w_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	const RtTensor *g[4];
	wb_params(c, c->grad, g);
	if (cu_proj_bwd_w(r, F32(c->x), F32(c->held[MLP_DH]), (RtTensor *)g[MLP_W1],
	                  (RtTensor *)g[MLP_B1], c->rows))
		return RT_EFAIL;
	return cu_proj_bwd_w(r, F32(c->saved[MLP_A]), F32(c->dy), (RtTensor *)g[MLP_W2],
	                     (RtTensor *)g[MLP_B2], c->rows);
}

/* swiglu, geglu: act(x wg) * (x wu), then wd (act silu, or gelu for geglu); saved g, u,
 * a; held dg, du. */
static int glu_fwd(RtRank *r, const RtLayerCall *c, int gelu)
{
	if (cu_proj_fwd(r, c->x, &c->param[SWIGLU_WG], NULL, c->saved[SWIGLU_G]) ||
	    cu_proj_fwd(r, c->x, &c->param[SWIGLU_WU], NULL, c->saved[SWIGLU_U]))
		return RT_EFAIL;
	int64_t n = numel(c->saved[SWIGLU_G]);
	if (gelu)
		LAUNCH(r, k_geglu_act, n, F32(c->saved[SWIGLU_G]), F32(c->saved[SWIGLU_U]),
		       F32(c->saved[SWIGLU_A]), n);
	else
		LAUNCH(r, k_swiglu_act, n, F32(c->saved[SWIGLU_G]), F32(c->saved[SWIGLU_U]),
		       F32(c->saved[SWIGLU_A]), n);
	return cu_proj_fwd(r, c->saved[SWIGLU_A], &c->param[SWIGLU_WD], NULL, c->y);
}

static int swiglu_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	return glu_fwd(r, c, 0);
}

static int geglu_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	return glu_fwd(r, c, 1);
}

static int glu_bwd_in(RtRank *r, const RtLayerCall *c, int gelu)
{
	float *dg = F32(c->held[SWIGLU_DG]), *du = F32(c->held[SWIGLU_DU]);
	int64_t n = numel(c->held[SWIGLU_DG]);
	if (cu_proj_bwd_in(r, F32(c->dy), &c->param[SWIGLU_WD], du, c->rows, 0.0f)) // da, into du
		return RT_EFAIL;
	if (gelu)
		LAUNCH(r, k_geglu_act_bwd, n, F32(c->saved[SWIGLU_G]), F32(c->saved[SWIGLU_U]), dg,
		       du, n);
	else
		LAUNCH(r, k_swiglu_act_bwd, n, F32(c->saved[SWIGLU_G]), F32(c->saved[SWIGLU_U]), dg,
		       du, n);
	if (!c->dx)
		return RT_OK;
	if (cu_proj_bwd_in(r, dg, &c->param[SWIGLU_WG], F32(c->dx), c->rows, 0.0f))
		return RT_EFAIL;
	return cu_proj_bwd_in(r, du, &c->param[SWIGLU_WU], F32(c->dx), c->rows, 1.0f);
}

static int swiglu_bwd_in_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	return glu_bwd_in(r, c, 0);
}

static int geglu_bwd_in_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	return glu_bwd_in(r, c, 1);
}

static int swiglu_bwd_w_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	if (cu_proj_bwd_w(r, F32(c->x), F32(c->held[SWIGLU_DG]), &c->grad[SWIGLU_WG], NULL,
	                  c->rows) ||
	    cu_proj_bwd_w(r, F32(c->x), F32(c->held[SWIGLU_DU]), &c->grad[SWIGLU_WU], NULL,
	                  c->rows))
		return RT_EFAIL;
	return cu_proj_bwd_w(r, F32(c->saved[SWIGLU_A]), F32(c->dy), &c->grad[SWIGLU_WD], NULL,
	                     c->rows);
}

/* head: logits = x wv^T, wv V x d (the embedding's table when tied). */
static int head_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	int64_t N = c->rows, d = c->layer->in, V = c->layer->out / tp_of(c);
	return cu_gemm(r, 0, 1, N, V, d, 1.0f, cu_mat(c->x), cu_mat(&c->param[HEAD_WV]), 0.0f,
	               F32(c->y), V, 0, 1);
}

static int head_bwd_in_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	int64_t N = c->rows, d = c->layer->in, V = c->layer->out / tp_of(c);
	return cu_gemm(r, 0, 0, N, d, V, 1.0f, cu_mat(c->dy), cu_mat(&c->param[HEAD_WV]), 0.0f,
	               F32(c->dx), d, 0, 1);
}

static int head_bwd_w_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	int64_t N = c->rows, d = c->layer->in, V = c->layer->out / tp_of(c);
	return cu_gemm(r, 1, 0, V, d, N, 1.0f, cu_mat(c->dy), cu_mat(c->x), 1.0f,
	               F32(&c->grad[HEAD_WV]), d, 0, 1);
}

/* xent: mean cross-entropy of the rows against their next tokens, into loss[slot];
 * saves each row's log-sum-exp and the targets. */
static int xent_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	int64_t N = c->rows, V = plan_vocab_real(&c->sh), n = c->layer->in / tp_of(c);
	if (c->slot < 0 || c->slot >= c->loss->cols)
		return rt_error(r, "internal: loss slot %d of %lld", c->slot, (long long)c->loss->cols);
	if (check_tokens(r, c->target, V, 1))
		return RT_EFAIL;
	CUDACHECK(r,
	          cudaMemcpyAsync(c->saved[XENT_TARGETS]->data, c->target->data,
	                          (size_t)c->target->bytes, cudaMemcpyDeviceToDevice, cur(r)->cs));
	if (tp_of(c) > 1) { // the local maxima into y's row 0; tp_fwd does the rest
		LAUNCH(r, k_xent_tp_max, N, F32(c->x), F32(c->y), N, V, c->tp_rank * n, n);
		return RT_OK;
	}
	double *rl = (double *)cu_scratch(r, s, N * (int64_t)sizeof(double));
	if (!rl)
		return RT_EFAIL;
	LAUNCH(r, k_xent_rows, N, F32(c->x), F32(c->target), F32(c->saved[XENT_LSE]), rl, N, V,
	       c->layer->in);
	k_xent_sum<<<1, 1, 0, cur(r)->cs>>>(rl, N, F32(c->loss) + c->slot);
	CUDACHECK(r, cudaGetLastError());
	return RT_OK;
}

/* Between the model's all-reduces (rt_backend.h, tp_fwd): phase 1 the sums against the
 * group's maxima, phase 2 lse and the loss. */
static int xent_tp_fwd_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	int64_t N = c->rows, V = plan_vocab_real(&c->sh), n = c->layer->in / tp_of(c);
	float *y = F32(c->y);
	if (c->phase == 1) {
		if (check_tokens(r, c->saved[XENT_TARGETS], V, 1))
			return RT_EFAIL;
		LAUNCH(r, k_xent_tp_sums, N, F32(c->x), F32(c->saved[XENT_TARGETS]), y, y + N,
		       y + 2 * N, N, V, c->tp_rank * n, n);
		return RT_OK;
	}
	double *rl = (double *)cu_scratch(r, s, N * (int64_t)sizeof(double));
	if (!rl)
		return RT_EFAIL;
	LAUNCH(r, k_xent_tp_end, N, y, y + N, y + 2 * N, F32(c->saved[XENT_LSE]), rl, N);
	k_xent_sum<<<1, 1, 0, cur(r)->cs>>>(rl, N, F32(c->loss) + c->slot);
	CUDACHECK(r, cudaGetLastError());
	return RT_OK;
}

static int xent_bwd_in_body(RtRank *r, const RtLayerCall *c, CuScratch *s)
{
	(void)s;
	int64_t N = c->rows, V = plan_vocab_real(&c->sh), n = c->layer->in / tp_of(c);
	if (check_tokens(r, c->saved[XENT_TARGETS], V, 1))
		return RT_EFAIL;
	float k = (float)((double)c->scale / (double)N); // as tk_xent_bwd
	LAUNCH(r, k_xent_bwd, N * n, F32(c->x), F32(c->saved[XENT_TARGETS]),
	       F32(c->saved[XENT_LSE]), k, F32(c->dx), N, V, c->tp_rank * n, n);
	return RT_OK;
}

/* The rows' entry points: the bodies run by layer_run for their phase. */
CU_ROW_FN(embed_fwd, CU_F)
CU_ROW_FN(embed_bwd_w, CU_W)
CU_ROW_FN(layernorm_fwd, CU_F)
CU_ROW_FN(layernorm_bwd_in, CU_B)
CU_ROW_FN(layernorm_bwd_w, CU_W)
CU_ROW_FN(rmsnorm_fwd, CU_F)
CU_ROW_FN(rmsnorm_bwd_in, CU_B)
CU_ROW_FN(rmsnorm_bwd_w, CU_W)
CU_ROW_FN(attn_fwd, CU_F)
CU_ROW_FN(attn_bwd_in, CU_B)
CU_ROW_FN(attn_bwd_w, CU_W)
CU_ROW_FN(attn_rebuild, CU_F)
CU_ROW_FN(mlp_fwd, CU_F)
CU_ROW_FN(mlp_bwd_in, CU_B)
CU_ROW_FN(mlp_bwd_w, CU_W)
CU_ROW_FN(swiglu_fwd, CU_F)
CU_ROW_FN(swiglu_bwd_in, CU_B)
CU_ROW_FN(swiglu_bwd_w, CU_W)
CU_ROW_FN(geglu_fwd, CU_F)
CU_ROW_FN(geglu_bwd_in, CU_B)
CU_ROW_FN(head_fwd, CU_F)
CU_ROW_FN(head_bwd_in, CU_B)
CU_ROW_FN(head_bwd_w, CU_W)
CU_ROW_FN(xent_fwd, CU_F)
CU_ROW_FN(xent_bwd_in, CU_B)
CU_ROW_FN(xent_tp_fwd, CU_F)

extern const CuLayerRow cu_tf_rows[] = {
	{LAYER_EMBED, {embed_fwd, nullptr, embed_bwd_w}},
	{LAYER_LAYERNORM, {layernorm_fwd, layernorm_bwd_in, layernorm_bwd_w}},
	{LAYER_RMSNORM, {rmsnorm_fwd, rmsnorm_bwd_in, rmsnorm_bwd_w}},
	{LAYER_ATTN, {attn_fwd, attn_bwd_in, attn_bwd_w, nullptr, attn_rebuild}},
	{LAYER_MLP, {mlp_fwd, mlp_bwd_in, mlp_bwd_w}},
	{LAYER_SWIGLU, {swiglu_fwd, swiglu_bwd_in, swiglu_bwd_w}},
	{LAYER_HEAD, {head_fwd, head_bwd_in, head_bwd_w}},
	{LAYER_XENT, {xent_fwd, xent_bwd_in, nullptr, xent_tp_fwd}},
	{LAYER_GEGLU, {geglu_fwd, geglu_bwd_in, swiglu_bwd_w}},
};
extern const int cu_tf_nrows = sizeof cu_tf_rows / sizeof *cu_tf_rows;
