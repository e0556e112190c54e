/* The binary plan form's writer and what its reader (binary_read.c) shares with it:
 * the prediction each op is coded against and the op check (which fields each kind uses
 * is the op table's, OpInfo.fields).
 *
 * The file is the plan's text with the op lines left out (every rank `ops=0`: plan_write
 * itself writes it, and the text reader reads it back, so the header, stages, edges,
 * routes and peers are exactly the text form's), then each rank's ops coded as a header
 * byte and the fields that differ from a prediction, then a lanes4 checksum of it all.
 * The prediction is the rank's previous op of the same kind with the next microbatch,
 * and the next comm group (or the same, by a header bit): most ops of a large plan are
 * one byte.  Every plan has exactly one coding (a field is present only when it differs,
 * varints are minimal), so binary -> plan -> binary gives back the same bytes. */
#include "binary_int.h"
#include "io.h"
#include "checksum.h"
#include "prefetch.h"
#include "op_line.h"

#include "par.h"
#include "par_out.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

const char *const plan_format_names[PLAN_FORMAT_COUNT] = {"text", "binary"};

void plan_bin_ctx_init(BinCtx *c)
{
	for (int s = 0; s < BIN_SLOTS; s++)
		c->prev[s] = (PlanOp){.kind = (uint8_t)(s % OP_COUNT), .dir = s >= OP_COUNT,
		                      .mb = -1, .peer = -1, .group = -1, .route = -1};
	for (int s = 0; s < BIN_SLOTS; s++) {
		c->mb[s] = -1;
		c->line[s] = 0;
		c->bytes[s] = 0;
	}
	c->group = -1;
	c->seen = 0;
}

PlanOpLimits plan_op_limits(const Plan *p)
{
	return (PlanOpLimits){p->nstages, p->nedges, p->nroutes, p->microbatches, p->world, 0, 0,
	                      p->edges};
}

/* v within [lo, hi], else -1 with the text reader's words for it. */
static int range(int64_t v, int64_t lo, int64_t hi, const char *what, char *msg, size_t n)
{
	if (v >= lo && v <= hi)
		return 0;
	if (hi < lo) { // as the text reader says it
		snprintf(msg, n, "%s %lld, but the plan declares none of these", what, (long long)v);
		return -1;
	}
	snprintf(msg, n, "%s %lld out of range [%lld, %lld]", what, (long long)v, (long long)lo,
	         (long long)hi);
	return -1;
}

int plan_op_check(const PlanOpLimits *l, int tp, const PlanOp *o, int64_t bytes, char *msg,
                  size_t n)
{
	if (o->kind >= OP_COUNT) {
		snprintf(msg, n, "unknown op kind %d", o->kind);
		return -1;
	}
	OpKind k = plan_op_kind(o);
	const OpInfo *in = &plan_ops[k];
	unsigned u = plan_bin_uses(k);
	int edge = in->at == OP_AT_EDGE, tp_over = in->over == OP_OVER_TP;
	int peers = l->stride ? l->line_ranks : l->world;
	if (range(o->stage, 0, (edge ? l->edges : l->stages) - 1, edge ? "e=" : "stage", msg, n) ||
	    ((u & BF_MB) && range(o->mb, 0, l->mbs - 1, "microbatch", msg, n)) ||
	    ((u & BF_PEER) && range(o->peer, 0, peers - 1, "rank", msg, n)) ||
	    ((u & BF_GROUP) && range(o->group, 0, INT32_MAX, "g=", msg, n)) ||
	    ((u & BF_ROUTE) && range(o->route, 0, l->routes - 1, "r=", msg, n)) ||
	    ((u & BF_BYTES) && range(bytes, plan_op_bytes_min(k), INT64_MAX / 8, "bytes=", msg, n)) ||
	    ((u & BF_DIR) && range(o->dir, 0, DIR_COUNT - 1, "direction", msg, n)))
		return -1;
	if (edge && bytes != l->edge[o->stage].bytes) {
		snprintf(msg, n, "bytes=%lld, but edge %d carries %lld bytes", (long long)bytes,
		         o->stage, (long long)l->edge[o->stage].bytes);
		return -1;
	}
	if (tp_over && tp == 1) {
		snprintf(msg, n, "a %s in a plan with tp=1 (it all-reduces over the tp group)", in->name);
		return -1;
	}
	if (o->part && !tp_over && tp == 1) {
		snprintf(msg, n, "part= in a plan with tp=1 (stages have one part each way)");
		return -1;
	}
	/* What the kind does not use is the empty op's: -1 for numbers, 0 for the rest. */
	if ((!(u & BF_MB) && o->mb != -1) || (!(u & BF_PEER) && o->peer != -1) ||
	    (!(u & BF_GROUP) && o->group != -1) || (!(u & BF_ROUTE) && o->route != -1) ||
	    (!(u & BF_BYTES) && bytes) || (!(u & BF_DIR) && o->dir) ||
	    (!(u & BF_PART) && o->part)) {
		snprintf(msg, n, "a %s op with a field its kind does not have", plan_ops[k].name);
		return -1;
	}
	return 0;
}

/* ---- the writer ---- */

typedef struct {
	FILE *f;
	unsigned char *buf;
	size_t n;
	PlanHash h;
	int err;
	const Plan *p; // the plan written: the sizes its ops imply
} Bw;

#define BW_BUF (1 << 20)
#define BW_ROOM 128 // an op's coding is at most 2 + 8 * 10 bytes

static void bw_flush(Bw *w)
{
	plan_hash_update(&w->h, w->buf, w->n);
	if (w->n && plan_fwrite(w->buf, w->n, w->f))
		w->err = 1;
	w->n = 0;
}

static void bw_bytes(Bw *w, const void *s, size_t n)
{
	const unsigned char *u = s;
	while (n) {
		if (w->n == BW_BUF)
			bw_flush(w);
		size_t k = BW_BUF - w->n < n ? BW_BUF - w->n : n;
		memcpy(w->buf + w->n, u, k);
		w->n += k;
		u += k;
		n -= k;
	}
}

static void bw_le(Bw *w, uint64_t v, int bytes)
{
	unsigned char b[8];
	for (int i = 0; i < bytes; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	bw_bytes(w, b, (size_t)bytes);
}

static inline unsigned char *put_varint(unsigned char *d, uint64_t v)
{
	while (v >= 0x80) {
		*d++ = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	*d++ = (unsigned char)v;
	return d;
}

static inline uint64_t zigzag(int64_t d)
{
	return ((uint64_t)d << 1) ^ (uint64_t)(d >> 63);
}

static inline int64_t diff(int64_t a, int64_t b)
{
	return (int64_t)((uint64_t)a - (uint64_t)b);
}

/* Op o as the text form says it: the fields its kind does not have (which plan_write
 * leaves out) at the empty op's values. */
static PlanOp as_written(const PlanOp *o)
{
	unsigned u = plan_bin_uses(o->kind);
	PlanOp c = *o;
	c.mb = u & BF_MB ? c.mb : -1;
	c.peer = u & BF_PEER ? c.peer : -1;
	c.group = u & BF_GROUP ? c.group : -1;
	c.route = u & BF_ROUTE ? c.route : -1;
	c.dir = u & BF_DIR ? c.dir : 0;
	c.part = u & BF_PART ? c.part : 0;
	return c;
}

/* Codes op op, from source line `line` (none when not positive, as in the text form),
 * against the prediction from c, and makes it the slot's previous op. */
static void put_op(Bw *w, BinCtx *c, const PlanOp *op, int32_t line)
{
	if (w->n + BW_ROOM > BW_BUF)
		bw_flush(w);
	PlanOp canon = as_written(op);
	PlanOp *o = &canon;
	OpKind k = plan_op_kind(o);
	unsigned uses = plan_bin_uses(k), s = plan_bin_slot(k, o->dir);
	int64_t bytes = uses & BF_BYTES ? plan_op_bytes(w->p, op) : 0;
	int same = (uses & BF_GROUP) && o->group == c->group;
	PlanOp q = plan_bin_predict(c, k, o->dir, same);
	PlanOp pr = as_written(&q); // a sized kind's route, its size's name, is not written
	line = line > 0 ? line : 0;
	int64_t d[BIN_FIELDS] = {diff(o->stage, pr.stage), diff(o->mb, pr.mb), diff(o->peer, pr.peer),
	                         diff(o->group, pr.group), diff(o->route, pr.route),
	                         diff(line, c->line[s]), diff(bytes, c->bytes[s]), 0};
	unsigned mask = 0;
	for (int i = 0; i < BIN_FIELDS - 1; i++)
		if (d[i])
			mask |= 1u << i;
	if (o->part != pr.part)
		mask |= 1u << (BIN_FIELDS - 1);
	unsigned char *p = w->buf + w->n;
	*p++ = (unsigned char)(k | (same ? BIN_SAME_GROUP : 0) | (mask ? BIN_FIELDS_FOLLOW : 0) |
	                       (o->dir ? BIN_GRAD : 0));
	if (mask) {
		*p++ = (unsigned char)mask;
		for (int i = 0; i < BIN_FIELDS - 1; i++)
			if (mask & (1u << i))
				p = put_varint(p, zigzag(d[i]));
		if (mask & (1u << (BIN_FIELDS - 1)))
			p = put_varint(p, o->part);
	}
	w->n = (size_t)(p - w->buf);
	if (plan_op_sized(k))
		o->route = op->route; // so that the next op of its size is predicted whole
	plan_bin_commit(c, o, line, bytes);
}

/* Rank rk's ops.  Most ops of a large plan are their prediction, a header byte alone: such
 * an op is found by comparing it field by field with the slot's previous op, but for the
 * microbatch and group, which BinCtx keeps apart and which are compared with the
 * predicted ones (plan_bin_next_mb and _next_group, as plan_bin_predict takes them: no
 * copy of the op); the comparison also
 * tells that its unused fields are the empty op's, as the previous op's are.  Anything
 * else takes put_op.  (kind, dir, part and stage are one 8-byte word of PlanOp.) */
__attribute__((always_inline)) static inline void put_rank_ops(Bw *w, const PlanRank *rk)
{
	_Static_assert(offsetof(PlanOp, stage) == 4 && sizeof(PlanOp) == 24, "PlanOp's first word");
	BinCtx c;
	plan_bin_ctx_init(&c);
	const PlanOp *ops = rk->ops; // rk's fields, and w's below, kept here: a byte stored may
	const int32_t *lines = rk->lines; // be any of them to the compiler
	const Plan *p = w->p;
	int by_stage = !lines && p->lines_by_stage; // plan_op_line, the test hoisted
	unsigned char *out = w->buf + w->n, *end = w->buf + BW_BUF;
	for (int64_t i = 0, n = rk->nops; i < n; i++) {
		const PlanOp *o = &ops[i];
		plan_prefetch_one(ops, i, n);
		int32_t line = lines ? (lines[i] > 0 ? lines[i] : 0)
		                     : by_stage ? plan_stage_line(p, o) : 0;
		unsigned k = o->kind, dir = o->dir;
		unsigned uses = k < OP_COUNT ? plan_bin_uses(k) : 0;
		if (k < OP_COUNT && dir <= ((uses & BF_DIR) != 0)) {
			unsigned s = plan_bin_slot(k, dir);
			const PlanOp *pv = &c.prev[s];
			int same = (uses & BF_GROUP) && o->group == c.group;
			int32_t mb = plan_bin_next_mb(&c, k, s), g = plan_bin_next_group(&c, k, same);
			uint64_t a, b;
			memcpy(&a, o, 8);
			memcpy(&b, pv, 8);
			if (a == b && line == c.line[s] && o->mb == mb && o->group == g &&
			    o->peer == pv->peer && o->route == pv->route) { // so bytes= too
				if (out == end) {
					w->n = BW_BUF;
					bw_flush(w);
					out = w->buf;
				}
				*out++ = (unsigned char)(k | (same ? BIN_SAME_GROUP : 0) | (dir ? BIN_GRAD : 0));
				c.mb[s] = mb;
				c.group = uses & BF_GROUP ? g : c.group;
				continue;
			}
		}
		w->n = (size_t)(out - w->buf);
		put_op(w, &c, o, line);
		out = w->buf + w->n;
	}
	w->n = (size_t)(out - w->buf);
}

/* ---- the ranks on worker threads (plan_threads > 1) ---- */

/* A piece is whole ranks, this many ops or more (one rank may be more); about a byte an
 * op in a large plan.  A worker holds BIN_BATCH pieces at a time, the writer two batches. */
#define BIN_PIECE_OPS (1 << 16)
#define BIN_BATCH 4

typedef struct {
	const Plan *p;
	Bw *w;        // the caller's
	PlanPos *cut; // the pieces
} BinPar;

/* A piece's slot: its Bw, then the Bw's buffer. */
typedef struct {
	Bw w;
	unsigned char buf[BW_BUF];
} BinSlot;

/* Each rank's count and ops, from rank a up to b. */
static void put_ranks(Bw *w, const Plan *p, int a, int b)
{
	for (int r = a; r < b; r++) {
		const PlanRank *rk = &p->ranks[r];
		unsigned char v[10];
		bw_bytes(w, v, (size_t)(put_varint(v, (uint64_t)rk->nops) - v));
		put_rank_ops(w, rk);
	}
}

/* Piece i into the slot's buffer, to spill when full (hashed there too, uselessly: the
 * caller hashes every byte in its place). */
static int bin_piece(void *arg, int64_t i, int wi, void *slot, FILE *spill)
{
	(void)wi;
	BinPar *bp = arg;
	BinSlot *s = slot;
	s->w = (Bw){.f = spill, .buf = s->buf, .p = bp->p};
	plan_hash_init(&s->w.h, PLAN_SUM_LANES4);
	put_ranks(&s->w, bp->p, bp->cut[i].rank, bp->cut[i + 1].rank);
	return s->w.err;
}

static void bin_emit(void *arg, int64_t i, void *slot, const char *spill, size_t n)
{
	BinPar *bp = arg;
	const BinSlot *s = slot;
	if (!s) {
		put_ranks(bp->w, bp->p, bp->cut[i].rank, bp->cut[i + 1].rank);
		return;
	}
	bw_bytes(bp->w, spill, n);
	bw_bytes(bp->w, s->buf, s->w.n);
}

/* Every rank's ops, coded by the workers and written in order by the calling thread;
 * 0 when that cannot start (out of memory, or too few ops to share). */
static int put_ranks_par(Bw *w, const Plan *p)
{
	BinPar bp = {.p = p, .w = w};
	return par_write(p, BIN_PIECE_OPS, 0, &bp.cut, BIN_BATCH, sizeof(BinSlot), bin_piece,
	                 bin_emit, &bp);
}

/* The text part: p's text form with every op list left out. */
char *plan_bin_text(const Plan *p, size_t *len)
{
	Plan c = *p;
	c.ranks = malloc((size_t)(p->world ? p->world : 1) * sizeof *c.ranks);
	if (!c.ranks)
		return NULL;
	for (int r = 0; r < p->world; r++) {
		c.ranks[r] = p->ranks[r];
		c.ranks[r].nops = 0;
	}
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	int bad = !f || plan_write_summed(&c, f, PLAN_BIN_TEXT_SUM);
	if (f && fclose(f))
		bad = 1;
	free(c.ranks);
	if (bad) {
		free(buf);
		return NULL;
	}
	return buf;
}

int plan_write_binary(const Plan *p, FILE *f)
{
	if (p->view)
		return -1; // a one-rank view is not a plan to write
	size_t tlen;
	char *text = plan_bin_text(p, &tlen);
	Bw w = {.f = f, .buf = malloc(BW_BUF), .p = p};
	if (!text || !w.buf) {
		free(text);
		free(w.buf);
		return -1;
	}
	plan_hash_init(&w.h, PLAN_SUM_LANES4);
	bw_bytes(&w, PLAN_BIN_MAGIC, PLAN_BIN_MAGIC_LEN);
	bw_le(&w, PLAN_BIN_VERSION, 4);
	bw_le(&w, tlen, 8);
	bw_bytes(&w, text, tlen);
	free(text);
	/* One thread: put_ranks' loop, written out here with put_rank_ops inlined (calling
	 * put_ranks instead took 88 M instructions, not 76 M, for pp=128 m=1024's 0.8 M ops). */
	if (plan_threads < 2 || !put_ranks_par(&w, p))
		for (int r = 0; r < p->world; r++) {
			const PlanRank *rk = &p->ranks[r];
			unsigned char v[10];
			bw_bytes(&w, v, (size_t)(put_varint(v, (uint64_t)rk->nops) - v));
			put_rank_ops(&w, rk);
		}
	bw_flush(&w);
	bw_le(&w, plan_hash_final(&w.h), 8);
	if (w.n && fwrite(w.buf, 1, w.n, f) != w.n) // the checksum itself is not hashed
		w.err = 1;
	free(w.buf);
	if (fflush(f) != 0)
		w.err = 1;
	return w.err ? -1 : 0;
}

int plan_write_as(const Plan *p, FILE *f, int fmt, int expand)
{
	PlanWriteFn *write = fmt == PLAN_FORMAT_BINARY ? plan_write_binary : plan_write;
	return expand ? plan_write_expanded(p, f, write) : write(p, f);
}
