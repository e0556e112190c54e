/* Diagnostics in gcc's format: a `file:line:col: error: message` line, the source line
 * quoted after one space, and a caret line underlining the span.
 *
 * The caret line copies the tabs of the quoted line, so the caret sits under the right
 * byte whatever the reader's tab width; UTF-8 continuation bytes take no room there, so
 * one character before the caret is one space.  Control bytes in the quoted line are
 * shown as '?' so binary input cannot garble a terminal, and a line longer than
 * QUOTE_MAX bytes is shown as a window around the column, cut ends marked "...".
 *
 * A value given on the command line instead of in the file (Loc.line DIAG_CMDLINE) is
 * shown as `<command line>: error: message`, the options' text quoted with the caret
 * under the value.
 *
 * Errors are counted; past max_errors they are counted but not printed, with one line
 * saying so, and notes follow the fate of their error.  An error the same as one printed
 * before, word for word and place for place, is neither printed nor counted again.
 * Warnings are counted apart and printed until the errors pass the limit.  With a sink
 * (Diag.sink) every message that would be printed goes to it whole instead, as an object. */
#include "diag.h"
#include "../plan/checksum.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { QUOTE_MAX = 200 };

void diag_init(Diag *d, const char *file, const char *src, size_t len, FILE *out)
{
	*d = (Diag){.file = file, .src = src, .srclen = len, .out = out ? out : stderr};
}

static int error_limit(const Diag *d)
{
	return d->max_errors > 0 ? d->max_errors : DIAG_MAX_ERRORS;
}

/* Line `line` of the source, its length without the line end; NULL past the end. */
static const char *find_line(const Diag *d, int line, size_t *n)
{
	if (!d->src || line < 1)
		return NULL;
	const char *s = d->src, *end = d->src + d->srclen;
	for (int i = 1; i < line; i++) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		if (!nl)
			return NULL;
		s = nl + 1;
	}
	if (s == end && line > 1)
		return NULL; // the empty "line" after a final newline
	const char *nl = memchr(s, '\n', (size_t)(end - s));
	*n = (size_t)((nl ? nl : end) - s);
	if (*n > 0 && s[*n - 1] == '\r')
		(*n)--;
	return s;
}

/* The quoted line and the caret line under loc: a line of the source, or of the
 * command line's text for a value given there. */
static void quote(const Diag *d, Loc loc)
{
	size_t n;
	const char *s;
	if (loc.line == DIAG_CMDLINE) {
		s = d->cmdline;
		n = s ? strlen(s) : 0;
	} else {
		s = find_line(d, loc.line, &n);
	}
	if (!s || loc.col < 1)
		return;
	size_t col = (size_t)loc.col - 1;
	if (col > n)
		col = n;
	size_t len = loc.len > 1 ? (size_t)loc.len : 1;

	size_t from = 0, to = n;
	if (n > QUOTE_MAX) {
		from = col > QUOTE_MAX / 2 ? col - QUOTE_MAX / 2 : 0;
		while (from < col && ((unsigned char)s[from] & 0xc0) == 0x80)
			from++;
		to = from + QUOTE_MAX < n ? from + QUOTE_MAX : n;
	}
	FILE *f = d->out;
	fputs(from > 0 ? " ..." : " ", f);
	for (size_t i = from; i < to; i++) {
		unsigned char c = (unsigned char)s[i];
		fputc(c == '\t' || (c >= ' ' && c != 0x7f) ? c : '?', f);
	}
	fputs(to < n ? "...\n" : "\n", f);

	fputs(from > 0 ? "    " : " ", f);
	for (size_t i = from; i < col; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\t')
			fputc('\t', f);
		else if ((c & 0xc0) != 0x80)
			fputc(' ', f);
	}
	fputc('^', f);
	size_t end = col + len < to ? col + len : to;
	for (size_t i = col + 1; i < end; i++)
		fputc('~', f);
	fputc('\n', f);
}

static const char *const kind_names[DIAG_KIND_COUNT] = {"error", "warning", "note"};

/* The message to the sink, whole, in place of the printed lines. */
static void to_sink(Diag *d, Loc loc, DiagKind kind, const char *fmt, va_list ap)
{
	char msg[2048];
	vsnprintf(msg, sizeof msg, fmt, ap);
	DiagMsg m = {kind, loc.line == DIAG_CMDLINE ? "<command line>" : d->file, loc, msg};
	d->sink(d->sink_ctx, &m);
}

static void report(Diag *d, Loc loc, DiagKind k, const char *fmt, va_list ap)
{
	if (d->sink) {
		to_sink(d, loc, k, fmt, ap);
		return;
	}
	const char *kind = kind_names[k];
	FILE *f = d->out ? d->out : stderr;
	d->out = f;
	if (loc.line == DIAG_CMDLINE)
		fprintf(f, "<command line>: %s: ", kind);
	else if (loc.line > 0 && loc.col > 0)
		fprintf(f, "%s:%d:%d: %s: ", d->file, loc.line, loc.col, kind);
	else if (loc.line > 0)
		fprintf(f, "%s:%d: %s: ", d->file, loc.line, kind);
	else
		fprintf(f, "%s: %s: ", d->file, kind);
	vfprintf(f, fmt, ap);
	fputc('\n', f);
	quote(d, loc);
}

/* FNV-1a (the plan checksum's, plan/checksum.h) over the place and the text of a
 * message. */
static uint64_t message_hash(Loc loc, const char *msg)
{
	int at[3] = {loc.line, loc.col, loc.len};
	uint64_t h = plan_fnv1a(PLAN_FNV_OFFSET, (const char *)at, sizeof at);
	return plan_fnv1a(h, msg, strlen(msg));
}

/* Whether the error msg at loc was printed before; remembers it if not. */
static int repeated(Diag *d, Loc loc, const char *msg)
{
	uint64_t h = message_hash(loc, msg);
	for (int i = 0; i < d->nseen; i++)
		if (d->seen[i] == h)
			return 1;
	if (d->nseen < DIAG_MAX_ERRORS)
		d->seen[d->nseen++] = h;
	return 0;
}

static void print(Diag *d, Loc loc, DiagKind kind, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	report(d, loc, kind, fmt, ap);
	va_end(ap);
}

void diag_error(Diag *d, Loc loc, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	d->muted = repeated(d, loc, msg);
	if (d->muted)
		return;
	d->nerrors++;
	d->ncmdline_errors += loc.line == DIAG_CMDLINE;
	if (d->nerrors > error_limit(d)) {
		if (d->nerrors == error_limit(d) + 1 && !d->sink)
			fputs("too many errors, stopping\n", d->out ? d->out : stderr);
		return;
	}
	print(d, loc, DIAG_ERROR, "%s", msg);
}

void diag_warning(Diag *d, Loc loc, const char *fmt, ...)
{
	d->nwarnings++;
	d->muted = 0;
	if (d->nerrors > error_limit(d))
		return;
	va_list ap;
	va_start(ap, fmt);
	report(d, loc, DIAG_WARNING, fmt, ap);
	va_end(ap);
}

void diag_note(Diag *d, Loc loc, const char *fmt, ...)
{
	if (d->nerrors > error_limit(d) || d->muted)
		return;
	va_list ap;
	va_start(ap, fmt);
	report(d, loc, DIAG_NOTE, fmt, ap);
	va_end(ap);
}

static int lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* Levenshtein distance, letters compared without case (`1F1B` is `1f1b`), with one row;
 * gives up (returns limit + 1) once the row's minimum passes limit, so long unrelated
 * names cost little.  The row is on the stack: the names suggested are short (the
 * registries' and the program's, AST_NAME_MAX at most), so a suggestion never needs the
 * heap. */
static size_t distance(const char *a, const char *b, size_t limit)
{
	size_t n = strlen(a), m = strlen(b);
	size_t row[DIAG_SUGGEST_MAX + 1];
	if ((n > m ? n - m : m - n) > limit || m > DIAG_SUGGEST_MAX)
		return limit + 1;
	for (size_t j = 0; j <= m; j++)
		row[j] = j;
	for (size_t i = 1; i <= n; i++) {
		size_t diag = row[0], best = i;
		row[0] = i;
		for (size_t j = 1; j <= m; j++) {
			size_t up = row[j];
			size_t v = diag + (lower(a[i - 1]) != lower(b[j - 1]));
			if (up + 1 < v)
				v = up + 1;
			if (row[j - 1] + 1 < v)
				v = row[j - 1] + 1;
			row[j] = v;
			diag = up;
			if (v < best)
				best = v;
		}
		if (best > limit)
			return limit + 1;
	}
	return row[m];
}

/* The one name of names[0..n) that s abbreviates, case aside: s (two letters or more)
 * begins it and is its first part (`kv` for `kv_heads`) or half of it at least; NULL
 * if none or several. */
static const char *completion(const char *s, const char *const *names, int n)
{
	size_t len = strlen(s);
	const char *found = NULL;
	for (int i = 0; i < n && len >= 2; i++) {
		size_t k = 0;
		while (names[i] && k < len && lower(s[k]) == lower(names[i][k]))
			k++;
		if (k == len && names[i][k] && (names[i][k] == '_' || 2 * len >= strlen(names[i]))) {
			if (found)
				return NULL;
			found = names[i];
		}
	}
	return found;
}

const char *diag_suggest(const char *s, const char *const *names, int n)
{
	size_t limit = strlen(s) / 3;
	if (limit < 1)
		limit = 1;
	const char *best = NULL;
	size_t bestd = limit + 1;
	for (int i = 0; i < n; i++) {
		if (!names[i])
			continue;
		size_t dist = distance(s, names[i], limit);
		if (dist < bestd) {
			best = names[i];
			bestd = dist;
		}
	}
	return best ? best : completion(s, names, n);
}

_Noreturn void die_at(const char *file, int line, const char *fmt, ...)
{
	fflush(stdout);
	fprintf(stderr, "pipecc: internal error at %s:%d: ", file, line);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}
