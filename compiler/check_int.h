/* The checker's private header, shared by check.c (numbers, units, statements, the
 * whole-file checks, command-line overrides) and check_layers.c (token input, layers,
 * stages, blocks, optimizer, device, and the layer widths).  Nothing outside the
 * checker includes it. */
#ifndef CHECK_INT_H
#define CHECK_INT_H

#include "ast.h"
#include "map.h"
#include "program.h"

enum {
	MAX_SIZE = 1 << 24,         // rows, columns, layer widths
	MAX_MICROBATCHES = 1 << 20,
	MAX_RANKS = 1 << 20,        // world size, and so any one dimension
	MAX_DEVICE = 1 << 16,       // devices per node, and local device indices
};
#define MAX_TIME_NS 1e12        // 1000 s for one op on one microbatch: surely a typo
#define MIN_BANDWIDTH 1e6       // 1 MB/s
#define MAX_BANDWIDTH 1e15      // 1 PB/s
#define MAX_FILE (1u << 30)

typedef struct {
	Arena *a;
	Diag *d;
	Program *p;
	AstProgram *ast;
	AstStmt *first[AST_COUNT];  // first statement of each once-only kind

	int nnames;                 // every stage name written, for "did you mean"
	const char **names;
	AstStmt **name_stmt;
	Map stages;                 // name -> index of stages declared so far
	AstStmt **stage_stmt;       // declaring statement of each stage
	uint8_t *stage_ok;          // its layers are all sound
	int widths_ok;              // every stage and the input are sound
	int stages_known;           // no stage lost to a syntax error or a duplicate name

	Map skips;                  // (src, dst) -> skip index

	int nblock_names;           // every block statement with a name, in order
	AstStmt **block_stmt;
	Map blocks;                 // name -> index in block_stmt of its first statement
	uint8_t *block_ok;          // its statement is sound (its layers are checked on use)
	int nblocks;                // blocks declared so far
	int in_blocks, in_bodies;   // the layer expansion's depth: block uses, bodies open
	const char *block;          // the block being expanded (ProgLayer.block), its use
	Loc block_use;

	AstStmt *cost_all;          // `cost *`
	AstStmt **recompute_stmt;   // per stage: its `recompute NAME` statement
	int64_t all_cost[3];
	uint8_t all_has[3];
	AstStmt **cost_stmt;        // per stage: its `cost NAME` statement
	int64_t (*cost)[3];
	uint8_t (*cost_has)[3];

	int mesh_ok, input_ok;
	AstStmt *place, *devices, *sched;
} Check;

typedef struct {
	const char *name;
	double scale;
} Unit;

int over_limit(const Check *c);
int whole(Check *c, const AstNum *n, const char *what, long min, long max, int *out);
int unit_scale(Check *c, const AstNum *n, const Unit *units, int nu,
	const char *kind, const char *expected, double *scale);
int real(Check *c, const AstNum *n, double *v);
void word_list(char *list, size_t size, const char *const *words, int n);
/* A time in integer ns (a bare number is us), a bandwidth in bytes/s; 0 after reporting. */
int time_ns(Check *c, const AstNum *n, const char *what, int64_t *out);
int bandwidth(Check *c, const AstNum *n, double *out);
/* `link ...;` and `devices ...;` (check_mesh.c). */
void check_link(Check *c, AstStmt *s);
void check_devices(Check *c, AstStmt *s);
/* The index of the stage n names, declared above it; -1 after reporting. */
int check_resolve(Check *c, const AstName *n);
/* `recompute ...;` (check_recompute.c), and its rules once every statement is read. */
void check_recompute(Check *c, AstStmt *s);
void check_selective(Check *c);
void unknown_word(Check *c, const AstName *w, const char *what,
	const char *const *words, int n);
int find_word(const char *s, const char *const *words, int n);
int repeated_key(Check *c, const AstKv *kvs, int i, const char *what);
void check_input(Check *c, AstStmt *s);
void check_stage(Check *c, AstStmt *s);
void check_block(Check *c, AstStmt *s);
void check_optimizer(Check *c, AstStmt *s);
void check_device(Check *c, AstStmt *s);
void check_precision(Check *c, AstStmt *s);
void check_layers(Check *c);
/* Every layer's, stage's and the program's figures within what the tools count
 * (plan/layer.h, plan/mem.h), then each stage's F, B, W: its own cost line, else
 * `cost *`, else from its FLOPs. */
void check_costs(Check *c);
void check_mesh(Check *c, AstStmt *s); // check_mesh.c
void check_tp(Check *c);
void check_vocab_pad(Check *c); // check_mesh.c: pad= once tp is known

#endif
