/* The in-memory plan: allocation, coordinates, and the small facts every tool derives
 * the same way (transfer time, communicator members, op text).  Keeping them here is
 * what makes the compiler, the simulator and the runtime agree. */
#include "plan.h"
#include "par.h"
#include "sysmem.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

const char *const plan_dim_names[DIM_COUNT] = {"pp", "dp", "tp"};
const char *const plan_dir_names[DIR_COUNT] = {"act", "grad"};
const char *const plan_peer_names[PEER_COUNT] = {"remote", "local", "self"};

/* The embedding's stage and the stage of a head tied to it, or -1. */
static void tie_stages(const Plan *p, int *embed, int *head)
{
	*embed = *head = -1;
	for (int s = 0; s < p->nstages; s++)
		for (int l = 0; l < p->stages[s].nlayers; l++) {
			const PlanLayer *ly = &p->stages[s].layers[l];
			if (ly->kind == LAYER_EMBED && *embed < 0)
				*embed = s;
			if (ly->kind == LAYER_HEAD && (ly->flags & LAYER_FLAG(LAYER_KEY_TIED)))
				*head = s;
		}
}

void plan_tie(const Plan *p, int *embed, int *head)
{
	tie_stages(p, embed, head);
	if (*embed < 0 || *head < 0 || *embed == *head ||
	    p->stages[*embed].pp != p->stages[*head].pp)
		*embed = *head = -1;
}

int plan_tie_across(const Plan *p, int *embed, int *head)
{
	tie_stages(p, embed, head);
	if (*embed < 0 || *head < 0 || p->stages[*embed].pp == p->stages[*head].pp) {
		*embed = *head = -1;
		return 0;
	}
	return 1;
}

int plan_tie_peer(const Plan *p, int rank, int *stage)
{
	int e, h;
	*stage = -1;
	if (!plan_tie_across(p, &e, &h) || rank < 0 || rank >= p->world)
		return -1;
	int c[DIM_COUNT];
	PlanRank tmp;
	memcpy(c, plan_rank(p, rank, &tmp)->coord, sizeof c);
	int me = c[DIM_PP];
	if (me != p->stages[e].pp && me != p->stages[h].pp)
		return -1;
	*stage = me == p->stages[e].pp ? e : h;
	c[DIM_PP] = me == p->stages[e].pp ? p->stages[h].pp : p->stages[e].pp;
	return plan_rank_of(p, c);
}

int64_t plan_tie_bytes(const Plan *p)
{
	int e, h;
	tie_stages(p, &e, &h);
	if (h < 0)
		return 0;
	const PlanStage *st = &p->stages[h];
	int tp = p->dims[DIM_TP] > 1 ? p->dims[DIM_TP] : 1;
	for (int l = 0; l < st->nlayers; l++)
		if (st->layers[l].kind == LAYER_HEAD)
			return (int64_t)(p->vocab / tp) * st->layers[l].in * 4;
	return 0;
}

int plan_edge_self(const Plan *p, int e)
{
	const PlanEdge *ed = &p->edges[e];
	if (p->stages[ed->src].pp != p->stages[ed->dst].pp)
		return 0;
	for (int i = 0; i < p->nroutes; i++)
		if (p->routes[i].edge == e)
			return 1;
	return 0;
}

const char *const plan_optim_names[OPTIM_COUNT] = {"sgd", "adamw", "momentum"};

PlanOptim plan_optim_default(int kind)
{
	return (PlanOptim){.kind = (uint8_t)kind, .given = 1, .lr = 1e-3, .beta1 = 0.9,
	                   .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .momentum = 0.9};
}

int plan_optim_state_bytes(int kind)
{
	return kind == OPTIM_ADAMW ? 8 : kind == OPTIM_MOMENTUM ? 4 : 0;
}

LayerShape plan_shape(const Plan *p)
{
	if (p->seq > 0)
		return (LayerShape){p->rows, p->rows / p->seq, p->seq, p->vocab};
	return (LayerShape){p->rows, p->rows, 1, 0};
}

/* A size in bytes as people read it: "512 MiB". */
static void human_bytes(char *buf, size_t n, double b)
{
	static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;
	while (b >= 1024 && u < 4) {
		b /= 1024;
		u++;
	}
	snprintf(buf, n, u >= 3 ? "%.1f %s" : "%.0f %s", b, units[u]);
}

char *plan_oom_text(char *buf, size_t n, int64_t ops, size_t failed)
{
	char need[32], got[32], what[2400];
	double bytes = (double)ops * (double)sizeof(PlanOp);
	human_bytes(need, sizeof need, bytes);
	human_bytes(got, sizeof got, (double)failed);
	int k = snprintf(buf, n, "out of memory");
	if (ops > 0 && k < (int)n)
		k += snprintf(buf + k, n - (size_t)k, ": the plan needs %.1f M ops (about %s)",
		              (double)ops / 1e6, need);
	if (failed && k < (int)n)
		k += snprintf(buf + k, n - (size_t)k, "%sallocating %s failed", ops > 0 ? "; " : ": ",
		              got);
	/* Say so where the machine has less than that (plan_block_new refuses such a block,
	 * pipecc such a plan): no retry can help. */
	if ((double)failed > bytes)
		bytes = (double)failed;
	int64_t limit = bytes > 0 ? plan_sysmem_limit(what, sizeof what) : -1;
	if (limit >= 0 && bytes > (double)limit && k < (int)n) {
		human_bytes(got, sizeof got, (double)limit);
		snprintf(buf + k, n - (size_t)k, ": more than the %s %s", got, what);
	}
	return buf;
}

int plan_error_is_oom(const PlanError *e)
{
	return !strncmp(e->msg, "out of memory", 13);
}

const char *plan_strerror(int e)
{
	return e == ENOMEM ? "out of memory" : strerror(e);
}

Plan *plan_new(void)
{
	Plan *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	for (int d = 0; d < DIM_COUNT; d++) {
		p->dims[d] = 1;
		p->dim_order[d] = d;
	}
	p->world = 1;
	return p;
}

void plan_free(Plan *p)
{
	if (!p)
		return;
	free(p->name);
	free(p->source);
	free(p->schedule);
	for (int s = 0; s < p->nstages; s++) {
		free(p->stages[s].name);
		free(p->stages[s].layers);
	}
	free(p->stages);
	free(p->edges);
	free(p->routes);
	free(p->sizes);
	free(p->size_slot);
	if (p->ranks) { // a view holds line 0 and its own rank (plan_expand_for)
		int held = p->view ? p->dims[DIM_PP] + 1 : p->world;
		for (int r = 0; r < held; r++) {
			if (p->ranks[r].borrowed)
				continue;
			free(p->ranks[r].peers);
			plan_rank_drop_ops(&p->ranks[r]);
		}
	}
	free(p->ranks);
	par_free(p->blocks, p->nblocks);
	free(p->blocks);
	free(p);
}

void plan_rank_drop_ops(PlanRank *r)
{
	if (!r->inblock && !r->borrowed) {
		free(r->ops);
		free(r->lines);
	}
	r->ops = NULL;
	r->lines = NULL;
	r->nops = r->ops_cap = 0;
	r->inblock = 0;
}

#define HUGE_ALIGN ((uintptr_t)2 << 20)

/* One allocation HUGE_ALIGN bytes longer than asked, the block starting at its first
 * 2 MiB boundary; only the block's own bytes are hinted, so no huge page reaches past
 * it (its last part short of 2 MiB stays in small pages) and none holds a neighbour's
 * memory or bytes nobody uses. */
void *plan_block_new(size_t bytes, int zero, void **raw)
{
	if (bytes < PLAN_HUGE_MIN) {
		*raw = zero ? calloc(bytes ? bytes : 1, 1) : malloc(bytes ? bytes : 1);
		return *raw;
	}
	/* Overcommit would grant a block the machine cannot hold, and the OOM killer end
	 * the tool as its ops are written: refuse it (plan_oom_text then says so). */
	if (bytes > SIZE_MAX - HUGE_ALIGN ||
	    (bytes >= PLAN_FIT_MIN && !plan_sysmem_fits((double)bytes))) {
		*raw = NULL;
		errno = ENOMEM;
		return NULL;
	}
	*raw = zero ? calloc(bytes + HUGE_ALIGN, 1) : malloc(bytes + HUGE_ALIGN);
	if (!*raw)
		return NULL;
	char *a = (char *)(((uintptr_t)*raw + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1));
#ifdef MADV_HUGEPAGE
	if (plan_huge_pages())
		(void)madvise(a, bytes, MADV_HUGEPAGE); // EINVAL without THP: only a hint
#endif
	return a;
}

void plan_populate_step(uintptr_t step, uintptr_t end)
{
#ifdef MADV_POPULATE_WRITE
	static int refused; // the kernel cannot (before Linux 5.14): faults do it
	uintptr_t e = step + PLAN_POPULATE_STEP;
	if (e > end)
		e = end & ~(uintptr_t)4095; // a last page in part: left to its fault
	if (step < e && !__atomic_load_n(&refused, __ATOMIC_RELAXED) &&
	    madvise((void *)step, e - step, MADV_POPULATE_WRITE))
		__atomic_store_n(&refused, 1, __ATOMIC_RELAXED);
#else
	(void)step, (void)end;
#endif
}

size_t plan_block_ops(Plan *p, PlanRank *const *rk, const int64_t *n, int count, int lines)
{
	size_t total = 0, per = sizeof(PlanOp) + (lines ? sizeof(int32_t) : 0);
	for (int i = 0; i < count; i++) {
		if ((size_t)n[i] > SIZE_MAX / per - total)
			return SIZE_MAX; // no machine has it
		total += (size_t)n[i];
	}
	void **bl = realloc(p->blocks, ((size_t)p->nblocks + 1) * sizeof *bl), *raw;
	if (!bl)
		return ((size_t)p->nblocks + 1) * sizeof *bl;
	p->blocks = bl;
	char *a = plan_block_new(total * per, 0, &raw);
	if (!a)
		return total * per + HUGE_ALIGN;
	p->blocks[p->nblocks++] = raw;
	/* Every rank's ops first, then every rank's lines. */
	PlanOp *ops = (PlanOp *)a;
	int32_t *ln = (int32_t *)(ops + total);
	for (int i = 0; i < count; i++) {
		PlanRank *r = rk ? rk[i] : &p->ranks[i];
		plan_rank_drop_ops(r);
		r->ops = ops;
		r->lines = lines ? ln : NULL;
		r->ops_cap = n[i];
		r->inblock = 1;
		ops += n[i];
		ln += n[i];
	}
	return 0;
}

size_t plan_block_take(Plan *p, PlanRank *r, int64_t n, int lines)
{
	size_t per = sizeof(PlanOp) + (lines ? sizeof(int32_t) : 0);
	if (n <= 0 || (size_t)n > (SIZE_MAX - HUGE_ALIGN) / 2 / per || (size_t)n * per < PLAN_TAKE_MIN)
		return plan_reserve_ops(r, n, lines);
	size_t need = ((size_t)n * per + 63) & ~(size_t)63; // the next rank's ops on a cache line
	if (!p->take_at || (size_t)(p->take_end - p->take_at) < need) {
		size_t bytes = need > PLAN_TAKE_BLOCK ? need : PLAN_TAKE_BLOCK;
		void **bl = realloc(p->blocks, ((size_t)p->nblocks + 1) * sizeof *bl), *raw;
		if (!bl)
			return ((size_t)p->nblocks + 1) * sizeof *bl;
		p->blocks = bl;
		char *a = plan_block_new(bytes, 0, &raw);
		if (!a)
			return bytes + HUGE_ALIGN;
		p->blocks[p->nblocks++] = raw;
		p->take_at = a;
		p->take_end = a + bytes;
	}
	plan_rank_drop_ops(r);
	r->ops = (PlanOp *)p->take_at;
	r->lines = lines ? (int32_t *)(r->ops + n) : NULL;
	r->ops_cap = n;
	r->inblock = 1;
	p->take_at += need;
	return 0;
}

/* plan_reserve_ops on a rank whose arrays are in a block: both copied into arrays of
 * its own, or nothing changed. */
static size_t move_out(PlanRank *r, int64_t cap, int lines)
{
	PlanOp *ops = malloc((size_t)cap * sizeof *ops);
	int32_t *l = lines || r->lines ? malloc((size_t)cap * sizeof *l) : NULL;
	if (!ops || (!l && (lines || r->lines))) {
		free(ops);
		free(l);
		return (size_t)cap * (ops ? sizeof *l : sizeof *ops);
	}
	memcpy(ops, r->ops, (size_t)r->nops * sizeof *ops);
	if (l && r->lines)
		memcpy(l, r->lines, (size_t)r->nops * sizeof *l);
	else if (l) // the ops so far stem from no line
		memset(l, 0, (size_t)r->nops * sizeof *l);
	r->ops = ops;
	r->lines = l;
	r->ops_cap = cap;
	r->inblock = 0;
	return 0;
}

size_t plan_reserve_ops(PlanRank *r, int64_t cap, int lines)
{
	cap = cap > 0 ? cap : 1;
	if (r->inblock && cap <= r->ops_cap && (!lines || r->lines))
		return 0; // a block's arrays do not shrink
	if (r->inblock)
		return move_out(r, cap > r->nops ? cap : r->nops, lines);
	PlanOp *ops = realloc(r->ops, (size_t)cap * sizeof *ops);
	if (!ops)
		return (size_t)cap * sizeof *ops;
	r->ops = ops;
	if (lines || r->lines) {
		int32_t *l = realloc(r->lines, (size_t)cap * sizeof *l);
		if (!l)
			return (size_t)cap * sizeof *l;
		if (!r->lines) // the ops so far stem from no line
			memset(l, 0, (size_t)r->nops * sizeof *l);
		r->lines = l;
	}
	r->ops_cap = cap;
	return 0;
}

PlanOp *plan_push_op(PlanRank *r, PlanOp op, int32_t line)
{
	int64_t cap = r->ops_cap;
	if (r->nops == cap)
		cap = cap ? cap + cap / 2 : 64;
	if ((cap != r->ops_cap || (line && !r->lines)) && plan_reserve_ops(r, cap, line != 0))
		return NULL;
	r->ops[r->nops] = op;
	if (r->lines)
		r->lines[r->nops] = line;
	return &r->ops[r->nops++];
}

/* In a line plan ranks are pipeline indices of line 0 (dp = tp = 0): other
 * coordinates name no rank of the plan (-1). */
int plan_rank_of(const Plan *p, const int coord[DIM_COUNT])
{
	if (p->line)
		return coord[DIM_DP] || coord[DIM_TP] ? -1 : coord[DIM_PP];
	return plan_mesh_rank(p, coord);
}

void plan_coords_of(const Plan *p, int rank, int coord[DIM_COUNT])
{
	if (p->line) {
		coord[DIM_PP] = rank;
		coord[DIM_DP] = coord[DIM_TP] = 0;
		return;
	}
	plan_mesh_coords(p, rank, coord);
}

int64_t plan_total_ops(const Plan *p)
{
	int64_t n = 0;
	for (int r = 0; r < p->world; r++)
		n += p->ranks[r].nops;
	return n;
}

int64_t plan_transfer_ns(const Plan *p, int64_t bytes)
{
	if (p->link_ideal)
		return 0;
	double t = (double)p->latency_ns + ceil((double)bytes * 1e9 / p->bandwidth);
	return t < (double)(INT64_MAX / 4) ? (int64_t)t : INT64_MAX / 4; // no overflow UB
}

int64_t plan_transfer_ns_floor(const Plan *p, int64_t bytes)
{
	if (p->link_ideal)
		return 0;
	double t = (double)p->latency_ns + floor((double)bytes * 1e9 / p->bandwidth);
	return t < (double)(INT64_MAX / 4) ? (int64_t)t : INT64_MAX / 4;
}

int plan_is_comm(int kind)
{
	return kind >= 0 && kind < OP_COUNT && plan_op_is_comm((OpKind)kind);
}

int64_t plan_group_end(const PlanRank *r, int64_t i)
{
	const PlanOp *o = r->ops;
	if (!plan_op_is_comm(plan_op_kind(&o[i])))
		return i + 1;
	int64_t j = i + 1;
	while (j < r->nops && plan_op_is_comm(plan_op_kind(&o[j])) && o[j].group == o[i].group)
		j++;
	return j;
}

int plan_dim_members(const Plan *p, int rank, int dim, int *out)
{
	if (p->line && dim != DIM_PP) { // the other members run on other lines
		out[0] = rank;
		return 1;
	}
	int c[DIM_COUNT];
	plan_coords_of(p, rank, c);
	for (int i = 0; i < p->dims[dim]; i++) {
		c[dim] = i;
		out[i] = plan_rank_of(p, c);
	}
	return p->dims[dim];
}

int plan_format_op(const Plan *p, const PlanOp *o, char *buf, size_t n)
{
	if (o->kind >= OP_COUNT)
		return snprintf(buf, n, "?");
	const char *k = plan_ops[o->kind].name;
	int p2p = o->kind == OP_SEND || o->kind == OP_RECV;
	int64_t bytes = (p2p ? o->stage >= 0 && o->stage < p->nedges : -2 - o->route < p->nsizes)
	                    ? plan_op_bytes(p, o)
	                    : -1; // an op the reader would not take: say it, do not look
	/* A line plan's peers are pipeline indices in memory; the file names world ranks. */
	int peer = o->peer >= 0 ? plan_world_rank(p, o->peer) : o->peer;
	switch (plan_op_kind(o)) {
	case OP_COUNT:
		break;
	case OP_F:
	case OP_B:
	case OP_W:
	case OP_BW:
		if (o->part)
			return snprintf(buf, n, "%s %d %d part=%d", k, o->stage, o->mb, o->part);
		return snprintf(buf, n, "%s %d %d", k, o->stage, o->mb);
	case OP_SEND:
	case OP_RECV:
		return snprintf(buf, n, "%s %s e=%d m=%d %s=%d bytes=%" PRId64 " g=%d r=%d", k,
		                plan_dir_names[o->dir & 1], o->stage, o->mb,
		                o->kind == OP_SEND ? "to" : "from", peer, bytes, o->group,
		                o->route);
	case OP_ALLREDUCE:
		return snprintf(buf, n, "%s s=%d bytes=%" PRId64 " g=%d", k, o->stage, bytes,
		                o->group);
	case OP_OPTIM:
		return snprintf(buf, n, "%s s=%d", k, o->stage);
	case OP_TIEREDUCE:
		return snprintf(buf, n, "%s s=%d with=%d bytes=%" PRId64 " g=%d", k, o->stage,
		                peer, bytes, o->group);
	case OP_TPREDUCE:
		return snprintf(buf, n, "%s %s s=%d m=%d part=%d bytes=%" PRId64 " g=%d", k,
		                plan_dir_names[o->dir & 1], o->stage, o->mb, o->part, bytes, o->group);
	}
	return snprintf(buf, n, "?");
}

/* ---- the sizes of the sized kinds (plan_op_set_bytes) ---- */

static pthread_mutex_t size_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t size_hash(int64_t b, int32_t mask)
{
	uint64_t h = (uint64_t)b * 0x9e3779b97f4a7c15u;
	return (uint32_t)(h >> 32) & (uint32_t)mask;
}

/* p->size_slot (2 sizes_cap entries) rebuilt from p->sizes: slot h holds index + 1 of
 * the size that hashed there or probed on to it, 0 when free. */
static void size_slots_fill(Plan *p)
{
	int32_t mask = 2 * p->sizes_cap - 1;
	memset(p->size_slot, 0, 2 * (size_t)p->sizes_cap * sizeof *p->size_slot);
	for (int32_t i = 0; i < p->nsizes; i++) {
		uint32_t h = size_hash(p->sizes[i], mask);
		while (p->size_slot[h])
			h = (h + 1) & (uint32_t)mask;
		p->size_slot[h] = i + 1;
	}
}

/* Index of bytes in p->sizes, added when new; -1 out of memory.  Caller holds size_lock. */
static int32_t size_index(Plan *p, int64_t bytes)
{
	int32_t mask = 2 * p->sizes_cap - 1;
	for (uint32_t h = p->sizes_cap ? size_hash(bytes, mask) : 0; p->sizes_cap;
	     h = (h + 1) & (uint32_t)mask) {
		int32_t s = p->size_slot[h];
		if (!s)
			break;
		if (p->sizes[s - 1] == bytes)
			return s - 1;
	}
	if (p->nsizes == p->sizes_cap) {
		if (p->sizes_cap >= INT32_MAX / 4)
			return -1;
		int32_t cap = p->sizes_cap ? 2 * p->sizes_cap : 8;
		int64_t *v = realloc(p->sizes, (size_t)cap * sizeof *v);
		if (v)
			p->sizes = v;
		int32_t *slot = calloc(2 * (size_t)cap, sizeof *slot);
		if (!v || !slot) {
			free(slot);
			return -1;
		}
		free(p->size_slot);
		p->size_slot = slot;
		p->sizes_cap = cap;
		mask = 2 * cap - 1;
		size_slots_fill(p);
	}
	uint32_t h = size_hash(bytes, mask);
	while (p->size_slot[h])
		h = (h + 1) & (uint32_t)mask;
	p->sizes[p->nsizes] = bytes;
	p->size_slot[h] = ++p->nsizes;
	return p->nsizes - 1;
}

int plan_op_set_bytes(Plan *p, PlanOp *o, int64_t bytes)
{
	if (o->kind == OP_SEND || o->kind == OP_RECV)
		return bytes != p->edges[o->stage].bytes;
	if (!plan_op_sized(o->kind))
		return bytes != 0;
	pthread_mutex_lock(&size_lock);
	int32_t i = size_index(p, bytes);
	pthread_mutex_unlock(&size_lock);
	if (i < 0)
		return -1;
	o->route = -2 - i;
	return 0;
}

int plan_copy_sizes(Plan *e, const Plan *p)
{
	e->sizes = NULL;
	e->size_slot = NULL;
	e->nsizes = e->sizes_cap = 0;
	if (!p->sizes_cap)
		return 0;
	e->sizes = malloc((size_t)p->sizes_cap * sizeof *e->sizes);
	e->size_slot = malloc(2 * (size_t)p->sizes_cap * sizeof *e->size_slot);
	if (!e->sizes || !e->size_slot) {
		free(e->sizes);
		free(e->size_slot);
		e->sizes = NULL;
		e->size_slot = NULL;
		return -1;
	}
	memcpy(e->sizes, p->sizes, (size_t)p->nsizes * sizeof *e->sizes);
	memcpy(e->size_slot, p->size_slot, 2 * (size_t)p->sizes_cap * sizeof *e->size_slot);
	e->nsizes = p->nsizes;
	e->sizes_cap = p->sizes_cap;
	return 0;
}

static int by_value(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int plan_sizes_canon(Plan *p)
{
	int32_t n = p->nsizes, i = 1;
	while (i < n && p->sizes[i - 1] < p->sizes[i])
		i++;
	if (i >= n)
		return 0;
	int64_t *v = malloc((size_t)n * 2 * sizeof *v); // pairs: value, old index
	int32_t *to = malloc((size_t)n * sizeof *to);
	if (!v || !to) {
		free(v);
		free(to);
		return -1;
	}
	for (i = 0; i < n; i++) {
		v[2 * i] = p->sizes[i];
		v[2 * i + 1] = i;
	}
	qsort(v, (size_t)n, 2 * sizeof *v, by_value); // values are unique
	for (i = 0; i < n; i++) {
		to[v[2 * i + 1]] = i;
		p->sizes[i] = v[2 * i];
	}
	size_slots_fill(p);
	int held = !p->ranks ? 0 : p->view ? p->dims[DIM_PP] + 1 : p->world;
	for (int r = 0; r < held; r++) {
		PlanRank *rk = &p->ranks[r];
		for (int64_t k = 0; !rk->borrowed && k < rk->nops; k++)
			if (rk->ops[k].route < -1)
				rk->ops[k].route = -2 - to[-2 - rk->ops[k].route];
	}
	free(v);
	free(to);
	return 0;
}
