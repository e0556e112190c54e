/* The model a plan describes, and one stage's compute over it.
 *
 * The plan carries everything: per stage its layers (linear with bias, relu, gelu,
 * mse), per edge its width.  rt_model_new() checks that the shapes chain and lays out
 * each stage's parameters as one flat buffer (per linear layer: w, in x out, then b),
 * so a stage's weights and gradients are single tensors that one all-reduce moves.
 *
 * rt_stage_forward/backward/weights are the one implementation of F, B and W; the
 * interpreter (pipelined) and the reference (sequential, for --check) both call them,
 * so the two can only differ where the plan changes summation order.
 *
 * Memory convention (docs/semantics.md "Memory"): every layer keeps its input for the
 * backward pass (a linear's in save_fw, relu/gelu/mse's in save_fb), and a linear keeps
 * its output gradient from B to W (save_bw).  A layer's output is the next layer's saved
 * input, so F holds exactly save_fb + save_fw, B frees save_fb and holds save_bw, and W
 * frees the rest: the figures the simulator predicts, measured on real allocations. */
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

void rt_gen_weights(uint64_t seed, const Plan *p, int stage, float *out)
{
	const PlanStage *st = &p->stages[stage];
	int64_t off = 0;
	for (int l = 0; l < st->nlayers; l++) {
		const PlanLayer *ly = &st->layers[l];
		if (ly->kind != LAYER_LINEAR)
			continue;
		uint64_t k = mix(mix(mix(seed, 3), (uint64_t)stage), (uint64_t)l);
		int64_t n = (int64_t)ly->in * ly->out;
		float sc = (float)(1.0 / sqrt((double)ly->in));
		for (int64_t i = 0; i < n; i++)
			out[off + i] = unit(mix(k, (uint64_t)i)) * sc;
		off += n;
		memset(out + off, 0, (size_t)ly->out * sizeof(float));
		off += ly->out;
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

/* The layer kinds this runtime has kernels for; a plan with any other kind is refused
 * before anything is allocated for it. */
static int has_kernel(LayerKind k)
{
	return k == LAYER_LINEAR || k == LAYER_RELU || k == LAYER_GELU || k == LAYER_MSE;
}

static int refuse(const Plan *p, char *err, size_t errn)
{
	for (int s = 0; s < p->nstages; s++)
		for (int l = 0; l < p->stages[s].nlayers; l++)
			if (!has_kernel(p->stages[s].layers[l].kind))
				return merr(err, errn, "stage %s: layer %d (%s): piperun has no kernel for this "
				            "layer kind yet (it runs linear, relu, gelu and loss mse); "
				            "pipesim can still simulate this plan",
				            p->stages[s].name, l, plan_layers[p->stages[s].layers[l].kind].name);
	if (p->optim.given && p->optim.kind != OPTIM_SGD)
		return merr(err, errn, "the plan asks for the %s optimizer; piperun runs only sgd "
		            "(its learning rate from --lr)", plan_optim_names[p->optim.kind]);
	return 0;
}

static int build(RtModel *m, const Plan *p, char *err, size_t errn)
{
	if (refuse(p, err, errn))
		return -1;
	int64_t rows = p->rows;
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
			/* The layer table's figures; a layer with weights keeps them at w_off
			 * (in x out) and its bias right after, at b_off. */
			LayerCost lc = plan_layer_cost(ly->kind, rows, ly->in, ly->out);
			sm->at[l].w_off = off;
			sm->at[l].b_off = off + (int64_t)ly->in * ly->out;
			off += lc.params;
			sm->save[0] += lc.save_fb;
			sm->save[1] += lc.save_fw;
			sm->save[2] += lc.save_bw;
		}
		sm->nparams = off;
		if (off != st->params)
			return merr(err, errn, "stage %s: its layers have %lld parameters, the plan says %lld",
			            st->name, (long long)off, (long long)st->params);
		sm->out_bytes = rows * st->out * 4;
	}
	if (m->loss_stage < 0)
		return merr(err, errn, "the model has no mse loss (last layer of the last stage)");
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
	rt_gen_input(r->w->opt.seed, step, replica, mb, b->host, (int64_t)p->rows * p->cols);
	if (r->dev->upload(r, x, b->host)) {
		rt_tensor_free(r, x);
		return NULL;
	}
	return x;
}

static RtTensor *target(RtRank *r, int s, int step, int replica, int mb, RtStageBufs *b)
{
	const Plan *p = r->w->plan;
	int width = p->stages[s].out;
	RtTensor *t = rt_tensor_new(r, p->rows, width, RT_MEM_TEMP);
	if (!t)
		return NULL;
	rt_gen_target(r->w->opt.seed, step, replica, mb, b->host, (int64_t)p->rows * width);
	if (r->dev->upload(r, t, b->host)) {
		rt_tensor_free(r, t);
		return NULL;
	}
	return t;
}

int rt_stage_forward(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                     RtTensor *x, RtTensor **saved, RtTensor **y)
{
	const Plan *p = r->w->plan;
	const PlanStage *st = &p->stages[s];
	const RtStageModel *sm = &r->w->model->st[s];
	const RtDevice *dev = r->dev;
	RtTensor *cur = x;
	*y = NULL;
	for (int l = 0; l < st->nlayers; l++) {
		const PlanLayer *ly = &st->layers[l];
		rt_tensor_reclass(r, cur, RT_MEM_SAVED);
		saved[l] = cur;
		if (ly->kind == LAYER_MSE) {
			RtTensor *t = target(r, s, step, replica, mb, b);
			if (!t)
				return RT_EFAIL;
			int rc = dev->mse_fwd(r, cur, t, b->loss, mb);
			rt_tensor_free(r, t);
			return rc;
		}
		RtTensor *out = rt_tensor_new(r, p->rows, ly->out, RT_MEM_TEMP);
		if (!out)
			return RT_EFAIL;
		int rc;
		if (ly->kind == LAYER_LINEAR) {
			RtTensor w = rt_tensor_view(b->params, sm->at[l].w_off, ly->in, ly->out);
			RtTensor bias = rt_tensor_view(b->params, sm->at[l].b_off, 1, ly->out);
			rc = dev->linear_fwd(r, cur, &w, &bias, out);
		} else {
			rc = dev->act_fwd(r, ly->kind, cur, out);
		}
		if (rc) {
			rt_tensor_free(r, out);
			return rc;
		}
		cur = out;
	}
	rt_tensor_reclass(r, cur, RT_MEM_COMM);
	*y = cur;
	return RT_OK;
}

int rt_stage_backward(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                      RtTensor *dy, RtTensor **saved, RtTensor **dx)
{
	const Plan *p = r->w->plan;
	const PlanStage *st = &p->stages[s];
	const RtStageModel *sm = &r->w->model->st[s];
	const RtDevice *dev = r->dev;
	int L = st->nlayers;
	RtTensor *cur = dy;
	*dx = NULL;
	for (int l = L - 1; l >= 0; l--) {
		const PlanLayer *ly = &st->layers[l];
		RtTensor *in = saved[l];
		if (!in)
			return rt_error(r, "internal: layer %d of stage %d lost its saved input", l, s);
		if (ly->kind == LAYER_LINEAR) {
			rt_tensor_reclass(r, cur, RT_MEM_SAVED);
			saved[L + l] = cur;
			if (l == 0 && sm->nin == 0) {
				cur = NULL; // stage 0: nobody wants the input gradient
				break;
			}
			RtTensor *g = rt_tensor_new(r, p->rows, ly->in, RT_MEM_TEMP);
			if (!g)
				return RT_EFAIL;
			RtTensor w = rt_tensor_view(b->params, sm->at[l].w_off, ly->in, ly->out);
			if (dev->linear_bwd_in(r, cur, &w, g)) {
				rt_tensor_free(r, g);
				return RT_EFAIL;
			}
			cur = g;
			continue;
		}
		RtTensor *g = rt_tensor_new(r, p->rows, ly->in, RT_MEM_TEMP);
		if (!g)
			return RT_EFAIL;
		int rc;
		if (ly->kind == LAYER_MSE) {
			RtTensor *t = target(r, s, step, replica, mb, b);
			if (!t) {
				rt_tensor_free(r, g);
				return RT_EFAIL;
			}
			rc = dev->mse_bwd(r, in, t, (float)(1.0 / p->microbatches), g);
			rt_tensor_free(r, t);
		} else {
			rc = dev->act_bwd(r, ly->kind, in, cur, g);
		}
		if (rc) {
			rt_tensor_free(r, g);
			return rc;
		}
		rt_tensor_free(r, cur);
		rt_tensor_free(r, in);
		saved[l] = NULL;
		cur = g;
	}
	if (cur && sm->nin == 0) {
		rt_tensor_free(r, cur);
		cur = NULL;
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
	int L = st->nlayers;
	for (int l = 0; l < L; l++) {
		const PlanLayer *ly = &st->layers[l];
		if (ly->kind != LAYER_LINEAR)
			continue;
		if (!saved[l] || !saved[L + l])
			return rt_error(r, "internal: layer %d of stage %d lost its saved tensors", l, s);
		RtTensor dw = rt_tensor_view(b->grads, sm->at[l].w_off, ly->in, ly->out);
		RtTensor db = rt_tensor_view(b->grads, sm->at[l].b_off, 1, ly->out);
		if (r->dev->linear_bwd_w(r, saved[l], saved[L + l], &dw, &db))
			return RT_EFAIL;
		rt_tensor_free(r, saved[l]);
		rt_tensor_free(r, saved[L + l]);
		saved[l] = saved[L + l] = NULL;
	}
	return RT_OK;
}
