/* How edges between stages travel, as far as the program says: the `peers` setting
 * (docs/language.md, "peers"), which decides whether an edge whose two stages share a
 * rank is handed over in memory through the peer table (local, the default) or sent to
 * self through the communicator (self_send).  Kept apart from check.c so that the
 * statement's words live in one table that the checker, the command line and the help
 * all read. */
#include <string.h>

#include "ast.h"
#include "program.h"

const char *const prog_same_rank_names[SAME_RANK_COUNT] = {"local", "self-send"};

/* The language spells the words with '_' (a name), the command line with '-'. */
static const char *const peers_words[SAME_RANK_COUNT] = {"local", "self_send"};

void front_peers(Diag *d, Program *p, const AstStmt *s)
{
	for (int k = 0; k < SAME_RANK_COUNT; k++)
		if (strcmp(s->name.s, peers_words[k]) == 0) {
			p->same_rank = k;
			p->same_rank_loc = s->name.loc;
			return;
		}
	const char *sug = diag_suggest(s->name.s, peers_words, SAME_RANK_COUNT);
	if (sug)
		diag_error(d, s->name.loc, "unknown peers setting '%s'; did you mean '%s'?", s->name.s,
		           sug);
	else
		diag_error(d, s->name.loc, "unknown peers setting '%s': expected 'local' or 'self_send'",
		           s->name.s);
}
