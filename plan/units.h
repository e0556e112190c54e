/* Figures as people read them: a time or a size in bytes scaled to the unit that keeps
 * it between 1 and 1000 ("57.12 us", "80 GB").  Every text report of the three tools
 * writes its times and sizes through these two; --json writes raw numbers. */
#ifndef PLAN_UNITS_H
#define PLAN_UNITS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ns in ns, us, ms or s, 4 significant digits ("347.2 ms", "2388 s") into buf.
 * Returns buf. */
char *plan_time_text(char *buf, size_t n, int64_t ns);
/* bytes b in decimal units (B, kB, MB, GB, TB, PB, EB), 3 significant digits ("80 GB",
 * "1.5 MB") into buf.  Returns buf. */
char *plan_mem_text(char *buf, size_t n, int64_t b);

/* Uniform rows said once: row i of a per-rank table has id[i] (a rank) and a text (its
 * figures, text + i * stride).  Each run of rows with one text and ids a constant step
 * apart is one line: pre, the label padded to width, the text and a newline.  The
 * label is the word one and the id ("rank 4"), or many and the range ("ranks 4-127",
 * "ranks 0-14 by 2"); empty words leave the bare id or range. */
void plan_rows_put(FILE *f, const char *pre, const char *one, const char *many, int width,
                   const int *id, const char *text, size_t stride, int nrows);

#endif
