/* The parser's driver and the tree builders its actions call.
 *
 * ast_parse runs flex and bison over one source text and returns the statements as
 * written; the scanner's buffers are freed before it returns, whatever happened.
 * Syntax errors come here from bison as "syntax error, unexpected X, expecting A or B"
 * and leave as "syntax error: unexpected X 'text', expected A or B", with the text of
 * names and numbers quoted.  Two cases read better another way: an unknown word at the
 * start of a statement is an unknown statement (with a suggestion), and a ';' missing
 * at the end of a line is reported where it is missing, after the line's last token,
 * as gcc does: "expected ';' before 'stage'". */
#include "ast.h"
#include "../plan/layer.h"

#include <stdlib.h>
#include <string.h>

#include "parser.h"
#define YYSTYPE PCSTYPE
#define YYLTYPE PCLTYPE
#include "lexer.h"

const char *const ast_kind_names[AST_COUNT] = {
	"pipeline", "mesh", "microbatches", "input", "stage", "skip",
	"schedule", "placement", "cost", "link", "devices", "peers", "route",
	"block", "optimizer", "device", "recompute", "precision", "model", "stages",
};

struct AstVec {
	int n, cap;
	size_t size;
	_Alignas(16) unsigned char data[];
};

AstVec *ast_vec_push(AstParse *ps, AstVec *v, const void *elem, size_t size)
{
	if (!v || v->n == v->cap) {
		int cap = v ? 2 * v->cap : 8;
		if (cap < 0 || (size_t)cap > ((size_t)-1 - sizeof *v) / size)
			die("list too long");
		AstVec *w = realloc(v, sizeof *w + (size_t)cap * size);
		if (!w) // v stays on bison's stack, lost: the tool exits after the report
			arena_oom(ps->arena, sizeof *w + (size_t)cap * size);
		if (!v) {
			w->n = 0;
			w->size = size;
		}
		w->cap = cap;
		v = w;
	}
	if (v->size != size)
		die("list of %zu-byte items pushed a %zu-byte item", v->size, size);
	memcpy(v->data + (size_t)v->n * size, elem, size);
	v->n++;
	return v;
}

void *ast_vec_take(AstParse *ps, AstVec *v, int *n)
{
	*n = v ? v->n : 0;
	if (!v)
		return NULL;
	void *p = arena_alloc(ps->arena, (size_t)v->n * v->size);
	memcpy(p, v->data, (size_t)v->n * v->size);
	free(v);
	return p;
}

void ast_vec_free(AstVec *v)
{
	free(v);
}

AstStmt *ast_stmt(AstParse *ps, int kind, Loc loc, Loc span)
{
	AstStmt *s = arena_alloc(ps->arena, sizeof *s);
	s->kind = kind;
	s->loc = loc;
	s->span = span;
	return s;
}

void ast_append(AstParse *ps, AstStmt *s)
{
	if (!s)
		return;
	if (ps->tail)
		ps->tail->next = s;
	else
		ps->prog->head = s;
	ps->tail = s;
	ps->prog->nstmts++;
}

Loc ast_span(Loc first, Loc last)
{
	Loc l = first;
	if (last.line == first.line && last.col + last.len > first.col + first.len)
		l.len = last.col + last.len - first.col;
	return l;
}

/* Appends src to buf (size n, NUL-terminated), cutting what does not fit. */
static void append(char *buf, size_t n, const char *src, size_t len)
{
	size_t used = strlen(buf);
	if (len > n - 1 - used)
		len = n - 1 - used;
	memcpy(buf + used, src, len);
	buf[used + len] = 0;
}

static int quotes_text(int tok)
{
	return tok == TOK_IDENT || tok == TOK_NUMBER || tok == TOK_SHAPE || tok == TOK_ACTION;
}

/* Whether an "A or B" list of expected tokens has ';'. */
static int expects_semicolon(const char *list)
{
	for (const char *p = list; (p = strstr(p, "';'")); p += 3)
		if ((p == list || p[-1] == ' ') && (p[3] == 0 || p[3] == ' '))
			return 1;
	return 0;
}

void ast_syntax_error(AstParse *ps, Loc loc, const char *msg)
{
	static const char unexpected[] = "syntax error, unexpected ";
	static const char expecting[] = ", expecting ";
	const char *text = ps->src + ps->tok_off;
	int tlen = ps->tok_loc.len > 40 ? 40 : ps->tok_loc.len;

	if (!strcmp(msg, "memory exhausted")) { // bison's stack: YYMAXDEPTH entries
		diag_error(ps->diag, loc, "nested too deeply for the parser (bodies nest at most %d "
		           "deep)", PLAN_NEST_MAX);
		return;
	}
	if (strncmp(msg, unexpected, sizeof unexpected - 1) != 0) { // a bare "syntax error"
		diag_error(ps->diag, loc, "%s", msg);
		return;
	}
	ps->quiet = 1;
	if (ps->at_stmt)
		ps->prog->lost++; // whatever statement this was, it is gone
	if (ps->tok == TOK_IDENT && ps->at_stmt) {
		char word[AST_NAME_MAX + 1];
		snprintf(word, sizeof word, "%.*s", ps->tok_loc.len, text);
		const char *s = diag_suggest(word, ast_kind_names, AST_COUNT);
		if (s)
			diag_error(ps->diag, loc, "unknown statement '%.*s'; did you mean '%s'?",
				tlen, text, s);
		else
			diag_error(ps->diag, loc, "unknown statement '%.*s'", tlen, text);
		return;
	}

	char what[128] = "";
	const char *p = msg + sizeof unexpected - 1;
	const char *e = strstr(p, expecting);
	append(what, sizeof what, p, e ? (size_t)(e - p) : strlen(p));
	if (ps->inserted) { // the ';' the lexer put before a '}' does not fit either
		ps->inserted = 0;
		snprintf(what, sizeof what, "'}'");
		loc = ps->held_loc;
	}
	if (quotes_text(ps->tok)) {
		append(what, sizeof what, " '", 2);
		append(what, sizeof what, text, (size_t)tlen);
		append(what, sizeof what, "'", 1);
	}
	if (e && expects_semicolon(e + sizeof expecting - 1) &&
		ps->tok_loc.line > ps->prev_end.line) {
		diag_error(ps->diag, ps->prev_end, "syntax error: expected ';' before %s", what);
		return;
	}

	char out[512] = "syntax error: unexpected ";
	append(out, sizeof out, what, strlen(what));
	if (!e && ps->at_stmt)
		append(out, sizeof out, ", expected a statement", 22);
	if (e) {
		/* "A or B or C" reads "A, B or C" */
		append(out, sizeof out, ", expected ", 11);
		p = e + sizeof expecting - 1;
		for (;;) {
			const char *o = strstr(p, " or ");
			if (!o) {
				append(out, sizeof out, p, strlen(p));
				break;
			}
			append(out, sizeof out, p, (size_t)(o - p));
			const char *sep = strstr(o + 4, " or ") ? ", " : " or ";
			append(out, sizeof out, sep, strlen(sep));
			p = o + 4;
		}
	}
	diag_error(ps->diag, loc, "%s", out);
}

AstProgram *ast_parse(Arena *a, Diag *d, const char *src, size_t len)
{
	AstProgram *prog = arena_alloc(a, sizeof *prog);
	AstParse ps = {
		.arena = a,
		.diag = d,
		.src = src,
		.len = len,
		.prog = prog,
		.line = 1,
		.col = 1,
		.end = {1, 1, 1},
	};
	yyscan_t scanner;
	if (pclex_init_extra(&ps, &scanner)) // only out of memory makes it fail
		arena_oom(a, 0);
	YY_BUFFER_STATE buf = pc_scan_bytes(src, (int)len, scanner);
	if (pcparse(scanner, &ps) != 0)
		prog->lost++; // gave up (out of stack): what follows is lost

	pc_delete_buffer(buf, scanner);
	pclex_destroy(scanner);
	return prog;
}
