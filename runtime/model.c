/* The model a plan describes, and one stage's compute over it.
 *
 * The plan carries everything: per stage its layers, per edge its width.
 * rt_model_new() checks that the shapes chain and lays out each stage's parameters as
 * one flat buffer (layer by layer, each layer's parameter tensors in the order of its
 * rt_layer_shapes row), so a stage's weights and gradients are single tensors that one
 * all-reduce moves.
 *
 * rt_stage_forward/backward/weights are the one implementation of F, B and W, for
 * every layer kind: they walk a stage's layers and call the device's row for the
 * layer's kind (fwd, bwd_in, bwd_w; rt_backend.h, "Layers"), knowing no kind.  The
 * interpreter (pipelined) and the reference (sequential, for --check) both call them,
 * so the two can only differ where the plan changes summation order.
 *
 * Memory convention (docs/semantics.md "Memory"): every layer keeps its input and its
 * saved tensors for the backward pass (until W for a kind with parameters: save_fw;
 * else until B: save_fb), and a kind with parameters keeps its output gradient and its
 * held tensors from B to W (save_bw).  A layer's output is the next layer's saved
 * input, so F holds exactly save_fb + save_fw, B frees save_fb and holds save_bw, and W
 * frees the rest: the figures the simulator predicts, measured on real allocations
 * (rt_model_new checks each layer's tensors against the layer table's figures). */
#include "rt_private.h"

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
static void gen(uint64_t seed, uint64_t what, int step, int replica, int mb, float *out,
                int64_t n)
{
	(void)step;
	uint64_t k = mix(seed, what);
	k = mix(k, (uint64_t)replica);
	k = mix(k, (uint64_t)mb);
	for (int64_t i = 0; i < n; i++)
		out[i] = unit(mix(k, (uint64_t)i));
}

void rt_gen_input(uint64_t seed, int step, int replica, int mb, float *out, int64_t n)
{
	gen(seed, 1, step, replica, mb, out, n);
}

void rt_gen_target(uint64_t seed, int step, int replica, int mb, float *out, int64_t n)
{
	gen(seed, 2, step, replica, mb, out, n);
}

/* Every sequence walks a fixed random successor table, succ(t) = u(seed, t) mod V, from
 * a random first token, except that one position in 8 (by the key) is a fresh random
 * token.  Tokens are sequence b's positions shift .. shift + S - 1 of S + 1. */
void rt_gen_tokens(uint64_t seed, int replica, int mb, const LayerShape *sh, int shift,
                   float *out)
{
	uint64_t ks = mix(seed, 4), k = mix(mix(mix(seed, 5), (uint64_t)replica), (uint64_t)mb);
	uint64_t V = (uint64_t)sh->vocab;
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

/* The tensors a layer keeps (rt_layer_shapes; none for a kind without a row). */
static RtLayerTensors layer_tensors(const PlanLayer *ly, const LayerShape *sh)
{
	RtLayerTensors t;
	memset(&t, 0, sizeof t);
	if (rt_layer_shapes[ly->kind])
		rt_layer_shapes[ly->kind](ly, sh, &t);
	return t;
}

/* The first embedding layer: its stage into *stage and its index, or -1. */
static int embed_layer(const Plan *p, int *stage)
{
	for (int s = 0; s < p->nstages; s++)
		for (int l = 0; l < p->stages[s].nlayers; l++)
			if (p->stages[s].layers[l].kind == LAYER_EMBED) {
				*stage = s;
				return l;
			}
	return -1;
}

/* Each parameter from its RtInit; a layer's first one keyed by (stage, layer), the
 * others by their index too.  A tied head's copy of the table is keyed as the
 * embedding's table, so the two copies start equal. */
void rt_gen_weights(uint64_t seed, const Plan *p, int stage, float *out)
{
	const PlanStage *st = &p->stages[stage];
	LayerShape shape = plan_shape(p);
	int64_t off = 0;
	for (int l = 0; l < st->nlayers; l++) {
		RtLayerTensors t = layer_tensors(&st->layers[l], &shape);
		int ks = stage, kl = l;
		if (t.copy && (kl = embed_layer(p, &ks)) < 0)
			kl = l, ks = stage; // the model refuses a copy without an embedding
		uint64_t k = mix(mix(mix(seed, 3), (uint64_t)ks), (uint64_t)kl);
		for (int j = t.borrowed; j < t.nparams; j++) {
			const RtShape *sh = &t.param[j];
			int64_t n = sh->rows * sh->cols;
			uint64_t kj = j == 0 ? k : mix(k, (uint64_t)j);
			float sc = (float)(1.0 / sqrt((double)sh->rows));
			for (int64_t i = 0; i < n; i++)
				out[off + i] = sh->init == RT_INIT_UNIFORM ? unit(mix(kj, (uint64_t)i)) * sc
				               : sh->init == RT_INIT_ONE   ? 1.0f
				                                           : 0.0f;
			off += n;
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

static int64_t bytes_of(const RtShape *sh, int n)
{
	int64_t b = 0;
	for (int i = 0; i < n; i++)
		b += sh[i].rows * sh[i].cols * 4;
	return b;
}

/* Lays out layer l's tensors at *off and checks them against the layer table: its
 * parameters, and what it keeps (x and the saved tensors until B, or until W for a
 * kind with parameters, which also keeps dy and the held tensors from B to W). */
static int lay_out(RtStageModel *sm, const char *stage, int l, const PlanLayer *ly,
                   const LayerShape *sh, int64_t *off, char *err, size_t errn)
{
	const char *name = plan_layers[ly->kind].name;
	RtLayerAt *at = &sm->at[l];
	int64_t rows = sh->rows;
	at->t = layer_tensors(ly, sh);
	at->off = *off;
	at->slot = sm->nslots;
	sm->nslots += 2 + at->t.nsaved + at->t.nheld;
	LayerCost lc = plan_layer_figures(ly, sh);
	int64_t np = bytes_of(at->t.param + at->t.borrowed, at->t.nparams - at->t.borrowed) / 4;
	if (np != lc.params)
		return merr(err, errn, "stage %s: layer %d (%s): the runtime lays out %lld parameters, "
		                       "the layer table says %lld", stage, l, name, (long long)np, (long long)lc.params);
	/* A body kind (residual) keeps nothing: its input is its body's first layer's. */
	int body = plan_layers[ly->kind].arg == LAYER_ARG_BODY;
	int has_w = at->t.nparams > 0;
	int64_t keep = body ? 0 : rows * ly->in * 4 + bytes_of(at->t.saved, at->t.nsaved);
	int64_t held = has_w ? rows * ly->out * 4 + bytes_of(at->t.held, at->t.nheld) : 0;
	int64_t want[3] = {has_w ? 0 : keep, has_w ? keep : 0, held};
	int64_t table[3] = {lc.save_fb, lc.save_fw, lc.save_bw};
	for (int i = 0; i < 3; i++)
		if (want[i] != table[i] || (!has_w && at->t.nheld))
			return merr(err, errn, "stage %s: layer %d (%s): the runtime keeps %lld, %lld and "
			                       "%lld bytes (F to B, F to W, B to W), the layer table says "
			                       "%lld, %lld and %lld", stage, l, name, (long long)want[0], (long long)want[1],
			            (long long)want[2], (long long)table[0], (long long)table[1],
			            (long long)table[2]);
	*off += np;
	sm->save[0] += lc.save_fb;
	sm->save[1] += lc.save_fw;
	sm->save[2] += lc.save_bw;
	return 0;
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
			if (check_body(st, l, err, errn) ||
			    lay_out(sm, st->name, l, ly, &shape, &off, err, errn))
				return -1;
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
		if (off != st->params)
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
		if (ed->bytes != rows * a->out * 4)
			return merr(err, errn, "edge %d: bytes=%lld but %d x %d f32 is %lld bytes", e,
			            (long long)ed->bytes, p->rows, a->out, (long long)(rows * a->out * 4));
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

RtModel *rt_model_new(const Plan *p, char *err, size_t errn)
{
	RtModel *m = calloc(1, sizeof *m);
	if (!m) {
		merr(err, errn, "out of memory");
		return NULL;
	}
	m->p = p;
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
 * parameters.  A missing one is a clear refusal, never a fallback to other math. */
const char *rt_device_check(const RtDevice *d, const Plan *p, char *err, size_t n)
{
	for (int s = 0; s < p->nstages; s++) {
		const PlanStage *st = &p->stages[s];
		int first = 1;
		for (int e = 0; e < p->nedges; e++)
			first &= p->edges[e].dst != s;
		for (int l = 0; l < st->nlayers; l++) {
			LayerKind k = st->layers[l].kind;
			if (plan_layers[k].arg == LAYER_ARG_BODY)
				continue; // the model's own (device copy and add)
			const RtLayerKernels *row = d->layers ? &d->layers[k] : NULL;
			LayerShape sh = plan_shape(p);
			LayerCost lc = plan_layer_figures(&st->layers[l], &sh);
			const char *what = !row || !row->fwd                ? "kernel"
			                   : !row->bwd_in && !(first && !l) ? "input-gradient kernel"
			                   : !row->bwd_w && lc.params       ? "weight-gradient kernel"
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

RtTensor *rt_tensor_new(RtRank *r, int64_t rows, int64_t cols, int cls)
{
	RtTensor *t = calloc(1, sizeof *t);
	if (!t) {
		rt_error(r, "out of memory");
		return NULL;
	}
	t->rows = rows;
	t->cols = cols;
	t->bytes = rows * cols * (int64_t)sizeof(float);
	t->cls = (uint8_t)cls;
	if (r->dev->alloc(r, t)) {
		free(t);
		return NULL;
	}
	r->mem[cls] += t->bytes;
	return t;
}

void rt_tensor_free(RtRank *r, RtTensor *t)
{
	if (!t)
		return;
	if (!t->view) {
		r->mem[t->cls] -= t->bytes;
		r->dev->free(r, t);
	}
	free(t);
}

void rt_mem_sample(RtRank *r, int64_t op)
{
	int64_t total = 0;
	for (int c = 0; c < RT_MEM_COUNT; c++)
		total += c == RT_MEM_TEMP ? 0 : r->mem[c];
	if (total > r->peak_total[0]) {
		r->peak_total[0] = total;
		r->peak_total[1] = r->mem[RT_MEM_SAVED];
		r->peak_total[2] = r->mem[RT_MEM_COMM];
		r->peak_total[3] = op;
	}
}

void rt_tensor_reclass(RtRank *r, RtTensor *t, int cls)
{
	r->mem[t->cls] -= t->bytes;
	t->cls = (uint8_t)cls;
	r->mem[cls] += t->bytes;
}

RtTensor rt_tensor_view(const RtTensor *parent, int64_t off, int64_t rows, int64_t cols)
{
	RtTensor v = *parent;
	v.data = (char *)parent->data + off * (int64_t)sizeof(float);
	v.aux = NULL;
	v.rows = rows;
	v.cols = cols;
	v.bytes = rows * cols * (int64_t)sizeof(float);
	v.view = 1;
	v.refs = 0;
	return v;
}

/* ---- one stage ---- */

int rt_stage_bufs_open(RtRank *r, int s, RtStageBufs *b)
{
	const Plan *p = r->w->plan;
	const RtStageModel *sm = &r->w->model->st[s];
	memset(b, 0, sizeof *b);
	int64_t widest = p->cols;
	for (int i = 0; i < p->nstages; i++)
		for (int l = 0; l < p->stages[i].nlayers; l++) {
			if (p->stages[i].layers[l].in > widest)
				widest = p->stages[i].layers[l].in;
			if (p->stages[i].layers[l].out > widest)
				widest = p->stages[i].layers[l].out;
		}
	int64_t nhost = widest * p->rows;
	if (sm->nparams > nhost)
		nhost = sm->nparams;
	b->host = malloc((size_t)nhost * sizeof(float));
	if (!b->host)
		return rt_error(r, "out of memory");
	int64_t np = sm->nparams ? sm->nparams : 1;
	if (!(b->params = rt_tensor_new(r, 1, np, RT_MEM_PARAM)) ||
	    !(b->grads = rt_tensor_new(r, 1, np, RT_MEM_GRAD)))
		return RT_EFAIL;
	if (sm->loss && !(b->loss = rt_tensor_new(r, 1, p->microbatches, RT_MEM_TEMP)))
		return RT_EFAIL;
	int nstate = plan_optim_state_bytes(r->w->optim.kind) / 4; // f32 buffers: m, then v
	if ((nstate >= 1 && (!(b->m = rt_tensor_new(r, 1, np, RT_MEM_OPTIM)) || r->dev->zero(r, b->m))) ||
	    (nstate >= 2 && (!(b->v = rt_tensor_new(r, 1, np, RT_MEM_OPTIM)) || r->dev->zero(r, b->v))))
		return RT_EFAIL;
	memset(b->host, 0, (size_t)np * sizeof(float));
	rt_gen_weights(r->w->opt.seed, p, s, b->host);
	const RtDevice *dev = r->dev;
	if (dev->upload(r, b->params, b->host) || dev->zero(r, b->grads))
		return RT_EFAIL;
	if (b->loss && dev->zero(r, b->loss))
		return RT_EFAIL;
	return RT_OK;
}

void rt_stage_bufs_close(RtRank *r, RtStageBufs *b)
{
	rt_tensor_free(r, b->params);
	rt_tensor_free(r, b->grads);
	rt_tensor_free(r, b->m);
	rt_tensor_free(r, b->v);
	rt_tensor_free(r, b->loss);
	free(b->host);
	memset(b, 0, sizeof *b);
}

RtTensor *rt_stage_input(RtRank *r, int step, int replica, int mb, RtStageBufs *b, int cls)
{
	const Plan *p = r->w->plan;
	RtTensor *x = rt_tensor_new(r, p->rows, p->cols, cls);
	if (!x)
		return NULL;
	LayerShape sh = plan_shape(p);
	if (sh.vocab)
		rt_gen_tokens(r->w->opt.seed, replica, mb, &sh, 0, b->host);
	else
		rt_gen_input(r->w->opt.seed, step, replica, mb, b->host, (int64_t)p->rows * p->cols);
	if (r->dev->upload(r, x, b->host)) {
		rt_tensor_free(r, x);
		return NULL;
	}
	return x;
}

/* The loss's target: next tokens for a loss on tokens, else rows x width values. */
static RtTensor *target(RtRank *r, int s, int step, int replica, int mb, RtStageBufs *b)
{
	const Plan *p = r->w->plan;
	const PlanStage *st = &p->stages[s];
	int tokens = plan_layers[st->layers[st->nlayers - 1].kind].tokens;
	int width = tokens ? 1 : st->out;
	RtTensor *t = rt_tensor_new(r, p->rows, width, RT_MEM_TEMP);
	if (!t)
		return NULL;
	LayerShape sh = plan_shape(p);
	if (tokens)
		rt_gen_tokens(r->w->opt.seed, replica, mb, &sh, 1, b->host);
	else
		rt_gen_target(r->w->opt.seed, step, replica, mb, b->host, (int64_t)p->rows * width);
	if (r->dev->upload(r, t, b->host)) {
		rt_tensor_free(r, t);
		return NULL;
	}
	return t;
}

/* A layer's call and its parameter views (pv, gv: RT_LAYER_MAX_TENSORS each); slot is
 * the layer's first saved slot of the microbatch. */
static RtLayerCall layer_call(RtRank *r, int s, int l, RtStageBufs *b, RtTensor **slot,
                              RtTensor *pv, RtTensor *gv)
{
	const PlanLayer *ly = &r->w->plan->stages[s].layers[l];
	const RtModel *m = r->w->model;
	const RtLayerAt *at = &m->st[s].at[l];
	RtLayerCall c = {.layer = ly, .rows = r->w->plan->rows, .sh = plan_shape(r->w->plan),
	                 .x = slot[0]};
	int64_t off = at->off;
	for (int j = 0; j < at->t.nparams; j++) {
		const RtShape *sh = &at->t.param[j];
		/* A borrowed table is the embedding's first parameter (rt_backend.h); the
		 * reference computes a head's copy with the embedding's table too. */
		const RtStageBufs *from = j < at->t.borrowed ? b->embed : b;
		int64_t o = j < at->t.borrowed ? m->embed_off : off;
		int share = j == 0 && at->t.copy && b->share_tie;
		pv[j] = share ? rt_tensor_view(b->embed->params, m->embed_off, sh->rows, sh->cols)
		              : rt_tensor_view(from->params, o, sh->rows, sh->cols);
		gv[j] = rt_tensor_view(from->grads, o, sh->rows, sh->cols);
		if (j >= at->t.borrowed)
			off += sh->rows * sh->cols;
	}
	c.nparams = at->t.nparams;
	c.param = pv;
	c.grad = gv;
	c.nsaved = at->t.nsaved;
	c.saved = slot + 2;
	c.nheld = at->t.nheld;
	c.held = slot + 2 + at->t.nsaved;
	return c;
}

/* New tensors of class cls into out[0..n). */
static int new_tensors(RtRank *r, const RtShape *sh, int n, int cls, RtTensor **out)
{
	for (int i = 0; i < n; i++)
		if (!(out[i] = rt_tensor_new(r, sh[i].rows, sh[i].cols, cls)))
			return RT_EFAIL;
	return RT_OK;
}

static void free_slots(RtRank *r, RtTensor **slot, int n)
{
	for (int i = 0; i < n; i++) {
		rt_tensor_free(r, slot[i]);
		slot[i] = NULL;
	}
}

/* A stage whose head borrows the embedding's table needs the embedding's buffers. */
static int stage_ready(RtRank *r, int s, const RtStageBufs *b)
{
	const PlanStage *st = &r->w->plan->stages[s];
	for (int l = 0; l < st->nlayers; l++)
		if ((r->w->model->st[s].at[l].t.borrowed ||
		     (r->w->model->st[s].at[l].t.copy && b->share_tie)) && !b->embed)
			return rt_error(r, "stage %s: its tied head needs the embedding's table, which is "
			                   "not on this rank", st->name);
	return RT_OK;
}

/* Bodies (residual) open inside a stage's walk: the tensor to add when layer `end` is
 * done (F: the body's input; B: a copy of its output gradient). */
typedef struct {
	int n;
	int end[RT_MAX_NEST];
	RtTensor *t[RT_MAX_NEST];
} Bodies;

static int body_push(RtRank *r, Bodies *bd, int end, RtTensor *t)
{
	if (bd->n == RT_MAX_NEST)
		return rt_error(r, "residual blocks nest deeper than %d", RT_MAX_NEST);
	bd->end[bd->n] = end;
	bd->t[bd->n++] = t;
	return RT_OK;
}

int rt_stage_forward(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                     RtTensor *x, RtTensor **saved, RtTensor **y)
{
	const Plan *p = r->w->plan;
	const PlanStage *st = &p->stages[s];
	const RtStageModel *sm = &r->w->model->st[s];
	RtTensor pv[RT_LAYER_MAX_TENSORS], gv[RT_LAYER_MAX_TENSORS];
	RtTensor *cur = x;
	Bodies bd = {0};
	*y = NULL;
	if (stage_ready(r, s, b))
		return RT_EFAIL;
	for (int l = 0; l < st->nlayers; l++) {
		const PlanLayer *ly = &st->layers[l];
		const RtLayerAt *at = &sm->at[l];
		if (plan_layers[ly->kind].arg == LAYER_ARG_BODY) {
			/* y = x + body(x): x stays alive as the body's first layer's saved input. */
			if (body_push(r, &bd, l + ly->span, cur))
				return RT_EFAIL;
			continue;
		}
		RtTensor **slot = saved + at->slot;
		rt_tensor_reclass(r, cur, RT_MEM_SAVED);
		slot[0] = cur;
		if (new_tensors(r, at->t.saved, at->t.nsaved, RT_MEM_SAVED, slot + 2))
			return RT_EFAIL;
		RtLayerCall c = layer_call(r, s, l, b, slot, pv, gv);
		RtLayerFn fwd = r->dev->layers[ly->kind].fwd;
		if (plan_layers[ly->kind].loss) {
			RtTensor *t = target(r, s, step, replica, mb, b);
			if (!t)
				return RT_EFAIL;
			c.target = t;
			c.loss = b->loss;
			c.slot = mb;
			int rc = fwd(r, &c);
			rt_tensor_free(r, t);
			return rc;
		}
		if (!(c.y = rt_tensor_new(r, p->rows, ly->out, RT_MEM_TEMP)))
			return RT_EFAIL;
		if (fwd(r, &c)) {
			rt_tensor_free(r, c.y);
			return RT_EFAIL;
		}
		cur = c.y;
		for (; bd.n && bd.end[bd.n - 1] == l; bd.n--)
			if (r->dev->add(r, cur, bd.t[bd.n - 1]))
				return RT_EFAIL;
	}
	rt_tensor_reclass(r, cur, RT_MEM_COMM);
	*y = cur;
	return RT_OK;
}

/* The slot of stage s's input in a microbatch's saved tensors: its first layer that is
 * not a body kind keeps it as its saved input. */
static int input_slot(const RtRank *r, int s)
{
	const PlanStage *st = &r->w->plan->stages[s];
	int l = 0;
	while (l + 1 < st->nlayers && plan_layers[st->layers[l].kind].arg == LAYER_ARG_BODY)
		l++;
	return r->w->model->st[s].at[l].slot;
}

void rt_stage_drop(RtRank *r, int s, RtTensor **saved)
{
	int64_t n = r->w->model->st[s].nslots;
	RtTensor *x = saved[input_slot(r, s)];
	for (int64_t k = 0; k < n; k++)
		if (saved[k] != x) {
			rt_tensor_free(r, saved[k]);
			saved[k] = NULL;
		}
}

int rt_stage_recompute(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                       RtTensor **saved)
{
	RtTensor *x = saved[input_slot(r, s)], *y;
	if (!x)
		return rt_error(r, "internal: stage %s lost its input before recomputing",
		                r->w->plan->stages[s].name);
	if (rt_stage_forward(r, s, mb, step, replica, b, x, saved, &y))
		return RT_EFAIL;
	rt_tensor_free(r, y); // its consumers have it already
	return RT_OK;
}

/* B of layer l: dy (owned) -> *dx (NULL when not wanted).  A layer with parameters
 * keeps dy and its held tensors for W; one without frees what it kept. */
static int layer_backward(RtRank *r, int s, int l, int mb, int step, int replica,
                          RtStageBufs *b, RtTensor **slot, RtTensor *dy, int want_dx,
                          RtTensor **dx)
{
	const Plan *p = r->w->plan;
	const PlanLayer *ly = &p->stages[s].layers[l];
	const RtLayerAt *at = &r->w->model->st[s].at[l];
	RtTensor pv[RT_LAYER_MAX_TENSORS], gv[RT_LAYER_MAX_TENSORS];
	int has_w = at->t.nparams > 0;
	*dx = NULL;
	/* A kind that holds tensors for W computes them with its input gradient. */
	int need_dx = want_dx || at->t.nheld > 0;
	if (has_w) {
		rt_tensor_reclass(r, dy, RT_MEM_SAVED);
		slot[1] = dy;
		if (new_tensors(r, at->t.held, at->t.nheld, RT_MEM_SAVED, slot + 2 + at->t.nsaved))
			return RT_EFAIL;
	}
	RtLayerCall c = layer_call(r, s, l, b, slot, pv, gv);
	c.dy = dy;
	int rc = RT_OK;
	if (need_dx && !(c.dx = rt_tensor_new(r, p->rows, ly->in, RT_MEM_TEMP)))
		return RT_EFAIL;
	if (c.dx) {
		RtTensor *t = NULL;
		if (plan_layers[ly->kind].loss) {
			c.target = t = target(r, s, step, replica, mb, b);
			c.scale = (float)(1.0 / p->microbatches);
			rc = t ? RT_OK : RT_EFAIL;
		}
		if (rc == RT_OK && at->t.work.rows &&
		    !(c.work = rt_tensor_new(r, at->t.work.rows, at->t.work.cols, RT_MEM_TEMP)))
			rc = RT_EFAIL;
		if (rc == RT_OK)
			rc = r->dev->layers[ly->kind].bwd_in(r, &c);
		rt_tensor_free(r, c.work);
		rt_tensor_free(r, t);
	}
	if (rc) {
		rt_tensor_free(r, c.dx);
		return rc;
	}
	if (!has_w) {
		rt_tensor_free(r, dy);
		free_slots(r, slot, 2 + at->t.nsaved);
	}
	if (!want_dx)
		rt_tensor_free(r, c.dx);
	else
		*dx = c.dx;
	return RT_OK;
}

/* B at body kind l (residual): dx = dy + the copy of the body's output gradient pushed
 * when the walk entered the body; NULL when nobody wants it. */
static int body_backward(RtRank *r, int l, Bodies *bd, RtTensor **cur, int want_dx)
{
	if (!bd->n || bd->end[bd->n - 1] != l)
		return rt_error(r, "internal: residual layer %d has no output gradient to add", l);
	RtTensor *skip = bd->t[--bd->n];
	int rc = RT_OK;
	if (*cur && want_dx)
		rc = r->dev->add(r, *cur, skip);
	rt_tensor_free(r, skip);
	if (!want_dx) {
		rt_tensor_free(r, *cur);
		*cur = NULL;
	}
	return rc;
}

/* Entering bodies that end at layer l (outermost first, so the innermost is on top):
 * each keeps a copy of the output gradient. */
static int body_enter(RtRank *r, const PlanStage *st, int l, Bodies *bd, const RtTensor *dy)
{
	for (int i = 0; i < l; i++) {
		const PlanLayer *ly = &st->layers[i];
		if (plan_layers[ly->kind].arg != LAYER_ARG_BODY || i + ly->span != l)
			continue;
		RtTensor *t = rt_tensor_new(r, dy->rows, dy->cols, RT_MEM_TEMP);
		if (!t || r->dev->copy(r, t, dy) || body_push(r, bd, i, t)) {
			rt_tensor_free(r, t);
			return RT_EFAIL;
		}
	}
	return RT_OK;
}

static void bodies_free(RtRank *r, Bodies *bd)
{
	while (bd->n)
		rt_tensor_free(r, bd->t[--bd->n]);
}

int rt_stage_backward(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                      RtTensor *dy, RtTensor **saved, RtTensor **dx)
{
	const PlanStage *st = &r->w->plan->stages[s];
	const RtStageModel *sm = &r->w->model->st[s];
	RtTensor *cur = dy;
	Bodies bd = {0};
	*dx = NULL;
	if (stage_ready(r, s, b))
		return RT_EFAIL;
	for (int l = st->nlayers - 1; l >= 0; l--) {
		/* Stage 0's first layer: nobody wants the input gradient. */
		int want_dx = !(l == 0 && sm->nin == 0);
		if (plan_layers[st->layers[l].kind].arg == LAYER_ARG_BODY) {
			if (body_backward(r, l, &bd, &cur, want_dx))
				return RT_EFAIL;
			continue;
		}
		RtTensor **slot = saved + sm->at[l].slot;
		if (!slot[0])
			return rt_error(r, "internal: layer %d of stage %d lost its saved input", l, s);
		if ((cur && body_enter(r, st, l, &bd, cur)) ||
		    layer_backward(r, s, l, mb, step, replica, b, slot, cur, want_dx, &cur)) {
			bodies_free(r, &bd);
			return RT_EFAIL;
		}
	}
	if (cur)
		rt_tensor_reclass(r, cur, RT_MEM_COMM);
	*dx = cur;
	return RT_OK;
}

int rt_stage_weights(RtRank *r, int s, RtStageBufs *b, RtTensor **saved)
{
	const PlanStage *st = &r->w->plan->stages[s];
	const RtStageModel *sm = &r->w->model->st[s];
	RtTensor pv[RT_LAYER_MAX_TENSORS], gv[RT_LAYER_MAX_TENSORS];
	if (stage_ready(r, s, b))
		return RT_EFAIL;
	for (int l = 0; l < st->nlayers; l++) {
		const RtLayerAt *at = &sm->at[l];
		if (!at->t.nparams)
			continue; // no W part
		RtTensor **slot = saved + at->slot;
		if (!slot[0] || !slot[1])
			return rt_error(r, "internal: layer %d of stage %d lost its saved tensors", l, s);
		RtLayerCall c = layer_call(r, s, l, b, slot, pv, gv);
		c.dy = slot[1];
		if (r->dev->layers[st->layers[l].kind].bwd_w(r, &c))
			return RT_EFAIL;
		free_slots(r, slot, 2 + at->t.nsaved + at->t.nheld);
	}
	return RT_OK;
}
