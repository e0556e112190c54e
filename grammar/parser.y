%code top {
/* The grammar of .pipe files: a pure, reentrant LALR(1) parser whose actions only
 * build the syntax tree of ast.h; every rule about meaning (which names exist, which
 * numbers are in range, which words are allowed where) lives in compiler/check.c.
 *
 * Error recovery works per statement: a syntax error inside a statement skips to its
 * ';', to the '}' that closes its block or to the next statement keyword (keywords are
 * reserved, so one can only start a statement), and keeps the statement as `bad`, so
 * the checker knows it was there and does not report it missing; an unreadable
 * statement start is dropped up to the same points, a run of stray '}' with it.  Every
 * error rule ends in yyerrok, so the next mistake is reported however close it is
 * (bison would otherwise stay quiet for three tokens).  That is safe because each one
 * reduces only once it is past the junk: a rule that ends in ';' or '}' reduces as soon as
 * that token is shifted (its state holds nothing else, and lr.default-reduction
 * consistent reduces such states without a lookahead), and a rule that ends at the
 * error or at a run of '}' reduces only when the next token can follow it (its state also
 * shifts, so it has no default reduction).  A `KEYWORD error` rule has both forms, so it skips
 * the rest of its statement.
 *
 * Lists grow in malloc'd AstVecs on the parser's stack, freed by %destructor when
 * recovery pops them, and copied into the arena once complete.  LAC keeps the
 * "expected ..." part of each message exact. */
}

%code requires {
#include "ast.h"
}

%code provides {
int pclex(PCSTYPE *val, PCLTYPE *loc, void *scanner);
}

%code {
#include <string.h>

/* A rule's location: from its first symbol's start to its last symbol's end when both
 * are on one line, else the first symbol's; an empty rule sits just after the symbol
 * before it. */
#define YYLLOC_DEFAULT(Cur, Rhs, N)                                  \
	do {                                                         \
		if (N)                                               \
			(Cur) = ast_span(YYRHSLOC(Rhs, 1), YYRHSLOC(Rhs, N)); \
		else                                                 \
			(Cur) = (Loc){YYRHSLOC(Rhs, 0).line,             \
				YYRHSLOC(Rhs, 0).col + YYRHSLOC(Rhs, 0).len, 0}; \
	} while (0)

static void pcerror(Loc *loc, void *scanner, AstParse *ps, const char *msg)
{
	(void)scanner;
	ast_syntax_error(ps, *loc, msg);
}


static AstStmt *bad(AstParse *ps, int kind, Loc loc)
{
	AstStmt *s = ast_stmt(ps, kind, loc, loc);
	s->bad = 1;
	return s;
}
}

%define api.pure full
%define api.prefix {pc}
%define api.token.prefix {TOK_}
%define api.location.type {Loc}
%define parse.error custom
%define parse.lac full
%locations
%expect 0
%define lr.default-reduction consistent
%parse-param {void *scanner} {AstParse *ps}
%lex-param {void *scanner}

%union {
	AstName name;
	AstNum num;
	AstShape shape;
	AstKv kv;
	AstArg arg;
	AstLayer layer;
	AstRank rank;
	AstStmt *stmt;
	AstVec *vec;
}

%token <name> IDENT "name"
%token <num> NUMBER "number"
%token <shape> SHAPE "shape ROWSxCOLS"
%token <name> ACTION "action"
%token <name> STRING "string"
%token ARROW "'->'"
%token PIPELINE "'pipeline'"
%token MESH "'mesh'"
%token MICROBATCHES "'microbatches'"
%token INPUT "'input'"
%token STAGE "'stage'"
%token SKIP "'skip'"
%token SCHEDULE "'schedule'"
%token PLACEMENT "'placement'"
%token COST "'cost'"
%token LINK "'link'"
%token DEVICES "'devices'"
%token PEERS "'peers'"
%token ROUTE "'route'"
%token BLOCK "'block'"
%token OPTIMIZER "'optimizer'"
%token DEVICE "'device'"
%token RECOMPUTE "'recompute'"
%token PRECISION "'precision'"
%token MODEL "'model'"
%token STAGES "'stages'"

/* An error rule without its ';' or '}' ends at the next statement keyword (or the end
 * of file) but leaves a ';' to the rule that wants it. */
%precedence RECOVER
%precedence ';'

%type <stmt> stmt peers route
%type <vec> kvs layers args list nums ranks acts
%type <num> num
%type <kv> kv
%type <arg> arg
%type <layer> layer
%type <rank> rank

%destructor { ast_vec_free($$); } <vec>

%%

program
	: %empty
	| program stmt  { ast_append(ps, $2); }
	;

stmt
	: ';'  { $$ = NULL; }
	| PIPELINE IDENT ';'  {
		$$ = ast_stmt(ps, AST_PIPELINE, @1, ast_span(@1, @2));
		$$->name = $2;
	}
	| MESH kvs ';'  {
		$$ = ast_stmt(ps, AST_MESH, @1, ast_span(@1, @2));
		$$->kvs = ast_vec_take(ps, $2, &$$->nkvs);
	}
	| MICROBATCHES num ';'  {
		$$ = ast_stmt(ps, AST_MICROBATCHES, @1, ast_span(@1, @2));
		$$->num = $2;
	}
	| MICROBATCHES IDENT ';'  {
		$$ = ast_stmt(ps, AST_MICROBATCHES, @1, ast_span(@1, @2));
		$$->name = $2;
	}
	| INPUT SHAPE kvs ';'  {
		$$ = ast_stmt(ps, AST_INPUT, @1, ast_span(@1, @2));
		$$->shape = $2;
		$$->kvs = ast_vec_take(ps, $3, &$$->nkvs);
	}
	| INPUT IDENT SHAPE kvs ';'  {
		$$ = ast_stmt(ps, AST_INPUT, @1, ast_span(@1, @4));
		$$->name3 = $2;
		$$->shape = $3;
		$$->kvs = ast_vec_take(ps, $4, &$$->nkvs);
	}
	| BLOCK IDENT '{' layers '}'  {
		$$ = ast_stmt(ps, AST_BLOCK, @1, ast_span(@1, @2));
		$$->name = $2;
		$$->layers = ast_vec_take(ps, $4, &$$->nlayers);
	}
	| BLOCK IDENT '{' layers error '}'  {
		$$ = ast_stmt(ps, AST_BLOCK, @1, ast_span(@1, @2));
		$$->name = $2;
		$$->layers = ast_vec_take(ps, $4, &$$->nlayers);
		$$->bad = 1;
		yyerrok;
	}
	| OPTIMIZER IDENT kvs ';'  {
		$$ = ast_stmt(ps, AST_OPTIMIZER, @1, ast_span(@1, @3));
		$$->name = $2;
		$$->kvs = ast_vec_take(ps, $3, &$$->nkvs);
	}
	| DEVICE kvs ';'  {
		$$ = ast_stmt(ps, AST_DEVICE, @1, ast_span(@1, @2));
		$$->kvs = ast_vec_take(ps, $2, &$$->nkvs);
	}
	| PRECISION IDENT ';'  {
		$$ = ast_stmt(ps, AST_PRECISION, @1, ast_span(@1, @2));
		$$->name = $2;
	}
	| RECOMPUTE IDENT kvs ';'  {
		$$ = ast_stmt(ps, AST_RECOMPUTE, @1, ast_span(@1, @2));
		$$->name = $2;
		$$->kvs = ast_vec_take(ps, $3, &$$->nkvs);
	}
	| RECOMPUTE '*' kvs ';'  {
		$$ = ast_stmt(ps, AST_RECOMPUTE, @1, ast_span(@1, @2));
		$$->name = (AstName){"*", @2};
		$$->kvs = ast_vec_take(ps, $3, &$$->nkvs);
	}
	| STAGE IDENT '{' layers '}'  {
		$$ = ast_stmt(ps, AST_STAGE, @1, ast_span(@1, @2));
		$$->name = $2;
		$$->layers = ast_vec_take(ps, $4, &$$->nlayers);
	}
	| STAGE IDENT '{' layers error '}'  {
		$$ = ast_stmt(ps, AST_STAGE, @1, ast_span(@1, @2));
		$$->name = $2;
		$$->layers = ast_vec_take(ps, $4, &$$->nlayers);
		$$->bad = 1;
		yyerrok;
	}
	| STAGE IDENT '{' layers error %prec RECOVER  {
		$$ = ast_stmt(ps, AST_STAGE, @1, ast_span(@1, @2));
		$$->name = $2;
		$$->layers = ast_vec_take(ps, $4, &$$->nlayers);
		$$->bad = 1;
		yyerrok;
	}
	| MODEL '{' layers '}'  {
		$$ = ast_stmt(ps, AST_MODEL, @1, @1);
		$$->layers = ast_vec_take(ps, $3, &$$->nlayers);
	}
	| MODEL '{' layers error '}'  {
		$$ = ast_stmt(ps, AST_MODEL, @1, @1);
		$$->layers = ast_vec_take(ps, $3, &$$->nlayers);
		$$->bad = 1;
		yyerrok;
	}
	| MODEL '{' layers error %prec RECOVER  {
		$$ = ast_stmt(ps, AST_MODEL, @1, @1);
		$$->layers = ast_vec_take(ps, $3, &$$->nlayers);
		$$->bad = 1;
		yyerrok;
	}
	| STAGES IDENT ';'  {
		$$ = ast_stmt(ps, AST_STAGES, @1, ast_span(@1, @2));
		$$->name = $2;
	}
	| STAGES num ';'  {
		$$ = ast_stmt(ps, AST_STAGES, @1, ast_span(@1, @2));
		$$->num = $2;
	}
	| SKIP IDENT ARROW IDENT ';'  {
		$$ = ast_stmt(ps, AST_SKIP, @1, ast_span(@1, @4));
		$$->name = $2;
		$$->name2 = $4;
	}
	| SCHEDULE IDENT ';'  {
		$$ = ast_stmt(ps, AST_SCHEDULE, @1, ast_span(@1, @2));
		$$->name = $2;
	}
	| SCHEDULE IDENT STRING ';'  {
		$$ = ast_stmt(ps, AST_SCHEDULE, @1, ast_span(@1, @3));
		$$->name = $2;
		$$->str = $3;
	}
	| SCHEDULE IDENT '{' ranks '}'  {
		$$ = ast_stmt(ps, AST_SCHEDULE, @1, ast_span(@1, @2));
		$$->name = $2;
		$$->has_body = 1;
		$$->ranks = ast_vec_take(ps, $4, &$$->nranks);
	}
	| SCHEDULE IDENT '{' ranks error '}'  {
		$$ = ast_stmt(ps, AST_SCHEDULE, @1, ast_span(@1, @2));
		$$->name = $2;
		$$->has_body = 1;
		$$->ranks = ast_vec_take(ps, $4, &$$->nranks);
		$$->bad = 1;
		yyerrok;
	}
	| SCHEDULE IDENT '{' ranks error %prec RECOVER  {
		$$ = ast_stmt(ps, AST_SCHEDULE, @1, ast_span(@1, @2));
		$$->name = $2;
		$$->has_body = 1;
		$$->ranks = ast_vec_take(ps, $4, &$$->nranks);
		$$->bad = 1;
		yyerrok;
	}
	| PLACEMENT IDENT ';'  {
		$$ = ast_stmt(ps, AST_PLACEMENT, @1, ast_span(@1, @2));
		$$->name = $2;
	}
	| PLACEMENT list ';'  {
		$$ = ast_stmt(ps, AST_PLACEMENT, @1, ast_span(@1, @2));
		$$->has_list = 1;
		$$->list_loc = @2;
		$$->nums = ast_vec_take(ps, $2, &$$->nnums);
	}
	| COST IDENT kvs ';'  {
		$$ = ast_stmt(ps, AST_COST, @1, ast_span(@1, @3));
		$$->name = $2;
		$$->kvs = ast_vec_take(ps, $3, &$$->nkvs);
	}
	| COST '*' kvs ';'  {
		$$ = ast_stmt(ps, AST_COST, @1, ast_span(@1, @3));
		$$->name = (AstName){"*", @2};
		$$->kvs = ast_vec_take(ps, $3, &$$->nkvs);
	}
	| LINK kvs ';'  {
		$$ = ast_stmt(ps, AST_LINK, @1, ast_span(@1, @2));
		$$->kvs = ast_vec_take(ps, $2, &$$->nkvs);
	}
	| DEVICES kvs ';'  {
		$$ = ast_stmt(ps, AST_DEVICES, @1, ast_span(@1, @2));
		$$->kvs = ast_vec_take(ps, $2, &$$->nkvs);
	}
	| DEVICES list ';'  {
		$$ = ast_stmt(ps, AST_DEVICES, @1, ast_span(@1, @2));
		$$->has_list = 1;
		$$->list_loc = @2;
		$$->nums = ast_vec_take(ps, $2, &$$->nnums);
	}
	| peers
	| route
	| PIPELINE error ';'  { $$ = bad(ps, AST_PIPELINE, @1); yyerrok; }
	| PIPELINE error %prec RECOVER  { $$ = bad(ps, AST_PIPELINE, @1); yyerrok; }
	| MESH error ';'  { $$ = bad(ps, AST_MESH, @1); yyerrok; }
	| MESH error %prec RECOVER  { $$ = bad(ps, AST_MESH, @1); yyerrok; }
	| MICROBATCHES error ';'  { $$ = bad(ps, AST_MICROBATCHES, @1); yyerrok; }
	| MICROBATCHES error %prec RECOVER  { $$ = bad(ps, AST_MICROBATCHES, @1); yyerrok; }
	| INPUT error ';'  { $$ = bad(ps, AST_INPUT, @1); yyerrok; }
	| INPUT error %prec RECOVER  { $$ = bad(ps, AST_INPUT, @1); yyerrok; }
	| STAGE error ';'  { $$ = bad(ps, AST_STAGE, @1); yyerrok; }
	| STAGE error %prec RECOVER  { $$ = bad(ps, AST_STAGE, @1); yyerrok; }
	| SKIP error ';'  { $$ = bad(ps, AST_SKIP, @1); yyerrok; }
	| SKIP error %prec RECOVER  { $$ = bad(ps, AST_SKIP, @1); yyerrok; }
	| SCHEDULE error ';'  { $$ = bad(ps, AST_SCHEDULE, @1); yyerrok; }
	| SCHEDULE error %prec RECOVER  { $$ = bad(ps, AST_SCHEDULE, @1); yyerrok; }
	| PLACEMENT error ';'  { $$ = bad(ps, AST_PLACEMENT, @1); yyerrok; }
	| PLACEMENT error %prec RECOVER  { $$ = bad(ps, AST_PLACEMENT, @1); yyerrok; }
	| COST error ';'  { $$ = bad(ps, AST_COST, @1); yyerrok; }
	| COST error %prec RECOVER  { $$ = bad(ps, AST_COST, @1); yyerrok; }
	| LINK error ';'  { $$ = bad(ps, AST_LINK, @1); yyerrok; }
	| LINK error %prec RECOVER  { $$ = bad(ps, AST_LINK, @1); yyerrok; }
	| DEVICES error ';'  { $$ = bad(ps, AST_DEVICES, @1); yyerrok; }
	| DEVICES error %prec RECOVER  { $$ = bad(ps, AST_DEVICES, @1); yyerrok; }
	| BLOCK error ';'  { $$ = bad(ps, AST_BLOCK, @1); yyerrok; }
	| BLOCK error %prec RECOVER  { $$ = bad(ps, AST_BLOCK, @1); yyerrok; }
	| OPTIMIZER error ';'  { $$ = bad(ps, AST_OPTIMIZER, @1); yyerrok; }
	| OPTIMIZER error %prec RECOVER  { $$ = bad(ps, AST_OPTIMIZER, @1); yyerrok; }
	| DEVICE error ';'  { $$ = bad(ps, AST_DEVICE, @1); yyerrok; }
	| RECOMPUTE error ';'  { $$ = bad(ps, AST_RECOMPUTE, @1); yyerrok; }
	| RECOMPUTE error %prec RECOVER  { $$ = bad(ps, AST_RECOMPUTE, @1); yyerrok; }
	| DEVICE error %prec RECOVER  { $$ = bad(ps, AST_DEVICE, @1); yyerrok; }
	| MODEL error ';'  { $$ = bad(ps, AST_MODEL, @1); yyerrok; }
	| MODEL error %prec RECOVER  { $$ = bad(ps, AST_MODEL, @1); yyerrok; }
	| STAGES error ';'  { $$ = bad(ps, AST_STAGES, @1); yyerrok; }
	| STAGES error %prec RECOVER  { $$ = bad(ps, AST_STAGES, @1); yyerrok; }
	| PRECISION error ';'  { $$ = bad(ps, AST_PRECISION, @1); yyerrok; }
	| PRECISION error %prec RECOVER  { $$ = bad(ps, AST_PRECISION, @1); yyerrok; }
	| error ';'           { $$ = NULL; yyerrok; }
	| error braces       { $$ = NULL; yyerrok; }
	| error %prec RECOVER { $$ = NULL; yyerrok; }
	;

/* A stated route of one edge, one direction (compiler/route.c checks it). */
route
	: ROUTE IDENT ARROW IDENT IDENT NUMBER ':' IDENT ARROW NUMBER ':' IDENT ';'  {
		$$ = ast_stmt(ps, AST_ROUTE, @1, ast_span(@1, @12));
		$$->name = $2;
		$$->name2 = $4;
		$$->route = arena_alloc(ps->arena, sizeof *$$->route);
		*$$->route = (AstRoute){.dir = $5, .rank = {$6, $10}, .dev = {$8, $12},
		                        .end = {ast_span(@6, @8), ast_span(@10, @12)}};
	}
	| ROUTE error ';'  { $$ = bad(ps, AST_ROUTE, @1); yyerrok; }
	| ROUTE error %prec RECOVER  { $$ = bad(ps, AST_ROUTE, @1); yyerrok; }
	;

/* How edges between stages on one rank go (compiler/route.c checks the word). */
peers
	: PEERS IDENT ';'  {
		$$ = ast_stmt(ps, AST_PEERS, @1, ast_span(@1, @2));
		$$->name = $2;
	}
	| PEERS error ';'  { $$ = bad(ps, AST_PEERS, @1); yyerrok; }
	| PEERS error %prec RECOVER  { $$ = bad(ps, AST_PEERS, @1); yyerrok; }
	;

/* A run of stray '}' is one mistake. */
braces
	: '}'
	| braces '}'
	;

num
	: NUMBER      { $$ = $1; }
	| '-' NUMBER  { $$ = $2; $$.neg = 1; $$.loc = ast_span(@1, @2); }
	;

kvs
	: %empty  { $$ = NULL; }
	| kvs kv  { $$ = ast_vec_push(ps, $1, &$2, sizeof $2); }
	;

kv
	: IDENT '=' num  { $$ = (AstKv){.key = $1, .val = $3, .has_val = 1, .loc = @$}; }
	| IDENT '=' IDENT  { $$ = (AstKv){.key = $1, .word = $3, .has_val = 1, .loc = @$,
	                                  .val = {.digits = "", .unit = $3.s, .loc = $3.loc}}; }
	| IDENT          { $$ = (AstKv){.key = $1, .loc = @$}; }
	;

list
	: '[' ']'       { $$ = NULL; }
	| '[' nums ']'  { $$ = $2; }
	;

nums
	: num           { $$ = ast_vec_push(ps, NULL, &$1, sizeof $1); }
	| nums ',' num  { $$ = ast_vec_push(ps, $1, &$3, sizeof $3); }
	;

layers
	: %empty        { $$ = NULL; }
	| layers layer  { $$ = ast_vec_push(ps, $1, &$2, sizeof $2); }
	;

layer
	: IDENT args ';'  {
		$$ = (AstLayer){.name = $1, .loc = ast_span(@1, @2)};
		$$.args = ast_vec_take(ps, $2, &$$.nargs);
	}
	| IDENT args '{' layers '}'  {
		$$ = (AstLayer){.name = $1, .loc = ast_span(@1, @2), .has_body = 1};
		$$.args = ast_vec_take(ps, $2, &$$.nargs);
		$$.layers = ast_vec_take(ps, $4, &$$.nlayers);
	}
	| error ';'  { $$ = (AstLayer){.loc = @$}; yyerrok; }
	;

args
	: %empty    { $$ = NULL; }
	| args arg  { $$ = ast_vec_push(ps, $1, &$2, sizeof $2); }
	;

arg
	: num    { $$ = (AstArg){.num = $1, .loc = @$}; }
	| IDENT  { $$ = (AstArg){.is_name = 1, .name = $1, .loc = @$}; }
	| IDENT '=' num  {
		$$ = (AstArg){.is_name = 1, .has_val = 1, .name = $1, .num = $3, .loc = @$};
	}
	;

ranks
	: %empty      { $$ = NULL; }
	| ranks rank  { $$ = ast_vec_push(ps, $1, &$2, sizeof $2); }
	;

rank
	: IDENT NUMBER ':' acts ';'  {
		$$ = (AstRank){.word = $1, .index = $2, .loc = ast_span(@1, @2)};
		$$.acts = ast_vec_take(ps, $4, &$$.nacts);
	}
	| error ';'  { $$ = (AstRank){.loc = @$, .bad = 1}; yyerrok; }
	;

acts
	: %empty       { $$ = NULL; }
	| acts ACTION  { $$ = ast_vec_push(ps, $1, &$2, sizeof $2); }
	;

%%
/* Bison's own message ("syntax error, unexpected X, expecting A or B"), but with up to
 * six expected tokens where bison stops at four: a layer's arguments may be followed by
 * a name, a number, '-', '=', ';' or a body's '{'.  ast_syntax_error rewords it. */
static int yyreport_syntax_error(const yypcontext_t *ctx, void *scanner, AstParse *ps)
{
	enum { MAX_EXPECTED = 6 };
	yysymbol_kind_t exp[MAX_EXPECTED];
	char msg[512] = "syntax error";
	size_t n = strlen(msg);
	yysymbol_kind_t tok = yypcontext_token(ctx);
	if (tok != YYSYMBOL_YYEMPTY) {
		n += (size_t)snprintf(msg + n, sizeof msg - n, ", unexpected %s", yysymbol_name(tok));
		int ne = yypcontext_expected_tokens(ctx, exp, MAX_EXPECTED);
		for (int i = 0; i < ne && n < sizeof msg; i++)
			n += (size_t)snprintf(msg + n, sizeof msg - n, "%s%s", i ? " or " : ", expecting ",
			                      yysymbol_name(exp[i]));
	}
	Loc at = *yypcontext_location(ctx);
	pcerror(&at, scanner, ps, msg);
	return 0;
}
