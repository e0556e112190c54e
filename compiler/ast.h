/* The syntax tree of a .pipe file, as the parser (grammar/parser.y) builds it and the
 * checker (compiler/check.c) reads it.  It holds the text as written: names are strings,
 * numbers are their digits and unit suffix, nothing is resolved or converted.  Every
 * node carries the location of its text.  Nodes live in the compilation's arena; only
 * the growing lists the parser keeps on its stack (AstVec) are malloc'd, and the parser
 * frees them when it drops them during error recovery. */
#ifndef AST_H
#define AST_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "diag.h"

#define AST_NAME_MAX 255 // longer names are reported and cut

typedef struct {
	char *s;  // NUL-terminated; NULL when absent
	Loc loc;
} AstName;

/* A number as written: "-1.5ms" is neg, digits "1.5", unit "ms". */
typedef struct {
	char *digits;  // mantissa and exponent: "8", "1.5", "2e3"
	char *unit;    // suffix, "" when none: "ms", "GB/s"
	Loc loc;       // the whole literal, sign and unit included
	uint8_t neg;   // written with a leading '-'
	uint8_t bad;   // malformed; the lexer has reported it
} AstNum;

/* `16x512`: one token, two numbers. */
typedef struct {
	AstNum rows, cols;
} AstShape;

/* `key=value`, or a bare `key` (has_val 0).  `key=name` has the name in word and, for
 * the number readers to refuse, as val's unit with no digits. */
typedef struct {
	AstName key;
	AstNum val;
	AstName word;  // key=name: the name; NULL s otherwise
	uint8_t has_val;
	Loc loc;
} AstKv;

/* A layer argument: a number (`linear 1024`), a name (`loss mse`, `bias`) or a key with
 * a value (`heads=12`: is_name and has_val). */
typedef struct {
	uint8_t is_name;
	uint8_t has_val;
	AstName name;
	AstNum num;
	Loc loc;
} AstArg;

typedef struct AstLayer AstLayer;
struct AstLayer {
	AstName name;
	int nargs;
	AstArg *args;
	uint8_t has_body;   // `residual { ... }`
	int nlayers;        // the body
	AstLayer *layers;
	Loc loc;       // name and arguments
};

/* `rank 0: 0F0 0B0;` in a custom schedule.  Actions are kept as their tokens ("0F0"). */
typedef struct {
	AstName word;  // "rank" as written (checked, not a keyword)
	AstNum index;
	int nacts;
	AstName *acts;
	Loc loc;       // `rank N`
	uint8_t bad;   // a syntax error inside; the parser reported it
} AstRank;

typedef enum {
	AST_PIPELINE,     // pipeline NAME;
	AST_MESH,         // mesh pp=4 dp=2;
	AST_MICROBATCHES, // microbatches N;
	AST_INPUT,        // input RxC;
	AST_STAGE,        // stage NAME { layers }
	AST_SKIP,         // skip A -> B;
	AST_SCHEDULE,     // schedule NAME; | schedule custom {...} | schedule csv "f";
	AST_PLACEMENT,    // placement loop; | placement [..];
	AST_COST,         // cost NAME|* f=.. b=.. w=..;
	AST_LINK,         // link latency=.. bandwidth=..; | link ideal;
	AST_DEVICES,      // devices per_node=N; | devices [..];
	AST_PEERS,        // peers local; | peers self_send;
	AST_ROUTE,        // route A -> B forward 0:d0 -> 1:d1;
	AST_BLOCK,        // block NAME { layers }
	AST_OPTIMIZER,    // optimizer NAME key=value...;
	AST_DEVICE,       // device h100; or device peak=989TFLOPs memory=80GB;
	AST_RECOMPUTE,    // recompute NAME|*;
	AST_PRECISION,    // precision bf16;
	AST_MODEL,        // model { layers }: stages cut by pipecc (compiler/part.c)
	AST_STAGES,       // stages N; | stages auto;
	AST_COUNT
} AstKind;

/* `route A -> B DIR R:dD -> R:dD;` past the edge: the direction word as written, and
 * both ends (world rank, device name) in the order the tensor travels. */
typedef struct {
	AstName dir;      // forward | backward (checked, not keywords)
	AstNum rank[2];
	AstName dev[2];   // "d0"
	Loc end[2];       // each `R:dD`
} AstRoute;

/* One top-level statement; which fields are used depends on kind. */
typedef struct AstStmt AstStmt;
struct AstStmt {
	uint8_t kind;     // AstKind
	uint8_t bad;      // a syntax error inside: present, but its fields are partial
	Loc loc;          // the keyword
	Loc span;         // keyword to the last token before ';' (first line only)
	AstName name;     // pipeline, stage, schedule or placement word; skip source;
	                  // cost target ("*" for all stages)
	AstName name2;    // skip destination
	AstName str;      // schedule csv "path"
	AstNum num;       // microbatches
	AstShape shape;   // input
	AstName name3;    // input tokens: the word `tokens`
	int nkvs;         // mesh, cost, link, devices, input tokens, optimizer, device
	AstKv *kvs;
	uint8_t has_list; // placement [..], devices [..]
	Loc list_loc;
	int nnums;
	AstNum *nums;
	int nlayers;      // stage, block, model
	AstLayer *layers;
	uint8_t has_body; // schedule NAME { ranks }
	int nranks;
	AstRank *ranks;
	AstRoute *route;  // route
	AstStmt *next;
};

typedef struct {
	AstStmt *head;
	int nstmts;
	int lost;       // statements the parser could not even start reading
	int stopped;    // parsing stopped early: too many errors
} AstProgram;

/* A growing array on the parser's stack, malloc'd (see the file comment). */
typedef struct AstVec AstVec;

/* Parser and lexer state, one per parse (flex's extra data, bison's parse-param). */
typedef struct {
	Arena *arena;
	Diag *diag;
	const char *src;
	size_t len;
	AstProgram *prog;
	AstStmt *tail;
	/* lexer position */
	int line, col;
	size_t off;
	/* the token the lexer returned last, for syntax errors */
	int tok, prev_tok;
	size_t tok_off;
	Loc tok_loc;
	size_t cur_off;
	Loc end;        // just after the last token: where end of file is reported
	Loc prev_end;   // just after the token before it
	int at_stmt;    // the last token started a statement (nothing, ';' or '}' before)
	int depth;      // braces open
	int held;       // a '}' held back behind a ';' handed to the parser in its place
	int inserted;   // that ';' is the token the parser has now
	int quiet;      // a syntax error since the last ';', '{' or '}': the parser is
	                // skipping, and a ';' it takes from the lexer is no news
	Loc held_loc;
	size_t held_off;
} AstParse;

/* Parses src into a syntax tree, reporting syntax errors to d.  Never NULL. */
AstProgram *ast_parse(Arena *a, Diag *d, const char *src, size_t len);

/* Builders for the grammar's actions. */
AstStmt *ast_stmt(AstParse *ps, int kind, Loc loc, Loc span);
void ast_append(AstParse *ps, AstStmt *s);
Loc ast_span(Loc first, Loc last);
AstVec *ast_vec_push(AstParse *ps, AstVec *v, const void *elem, size_t size);
void *ast_vec_take(AstParse *ps, AstVec *v, int *n); // arena copy; frees v
void ast_vec_free(AstVec *v);
void ast_syntax_error(AstParse *ps, Loc loc, const char *msg);

extern const char *const ast_kind_names[AST_COUNT]; // the statement keywords

#endif
