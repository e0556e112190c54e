/* The binary plan reader (docs/plan-format.md, "Binary form"), the inverse of
 * plan_write_binary.  The text part goes through the text reader, so what it checks
 * there is checked here; every op decoded passes plan_op_check, the text reader's
 * ranges; the checksum at the end covers every byte before it.  Errors name the file's
 * byte offset (PlanError.at_byte).  Counts are bounded by the bytes left in the file
 * (or, from a pipe, arrays grow as data arrives), so a corrupted count cannot make us
 * allocate much.  The file is read in blocks and hashed as they are used up. */
#include "binary_int.h"
#include "io.h"
#include "par.h"
#include "sysmem.h"
#include "checksum.h"
#include "block.h"
#include "oom.h"
#include "sizes.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BR_BLOCK (1 << 20)

typedef struct {
	FILE *f;
	unsigned char *blk;
	size_t len, pos, hashed; // blk[0, len) read; [0, pos) used; [0, hashed) hashed
	int64_t base;            // file offset of blk[0]
	int eof;
	int64_t size;            // the file's size when it is a regular file, else -1
	PlanHash h;
	PlanError *err;
	int failed;
	const char *name;
	unsigned keep; // PLAN_KEEP_*
	uint16_t head[256]; // head_table
} Br;

static int fail(Br *r, int64_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(Br *r, int64_t at, const char *fmt, ...)
{
	if (r->failed)
		return -1;
	r->failed = 1;
	r->err->line = at;
	r->err->at_byte = 1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->err->msg, sizeof r->err->msg, fmt, ap);
	va_end(ap);
	return -1;
}

static int64_t here(const Br *r)
{
	return r->base + (int64_t)r->pos;
}

/* Hashes what is used, keeps the rest and reads until need bytes are there or the file
 * ends.  Returns whether they are. */
static int more(Br *r, size_t need)
{
	plan_hash_update(&r->h, r->blk + r->hashed, r->pos - r->hashed);
	size_t rest = r->len - r->pos;
	memmove(r->blk, r->blk + r->pos, rest);
	r->base += (int64_t)r->pos;
	r->len = rest;
	r->pos = r->hashed = 0;
	while (r->len < need && !r->eof) {
		size_t k = fread(r->blk + r->len, 1, BR_BLOCK - r->len, r->f);
		if (k == 0 && ferror(r->f)) // a failed read is not the end of the file
			fail(r, r->base + (int64_t)r->len, "cannot read: %s", plan_strerror(errno));
		if (k == 0)
			r->eof = 1;
		r->len += k;
	}
	return r->len >= need;
}

static int have(Br *r, size_t n)
{
	return r->len - r->pos >= n || more(r, n);
}

static uint64_t le(const unsigned char *u, int bytes)
{
	uint64_t v = 0;
	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | u[i];
	return v;
}

/* A minimal LEB128 varint from [*pp, e): 0, or -1 when the bytes end first, -2 when it
 * is longer than it needs to be or does not fit 64 bits. */
static inline int varint(const unsigned char **pp, const unsigned char *e, uint64_t *v)
{
	const unsigned char *p = *pp;
	if (p < e && *p < 0x80) { // most are one byte
		*v = *p;
		*pp = p + 1;
		return 0;
	}
	uint64_t x = 0;
	for (int s = 0;; s += 7) {
		if (p == e)
			return -1;
		unsigned b = *p++;
		if (s == 63 && b > 1)
			return -2;
		x |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80)) {
			if (b == 0 && s)
				return -2;
			break;
		}
	}
	*v = x;
	*pp = p;
	return 0;
}

static int varint_fail(Br *r, int64_t at, int rc, const char *what)
{
	if (rc == -1)
		return fail(r, at, "the file ends inside %s (truncated file?)", what);
	return fail(r, at, "bad number in %s: not a minimal varint of at most 64 bits", what);
}

/* The 20-byte head: magic, version, length of the text part. */
static int read_head(Br *r, uint64_t *tlen)
{
	have(r, PLAN_BIN_HEAD);
	for (int i = 0; i < PLAN_BIN_MAGIC_LEN; i++) {
		if (i >= (int)r->len)
			return fail(r, i, "the file ends inside the binary plan's magic (truncated file?)");
		if (r->blk[i] != (unsigned char)PLAN_BIN_MAGIC[i])
			return fail(r, i, "not a pipecc plan (a binary plan starts with the bytes 89 50 43 "
			                  "50 0d 0a 1a 0a)");
	}
	if (r->len < PLAN_BIN_HEAD)
		return fail(r, (int64_t)r->len, "the file ends inside the binary plan's header "
		                                 "(truncated file?)");
	uint64_t v = le(r->blk + 8, 4);
	if (v != PLAN_BIN_VERSION)
		return fail(r, 8, "binary plan format version %" PRIu64 " is not supported (this build "
		                  "reads version %d)", v, PLAN_BIN_VERSION);
	*tlen = le(r->blk + 12, 8);
	uint64_t room = r->size >= 0 ? (uint64_t)r->size : (uint64_t)INT64_MAX;
	if (*tlen == 0 || *tlen > room || room - *tlen < PLAN_BIN_HEAD + PLAN_BIN_TRAILER)
		return fail(r, 12, "text part of %" PRIu64 " bytes does not fit the file", *tlen);
	r->pos = PLAN_BIN_HEAD;
	return 0;
}

/* The text part, copied out; its buffer grows as bytes arrive (a pipe's size is not
 * known, and the length may lie). */
static char *read_text(Br *r, uint64_t n)
{
	size_t cap = n < BR_BLOCK ? (size_t)n : BR_BLOCK, got = 0;
	char *t = malloc(cap);
	while (t && got < n) {
		if (!have(r, 1)) {
			fail(r, here(r), "the file ends inside the text part (truncated file?)");
			break;
		}
		size_t k = r->len - r->pos < n - got ? r->len - r->pos : (size_t)(n - got);
		const unsigned char *nul = memchr(r->blk + r->pos, 0, k);
		if (nul) { // not text: a length that lies, over bytes that may never end
			fail(r, here(r) + (nul - (r->blk + r->pos)), "NUL byte in the text part");
			break;
		}
		if (got + k > cap) {
			size_t c = cap * 2 < n ? cap * 2 : (size_t)n;
			char *b = c >= PLAN_FIT_MIN && !plan_sysmem_fits((double)c) ? NULL : realloc(t, c);
			if (!b) {
				cap = c; // for the message
				break;
			}
			t = b;
			cap = c;
		}
		memcpy(t + got, r->blk + r->pos, k);
		got += k;
		r->pos += k;
	}
	if (!r->failed && (!t || got < n)) {
		char m[512];
		fail(r, here(r), "%s", plan_oom_text(m, sizeof m, 0, cap));
	}
	if (r->failed) {
		free(t);
		return NULL;
	}
	return t;
}

/* Byte offset in the file of line `line` (1-based) of the text part t. */
static int64_t text_offset(const char *t, size_t n, int64_t line)
{
	size_t at = 0;
	for (int64_t l = 1; l < line && at < n; l++) {
		const char *nl = memchr(t + at, '\n', n - at);
		at = nl ? (size_t)(nl - t) + 1 : n;
	}
	return PLAN_BIN_HEAD + (int64_t)at;
}

/* The plan without its ops, from the text part; it must be exactly what the writer
 * puts there (plan_bin_text of the plan it reads as). */
static Plan *read_skeleton(Br *r, uint64_t tlen)
{
	char *t = read_text(r, tlen);
	if (!t)
		return NULL;
	static const char v3[] = PLAN_FORMAT " 3 ", v2[] = PLAN_FORMAT " 2 ";
	if (tlen < sizeof v3 || (memcmp(t, v3, sizeof v3 - 1) && memcmp(t, v2, sizeof v2 - 1))) {
		free(t);
		fail(r, PLAN_BIN_HEAD, "the text part must start with '%s 3' or '%s 2'", PLAN_FORMAT,
		     PLAN_FORMAT);
		return NULL;
	}
	PlanError e;
	FILE *f = fmemopen(t, (size_t)tlen, "r");
	Plan *p = f ? plan_read_text(f, r->name, &e) : NULL;
	if (f)
		fclose(f);
	if (!p) {
		fail(r, text_offset(t, (size_t)tlen, e.line), "in the text part, line %" PRId64 ": %s",
		     e.line, f ? e.msg : "out of memory");
		free(t);
		return NULL;
	}
	size_t n2;
	char *t2 = plan_bin_text(p, &n2);
	if (!t2 || n2 != tlen || memcmp(t, t2, n2)) {
		size_t i = 0;
		while (t2 && i < n2 && i < tlen && t[i] == t2[i])
			i++;
		fail(r, PLAN_BIN_HEAD + (int64_t)i, t2 ? "the text part is not the one pipecc writes "
		                                         "for its plan (ops listed, or hand-edited)"
		                                       : "out of memory");
		plan_free(p);
		p = NULL;
	}
	free(t);
	free(t2);
	return p;
}

/* One op at the cursor, coded against c's prediction; checked, then made the kind's
 * previous op. */
static int get_op(Br *r, Plan *pl, BinCtx *c, const PlanOpLimits *l, PlanOp *o,
                  int32_t *line, int rank, int64_t i)
{
	if (r->len - r->pos < BIN_OP_MAX && !r->eof)
		more(r, BIN_OP_MAX);
	const unsigned char *p = r->blk + r->pos, *e = r->blk + r->len;
	int64_t at = here(r);
	if (p == e)
		return fail(r, at, "the file ends inside rank %d's op %" PRId64 " (truncated file?)", rank,
		            i);
	unsigned h = *p++, k = h & BIN_KIND_MASK;
	if (k >= OP_COUNT || (h & BIN_HEAD_RESERVED) ||
	    ((h & BIN_SAME_GROUP) && !(plan_bin_uses(k) & BF_GROUP)) ||
	    ((h & BIN_GRAD) && !(plan_bin_uses(k) & BF_DIR)))
		return fail(r, at, "rank %d op %" PRId64 ": bad op header byte 0x%02x", rank, i, h);
	unsigned dir = (h & BIN_GRAD) != 0, slot = plan_bin_slot(k, dir);
	*o = plan_bin_predict(c, (OpKind)k, dir, (h & BIN_SAME_GROUP) != 0);
	if (!(plan_bin_uses(k) & BF_ROUTE))
		o->route = -1; // as written: a sized kind's size is `bytes`, named again below
	*line = c->line[slot];
	int64_t bytes = c->bytes[slot];
	int check = !(c->seen & (1u << slot));
	if (!(h & BIN_FIELDS_FOLLOW)) {
		/* The kind's previous op passed the check; only mb and group moved. */
		if (((plan_bin_uses(k) & BF_MB) && o->mb >= l->mbs) ||
		    ((plan_bin_uses(k) & BF_GROUP) && o->group < 0))
			check = 1;
	} else {
		check = 1;
		if (p == e)
			return fail(r, at, "the file ends inside rank %d's op %" PRId64 " (truncated file?)",
			            rank, i);
		unsigned mask = *p++;
		if (!mask)
			return fail(r, at, "rank %d op %" PRId64 ": empty field mask", rank, i);
		int64_t v[BIN_FIELDS - 1] = {o->stage, o->mb, o->peer, o->group, o->route, *line,
		                             bytes};
		for (int f = 0; f < BIN_FIELDS; f++) {
			if (!(mask & (1u << f)))
				continue;
			uint64_t x;
			int rc = varint(&p, e, &x);
			if (rc)
				return varint_fail(r, at, rc, "an op");
			if (f == BIN_FIELDS - 1) {
				if (x > UINT16_MAX || x == o->part)
					return fail(r, at, "rank %d op %" PRId64 ": bad part", rank, i);
				o->part = (uint16_t)x;
				continue;
			}
			int64_t d = (int64_t)((x >> 1) ^ -(x & 1)); // zigzag
			if (!d)
				return fail(r, at, "rank %d op %" PRId64 ": a field coded that is predicted",
				            rank, i);
			v[f] = (int64_t)((uint64_t)v[f] + (uint64_t)d);
			if (f < BIN_FIELDS - 2 && (v[f] < INT32_MIN || v[f] > INT32_MAX))
				return fail(r, at, "rank %d op %" PRId64 ": field %d out of range", rank, i, f);
		}
		o->stage = (int32_t)v[0];
		o->mb = (int32_t)v[1];
		o->peer = (int32_t)v[2];
		o->group = (int32_t)v[3];
		o->route = (int32_t)v[4];
		*line = (int32_t)v[5];
		bytes = v[6];
	}
	char msg[256];
	if (check && plan_op_check(l, pl->dims[DIM_TP], o, bytes, msg, sizeof msg))
		return fail(r, at, "rank %d op %" PRId64 ": %s", rank, i, msg);
	if (plan_op_sized(k) && plan_op_set_bytes(pl, o, bytes))
		return fail(r, at, "out of memory");
	if (*line < 0) // only a coded field moves it
		return fail(r, at, "rank %d op %" PRId64 ": source line %d out of range [0, %d]", rank,
		            i, *line, INT32_MAX);
	plan_bin_commit(c, o, *line, bytes);
	r->pos = (size_t)(p - r->blk);
	return 0;
}

/* What fast_ops needs of a header byte, looked up once per op (head_table): its slot,
 * whether it is a predicted op at all (no fields follow, a kind, and the group and
 * direction bits only where the kind has them), the microbatch step, the group step. */
enum {
	HEAD_SLOT = 31,  // the slot (BIN_SLOTS <= 32)
	HEAD_MB = 32,    // the microbatch moves on by one
	HEAD_GROUP = 64, // the kind has a group: the rank's comm group, or the next one
	HEAD_NEXT = 128, // ... the next one
	HEAD_OK = 256,   // fast_ops may take it (when its slot has been seen)
};

static void head_table(uint16_t t[256])
{
	_Static_assert(BIN_SLOTS <= HEAD_SLOT + 1, "a slot fits HEAD_SLOT");
	for (unsigned h = 0; h < 256; h++) {
		unsigned k = h & BIN_KIND_MASK, uses = k < OP_COUNT ? plan_bin_uses(k) : 0;
		int ok = !(h & (BIN_FIELDS_FOLLOW | BIN_HEAD_RESERVED)) && k < OP_COUNT &&
		         (!(h & BIN_SAME_GROUP) || (uses & BF_GROUP)) &&
		         (!(h & BIN_GRAD) || (uses & BF_DIR));
		t[h] = (uint16_t)(!ok ? 0
		                      : plan_bin_slot(k, h & BIN_GRAD) | HEAD_OK |
		                            ((uses & BF_MB) ? HEAD_MB : 0) |
		                            ((uses & BF_GROUP) ? HEAD_GROUP : 0) |
		                            (!(h & BIN_SAME_GROUP) ? HEAD_NEXT : 0));
	}
}

/* The ops that are their prediction, one header byte each (most of a large plan), while
 * the block holds a whole op: only the microbatch and the group move, and they are
 * checked here; anything else is left to get_op. */
static void fast_ops(Br *r, BinCtx *c, const PlanOpLimits *l, PlanRank *rk)
{
	if (r->len - r->pos < BIN_OP_MAX && !r->eof)
		more(r, BIN_OP_MAX);
	const unsigned char *p = r->blk + r->pos;
	const unsigned char *end = r->len >= BIN_OP_MAX ? r->blk + r->len - BIN_OP_MAX : r->blk;
	PlanOp *out = rk->ops + rk->nops, *last = rk->ops + rk->ops_cap;
	int32_t *line = rk->lines ? rk->lines + rk->nops : NULL;
	while (p < end && out < last) {
		unsigned t = r->head[*p], slot = t & HEAD_SLOT;
		if (!(t & HEAD_OK) || !(c->seen & (1u << slot)))
			break;
		/* prev[slot] is not written here: a load of what was just stored in part stalls. */
		int32_t mb = c->mb[slot] + ((t & HEAD_MB) != 0), group = -1;
		if (mb >= l->mbs)
			break;
		if (t & HEAD_GROUP) {
			group = (int32_t)((uint32_t)c->group + ((t & HEAD_NEXT) != 0));
			if (group < 0)
				break;
			c->group = group;
		}
		c->mb[slot] = mb;
		plan_populate(out, last);
		*out = c->prev[slot];
		out->mb = mb;
		out->group = group;
		out++;
		if (line)
			*line++ = c->line[slot];
		p++;
	}
	rk->nops = out - rk->ops;
	r->pos = (size_t)(p - r->blk);
}

/* Rank rk's n ops from the cursor (at: where its count starts, for an out-of-memory
 * error). */
static int read_ops(Br *r, Plan *p, int rank, const PlanOpLimits *l, uint64_t n, int64_t at)
{
	PlanRank *rk = &p->ranks[rank];
	if (!(rk->ops && !rk->nops && rk->ops_cap == (int64_t)n)) // else find_ranks gave them
		plan_rank_drop_ops(rk);
	BinCtx c;
	plan_bin_ctx_init(&c);
	while (rk->nops < (int64_t)n) {
		if (rk->nops == rk->ops_cap) {
			/* Known size: the count, bounded above.  A pipe: doubling up to it. */
			int64_t cap = r->size >= 0 ? (int64_t)n : rk->ops_cap ? rk->ops_cap * 2 : 1 << 16;
			size_t failed = plan_reserve_ops(rk, cap < (int64_t)n ? cap : (int64_t)n,
			                                 r->keep & PLAN_KEEP_LINES);
			if (failed) {
				char m[512];
				return fail(r, at, "%s", plan_oom_text(m, sizeof m, (int64_t)n, failed));
			}
		}
		fast_ops(r, &c, l, rk);
		if (rk->nops < rk->ops_cap) {
			int32_t line = 0;
			if (get_op(r, p, &c, l, &rk->ops[rk->nops], &line, rank, rk->nops))
				return -1;
			if (rk->lines)
				rk->lines[rk->nops] = line;
			rk->nops++;
		}
	}
	return 0;
}

/* Rank rk's op count and ops. */
static int read_rank_ops(Br *r, Plan *p, int rank, const PlanOpLimits *l)
{
	have(r, 10);
	const unsigned char *q = r->blk + r->pos;
	int64_t at = here(r);
	uint64_t n;
	int rc = varint(&q, r->blk + r->len, &n);
	if (rc)
		return varint_fail(r, at, rc, "an op count");
	r->pos = (size_t)(q - r->blk);
	/* Each op takes a byte at least. */
	uint64_t left = r->size >= 0 ? (uint64_t)(r->size - here(r)) : (uint64_t)INT64_MAX / 64;
	if (n > left || n > (uint64_t)INT64_MAX / 64)
		return fail(r, at, "rank %d: %" PRIu64 " ops do not fit the file", rank, n);
	return read_ops(r, p, rank, l, n, at);
}

/* The checksum after the last rank, then the end of the file. */
static int read_trailer(Br *r)
{
	plan_hash_update(&r->h, r->blk + r->hashed, r->pos - r->hashed);
	r->hashed = r->pos;
	int64_t at = here(r);
	if (!have(r, PLAN_BIN_TRAILER))
		return fail(r, at, "the file ends inside the checksum (truncated file?)");
	uint64_t want = le(r->blk + r->pos, 8), got = plan_hash_final(&r->h);
	r->pos += PLAN_BIN_TRAILER;
	r->hashed = r->pos;
	if (want != got)
		return fail(r, at, "checksum mismatch: the plan was changed after pipecc wrote it (the "
		                   "file says %016" PRIx64 ", its bytes hash to %016" PRIx64 ")",
		            want, got);
	if (have(r, 1))
		return fail(r, here(r), "data after the checksum");
	return 0;
}

/* Opens r over f for a read from the file's start: the size when f is a regular file at
 * its start, the head table, the checksum, the block.  -1 when out of memory (err says
 * so). */
static int br_open(Br *r, FILE *f, const char *name, unsigned keep, PlanError *err)
{
	memset(err, 0, sizeof *err);
	err->rank = -1;
	err->op = -1;
	*r = (Br){.f = f, .err = err, .name = name ? name : "<stdin>", .size = -1, .keep = keep};
	head_table(r->head);
	struct stat st;
	int fd = fileno(f);
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ftello(f) == 0)
		r->size = st.st_size;
	plan_hash_init(&r->h, PLAN_SUM_LANES4);
	if (!(r->blk = malloc(BR_BLOCK))) {
		plan_oom_text(err->msg, sizeof err->msg, 0, BR_BLOCK);
		return -1;
	}
	return 0;
}

/* The ops of a file of known size, read whole (on worker threads when plan_threads > 1,
 * else in turn).  Item 0 of a par_for finds where each rank's ops start by skipping
 * them (an op is its header byte, then when fields follow a mask byte and a varint per
 * bit set: no value is decoded), which gives each rank's count before its ops: it
 * carves the rank's arrays from blocks of p's (plan_block_take, which huge pages can
 * back whole: plan.h) and publishes the rank.  Item 1 checks the checksum beside it.
 * Items 2 .. world + 1 decode rank after rank, each as soon as item 0 published it (so
 * the decoding starts while the skipping goes on), on its own copy of the cursor over
 * the shared bytes, with the functions the streaming reader uses (read_ops: fast_ops,
 * get_op, plan_op_check).  The attempt reports no error: on anything at all (a bad
 * coding, a value out of range, a truncation, a checksum mismatch, out of memory) it is
 * thrown away and the streaming reader runs from the file's start, so an error is
 * reported exactly as from a pipe (byte offsets and messages alike): neither threads
 * nor the blocks can change what a bad file gets, only how fast a good one is read,
 * into the same Plan (the same exact-size arrays, since a known size sizes them by
 * their count either way). */
typedef struct {
	int64_t n;         // the rank's ops
	size_t start, end; // its ops' bytes in the op section, after its count
} RankSpan;

typedef struct {
	const Br *r; // the cursor every rank starts from a copy of, over the op section
	Plan *p;
	const PlanOpLimits *l;
	RankSpan *span;
	PlanHash h; // up to the op section
	uint64_t want; // the checksum the file says
	int ready;  // ranks item 0 has published (__atomic), or -1 once it failed
} ParRead;

/* Whether the 8 bytes at b are 8 ops that are their predictions: header bytes, none
 * with BIN_FIELDS_FOLLOW (b is at an op's start). */
static inline int eight_plain(const unsigned char *b)
{
	uint64_t w;
	memcpy(&w, b, 8);
	return !(w & 0x0101010101010101u * BIN_FIELDS_FOLLOW);
}

/* The end of n ops from s[at] (the section's len bytes), or 0 when they do not fit.
 * Eight plain ops are stepped over at once: a byte at a time, the skip took 8 ms of
 * bench_io's 12.5 M ops, which the decoding of every rank waits behind. */
static size_t skip_ops(const unsigned char *s, size_t len, size_t at, uint64_t n)
{
	if (n > len - at)
		return 0; // a byte an op at least
	for (; n; n--) {
		if (n >= 8 && len - at >= 8 && eight_plain(s + at)) {
			at += 8;
			n -= 7; // and the loop's 1
			continue;
		}
		if (at == len)
			return 0;
		unsigned h = s[at++];
		if (!(h & BIN_FIELDS_FOLLOW))
			continue;
		if (at == len)
			return 0;
		for (unsigned mask = s[at++]; mask; mask &= mask - 1) { // a varint per bit
			while (at < len && (s[at] & 0x80))
				at++;
			if (at++ == len)
				return 0;
		}
	}
	return at;
}

/* Item 0: every rank's count, span and arrays, published rank by rank; then that the
 * ranks end where the trailer starts.  Nonzero (and ready -1) on anything. */
static int find_ranks(ParRead *pr)
{
	const unsigned char *sec = pr->r->blk;
	size_t len = pr->r->len, at = 0;
	int lines = (pr->r->keep & PLAN_KEEP_LINES) != 0;
	for (int k = 0; k < pr->p->world; k++) {
		const unsigned char *q = sec + at;
		uint64_t n;
		if (varint(&q, sec + len, &n) || n > (uint64_t)INT64_MAX / 64)
			break;
		RankSpan *s = &pr->span[k];
		*s = (RankSpan){(int64_t)n, (size_t)(q - sec), 0};
		s->end = at = skip_ops(sec, len, s->start, n);
		PlanRank *rk = &pr->p->ranks[k];
		plan_rank_drop_ops(rk); // the text part's reader gave it empty arrays: none wanted
		if (!at || plan_block_take(pr->p, rk, s->n, lines))
			break;
		__atomic_store_n(&pr->ready, k + 1, __ATOMIC_RELEASE);
	}
	if (__atomic_load_n(&pr->ready, __ATOMIC_RELAXED) == pr->p->world &&
	    at == len - PLAN_BIN_TRAILER)
		return 0;
	__atomic_store_n(&pr->ready, -1, __ATOMIC_RELEASE);
	return 1;
}

static int par_item(void *arg, int64_t i, int w)
{
	(void)w;
	ParRead *pr = arg;
	if (i == 0)
		return find_ranks(pr);
	if (i == 1) {
		PlanHash h = pr->h;
		plan_hash_update(&h, pr->r->blk, pr->r->len - PLAN_BIN_TRAILER);
		return plan_hash_final(&h) != pr->want;
	}
	int rank = (int)(i - 2), ready;
	while ((ready = __atomic_load_n(&pr->ready, __ATOMIC_ACQUIRE)) >= 0 && ready <= rank)
		sched_yield(); // item 0 runs on another worker (one worker takes items in turn)
	if (ready < 0)
		return 1;
	const RankSpan *s = &pr->span[rank];
	Br r = *pr->r;
	PlanError e;
	r.err = &e;
	r.pos = s->start;
	return read_ops(&r, pr->p, rank, pr->l, (uint64_t)s->n, r.base + (int64_t)s->start) ||
	       r.pos != s->end;
}

/* r at the op section of p, a file of r->size bytes: reads it whole and decodes it
 * (above).  0, or -1 on anything (nothing reported). */
static int par_ops(Br *r, Plan *p)
{
	int64_t at0 = here(r);
	size_t len = (size_t)(r->size - at0), got = r->len - r->pos;
	unsigned char *sec = malloc(len);
	RankSpan *span = malloc((size_t)p->world * sizeof *span + 1);
	if (!sec || !span || got > len || len < PLAN_BIN_TRAILER) {
		free(sec);
		free(span);
		return -1;
	}
	memcpy(sec, r->blk + r->pos, got);
	int whole = fread(sec + got, 1, len - got, r->f) == len - got && getc(r->f) == EOF;
	plan_hash_update(&r->h, r->blk + r->hashed, r->pos - r->hashed);
	ParRead pr = {.r = r, .p = p, .span = span, .h = r->h};
	free(r->blk); // the section is the block from now on, the whole file's rest
	r->blk = sec;
	r->len = len;
	r->pos = r->hashed = 0;
	r->base = at0;
	r->eof = 1;
	PlanOpLimits l = plan_op_limits(p);
	pr.l = &l;
	int rc = !whole; // else the file changed size since fstat
	if (!rc) {
		pr.want = le(sec + len - PLAN_BIN_TRAILER, 8);
		rc = par_for((int64_t)p->world + 2, par_item, &pr);
	}
	free(span);
	return rc ? -1 : 0;
}

/* What either way of reading does last. */
static Plan *read_done(Plan *p, PlanError *err)
{
	if (plan_sizes_canon(p)) {
		*err = (PlanError){.rank = -1, .op = -1};
		plan_oom_text(err->msg, sizeof err->msg, 0, (size_t)p->nsizes * 12);
		plan_free(p);
		return NULL;
	}
	/* Its file has no lines: the verifier names ranks, ops and routes instead. */
	p->routes_line = 0;
	for (int i = 0; i < p->world; i++)
		p->ranks[i].line = p->ranks[i].first_line = 0;
	return p;
}

int plan_bin_read_par(FILE *f, const char *name, unsigned keep, Plan **out)
{
	PlanError e;
	Br r;
	if (br_open(&r, f, name, keep, &e) || r.size < 0) {
		free(r.blk);
		return 0;
	}
	uint64_t tlen = 0;
	Plan *p = NULL;
	if (!read_head(&r, &tlen))
		p = read_skeleton(&r, tlen);
	if (p && par_ops(&r, p)) {
		plan_free(p);
		p = NULL;
	}
	free(r.blk);
	*out = p ? read_done(p, &e) : NULL;
	return *out ? 1 : -1;
}

Plan *plan_read_binary(FILE *f, const char *name, PlanError *err)
{
	return plan_read_binary_as(f, name, PLAN_KEEP_ALL, err);
}

Plan *plan_read_binary_as(FILE *f, const char *name, unsigned keep, PlanError *err)
{
	Plan *p = NULL;
	int rc = plan_bin_read_par(f, name, keep, &p); // a regular file, read whole
	if (rc > 0)
		return p;
	if (rc < 0 && fseeko(f, 0, SEEK_SET)) { // a regular file: it cannot fail
		memset(err, 0, sizeof *err);
		err->rank = -1;
		err->op = -1;
		snprintf(err->msg, sizeof err->msg, "cannot go back to the start of the file: %s",
		         strerror(errno));
		return NULL;
	}
	clearerr(f); // a failed read of the attempt is found again, or was passing
	Br r;
	if (br_open(&r, f, name, keep, err))
		return NULL;
	uint64_t tlen = 0;
	if (!read_head(&r, &tlen))
		p = read_skeleton(&r, tlen);
	if (p) {
		PlanOpLimits l = plan_op_limits(p);
		int bad = 0;
		for (int i = 0; i < p->world && !bad; i++)
			bad = read_rank_ops(&r, p, i, &l);
		if (bad || read_trailer(&r)) {
			plan_free(p);
			p = NULL;
		}
	}
	free(r.blk);
	return p ? read_done(p, err) : NULL;
}

Plan *plan_read(FILE *f, const char *name, PlanError *err)
{
	return plan_read_as(f, name, PLAN_KEEP_ALL, err);
}

Plan *plan_read_as(FILE *f, const char *name, unsigned keep, PlanError *err)
{
	int c = getc(f);
	if (c == EOF && ferror(f)) { // a directory, or the device failed: not an empty file
		*err = (PlanError){.rank = -1, .op = -1};
		snprintf(err->msg, sizeof err->msg, "cannot read: %s", plan_strerror(errno));
		return NULL;
	}
	if (c != EOF && ungetc(c, f) == c && plan_is_binary_start(c))
		return plan_read_binary_as(f, name, keep, err);
	return plan_read_text_as(f, name, keep, err);
}
