/* The plan reader's words (read_int.h): the small scanners every line of the text
 * grammar (read.c) is made of.  Each reads at r->s, moves past what it took, and on
 * a mismatch sets r's error at the current line (rd_fail) and returns -1 (NULL). */
#include "read_int.h"
#include "oom.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

void rd_skip_sp(Rd *r)
{
	while (*r->s == ' ')
		r->s++;
}

/* Matches a literal word followed by a space or the end of the line. */
int rd_word(Rd *r, const char *w)
{
	rd_skip_sp(r);
	size_t n = rd_prefix(r->s, w);
	if (w[n] || (r->s[n] != ' ' && r->s[n] != 0)) {
		char got[40];
		size_t k = strcspn(r->s, " ");
		snprintf(got, sizeof got, "%.*s", (int)(k < 32 ? k : 32), r->s);
		return rd_fail(r, "expected '%s', found '%s'", w, got);
	}
	r->s += n;
	return 0;
}

/* Matches a literal key such as "pp=" with no space before the value. */
int rd_key(Rd *r, const char *k)
{
	rd_skip_sp(r);
	size_t n = rd_prefix(r->s, k);
	if (k[n])
		return rd_fail(r, "expected '%s'", k);
	r->s += n;
	return 0;
}

int rd_num(Rd *r, int64_t *v, int64_t lo, int64_t hi, const char *what)
{
	if (r->failed)
		return -1;
	rd_skip_sp(r);
	const char *p = r->s;
	int neg = 0;
	if (*p == '-') {
		neg = 1;
		p++;
	}
	if (*p < '0' || *p > '9')
		return rd_fail(r, "expected a number for %s", what);
	uint64_t u = 0;
	while (*p >= '0' && *p <= '9') {
		if (u > (UINT64_MAX - 9) / 10 || u > (uint64_t)INT64_MAX)
			return rd_fail(r, "number too large for %s", what);
		u = u * 10 + (uint64_t)(*p++ - '0');
	}
	if (u > (uint64_t)INT64_MAX)
		return rd_fail(r, "number too large for %s", what);
	int64_t x = neg ? -(int64_t)u : (int64_t)u;
	if (hi < lo) // a count of none (0 routes, say): no number is in range
		return rd_fail(r, "%s %lld, but the plan declares none of these", what, (long long)x);
	if (x < lo || x > hi)
		return rd_fail(r, "%s %lld out of range [%lld, %lld]", what, (long long)x, (long long)lo,
		            (long long)hi);
	*v = x;
	r->s = p;
	return 0;
}

int rd_inum(Rd *r, int *v, int64_t lo, int64_t hi, const char *what)
{
	int64_t x = 0;
	if (rd_num(r, &x, lo, hi, what))
		return -1;
	*v = (int)x;
	return 0;
}

int rd_kv(Rd *r, const char *k, int *v, int64_t lo, int64_t hi)
{
	if (rd_key(r, k))
		return -1;
	return rd_inum(r, v, lo, hi, k);
}

int rd_kv64(Rd *r, const char *k, int64_t *v, int64_t lo, int64_t hi)
{
	if (rd_key(r, k))
		return -1;
	return rd_num(r, v, lo, hi, k);
}

/* A token up to the next space, copied. */
char *rd_token(Rd *r, const char *what)
{
	rd_skip_sp(r);
	size_t n = strcspn(r->s, " ");
	if (n == 0) {
		rd_fail(r, "expected %s", what);
		return NULL;
	}
	char *t = strndup(r->s, n);
	if (!t) {
		rd_fail(r, "out of memory");
		return NULL;
	}
	r->s += n;
	return t;
}

int rd_eol(Rd *r)
{
	if (r->failed)
		return -1;
	rd_skip_sp(r);
	if (r->s[0] == '\r' && !r->s[1])
		return rd_fail(r, "the line ends with a carriage return: plans have Unix line "
		               "endings (was the file converted, e.g. by a Windows editor?)");
	if (*r->s)
		return rd_fail(r, "unexpected text '%.32s' at end of line", r->s);
	return 0;
}

/* Optional " @line" or " @line:col". */
int rd_loc(Rd *r, PlanLoc *l)
{
	rd_skip_sp(r);
	l->line = l->col = 0;
	if (*r->s != '@')
		return 0;
	r->s++;
	if (rd_inum(r, &l->line, 0, INT_MAX, "source line"))
		return -1;
	if (*r->s == ':') {
		r->s++;
		return rd_inum(r, &l->col, 0, INT_MAX, "source column");
	}
	return 0;
}

int rd_grow(Rd *r, void **arr, int64_t *cap, int64_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	int64_t c = *cap ? *cap * 2 : 16;
	while (c < need)
		c *= 2;
	void *p = realloc(*arr, (size_t)c * size);
	if (!p) {
		char t[512];
		return rd_fail(r, "%s", plan_oom_text(t, sizeof t, r->ops, (size_t)c * size));
	}
	memset((char *)p + (size_t)*cap * size, 0, (size_t)(c - *cap) * size);
	*arr = p;
	*cap = c;
	return 0;
}
