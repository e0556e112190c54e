/* The binary plan form (docs/plan-format.md, "Binary form"): the same plan as the text,
 * a few bytes an op instead of about forty.  plan_read takes either form, told apart by
 * the first byte; plan_write_binary writes this one (pipecc --plan-format=binary).
 * Converting text -> binary -> text, or binary -> text -> binary, gives back the same
 * bytes. */
#ifndef PLAN_BINARY_H
#define PLAN_BINARY_H

#include "plan.h"
#include "io.h"
#include "checksum.h"
#include "read_op.h"

#define PLAN_BIN_MAGIC "\x89PCP\r\n\x1a\n" // 8 bytes; the first is never a text plan's
#define PLAN_BIN_MAGIC_LEN 8
#define PLAN_BIN_VERSION 1  // what plan_write_binary writes and plan_read_binary reads
#define PLAN_BIN_HEAD 20    // magic, u32 version, u64 length of the text part
#define PLAN_BIN_TRAILER 8  // the u64 lanes4 checksum of every byte before it
#define PLAN_BIN_TEXT_SUM PLAN_SUM_LANES4 // the text part's header kind in version 1

/* The plan formats a tool can write (pipecc --plan-format). */
typedef enum {
	PLAN_FORMAT_TEXT,   // the text form, the reference
	PLAN_FORMAT_BINARY, // the binary form
	PLAN_FORMAT_COUNT
} PlanFormat;
extern const char *const plan_format_names[PLAN_FORMAT_COUNT]; // "text", "binary"

/* Whether c, a file's first byte, starts a binary plan (plan_read's dispatch). */
static inline int plan_is_binary_start(int c)
{
	return c == (unsigned char)PLAN_BIN_MAGIC[0];
}

/* Writes p in the binary form; -1 on a write error or out of memory. */
int plan_write_binary(const Plan *p, FILE *f);
/* Writes p in format fmt (PlanFormat), expanded (every world rank) when expand is set. */
int plan_write_as(const Plan *p, FILE *f, int fmt, int expand);
/* Reads a binary plan from f (its first byte not yet read); NULL with err filled (its
 * `line` is then the file's byte offset and `at_byte` is set) on malformed, truncated or
 * corrupted input. */
Plan *plan_read_binary(FILE *f, const char *name, PlanError *err);
Plan *plan_read_binary_as(FILE *f, const char *name, unsigned keep, PlanError *err); // PLAN_KEEP_*

/* The ranges every op field must lie in, the text reader's (read.c, read_op.c) as one
 * function over the counts l and the tp size: op o as written, moving `bytes` (its route
 * -1 unless it is a SEND or RECV), in range for its kind, a SEND's or RECV's bytes its
 * edge's, and the fields its kind does not use at their empty values.  0, or -1 with
 * why in msg. */
int plan_op_check(const PlanOpLimits *l, int tp, const PlanOp *o, int64_t bytes, char *msg,
                  size_t n);
/* The limits of plan p's ops as they are in memory (a line plan's rank numbers are
 * pipeline indices). */
PlanOpLimits plan_op_limits(const Plan *p);

#endif
