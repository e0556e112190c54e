/* Hugging Face files (--export, --init; docs/runtime.md "Hugging Face files").
 *
 * The model's parameters map onto Hugging Face's names by one table, a row per (model
 * architecture, layer kind, the role of a norm, parameter, segment): a name pattern with
 * the transformer block's number, whether the tensor is transposed (Llama's nn.Linear
 * keeps [out, in], pipecc and GPT-2's Conv1D [in, out]) and whether it is a vector (a
 * bias or gain: pipecc's 1 x n, Hugging Face's [n]).  A norm's role is what follows it:
 * attention (ln_1, input_layernorm), the MLP (ln_2, post_attention_layernorm) or the
 * head (ln_f, norm).  Llama's q, k and v projections are the three column segments of
 * pipecc's fused wqkv.  pipecc's rotary embedding rotates the pairs (i, i + hd / 2) of a
 * head, as Hugging Face's Llama does (rotate_half), so no permutation of q and k is
 * needed; a query head h reads key/value head h / (H / Hkv), as repeat_kv's.  A tied
 * head has no tensor of its own (a copy on another rank is filled from the embedding's).
 * The same list, made once from the plan, drives both directions. */
#include "hf.h"
#include "rt_private.h"
#include "safet.h"
#include "errf.h"
#include "mapf.h"
#include "../plan/tfcount.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const rt_hf_arch_names[RT_HF_COUNT] = {"gpt2", "llama"};

/* A norm's role: the kind of the next layer with parameters. */
enum { ROLE_ANY, ROLE_ATTN, ROLE_MLP, ROLE_FINAL };

typedef struct {
	uint8_t arch, kind, role, part;
	int8_t seg;      // wqkv's q, k or v columns (0, 1, 2); -1: the whole tensor
	uint8_t transpose, vec;
	const char *name; // %d: the block's number
} HfRow;

#define G RT_HF_GPT2
#define L RT_HF_LLAMA
static const HfRow hf_rows[] = {
	{G, LAYER_EMBED, ROLE_ANY, EMBED_WTE, -1, 0, 0, "wte.weight"},
	{G, LAYER_EMBED, ROLE_ANY, EMBED_WPE, -1, 0, 0, "wpe.weight"},
	{G, LAYER_LAYERNORM, ROLE_ATTN, LAYERNORM_GAIN, -1, 0, 1, "h.%d.ln_1.weight"},
	{G, LAYER_LAYERNORM, ROLE_ATTN, LAYERNORM_BIAS, -1, 0, 1, "h.%d.ln_1.bias"},
	{G, LAYER_LAYERNORM, ROLE_MLP, LAYERNORM_GAIN, -1, 0, 1, "h.%d.ln_2.weight"},
	{G, LAYER_LAYERNORM, ROLE_MLP, LAYERNORM_BIAS, -1, 0, 1, "h.%d.ln_2.bias"},
	{G, LAYER_LAYERNORM, ROLE_FINAL, LAYERNORM_GAIN, -1, 0, 1, "ln_f.weight"},
	{G, LAYER_LAYERNORM, ROLE_FINAL, LAYERNORM_BIAS, -1, 0, 1, "ln_f.bias"},
	{G, LAYER_ATTN, ROLE_ANY, ATTN_WQKV, -1, 0, 0, "h.%d.attn.c_attn.weight"},
	{G, LAYER_ATTN, ROLE_ANY, ATTN_BQKV, -1, 0, 1, "h.%d.attn.c_attn.bias"},
	{G, LAYER_ATTN, ROLE_ANY, ATTN_WO, -1, 0, 0, "h.%d.attn.c_proj.weight"},
	{G, LAYER_ATTN, ROLE_ANY, ATTN_BO, -1, 0, 1, "h.%d.attn.c_proj.bias"},
	{G, LAYER_MLP, ROLE_ANY, MLP_W1, -1, 0, 0, "h.%d.mlp.c_fc.weight"},
	{G, LAYER_MLP, ROLE_ANY, MLP_B1, -1, 0, 1, "h.%d.mlp.c_fc.bias"},
	{G, LAYER_MLP, ROLE_ANY, MLP_W2, -1, 0, 0, "h.%d.mlp.c_proj.weight"},
	{G, LAYER_MLP, ROLE_ANY, MLP_B2, -1, 0, 1, "h.%d.mlp.c_proj.bias"},
	{G, LAYER_HEAD, ROLE_ANY, HEAD_WV, -1, 0, 0, "lm_head.weight"},
	{L, LAYER_EMBED, ROLE_ANY, EMBED_WTE, -1, 0, 0, "model.embed_tokens.weight"},
	{L, LAYER_RMSNORM, ROLE_ATTN, RMSNORM_GAIN, -1, 0, 1, "model.layers.%d.input_layernorm.weight"},
	{L, LAYER_RMSNORM, ROLE_MLP, RMSNORM_GAIN, -1, 0, 1,
	 "model.layers.%d.post_attention_layernorm.weight"},
	{L, LAYER_RMSNORM, ROLE_FINAL, RMSNORM_GAIN, -1, 0, 1, "model.norm.weight"},
	{L, LAYER_ATTN, ROLE_ANY, ATTN_WQKV, 0, 1, 0, "model.layers.%d.self_attn.q_proj.weight"},
	{L, LAYER_ATTN, ROLE_ANY, ATTN_WQKV, 1, 1, 0, "model.layers.%d.self_attn.k_proj.weight"},
	{L, LAYER_ATTN, ROLE_ANY, ATTN_WQKV, 2, 1, 0, "model.layers.%d.self_attn.v_proj.weight"},
	{L, LAYER_ATTN, ROLE_ANY, ATTN_WO, -1, 1, 0, "model.layers.%d.self_attn.o_proj.weight"},
	{L, LAYER_SWIGLU, ROLE_ANY, SWIGLU_WG, -1, 1, 0, "model.layers.%d.mlp.gate_proj.weight"},
	{L, LAYER_SWIGLU, ROLE_ANY, SWIGLU_WU, -1, 1, 0, "model.layers.%d.mlp.up_proj.weight"},
	{L, LAYER_SWIGLU, ROLE_ANY, SWIGLU_WD, -1, 1, 0, "model.layers.%d.mlp.down_proj.weight"},
	{L, LAYER_HEAD, ROLE_ANY, HEAD_WV, -1, 0, 0, "lm_head.weight"},
};
#undef G
#undef L
#define NROWS ((int)(sizeof hf_rows / sizeof hf_rows[0]))

/* One Hugging Face tensor of the plan's model: where its numbers lie in its stage's
 * whole (tp = 1) buffer. */
typedef struct {
	char name[RT_ST_NAME];
	int stage;
	int64_t off, rows, cols; // pipecc's tensor: offset in the stage's buffer, shape
	int64_t c0, c1;          // the columns it takes, [c0, c1)
	int transpose, vec;
	int dup; // a tied head's copy of the embedding's table: filled, never written
} HfTensor;

struct RtHf {
	HfTensor *t;
	int n;
	void *map;
	size_t len;
	RtStFile st;
};

/* The architecture of p's layers: Llama's norm or MLP kinds, else GPT-2's; -1 if none. */
static int arch_of(const Plan *p)
{
	int arch = -1;
	for (int s = 0; s < p->nstages; s++)
		for (int l = 0; l < p->stages[s].nlayers; l++) {
			int k = p->stages[s].layers[l].kind;
			if (k == LAYER_RMSNORM || k == LAYER_SWIGLU)
				return RT_HF_LLAMA;
			if (k == LAYER_LAYERNORM || k == LAYER_MLP)
				arch = RT_HF_GPT2;
		}
	return arch;
}

/* The layer after (s, l) that has parameters, in model order; its kind, or -1. */
static int next_kind(const Plan *p, int s, int l)
{
	LayerShape sh = plan_shape(p);
	for (l++; s < p->nstages; s++, l = 0)
		for (; l < p->stages[s].nlayers; l++) {
			LayerTensors t;
			plan_layer_tensors(&p->stages[s].layers[l], &sh, 1, &t);
			if (t.nparams)
				return p->stages[s].layers[l].kind;
		}
	return -1;
}

static int role_of(const Plan *p, int s, int l)
{
	int k = p->stages[s].layers[l].kind;
	if (k != LAYER_LAYERNORM && k != LAYER_RMSNORM)
		return ROLE_ANY;
	int nk = next_kind(p, s, l);
	return nk == LAYER_ATTN ? ROLE_ATTN : nk == LAYER_HEAD || nk < 0 ? ROLE_FINAL : ROLE_MLP;
}

/* Segment seg (q, k or v) of an attention layer's wqkv: its columns. */
static void qkv_cols(const PlanLayer *ly, const LayerShape *sh, int seg, int64_t *c0, int64_t *c1)
{
	TkAttn a = plan_layer_attn(ly, sh);
	int64_t hd = ly->in / a.H, w[3] = {a.H * hd, a.Hkv * hd, a.Hkv * hd};
	*c0 = 0;
	for (int k = 0; k < seg; k++)
		*c0 += w[k];
	*c1 = *c0 + w[seg];
}

/* The named slot (plan/layer.h) of a layer's j-th parameter: attention's and mlp's
 * biases are there only with `bias`, and without them the weights move up (0, 2). */
static int slot_of(const PlanLayer *ly, int j)
{
	int wb = ly->kind == LAYER_ATTN || ly->kind == LAYER_MLP;
	return wb && !(ly->flags & LAYER_FLAG(LAYER_KEY_BIAS)) ? 2 * j : j;
}

/* Adds the rows of parameter j of layer (s, l) (block blk) to the list; 0, or -1. */
static int add_param(const Plan *p, int arch, int s, int l, int j, const LayerTensor *pc,
                     int64_t off, int blk, int dup, HfTensor **t, int *n, char *err, size_t en)
{
	const PlanLayer *ly = &p->stages[s].layers[l];
	LayerShape sh = plan_shape(p);
	int role = role_of(p, s, l), found = 0;
	for (int i = 0; i < NROWS; i++) {
		const HfRow *r = &hf_rows[i];
		if (r->arch != arch || r->kind != ly->kind || r->part != slot_of(ly, j) ||
		    (r->role != ROLE_ANY && r->role != role))
			continue;
		HfTensor *x = realloc(*t, (size_t)(*n + 1) * sizeof **t);
		if (!x)
			return rt_errf(err, en, "out of memory");
		*t = x;
		x = &x[(*n)++];
		memset(x, 0, sizeof *x);
		snprintf(x->name, sizeof x->name, r->name, blk);
		x->stage = s;
		x->off = off;
		x->rows = pc->rows;
		x->cols = pc->cols;
		x->c1 = pc->cols;
		if (r->seg >= 0)
			qkv_cols(ly, &sh, r->seg, &x->c0, &x->c1);
		x->transpose = r->transpose;
		x->vec = r->vec;
		x->dup = dup;
		found = 1;
	}
	if (!found)
		return rt_errf(err, en, "layer %d (%s, stage %s) has no %s name for its parameter %d",
		               rt_layer_position(p, s, l), plan_layers[ly->kind].name, p->stages[s].name,
		               rt_hf_arch_names[arch], j);
	return 0;
}

/* The Hugging Face tensors of p's model, in model order (malloc'd, *n of them). */
static int hf_list(const Plan *p, HfTensor **out, int *n, char *err, size_t en)
{
	int arch = arch_of(p), blk = 0;
	LayerShape sh = plan_shape(p);
	*out = NULL;
	*n = 0;
	if (arch < 0)
		return rt_errf(err, en, "the model has neither GPT-2's layers (layernorm, mlp) nor "
		               "Llama's (rmsnorm, swiglu): no Hugging Face names fit it");
	for (int s = 0; s < p->nstages; s++) {
		int64_t off = 0;
		for (int l = 0; l < p->stages[s].nlayers; l++) {
			const PlanLayer *ly = &p->stages[s].layers[l];
			LayerTensors t;
			plan_layer_tensors(ly, &sh, 1, &t);
			int b = ly->kind == LAYER_ATTN || role_of(p, s, l) == ROLE_ATTN ? blk : blk - 1;
			for (int j = t.borrowed; j < t.nparams; j++) {
				int copy = t.copy && j == 0, es = s;
				int el = copy ? rt_model_embed_layer(p, &es) : -1;
				int rc = copy && el >= 0
				             ? add_param(p, arch, es, el, EMBED_WTE, &t.param[j], off, 0, 1, out, n,
				                         err, en)
				             : add_param(p, arch, s, l, j, &t.param[j], off, b, 0, out, n, err, en);
				if (rc)
					return -1;
				if (copy && el >= 0)
					(*out)[*n - 1].stage = s;
				off += t.param[j].rows * t.param[j].cols;
			}
			blk += ly->kind == LAYER_ATTN;
		}
	}
	return 0;
}

/* The Hugging Face shape of x. */
static int shape_of(const HfTensor *x, int64_t *dim)
{
	int64_t w = x->c1 - x->c0;
	if (x->vec) {
		dim[0] = x->rows * w;
		return 1;
	}
	dim[0] = x->transpose ? w : x->rows;
	dim[1] = x->transpose ? x->rows : w;
	return 2;
}

/* x's numbers between pipecc's buffer (whole) and Hugging Face's layout (hf): out 1
 * from whole into hf, else back. */
static void move(const HfTensor *x, float *whole, float *hf, int out)
{
	float *w = whole + x->off;
	int64_t wid = x->c1 - x->c0;
	for (int64_t i = 0; i < x->rows; i++)
		for (int64_t c = x->c0; c < x->c1; c++) {
			int64_t h = x->transpose ? (c - x->c0) * x->rows + i : i * wid + (c - x->c0);
			float *a = &w[i * x->cols + c];
			if (out)
				hf[h] = *a;
			else
				*a = hf[h];
		}
}

/* A shape as "768x2304" or "768". */
static const char *dims_text(int nd, const int64_t *d, char *buf, size_t n)
{
	int k = snprintf(buf, n, "%" PRId64, d[0]);
	for (int i = 1; i < nd && k > 0 && (size_t)k < n; i++)
		k += snprintf(buf + k, n - (size_t)k, "x%" PRId64, d[i]);
	return buf;
}

/* Elements of x in Hugging Face's layout. */
static int64_t elems(const HfTensor *x)
{
	return x->rows * (x->c1 - x->c0);
}

/* A buffer for the largest of the n tensors at t on stage s (-1: on any); NULL when out
 * of memory. */
static float *buf_for(const HfTensor *t, int n, int s)
{
	int64_t most = 1;
	for (int i = 0; i < n; i++)
		if ((s < 0 || t[i].stage == s) && elems(&t[i]) > most)
			most = elems(&t[i]);
	return malloc((size_t)most * sizeof(float));
}

static int write_all(FILE *f, const void *buf, size_t n)
{
	return fwrite(buf, 1, n, f) == n ? 0 : -1;
}

/* The file's bytes into f: header, then each tensor not a duplicate, in list order. */
static int write_hf(FILE *f, const HfTensor *t, int n, float *const *whole, char *err, size_t en)
{
	RtStFile st = {0};
	int rc = rt_st_meta(&st, "format", "pt", err, en);
	for (int i = 0; i < n && !rc; i++) {
		int64_t dim[2];
		if (!t[i].dup)
			rc = rt_st_add(&st, t[i].name, shape_of(&t[i], dim), dim, err, en);
	}
	size_t hlen = 0;
	unsigned char *hdr = rc ? NULL : rt_st_header(&st, &hlen);
	float *buf = hdr ? buf_for(t, n, -1) : NULL;
	if (!rc && !buf)
		rc = rt_errf(err, en, "out of memory");
	if (!rc && write_all(f, hdr, hlen))
		rc = rt_errf(err, en, "%s", strerror(errno));
	for (int i = 0; i < n && !rc; i++) {
		if (t[i].dup)
			continue;
		move(&t[i], whole[t[i].stage], buf, 1);
		if (write_all(f, buf, (size_t)elems(&t[i]) * sizeof(float)))
			rc = rt_errf(err, en, "%s", strerror(errno));
	}
	free(buf);
	free(hdr);
	rt_st_free(&st);
	return rc;
}

int rt_hf_export(const RtCkpt *c, const Plan *p, int optim, const char *path, char *err,
                 size_t n)
{
	HfTensor *t = NULL;
	int nt = 0, rc = rt_ckpt_check(c, p, optim, err, n) || hf_list(p, &t, &nt, err, n);
	float **whole = rc ? NULL : calloc((size_t)p->nstages, sizeof *whole);
	if (!rc && !whole)
		rc = rt_errf(err, n, "out of memory");
	LayerShape sh = plan_shape(p);
	for (int s = 0; s < p->nstages && !rc; s++) {
		int64_t np = 0;
		for (int l = 0; l < p->stages[s].nlayers; l++)
			np += plan_layer_figures(&p->stages[s].layers[l], &sh).params;
		if (!(whole[s] = calloc((size_t)(np + 1), sizeof(float))) || rt_ckpt_fill(c, p, s, 0, whole[s]))
			rc = rt_errf(err, n, "out of memory");
	}
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
	FILE *f = rc ? NULL : fopen(tmp, "wb");
	if (!rc && !f)
		rc = rt_errf(err, n, "%s: %s", tmp, strerror(errno));
	if (!rc)
		rc = write_hf(f, t, nt, whole, err, n);
	if (f && (fflush(f) || fsync(fileno(f)) || fclose(f)) && !rc)
		rc = rt_errf(err, n, "%s: %s", tmp, strerror(errno));
	if (!rc && rename(tmp, path))
		rc = rt_errf(err, n, "%s: %s", path, strerror(errno));
	if (rc && f)
		unlink(tmp);
	for (int s = 0; whole && s < p->nstages; s++)
		free(whole[s]);
	free(whole);
	free(t);
	return rc;
}

void rt_hf_close(RtHf *h)
{
	if (!h)
		return;
	rt_unmap_file(h->map, h->len);
	rt_st_free(&h->st);
	free(h->t);
	free(h);
}

/* Every tensor of h's list is in its file, in its shape; 0, or -1 naming the first not. */
static int check_file(const RtHf *h, const char *path, char *err, size_t n)
{
	for (int i = 0; i < h->n; i++) {
		const HfTensor *x = &h->t[i];
		int64_t dim[2];
		int nd = shape_of(x, dim);
		const RtStTensor *f = rt_st_find(&h->st, x->name);
		if (!f)
			return rt_errf(err, n, "%s: error: tensor '%s' is missing (the plan's model needs "
			               "it)", path, x->name);
		int same = f->ndim == nd;
		for (int k = 0; k < nd && same; k++)
			same = f->dim[k] == dim[k];
		char a[64], b[64];
		if (!same)
			return rt_errf(err, n, "%s: error: tensor '%s' is %s, and the plan's is %s", path,
			               x->name, dims_text(f->ndim, f->dim, a, sizeof a),
			               dims_text(nd, dim, b, sizeof b));
	}
	return 0;
}

RtHf *rt_hf_open(const char *path, const Plan *p, char *err, size_t n)
{
	RtHf *h = calloc(1, sizeof *h);
	if (!h) {
		rt_errf(err, n, "out of memory");
		return NULL;
	}
	char why[512];
	int e = rt_map_file(path, &h->map, &h->len), rc = 0;
	if (e)
		rc = rt_errf(err, n, "%s: error: %s", path, strerror(e));
	if (!rc && rt_st_parse(&h->st, h->map, h->len, why, sizeof why))
		rc = rt_errf(err, n, "%s: error: %s", path, why);
	if (!rc && hf_list(p, &h->t, &h->n, why, sizeof why))
		rc = rt_errf(err, n, "%s: error: --init: %s", path, why);
	if (!rc)
		rc = check_file(h, path, err, n);
	if (rc) {
		rt_hf_close(h);
		return NULL;
	}
	return h;
}

int rt_hf_fill(const RtHf *h, int s, float *whole)
{
	float *buf = buf_for(h->t, h->n, s);
	if (!buf)
		return -1;
	for (int i = 0; i < h->n; i++) {
		const HfTensor *x = &h->t[i];
		if (x->stage != s)
			continue;
		const RtStTensor *f = rt_st_find(&h->st, x->name); // check_file found it
		memcpy(buf, h->st.data + f->begin, (size_t)(f->end - f->begin)); // may lie unaligned
		move(x, whole, buf, 0);
	}
	free(buf);
	return 0;
}
