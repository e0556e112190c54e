/* The model a plan describes: its synthetic data and weights, and the layout of its
 * parameters.
 *
 * The plan carries everything: per stage its layers, per edge its width.
 * rt_model_new() checks that the shapes chain and lays out each stage's parameters as
 * one flat buffer (layer by layer, each layer's parameter tensors in the order of its
 * layer table row's `tensors`), so a stage's weights and gradients are single tensors
 * that one all-reduce moves.  A model is one rank's share of a tp group of a given
 * size: at tp > 1 every split layer has its shard's tensors, and the weights of tp
 * rank t are piece t of the whole model's (rt_model_shard), so a tp run and the whole
 * reference start from the same numbers.
 *
 * The layer table derives its figures (plan_layer_figures_tp) from the same tensors,
 * so what a rank keeps is what the simulator predicts by construction.  One stage's
 * compute over the model is stage.c's. */
#include "rt_private.h"
#include "../plan/mem.h"
#include "../plan/tie.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

uint64_t rt_splitmix64(uint64_t x)
{
	uint64_t z = x + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t mix(uint64_t k, uint64_t v)
{
	return rt_splitmix64(k ^ v);
}

/* u(key): top 24 bits to [-1, 1). */
static float unit(uint64_t x)
{
	return (float)((double)(x >> 40) / 8388608.0 - 1.0);
}

/* The data set is fixed: step does not enter the key, so every step trains on the same
 * dp x m microbatches (an epoch each) and the loss can fall. */
uint64_t rt_gen_key(uint64_t seed, int what, int replica, int mb)
{
	return mix(mix(mix(seed, (uint64_t)what), (uint64_t)replica), (uint64_t)mb);
}

uint64_t rt_drop_key(uint64_t seed, int step, int replica, int mb, int g)
{
	uint64_t k = mix(mix(mix(seed, 6), (uint64_t)step), (uint64_t)replica);
	return mix(mix(k, (uint64_t)mb), (uint64_t)g);
}

int rt_layer_position(const Plan *p, int s, int l)
{
	int g = l;
	for (int i = 0; i < s; i++)
		g += p->stages[i].nlayers;
	return g;
}

void rt_gen_values(uint64_t key, float *out, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		out[i] = unit(mix(key, (uint64_t)i));
}

/* Every sequence walks a fixed random successor table, succ(t) = u(seed, t) mod V, from
 * a random first token, except that one position in 8 (by the key) is a fresh random
 * token.  Tokens are sequence b's positions shift .. shift + S - 1 of S + 1. */
void rt_gen_tokens(uint64_t seed, int replica, int mb, const LayerShape *sh, int shift,
                   float *out)
{
	uint64_t ks = mix(seed, 4), k = mix(mix(mix(seed, 5), (uint64_t)replica), (uint64_t)mb);
	uint64_t V = (uint64_t)plan_vocab_real(sh); // never a padded row
	for (int64_t b = 0; b < sh->batch; b++) {
		uint64_t kb = mix(k, (uint64_t)b);
		uint64_t t = mix(kb, 0) % V;
		for (int64_t i = 0; i < sh->seq + shift; i++) {
			if (i >= shift)
				out[b * sh->seq + i - shift] = (float)t;
			uint64_t u = mix(kb, (uint64_t)i + 1);
			t = (u & 7) == 0 ? (u >> 3) % V : mix(ks, t) % V;
		}
	}
}

/* A token file's sequences (docs/semantics.md "Model"): sequence b of a microbatch is the
 * S + 1 tokens from offset mix(seed, 7, step, replica, mb, b) mod (N - S), the inputs its
 * first S, the targets its last S.  Unlike the synthetic set the step enters the key, so
 * the run walks over the file; the replica and microbatch indices name a sequence
 * whatever the mesh, so runs on any pp, tp and schedule see the same batches.  The
 * held-out set (eval) is keyed by 8 and no step: the same sequences every time. */
void rt_data_tokens(const RtData *d, uint64_t seed, int eval, int step, int replica, int mb,
                    const LayerShape *sh, int shift, float *out)
{
	uint64_t k = mix(mix(mix(mix(seed, eval ? 8 : 7), eval ? 0 : (uint64_t)step),
	                     (uint64_t)replica), (uint64_t)mb);
	uint64_t span = (uint64_t)(d->n - sh->seq); // rt_data_check: at least 1
	for (int64_t b = 0; b < sh->batch; b++) {
		int64_t off = (int64_t)(mix(k, (uint64_t)b) % span) + shift;
		for (int64_t i = 0; i < sh->seq; i++)
			out[b * sh->seq + i] = (float)rt_data_at(d, off + i);
	}
}

/* The tensors a layer keeps on one rank of a tp group of size tp. */
static LayerTensors layer_tensors(const PlanLayer *ly, const LayerShape *sh, int tp)
{
	LayerTensors t;
	plan_layer_tensors(ly, sh, tp, &t);
	return t;
}

/* The first embedding layer: its stage into *stage and its index, or -1. */
int rt_model_embed_layer(const Plan *p, int *stage)
{
	for (int s = 0; s < p->nstages; s++)
		for (int l = 0; l < p->stages[s].nlayers; l++)
			if (p->stages[s].layers[l].kind == LAYER_EMBED) {
				*stage = s;
				return l;
			}
	return -1;
}

/* Each parameter from its LayerInit; a layer's first one keyed by (stage, layer), the
 * others by their index too.  A tied head's copy of the table is keyed as the
 * embedding's table, so the two copies start equal. */
void rt_gen_weights(uint64_t seed, const Plan *p, int stage, float *out)
{
	const PlanStage *st = &p->stages[stage];
	LayerShape shape = plan_shape(p);
	int64_t off = 0;
	for (int l = 0; l < st->nlayers; l++) {
		LayerTensors t = layer_tensors(&st->layers[l], &shape, 1);
		int ks = stage, kl = l;
		if (t.copy && (kl = rt_model_embed_layer(p, &ks)) < 0)
			kl = l, ks = stage; // the model refuses a copy without an embedding
		uint64_t k = mix(mix(mix(seed, 3), (uint64_t)ks), (uint64_t)kl);
		for (int j = t.borrowed; j < t.nparams; j++) {
			const LayerTensor *sh = &t.param[j];
			int64_t n = sh->rows * sh->cols;
			uint64_t kj = j == 0 ? k : mix(k, (uint64_t)j);
			float sc = (float)(1.0 / sqrt((double)(sh->fan ? sh->fan : sh->rows)));
			for (int64_t i = 0; i < n; i++)
				out[off + i] = sh->init == LAYER_INIT_UNIFORM ? unit(mix(kj, (uint64_t)i)) * sc
				               : sh->init == LAYER_INIT_ONE   ? 1.0f
				                                           : 0.0f;
			off += n;
		}
	}
}

void rt_model_shard(const RtModel *m, int s, int t, const float *whole, float *out)
{
	const PlanStage *st = &m->p->stages[s];
	LayerShape shape = plan_shape(m->p);
	int64_t from = 0;
	for (int l = 0; l < st->nlayers; l++) {
		const RtLayerAt *at = &m->st[s].at[l];
		LayerTensors w = layer_tensors(&st->layers[l], &shape, 1);
		int64_t to = at->off;
		for (int j = at->t.borrowed; j < at->t.nparams; j++) {
			const LayerTensor *sh = &at->t.param[j];
			rt_split_copy(sh, &at->t.split[j], m->tp, t, whole + from, out + to);
			from += w.param[j].rows * w.param[j].cols;
			to += sh->rows * sh->cols;
		}
	}
}

/* ---- the model ---- */

static int merr(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int merr(char *err, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, n, fmt, ap);
	va_end(ap);
	return -1;
}

void rt_model_free(RtModel *m)
{
	if (!m)
		return;
	if (m->st) {
		for (int s = 0; s < m->p->nstages; s++) {
			free(m->st[s].at);
			free(m->st[s].in_edges);
			free(m->st[s].out_edges);
		}
	}
	free(m->st);
	free(m);
}

/* Lays out layer l's tensors (its row's statement, from which the layer table's
 * figures follow) at *off. */
static void lay_out(RtStageModel *sm, int l, const PlanLayer *ly, const LayerShape *sh, int tp,
                    int64_t *off)
{
	RtLayerAt *at = &sm->at[l];
	at->t = layer_tensors(ly, sh, tp);
	at->off = *off;
	at->slot = sm->nslots;
	sm->nslots += 2 + at->t.nsaved + at->t.nheld;
	LayerCost lc = plan_layer_figures_tp(ly, sh, tp);
	at->cut[DIR_ACT] = lc.tp_bytes[DIR_ACT];
	at->cut[DIR_GRAD] = lc.tp_bytes[DIR_GRAD];
	*off += lc.params;
	sm->save[0] += lc.save_fb;
	sm->save[1] += lc.save_fw;
	sm->save[2] += lc.save_bw;
}

/* A body kind's span: its layers follow it inside the stage, inside any enclosing body,
 * and give back its width. */
static int check_body(const PlanStage *st, int l, char *err, size_t errn)
{
	const PlanLayer *ly = &st->layers[l];
	if (plan_layers[ly->kind].arg != LAYER_ARG_BODY)
		return 0;
	int end = l + ly->span;
	if (ly->span < 1 || end >= st->nlayers)
		return merr(err, errn, "stage %s: layer %d (%s) spans %d layers, the stage has %d after it",
		            st->name, l, plan_layers[ly->kind].name, ly->span, st->nlayers - l - 1);
	for (int i = l + 1; i <= end; i++)
		if (plan_layers[st->layers[i].kind].arg == LAYER_ARG_BODY && i + st->layers[i].span > end)
			return merr(err, errn, "stage %s: layer %d (%s) spans past the end of layer %d's",
			            st->name, i, plan_layers[st->layers[i].kind].name, l);
	if (st->layers[end].out != ly->in)
		return merr(err, errn, "stage %s: layer %d (%s) takes %d features, its body gives %d",
		            st->name, l, plan_layers[ly->kind].name, ly->in, st->layers[end].out);
	return 0;
}

static int build(RtModel *m, const Plan *p, char *err, size_t errn)
{
	LayerShape shape = plan_shape(p);
	int64_t rows = shape.rows;
	if (p->vocab > RT_MAX_VOCAB)
		return merr(err, errn, "the vocabulary has %d tokens; piperun carries token ids in "
		            "f32, exact up to %d", p->vocab, RT_MAX_VOCAB);
	for (int s = 0; s < p->nstages; s++) {
		const PlanStage *st = &p->stages[s];
		RtStageModel *sm = &m->st[s];
		sm->at = calloc((size_t)st->nlayers, sizeof *sm->at);
		sm->in_edges = calloc((size_t)p->nedges + 1, sizeof(int));
		sm->out_edges = calloc((size_t)p->nedges + 1, sizeof(int));
		if (!sm->at || !sm->in_edges || !sm->out_edges)
			return merr(err, errn, "out of memory");
		if (st->layers[0].in != st->in)
			return merr(err, errn, "stage %s: first layer takes %d features, the stage %d",
			            st->name, st->layers[0].in, st->in);
		if (st->layers[st->nlayers - 1].out != st->out)
			return merr(err, errn, "stage %s: last layer gives %d features, the stage %d",
			            st->name, st->layers[st->nlayers - 1].out, st->out);
		int64_t off = 0;
		for (int l = 0; l < st->nlayers; l++) {
			const PlanLayer *ly = &st->layers[l];
			if (l > 0 && ly->in != st->layers[l - 1].out)
				return merr(err, errn, "stage %s: layer %d takes %d features after %d",
				            st->name, l, ly->in, st->layers[l - 1].out);
			if (plan_layer_out(ly->kind, ly->in, ly->out) != ly->out)
				return merr(err, errn, "stage %s: %s layer %d changes width %d -> %d",
				            st->name, plan_layers[ly->kind].name, l, ly->in, ly->out);
			if (plan_layers[ly->kind].loss) {
				if (s != p->nstages - 1 || l != st->nlayers - 1)
					return merr(err, errn,
					            "stage %s: the %s loss must be the last layer of the last stage",
					            st->name, plan_layers[ly->kind].name);
				sm->loss = 1;
				m->loss_stage = s;
			}
			if (check_body(st, l, err, errn))
				return -1;
			if (plan_layers[ly->kind].drops_x &&
			    (l == 0 || plan_layers[st->layers[l - 1].kind].arg == LAYER_ARG_BODY))
				return merr(err, errn, "stage %s: layer %d (%s) keeps only its mask, so it "
				            "cannot begin a stage or a body, whose input that layer keeps",
				            st->name, l, plan_layers[ly->kind].name);
			lay_out(sm, l, ly, &shape, m->tp, &off);
			if (l == st->nlayers - 1 && !sm->loss && sm->at[l].t.out != ly->out)
				return merr(err, errn, "stage %s ends in a %s layer split over the tp group; "
				            "piperun sends whole tensors between stages",
				            st->name, plan_layers[ly->kind].name);
			if (ly->kind == LAYER_EMBED) {
				m->embed_stage = s;
				m->embed_off = sm->at[l].off;
			}
			if ((sm->at[l].t.borrowed || sm->at[l].t.copy) && m->embed_stage < 0)
				return merr(err, errn, "stage %s: layer %d (%s) is tied to an embedding that "
				            "no stage before it holds", st->name, l, plan_layers[ly->kind].name);
			if (sm->at[l].t.copy) {
				m->copy_head = s;
				m->copy_off = sm->at[l].off;
			}
		}
		sm->nparams = off;
		if (m->tp == p->dims[DIM_TP] && off != st->params)
			return merr(err, errn, "stage %s: its layers have %lld parameters, the plan says %lld",
			            st->name, (long long)off, (long long)st->params);
		sm->out_bytes = rows * st->out * 4;
	}
	if (m->loss_stage < 0)
		return merr(err, errn, "the model has no loss (last layer of the last stage)");
	if (p->stages[0].in != p->cols)
		return merr(err, errn, "stage %s takes %d features but the input has %d",
		            p->stages[0].name, p->stages[0].in, p->cols);
	for (int e = 0; e < p->nedges; e++) {
		const PlanEdge *ed = &p->edges[e];
		const PlanStage *a = &p->stages[ed->src], *b = &p->stages[ed->dst];
		if (a->out != b->in)
			return merr(err, errn, "edge %d: stage %s gives %d features, stage %s takes %d", e,
			            a->name, a->out, b->name, b->in);
		if (ed->bytes != plan_stage_out_bytes(p, ed->src))
			return merr(err, errn, "edge %d: bytes=%lld but %d x %d %s is %lld bytes", e,
			            (long long)ed->bytes, p->rows, a->out, plan_prec(p->prec)->name,
			            (long long)plan_stage_out_bytes(p, ed->src));
		RtStageModel *sa = &m->st[ed->src], *sb = &m->st[ed->dst];
		sa->out_edges[sa->nout++] = e;
		sb->in_edges[sb->nin++] = e;
	}
	for (int s = 0; s < p->nstages; s++) {
		if (s > 0 && m->st[s].nin == 0)
			return merr(err, errn, "stage %s has no input edge", p->stages[s].name);
		if (s == 0 && m->st[s].nin > 0)
			return merr(err, errn, "stage %s takes the input and cannot have in-edges",
			            p->stages[s].name);
		if (!m->st[s].loss && m->st[s].nout == 0)
			return merr(err, errn, "stage %s: its output goes nowhere", p->stages[s].name);
		if (m->st[s].loss && m->st[s].nout > 0)
			return merr(err, errn, "stage %s ends with the loss but has out-edges",
			            p->stages[s].name);
	}
	return 0;
}

RtModel *rt_model_new(const Plan *p, int tp, char *err, size_t errn)
{
	RtModel *m = calloc(1, sizeof *m);
	if (!m) {
		merr(err, errn, "out of memory");
		return NULL;
	}
	m->p = p;
	m->tp = tp > 1 ? tp : 1;
	LayerShape sh = plan_shape(p);
	m->rows = plan_seq_rows(&sh, m->tp);
	m->loss_stage = -1;
	m->embed_stage = -1;
	m->copy_head = -1;
	m->copy_off = -1;
	int embed;
	plan_tie(p, &embed, &m->tied_head);
	m->st = calloc((size_t)p->nstages, sizeof *m->st);
	if (!m->st) {
		merr(err, errn, "out of memory");
		rt_model_free(m);
		return NULL;
	}
	if (build(m, p, err, errn)) {
		rt_model_free(m);
		return NULL;
	}
	return m;
}

/* Every kernel the plan's layers need: fwd; bwd_in unless the layer is the first of a
 * stage without in-edges (nobody wants its input gradient); bwd_w for a kind with
 * parameters; rebuild for attention in a stage with selective recomputation, and for
 * flash attention anywhere.  A missing one is a clear refusal, never a fallback to other
 * math. */
const char *rt_device_check(const RtDevice *d, const Plan *p, char *err, size_t n)
{
	if (p->prec == PREC_TF32) {
		snprintf(err, n, "piperun runs f32 and bf16 plans, and this plan's precision is tf32 "
		         "(pipecc and pipesim plan it; docs/runtime.md \"Precision\")");
		return err;
	}
	if (p->prec == PREC_BF16 && !d->round_bf16) {
		snprintf(err, n, "the %s device does not emulate bf16 storage yet, and this plan's "
		         "precision is bf16 (the cpu device runs it; docs/runtime.md \"Precision\")",
		         d->name);
		return err;
	}
	for (int s = 0; s < p->nstages; s++) {
		const PlanStage *st = &p->stages[s];
		int first = 1, attends = 0;
		for (int e = 0; e < p->nedges; e++)
			first &= p->edges[e].dst != s;
		for (int l = 0; l < st->nlayers; l++)
			attends |= st->layers[l].kind == LAYER_ATTN;
		if (st->recompute == PLAN_RECOMPUTE_SELECTIVE && !attends) {
			snprintf(err, n, "stage %s recomputes selectively but has no attention layer",
			         st->name);
			return err;
		}
		for (int l = 0; l < st->nlayers; l++) {
			LayerKind k = st->layers[l].kind;
			if (plan_layers[k].arg == LAYER_ARG_BODY)
				continue; // the model's own (device copy and add)
			const RtLayerKernels *row = d->layers ? &d->layers[k] : NULL;
			LayerShape sh = plan_shape(p);
			LayerCost lc = plan_layer_figures(&st->layers[l], &sh);
			int flash = plan_attn_lse_slot(&st->layers[l]) >= 0;
			int rebuild = (st->recompute == PLAN_RECOMPUTE_SELECTIVE || flash) && k == LAYER_ATTN;
			const char *what = !row || !row->fwd                ? "kernel"
			                   : !row->bwd_in && !(first && !l) ? "input-gradient kernel"
			                   : !row->bwd_w && lc.params       ? "weight-gradient kernel"
			                   : rebuild && !row->rebuild
			                       ? flash ? "rebuild kernel (flash attention)"
			                               : "rebuild kernel (selective recomputation)"
			                       : NULL;
			if (what) {
				snprintf(err, n, "the %s device has no %s for layer kind %s (stage %s, "
				                 "layer %d)", d->name, what, plan_layers[k].name, st->name, l);
				return err;
			}
		}
	}
	return NULL;
}

/* ---- tensors, accounted ---- */

/* A tensor of rows x cols elements of `elem` bytes, stored in bf16 when half (f32
 * storage, half the bytes accounted). */
static RtTensor *tensor_new(RtRank *r, int64_t rows, int64_t cols, int64_t elem, int half,
                            int cls)
{
	RtTensor *t = calloc(1, sizeof *t);
	if (!t) {
		rt_error(r, "out of memory");
		return NULL;
	}
	t->rows = rows;
	t->cols = cols;
	t->bytes = rows * cols * elem;
	t->half = (uint8_t)half;
	t->acct = half ? t->bytes / 2 : t->bytes;
	t->cls = (uint8_t)cls;
	if (r->dev->alloc(r, t)) {
		free(t);
		return NULL;
	}
	r->mem[cls] += t->acct;
	return t;
}

RtTensor *rt_tensor_new(RtRank *r, int64_t rows, int64_t cols, int cls)
{
	return tensor_new(r, rows, cols, (int64_t)sizeof(float), 0, cls);
}

/* The plan stores activations in bf16: every rank emulates it, the --check reference
 * too. */
static int act_half(const RtRank *r)
{
	return r->w->plan->prec == PREC_BF16;
}

RtTensor *rt_tensor_new_prec(RtRank *r, int64_t rows, int64_t cols, int cls)
{
	return tensor_new(r, rows, cols, (int64_t)sizeof(float), act_half(r), cls);
}

RtTensor *rt_tensor_new_of(RtRank *r, const LayerTensor *sh, int cls)
{
	return tensor_new(r, sh->rows, sh->cols, sh->mask ? 1 : (int64_t)sizeof(float),
	                  act_half(r) && !sh->mask && !sh->wide, cls);
}

int rt_round(RtRank *r, RtTensor *t)
{
	return t && t->half ? r->dev->round_bf16(r, t) : RT_OK;
}

void rt_tensor_free(RtRank *r, RtTensor *t)
{
	if (!t)
		return;
	if (!t->view) {
		r->mem[t->cls] -= t->acct;
		r->dev->free(r, t);
	}
	free(t);
}

/* A high point hi (the total, and the saved and communication bytes at it) raised to
 * total when that is higher; 1 if it was. */
static int raise_high(const RtRank *r, int64_t total, int64_t *hi)
{
	if (total <= hi[0])
		return 0;
	hi[0] = total;
	hi[1] = r->mem[RT_MEM_SAVED];
	hi[2] = r->mem[RT_MEM_COMM];
	return 1;
}

void rt_mem_sample(RtRank *r, int64_t op)
{
	int64_t total = 0;
	for (int c = 0; c < RT_MEM_COUNT; c++)
		total += c == RT_MEM_TEMP ? 0 : r->mem[c];
	raise_high(r, total, r->ev_hi);
	if (raise_high(r, total, r->peak_total))
		r->peak_total[3] = op;
}

void rt_tensor_reclass(RtRank *r, RtTensor *t, int cls)
{
	r->mem[t->cls] -= t->acct;
	t->cls = (uint8_t)cls;
	r->mem[cls] += t->acct;
}

int64_t rt_shard(int64_t n, int dp, int i, int64_t *off, int64_t *len)
{
	if (dp <= 1)
		i = 0; // one shard: all of it, whatever the rank's dp index
	PlanOptim sharded = {.distributed = 1}; // the memory model's shard size, the one rule
	int64_t c = plan_optim_shard(&sharded, n, dp), o = c * i;
	*off = o < n ? o : n;
	*len = o < n ? (n - o < c ? n - o : c) : 0;
	return c;
}

RtTensor rt_tensor_view(const RtTensor *parent, int64_t off, int64_t rows, int64_t cols)
{
	RtTensor v = *parent;
	v.data = (char *)parent->data + off * (int64_t)sizeof(float);
	v.aux = NULL;
	v.rows = rows;
	v.cols = cols;
	v.bytes = rows * cols * (int64_t)sizeof(float);
	v.acct = v.half ? v.bytes / 2 : v.bytes;
	v.view = 1;
	v.refs = 0;
	return v;
}
