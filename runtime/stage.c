/* One stage's compute over the model (model.c): its buffers, F, B and W for a
 * microbatch, every layer kind through the device's row (rt_backend.h, "Layers").
 *
 * A walk (RtWalk) runs a stage's layers for one microbatch and direction and can stop
 * after a layer that ends in a tp all-reduce (its part, plan_stage_parts): the
 * interpreter then runs the plan's TPREDUCE (rt_stage_tp_reduce) and the next part
 * resumes the walk.  At tp = 1 there are no such layers, and rt_stage_forward and
 * rt_stage_backward walk the whole stage at once, as the reference always does.  Under
 * sequence parallelism (docs/runtime.md) the replicated layers and the walk's tensors
 * between parts are the rank's rows (RtModel.rows): a TPREDUCE is a reduce-scatter, and
 * a split layer gathers its input (F, W) and its output gradient (B) over the tp group.
 *
 * Memory convention (docs/semantics.md "Memory"): every layer keeps its input and its
 * saved tensors for the backward pass (until W for a kind with parameters: save_fw;
 * else until B: save_fb), and a kind with parameters keeps its output gradient and its
 * held tensors from B to W (save_bw).  A layer's output is the next layer's saved
 * input, so F holds exactly save_fb + save_fw, B frees save_fb and holds save_bw, and W
 * frees the rest.  A kind whose row says drops_x (dropout) frees its input after its F:
 * its mask is all its B needs.  Dropout masks are drawn from rt_drop_key of the layer's
 * position in the model, the microbatch, replica and step, so every run of a layer's F
 * (recomputation, the reference, another stage split) draws the same ones. */
#include "rt_private.h"
#include "hf.h"
#include "../plan/mem.h"

#include <stdlib.h>
#include <string.h>

/* ---- one stage ---- */

/* State k of stage s (0: the parameters, 1 and 2: the optimizer's buffers) as the run
 * starts, in the rank's layout (its tp pieces of the whole): from --resume's checkpoint,
 * else --init's file, else the initial weights (the buffers start zero and are not
 * asked for). */
static int initial(RtRank *r, int s, int k, float *out)
{
	const Plan *p = r->w->plan;
	const RtCkpt *ck = r->w->opt.resume;
	float *whole = out;
	if (r->model->tp > 1 &&
	    !(whole = malloc((size_t)(r->w->whole->st[s].nparams + 1) * sizeof(float))))
		return rt_error(r, "out of memory");
	const RtHf *hf = r->w->opt.init;
	if (!ck && !hf)
		rt_gen_weights(r->w->opt.seed, p, s, whole);
	else if (ck ? rt_ckpt_fill(ck, p, s, k, whole) : rt_hf_fill(hf, s, whole)) {
		if (whole != out)
			free(whole);
		return rt_error(r, "out of memory");
	}
	if (whole != out) { // the rank's pieces of the whole model's
		rt_model_shard(r->model, s, r->coord[DIM_TP], whole, out);
		free(whole);
	}
	return RT_OK;
}

int rt_stage_bufs_open(RtRank *r, int s, RtStageBufs *b)
{
	const Plan *p = r->w->plan;
	const RtStageModel *sm = &r->model->st[s];
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
	if (!(b->params = rt_tensor_new_prec(r, 1, np, RT_MEM_PARAM)) ||
	    !(b->grads = rt_tensor_new(r, 1, np, RT_MEM_GRAD)))
		return RT_EFAIL;
	if (sm->loss && !(b->loss = rt_tensor_new(r, 1, p->microbatches, RT_MEM_TEMP)))
		return RT_EFAIL;
	int nstate = plan_optim_state_bytes(r->w->optim.kind) / 4; // f32 buffers: m, then v
	int64_t off, len, ns = rt_shard(np, rt_optim_dp(r), r->coord[DIM_DP], &off, &len);
	if (b->params->half &&
	    (!(b->master = rt_tensor_new(r, 1, ns, RT_MEM_MASTER)) || r->dev->zero(r, b->master)))
		return RT_EFAIL;
	if ((nstate >= 1 && (!(b->m = rt_tensor_new(r, 1, ns, RT_MEM_OPTIM)) || r->dev->zero(r, b->m))) ||
	    (nstate >= 2 && (!(b->v = rt_tensor_new(r, 1, ns, RT_MEM_OPTIM)) || r->dev->zero(r, b->v))))
		return RT_EFAIL;
	const RtDevice *dev = r->dev;
	RtTensor *state[3] = {b->params, b->m, b->v};
	const RtCkpt *ck = r->w->opt.resume;
	/* The state is whole (the weights, or a checkpoint's whole buffers, which may have
	 * been saved under another dp or none): a distributed optimizer's rank keeps its
	 * shard [off, off + len) of the buffers, and of the master weights below. */
	for (int k = 0; k <= (ck ? nstate : 0); k++) {
		memset(b->host, 0, (size_t)nhost * sizeof(float));
		RtTensor mine = k ? rt_tensor_view(state[k], 0, 1, len) : *state[k];
		if (initial(r, s, k, b->host) ||
		    ((k == 0 || len) && dev->upload(r, &mine, b->host + (k ? off : 0))))
			return RT_EFAIL;
		if (k == 0 && b->master) { // the shard's f32 weights; the kernels read them in bf16
			RtTensor mv = rt_tensor_view(b->master, 0, 1, len);
			if ((len && dev->upload(r, &mv, b->host + off)) || rt_round(r, b->params))
				return RT_EFAIL;
		}
	}
	if (ck)
		b->t = rt_ckpt_step(ck);
	if (dev->zero(r, b->grads))
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
	rt_tensor_free(r, b->master);
	rt_tensor_free(r, b->loss);
	rt_tensor_free(r, b->stale);
	free(b->host);
	memset(b, 0, sizeof *b);
}

/* t set to a microbatch's synthetic values (RT_GEN_INPUT or RT_GEN_TARGET): on the
 * device when it can make them, else made in b->host and uploaded.  Frees t on failure. */
static RtTensor *synth(RtRank *r, RtTensor *t, int what, int replica, int mb, RtStageBufs *b)
{
	uint64_t key = rt_gen_key(r->w->opt.seed, what, replica, mb);
	int rc;
	if (r->dev->gen) {
		rc = r->dev->gen(r, t, key);
	} else {
		rt_gen_values(key, b->host, t->rows * t->cols);
		rc = r->dev->upload(r, t, b->host);
	}
	if (rc) {
		rt_tensor_free(r, t);
		return NULL;
	}
	return t;
}

/* Tokens, a sequential walk per sequence and few, are always made on the host: from the
 * token file when there is one (the held-out one in the reference's eval pass), else
 * synthetic.  Every rank and the reference get theirs here, so they read the same. */
static RtTensor *tokens(RtRank *r, RtTensor *t, int shift, int step, int replica, int mb,
                        RtStageBufs *b)
{
	LayerShape sh = plan_shape(r->w->plan);
	const RtOptions *o = &r->w->opt;
	const RtData *d = r->eval ? o->eval_data : o->data;
	if (d)
		rt_data_tokens(d, o->seed, r->eval, (int)r->w->step0 + step, replica, mb, &sh, shift,
		               b->host);
	else
		rt_gen_tokens(o->seed, replica, mb, &sh, shift, b->host);
	if (r->dev->upload(r, t, b->host)) {
		rt_tensor_free(r, t);
		return NULL;
	}
	return t;
}

RtTensor *rt_stage_input(RtRank *r, int step, int replica, int mb, RtStageBufs *b, int cls)
{
	const Plan *p = r->w->plan;
	int ids = plan_shape(p).vocab > 0; // token ids: f32 (int32 on a GPU) in any precision
	RtTensor *x = ids ? rt_tensor_new(r, p->rows, p->cols, cls)
	                  : rt_tensor_new_prec(r, p->rows, p->cols, cls);
	if (!x)
		return NULL;
	if (ids)
		return tokens(r, x, 0, step, replica, mb, b);
	if (!synth(r, x, RT_GEN_INPUT, replica, mb, b))
		return NULL;
	if (rt_round(r, x)) {
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
	int is_tokens = plan_layers[st->layers[st->nlayers - 1].kind].tokens;
	int width = is_tokens ? 1 : st->out;
	RtTensor *t = rt_tensor_new(r, p->rows, width, RT_MEM_TEMP);
	if (!t)
		return NULL;
	return is_tokens ? tokens(r, t, 1, step, replica, mb, b) : synth(r, t, RT_GEN_TARGET, replica, mb, b);
}

/* A layer's call and its parameter views (pv, gv: LAYER_MAX_TENSORS each); slot is
 * the layer's first saved slot of the microbatch. */
static RtLayerCall layer_call(RtRank *r, int s, int l, RtStageBufs *b, RtTensor **slot,
                              RtTensor *pv, RtTensor *gv)
{
	const PlanLayer *ly = &r->w->plan->stages[s].layers[l];
	const RtModel *m = r->model;
	const RtLayerAt *at = &m->st[s].at[l];
	RtLayerCall c = {.layer = ly, .sh = plan_shape(r->w->plan), .x = slot[0]};
	c.rows = plan_layer_rows(ly, &c.sh, m->tp);
	/* Sequence parallelism: a replicated layer runs on the rank's rows; a split layer
	 * keeps its input split, and the kernels that read it get it gathered (seq_x). */
	c.row0 = c.rows < c.sh.rows ? c.rows * r->coord[DIM_TP] : 0;
	if (slot[0] && slot[0]->rows != c.rows)
		c.x = NULL;
	int64_t off = at->off;
	for (int j = 0; j < at->t.nparams; j++) {
		const LayerTensor *sh = &at->t.param[j];
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
	c.tp = m->tp;
	c.tp_rank = r->coord[DIM_TP];
	return c;
}

/* Sequence parallelism's collective on piece (the rank's rows) and whole (the
 * microbatch's) over the tp group, alone in its group (RtComm.seq). */
static int seq_coll(RtRank *r, RtTensor *whole, RtTensor *piece, int gather, RtMsg msg)
{
	const RtComm *comm = r->w->comm;
	msg.bytes = whole->bytes;
	int rc = comm->group_start(r);
	if (rc == RT_OK)
		rc = comm->seq(r, whole, piece, gather, &msg);
	return rc == RT_OK ? comm->group_end(r) : rc;
}

/* A new tensor of rows x t's columns, stored as t is (bf16 or f32). */
static RtTensor *like(RtRank *r, const RtTensor *t, int64_t rows)
{
	return t->half ? rt_tensor_new_prec(r, rows, t->cols, RT_MEM_TEMP)
	               : rt_tensor_new(r, rows, t->cols, RT_MEM_TEMP);
}

/* The microbatch's rows of t (the rank's rows under sequence parallelism), gathered over
 * the tp group into a new tensor (Megatron's all-gather before a column-parallel layer);
 * stage s, microbatch mb and direction dir name it. */
static RtTensor *seq_gather(RtRank *r, const RtTensor *t, int s, int mb, int dir)
{
	RtTensor *w = like(r, t, r->w->plan->rows);
	RtMsg m = {.edge = s, .mb = mb, .dir = dir, .op = (int32_t)atomic_load(&r->cur_op)};
	if (w && seq_coll(r, w, (RtTensor *)t, 1, m)) {
		rt_tensor_free(r, w);
		return NULL;
	}
	return w;
}

/* c's input gathered into *xg when c runs on more rows than its layer keeps of it (a
 * split layer's F and W under sequence parallelism); *xg NULL when not needed. */
static int seq_x(RtRank *r, int s, int mb, int dir, RtTensor *kept, RtLayerCall *c, RtTensor **xg)
{
	*xg = NULL;
	if (c->x || !kept)
		return RT_OK;
	if (!(*xg = seq_gather(r, kept, s, mb, dir)))
		return RT_EFAIL;
	c->x = *xg;
	return RT_OK;
}

/* New tensors of class cls into out[0..n); scratch ones (LayerTensor.scratch: flash
 * attention's S x S tensors) are temporaries, never counted as saved. */
static int new_tensors(RtRank *r, const LayerTensor *sh, int n, int cls, RtTensor **out)
{
	for (int i = 0; i < n; i++)
		if (!(out[i] = rt_tensor_new_of(r, &sh[i], sh[i].scratch ? RT_MEM_TEMP : cls)))
			return RT_EFAIL;
	return RT_OK;
}

/* Whether layer at has scratch saved slots (flash attention). */
static int has_scratch(const RtLayerAt *at)
{
	for (int j = 0; j < at->t.nsaved; j++)
		if (at->t.saved[j].scratch)
			return 1;
	return 0;
}

/* Frees layer at's scratch saved slots (from slot): F after computing with them, B
 * after its input gradient. */
static void free_scratch(RtRank *r, const RtLayerAt *at, RtTensor **slot)
{
	for (int j = 0; j < at->t.nsaved; j++)
		if (at->t.saved[j].scratch) {
			rt_tensor_free(r, slot[2 + j]);
			slot[2 + j] = NULL;
		}
}

/* The key of layer l's dropout masks (rt_drop_key) on microbatch mb. */
static uint64_t drop_key(const RtRank *r, int s, int l, int mb, int step, int replica)
{
	return rt_drop_key(r->w->opt.seed, (int)r->w->step0 + step, replica, mb,
	                   rt_layer_position(r->w->plan, s, l));
}

/* What a layer's kernel wrote to its n slots, as stored (rt_round): in bf16 under
 * precision bf16 but for its f32 statistics and masks. */
static int round_slots(RtRank *r, RtTensor **slot, int n)
{
	for (int i = 0; i < n; i++)
		if (rt_round(r, slot[i]))
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
		if ((r->model->st[s].at[l].t.borrowed ||
		     (r->model->st[s].at[l].t.copy && b->share_tie)) && !b->embed)
			return rt_error(r, "stage %s: its tied head needs the embedding's table, which is "
			                   "not on this rank", st->name);
	return RT_OK;
}

static int body_push(RtRank *r, RtBodies *bd, int end, RtTensor *t)
{
	if (bd->n == RT_MAX_NEST)
		return rt_error(r, "residual blocks nest deeper than %d", RT_MAX_NEST);
	bd->end[bd->n] = end;
	bd->t[bd->n++] = t;
	return RT_OK;
}

/* Adds the inputs of the bodies that end at layer l to cur (F). */
static int bodies_close(RtRank *r, RtWalk *wk, int l)
{
	for (; wk->bd.n && wk->bd.end[wk->bd.n - 1] == l; wk->bd.n--)
		if (r->dev->add(r, wk->cur, wk->bd.t[wk->bd.n - 1]) || rt_round(r, wk->cur))
			return RT_EFAIL;
	return RT_OK;
}

void rt_walk_begin(RtRank *r, int s, int dir, RtTensor *t, RtWalk *wk)
{
	memset(wk, 0, sizeof *wk);
	wk->l = dir == DIR_ACT ? 0 : r->w->plan->stages[s].nlayers - 1;
	wk->cur = t;
}

void rt_walk_free(RtRank *r, RtWalk *wk)
{
	rt_tensor_free(r, wk->piece);
	if (wk->red != wk->cur)
		rt_tensor_free(r, wk->red);
	rt_tensor_free(r, wk->cur);
	while (wk->bd.n) { // F: the bodies' inputs are saved tensors; B: copies
		wk->bd.n--;
		if (wk->back)
			rt_tensor_free(r, wk->bd.t[wk->bd.n]);
	}
	memset(wk, 0, sizeof *wk);
}

/* F of the loss layer l: its loss, or at tp > 1 its statistics for the all-reduce. */
static int loss_forward(RtRank *r, int s, int l, int mb, int step, int replica,
                        RtStageBufs *b, RtWalk *wk, RtLayerCall *c)
{
	RtTensor *t = target(r, s, step, replica, mb, b);
	if (!t)
		return RT_EFAIL;
	c->target = t;
	c->loss = b->loss;
	c->slot = mb;
	if (r->model->st[s].at[l].cut[DIR_ACT] &&
	    !(c->y = wk->red = rt_tensor_new(r, 3, c->rows, RT_MEM_TEMP))) {
		rt_tensor_free(r, t);
		return RT_EFAIL;
	}
	int rc = r->dev->layers[c->layer->kind].fwd(r, c);
	rt_tensor_free(r, t);
	return rc;
}

int rt_stage_fwd_run(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                     RtWalk *wk, int end, RtTensor **saved)
{
	const Plan *p = r->w->plan;
	const PlanStage *st = &p->stages[s];
	const RtStageModel *sm = &r->model->st[s];
	RtTensor pv[LAYER_MAX_TENSORS], gv[LAYER_MAX_TENSORS];
	if (stage_ready(r, s, b))
		return RT_EFAIL;
	while (wk->l < end && wk->cur) {
		int l = wk->l++;
		const PlanLayer *ly = &st->layers[l];
		const RtLayerAt *at = &sm->at[l];
		if (plan_layers[ly->kind].arg == LAYER_ARG_BODY) {
			/* y = x + body(x): x stays alive as the body's first layer's saved input. */
			if (body_push(r, &wk->bd, l + ly->span, wk->cur))
				return RT_EFAIL;
			continue;
		}
		RtTensor **slot = saved + at->slot;
		rt_tensor_reclass(r, wk->cur, RT_MEM_SAVED);
		slot[0] = wk->cur;
		wk->cur = NULL;
		if (new_tensors(r, at->t.saved, at->t.nsaved, RT_MEM_SAVED, slot + 2))
			return RT_EFAIL;
		RtLayerCall c = layer_call(r, s, l, b, slot, pv, gv);
		c.key = drop_key(r, s, l, mb, step, replica);
		if (plan_layers[ly->kind].loss)
			return loss_forward(r, s, l, mb, step, replica, b, wk, &c);
		RtTensor *xg;
		if (seq_x(r, s, mb, DIR_ACT, slot[0], &c, &xg) ||
		    !(c.y = rt_tensor_new_prec(r, c.rows, at->t.out, RT_MEM_TEMP))) {
			rt_tensor_free(r, xg);
			return RT_EFAIL;
		}
		int rc = r->dev->layers[ly->kind].fwd(r, &c);
		rt_tensor_free(r, xg);
		if (rc) {
			rt_tensor_free(r, c.y);
			return RT_EFAIL;
		}
		free_scratch(r, at, slot); // flash attention keeps its log-sum-exp instead
		if (round_slots(r, slot + 2, at->t.nsaved) || rt_round(r, c.y)) {
			rt_tensor_free(r, c.y);
			return RT_EFAIL;
		}
		if (plan_layers[ly->kind].drops_x) { // neither a stage's nor a body's input (model.c)
			rt_tensor_free(r, slot[0]);
			slot[0] = NULL;
		}
		wk->cur = c.y;
		if (at->cut[DIR_ACT]) { // the bodies it closes wait for the all-reduce
			wk->red = wk->cur;
			return RT_OK;
		}
		if (bodies_close(r, wk, l))
			return RT_EFAIL;
	}
	return RT_OK;
}

int rt_stage_walk_out(RtRank *r, RtWalk *wk)
{
	if (wk->red != wk->cur || wk->cur->rows <= r->model->rows) {
		rt_tensor_reclass(r, wk->cur, RT_MEM_COMM);
		return RT_OK;
	}
	if (!(wk->piece = like(r, wk->cur, r->model->rows)))
		return RT_EFAIL;
	rt_tensor_reclass(r, wk->piece, RT_MEM_COMM);
	return RT_OK;
}

void rt_stage_walk_end(RtRank *r, RtWalk *wk, RtTensor **out)
{
	if (wk->cur)
		rt_tensor_reclass(r, wk->cur, RT_MEM_COMM);
	*out = wk->cur;
	wk->cur = NULL;
}

int rt_stage_forward(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                     RtTensor *x, RtTensor **saved, RtTensor **y)
{
	RtWalk wk;
	rt_walk_begin(r, s, DIR_ACT, x, &wk);
	*y = NULL;
	if (rt_stage_fwd_run(r, s, mb, step, replica, b, &wk, r->w->plan->stages[s].nlayers, saved)) {
		rt_walk_free(r, &wk);
		return RT_EFAIL;
	}
	rt_stage_walk_end(r, &wk, y);
	return RT_OK;
}

/* The saved slots of full recomputation's span (plan_recompute_span): [*a, *b), and
 * the slot of the span's input, which F keeps. */
static int span_slots(const RtRank *r, int s, int64_t *a, int64_t *b, int *lo, int *hi)
{
	const PlanStage *st = &r->w->plan->stages[s];
	const RtStageModel *sm = &r->model->st[s];
	plan_recompute_span(st, lo, hi);
	*a = sm->at[*lo].slot;
	*b = *hi < st->nlayers ? sm->at[*hi].slot : sm->nslots;
	int l = *lo;
	while (l + 1 < *hi && plan_layers[st->layers[l].kind].arg == LAYER_ARG_BODY)
		l++;
	return sm->at[l].slot;
}

void rt_stage_drop(RtRank *r, int s, RtTensor **saved)
{
	int64_t a, b;
	int lo, hi;
	RtTensor *x = saved[span_slots(r, s, &a, &b, &lo, &hi)];
	for (int64_t k = a; k < b; k++)
		if (saved[k] != x) {
			rt_tensor_free(r, saved[k]);
			saved[k] = NULL;
		}
}

/* F again over the span from its kept input: its layers save anew what F dropped; what
 * the walk gives at its end (the next layer's input, kept by it, or the stage output,
 * sent already) is a copy nobody needs. */
int rt_stage_recompute(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                       RtTensor **saved)
{
	int64_t sa, sb;
	int lo, hi;
	RtTensor *x = saved[span_slots(r, s, &sa, &sb, &lo, &hi)], *y;
	if (!x)
		return rt_error(r, "internal: stage %s lost its input before recomputing",
		                r->w->plan->stages[s].name);
	RtWalk wk;
	rt_walk_begin(r, s, DIR_ACT, x, &wk);
	wk.l = lo;
	if (rt_stage_fwd_run(r, s, mb, step, replica, b, &wk, hi, saved)) {
		rt_walk_free(r, &wk);
		return RT_EFAIL;
	}
	rt_stage_walk_end(r, &wk, &y);
	rt_tensor_free(r, y);
	return RT_OK;
}

/* Whether layer at has tensors selective recomputation rebuilds (LayerTensor.rebuilt:
 * attention's S x S ones). */
static int rebuilds(const RtLayerAt *at)
{
	for (int j = 0; j < at->t.nsaved; j++)
		if (at->t.saved[j].rebuilt)
			return 1;
	return 0;
}

/* Frees those tensors of layer at (its slots from slot). */
static void free_rebuilt(RtRank *r, const RtLayerAt *at, RtTensor **slot)
{
	for (int j = 0; j < at->t.nsaved; j++)
		if (at->t.saved[j].rebuilt) {
			rt_tensor_free(r, slot[2 + j]);
			slot[2 + j] = NULL;
		}
}

void rt_stage_drop_probs(RtRank *r, int s, RtTensor **saved, int lo, int hi)
{
	for (int l = lo; l < hi; l++)
		free_rebuilt(r, &r->model->st[s].at[l], saved + r->model->st[s].at[l].slot);
}

/* Layer l's rebuild kernel on the tensors rt_stage_rebuild_probs holds again. */
static int rebuild(RtRank *r, int s, int l, RtStageBufs *b, RtTensor **slot, uint64_t key)
{
	RtTensor pv[LAYER_MAX_TENSORS], gv[LAYER_MAX_TENSORS];
	RtLayerCall c = layer_call(r, s, l, b, slot, pv, gv);
	c.key = key;
	if (r->dev->layers[c.layer->kind].rebuild(r, &c)) // rt_device_check: it has one
		return RT_EFAIL;
	/* what F stored, stored alike (flash attention's scratch stays f32, as in its kernel) */
	for (int j = 0; j < c.nsaved; j++)
		if (r->model->st[s].at[l].t.saved[j].rebuilt && rt_round(r, c.saved[j]))
			return RT_EFAIL;
	return RT_OK;
}

int rt_stage_rebuild_probs(RtRank *r, int s, RtStageBufs *b, RtTensor **saved, int lo,
                           int hi)
{
	for (int l = lo; l < hi; l++) {
		const RtLayerAt *at = &r->model->st[s].at[l];
		RtTensor **slot = saved + at->slot;
		if (!rebuilds(at))
			continue;
		for (int j = 0; j < at->t.nsaved; j++) {
			RtTensor **t = &slot[2 + j];
			if (at->t.saved[j].rebuilt && !*t &&
			    !(*t = rt_tensor_new_of(r, &at->t.saved[j], RT_MEM_SAVED)))
				return RT_EFAIL;
		}
		/* Dropout's masks need their key, which B knows (layer_backward). */
		if (!(r->w->plan->stages[s].layers[l].drop > 0) && rebuild(r, s, l, b, slot, 0))
			return RT_EFAIL;
	}
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
	const RtLayerAt *at = &r->model->st[s].at[l];
	RtTensor pv[LAYER_MAX_TENSORS], gv[LAYER_MAX_TENSORS];
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
	c.key = drop_key(r, s, l, mb, step, replica);
	int rc = RT_OK;
	/* Selective recomputation: a layer with dropout rebuilds here (rt_stage_rebuild_probs). */
	int selective = p->stages[s].recompute == PLAN_RECOMPUTE_SELECTIVE;
	if (selective && ly->drop > 0 && rebuilds(at) && rebuild(r, s, l, b, slot, c.key))
		return RT_EFAIL;
	if (need_dx && !(c.dx = rt_tensor_new_prec(r, c.rows, at->t.in, RT_MEM_TEMP)))
		return RT_EFAIL;
	/* Flash attention rebuilds its probabilities into scratch for its input gradient. */
	int scratch = c.dx && has_scratch(at);
	for (int j = 0; scratch && j < at->t.nsaved; j++)
		if (at->t.saved[j].scratch &&
		    !(slot[2 + j] = rt_tensor_new_of(r, &at->t.saved[j], RT_MEM_TEMP)))
			return RT_EFAIL;
	if (scratch && rebuild(r, s, l, b, slot, c.key))
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
		if (rc == RT_OK)
			rc = rt_round(r, c.dx) || (has_w && round_slots(r, slot + 2 + at->t.nsaved, at->t.nheld)) ? RT_EFAIL : RT_OK;
		if (scratch)
			free_scratch(r, at, slot);
		rt_tensor_free(r, c.work);
		rt_tensor_free(r, t);
	}
	/* Rebuilt for B alone: W does not read them (rt_stage_rebuild_probs). */
	if (selective && rc == RT_OK)
		free_rebuilt(r, at, slot);
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
static int body_backward(RtRank *r, int l, RtBodies *bd, RtTensor **cur, int want_dx)
{
	if (!bd->n || bd->end[bd->n - 1] != l)
		return rt_error(r, "internal: residual layer %d has no output gradient to add", l);
	RtTensor *skip = bd->t[--bd->n];
	int rc = RT_OK;
	if (*cur && want_dx)
		rc = r->dev->add(r, *cur, skip) || rt_round(r, *cur) ? RT_EFAIL : RT_OK;
	rt_tensor_free(r, skip);
	if (!want_dx) {
		rt_tensor_free(r, *cur);
		*cur = NULL;
	}
	return rc;
}

/* Entering bodies that end at layer l (outermost first, so the innermost is on top):
 * each keeps a copy of the output gradient. */
static int body_enter(RtRank *r, const PlanStage *st, int l, RtBodies *bd, const RtTensor *dy)
{
	for (int i = 0; i < l; i++) {
		const PlanLayer *ly = &st->layers[i];
		if (plan_layers[ly->kind].arg != LAYER_ARG_BODY || i + ly->span != l)
			continue;
		RtTensor *t = rt_tensor_new_prec(r, dy->rows, dy->cols, RT_MEM_TEMP);
		if (!t || r->dev->copy(r, t, dy) || body_push(r, bd, i, t)) {
			rt_tensor_free(r, t);
			return RT_EFAIL;
		}
	}
	return RT_OK;
}

/* Megatron's all-gather of a row-parallel output's gradient: a split layer l's B and W
 * take all the microbatch's rows, so *dy (owned; the rank's rows under sequence
 * parallelism) is replaced by its gather.  The residual bodies copied it before. */
static int seq_dy(RtRank *r, int s, int l, int mb, RtTensor **dy)
{
	LayerShape sh = plan_shape(r->w->plan);
	if (!*dy || (*dy)->rows == plan_layer_rows(&r->w->plan->stages[s].layers[l], &sh, r->model->tp))
		return RT_OK;
	RtTensor *g = seq_gather(r, *dy, s, mb, DIR_GRAD);
	rt_tensor_free(r, *dy);
	*dy = g;
	return g ? RT_OK : RT_EFAIL;
}

int rt_stage_bwd_run(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                     RtWalk *wk, int end, RtTensor **saved)
{
	const PlanStage *st = &r->w->plan->stages[s];
	const RtStageModel *sm = &r->model->st[s];
	wk->back = 1;
	if (stage_ready(r, s, b))
		return RT_EFAIL;
	while (wk->l >= end) {
		int l = wk->l--;
		/* Stage 0's first layer: nobody wants the input gradient. */
		int want_dx = !(l == 0 && sm->nin == 0);
		if (plan_layers[st->layers[l].kind].arg == LAYER_ARG_BODY) {
			if (body_backward(r, l, &wk->bd, &wk->cur, want_dx))
				return RT_EFAIL;
			continue;
		}
		RtTensor **slot = saved + sm->at[l].slot;
		if (!slot[0] && !plan_layers[st->layers[l].kind].drops_x)
			return rt_error(r, "internal: layer %d of stage %d lost its saved input", l, s);
		RtTensor *dy = wk->cur;
		wk->cur = NULL;
		if ((dy && body_enter(r, st, l, &wk->bd, dy)) || seq_dy(r, s, l, mb, &dy) ||
		    layer_backward(r, s, l, mb, step, replica, b, slot, dy, want_dx, &wk->cur))
			return RT_EFAIL;
		if (sm->at[l].cut[DIR_GRAD]) { // its input gradient is a partial sum
			wk->red = wk->cur;
			return RT_OK;
		}
	}
	return RT_OK;
}

int rt_stage_backward(RtRank *r, int s, int mb, int step, int replica, RtStageBufs *b,
                      RtTensor *dy, RtTensor **saved, RtTensor **dx)
{
	RtWalk wk;
	rt_walk_begin(r, s, DIR_GRAD, dy, &wk);
	*dx = NULL;
	if (rt_stage_bwd_run(r, s, mb, step, replica, b, &wk, 0, saved)) {
		rt_walk_free(r, &wk);
		return RT_EFAIL;
	}
	rt_stage_walk_end(r, &wk, dx);
	return RT_OK;
}

/* One all-reduce over the rank's tp group, alone in its group. */
static int tp_reduce(RtRank *r, RtTensor *t, int max, const RtMsg *m)
{
	const RtComm *comm = r->w->comm;
	RtMsg msg = *m;
	msg.bytes = t->bytes;
	int rc = comm->group_start(r);
	if (rc == RT_OK)
		rc = comm->allreduce(r, t, OP_OVER_TP, max, &msg);
	if (rc == RT_OK)
		rc = comm->group_end(r);
	return rc;
}

/* Reduces t's rows x cols view from element off over the tp group through a tensor of its
 * own (an asynchronous device orders work on whole tensors, not on views of them). */
static int reduce_view(RtRank *r, RtTensor *t, int64_t off, int64_t rows, int64_t cols, int max,
                       const RtMsg *m)
{
	RtTensor v = rt_tensor_view(t, off, rows, cols);
	RtTensor *x = rt_tensor_new(r, rows, cols, RT_MEM_TEMP);
	int rc = !x || r->dev->copy(r, x, &v) || tp_reduce(r, x, max, m) || r->dev->copy(r, &v, x)
	             ? RT_EFAIL
	             : RT_OK;
	rt_tensor_free(r, x);
	return rc;
}

/* Reduces rows [row, row + n) of t over the tp group. */
static int reduce_rows(RtRank *r, RtTensor *t, int64_t row, int64_t n, int max, const RtMsg *m)
{
	return reduce_view(r, t, row * t->cols, n, t->cols, max, m);
}

/* The vocabulary-parallel loss at layer l: the maximum over the group first, so every
 * rank's exponentials share it; then the sums (rt_backend.h, tp_fwd). */
static int loss_reduce(RtRank *r, int s, int l, int mb, RtStageBufs *b, RtTensor *t,
                       RtTensor **saved, const RtMsg *m)
{
	RtTensor pv[LAYER_MAX_TENSORS], gv[LAYER_MAX_TENSORS];
	RtLayerCall c = layer_call(r, s, l, b, saved + r->model->st[s].at[l].slot, pv, gv);
	RtLayerFn fn = r->dev->layers[c.layer->kind].tp_fwd;
	c.y = t;
	c.loss = b->loss;
	c.slot = mb;
	int rc = fn ? reduce_rows(r, t, 0, 1, 1, m)
	            : rt_error(r, "the %s device cannot split the %s loss over a tp group",
	                       r->dev->name, plan_layers[c.layer->kind].name);
	if (rc == RT_OK && (c.phase = 1, rc = fn(r, &c)) == RT_OK &&
	    (rc = reduce_rows(r, t, 1, 2, 0, m)) == RT_OK)
		rc = (c.phase = 2, fn(r, &c));
	rt_tensor_free(r, t);
	return rc;
}

int rt_stage_tp_reduce(RtRank *r, int s, int mb, RtStageBufs *b, RtWalk *wk, RtTensor **saved,
                       int dir, const RtMsg *m)
{
	RtTensor *t = wk->red;
	int l = dir == DIR_ACT ? wk->l - 1 : wk->l + 1;
	wk->red = NULL;
	if (!t) // B of a first layer whose input gradient nobody wants: alike on every member
		return RT_OK;
	if (dir == DIR_ACT && plan_layers[r->w->plan->stages[s].layers[l].kind].loss)
		return loss_reduce(r, s, l, mb, b, t, saved, m);
	if (r->model->rows < t->rows) { // sequence parallelism: Megatron's reduce-scatter
		RtTensor *piece = wk->piece ? wk->piece : like(r, t, r->model->rows);
		wk->piece = NULL;
		int rc = !piece || seq_coll(r, t, piece, 0, *m) ? RT_EFAIL : RT_OK;
		rt_tensor_free(r, t);
		wk->cur = piece;
		if (rc)
			return RT_EFAIL;
		t = piece;
	} else if (tp_reduce(r, t, 0, m))
		return RT_EFAIL;
	if (rt_round(r, t)) // a bf16 reduction's result is bf16
		return RT_EFAIL;
	return dir == DIR_ACT ? bodies_close(r, wk, l) : RT_OK;
}

/* The replicated layers' own parameters of layer l of stage s (0 for a split one or
 * without sequence parallelism, whose gradients need no sum over tp). */
static int64_t seq_layer_params(RtRank *r, int s, int l)
{
	const RtLayerAt *at = &r->model->st[s].at[l];
	int64_t n = 0;
	if (r->model->rows == r->w->plan->rows || // no sequence parallelism
	    plan_layers[r->w->plan->stages[s].layers[l].kind].tp != LAYER_TP_WHOLE)
		return 0;
	for (int j = at->t.borrowed; j < at->t.nparams; j++)
		n += at->t.param[j].rows * at->t.param[j].cols;
	return n;
}

int64_t rt_stage_seq_params(RtRank *r, int s)
{
	int64_t n = 0;
	for (int l = 0; l < r->w->plan->stages[s].nlayers; l++)
		n += seq_layer_params(r, s, l);
	return n;
}

int rt_stage_seq_grads(RtRank *r, int s, RtStageBufs *b, const RtMsg *m)
{
	const RtStageModel *sm = &r->model->st[s];
	for (int l = 0; l < r->w->plan->stages[s].nlayers; l++) {
		int64_t n = seq_layer_params(r, s, l);
		if (n && reduce_view(r, b->grads, sm->at[l].off, 1, n, 0, m))
			return RT_EFAIL;
	}
	return RT_OK;
}

int rt_stage_weights(RtRank *r, int s, RtStageBufs *b, RtTensor **saved)
{
	return rt_stage_weights_of(r, s, b, saved, 0, r->w->plan->stages[s].nlayers);
}

int rt_stage_weights_of(RtRank *r, int s, RtStageBufs *b, RtTensor **saved, int lo, int hi)
{
	const PlanStage *st = &r->w->plan->stages[s];
	const RtStageModel *sm = &r->model->st[s];
	RtTensor pv[LAYER_MAX_TENSORS], gv[LAYER_MAX_TENSORS];
	if (stage_ready(r, s, b))
		return RT_EFAIL;
	for (int l = lo; l < hi; l++) {
		const RtLayerAt *at = &sm->at[l];
		if (!at->t.nparams)
			continue; // no W part
		RtTensor **slot = saved + at->slot;
		if (!slot[0] || !slot[1])
			return rt_error(r, "internal: layer %d of stage %d lost its saved tensors", l, s);
		RtLayerCall c = layer_call(r, s, l, b, slot, pv, gv);
		c.dy = slot[1];
		RtTensor *xg;
		int rc = seq_x(r, s, -1, DIR_GRAD, slot[0], &c, &xg);
		if (rc == RT_OK)
			rc = r->dev->layers[st->layers[l].kind].bwd_w(r, &c);
		rt_tensor_free(r, xg);
		if (rc)
			return RT_EFAIL;
		free_slots(r, slot, 2 + at->t.nsaved + at->t.nheld);
	}
	return RT_OK;
}
