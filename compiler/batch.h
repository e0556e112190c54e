/* `microbatches auto;`: the step's batch split into microbatches (compiler/batch.c). */
#ifndef BATCH_H
#define BATCH_H

#include "arena.h"
#include "ast.h"
#include "diag.h"

enum { BATCH_COUNTS = 64 }; // counts weighed at most (the smallest of them)

typedef struct {
	AstStmt *stmt;   // `microbatches auto;`
	AstStmt *input;  // the input statement, or NULL
	int batch;       // the input's first number as written; 0 when unreadable
	int pp;          // the mesh's pp as written (1 without one)
} BatchAuto;

/* Whether the program says `microbatches WORD;`; b is filled in when it does. */
int batch_find(AstProgram *ast, BatchAuto *b);
/* The counts the batch may be cut into, ascending, at most max of them: m in m[]. */
int batch_counts(const BatchAuto *b, int *m, int max);
/* Writes count m (0: the largest of those batch_counts gives) into the tree:
 * `microbatches m;` and the input's first number batch/m.  Nonzero after reporting (a
 * word other than auto, an m that does not divide the batch, no count at all). */
int batch_split(Arena *a, Diag *d, const BatchAuto *b, int m);

#endif
