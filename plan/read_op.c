/* The reader's fast path for the op lines that make up nearly all of a large plan:
 * compute ops (`F 3 17 @9`) and p2p ops (`SEND act e=3 m=17 to=4 bytes=64 g=9 r=2 @9`)
 * exactly as plan_write puts them.  It takes a line only when every field is there, in
 * order and in range, and says nothing otherwise: the reader then parses that line
 * again with its general code (read.c), which accepts the same lines and names what is
 * wrong with any other.  So the fast path changes speed, never what is accepted or what
 * an error says.  Runs of lines are parsed where they lie in the reader's block, each
 * walk ending at its line's newline, with no search for the newline first and no copy
 * (plan_read_ops_fast).  It relies on the block having RD_SLACK zero bytes after the
 * text (read_int.h): no literal or digit matches a zero, so a walk stops there. */
#include "read_op.h"
#include "io.h"
#include "block.h"

#include <limits.h>
#include <string.h>

/* The literal w (a string constant of at most 8 bytes: the block's slack covers a
 * compare that starts at the line's end) at *s: skipped, or 0 when the text differs.
 * memcmp of a constant length compiles to a load and a compare or two. */
#define lit(s, w) \
	(sizeof(char[sizeof(w) <= 9 ? 1 : -1]) && memcmp(*(s), w, sizeof(w) - 1) == 0 \
	     ? (*(s) += sizeof(w) - 1, 1)                                               \
	     : 0)

/* Decimal digits at *s into *v (at most 18: no overflow), within [0, hi]; none when hi
 * is negative (a count of 0 routes or edges gives hi -1, so the compares are signed: as
 * unsigned, -1 let every number through, and `r=0` in a plan of no routes reached the
 * verifier, which read routes[0] of none, found by fuzz_plan 2026-12-04).  Up to 7
 * digits are read as one 8-byte word, branch-free (the reader's block has 8 bytes of
 * slack after its text, so the load stays inside it): the first byte that is no digit
 * ends the number, and the digits are summed pairwise by three multiplies. */
static inline int digits(const char **s, int64_t hi, int64_t *v)
{
	const unsigned char *p = (const unsigned char *)*s;
	uint64_t w;
	memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	const uint64_t hi4 = 0xf0f0f0f0f0f0f0f0ULL, zeros = 0x3030303030303030ULL;
	/* A byte is a digit when it and it plus 6 both have high nibble 3; a carry out of a
	 * non-digit only reaches later bytes, after the first non-digit. */
	uint64_t bad = ((w & hi4) ^ zeros) | (((w + 0x0606060606060606ULL) & hi4) ^ zeros);
	if (bad) {
		int n = __builtin_ctzll(bad) / 8;
		if (n == 0)
			return 0;
		uint64_t x = (w - zeros) << (64 - 8 * n); // n digits, leading zero bytes
		x = (x * 10 + (x >> 8)) & 0x00ff00ff00ff00ffULL;
		x = (x * 100 + (x >> 16)) & 0x0000ffff0000ffffULL;
		x = (x * 10000 + (x >> 32)) & 0xffffffffULL;
		if ((int64_t)x > hi) // x < 10^7
			return 0;
		*v = (int64_t)x;
		*s += n;
		return 1;
	}
#endif
	uint64_t u = 0;
	int n = 0;
	while ((unsigned)(p[n] - '0') < 10 && n < 19)
		u = u * 10 + (uint64_t)(p[n++] - '0');
	if (n == 0 || n > 18 || (int64_t)u > hi) // u < 10^18
		return 0;
	*v = (int64_t)u;
	*s += n;
	return 1;
}

static inline int i32(const char **s, int64_t hi, int32_t *v)
{
	int64_t x;
	if (!digits(s, hi, &x))
		return 0;
	*v = (int32_t)x;
	return 1;
}

/* ` @LINE` or ` @LINE:COL` (LINE into *line), or nothing: where the line must end, or
 * NULL. */
static inline const char *tail(const char *s, int32_t *line)
{
	int32_t col;
	if (!lit(&s, " @"))
		return s;
	if (!i32(&s, INT_MAX, line))
		return NULL;
	if (*s == ':' && (s++, !i32(&s, INT_MAX, &col)))
		return NULL;
	return s;
}

/* A rank number of the file into the plan's: a line plan's are its line's, over stride. */
static inline int rank_ref(const PlanOpLimits *l, int32_t *v)
{
	if (!l->stride)
		return 1;
	if (l->stride == 1) // no division: it is slow, and a pp-only mesh has stride 1
		return *v < l->line_ranks;
	if (*v % l->stride || *v / l->stride >= l->line_ranks)
		return 0;
	*v /= l->stride;
	return 1;
}

/* Where the numbers that change from one op of a shape to the next lie in its line: the
 * microbatch's digits [m, m_end), and a p2p op's group's [g, g_end) (g NULL for compute). */
typedef struct {
	const char *m, *m_end, *g, *g_end;
} Spans;

static const char *compute(const char *s, const PlanOpLimits *l, PlanOp *o, int32_t *line,
                           Spans *sp)
{
	if (!lit(&s, " ") || !i32(&s, l->stages - 1, &o->stage) || !lit(&s, " "))
		return NULL;
	sp->m = s;
	if (!i32(&s, l->mbs - 1, &o->mb))
		return NULL;
	sp->m_end = s;
	sp->g = NULL;
	return tail(s, line);
}

static const char *p2p(const char *s, const PlanOpLimits *l, PlanOp *o, int32_t *line, Spans *sp)
{
	int64_t bytes;
	if (lit(&s, " act e="))
		o->dir = DIR_ACT;
	else if (lit(&s, " grad e="))
		o->dir = DIR_GRAD;
	else
		return NULL;
	if (!i32(&s, l->edges - 1, &o->stage) || !lit(&s, " m="))
		return NULL;
	sp->m = s;
	if (!i32(&s, l->mbs - 1, &o->mb))
		return NULL;
	sp->m_end = s;
	if (!(plan_ops[o->kind].sends ? lit(&s, " to=") : lit(&s, " from=")) ||
	    !i32(&s, l->world - 1, &o->peer) || !rank_ref(l, &o->peer))
		return NULL;
	if (!lit(&s, " bytes=") || !digits(&s, INT64_MAX / 8, &bytes) || !lit(&s, " g="))
		return NULL;
	sp->g = s;
	if (!i32(&s, INT_MAX, &o->group))
		return NULL;
	sp->g_end = s;
	if (!lit(&s, " r=") || !i32(&s, l->routes - 1, &o->route) ||
	    bytes != l->edge[o->stage].bytes) // the general parser says what is wrong
		return NULL;
	return tail(s, line);
}

/* One op line at s into *o and *line: where it ended (the line must end there), or NULL. */
static inline const char *op_walk(const char *s, const PlanOpLimits *l, PlanOp *o, int32_t *line,
                                  Spans *sp)
{
	*o = (PlanOp){.mb = -1, .peer = -1, .group = -1, .route = -1};
	*line = 0;
	switch (s[0]) {
	case 'F':
	case 'W':
		o->kind = s[0] == 'F' ? OP_F : OP_W;
		return compute(s + 1, l, o, line, sp);
	case 'B':
		if (s[1] == 'W') {
			o->kind = OP_BW;
			return compute(s + 2, l, o, line, sp);
		}
		o->kind = OP_B;
		return compute(s + 1, l, o, line, sp);
	case 'S':
		o->kind = OP_SEND;
		return s[1] == 'E' && s[2] == 'N' && s[3] == 'D' ? p2p(s + 4, l, o, line, sp) : NULL;
	case 'R':
		o->kind = OP_RECV;
		return s[1] == 'E' && s[2] == 'C' && s[3] == 'V' ? p2p(s + 4, l, o, line, sp) : NULL;
	}
	return NULL;
}

int plan_read_op_fast(const char *s, const char *end, const PlanOpLimits *l, PlanOp *o,
                      int32_t *line)
{
	Spans sp;
	return op_walk(s, l, o, line, &sp) == end;
}

/* ---- lines like the last of their shape ----
 * Most op lines of a rank differ from the previous line of the same shape (kind and, for
 * p2p, direction) in their microbatch and group only: `SEND act e=3 m=17 to=4 bytes=64
 * g=9 r=2 @9`, then `... m=18 ... g=11 ...`.  Such a line is taken by comparing its text
 * around those two numbers with the last line of its shape that op_walk parsed (the
 * shape's template) and parsing only the two: the same bytes give the same fields, so it
 * is the op op_walk would give.  Anything else, op_walk, whose line becomes the shape's
 * template.  The templates lie in the block and last one call. */
/* The last number a shape's lines had in one place (microbatch or group), for the next:
 * the 8 bytes from its first digit, its value, its digit count (1 to 7; 0: none). */
typedef struct {
	uint64_t w;
	int64_t v;
	uint32_t n;
} Last;

typedef struct {
	const char *a;       // the template line: its text before the microbatch, na bytes
	const char *b, *c;   // between microbatch and group (p2p), after the last of them up
	uint32_t na, nb, nc; // to its newline (inclusive), nb and nc bytes
	int p2p;
	PlanOp op;
	int32_t line;
	Last m, g;           // the microbatch and group of the shape's last line (by_shape)
} Shape;

enum { SHAPES = 8 };

/* The shape an op line at s would have (its kind's letters, the direction's first
 * letter); SHAPES when none has a template slot. */
static inline unsigned shape_of(const char *s)
{
	switch (s[0]) {
	case 'F':
		return 0;
	case 'W':
		return 1;
	case 'B':
		return s[1] == 'W' ? 3 : 2;
	case 'S':
		return s[5] == 'g' ? 5 : 4;
	case 'R':
		return s[5] == 'g' ? 7 : 6;
	}
	return SHAPES;
}

/* Whether x[0, n) equals y[0, n); both may be read up to 7 bytes further (the block's
 * slack, or the text after a template line). */
static inline int same(const char *x, const char *y, uint32_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	uint64_t u, v, d = 0;
	uint32_t i = 0;
	for (; i + 8 <= n; i += 8) {
		memcpy(&u, x + i, 8);
		memcpy(&v, y + i, 8);
		d |= u ^ v;
	}
	if (i < n) {
		memcpy(&u, x + i, 8);
		memcpy(&v, y + i, 8);
		d |= (u ^ v) << (8 * (8 - (n - i))); // the low n - i bytes are the ones compared
	}
	return d == 0;
#else
	return memcmp(x, y, n) == 0;
#endif
}

/* i32 for a number in the place x was last: one with x's digits but for its last one,
 * the common case (the next microbatch; a group a few on), is x's value changed by that
 * digit, without digits' multiplies; the same value digits gives, since the digits
 * before it are x's.  Either way x becomes this number. */
static inline int i32_after(const char **s, int64_t hi, int32_t *v, Last *x)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (x->n) {
		uint64_t w, keep = ((uint64_t)1 << (8 * (x->n - 1))) - 1; // the digits before the last
		memcpy(&w, *s, 8); // the block's slack covers it, as digits' load
		unsigned d = (unsigned)(w >> (8 * (x->n - 1)) & 0xff) - '0',
		         after = (unsigned)(w >> (8 * x->n) & 0xff) - '0',
		         was = (unsigned)(x->w >> (8 * (x->n - 1)) & 0xff) - '0';
		if (!((w ^ x->w) & keep) && d < 10 && after >= 10) {
			int64_t y = x->v - was + d;
			if (y > hi)
				return 0;
			*v = (int32_t)y;
			x->w = w;
			x->v = y;
			*s += x->n;
			return 1;
		}
	}
#endif
	const char *b = *s;
	if (!i32(s, hi, v))
		return 0;
	x->n = *s - b <= 7 ? (uint32_t)(*s - b) : 0;
	memcpy(&x->w, b, 8);
	x->v = *v;
	return 1;
}

/* The line at s by its shape's template t: past its newline, or NULL. */
static inline const char *by_shape(Shape *t, const char *s, const char *end,
                                   const PlanOpLimits *l, PlanOp *o, int32_t *line)
{
	if (!t->a || t->na > (size_t)(end - s) || !same(s, t->a, t->na))
		return NULL;
	int32_t mb, g = -1;
	s += t->na;
	if (!i32_after(&s, l->mbs - 1, &mb, &t->m))
		return NULL;
	if (t->p2p) {
		if (t->nb > (size_t)(end - s) || !same(s, t->b, t->nb))
			return NULL;
		s += t->nb;
		if (!i32_after(&s, INT_MAX, &g, &t->g))
			return NULL;
	}
	if (t->nc > (size_t)(end - s) || !same(s, t->c, t->nc))
		return NULL;
	*o = t->op;
	o->mb = mb;
	o->group = t->p2p ? g : o->group;
	*line = t->line;
	return s + t->nc;
}

int64_t plan_read_ops_fast(const char *s, const char *end, const PlanOpLimits *l, PlanOp *ops,
                           int32_t *lines, int64_t n, size_t *used)
{
	Shape sh[SHAPES + 1] = {{0}};
	const char *s0 = s, *e;
	int64_t j = 0;
	int32_t none;
	for (; j < n; j++) {
		unsigned k = shape_of(s);
		int32_t *ln = lines ? &lines[j] : &none;
		plan_populate(&ops[j], &ops[n]);
		if ((e = by_shape(&sh[k], s, end, l, &ops[j], ln))) {
			s = e;
			continue;
		}
		Spans sp;
		if (!(e = op_walk(s, l, &ops[j], ln, &sp)) || *e != '\n' || e >= end)
			break;
		if (k < SHAPES) {
			const char *last = sp.g ? sp.g_end : sp.m_end;
			sh[k] = (Shape){s, sp.m_end, last, (uint32_t)(sp.m - s),
			                sp.g ? (uint32_t)(sp.g - sp.m_end) : 0, (uint32_t)(e + 1 - last),
			                sp.g != NULL, ops[j], *ln, sh[k].m, sh[k].g};
		}
		s = e + 1;
	}
	*used = (size_t)(s - s0);
	return j;
}
