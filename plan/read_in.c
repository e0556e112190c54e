/* The plan reader's input (read_int.h): the file comes in big blocks, each hashed into
 * the header's checksum as it arrives, while it is in cache; lines are cut in place.
 * Also the op arrays, which hold nearly all of a large plan's memory: sized once from
 * the rank line's count when the rest of the file can hold that many op lines. */
#include "read_int.h"
#include "io.h"
#include "checksum.h"
#include "block.h"
#include "oom.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RD_MIN_OP_LINE 6 // bytes of the shortest op line, `F 0 0` and its newline

/* ftello and fstat: a regular file's size bounds how many op lines can follow. */
void rd_init(Rd *r, FILE *f, const char *name, PlanError *err)
{
	*r = (Rd){.f = f, .err = err, .name = name ? name : "<stdin>", .left = -1};
	memset(err, 0, sizeof *err);
	err->rank = -1;
	err->op = -1;
	struct stat st;
	off_t at = ftello(f);
	if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && at >= 0 && st.st_size >= at)
		r->left = (int64_t)(st.st_size - at);
}

int rd_fail(Rd *r, const char *fmt, ...)
{
	if (r->failed)
		return -1;
	r->failed = 1;
	r->err->line = r->line;
	r->err->rank = -1;
	r->err->op = -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->err->msg, sizeof r->err->msg, fmt, ap);
	va_end(ap);
	return -1;
}

/* Folds blk[hashed, end) into the checksum: blocks are hashed as they arrive, while the
 * text is in cache, in pieces as big as the reads. */
void rd_hash_to(Rd *r, size_t end)
{
	if (r->check == RD_CHECK_STREAM && end > r->hashed)
		plan_hash_update(&r->h, r->blk + r->hashed, end - r->hashed);
	r->hashed = end;
}

/* Reads more of the file after the unread rest of the block, moved to its start, until
 * a newline arrives or the file ends; the block doubles when a line outgrows it. */
int rd_fill(Rd *r)
{
	size_t rest = r->len - r->pos;
	if (rest)
		memmove(r->blk, r->blk + r->pos, rest);
	r->len = rest;
	r->pos = 0;
	r->hashed = rest;
	while (!r->eof) {
		if (r->len == r->cap) {
			if (r->len >= RD_LINE_MAX) { // the whole block is one line, and it goes on
				return rd_fail(r, "line longer than %d bytes without a newline: not a plan",
				               RD_LINE_MAX);
			}
			size_t c = r->cap ? r->cap * 2 : RD_BLOCK;
			char *b = realloc(r->blk, c + RD_SLACK);
			if (!b) {
				char t[512];
				return rd_fail(r, "%s", plan_oom_text(t, sizeof t, r->ops, c));
			}
			r->blk = b;
			r->cap = c;
		}
		size_t k = fread(r->blk + r->len, 1, r->cap - r->len, r->f);
		if (k == 0 && ferror(r->f)) // a failed read is not the end of the file
			return rd_fail(r, "cannot read: %s", plan_strerror(errno));
		if (k == 0) {
			r->eof = 1;
			break;
		}
		r->len += k;
		if (r->left >= 0)
			r->left = r->left > (int64_t)k ? r->left - (int64_t)k : 0;
		memset(r->blk + r->len, 0, RD_SLACK);
		rd_hash_to(r, r->len);
		if (memchr(r->blk + r->len - k, '\n', k))
			break;
	}
	return 0;
}

/* Reads the next line; `what` names what was expected, for the truncation error.  The
 * file is read in big blocks and the line is left in place, its newline made a NUL.
 * A NUL inside the line is not looked for: see next_line. */
int rd_line_in(Rd *r, const char *what)
{
	r->line++;
	char *nl = r->pos < r->len ? memchr(r->blk + r->pos, '\n', r->len - r->pos) : NULL;
	if (!nl) {
		if (rd_fill(r))
			return -1;
		nl = r->len ? memchr(r->blk, '\n', r->len) : NULL;
	}
	char *s = r->blk + r->pos;
	size_t n = nl ? (size_t)(nl - s) + 1 : r->len - r->pos; // the newline included
	if (n == 0)
		return rd_fail(r, "unexpected end of file: expected %s", what);
	r->pos += n;
	if (s[n - 1] != '\n')
		return rd_fail(r, "line does not end with a newline (truncated file?)");
	s[n - 1] = 0;
	r->end = s + n - 1;
	r->buf = s;
	r->s = s;
	return 0;
}

/* A NUL inside the line would end it early for the parsing below.  (read_op.c needs no
 * such check: it takes a line only when it parsed it through to its end.) */
int rd_no_nul(Rd *r)
{
	if (memchr(r->buf, 0, (size_t)(r->end - r->buf)))
		return rd_fail(r, "NUL byte in line");
	return 0;
}

int rd_next_line(Rd *r, const char *what)
{
	return rd_line_in(r, what) || rd_no_nul(r);
}

/* A rank's op arrays (ops and lines) grow as its lines arrive, doubling up to the count
 * its rank line declared (a lying count cannot make us allocate much, and a true one is
 * not overshot); not zeroed: nops says what is set. */
int rd_grow_ops(Rd *r, PlanRank *rk, int64_t nops)
{
	int64_t c = rk->ops_cap ? rk->ops_cap * 2 : 1 << 16;
	size_t failed = plan_reserve_ops(rk, c < nops ? c : nops, r->keep & PLAN_KEEP_LINES);
	if (failed) {
		char t[512];
		return rd_fail(r, "%s", plan_oom_text(t, sizeof t, r->ops, failed));
	}
	return 0;
}

int rd_ops_alloc(Rd *r, Plan *p, PlanRank *rk, int64_t nops)
{
	int64_t text = r->left < 0 ? -1 : r->left + (int64_t)(r->len - r->pos);
	if (text < 0 || nops > text / RD_MIN_OP_LINE)
		return rd_grow_ops(r, rk, nops);
	/* The count fits the text left: arrays of that size, carved from a block (plan_block_take). */
	size_t failed = plan_block_take(p, rk, nops, (r->keep & PLAN_KEEP_LINES) != 0);
	if (failed) {
		char t[512];
		return rd_fail(r, "%s", plan_oom_text(t, sizeof t, r->ops, failed));
	}
	return 0;
}

Plan *plan_read_file(const char *path, PlanError *err)
{
	return plan_read_file_as(path, PLAN_KEEP_ALL, err);
}

Plan *plan_read_file_as(const char *path, unsigned keep, PlanError *err)
{
	if (!strcmp(path, "-"))
		return plan_read_as(stdin, "<stdin>", keep, err);
	FILE *f = fopen(path, "r");
	if (!f) {
		memset(err, 0, sizeof *err);
		err->rank = -1;
		err->op = -1;
		snprintf(err->msg, sizeof err->msg, "cannot open: %s", plan_strerror(errno));
		return NULL;
	}
	Plan *p = plan_read_as(f, path, keep, err);
	fclose(f);
	return p;
}
