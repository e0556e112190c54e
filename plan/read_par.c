/* The text reader's op lines on worker threads (`--threads N`, read_int.h): the reader
 * reads and checks the file as always (header, peers, `end`, the checksum) but skips
 * each rank's op lines, only counting their newlines and noting the bytes they span;
 * then par_for hands the ranks to workers, each of which reads its rank's span again
 * with pread, in a block of its own, and parses it as read.c does: runs of lines through
 * read_op.c's fast path where they lie, any line it declines through read.c's general
 * parser, into an array sized once from the rank's `ops=N`.  The ranks' op arrays, most
 * of a big plan's memory, are thus allocated and first touched on several threads too.
 * A worker stops at anything but success (a refused line, a span that does not hold
 * exactly its lines, a short read, out of memory): read.c then throws the attempt away
 * and reads the file again on one thread, which reports what it always did. */
#include "read_int.h"
#include "io.h"
#include "checksum.h"
#include "block.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rd_par_init(RdPar *par, FILE *f)
{
	struct stat st;
	int fd = fileno(f);
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode))
		return -1;
	*par = (RdPar){.fd = fd, .size = (int64_t)st.st_size};
	return 0;
}

void rd_par_free(RdPar *par)
{
	free(par->span);
	free(par->nl);
	free(par->sums);
	for (int w = 0; w < PAR_MAX_THREADS; w++)
		free(par->buf[w]);
}

int rd_par_ranks(Rd *r, int n)
{
	r->par->span = calloc((size_t)n, sizeof *r->par->span);
	return r->par->span ? 0 : rd_fail(r, "out of memory");
}

/* The file offset of the unread rest of r's block: r->left counts the bytes not read. */
static int64_t offset(const Rd *r)
{
	return r->par->size - r->left - (int64_t)(r->len - r->pos);
}

/* Newlines in s[0, n), n a multiple of 16 up to 255 * 16: sixteen bytes a step, each
 * lane counting its byte's newlines in a byte (it cannot wrap in 255 steps). */
typedef unsigned char V16 __attribute__((vector_size(16)));

static unsigned newlines(const char *s, size_t n)
{
	V16 acc = {0}, nl;
	memset(&nl, '\n', sizeof nl);
	for (size_t i = 0; i < n; i += 16) {
		V16 v;
		memcpy(&v, s + i, 16);
		acc -= (V16)(v == nl); // a match is all ones: minus -1
	}
	unsigned c = 0;
	for (int k = 0; k < 16; k++)
		c += acc[k];
	return c;
}

/* Newlines in s[0, n), any n. */
static int64_t count_lines(const char *s, size_t n)
{
	const size_t chunk = 255 * 16;
	int64_t c = 0;
	size_t i = 0;
	for (; n - i >= chunk; i += chunk)
		c += newlines(s + i, chunk);
	size_t whole = (n - i) & ~(size_t)15;
	c += newlines(s + i, whole);
	for (i += whole; i < n; i++)
		c += s[i] == '\n';
	return c;
}

/* The bytes of s[0, n) up to and including its *need-th newline (*need becomes 0), or
 * all n when it holds fewer (*need less by those it holds): wc -l's speed, as the
 * whole chunks are only counted. */
static size_t skip_lines(const char *s, size_t n, int64_t *need)
{
	const size_t chunk = 255 * 16;
	size_t i = 0;
	for (; n - i >= chunk; i += chunk) {
		unsigned c = newlines(s + i, chunk);
		if ((int64_t)c >= *need)
			break;
		*need -= c;
	}
	while (*need) {
		const char *nl = memchr(s + i, '\n', n - i);
		if (!nl)
			return n;
		i = (size_t)(nl - s) + 1;
		--*need;
	}
	return i;
}

/* Worker w's block, at least c bytes (and the slack after them); -1: out of memory. */
static int room(RdPar *par, int w, size_t c)
{
	if (par->cap[w] >= c)
		return 0;
	char *b = realloc(par->buf[w], c + RD_SLACK);
	if (!b)
		return -1;
	par->buf[w] = b;
	par->cap[w] = c;
	return 0;
}

/* Block j of the text after the header, on worker w: its sum, and the newlines of each
 * of its RD_BLOCKs into nl[1 + the RD_BLOCK's index] (rd_par_scan sums them up).  Read
 * an RD_BLOCK at a time, hashed and counted while it is in L1/L2. */
static int scan_block(void *arg, int64_t j, int w)
{
	RdPar *par = arg;
	int64_t at = j * PLAN_SUM_BLOCK, end = par->total - at;
	if (end > PLAN_SUM_BLOCK)
		end = PLAN_SUM_BLOCK;
	if (room(par, w, RD_BLOCK))
		return 1;
	char *b = par->buf[w];
	PlanHash h;
	plan_hash_init(&h, PLAN_SUM_LANES4);
	for (int64_t k = 0; k < end; k += RD_BLOCK) {
		size_t n = (size_t)(end - k < RD_BLOCK ? end - k : RD_BLOCK);
		if (pread(par->fd, b, n, (off_t)(par->start + at + k)) != (ssize_t)n)
			return 1;
		plan_hash_update(&h, b, n);
		par->nl[1 + (at + k) / RD_BLOCK] = count_lines(b, n);
	}
	par->sums[j] = plan_hash_final(&h);
	return 0;
}

int rd_par_scan(Rd *r)
{
	RdPar *par = r->par;
	par->start = offset(r);
	par->total = par->size - par->start;
	par->nsums = (par->total + PLAN_SUM_BLOCK - 1) / PLAN_SUM_BLOCK;
	par->nsub = (par->total + RD_BLOCK - 1) / RD_BLOCK;
	par->nl = calloc((size_t)par->nsub + 1, sizeof *par->nl);
	par->sums = malloc((size_t)par->nsums * sizeof *par->sums + 1);
	if (!par->nl || !par->sums || par_for(par->nsums, scan_block, par))
		return rd_fail(r, "the blocks could not be read");
	for (int64_t k = 0; k < par->nsub; k++)
		par->nl[k + 1] += par->nl[k];
	r->check = RD_CHECK_APART;
	return 0;
}

uint64_t rd_par_sum(const Rd *r)
{
	const RdPar *par = r->par;
	return plan_hash_blocks(par->sums, (size_t)par->nsums, (uint64_t)par->total);
}

/* Where rd_par_scan counted the lines: the reader moves on to the RD_BLOCK of the text
 * after the header that holds its want-th newline (the last op line's of a rank), unless
 * that lies in what it reads next anyway, and *need becomes the newlines to skip from
 * there. */
static int jump(Rd *r, int64_t want, int64_t *need)
{
	RdPar *par = r->par;
	if (want > par->nl[par->nsub])
		return rd_fail(r, "fewer op lines than the rank declares");
	int64_t lo = 0, hi = par->nsub - 1; // the last RD_BLOCK k with nl[k] < want
	while (lo < hi) {
		int64_t mid = (lo + hi + 1) / 2;
		if (par->nl[mid] < want)
			lo = mid;
		else
			hi = mid - 1;
	}
	int64_t to = par->start + lo * RD_BLOCK;
	if (to <= offset(r))
		return 0;
	if (fseeko(r->f, (off_t)to, SEEK_SET))
		return rd_fail(r, "cannot seek");
	r->pos = r->len = r->hashed = 0;
	r->eof = 0;
	r->left = par->size - to;
	*need = want - par->nl[lo];
	par->jumps++;
	return 0;
}

/* A failure here ends the attempt (its message is never shown: the file is then read
 * again on one thread, which says what is wrong). */
int rd_par_skip(Rd *r, int rank, int64_t nops)
{
	RdSpan *sp = &r->par->span[rank];
	sp->off = offset(r);
	sp->nops = nops;
	int64_t need = nops;
	if (need && r->pos < r->len)
		r->pos += skip_lines(r->blk + r->pos, r->len - r->pos, &need);
	/* The header's newline is not the text's: the rank's last op line ends the text's
	 * (r->line - 1 + nops)-th. */
	if (need && r->par->nl && jump(r, r->line - 1 + nops, &need))
		return -1;
	while (need) {
		if (r->pos == r->len && (rd_fill(r) || r->pos == r->len))
			return rd_fail(r, "unexpected end of file in rank %d's op lines", rank);
		r->pos += skip_lines(r->blk + r->pos, r->len - r->pos, &need);
	}
	sp->bytes = offset(r) - sp->off;
	r->line += nops;
	return 0;
}

typedef struct {
	const Rd *r; // the reader that skipped the lines: its limits, for the general parser
	Plan *p;
	RdPar *par;
} Pass;

/* Reads on from the span into worker w's block after its unread rest b[pos, len), which
 * moves to the block's start; the block doubles when a line fills it.  -1: nothing left
 * to read, a short read or out of memory. */
static int refill(RdPar *par, int w, size_t *pos, size_t *len, int64_t *off, int64_t *left)
{
	size_t rest = *len - *pos;
	if ((rest == par->cap[w] || !par->buf[w]) &&
	    room(par, w, par->cap[w] ? par->cap[w] * 2 : RD_BLOCK))
		return -1;
	char *b = par->buf[w];
	memmove(b, b + *pos, rest);
	size_t want = par->cap[w] - rest;
	if (want > (uint64_t)*left)
		want = (size_t)*left;
	if (!want || pread(par->fd, b + rest, want, (off_t)*off) != (ssize_t)want)
		return -1;
	*off += (int64_t)want;
	*left -= (int64_t)want;
	*pos = 0;
	*len = rest + want;
	memset(b + *len, 0, RD_SLACK); // the fast path's loads past the text, and its stop
	return 0;
}

/* Rank i's op lines, on worker w; the loop is read.c's read_ranks over this block. */
static int rank_ops(void *arg, int64_t i, int w)
{
	Pass *ps = arg;
	RdPar *par = ps->par;
	PlanRank *rk = &ps->p->ranks[i];
	const RdSpan *sp = &par->span[i];
	if (plan_reserve_ops(rk, sp->nops, ps->r->keep & PLAN_KEEP_LINES))
		return 1;
	int64_t off = sp->off, left = sp->bytes;
	size_t pos = 0, len = 0;
	while (rk->nops < sp->nops) {
		char *b = par->buf[w];
		if (pos < len) {
			size_t used;
			rk->nops += plan_read_ops_fast(b + pos, b + len, &par->lim, rk->ops + rk->nops,
			                               rk->lines ? rk->lines + rk->nops : NULL,
			                               sp->nops - rk->nops, &used);
			pos += used;
			if (rk->nops == sp->nops)
				break;
		}
		char *nl = pos < len ? memchr(b + pos, '\n', len - pos) : NULL;
		if (!nl) { // the line goes on past the block
			if (refill(par, w, &pos, &len, &off, &left))
				return 1;
			continue;
		}
		*nl = 0;
		PlanError e;
		Rd lr = *ps->r; // the line, for the general parser, with an error of its own
		lr.err = &e;
		lr.failed = 0;
		lr.buf = b + pos;
		lr.s = lr.buf;
		lr.end = nl;
		lr.line = rk->first_line + rk->nops;
		PlanOp o;
		int32_t line;
		if (!plan_read_op_fast(lr.buf, lr.end, &par->lim, &o, &line) &&
		    (rd_no_nul(&lr) || rd_read_op(&lr, ps->p, &o, &line)))
			return 1;
		if (rk->lines)
			rk->lines[rk->nops] = line;
		rk->ops[rk->nops++] = o;
		pos = (size_t)(nl - b) + 1;
	}
	return pos == len && left == 0 ? 0 : 1; // the span held exactly its lines
}

int rd_par_ops(const Rd *r, Plan *p)
{
	Pass ps = {r, p, r->par};
	/* Every count is known: all the arrays in one block (plan_block_ops). */
	int64_t *n = malloc((size_t)p->world * sizeof *n + 1);
	for (int i = 0; n && i < p->world; i++)
		n[i] = r->par->span[i].nops;
	int rc = !n || plan_block_ops(p, NULL, n, p->world, (r->keep & PLAN_KEEP_LINES) != 0);
	free(n);
	return rc || par_for(p->world, rank_ops, &ps) ? -1 : 0;
}
