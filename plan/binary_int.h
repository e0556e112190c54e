/* What the binary plan's writer (binary.c) and reader (binary_read.c) share: the op
 * coding's constants and the prediction an op is coded against.  Private to plan/. */
#ifndef PLAN_BINARY_INT_H
#define PLAN_BINARY_INT_H

#include "binary.h"

/* An op's header byte: its kind in the low 4 bits, then these; bit 7 is 0. */
#define BIN_KIND_MASK 0x0f
#define BIN_SAME_GROUP 0x10    // a comm op in the group of the rank's previous comm op
#define BIN_FIELDS_FOLLOW 0x20 // a field mask byte and the fields it names follow
#define BIN_GRAD 0x40          // SEND, RECV, TPREDUCE: direction grad (else act); compute: paired
#define BIN_HEAD_RESERVED 0x80
#define BIN_FIELDS 8           // bits of the field mask, in the order the fields follow
#define BIN_OP_MAX (2 + BIN_FIELDS * 10) // the longest coding of an op

/* The fields a kind uses (plan_bin_uses); the first seven are the mask bits in
 * BIN_FIELDS' order, the last mask bit is part; dir is in the header byte.  All but
 * stage and line are the op table's OP_FIELD_* bits (OpInfo.fields), as they are. */
enum {
	BF_STAGE = 1,               // stage, or edge for SEND/RECV (every kind)
	BF_MB = OP_FIELD_MB,        // microbatch
	BF_PEER = OP_FIELD_PEER,    // peer rank
	BF_GROUP = OP_FIELD_GROUP,  // comm group
	BF_ROUTE = OP_FIELD_ROUTE,  // route
	BF_LINE = 32,               // .pipe source line (every kind)
	BF_BYTES = OP_FIELD_BYTES,  // bytes moved
	BF_PART = OP_FIELD_PART,    // a stage's part (mask bit 7)
	BF_DIR = OP_FIELD_DIR,      // direction (the header's BIN_GRAD)
};
_Static_assert(BF_MB == 2 && BF_PEER == 4 && BF_GROUP == 8 && BF_ROUTE == 16 && BF_BYTES == 64 &&
                       BF_PART == 128 && BF_DIR == 256,
               "the binary form's field mask bits moved");

/* The fields kind k (below OP_COUNT) uses: a compute kind's dir is its pair bit
 * (plan_op_paired), coded as the others' direction, in the header's BIN_GRAD. */
static inline unsigned plan_bin_uses(unsigned k)
{
	return plan_ops[k].fields | BF_STAGE | BF_LINE |
	       (plan_op_is_compute((OpKind)k) ? (unsigned)BF_DIR : 0u);
}

/* Per rank: the previous op of each slot (a kind and, for kinds with one, a direction:
 * a SEND of activations is predicted from the last one, not from a gradient's) and the
 * previous comm op's group. */
#define BIN_SLOTS (2 * OP_COUNT)
typedef struct {
	PlanOp prev[BIN_SLOTS]; // but its mb and group: those are below
	int32_t mb[BIN_SLOTS];  // the slot's previous microbatch (-1 before its first op)
	int32_t line[BIN_SLOTS]; // the slot's previous source line (0 before its first op)
	int64_t bytes[BIN_SLOTS]; // the slot's previous bytes= (0 before its first op), which
	                          // in memory its op's edge or route implies (plan_op_bytes)
	int32_t group; // -1 before the rank's first comm op
	unsigned seen; // bit s: prev[s] is an op of the rank (checked), not the empty op
} BinCtx;

static inline unsigned plan_bin_slot(unsigned kind, unsigned dir)
{
	return kind + (dir ? OP_COUNT : 0);
}

void plan_bin_ctx_init(BinCtx *c);

/* The microbatch and group predicted next for an op of kind k in slot s: the slot's
 * next microbatch, and the previous comm op's group (same) or the next one (-1 for a
 * kind without a group).  Group numbers wrap as 32-bit numbers, the writer's and the
 * reader's alike. */
static inline int32_t plan_bin_next_mb(const BinCtx *c, unsigned k, unsigned s)
{
	return c->mb[s] + ((plan_bin_uses(k) & BF_MB) != 0); // below the microbatches: no overflow
}

static inline int32_t plan_bin_next_group(const BinCtx *c, unsigned k, int same)
{
	return plan_bin_uses(k) & BF_GROUP ? (int32_t)((uint32_t)c->group + (same ? 0u : 1u)) : -1;
}

/* The op of kind k and direction dir predicted next: the slot's previous op with the
 * predicted microbatch and group. */
static inline PlanOp plan_bin_predict(const BinCtx *c, OpKind k, unsigned dir, int same)
{
	unsigned s = plan_bin_slot(k, dir);
	PlanOp p = c->prev[s];
	p.mb = plan_bin_next_mb(c, k, s);
	p.group = plan_bin_next_group(c, k, same);
	return p;
}

/* Op o, from source line `line`, moving `bytes`, is the slot's previous op from now on
 * (o as it is in memory: a sized kind's route names its size). */
static inline void plan_bin_commit(BinCtx *c, const PlanOp *o, int32_t line, int64_t bytes)
{
	unsigned s = plan_bin_slot(o->kind, o->dir);
	c->prev[s] = *o;
	c->mb[s] = o->mb;
	c->line[s] = line;
	c->bytes[s] = bytes;
	if (plan_bin_uses(o->kind) & BF_GROUP)
		c->group = o->group;
	c->seen |= 1u << s;
}

/* The binary plan in f (its first byte not yet read) read whole, its ranks' ops in one
 * block, decoded on plan_threads workers (one: in turn): what plan_read_binary_as
 * tries first.  1 with *out, 0 when f is not a regular file read from its start
 * (nothing was read), -1 when the attempt failed, reporting nothing (the caller then
 * reads f again from its start as a stream).  binary_read.c; public for the tests. */
int plan_bin_read_par(FILE *f, const char *name, unsigned keep, Plan **out);

/* The text part of p's binary form: its text with every op list left out (malloc'd,
 * *len bytes); NULL when out of memory. */
char *plan_bin_text(const Plan *p, size_t *len);

#endif
