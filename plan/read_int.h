/* The plan reader's private header: its state, shared by the grammar (read.c) and the
 * input layer under it (read_in.c: blocks, lines, the checksum, the op arrays). */
#ifndef PLAN_READ_INT_H
#define PLAN_READ_INT_H

#include "plan.h"

/* Bytes read at a time: small enough that the checksum and the parse find the copy in
 * L2 (measured on a 500 MiB plan: read() and the checksum took 0.13 s, 0.27 s with
 * 1 MiB blocks). */
#define RD_BLOCK (1 << 16)
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
	int check;        // the header has a checksum: hash every later byte into h
	uint64_t want;    // the checksum the header states
	PlanHash h;
	size_t hashed;    // blk[0, hashed) is folded into h (when check), the rest is not
	int version;
	int world;        // the mesh's world: the range of rank numbers in the file
	int stride;       // a line plan's rank numbers are multiples of it (plan_pp_stride)
	unsigned keep;    // PLAN_KEEP_*
} Rd;

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
int rd_ops_alloc(Rd *r, PlanRank *rk, int64_t nops);
int rd_grow_ops(Rd *r, PlanRank *rk, int64_t nops);

#endif
