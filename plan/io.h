/* Reading and writing plans: the text form (docs/plan-format.md) and, through the same
 * calls, the binary form (plan/binary.h).  Every reader checks the file alike and fills a
 * PlanError instead of printing; every writer returns -1 on a write error. */
#ifndef PLAN_IO_H
#define PLAN_IO_H

#include "plan.h"

/* A plan writer: plan_write (text) or plan_write_binary (plan/binary.h). */
typedef int PlanWriteFn(const Plan *p, FILE *f);
int plan_write(const Plan *p, FILE *f); // its header's checksum is PLAN_SUM_WRITTEN
/* The same with the header's checksum of kind sum (PlanSum): the binary form's text part
 * keeps the kind its version was defined with (plan/binary.h). */
int plan_write_summed(const Plan *p, FILE *f, int sum);
/* Writes a line plan expanded (every world rank; text format 2), as `pipecc --expand`
 * does, through write (plan_write, or plan_write_binary); an expanded plan as write does.
 * -1 on a write error or out of memory. */
int plan_write_expanded(const Plan *p, FILE *f, PlanWriteFn *write);

/* Returns NULL and fills err on malformed, truncated or inconsistent input.  Reads
 * either form, the text or the binary (plan/binary.h), told apart by the first byte. */
Plan *plan_read(FILE *f, const char *name, PlanError *err);
Plan *plan_read_text(FILE *f, const char *name, PlanError *err); // the text form only
Plan *plan_read_file(const char *path, PlanError *err);
/* What the readers above keep beyond what running and simulating a plan need: a tool
 * that never writes the plan (pipesim, piperun) reads with none, 4 bytes an op less.
 * The file is checked alike either way. */
enum {
	PLAN_KEEP_LINES = 1, // each op's .pipe line (PlanRank.lines), which only writers put
	PLAN_KEEP_ALL = PLAN_KEEP_LINES,
	PLAN_READ_REHASH = 2, // take a text plan whose checksum disagrees with its text (a
	                      // hand edit that pipecc --rehash then checks and writes again)
};
Plan *plan_read_as(FILE *f, const char *name, unsigned keep, PlanError *err);
Plan *plan_read_text_as(FILE *f, const char *name, unsigned keep, PlanError *err);
Plan *plan_read_file_as(const char *path, unsigned keep, PlanError *err);

#endif
