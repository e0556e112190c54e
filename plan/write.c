/* The plan writer.  The text form is documented in docs/plan-format.md; the reader in
 * read.c accepts exactly what this writes, and write -> read -> write is byte-identical.
 * Op lines dominate large plans, so they are formatted by hand into a buffer rather
 * than through printf, and a line like the last of its shape is copied from that one's
 * text (LineTpl).  Into a regular file the text is formatted once (the header
 * line, fixed in length, goes into its place last); into a pipe twice. */
#include "plan.h"
#include "io.h"
#include "checksum.h"
#include "prefetch.h"
#include "line.h"
#include "link.h"
#include "op_line.h"

#include "par.h"
#include "par_out.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Most op lines differ from the last line of their shape (a compute kind; SEND or RECV
 * and a direction) in the microbatch and, for SEND and RECV, the group alone: `SEND act
 * e=3 m=17 to=4 bytes=64 g=9 r=2 @9`, then `... m=18 ... g=11 ...`.  put_op keeps each
 * shape's last line as its text around those numbers, the template: a line whose other
 * fields are the template's is the template's text with the two numbers put in, which
 * are the bytes the fields would give (the reader takes lines back the same way,
 * read_op.c).  key: the op the template was made from (its mb and group are not
 * compared); ok 0: none yet. */
enum { TPL_P2P = 4, TPL_SHAPES = 8, TPL_A = 32, TPL_B = 48, TPL_C = 32 };
typedef struct {
	PlanOp key;
	int32_t line;
	uint8_t ok, na, nb, nc; // the text before the microbatch, between it and the group
	char a[TPL_A], b[TPL_B], c[TPL_C]; // (p2p), and after the last number to the newline
} LineTpl;

typedef struct {
	FILE *f;
	char buf[1 << 20];
	size_t n;
	size_t hashed; // buf[0, hashed) is folded into h already
	int err;
	int hashing;   // fold the text into h
	int emit;      // write the text to f (not in the two-pass writer's first pass)
	PlanHash h;    // the checksum of everything after the header line
	int mul;       // rank numbers in memory times mul are world ranks (a line plan's stride)
	const Plan *p; // the plan written: the sizes its ops imply (plan_op_bytes)
	char name[OP_COUNT][16]; // each op kind's name, copied whole by put_op
	size_t name_len[OP_COUNT];
	uint8_t shape[OP_COUNT]; // each kind's template slot (tpl_shape)
	LineTpl tpl[TPL_SHAPES]; // the last op line of each shape, as put_op copies it
} Out;

static void hash(Out *o, const char *s, size_t n)
{
	plan_hash_update(&o->h, s, n);
}

static void flush(Out *o)
{
	if (o->hashing)
		hash(o, o->buf + o->hashed, o->n - o->hashed);
	o->hashed = 0;
	if (o->emit && o->n && plan_fwrite(o->buf, o->n, o->f))
		o->err = 1;
	o->n = 0;
}

static void put(Out *o, const char *s)
{
	size_t len = strlen(s);
	if (o->n + len > sizeof o->buf)
		flush(o);
	if (len > sizeof o->buf) {
		if (o->hashing)
			hash(o, s, len);
		if (o->emit && plan_fwrite(s, len, o->f))
			o->err = 1;
		return;
	}
	memcpy(o->buf + o->n, s, len);
	o->n += len;
}

static const char digit_pairs[201] = "00010203040506070809101112131415161718192021222324"
                                     "25262728293031323334353637383940414243444546474849"
                                     "50515253545556575859606162636465666768697071727374"
                                     "75767778798081828384858687888990919293949596979899";

/* Op lines are most of a large plan, so they are formatted through a local cursor d
 * (stores through a char pointer into o->buf could alias o->n, which would then be
 * reloaded after every byte) with one bounds check per line: put_op reserves 256
 * bytes, more than any op line takes.  Numbers are written two digits at a time from
 * digit_pairs, those below 10^8 (all an op line holds in practice) as at most two
 * halves of four digits, with no division loop. */

/* v < 10000, without leading zeros; returns the end. */
__attribute__((always_inline)) static inline char *put_u4(char *d, uint32_t v)
{
	if (v < 100) {
		if (v < 10) {
			*d = (char)('0' + v);
			return d + 1;
		}
		memcpy(d, digit_pairs + 2 * v, 2);
		return d + 2;
	}
	uint32_t hi = v / 100, lo = v - hi * 100;
	if (hi < 10) {
		*d++ = (char)('0' + hi);
	} else {
		memcpy(d, digit_pairs + 2 * hi, 2);
		d += 2;
	}
	memcpy(d, digit_pairs + 2 * lo, 2);
	return d + 2;
}

/* v < 10000 as exactly four digits. */
__attribute__((always_inline)) static inline char *put_4(char *d, uint32_t v)
{
	uint32_t hi = v / 100, lo = v - hi * 100;
	memcpy(d, digit_pairs + 2 * hi, 2);
	memcpy(d + 2, digit_pairs + 2 * lo, 2);
	return d + 4;
}

/* Any v: a sign, then the digits, two per division. */
static char *put_wide(char *d, int64_t v)
{
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
	if (v < 0)
		*d++ = '-';
	int len = 1;
	for (uint64_t t = u; t >= 10; t /= 10)
		len++;
	char *e = d + len;
	while (u >= 100) {
		unsigned k = (unsigned)(u % 100) * 2;
		u /= 100;
		*--e = digit_pairs[k + 1];
		*--e = digit_pairs[k];
	}
	if (u >= 10) {
		*--e = digit_pairs[u * 2 + 1];
		*--e = digit_pairs[u * 2];
	} else {
		*--e = (char)('0' + u);
	}
	return d + len;
}

__attribute__((always_inline)) static inline char *put_num(char *d, int64_t v)
{
	if ((uint64_t)v < 10000)
		return put_u4(d, (uint32_t)v);
	if (v > 0 && v < 100000000) {
		uint32_t hi = (uint32_t)v / 10000;
		return put_4(put_u4(d, hi), (uint32_t)v - hi * 10000);
	}
	return put_wide(d, v);
}

/* Appends a literal at d; sizeof - 1 is its length, known at compile time. */
#define LIT(d, s) (memcpy(d, s, sizeof(s) - 1), (d) += sizeof(s) - 1)

static void putf(Out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(Out *o, const char *fmt, ...)
{
	char tmp[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	put(o, tmp);
}

/* The fields after a SEND's or RECV's name; m[0, 4) set to where the microbatch's
 * digits begin and end, and the group's. */
static inline char *put_p2p(char *d, const Plan *p, const PlanOp *op, int mul, char **m)
{
	if (op->dir == DIR_ACT)
		LIT(d, " act e=");
	else
		LIT(d, " grad e=");
	d = put_num(d, op->stage);
	LIT(d, " m=");
	m[0] = d;
	d = m[1] = put_num(d, op->mb);
	if (plan_ops[op->kind].sends)
		LIT(d, " to=");
	else
		LIT(d, " from=");
	d = put_num(d, (int64_t)op->peer * mul);
	LIT(d, " bytes=");
	d = put_num(d, p->edges[op->stage].bytes);
	LIT(d, " g=");
	m[2] = d;
	d = m[3] = put_num(d, op->group);
	LIT(d, " r=");
	return put_num(d, op->route);
}

/* The fields after the name of an op that neither computes nor is p2p: those its kind
 * has (OpInfo.fields), in the order op.h gives. */
static char *put_other(char *d, const Plan *p, const PlanOp *op, int mul)
{
	unsigned u = plan_ops[op->kind].fields;
	if ((u & OP_FIELD_DIR) && op->dir == DIR_ACT)
		LIT(d, " act");
	else if (u & OP_FIELD_DIR)
		LIT(d, " grad");
	LIT(d, " s=");
	d = put_num(d, op->stage);
	if (u & OP_FIELD_MB) {
		LIT(d, " m=");
		d = put_num(d, op->mb);
	}
	if (u & OP_FIELD_PEER) { // not p2p: with=
		LIT(d, " with=");
		d = put_num(d, (int64_t)op->peer * mul);
	}
	if (u & OP_FIELD_PART) {
		LIT(d, " part=");
		d = put_num(d, op->part);
	}
	if (u & OP_FIELD_BYTES) {
		LIT(d, " bytes=");
		d = put_num(d, plan_op_bytes(p, op));
	}
	if (u & OP_FIELD_GROUP) {
		LIT(d, " g=");
		d = put_num(d, op->group);
	}
	return d;
}

/* The template slot of kind k's shape (LineTpl), TPL_SHAPES for kinds without one: a
 * compute kind's is the kind (F, B, W, BW: 0 to 3); a p2p kind's is TPL_P2P and on, two
 * each, the second for the gradient. */
static unsigned tpl_shape(OpKind k)
{
	if (plan_op_is_p2p(k))
		return TPL_P2P + 2 * !plan_ops[k].sends;
	return plan_op_is_compute(k) ? (unsigned)k : TPL_SHAPES;
}

/* The line of op by t, its shape's template, when its fields other than the microbatch
 * and the group are the template's; else NULL.  put_op's reserve covers the whole
 * arrays copied (their fixed size makes each copy a few wide moves). */
static inline char *by_tpl(const LineTpl *t, char *d, const PlanOp *op, int32_t line, int p2p)
{
	const PlanOp *k = &t->key;
	if (!t->ok || t->line != line || op->part != k->part || op->stage != k->stage ||
	    op->peer != k->peer || op->route != k->route || op->dir != k->dir) // kind: the shape's
		return NULL;
	memcpy(d, t->a, TPL_A);
	d = put_num(d + t->na, op->mb);
	if (p2p) {
		memcpy(d, t->b, TPL_B);
		d = put_num(d + t->nb, op->group);
	}
	memcpy(d, t->c, TPL_C);
	return d + t->nc;
}

/* The line at s, which put_fields just put there (ending at e), becomes the template
 * of its shape: m[0, 2) the microbatch's digits, m[2, 4) the group's (p2p). */
static void tpl_keep(LineTpl *t, const char *s, const char *e, const PlanOp *op, int32_t line,
                     char *const *m, int p2p)
{
	const char *last = p2p ? m[3] : m[1];
	size_t na = (size_t)(m[0] - s), nb = p2p ? (size_t)(m[2] - m[1]) : 0,
	       nc = (size_t)(e - last);
	t->ok = na <= TPL_A && nb <= TPL_B && nc <= TPL_C; // else the op's fields are huge
	if (!t->ok)
		return;
	t->key = *op;
	t->line = line;
	t->na = (uint8_t)na;
	t->nb = (uint8_t)nb;
	t->nc = (uint8_t)nc;
	memcpy(t->a, s, na);
	memcpy(t->b, m[1], nb);
	memcpy(t->c, last, nc);
}

/* Op line of op at d, field by field; m[0, 4) as put_p2p sets it (compute ops: the
 * microbatch's in m[0, 2)).  Returns the end, past the newline. */
static char *put_fields(const Out *o, char *d, const PlanOp *op, int32_t line, char **m,
                        int p2p)
{
	OpKind k = plan_op_kind(op);
	if (k < OP_COUNT && o->name_len[k] < sizeof o->name[k]) { // the reader made sure
		memcpy(d, o->name[k], sizeof o->name[k]);             // kind is valid
		d += o->name_len[k];
	} else {
		for (const char *c = plan_ops[op->kind].name; *c; c++)
			*d++ = *c;
	}
	if (p2p) {
		d = put_p2p(d, o->p, op, o->mul, m);
	} else if (k < OP_COUNT && plan_op_is_compute(k)) {
		*d++ = ' ';
		d = put_num(d, op->stage);
		*d++ = ' ';
		m[0] = d;
		d = m[1] = put_num(d, op->mb);
		if (op->part) {
			LIT(d, " part=");
			d = put_num(d, op->part);
		}
		if (op->dir) // plan_op_paired
			LIT(d, " pair");
	} else {
		d = put_other(d, o->p, op, o->mul);
	}
	if (line > 0) {
		LIT(d, " @");
		d = put_num(d, line);
	}
	*d++ = '\n';
	return d;
}

static void put_op(Out *o, const PlanOp *op, int32_t line)
{
	if (o->n + 256 > sizeof o->buf)
		flush(o);
	char *d = o->buf + o->n, *e, *m[4];
	OpKind k = plan_op_kind(op);
	unsigned sh = k < OP_COUNT ? o->shape[k] : TPL_SHAPES;
	int p2p = sh >= TPL_P2P && sh < TPL_SHAPES;
	sh += p2p && op->dir != DIR_ACT;
	if (sh >= TPL_SHAPES) {
		e = put_fields(o, d, op, line, m, p2p);
	} else if (!(e = by_tpl(&o->tpl[sh], d, op, line, p2p))) {
		e = put_fields(o, d, op, line, m, p2p);
		tpl_keep(&o->tpl[sh], d, e, op, line, m, p2p);
	}
	o->n = (size_t)(e - o->buf);
	if (o->hashing && o->n - o->hashed >= (1 << 14)) { // while the text is in cache
		hash(o, o->buf + o->hashed, o->n - o->hashed);
		o->hashed = o->n;
	}
}

/* v in the fewest significant digits that read back as v: 0.1, not 0.10000000000000001. */
static void put_real(Out *o, double v)
{
	char b[32];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(b, sizeof b, "%.*g", prec, v);
		if (strtod(b, NULL) == v)
			break;
	}
	put(o, b);
}

/* `layer KIND IN OUT`, then the keys that are set, in the key table's order: numbers
 * as key=N (heads, kv_heads), flags as their names, an attention's dropout=P when P is
 * not 0; hidden=, span= and a dropout layer's p=P last.  A layer without keys (every
 * pre-transformer kind) is the three words it always was. */
static void put_layer(Out *o, const PlanLayer *l)
{
	const LayerInfo *li = &plan_layers[l->kind];
	putf(o, "layer %s %d %d", li->name, l->in, l->out);
	if (l->heads)
		putf(o, " heads=%d kv_heads=%d", l->heads, l->kv_heads);
	for (int k = 0; k < LAYER_KEY_COUNT; k++)
		if (!plan_layer_keys[k].number && (l->flags & LAYER_FLAG(k)))
			putf(o, " %s", plan_layer_keys[k].name);
	if (l->drop && (li->keys & LAYER_FLAG(LAYER_KEY_DROPOUT))) {
		putf(o, " %s=", plan_layer_keys[LAYER_KEY_DROPOUT].name);
		put_real(o, l->drop);
	}
	if (l->hidden)
		putf(o, " hidden=%d", l->hidden);
	if (l->span)
		putf(o, " span=%d", l->span);
	if (li->arg == LAYER_ARG_PROB) {
		put(o, " p=");
		put_real(o, l->drop);
	}
	put(o, "\n");
}

static void put_optim(Out *o, const PlanOptim *op)
{
	putf(o, "optimizer %s lr=%.15g", plan_optim_names[op->kind], op->lr);
	if (op->kind == OPTIM_ADAMW)
		putf(o, " beta1=%.15g beta2=%.15g eps=%.15g weight_decay=%.15g", op->beta1, op->beta2,
		     op->eps, op->weight_decay);
	if (op->kind == OPTIM_MOMENTUM)
		putf(o, " momentum=%.15g", op->momentum);
	put(o, op->distributed ? " distributed\n" : "\n");
}

/* Rank r's own lines: `rank`, then its peers. */
static void put_rank_head(Out *o, const Plan *p, int r)
{
	const PlanRank *rk = &p->ranks[r];
	putf(o, "rank %d pp=%d dp=%d tp=%d device=%d peers=%d ops=%" PRId64 "\n", r * o->mul,
	     rk->coord[DIM_PP], rk->coord[DIM_DP], rk->coord[DIM_TP], rk->device, rk->npeers,
	     rk->nops);
	for (int i = 0; i < rk->npeers; i++) {
		const PlanPeer *pe = &rk->peers[i];
		putf(o, "peer s=%d %s e=%d s=%d rank=%d %s\n", pe->stage, pe->in ? "in" : "out",
		     pe->edge, pe->peer_stage, pe->peer_rank * o->mul,
		     plan_peer_names[pe->local < PEER_COUNT ? pe->local : 0]);
	}
}

/* ---- the ranks on worker threads (plan_threads > 1) ---- */

/* A piece takes at most this many ops' lines: about 700 KB of text, which fits its
 * slot's Out (more spills to memory); a worker holds WRITE_BATCH pieces at a time, and
 * the writer two batches. */
#define WRITE_PIECE_OPS (1 << 14)
#define WRITE_BATCH 4

typedef struct {
	const Plan *p;
	Out *o;       // the caller's
	PlanPos *cut; // the pieces
} TextPar;

/* The lines of the ranks from position a up to b. */
static void put_ranks(Out *o, const Plan *p, PlanPos a, PlanPos b)
{
	for (int i = 0; i < TPL_SHAPES; i++)
		o->tpl[i].ok = 0;
	for (int r = a.rank; r < b.rank || (r == b.rank && b.op > 0); r++) {
		const PlanRank *rk = &p->ranks[r];
		int64_t i = r == a.rank ? a.op : 0, end = r == b.rank ? b.op : rk->nops;
		if (i == 0)
			put_rank_head(o, p, r);
		for (; i < end; i++) {
			plan_prefetch_one(rk->ops, i, end);
			put_op(o, &rk->ops[i], plan_op_line(p, rk, i));
		}
	}
}

/* Piece i into the slot's Out, which writes the text only (no hash), to spill when full. */
static int text_piece(void *arg, int64_t i, int w, void *slot, FILE *spill)
{
	(void)w;
	TextPar *tp = arg;
	Out *o = slot;
	o->f = spill;
	o->n = o->hashed = 0;
	o->err = 0;
	o->hashing = 0;
	o->emit = 1;
	o->mul = tp->o->mul;
	o->p = tp->o->p;
	memcpy(o->name, tp->o->name, sizeof o->name);
	memcpy(o->name_len, tp->o->name_len, sizeof o->name_len);
	memcpy(o->shape, tp->o->shape, sizeof o->shape);
	put_ranks(o, tp->p, tp->cut[i], tp->cut[i + 1]);
	return o->err;
}

/* s[0, n) after what o holds, hashed and written as flush would. */
static void put_block(Out *o, const char *s, size_t n)
{
	if (!n)
		return;
	flush(o);
	if (o->hashing)
		hash(o, s, n);
	if (o->emit && plan_fwrite(s, n, o->f))
		o->err = 1;
}

static void text_emit(void *arg, int64_t i, void *slot, const char *spill, size_t n)
{
	TextPar *tp = arg;
	if (!slot) {
		put_ranks(tp->o, tp->p, tp->cut[i], tp->cut[i + 1]);
		return;
	}
	const Out *w = slot;
	put_block(tp->o, spill, n);
	put_block(tp->o, w->buf, w->n);
}

/* Every rank's lines, formatted by the workers and written in order by the calling
 * thread; 0 when that cannot start (out of memory, or too few ops to share). */
static int put_ranks_par(Out *o, const Plan *p)
{
	TextPar tp = {.p = p, .o = o};
	return par_write(p, WRITE_PIECE_OPS, 1, &tp.cut, WRITE_BATCH, sizeof(Out), text_piece,
	                 text_emit, &tp);
}

static void write_body(Out *o, const Plan *p)
{
	putf(o, "pipeline %s\n", p->name);
	putf(o, "source %s\n", p->source ? p->source : "-");
	putf(o, "schedule %s%s\n", p->schedule, p->tuned_overlap ? " tune=overlap" : "");
	put(o, "mesh");
	for (int i = 0; i < DIM_COUNT; i++)
		putf(o, " %s=%d", plan_dim_names[p->dim_order[i]], p->dims[p->dim_order[i]]);
	if (p->sp)
		put(o, " sp");
	putf(o, "\nworld %d\n", p->line ? plan_mesh_world(p) : p->world);
	if (p->line)
		putf(o, "lines %d devices_per_node=%d\n", plan_mesh_world(p) / p->dims[DIM_PP],
		     p->dev_per_node);
	putf(o, "microbatches %d\n", p->microbatches);
	if (p->seq > 0 && p->vocab_real)
		putf(o, "input tokens %dx%d vocab=%d padded=%d\n", p->rows / p->seq, p->seq,
		     p->vocab_real, p->vocab);
	else if (p->seq > 0)
		putf(o, "input tokens %dx%d vocab=%d\n", p->rows / p->seq, p->seq, p->vocab);
	else
		putf(o, "input %dx%d\n", p->rows, p->cols);
	if (p->link_ideal)
		put(o, "link ideal\n");
	else
		putf(o, "link latency_ns=%" PRId64 " bandwidth=%.17g\n", p->latency_ns, p->bandwidth);
	if (p->per_node > 0 && p->node_bandwidth > 0) { // a read plan may have none: no node
		putf(o, "node per_node=%d latency_ns=%" PRId64 " bandwidth=%.17g", p->per_node,
		     p->node_latency_ns, p->node_bandwidth);
		if (p->coll_algo != PLAN_COLL_AUTO && p->coll_algo < PLAN_COLL_COUNT)
			putf(o, " collective=%s", plan_coll_names[p->coll_algo]);
		put(o, "\n");
	}
	if (p->prec != PREC_F32)
		putf(o, "precision %s\n", plan_prec(p->prec)->name);
	if (p->optim.given)
		put_optim(o, &p->optim);
	if (p->mem_cap)
		putf(o, "memory cap=%" PRId64 "\n", p->mem_cap);
	if (p->peak_flops > 0)
		putf(o, "device peak=%.17g\n", p->peak_flops);

	putf(o, "stages %d\n", p->nstages);
	for (int s = 0; s < p->nstages; s++) {
		const PlanStage *st = &p->stages[s];
		putf(o,
		     "stage %d %s pp=%d in=%d out=%d f=%" PRId64 " b=%" PRId64 " w=%" PRId64
		     " params=%" PRId64 " save_fb=%" PRId64 " save_fw=%" PRId64 " save_bw=%" PRId64,
		     s, st->name, st->pp, st->in, st->out, st->cost[0], st->cost[1], st->cost[2],
		     st->params, st->save_fb, st->save_fw, st->save_bw);
		if (st->optim)
			putf(o, " o=%" PRId64, st->optim);
		if (st->recompute)
			putf(o, " recompute%s save_re=%" PRId64,
			     st->recompute == PLAN_RECOMPUTE_SELECTIVE ? " selective" : "", st->save_re);
		if (st->recompute_res)
			putf(o, " residuals=%d", st->recompute_res);
		putf(o, " layers=%d @%d:%d\n", st->nlayers, st->loc.line, st->loc.col);
		for (int l = 0; l < st->nlayers; l++)
			put_layer(o, &st->layers[l]);
	}

	putf(o, "edges %d\n", p->nedges);
	for (int e = 0; e < p->nedges; e++) {
		const PlanEdge *ed = &p->edges[e];
		putf(o, "edge %d %d->%d %s bytes=%" PRId64 " @%d:%d\n", e, ed->src, ed->dst,
		     ed->skip ? "skip" : "chain", ed->bytes, ed->loc.line, ed->loc.col);
	}

	putf(o, "routes %d\n", p->nroutes);
	for (int i = 0; i < p->nroutes; i++) {
		const PlanRoute *rt = &p->routes[i];
		putf(o, "route %d e=%d %s %d.d%d->%d.d%d", i, rt->edge, plan_dir_names[rt->dir],
		     rt->src_rank * o->mul, rt->src_dev, rt->dst_rank * o->mul, rt->dst_dev);
		if (rt->dir == DIR_GRAD)
			putf(o, " inverse=%d", rt->inverse_of);
		if (rt->loc.line)
			putf(o, " @%d:%d", rt->loc.line, rt->loc.col);
		put(o, "\n");
	}

	if (plan_threads < 2 || !put_ranks_par(o, p))
		put_ranks(o, p, (PlanPos){0, 0}, (PlanPos){p->world, 0});
	put(o, "end\n");
	flush(o);
}

/* A regular file not opened for appending can take the header after the body: the
 * text is formatted once, hashed as it goes, and the fixed-length header line is
 * written into its place at the end.  Sets *at to where the header goes. */
static int seekable(FILE *f, off_t *at)
{
	int fd = fileno(f);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (fl & O_APPEND) || fflush(f) != 0)
		return 0;
	*at = ftello(f);
	return *at >= 0;
}

static int header(char *s, size_t n, const Plan *p, int sum, uint64_t h)
{
	return snprintf(s, n, "%s %d %s=%016" PRIx64 "\n", PLAN_FORMAT,
	                p->line ? PLAN_VERSION : PLAN_VERSION_EXPANDED, plan_sums[sum].name, h);
}

/* One pass into a regular file (the header written last, in its place); two passes
 * otherwise, the first only hashing the text, so the header line can carry the
 * checksum of what follows while the plan still streams to a pipe. */
int plan_write(const Plan *p, FILE *f)
{
	return plan_write_summed(p, f, PLAN_SUM_WRITTEN);
}

int plan_write_summed(const Plan *p, FILE *f, int sum)
{
	Out *o = malloc(sizeof *o); // a 1 MiB buffer: big writes, and too big for a stack
	if (!o)
		return -1;
	o->f = f;
	o->n = o->hashed = 0;
	o->err = 0;
	plan_hash_init(&o->h, sum);
	o->mul = p->line ? plan_pp_stride(p) : 1;
	o->p = p;
	memset(o->name, 0, sizeof o->name);
	for (int k = 0; k < OP_COUNT; k++) {
		o->name_len[k] = strlen(plan_ops[k].name); // put_op spells one of 16 or more itself
		memcpy(o->name[k], plan_ops[k].name, o->name_len[k] < 16 ? o->name_len[k] : 16);
		o->shape[k] = (uint8_t)tpl_shape((OpKind)k);
	}
	char head[128];
	int hl = header(head, sizeof head, p, sum, 0); // the same length whatever the hash
	off_t at;
	if (seekable(f, &at)) {
		if (fwrite(head, 1, (size_t)hl, f) != (size_t)hl)
			o->err = 1;
		o->hashing = o->emit = 1;
		write_body(o, p);
		header(head, sizeof head, p, sum, plan_hash_final(&o->h));
		if (fflush(f) != 0 || pwrite(fileno(f), head, (size_t)hl, at) != hl)
			o->err = 1;
	} else {
		o->hashing = 1;
		o->emit = 0;
		write_body(o, p);
		o->hashing = 0;
		o->emit = 1;
		header(head, sizeof head, p, sum, plan_hash_final(&o->h));
		put(o, head);
		write_body(o, p);
	}
	if (fflush(f) != 0)
		o->err = 1;
	int err = o->err;
	free(o);
	return err ? -1 : 0;
}

int plan_write_expanded(const Plan *p, FILE *f, PlanWriteFn *write)
{
	if (!p->line)
		return write(p, f);
	size_t failed;
	Plan *e = plan_expand(p, &failed);
	if (!e)
		return -1;
	int rc = write(e, f);
	plan_free(e);
	return rc;
}
