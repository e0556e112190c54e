/* The plan reader's private header: its state, shared by the grammar (read.c), the
 * input layer under it (read_in.c: blocks, lines, the checksum, the op arrays) and the
 * op lines' parse on worker threads (read_par.c). */
#ifndef PLAN_READ_INT_H
#define PLAN_READ_INT_H

#include "par.h"
#include "plan.h"
#include "io.h"
#include "checksum.h"
#include "read_op.h"

/* Bytes read at a time: small enough that the checksum and the parse find the copy in
 * L2 (measured on a 500 MiB plan: read() and the checksum took 0.13 s, 0.27 s with
 * 1 MiB blocks). */
#define RD_BLOCK (1 << 16)
#define RD_LINE_MAX (1 << 20) // a longer line is not a plan's (the longest, `source PATH`,
                               // is a path); so a device like /dev/zero ends
#define RD_SLACK 8        // zero bytes after the text: read_op.c loads 8 bytes at a time

typedef struct {
	FILE *f;
	char *blk;     // the block read: lines [0, pos) are done, [pos, len) unread
	size_t cap, len, pos;
	int eof;
	int64_t left;  // bytes of the file not read yet; -1: unknown (not a regular file)
	char *buf;     // the current line, in blk, its newline made a NUL
	char *end;     // that NUL
	int64_t line;  // number of the line in buf
	const char *s; // cursor into buf
	PlanError *err;
	int failed;
	const char *name; // for messages
	int64_t ops;      // ops the rank lines declared so far, for the out-of-memory text
	int check;        // the header has a checksum: RD_CHECK_STREAM or RD_CHECK_APART
	uint64_t want;    // the checksum the header states
	PlanHash h;
	size_t hashed;    // blk[0, hashed) is folded into h (when check), the rest is not
	int version;
	int world;        // the mesh's world: the range of rank numbers in the file
	int stride;       // a line plan's rank numbers are multiples of it (plan_pp_stride)
	unsigned keep;    // PLAN_KEEP_*
	struct RdPar *par; // NULL: the op lines are parsed here, else skipped for read_par.c
	int64_t mem;      // the stages' and edges' shares so far (plan_mem_stage_share)
} Rd;

enum {
	RD_CHECK_STREAM = 1, // every byte after the header is folded into h as it is read
	RD_CHECK_APART,      // read_par.c hashed the blocks on threads (rd_par_scan)
};

/* How many leading bytes of s match the literal w: all of w's when s starts with it (the
 * NUL ending a line never matches, so this stops there).  No strlen, no strncmp: these
 * run on every field of every op line. */
static inline size_t rd_prefix(const char *s, const char *w)
{
	size_t n = 0;
	while (w[n] && s[n] == w[n])
		n++;
	return n;
}

/* The grammar's words (read_lex.c), each at r->s: it moves past what it took, or sets
 * r's error and returns -1 (NULL). */
void rd_skip_sp(Rd *r);                    // spaces
int rd_word(Rd *r, const char *w);         // the word w and a space or the line's end
int rd_key(Rd *r, const char *k);          // k, which ends in '=' ("bytes=")
int rd_num(Rd *r, int64_t *v, int64_t lo, int64_t hi, const char *what); // in [lo, hi]
int rd_inum(Rd *r, int *v, int64_t lo, int64_t hi, const char *what);
int rd_kv(Rd *r, const char *k, int *v, int64_t lo, int64_t hi);    // " k=N"
int rd_kv64(Rd *r, const char *k, int64_t *v, int64_t lo, int64_t hi);
char *rd_token(Rd *r, const char *what);   // the next word, strdup'ed
int rd_eol(Rd *r);                         // nothing but spaces left on the line
int rd_loc(Rd *r, PlanLoc *l);             // optional " @line" or " @line:col"
/* Room for need elements of size bytes in *arr (capacity *cap, doubled, zeroed). */
int rd_grow(Rd *r, void **arr, int64_t *cap, int64_t need, size_t size);

/* Sets r's error (the first one only) at the current line; returns -1. */
int rd_fail(Rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rd_init(Rd *r, FILE *f, const char *name, PlanError *err);
void rd_hash_to(Rd *r, size_t end); // folds blk[hashed, end) into the checksum
int rd_fill(Rd *r);                 // reads more after the unread rest of the block
/* The next line, in place, its newline made a NUL (rd_line_in), checked for NUL bytes
 * (rd_next_line); what names what was expected, for the truncation error. */
int rd_line_in(Rd *r, const char *what);
int rd_no_nul(Rd *r);
int rd_next_line(Rd *r, const char *what);
/* Room for a rank's nops ops: all at once when the rest of the file can hold that many
 * lines, else grown as they arrive (a lying count cannot make us allocate much). */
int rd_ops_alloc(Rd *r, Plan *p, PlanRank *rk, int64_t nops);
int rd_grow_ops(Rd *r, PlanRank *rk, int64_t nops);

/* ---- the op lines on worker threads (read_par.c, `--threads N`) ----
 * The reader runs as always but skips each rank's op lines (counting newlines), noting
 * where they lie; once the whole file has read and checked, workers read those spans
 * again (pread) and parse them into each rank's array.  Only for a regular file. */
typedef struct {
	int64_t off, bytes; // the rank's op lines in the file
	int64_t nops;
} RdSpan;

typedef struct RdPar {
	int fd;
	int64_t size;       // the file's size: r->left counts down to it
	RdSpan *span;       // one per rank
	/* rd_par_scan's table of the text after the header (file offset start, total bytes):
	 * the newlines before each RD_BLOCK of it (nl[k], k = 0 .. nsub), and the blocks
	 * kind's sum of each PLAN_SUM_BLOCK of it (sums[0 .. nsums)). */
	int64_t start, total, nsub, nsums;
	int64_t *nl;
	uint64_t *sums;
	int jumps;          // ranks whose op lines the reader jumped over (tests/test_read.c)
	PlanOpLimits lim;
	char *buf[PAR_MAX_THREADS]; // each worker's block
	size_t cap[PAR_MAX_THREADS];
} RdPar;

/* Sets up par for reading f: 0, or -1 when f is no regular file (read it as always). */
int rd_par_init(RdPar *par, FILE *f);
void rd_par_free(RdPar *par);
/* After the header line of a plan whose checksum is the blocks kind: hashes the blocks
 * and counts their newlines on the workers (r->check becomes RD_CHECK_APART), so that
 * rd_par_skip jumps over a rank's op lines instead of reading them.  -1: failed (the
 * attempt ends; the file is read again on one thread). */
int rd_par_scan(Rd *r);
uint64_t rd_par_sum(const Rd *r); // the checksum of the blocks rd_par_scan hashed
int rd_par_ranks(Rd *r, int n);               // room for n ranks' spans
int rd_par_skip(Rd *r, int rank, int64_t nops); // skips (and notes) a rank's op lines
/* Parses every rank's op lines on workers: 0, or -1 at the first trouble of any kind
 * (then the caller reads the file again from its start, on one thread). */
int rd_par_ops(const Rd *r, Plan *p);
/* The text reader (read.c): with par, the attempt with workers (NULL at any trouble). */
Plan *rd_read_text(FILE *f, const char *name, unsigned keep, RdPar *par, PlanError *err);
/* read.c's general op-line parser, for the line in r->buf (which read_par.c sets). */
int rd_read_op(Rd *r, Plan *p, PlanOp *o, int32_t *line);

#endif
