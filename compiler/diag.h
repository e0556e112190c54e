/* Diagnostics for user input, printed as gcc does:
 *   file:line:col: error: message
 *    line text
 *        ^~~~
 * Errors are counted, not fatal; after max_errors further ones are dropped with one
 * notice.  An error repeated word for word at the same place (a layer in a block that
 * part.c copied into many stages) is printed and counted once.  Internal bugs are not
 * diagnostics: they go through die(). */
#ifndef DIAG_H
#define DIAG_H

#define DIAG_MAX_ERRORS 20 // errors printed before the rest are only counted
#define DIAG_SUGGEST_MAX 256 // names longer than this get no "did you mean"

#include <stdint.h>
#include <stdio.h>

typedef struct {
	int line, col; // 1-based; 0 when unknown; line DIAG_CMDLINE: on the command line
	int len;       // columns to underline, at least 1
} Loc;

/* Loc.line of a value given on the command line rather than in the file: col and len
 * then mark its span in Diag.cmdline, which the message quotes instead of a source
 * line, under the name "<command line>". */
#define DIAG_CMDLINE (-1)

/* What a message is, for a sink (below). */
typedef enum {
	DIAG_ERROR,   // the input is wrong; the compilation fails
	DIAG_WARNING, // worth saying, never failing the run
	DIAG_NOTE,    // more about the message before it
	DIAG_KIND_COUNT
} DiagKind;

/* A message as a sink receives it: file is "<command line>" for a value given there
 * (loc.line DIAG_CMDLINE), msg the text without place or kind. */
typedef struct {
	DiagKind kind;
	const char *file;
	Loc loc;
	const char *msg;
} DiagMsg;
/* Receives each message that would be printed (the same ones, in the same order),
 * instead of printing it: the library (include/pipecc.h) keeps them as objects. */
typedef void DiagSink(void *ctx, const DiagMsg *m);

typedef struct {
	const char *file;  // name shown in messages
	const char *src;   // whole source text, for the quoted line
	size_t srclen;
	FILE *out;         // where messages go (stderr by default)
	int nerrors;
	int max_errors;    // 0 means DIAG_MAX_ERRORS
	int nwarnings;
	int ncmdline_errors; // of nerrors, those located on the command line
	int noom;          // of nerrors, out of memory (a pass that failed for want of
	                   // memory, not for anything in the program: lower_program)
	const char *cmdline; // the options standing in for the file's statements, as text
	uint64_t seen[DIAG_MAX_ERRORS]; // the errors printed, hashed with their place
	int nseen;
	int muted;         // the last error repeated one printed: its notes are dropped
	DiagSink *sink;    // not NULL: messages go to sink(sink_ctx, ...), not to out
	void *sink_ctx;
} Diag;

void diag_init(Diag *d, const char *file, const char *src, size_t len, FILE *out);
void diag_error(Diag *d, Loc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A warning: printed like an error, counted apart, never failing the run. */
void diag_warning(Diag *d, Loc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void diag_note(Diag *d, Loc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The closest of names[0..n) to s by edit distance with case ignored, else the one name
 * s abbreviates, or NULL if none is close. */
const char *diag_suggest(const char *s, const char *const *names, int n);

_Noreturn void die_at(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)
#define unreachable() die_at(__FILE__, __LINE__, "unreachable")

#endif
