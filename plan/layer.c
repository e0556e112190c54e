/* The layer table: one row per LayerKind, each with the function that states the kind's
 * tensors by name (its slots in layer.h), and the figures derived from them.  Every
 * figure is per microbatch (LayerShape), in the bytes of its precision (plan/prec.h).
 *
 * Memory convention (docs/semantics.md "Memory"): every layer keeps its input for the
 * backward pass, a layer with weights until W (save_fw), one without until B (save_fb),
 * except a kind whose row says `drops_x` (dropout keeps only its mask); a layer with
 * weights also keeps its output gradient from B to W (save_bw).  A kind adds what its
 * kernels save in F (its saved tensors, to save_fw, or to save_fb without weights) and
 * hold from B to W (its held tensors, to save_bw); a tensor takes the precision's
 * activation bytes an element, four when it is `wide` (statistics, ids), one when it is
 * a mask.  FLOPs count a multiply-add as two: 2 per row and GEMM
 * weight element in each pass, plus what a row states besides (attention's scores);
 * elementwise work (dropout included) counts as free.  The runtime lays out the same
 * tensors on every device, so the table and the kernels cannot disagree. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "layer.h"
#include "prec.h"
#include "tfcount.h"

const LayerKeyInfo plan_layer_keys[LAYER_KEY_COUNT] = {
	[LAYER_KEY_HEADS] = {"heads", LAYER_VAL_WHOLE},
	[LAYER_KEY_KV_HEADS] = {"kv_heads", LAYER_VAL_WHOLE},
	[LAYER_KEY_BIAS] = {"bias", LAYER_VAL_NONE},
	[LAYER_KEY_ROPE] = {"rope", LAYER_VAL_NONE},
	[LAYER_KEY_TIED] = {"tied", LAYER_VAL_NONE},
	[LAYER_KEY_POSITIONS] = {"positions", LAYER_VAL_NONE},
	[LAYER_KEY_COPY] = {"copy", LAYER_VAL_NONE},
	[LAYER_KEY_DROPOUT] = {"dropout", LAYER_VAL_PROB},
	[LAYER_KEY_FLASH] = {"flash", LAYER_VAL_NONE},
};

static int has(const PlanLayer *l, LayerKey k)
{
	return (l->flags & LAYER_FLAG(k)) != 0;
}

/* The last tensor added to list (n of them), rows x cols (each saturating). */
static LayerTensor *add(LayerTensor *list, int *n, int64_t rows, int64_t cols, LayerInit init)
{
	list[*n] = (LayerTensor){.rows = rows, .cols = cols, .init = init};
	return &list[(*n)++];
}

/* A saved dropout mask of rows x cols, one byte an element. */
static LayerTensor *mask(LayerTensors *t, int64_t rows, int64_t cols)
{
	LayerTensor *m = add(t->saved, &t->nsaved, rows, cols, LAYER_INIT_ZERO);
	m->mask = 1;
	return m;
}

/* Megatron's sequence parallelism keeps norms, dropouts and the inputs of the split
 * GEMMs split along the sequence. */
int64_t plan_seq_rows(const LayerShape *sh, int tp)
{
	return tp > 1 && sh->sp > 1 ? sh->rows / sh->sp : sh->rows;
}

int64_t plan_layer_rows(const PlanLayer *l, const LayerShape *sh, int tp)
{
	return plan_layers[l->kind].tp == LAYER_TP_WHOLE ? plan_seq_rows(sh, tp) : sh->rows;
}

/* A saved column of n f32 statistics (or int32 ids), four bytes each at every
 * precision: a norm's mean and rstd, a log-sum-exp, targets. */
static void stat(LayerTensors *t, int64_t n)
{
	add(t->saved, &t->nsaved, n, 1, LAYER_INIT_ZERO)->wide = 1;
}

/* A parameter: a GEMM weight (gemm 1) or a bias, gain or table (gemm 0). */
static void param(LayerTensors *t, int64_t rows, int64_t cols, LayerInit init, int gemm)
{
	add(t->param, &t->nparams, rows, cols, init)->gemm = gemm;
}

/* The last parameter added is cut along axis into segments seg[0..nseg) (whole lengths). */
static void split(LayerTensors *t, int tp, LayerSplitAxis axis, int nseg, const int64_t *seg)
{
	if (tp <= 1)
		return;
	LayerSplit *s = &t->split[t->nparams - 1];
	s->axis = (uint8_t)axis;
	s->nseg = (uint8_t)nseg;
	for (int i = 0; i < nseg; i++)
		s->seg[i] = seg[i];
}

/* linear: w in x out (row-major), b 1 x out; replicated on a tp group. */
static void linear_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t)
{
	(void)sh, (void)tp;
	param(t, ly->in, ly->out, LAYER_INIT_UNIFORM, 1); // LINEAR_W
	param(t, 1, ly->out, LAYER_INIT_ZERO, 0);         // LINEAR_B
}

/* embed: wte V x d (+ wpe S x d).  Only ever the first layer: no input gradient.  At
 * tp > 1 a rank holds V / tp rows of wte (each rank looks up the tokens of its slice,
 * zeros elsewhere, and the forward all-reduce sums the slices), the positions whole. */
static void embed_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t)
{
	param(t, sh->vocab / tp, ly->out, LAYER_INIT_UNIFORM, 0); // EMBED_WTE
	t->param[EMBED_WTE].fan = sh->real;
	t->x_ids = 1;
	split(t, tp, LAYER_SPLIT_ROWS, 1, &sh->vocab);
	if (has(ly, LAYER_KEY_POSITIONS))
		param(t, sh->seq, ly->out, LAYER_INIT_UNIFORM, 0); // EMBED_WPE
	/* F reads the ids and each table's rows and writes y; W reads dy and adds it into
	 * each table's gradient rows (read and written) */
	const PlanPrecInfo *pr = plan_prec(sh->prec);
	int64_t nd = sat_mul(sh->rows, ly->out);
	t->moved[0] = sat_add(sat_mul(4, sh->rows), sat_mul(nd, pr->act * (t->nparams + 1)));
	t->moved[2] = sat_mul(nd, t->nparams * (pr->act + 2 * pr->grad));
	t->tp_floats[0] = ly->out;
}

/* layernorm: gain and bias 1 x d; saves mean and rstd per row. */
static void layernorm_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t)
{
	(void)tp; // replicated
	param(t, 1, ly->in, LAYER_INIT_ONE, 0);  // LAYERNORM_GAIN
	param(t, 1, ly->in, LAYER_INIT_ZERO, 0); // LAYERNORM_BIAS
	stat(t, plan_seq_rows(sh, tp)); // LAYERNORM_MEAN
	stat(t, plan_seq_rows(sh, tp)); // LAYERNORM_RSTD
}

/* rmsnorm: gain 1 x d; saves rstd per row. */
static void rmsnorm_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t)
{
	(void)tp; // replicated
	param(t, 1, ly->in, LAYER_INIT_ONE, 0);                  // RMSNORM_GAIN
	stat(t, plan_seq_rows(sh, tp)); // RMSNORM_RSTD
}

TkAttn plan_layer_attn(const PlanLayer *l, const LayerShape *sh)
{
	return (TkAttn){sh->batch, sh->seq, l->in, l->heads, l->kv_heads ? l->kv_heads : l->heads,
	                has(l, LAYER_KEY_ROPE), 10000.0, 1};
}

/* x as a count: TK_MANY from 2^63 on. */
static int64_t sat_of(double x)
{
	return x < (double)TK_MANY ? (int64_t)x : TK_MANY;
}

/* Attention's own traffic (ROOF_ATTENTION) for p elements of S x S per rank and att
 * elements of the heads' output, nqkv of qkv a row.  Without flash, F reads qkv, writes
 * the scores, reads and writes them in the softmax, reads P in P·V and writes att (4p);
 * B reads datt and qkv, writes dP, reads P and dP and writes dS, reads dS twice and
 * writes dqkv (6p); dropout=P adds its mask (one byte) and dropped copy each way.  With
 * flash no S x S tensor leaves the chip: qkv and att each way, the log-sum-exps. */
static void attn_moved(LayerTensors *t, const LayerShape *sh, int64_t p, int64_t att,
                       int drop, int flash)
{
	double a = plan_prec(sh->prec)->act;
	double qkv = (double)sh->rows * (double)t->param[ATTN_WQKV].cols;
	double ss = flash || !drop ? 0 : (double)p * (1 + a);
	double lse = flash ? 4.0 * (double)p / (double)sh->seq : 0; // one a row of scores
	double f = a * (qkv + (double)att) + (flash ? lse : 4 * a * (double)p + ss);
	double b = a * 2 * (qkv + (double)att) + (flash ? lse : 6 * a * (double)p + ss);
	t->moved[0] = sat_of(f);
	t->moved[1] = sat_of(b);
	t->softmax = 1;
}

/* attention: wqkv d x nqkv (+ bqkv), wo d x d (+ bo); saves qkv, P and the heads'
 * output, and with dropout=P also P's mask and the dropped P that multiplies v (as
 * Korthikanti et al. 2022 count attention's 5as^2b: softmax, mask, dropout output);
 * B holds dqkv and needs a workspace.  At tp > 1 a rank has H / tp query and
 * Hkv / tp key/value heads: the columns of its heads in each of q, k and v of wqkv and
 * bqkv, the matching rows of wo; bo whole.  Besides the projections, F computes the
 * S x S scores and P·V per sequence and head (2 GEMMs of 2·S·S·hd FLOPs), B twice
 * that.  With `flash` the S x S tensors are scratch (LayerTensor.scratch) and F saves
 * each row's log-sum-exp instead (B*H*S floats), from which B rebuilds P: one more
 * q k^T, so B counts 5 of those GEMMs (FlashAttention-2's backward). */
static void attn_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t)
{
	TkAttn a = plan_layer_attn(ly, sh);
	int64_t d = ly->in, nqkv = sat_div(tk_attn_nqkv(&a), tp), hd = d / a.H;
	int64_t seg[3] = {sat_mul(a.H, hd), sat_mul(a.Hkv, hd), sat_mul(a.Hkv, hd)};
	int bias = has(ly, LAYER_KEY_BIAS), flash = has(ly, LAYER_KEY_FLASH);
	param(t, d, nqkv, LAYER_INIT_UNIFORM, 1); // ATTN_WQKV
	split(t, tp, LAYER_SPLIT_COLS, 3, seg);
	if (bias) {
		param(t, 1, nqkv, LAYER_INIT_ZERO, 0); // ATTN_BQKV
		split(t, tp, LAYER_SPLIT_COLS, 3, seg);
	}
	param(t, d / tp, d, LAYER_INIT_UNIFORM, 1); // ATTN_WO
	split(t, tp, LAYER_SPLIT_ROWS, 1, &d);
	if (bias)
		param(t, 1, d, LAYER_INIT_ZERO, 0); // ATTN_BO
	int64_t heads = sat_mul(sat_mul(a.B, a.H / tp), a.S);
	LayerTensor *ss[3];
	add(t->saved, &t->nsaved, sh->rows, nqkv, LAYER_INIT_ZERO);   // ATTN_QKV
	ss[0] = add(t->saved, &t->nsaved, heads, a.S, LAYER_INIT_ZERO); // ATTN_PROBS
	add(t->saved, &t->nsaved, sh->rows, d / tp, LAYER_INIT_ZERO);  // ATTN_ATT
	int nss = 1;
	if (ly->drop > 0) {
		ss[nss++] = mask(t, heads, a.S);                                // ATTN_MASK
		ss[nss++] = add(t->saved, &t->nsaved, heads, a.S, LAYER_INIT_ZERO); // ATTN_DROP
	}
	for (int i = 0; i < nss; i++)
		*(flash ? &ss[i]->scratch : &ss[i]->rebuilt) = 1;
	if (flash)
		stat(t, heads); // plan_attn_lse_slot
	add(t->held, &t->nheld, sh->rows, nqkv, LAYER_INIT_ZERO);    // ATTN_DQKV
	t->work = (LayerTensor){.rows = 1, .cols = tk_attn_workspace(&a), .init = LAYER_INIT_ZERO};
	int64_t sq = sat_mul(sat_mul(sat_mul(heads, a.S), hd), 2); // one S x S x hd GEMM a head
	t->flops[0] = sat_mul(2, sq);
	t->flops[1] = sat_mul(flash ? 5 : 4, sq);
	attn_moved(t, sh, sat_mul(heads, a.S), sat_mul(sh->rows, d / tp), ly->drop > 0, flash);
	t->tp_floats[0] = ly->out;
	t->tp_floats[1] = ly->in;
}

int plan_attn_lse_slot(const PlanLayer *l)
{
	if (l->kind != LAYER_ATTN || !has(l, LAYER_KEY_FLASH))
		return -1;
	return l->drop > 0 ? ATTN_DROP + 1 : ATTN_ATT + 1;
}

/* mlp: w1 d x f (+ b1), w2 f x d (+ b2); saves h and gelu(h); B holds dh.  At tp > 1
 * a rank holds f / tp columns of w1 and b1, the matching rows of w2; b2 whole. */
static void mlp_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t)
{
	int64_t d = ly->in, whole = ly->hidden, f = whole / tp;
	int bias = has(ly, LAYER_KEY_BIAS);
	param(t, d, f, LAYER_INIT_UNIFORM, 1); // MLP_W1
	split(t, tp, LAYER_SPLIT_COLS, 1, &whole);
	if (bias) {
		param(t, 1, f, LAYER_INIT_ZERO, 0); // MLP_B1
		split(t, tp, LAYER_SPLIT_COLS, 1, &whole);
	}
	param(t, f, d, LAYER_INIT_UNIFORM, 1); // MLP_W2
	split(t, tp, LAYER_SPLIT_ROWS, 1, &whole);
	if (bias)
		param(t, 1, d, LAYER_INIT_ZERO, 0); // MLP_B2
	add(t->saved, &t->nsaved, sh->rows, f, LAYER_INIT_ZERO); // MLP_H
	add(t->saved, &t->nsaved, sh->rows, f, LAYER_INIT_ZERO); // MLP_A
	add(t->held, &t->nheld, sh->rows, f, LAYER_INIT_ZERO);   // MLP_DH
	int64_t nf = sat_mul(sat_mul(sh->rows, f), plan_prec(sh->prec)->act);
	t->moved[0] = sat_mul(2, nf); // gelu: reads h, writes a
	t->moved[1] = sat_mul(3, nf); // reads h and da, writes dh
	t->tp_floats[0] = ly->out;
	t->tp_floats[1] = ly->in;
}

/* swiglu, geglu: wg, wu d x f, wd f x d; saves g, u, act(g) u (act silu or gelu); B
 * holds dg and du.  At tp > 1 a rank holds f / tp columns of wg and wu, the matching
 * rows of wd. */
static void swiglu_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t)
{
	int64_t d = ly->in, whole = ly->hidden, f = whole / tp;
	param(t, d, f, LAYER_INIT_UNIFORM, 1); // SWIGLU_WG
	split(t, tp, LAYER_SPLIT_COLS, 1, &whole);
	param(t, d, f, LAYER_INIT_UNIFORM, 1); // SWIGLU_WU
	split(t, tp, LAYER_SPLIT_COLS, 1, &whole);
	param(t, f, d, LAYER_INIT_UNIFORM, 1); // SWIGLU_WD
	split(t, tp, LAYER_SPLIT_ROWS, 1, &whole);
	add(t->saved, &t->nsaved, sh->rows, f, LAYER_INIT_ZERO); // SWIGLU_G
	add(t->saved, &t->nsaved, sh->rows, f, LAYER_INIT_ZERO); // SWIGLU_U
	add(t->saved, &t->nsaved, sh->rows, f, LAYER_INIT_ZERO); // SWIGLU_A
	add(t->held, &t->nheld, sh->rows, f, LAYER_INIT_ZERO);   // SWIGLU_DG
	add(t->held, &t->nheld, sh->rows, f, LAYER_INIT_ZERO);   // SWIGLU_DU
	int64_t nf = sat_mul(sat_mul(sh->rows, f), plan_prec(sh->prec)->act);
	t->moved[0] = sat_mul(3, nf); // reads g and u, writes a
	t->moved[1] = sat_mul(5, nf); // reads g, u and da, writes dg and du
	t->tp_floats[0] = ly->out;
	t->tp_floats[1] = ly->in;
}

/* head: wv V x d, logits = x wv^T.  Tied, wv is the embedding's (borrowed): the layer
 * lays out and counts nothing of its own, unless it is on another pipeline rank
 * (`copy`): then wv is its own copy of the table, which its stage holds, steps and
 * stores.  Column-parallel over the vocabulary at tp > 1: a rank holds V / tp rows of
 * wv and gives their logits; the backward all-reduce sums the input gradients. */
static void head_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t)
{
	int64_t whole = ly->out;
	param(t, whole / tp, ly->in, LAYER_INIT_UNIFORM, 1); // HEAD_WV
	t->param[0].fan = sh->real; // HEAD_WV (a tied head's borrowed or copied table too)
	split(t, tp, LAYER_SPLIT_ROWS, 1, &whole);
	t->out = whole / tp; // its slice of the logits
	t->copy = has(ly, LAYER_KEY_TIED) && has(ly, LAYER_KEY_COPY);
	t->borrowed = has(ly, LAYER_KEY_TIED) && !t->copy;
	t->tp_floats[1] = ly->in;
}

/* xent: saves each row's log-sum-exp and its target.  At tp > 1 its input is the head's
 * slice of the logits (vocabulary-parallel), and it all-reduces three floats per row in
 * the forward: the maximum logit, the sum of exponentials and the target's logit (one
 * op in the plan). */
static void xent_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t)
{
	t->in = ly->in / tp;
	stat(t, sh->rows); // XENT_LSE
	stat(t, sh->rows); // XENT_TARGETS (int32)
	t->x_whole = 1;
	t->tp_floats[0] = 3;
	t->tp_wide = 1;
	/* F reads the logits, writes the log-sum-exps; B reads them again, writes dlogits */
	int64_t nv = sat_mul(sat_mul(sh->rows, t->in), plan_prec(sh->prec)->act);
	t->moved[0] = sat_add(nv, sat_mul(8, sh->rows));
	t->moved[1] = sat_add(sat_mul(2, nv), sat_mul(8, sh->rows));
	t->softmax = 1;
}

/* dropout: keeps its mask, one byte an element (its input it drops: drops_x), from F to
 * B; at P = 0 it is the identity and keeps nothing.  Replicated at tp > 1, as the other
 * elementwise kinds: every rank of the group draws the same mask. */
static void dropout_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t)
{
	(void)tp;
	if (ly->drop > 0) {
		mask(t, plan_seq_rows(sh, tp), ly->in); // DROPOUT_MASK
		int64_t nd = sat_mul(plan_seq_rows(sh, tp), ly->in);
		// F reads x, writes y and the mask; B reads dy and the mask, writes dx
		t->moved[0] = t->moved[1] = sat_mul(nd, 2 * plan_prec(sh->prec)->act + 1);
	}
}

#define K(k) LAYER_FLAG(LAYER_KEY_##k)

#define IO(f, b, w) {f, b, w}

#define ROW(kind, name, word, arg, example, loss, keys, tokens, out, tp, tensors, drops_x, \
            io)                                                                          \
	[LAYER_##kind] = {name, word, LAYER_ARG_##arg, example, loss, keys, tokens,          \
	                  LAYER_OUT_##out, LAYER_TP_##tp, tensors, drops_x, io},

const LayerInfo plan_layers[LAYER_COUNT] = {PLAN_LAYER_KINDS(ROW)};

#undef ROW
#undef IO

#undef K

const LayerInfo *plan_layer(LayerKind k)
{
	return &plan_layers[k];
}

LayerKind plan_layer_find(const char *s, size_t n)
{
	for (int k = 0; k < LAYER_COUNT; k++)
		if (strlen(plan_layers[k].name) == n && !memcmp(s, plan_layers[k].name, n))
			return (LayerKind)k;
	return LAYER_COUNT;
}

LayerKey plan_layer_key_find(const char *s, size_t n)
{
	for (int k = 0; k < LAYER_KEY_COUNT; k++)
		if (strlen(plan_layer_keys[k].name) == n && !memcmp(s, plan_layer_keys[k].name, n))
			return (LayerKey)k;
	return LAYER_KEY_COUNT;
}

int plan_layer_out(LayerKind k, int in, int width_arg)
{
	return plan_layers[k].outw == LAYER_OUT_SAME ? in : width_arg;
}

LayerCost plan_layer_figures(const PlanLayer *l, const LayerShape *sh)
{
	return plan_layer_figures_tp(l, sh, 1);
}

LayerCost plan_layer_cost(LayerKind k, int64_t rows, int in, int out)
{
	PlanLayer l = {.kind = k, .in = in, .out = out};
	LayerShape sh = {rows, rows, 1, 0, 0, PREC_F32, 1};
	return plan_layer_figures(&l, &sh);
}
LayerKind plan_layer_parse(const char *word, const char *name)
{
	for (int k = 0; k < LAYER_COUNT; k++) {
		const LayerInfo *l = &plan_layers[k];
		if (!strcmp(l->word, word) && (!name || !strcmp(l->name, name)))
			return (LayerKind)k;
	}
	return LAYER_COUNT;
}

int plan_layer_words(const char *word, const char **out)
{
	int n = 0;
	for (int k = 0; k < LAYER_COUNT; k++) {
		const LayerInfo *l = &plan_layers[k];
		int seen = 0;
		for (int j = 0; j < n && !word; j++)
			seen |= !strcmp(out[j], l->word);
		if (!seen && (!word || !strcmp(l->word, word)))
			out[n++] = word ? l->name : l->word;
	}
	return n;
}

void plan_layer_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t)
{
	memset(t, 0, sizeof *t);
	if (plan_layers[ly->kind].tensors)
		plan_layers[ly->kind].tensors(ly, sh, tp > 1 ? tp : 1, t);
	if (!t->in)
		t->in = ly->in;
	if (!t->out)
		t->out = ly->out;
	t->x_rows = t->x_ids || t->x_whole ? sh->rows : plan_seq_rows(sh, tp);
}

static int64_t elems(const LayerTensor *list, int n)
{
	int64_t e = 0;
	for (int i = 0; i < n; i++)
		e = sat_add(e, sat_mul(list[i].rows, list[i].cols));
	return e;
}

int64_t plan_tensor_bytes(const LayerTensor *t, int prec)
{
	return sat_mul(sat_mul(t->rows, t->cols), t->mask ? 1 : t->wide ? 4 : plan_prec(prec)->act);
}

/* Bytes of list[0..n) that are kept (not scratch; those marked rebuilt only, with
 * `rebuilt`). */
static int64_t bytes(const LayerTensor *list, int n, int rebuilt, int prec)
{
	int64_t b = 0;
	for (int i = 0; i < n; i++)
		if (!list[i].scratch && (!rebuilt || list[i].rebuilt))
			b = sat_add(b, plan_tensor_bytes(&list[i], prec));
	return b;
}

int64_t plan_layer_rebuilt_bytes(const PlanLayer *l, const LayerShape *sh, int tp)
{
	LayerTensors t;
	plan_layer_tensors(l, sh, tp > 1 ? tp : 1, &t);
	return bytes(t.saved, t.nsaved, 1, sh->prec);
}

double plan_layer_rebuild_flops(const PlanLayer *l, const LayerShape *sh, int tp)
{
	if (l->kind != LAYER_ATTN || !plan_layer_rebuilt_bytes(l, sh, tp))
		return 0;
	TkAttn a = plan_layer_attn(l, sh);
	/* The whole layer's product over tp: exact, as tp divides the heads (the checker). */
	return 2.0 * (double)tk_attn_p_elems(&a) * (double)(a.d / a.H) / (tp > 1 ? tp : 1);
}

/* Everything follows from the row's tensors: the memory convention of the file's head
 * (a body kind keeps nothing: its input is its body's first layer's), the GEMM weights'
 * FLOPs (a tied head's borrowed table computes too) and the all-reduces at tp > 1. */
LayerCost plan_layer_figures_tp(const PlanLayer *l, const LayerShape *sh, int tp)
{
	LayerCost c = {0};
	LayerTensors t;
	tp = tp > 1 ? tp : 1;
	plan_layer_tensors(l, sh, tp, &t);
	c.params = elems(t.param + t.borrowed, t.nparams - t.borrowed);
	int act = plan_prec(sh->prec)->act;
	int64_t x = sat_mul(sat_mul(t.x_rows, t.in), t.x_ids ? 4 : act);
	if (plan_layers[l->kind].drops_x)
		x = 0;
	int64_t keep = sat_add(x, bytes(t.saved, t.nsaved, 0, sh->prec));
	/* A replicated layer works on the rank's rows under sequence parallelism: its dy
	 * (B to W) and GEMM rows are split as its x; a split layer's W needs the whole
	 * (gathered) output gradient. */
	int64_t rows = plan_layer_rows(l, sh, tp);
	int64_t held = sat_add(sat_mul(sat_mul(rows, t.out), act),
	                       bytes(t.held, t.nheld, 0, sh->prec));
	if (plan_layers[l->kind].arg == LAYER_ARG_BODY)
		keep = 0;
	if (t.nparams) {
		c.save_fw = keep;
		c.save_bw = held;
	} else
		c.save_fb = keep;
	int64_t gemm = 0;
	for (int i = 0; i < t.nparams; i++)
		if (t.param[i].gemm)
			gemm = sat_add(gemm, sat_mul(t.param[i].rows, t.param[i].cols));
	for (int k = 0; k < 3; k++)
		c.flops[k] = (double)sat_add(sat_mul(sat_mul(2, rows), gemm), t.flops[k]);
	for (int d = 0; d < 2 && tp > 1; d++)
		c.tp_bytes[d] = sat_mul(sat_mul(sh->rows, t.tp_floats[d]), t.tp_wide ? 4 : act);
	return c;
}

/* Everything from the row and its tensors (docs/semantics.md "Costs"): each GEMM weight
 * r x c reads its rows x r or x c operand and writes the other, reads the weight (F, B)
 * or reads and writes its gradient (W); each gain or bias reads dy over its columns and
 * updates its gradient in W; the io passes and the kind's own traffic (moved, flops). */
void plan_layer_work(const PlanLayer *l, const LayerShape *sh, int tp, RoofWork w[3])
{
	LayerTensors t;
	tp = tp > 1 ? tp : 1;
	plan_layer_tensors(l, sh, tp, &t);
	const PlanPrecInfo *pr = plan_prec(sh->prec);
	double rows = (double)plan_layer_rows(l, sh, tp);
	int own = t.softmax ? ROOF_ATTENTION : ROOF_ELEMENTWISE;
	for (int k = 0; k < 3; k++) {
		w[k] = (RoofWork){{0}, {0}};
		w[k].bytes[ROOF_ELEMENTWISE] = (double)pr->act * (double)t.x_rows * (double)t.in *
		                               plan_layers[l->kind].io[k];
		w[k].bytes[own] += (double)t.moved[k];
		w[k].flops[own] += (double)t.flops[k];
	}
	for (int i = 0; i < t.nparams; i++) {
		double r = (double)t.param[i].rows, c = (double)t.param[i].cols;
		if (t.param[i].gemm) {
			for (int k = 0; k < 3; k++) {
				w[k].flops[ROOF_GEMM] += 2 * rows * r * c;
				w[k].bytes[ROOF_GEMM] += pr->act * rows * (r + c) +
				                         r * c * (k < 2 ? pr->param : 2 * pr->grad);
			}
		} else if (r == 1) {
			w[2].bytes[ROOF_ELEMENTWISE] += (pr->act * rows + 2 * pr->grad) * c;
		}
	}
}

const char *plan_cost_uncountable(const LayerCost *c, double *value, double *limit)
{
	const struct {
		const char *what;
		int64_t v;
	} f[] = {{"parameters", c->params},
	         {"saved bytes per microbatch", c->save_fb},
	         {"saved bytes per microbatch", c->save_fw},
	         {"saved bytes per microbatch", c->save_bw},
	         {"tp all-reduce bytes per microbatch", c->tp_bytes[0]},
	         {"tp all-reduce bytes per microbatch", c->tp_bytes[1]}};
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
		if (f[i].v >= PLAN_COUNT_MAX) {
			*value = (double)f[i].v;
			*limit = (double)PLAN_COUNT_MAX;
			return f[i].what;
		}
	for (int k = 0; k < 3; k++)
		if (!(c->flops[k] < (double)TK_MANY)) { // (double)TK_MANY is 2^63
			*value = c->flops[k];
			*limit = (double)TK_MANY;
			return "FLOPs per microbatch";
		}
	return NULL;
}

char *plan_uncountable_text(char *buf, size_t n, const char *what, double v, double most)
{
	const char *more = v >= (double)TK_MANY ? "more than " : "";
	if (v > most)
		snprintf(buf, n, "%s are %s%.3g, past %.3g, the most the tools count", what, more, v,
		         most);
	else
		snprintf(buf, n, "%s are %s%.3g, the most the tools count", what, more, v);
	return buf;
}

const char *plan_layer_uncountable(const PlanLayer *l, const LayerShape *sh, int tp,
                                   double *value, double *limit)
{
	for (int t = 1; t <= tp; t = t == tp ? tp + 1 : tp) { // whole, then one rank's share
		LayerCost c = plan_layer_figures_tp(l, sh, t);
		const char *what = plan_cost_uncountable(&c, value, limit);
		if (what)
			return what;
	}
	return NULL;
}

void plan_cost_add(LayerCost *sum, const LayerCost *c)
{
	sum->params = sat_add(sum->params, c->params);
	sum->save_fb = sat_add(sum->save_fb, c->save_fb);
	sum->save_fw = sat_add(sum->save_fw, c->save_fw);
	sum->save_bw = sat_add(sum->save_bw, c->save_bw);
	for (int k = 0; k < 3; k++)
		sum->flops[k] += c->flops[k];
	for (int d = 0; d < 2; d++)
		sum->tp_bytes[d] = sat_add(sum->tp_bytes[d], c->tp_bytes[d]);
}

const char *plan_layer_tp_check(const PlanLayer *l, const LayerShape *sh, int tp, char *buf,
                                size_t n)
{
	if (tp <= 1)
		return NULL;
	switch (plan_layers[l->kind].tp) {
	case LAYER_TP_HEADS:
		if (l->heads % tp)
			snprintf(buf, n, "the number of heads (%d)", l->heads);
		else if (l->kv_heads % tp)
			snprintf(buf, n, "the number of key/value heads (%d)", l->kv_heads);
		else
			return NULL;
		return buf;
	case LAYER_TP_HIDDEN:
		if (l->hidden % tp == 0)
			return NULL;
		snprintf(buf, n, "the hidden width (%d)", l->hidden);
		return buf;
	case LAYER_TP_VOCAB:
		if (sh->vocab % tp == 0)
			return NULL;
		snprintf(buf, n, "the vocabulary (%lld)", (long long)sh->vocab);
		return buf;
	case LAYER_TP_WHOLE:
	case LAYER_TP_COUNT:
		break;
	}
	return NULL;
}
