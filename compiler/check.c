/* The checker: turns the syntax tree into a Program, or reports why it cannot.
 *
 * It walks the statements once in source order, checking each on its own (numbers,
 * units, words, names of stages declared above it), so errors come out in the order
 * of the text; then it checks what needs the whole file: required statements, widths,
 * losses, list lengths against the mesh and the stage count, and fills every stage's
 * cost.  A check that depends on something already reported wrong is skipped rather
 * than repeated (each `*_ok` flag below says what is known to be sound), and checking
 * stops once the error limit is passed.  Statements the parser marked `bad` count as
 * present but are not looked into: their syntax error is all there is to say.
 *
 * Numbers: counts are whole numbers without unit; times are microseconds unless
 * suffixed ns, us, ms or s and are kept as integer nanoseconds, rounded to nearest;
 * bandwidths need a unit (B/s .. TB/s decimal, KiB/s .. TiB/s binary).  The limits
 * below keep every later product (bytes, FLOPs, makespans) far from overflowing. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "map.h"
#include "program.h"
#include "schedule.h"

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
#define MAX_LAYER_BYTES 1152921504606846976.0 // 2^60: the layer table's figures stay in int64

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
	uint8_t *block_ok;          // its statement is sound (its layers are checked on use)
	int nblocks;                // blocks declared so far

	AstStmt *cost_all;          // `cost *`
	int64_t all_cost[3];
	uint8_t all_has[3];
	AstStmt **cost_stmt;        // per stage: its `cost NAME` statement
	int64_t (*cost)[3];
	uint8_t (*cost_has)[3];

	int mesh_ok, input_ok;
	AstStmt *place, *devices, *sched;
} Check;

static int over_limit(const Check *c)
{
	int limit = c->d->max_errors > 0 ? c->d->max_errors : 20;
	return c->d->nerrors > limit;
}

/* ---- numbers ------------------------------------------------------------------ */

/* A whole number without unit in [min, max] into *out; 0 after reporting. */
static int whole(Check *c, const AstNum *n, const char *what, long min, long max, int *out)
{
	if (n->bad)
		return 0;
	if (n->unit[0]) {
		diag_error(c->d, n->loc, "%s takes no unit, got '%s'", what, n->unit);
		return 0;
	}
	long v = 0;
	int big = 0;
	for (const char *s = n->digits; *s; s++) {
		if (*s < '0' || *s > '9') {
			diag_error(c->d, n->loc, "%s must be a whole number", what);
			return 0;
		}
		if (v > (INT_MAX - (*s - '0')) / 10)
			big = 1;
		else
			v = 10 * v + (*s - '0');
	}
	if (big) {
		diag_error(c->d, n->loc, "number too large");
		return 0;
	}
	if (n->neg)
		v = -v;
	if (v < min) {
		diag_error(c->d, n->loc, "%s must be at least %ld, got %ld", what, min, v);
		return 0;
	}
	if (v > max) {
		diag_error(c->d, n->loc, "%s must be at most %ld, got %ld", what, max, v);
		return 0;
	}
	*out = (int)v;
	return 1;
}

typedef struct {
	const char *name;
	double scale;
} Unit;

static const Unit time_units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
static const Unit rate_units[] = {
	{"B/s", 1}, {"KB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12},
	{"KiB/s", 1024.0}, {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0},
	{"TiB/s", 1099511627776.0},
};

/* The scale of n's unit among units[0..nu); reports an unknown one. */
static int unit_scale(Check *c, const AstNum *n, const Unit *units, int nu,
	const char *kind, const char *expected, double *scale)
{
	const char *names[16];
	for (int i = 0; i < nu; i++) {
		names[i] = units[i].name;
		if (strcmp(n->unit, units[i].name) == 0) {
			*scale = units[i].scale;
			return 1;
		}
	}
	const char *s = diag_suggest(n->unit, names, nu);
	if (s)
		diag_error(c->d, n->loc, "unknown %s unit '%s'; did you mean '%s'?", kind,
			n->unit, s);
	else
		diag_error(c->d, n->loc, "unknown %s unit '%s' (expected %s)", kind, n->unit,
			expected);
	return 0;
}

static int real(Check *c, const AstNum *n, double *v)
{
	*v = strtod(n->digits, NULL);
	if (!isfinite(*v) || *v > 1e300) {
		diag_error(c->d, n->loc, "number too large");
		return 0;
	}
	return 1;
}

/* A time in integer nanoseconds; a bare number is microseconds. */
static int time_ns(Check *c, const AstNum *n, const char *what, int64_t *out)
{
	double scale = 1e3, v;
	if (n->bad)
		return 0;
	if (n->unit[0] && !unit_scale(c, n, time_units, 4, "time", "ns, us, ms or s", &scale))
		return 0;
	if (!real(c, n, &v))
		return 0;
	if (n->neg && v != 0) {
		diag_error(c->d, n->loc, "%s must not be negative", what);
		return 0;
	}
	if (v * scale > MAX_TIME_NS) {
		diag_error(c->d, n->loc, "%s is too large (at most 1000 s)", what);
		return 0;
	}
	*out = llround(v * scale);
	return 1;
}

static int bandwidth(Check *c, const AstNum *n, double *out)
{
	double scale, v;
	if (n->bad)
		return 0;
	if (!n->unit[0]) {
		diag_error(c->d, n->loc, "bandwidth needs a unit, e.g. 50GB/s");
		return 0;
	}
	if (!unit_scale(c, n, rate_units, 9, "bandwidth",
			"B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s or TiB/s", &scale))
		return 0;
	if (!real(c, n, &v))
		return 0;
	v *= scale;
	if (n->neg && v != 0) {
		diag_error(c->d, n->loc, "bandwidth must not be negative");
		return 0;
	}
	if (v < MIN_BANDWIDTH) {
		diag_error(c->d, n->loc, "bandwidth must be at least 1MB/s");
		return 0;
	}
	if (v > MAX_BANDWIDTH) {
		diag_error(c->d, n->loc, "bandwidth is too large (at most 1000TB/s)");
		return 0;
	}
	*out = v;
	return 1;
}

/* ---- names -------------------------------------------------------------------- */

/* Reports a word that is not one of words[0..n); `what` names the kind of word. */
static void unknown_word(Check *c, const AstName *w, const char *what,
	const char *const *words, int n)
{
	const char *s = diag_suggest(w->s, words, n);
	if (s)
		diag_error(c->d, w->loc, "unknown %s '%s'; did you mean '%s'?", what, w->s, s);
	else
		diag_error(c->d, w->loc, "unknown %s '%s'", what, w->s);
}

static int find_word(const char *s, const char *const *words, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(s, words[i]) == 0)
			return i;
	return -1;
}

/* The index of the stage a skip or cost names, which must be declared above it. */
static int resolve(Check *c, const AstName *n)
{
	Slot *s = map_slot(&c->stages, n->s, 0);
	if (s->used)
		return s->val;
	for (int i = 0; i < c->nnames; i++) {
		if (strcmp(c->names[i], n->s) == 0) {
			diag_error(c->d, n->loc, "stage '%s' is not declared before this use", n->s);
			diag_note(c->d, c->name_stmt[i]->name.loc, "'%s' is declared here", n->s);
			return -1;
		}
	}
	const char *sug = diag_suggest(n->s, c->names, c->nnames);
	if (sug)
		diag_error(c->d, n->loc, "unknown stage '%s'; did you mean '%s'?", n->s, sug);
	else
		diag_error(c->d, n->loc, "unknown stage '%s'", n->s);
	return -1;
}

/* Reports key if an earlier kv of kvs[0..i) has it. */
static int repeated_key(Check *c, const AstKv *kvs, int i, const char *what)
{
	for (int j = 0; j < i; j++) {
		if (strcmp(kvs[j].key.s, kvs[i].key.s) == 0) {
			diag_error(c->d, kvs[i].key.loc, "%s '%s' is given twice", what,
				kvs[i].key.s);
			diag_note(c->d, kvs[j].key.loc, "first given here");
			return 1;
		}
	}
	return 0;
}

/* ---- statements, one at a time ------------------------------------------------- */

static void check_mesh(Check *c, AstStmt *s)
{
	Program *p = c->p;
	static const char *const dims[DIM_COUNT] = {"pp", "dp", "tp"};
	uint8_t seen[DIM_COUNT] = {0};
	int ok = 1, n = 0;
	if (s->nkvs == 0) {
		diag_error(c->d, s->span, "'mesh' needs at least one dimension, e.g. mesh pp=4;");
		ok = 0;
	}
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		int d = find_word(kv->key.s, dims, DIM_COUNT);
		if (d < 0) {
			unknown_word(c, &kv->key, "mesh dimension", dims, DIM_COUNT);
			ok = 0;
			continue;
		}
		if (repeated_key(c, s->kvs, i, "mesh dimension")) {
			ok = 0;
			continue;
		}
		seen[d] = 1;
		p->dim_order[n++] = (uint8_t)d;
		char what[32];
		snprintf(what, sizeof what, "mesh dimension '%s'", dims[d]);
		if (!kv->has_val) {
			diag_error(c->d, kv->loc, "%s needs a size, e.g. %s=2", what, dims[d]);
			ok = 0;
		} else if (!whole(c, &kv->val, what, 1, MAX_RANKS, &p->dims[d])) {
			ok = 0;
		} else if (d == DIM_TP && p->dims[d] > 1) {
			diag_error(c->d, kv->loc,
				"tensor parallelism (tp=%d) is not supported yet", p->dims[d]);
			ok = 0;
		}
	}
	for (int d = 0; d < DIM_COUNT; d++)
		if (!seen[d])
			p->dim_order[n++] = (uint8_t)d;
	if (ok) {
		int64_t world = 1;
		for (int d = 0; d < DIM_COUNT; d++)
			world *= p->dims[d];
		if (world > MAX_RANKS) {
			diag_error(c->d, s->span, "the mesh has %lld ranks, more than %d",
				(long long)world, MAX_RANKS);
			ok = 0;
		}
	}
	p->mesh_loc = s->span;
	c->mesh_ok = ok;
}

/* `input tokens BxS vocab=V;`: B sequences of S tokens; rows are the B*S tokens. */
static void check_tokens(Check *c, AstStmt *s)
{
	Program *p = c->p;
	int b = 0, ok = 1, vocab = -1;
	p->input_loc = s->span;
	if (strcmp(s->name3.s, "tokens") != 0) {
		diag_error(c->d, s->name3.loc, "unknown input kind '%s'; the input is 'ROWSxCOLS' or "
		           "'tokens BxS vocab=V'", s->name3.s);
		ok = 0;
	}
	ok &= whole(c, &s->shape.rows, "input sequences", 1, MAX_SIZE, &b);
	ok &= whole(c, &s->shape.cols, "sequence length", 1, MAX_SIZE, &p->seq);
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		if (strcmp(kv->key.s, "vocab") != 0) {
			static const char *const keys[] = {"vocab"};
			unknown_word(c, &kv->key, "input setting", keys, 1);
			ok = 0;
		} else if (repeated_key(c, s->kvs, i, "input setting")) {
			ok = 0;
		} else if (!kv->has_val) {
			diag_error(c->d, kv->loc, "'vocab' needs a value, e.g. vocab=50257");
			ok = 0;
		} else {
			ok &= whole(c, &kv->val, "vocab", 1, MAX_SIZE, &vocab);
		}
	}
	if (ok && vocab < 0) {
		diag_error(c->d, s->span, "a token input needs its vocabulary: vocab=V");
		ok = 0;
	}
	if (ok && (int64_t)b * p->seq > MAX_SIZE) {
		diag_error(c->d, s->span, "the input has %lld tokens per microbatch, more than %d",
		           (long long)b * p->seq, MAX_SIZE);
		ok = 0;
	}
	if (ok) {
		p->rows = b * p->seq;
		p->cols = 1;
		p->vocab = vocab;
	} else {
		p->seq = 0;
	}
	c->input_ok = ok;
}

static void check_input(Check *c, AstStmt *s)
{
	Program *p = c->p;
	if (s->name3.s) {
		check_tokens(c, s);
		return;
	}
	int ok = whole(c, &s->shape.rows, "input rows", 1, MAX_SIZE, &p->rows);
	ok &= whole(c, &s->shape.cols, "input columns", 1, MAX_SIZE, &p->cols);
	p->input_loc = ast_span(s->shape.rows.loc, s->shape.cols.loc);
	c->input_ok = ok;
}

/* What the layer table knows (plan_layer_words) into words, joined into list. */
static int layer_list(const char *word, const char **words, char *list, size_t n)
{
	int count = plan_layer_words(word, words);
	size_t len = 0;
	list[0] = 0;
	for (int i = 0; i < count && len < n; i++)
		len += (size_t)snprintf(list + len, n - len, "%s%s", i ? ", " : "", words[i]);
	return count;
}

/* "unknown layer 'x'" (word NULL) or "unknown loss 'x'" (word "loss"). */
static void unknown_layer(Check *c, const AstName *w, const char *word)
{
	const char *words[LAYER_COUNT];
	char list[256];
	const char *s = diag_suggest(w->s, words, layer_list(word, words, list, sizeof list));
	if (s)
		diag_error(c->d, w->loc, "unknown %s '%s'; did you mean '%s'?", word ? word : "layer",
			w->s, s);
	else
		diag_error(c->d, w->loc, "unknown %s '%s'; the %s%s are: %s", word ? word : "layer",
			w->s, word ? word : "layer", word ? " kinds" : "s", list);
}

/* The keys of one layer (`heads=12`, `bias`) into l; 0 after reporting. */
static int layer_keys(Check *c, const AstLayer *al, const LayerInfo *li, ProgLayer *l)
{
	int ok = 1;
	for (int i = 0; i < al->nargs; i++) {
		const AstArg *a = &al->args[i];
		if (!a->is_name)
			continue;
		LayerKey k = plan_layer_key_find(a->name.s, strlen(a->name.s));
		if (k == LAYER_KEY_COUNT) {
			if (a->has_val) {
				diag_error(c->d, a->name.loc, "'%s' takes no key '%s'", li->word, a->name.s);
				ok = 0;
			}
			continue; // a positional name (`loss mse`), checked by the caller
		}
		const LayerKeyInfo *ki = &plan_layer_keys[k];
		if (!(li->keys & LAYER_FLAG(k))) {
			diag_error(c->d, a->name.loc, "'%s' takes no '%s'", li->word, ki->name);
			ok = 0;
			continue;
		}
		for (int j = 0; j < i; j++)
			if (al->args[j].is_name && !strcmp(al->args[j].name.s, a->name.s)) {
				diag_error(c->d, a->name.loc, "'%s' is given twice", a->name.s);
				ok = 0;
			}
		if (ki->number && !a->has_val) {
			diag_error(c->d, a->loc, "'%s' needs a value, e.g. %s=4", ki->name, ki->name);
			ok = 0;
		} else if (!ki->number && a->has_val) {
			diag_error(c->d, a->num.loc, "'%s' takes no value", ki->name);
			ok = 0;
		} else if (!ki->number) {
			l->flags |= LAYER_FLAG(k);
		} else {
			char what[64];
			snprintf(what, sizeof what, "'%s'", ki->name);
			ok &= whole(c, &a->num, what, 1, MAX_SIZE,
			            k == LAYER_KEY_HEADS ? &l->heads : &l->kv_heads);
		}
	}
	if (ok && (li->keys & LAYER_FLAG(LAYER_KEY_HEADS)) && !l->heads) {
		diag_error(c->d, al->loc, "'%s' needs heads=N, e.g. %s", li->word, li->example);
		ok = 0;
	}
	if (ok && l->heads && !l->kv_heads)
		l->kv_heads = l->heads;
	return ok;
}

/* One layer into *l; 0 when it is unsound (reported, or a syntax error before).  The
 * layer table says how each kind is spelled, what follows its word and which keys it
 * takes.  Bodies (residual) are the caller's. */
static int check_layer(Check *c, const AstLayer *al, ProgLayer *l)
{
	*l = (ProgLayer){.kind = LAYER_COUNT, .loc = al->loc};
	if (!al->name.s)
		return 0;
	LayerKind k = plan_layer_parse(al->name.s, NULL);
	if (k == LAYER_COUNT) {
		unknown_layer(c, &al->name, NULL);
		return 0;
	}
	const LayerInfo *li = &plan_layers[k];
	const char *w = li->word, *names[LAYER_COUNT];
	char list[256];
	if (!layer_keys(c, al, li, l))
		return 0;
	/* the positional arguments: numbers, and names that are not keys */
	const AstArg *pos[2];
	int npos = 0;
	for (int i = 0; i < al->nargs; i++) {
		const AstArg *a = &al->args[i];
		if (!a->is_name || plan_layer_key_find(a->name.s, strlen(a->name.s)) == LAYER_KEY_COUNT)
			if (npos < 2)
				pos[npos++] = a;
	}
	int named = li->arg == LAYER_ARG_NAME;
	int number = li->arg == LAYER_ARG_WIDTH || li->arg == LAYER_ARG_HIDDEN;
	const char *what = named ? "kind" : li->arg == LAYER_ARG_HIDDEN ? "hidden width" : "width";
	if (al->has_body != (li->arg == LAYER_ARG_BODY)) {
		diag_error(c->d, al->loc, al->has_body ? "'%s' takes no body { ... }" :
		           "'%s' needs a body, e.g. %s", w, li->example);
	} else if (li->arg == LAYER_ARG_NONE || li->arg == LAYER_ARG_BODY) {
		if (npos == 0)
			return l->kind = k, 1;
		diag_error(c->d, pos[0]->loc, "'%s' takes no arguments%s", w,
		           li->keys ? " but its keys" : "");
	} else if (npos == 0) {
		diag_error(c->d, al->loc, "'%s' needs a %s, e.g. %s", w, what, li->example);
	} else if (npos > 1 || pos[0]->is_name != named) {
		layer_list(w, names, list, sizeof list);
		diag_error(c->d, pos[npos > 1]->loc, "'%s' takes one %s%s%s", w, what,
			named ? ": " : "", named ? list : "");
	} else if (named) {
		k = plan_layer_parse(w, pos[0]->name.s);
		if (k != LAYER_COUNT)
			return l->kind = k, 1;
		unknown_layer(c, &pos[0]->name, w);
	} else if (number) {
		char msg[64];
		snprintf(msg, sizeof msg, "'%s' %s", w, what);
		if (whole(c, &pos[0]->num, msg, 1, MAX_SIZE,
		          li->arg == LAYER_ARG_HIDDEN ? &l->hidden : &l->out))
			return l->kind = k, 1;
	}
	return 0;
}

enum { MAX_STAGE_LAYERS = 1 << 20 };

typedef struct {
	ProgLayer *v;
	int n, cap;
} LayerList;

static ProgLayer *layer_push(Check *c, LayerList *ls, Loc at)
{
	if (ls->n >= MAX_STAGE_LAYERS) {
		diag_error(c->d, at, "a stage may hold at most %d layers", MAX_STAGE_LAYERS);
		return NULL;
	}
	if (ls->n == ls->cap) {
		int cap = ls->cap ? 2 * ls->cap : 16;
		ProgLayer *v = arena_alloc(c->a, (size_t)cap * sizeof *v);
		if (ls->n)
			memcpy(v, ls->v, (size_t)ls->n * sizeof *v);
		ls->v = v;
		ls->cap = cap;
	}
	return &ls->v[ls->n++];
}

/* The block a layer line names, or -1: `NAME;` or `NAME x N;` uses block NAME, which
 * must be declared above (and, inside a block, above that block: `within`). */
static int block_use(Check *c, const AstLayer *al, int within, int *times)
{
	if (!al->name.s)
		return -1;
	int b = -1;
	for (int i = 0; i < c->nblock_names; i++)
		if (!strcmp(c->block_stmt[i]->name.s, al->name.s)) {
			b = i;
			break;
		}
	if (b < 0)
		return -1;
	*times = 0;
	if (b >= within) {
		if (b < c->nblocks && b == within)
			diag_error(c->d, al->name.loc, "block '%s' uses itself", al->name.s);
		else
			diag_error(c->d, al->name.loc, "block '%s' is used before it is defined",
			           al->name.s);
		diag_note(c->d, c->block_stmt[b]->name.loc, "'%s' is defined here", al->name.s);
		return -2;
	}
	*times = 1;
	if (al->nargs == 0 && !al->has_body)
		return b;
	if (al->nargs == 2 && !al->has_body && al->args[0].is_name && !al->args[0].has_val &&
	    !strcmp(al->args[0].name.s, "x") && !al->args[1].is_name) {
		if (whole(c, &al->args[1].num, "repeat count", 1, MAX_STAGE_LAYERS, times))
			return b;
		return -2;
	}
	diag_error(c->d, al->loc, "a block is used as '%s;' or '%s x N;'", al->name.s,
	           al->name.s);
	return -2;
}

/* The layers als[0..n) into ls, blocks repeated and residual bodies flattened after
 * their residual (its span).  `within`: the blocks visible (declared above). */
static int expand(Check *c, const AstLayer *als, int n, int within, LayerList *ls)
{
	int ok = 1;
	for (int i = 0; i < n && !over_limit(c); i++) {
		const AstLayer *al = &als[i];
		int times = 0, b = block_use(c, al, within, &times);
		if (b == -2) {
			ok = 0;
			continue;
		}
		if (b >= 0) {
			const AstStmt *bs = c->block_stmt[b];
			int bok = c->block_ok[b];
			for (int t = 0; t < times && bok; t++)
				bok = expand(c, bs->layers, bs->nlayers, b, ls);
			c->block_ok[b] = (uint8_t)bok; // its errors are reported once
			ok &= bok;
			continue;
		}
		ProgLayer l;
		int lok = check_layer(c, al, &l);
		ok &= lok;
		if (!lok && !al->has_body)
			continue;
		int at = ls->n;
		ProgLayer *slot = layer_push(c, ls, al->loc);
		if (!slot)
			return 0;
		*slot = l;
		if (!al->has_body)
			continue;
		ok &= expand(c, al->layers, al->nlayers, within, ls);
		if (ls->n == at + 1 && lok) {
			diag_error(c->d, al->loc, "'%s' needs at least one layer in its body",
			           al->name.s);
			ok = 0;
		}
		ls->v[at].span = ls->n - at - 1;
	}
	return ok;
}
static void check_stage(Check *c, AstStmt *s)
{
	Program *p = c->p;
	if (!s->name.s) {
		c->widths_ok = c->stages_known = 0;
		return;
	}
	Slot *slot = map_slot(&c->stages, s->name.s, 0);
	if (slot->used) {
		c->stages_known = 0;
		diag_error(c->d, s->name.loc, "duplicate stage '%s'", s->name.s);
		diag_note(c->d, c->stage_stmt[slot->val]->name.loc, "'%s' is first declared here",
			s->name.s);
		return;
	}
	int i = p->nstages++;
	map_set(slot, s->name.s, 0, i);
	c->stage_stmt[i] = s;
	ProgStage *st = &p->stages[i];
	st->name = s->name.s;
	st->loc = s->name.loc;
	LayerList ls = {0};
	int ok = !s->bad;
	ok &= expand(c, s->layers, s->nlayers, c->nblocks, &ls);
	st->nlayers = ls.n;
	st->layers = ls.v;
	if (!s->bad && s->nlayers == 0) {
		diag_error(c->d, s->name.loc, "stage '%s' has no layers", s->name.s);
		ok = 0;
	}
	c->stage_ok[i] = (uint8_t)ok;
	if (!ok)
		c->widths_ok = 0;
}

/* `block NAME { layers }`: its layers are checked where a stage uses it. */
static void check_block(Check *c, AstStmt *s)
{
	int b = c->nblocks;
	if (!s->name.s || b >= c->nblock_names || c->block_stmt[b] != s)
		return; // lost to a syntax error: not among the names collected
	c->nblocks++;
	c->block_ok[b] = !s->bad;
	for (int i = 0; i < b; i++)
		if (!strcmp(c->block_stmt[i]->name.s, s->name.s)) {
			diag_error(c->d, s->name.loc, "duplicate block '%s'", s->name.s);
			diag_note(c->d, c->block_stmt[i]->name.loc, "'%s' is first defined here",
			          s->name.s);
			c->block_ok[b] = 0;
			return;
		}
	if (plan_layer_parse(s->name.s, NULL) != LAYER_COUNT) {
		diag_error(c->d, s->name.loc, "block '%s' has the name of a layer kind", s->name.s);
		c->block_ok[b] = 0;
	}
	if (!s->bad && s->nlayers == 0) {
		diag_error(c->d, s->name.loc, "block '%s' has no layers", s->name.s);
		c->block_ok[b] = 0;
	}
}

/* A plain non-negative real without unit, in [lo, hi]. */
static int real_in(Check *c, const AstNum *n, const char *what, double lo, double hi,
                   double *out)
{
	double v;
	if (n->bad)
		return 0;
	if (n->unit[0]) {
		diag_error(c->d, n->loc, "%s takes no unit, got '%s'", what, n->unit);
		return 0;
	}
	if (!real(c, n, &v))
		return 0;
	if (n->neg)
		v = -v;
	if (!(v >= lo && v <= hi)) {
		diag_error(c->d, n->loc, "%s must be in [%g, %g]", what, lo, hi);
		return 0;
	}
	*out = v;
	return 1;
}

static void check_optimizer(Check *c, AstStmt *s)
{
	PlanOptim *o = &c->p->optim;
	static const char *const keys[] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
	static const double lo[] = {1e-12, 0, 0, 1e-30, 0}, hi[] = {1e6, 0.999999, 0.999999, 1, 1e6};
	int k = find_word(s->name.s, plan_optim_names, OPTIM_COUNT);
	if (k < 0) {
		unknown_word(c, &s->name, "optimizer", plan_optim_names, OPTIM_COUNT);
		return;
	}
	*o = (PlanOptim){.kind = (uint8_t)k, .given = 1, .lr = PROG_DEFAULT_LR, .beta1 = 0.9,
	                 .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
	double *val[] = {&o->lr, &o->beta1, &o->beta2, &o->eps, &o->weight_decay};
	int nk = k == OPTIM_ADAMW ? 5 : 1;
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		int j = find_word(kv->key.s, keys, nk);
		if (j < 0)
			unknown_word(c, &kv->key, k == OPTIM_ADAMW ? "adamw setting" : "sgd setting", keys,
			             nk);
		else if (repeated_key(c, s->kvs, i, "optimizer setting"))
			;
		else if (!kv->has_val)
			diag_error(c->d, kv->loc, "'%s' needs a value, e.g. %s=0.001", keys[j], keys[j]);
		else
			real_in(c, &kv->val, keys[j], lo[j], hi[j], val[j]);
	}
}

/* `device NAME;` (a preset) or `device peak=NTFLOPs;`: the FLOP rate for derived costs. */
static void check_device(Check *c, AstStmt *s)
{
	static const char *const names[] = {"a100", "h100", "h200", "peak"};
	static const double rate[] = {312e12, 989e12, 989e12, 0};
	static const Unit units[] = {{"GFLOPs", 1e9}, {"TFLOPs", 1e12}, {"PFLOPs", 1e15},
	                             {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15}};
	if (s->nkvs != 1) {
		diag_error(c->d, s->span, "'device' takes one of a100, h100, h200 or peak=N, "
		           "e.g. device h100; or device peak=989TFLOPs;");
		return;
	}
	AstKv *kv = &s->kvs[0];
	int k = find_word(kv->key.s, names, 4);
	double scale, v;
	if (k < 0)
		unknown_word(c, &kv->key, "device", names, 4);
	else if (k < 3 && kv->has_val)
		diag_error(c->d, kv->val.loc, "'%s' takes no value", names[k]);
	else if (k < 3)
		c->p->peak_flops = rate[k];
	else if (!kv->has_val)
		diag_error(c->d, kv->loc, "'peak' needs a value, e.g. peak=989TFLOPs");
	else if (!kv->val.bad && !kv->val.unit[0])
		diag_error(c->d, kv->val.loc, "peak needs a unit, e.g. 989TFLOPs");
	else if (!kv->val.bad && unit_scale(c, &kv->val, units, 6, "FLOP rate",
	                                    "GFLOPs, TFLOPs or PFLOPs", &scale) &&
	         real(c, &kv->val, &v)) {
		v *= kv->val.neg ? -scale : scale;
		if (!(v >= 1e9 && v <= 1e18))
			diag_error(c->d, kv->val.loc, "peak must be between 1GFLOPs and 1000PFLOPs");
		else
			c->p->peak_flops = v;
	}
}
static void check_skip(Check *c, AstStmt *s)
{
	Program *p = c->p;
	int a = resolve(c, &s->name);
	int b = resolve(c, &s->name2);
	if (a < 0 || b < 0)
		return;
	const char *an = s->name.s, *bn = s->name2.s;
	Loc loc = ast_span(s->name.loc, s->name2.loc);
	if (a == b) {
		diag_error(c->d, loc, "skip from stage '%s' to itself", an);
		return;
	}
	if (a > b) {
		diag_error(c->d, loc, "skip goes backwards: stage '%s' comes after '%s'", an, bn);
		return;
	}
	if (a + 1 == b) {
		diag_error(c->d, loc,
			"skip between consecutive stages '%s' and '%s': the chain already connects them",
			an, bn);
		return;
	}
	int64_t key = (int64_t)a << 32 | (uint32_t)b;
	Slot *slot = map_slot(&c->skips, NULL, key);
	if (slot->used) {
		diag_error(c->d, loc, "duplicate skip '%s' -> '%s'", an, bn);
		diag_note(c->d, p->skips[slot->val].loc, "first given here");
		return;
	}
	map_set(slot, NULL, key, p->nskips);
	p->skips[p->nskips++] = (ProgSkip){a, b, loc};
}

static void unknown_schedule(Check *c, const AstName *n)
{
	const char *names[64]; // the registry holds "custom" and "csv" too
	int nn = 0;
	for (int i = 0; i < sched_count && nn < 64; i++)
		names[nn++] = sched_registry[i]->name;
	unknown_word(c, n, "schedule", names, nn);
}

static void check_schedule(Check *c, AstStmt *s)
{
	Program *p = c->p;
	char *n = s->name.s;
	p->schedule = n;
	p->sched_loc = s->name.loc;
	if (s->has_body || strcmp(n, "custom") == 0) {
		if (strcmp(n, "custom") != 0)
			diag_error(c->d, s->name.loc,
				"only 'schedule custom' takes a body { rank N: ...; }");
		else if (!s->has_body)
			diag_error(c->d, s->name.loc,
				"'schedule custom' needs a body, e.g. custom { rank 0: 0F0 0B0; }");
		else
			c->sched = s; // actions are checked once stages and mesh are known
		return;
	}
	if (s->str.s || strcmp(n, "csv") == 0) {
		if (strcmp(n, "csv") != 0) {
			diag_error(c->d, s->name.loc, "only 'schedule csv' takes a file name");
		} else if (!s->str.s) {
			diag_error(c->d, s->name.loc,
				"'schedule csv' needs a file name, e.g. csv \"order.csv\"");
		} else if (!s->str.s[0]) {
			diag_error(c->d, s->str.loc, "empty file name");
		} else {
			/* relative to the .pipe file's folder, as #include resolves */
			const char *slash = strrchr(p->file, '/');
			if (s->str.s[0] == '/' || strcmp(p->file, "-") == 0 || !slash) {
				p->csv_path = s->str.s;
			} else {
				size_t dl = (size_t)(slash - p->file) + 1, fl = strlen(s->str.s);
				p->csv_path = arena_alloc(c->a, dl + fl + 1);
				memcpy(p->csv_path, p->file, dl);
				memcpy(p->csv_path + dl, s->str.s, fl + 1);
			}
		}
		return;
	}
	if (!sched_find(n))
		unknown_schedule(c, &s->name);
}

static void check_placement(Check *c, AstStmt *s)
{
	Program *p = c->p;
	static const char *const words[] = {"loop", "v"};
	if (!s->has_list) {
		p->place_loc = s->name.loc;
		int w = find_word(s->name.s, words, 2);
		if (w < 0)
			unknown_word(c, &s->name, "placement", words, 2);
		else
			p->place = w == 0 ? PLACE_LOOP : PLACE_V;
		return;
	}
	p->place = PLACE_LIST;
	p->place_loc = s->list_loc;
	p->nplace = s->nnums;
	p->place_list = arena_alloc(c->a, (size_t)s->nnums * sizeof *p->place_list);
	for (int i = 0; i < s->nnums; i++)
		if (!whole(c, &s->nums[i], "pp index", 0, INT_MAX, &p->place_list[i]))
			p->place_list[i] = -1; // reported; no range error on top
	c->place = s; // length and range are checked against the whole file
}

static void check_cost(Check *c, AstStmt *s)
{
	static const char *const kinds[] = {"f", "b", "w"};
	int64_t v[3];
	uint8_t has[3] = {0};
	int ok = 1;
	if (s->nkvs == 0) {
		diag_error(c->d, s->span, "'cost' needs at least one of f=, b=, w=");
		ok = 0;
	}
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		int k = find_word(kv->key.s, kinds, 3);
		if (k < 0) {
			diag_error(c->d, kv->key.loc, "unknown cost kind '%s' (expected f, b or w)",
				kv->key.s);
			ok = 0;
		} else if (repeated_key(c, s->kvs, i, "cost")) {
			ok = 0;
		} else if (!kv->has_val) {
			diag_error(c->d, kv->loc, "'%s' needs a time, e.g. %s=1.5ms", kinds[k],
				kinds[k]);
			ok = 0;
		} else if (time_ns(c, &kv->val, "cost", &v[k])) {
			has[k] = 1;
		} else {
			ok = 0;
		}
	}

	int target = -1;
	if (strcmp(s->name.s, "*") == 0) {
		if (c->cost_all) {
			diag_error(c->d, s->name.loc, "duplicate 'cost *' statement");
			diag_note(c->d, c->cost_all->name.loc, "first given here");
			return;
		}
		c->cost_all = s;
	} else {
		target = resolve(c, &s->name);
		if (target < 0)
			return;
		if (c->cost_stmt[target]) {
			diag_error(c->d, s->name.loc, "duplicate cost for stage '%s'", s->name.s);
			diag_note(c->d, c->cost_stmt[target]->name.loc, "first given here");
			return;
		}
		c->cost_stmt[target] = s;
		c->p->stages[target].has_cost = 1;
		c->p->stages[target].cost_loc = s->name.loc;
	}
	if (!ok)
		return;
	for (int k = 0; k < 3; k++) {
		if (!has[k])
			continue;
		if (target < 0) {
			c->all_cost[k] = v[k];
			c->all_has[k] = 1;
		} else {
			c->cost[target][k] = v[k];
			c->cost_has[target][k] = 1;
		}
	}
}

static void check_link(Check *c, AstStmt *s)
{
	Program *p = c->p;
	static const char *const keys[] = {"latency", "bandwidth", "ideal"};
	int ideal = -1, other = -1;
	p->link_loc = s->span;
	if (s->nkvs == 0)
		diag_error(c->d, s->span, "'link' needs latency=, bandwidth= or ideal");
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		int k = find_word(kv->key.s, keys, 3);
		if (k < 0) {
			unknown_word(c, &kv->key, "link property", keys, 3);
			continue;
		}
		if (repeated_key(c, s->kvs, i, "link property"))
			continue;
		if (k == 2) {
			ideal = i;
			if (kv->has_val)
				diag_error(c->d, kv->val.loc, "'ideal' takes no value");
			continue;
		}
		if (other < 0)
			other = i;
		if (!kv->has_val)
			diag_error(c->d, kv->loc, "'%s' needs a value, e.g. %s", keys[k],
				k == 0 ? "latency=5us" : "bandwidth=50GB/s");
		else if (k == 0)
			time_ns(c, &kv->val, "latency", &p->latency_ns);
		else
			bandwidth(c, &kv->val, &p->bandwidth);
	}
	if (ideal >= 0 && other >= 0) {
		diag_error(c->d, s->kvs[ideal].key.loc,
			"'ideal' cannot be combined with latency or bandwidth");
	} else if (ideal >= 0) {
		p->link_ideal = 1;
		p->latency_ns = 0;
	}
}

static void check_devices(Check *c, AstStmt *s)
{
	Program *p = c->p;
	p->devices_loc = s->span;
	if (s->has_list) {
		p->device_per_node = 0;
		p->ndevices = s->nnums;
		p->devices = arena_alloc(c->a, (size_t)s->nnums * sizeof *p->devices);
		for (int i = 0; i < s->nnums; i++)
			whole(c, &s->nums[i], "device index", 0, MAX_DEVICE, &p->devices[i]);
		c->devices = s;
		return;
	}
	static const char *const keys[] = {"per_node"};
	if (s->nkvs == 0)
		diag_error(c->d, s->span, "'devices' needs per_node=N or a list [d0, d1, ...]");
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		if (strcmp(kv->key.s, "per_node") != 0)
			unknown_word(c, &kv->key, "devices property", keys, 1);
		else if (repeated_key(c, s->kvs, i, "devices property"))
			;
		else if (!kv->has_val)
			diag_error(c->d, kv->loc, "'per_node' needs a value, e.g. per_node=8");
		else
			whole(c, &kv->val, "'per_node'", 1, MAX_DEVICE, &p->device_per_node);
	}
}

static void check_stmt(Check *c, AstStmt *s)
{
	Program *p = c->p;
	switch (s->kind) {
	case AST_PIPELINE:
		p->name = s->name.s;
		p->name_loc = s->name.loc;
		break;
	case AST_MESH:
		check_mesh(c, s);
		break;
	case AST_MICROBATCHES:
		whole(c, &s->num, "microbatches", 1, MAX_MICROBATCHES, &p->microbatches);
		p->mb_loc = s->num.loc;
		break;
	case AST_INPUT:
		check_input(c, s);
		break;
	case AST_STAGE:
		check_stage(c, s);
		break;
	case AST_SKIP:
		check_skip(c, s);
		break;
	case AST_SCHEDULE:
		check_schedule(c, s);
		break;
	case AST_PLACEMENT:
		check_placement(c, s);
		break;
	case AST_COST:
		check_cost(c, s);
		break;
	case AST_LINK:
		check_link(c, s);
		break;
	case AST_DEVICES:
		check_devices(c, s);
		break;
	case AST_PEERS:
		front_peers(c->d, p, s);
		break;
	case AST_ROUTE: {
		int a = resolve(c, &s->name), b = resolve(c, &s->name2);
		if (a >= 0 && b >= 0)
			front_route(c->a, c->d, p, s, a, b);
		break;
	}
	case AST_BLOCK:
		check_block(c, s);
		break;
	case AST_OPTIMIZER:
		check_optimizer(c, s);
		break;
	case AST_DEVICE:
		check_device(c, s);
		break;
	default:
		unreachable();
	}
}

/* ---- the whole file ------------------------------------------------------------ */

static void check_required(Check *c)
{
	static const struct {
		uint8_t kind;
		const char *msg;
	} req[] = {
		{AST_PIPELINE, "missing 'pipeline NAME;' statement"},
		{AST_MICROBATCHES, "missing 'microbatches N;' statement"},
		{AST_INPUT, "missing 'input ROWSxCOLS;' statement"},
		{AST_STAGE, "no stages: declare at least one 'stage NAME { ... }'"},
		{AST_SCHEDULE, "missing 'schedule NAME;' statement"},
	};
	for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
		if (!c->first[req[i].kind])
			diag_error(c->d, (Loc){0}, "%s", req[i].msg);
}

/* What one layer asks of the widths and the input, once its input width is known. */
static int check_layer_widths(Check *c, const ProgStage *st, int j, int first,
                              const ProgLayer *embed)
{
	Program *p = c->p;
	const ProgLayer *l = &st->layers[j];
	const LayerInfo *li = &plan_layers[l->kind];
	if (li->tokens && !p->seq) {
		diag_error(c->d, l->loc, "'%s' needs a token input: write 'input tokens BxS vocab=V;'",
		           li->word);
		return 0;
	}
	if (p->seq && first && l->kind != LAYER_EMBED) {
		diag_error(c->d, l->loc, "a token input goes into 'embed' first, e.g. %s",
		           plan_layers[LAYER_EMBED].example);
		return 0;
	}
	if (l->kind == LAYER_EMBED && !first) {
		diag_error(c->d, l->loc, "'embed' must be the first layer of the first stage");
		return 0;
	}
	if (l->heads && l->in % l->heads) {
		diag_error(c->d, l->loc, "heads=%d does not divide the width %d", l->heads, l->in);
		return 0;
	}
	if (l->heads && l->heads % l->kv_heads) {
		diag_error(c->d, l->loc, "kv_heads=%d does not divide heads=%d", l->kv_heads, l->heads);
		return 0;
	}
	if (l->heads && (l->flags & LAYER_FLAG(LAYER_KEY_ROPE)) && (l->in / l->heads) % 2) {
		diag_error(c->d, l->loc, "rope needs an even head width, got %d / %d = %d", l->in,
		           l->heads, l->in / l->heads);
		return 0;
	}
	/* Keep every figure of the layer table far from int64: the largest term of any kind is
	 * rows x a width (x 16 elements) or attention's B x H x S x S probabilities. */
	double wide = l->in > l->out ? l->in : l->out, big = MAX_LAYER_BYTES;
	if (l->hidden > wide)
		wide = l->hidden;
	if (p->vocab > wide)
		wide = p->vocab;
	if ((double)p->rows * wide * 16 > big || (double)l->in * l->out > big ||
	    (double)p->rows * l->heads * (p->seq > 0 ? p->seq : 1) * 4 > big) {
		diag_error(c->d, l->loc, "this layer is too large: its figures per microbatch pass "
		           "2^60 bytes");
		return 0;
	}
	if (l->kind == LAYER_XENT && l->in != p->vocab) {
		diag_error(c->d, l->loc, "'loss xent' takes logits over the vocabulary (%d wide), got "
		           "width %d; put 'head' before it", p->vocab, l->in);
		return 0;
	}
	if ((l->flags & LAYER_FLAG(LAYER_KEY_TIED)) && (!embed || embed->out != l->in)) {
		if (embed)
			diag_error(c->d, l->loc, "'head tied' takes width %d but the embedding it ties "
			           "to has width %d", l->in, embed->out);
		else
			diag_error(c->d, l->loc, "'head tied' needs an 'embed' to tie to");
		return 0;
	}
	return 1;
}

/* Widths flow down the chain from the input; each loss must end the last stage. */
static void check_layers(Check *c)
{
	Program *p = c->p;
	int n = p->nstages;
	for (int i = 0; i < n; i++) {
		ProgStage *st = &p->stages[i];
		if (!c->stage_ok[i])
			continue;
		for (int j = 0; j < st->nlayers; j++)
			if (plan_layers[st->layers[j].kind].loss && (i != n - 1 || j != st->nlayers - 1))
				diag_error(c->d, st->layers[j].loc,
					"'%s' must be the last layer of the last stage",
					plan_layers[st->layers[j].kind].word);
	}
	if (n > 0 && c->stage_ok[n - 1] && c->stages_known && !c->ast->lost) {
		ProgStage *last = &p->stages[n - 1];
		int k = 0;
		while (!plan_layers[k].loss || plan_layers[k].tokens != (p->seq > 0))
			k++; // the first loss in the table that suits the input is the example
		if (!plan_layers[last->layers[last->nlayers - 1].kind].loss)
			diag_error(c->d, last->loc, "the last stage '%s' must end with '%s'",
				last->name, plan_layers[k].example);
	}
	if (!c->widths_ok || !c->input_ok)
		return;
	int w = p->cols, ok = 1;
	const ProgLayer *embed = NULL;
	for (int i = 0; i < n; i++) {
		ProgStage *st = &p->stages[i];
		st->in = w;
		for (int j = 0; j < st->nlayers; j++) {
			ProgLayer *l = &st->layers[j];
			l->in = w;
			w = l->out = plan_layer_out(l->kind, w, l->kind == LAYER_HEAD ? p->vocab : l->out);
			ok &= check_layer_widths(c, st, j, i == 0 && j == 0, embed);
			if (l->kind == LAYER_EMBED)
				embed = l;
		}
		st->out = w;
		for (int j = 0; j < st->nlayers; j++) {
			const ProgLayer *l = &st->layers[j];
			if (l->kind == LAYER_RESIDUAL && st->layers[j + l->span].out != l->in) {
				diag_error(c->d, l->loc, "the body of 'residual' changes the width from %d "
				           "to %d", l->in, st->layers[j + l->span].out);
				ok = 0;
			}
		}
	}
	if (!ok) {
		c->widths_ok = 0;
		return;
	}
	for (int i = 0; i < p->nskips; i++) {
		ProgSkip *k = &p->skips[i];
		ProgStage *a = &p->stages[k->src], *b = &p->stages[k->dst];
		if (a->out != b->in)
			diag_error(c->d, k->loc,
				"skip width mismatch: '%s' outputs %d features, '%s' takes %d",
				a->name, a->out, b->name, b->in);
	}
}

/* Each stage's F, B, W: its own cost line, else `cost *`, else from its FLOPs (the
 * layer table's, at PROG_DEFAULT_FLOPS). */
static void fill_costs(Check *c)
{
	Program *p = c->p;
	LayerShape shape = {p->rows, p->seq ? p->rows / p->seq : p->rows, p->seq ? p->seq : 1,
	                    p->vocab};
	if (!c->widths_ok || !c->input_ok)
		return;
	for (int i = 0; i < p->nstages; i++) {
		ProgStage *st = &p->stages[i];
		double flops[3] = {0, 0, 0}, worst = 0;
		for (int j = 0; j < st->nlayers; j++) {
			PlanLayer pl = prog_plan_layer(&st->layers[j]);
			LayerCost lc = plan_layer_figures(&pl, &shape);
			for (int k = 0; k < 3; k++)
				flops[k] += lc.flops[k];
		}
		for (int k = 0; k < 3; k++) {
			double ns = flops[k] * 1e9 / p->peak_flops;
			if (c->cost_has[i][k]) {
				st->cost[k] = c->cost[i][k];
			} else if (c->all_has[k]) {
				st->cost[k] = c->all_cost[k];
			} else {
				worst = ns > worst ? ns : worst;
				st->cost[k] = ns < 1 ? 1 : ns > MAX_TIME_NS ? 0 : llround(ns);
			}
		}
		if (worst > MAX_TIME_NS)
			diag_error(c->d, st->loc,
				"stage '%s' would take %.0f s per microbatch at %g TFLOP/s; "
				"give its cost", st->name, worst / 1e9, p->peak_flops / 1e12);
	}
}

/* Two ranks of one node on one GPU run on CPU backends only.  A devices list does not
 * say which ranks share a node; it is read as nodes of consecutive ranks, one rank per
 * device the list names: [0, 1, 0, 1] is two nodes of two GPUs, [0, 0, 1] puts ranks 0
 * and 1 on GPU 0 of the first node.  One warning per list is enough. */
static void warn_shared_devices(Check *c)
{
	Program *p = c->p;
	int n = p->ndevices, distinct = 0;
	Map seen;
	map_init(c->a, &seen, n);
	for (int i = 0; i < n; i++) {
		Slot *s = map_slot(&seen, NULL, p->devices[i]);
		if (!s->used) {
			map_set(s, NULL, p->devices[i], i);
			distinct++;
		}
	}
	/* the same map again, per node: device -> its first rank there */
	for (int node = 0; node < n; node += distinct) {
		map_init(c->a, &seen, distinct);
		for (int i = node; i < n && i < node + distinct; i++) {
			Slot *s = map_slot(&seen, NULL, p->devices[i]);
			if (!s->used) {
				map_set(s, NULL, p->devices[i], i);
				continue;
			}
			diag_warning(c->d, c->devices->nums[i].loc,
				"ranks %d and %d share GPU %d of one node; NCCL before 2.30 refuses two "
				"ranks on one GPU, so this plan runs on CPU backends only",
				s->val, i, p->devices[i]);
			diag_note(c->d, c->devices->list_loc,
				"the list is read as nodes of %d consecutive ranks, one per GPU it names",
				distinct);
			return;
		}
	}
}

static void check_lists(Check *c)
{
	Program *p = c->p;
	int pp = p->dims[DIM_PP];
	if (c->place && c->first[AST_STAGE]) {
		if (p->nplace != p->nstages)
			diag_error(c->d, p->place_loc,
				"placement lists %d stage%s, but there %s %d", p->nplace,
				p->nplace == 1 ? "" : "s", p->nstages == 1 ? "is" : "are",
				p->nstages);
		for (int i = 0; c->mesh_ok && i < p->nplace; i++)
			if (p->place_list[i] >= pp)
				diag_error(c->d, c->place->nums[i].loc,
					"pp index %d is out of range: the mesh has pp=%d",
					p->place_list[i], pp);
	}
	if (c->devices && c->mesh_ok) {
		int world = p->dims[DIM_PP] * p->dims[DIM_DP] * p->dims[DIM_TP];
		if (p->ndevices != world)
			diag_error(c->d, c->devices->list_loc,
				"devices lists %d rank%s, but the mesh has %d", p->ndevices,
				p->ndevices == 1 ? "" : "s", world);
		else
			warn_shared_devices(c);
	}
}

/* "12F3": stage digits, one letter, microbatch digits (the lexer made sure). */
static int action(Check *c, const AstName *t, ProgAction *a)
{
	const char *s = t->s;
	long v[2] = {0, 0};
	char kind = 0;
	for (int part = 0; part < 2; part++) {
		for (; *s >= '0' && *s <= '9'; s++) {
			if (v[part] > (INT_MAX - (*s - '0')) / 10) {
				diag_error(c->d, t->loc, "number too large");
				return 0;
			}
			v[part] = 10 * v[part] + (*s - '0');
		}
		if (part == 0)
			kind = *s++;
	}
	OpKind k = plan_op_of_torch(kind); // PyTorch's letters
	if (k == OP_COUNT) {
		diag_error(c->d, t->loc, "unknown action kind '%c' in '%s' (expected F, B, I or W)",
			kind, t->s);
		return 0;
	}
	if (v[0] >= c->p->nstages) {
		diag_error(c->d, t->loc, "stage index %ld in '%s' is out of range: there %s %d "
			"stage%s", v[0], t->s, c->p->nstages == 1 ? "is" : "are", c->p->nstages,
			c->p->nstages == 1 ? "" : "s");
		return 0;
	}
	*a = (ProgAction){k, (int)v[0], (int)v[1], t->loc};
	return 1;
}

static void check_custom(Check *c)
{
	Program *p = c->p;
	AstStmt *s = c->sched;
	if (!s)
		return;
	p->custom = arena_alloc(c->a, (size_t)s->nranks * sizeof *p->custom);
	for (int i = 0; i < s->nranks && !over_limit(c); i++) {
		AstRank *r = &s->ranks[i];
		if (r->bad)
			continue;
		ProgCustomRank *cr = &p->custom[p->ncustom++];
		cr->loc = r->loc;
		if (strcmp(r->word.s, "rank") != 0)
			diag_error(c->d, r->word.loc, "expected 'rank', got '%s'", r->word.s);
		if (whole(c, &r->index, "rank", 0, MAX_RANKS, &cr->rank) && c->mesh_ok &&
			cr->rank >= p->dims[DIM_PP])
			diag_error(c->d, r->index.loc, "rank %d is out of range: the mesh has pp=%d",
				cr->rank, p->dims[DIM_PP]);
		cr->acts = arena_alloc(c->a, (size_t)r->nacts * sizeof *cr->acts);
		for (int j = 0; j < r->nacts && !over_limit(c); j++)
			if (action(c, &r->acts[j], &cr->acts[cr->nacts]))
				cr->nacts++;
	}
}

static Program *check(Arena *a, Diag *d, const char *file, AstProgram *ast)
{
	Program *p = arena_alloc(a, sizeof *p);
	Check c = {
		.a = a, .d = d, .p = p, .ast = ast,
		.mesh_ok = 1, .widths_ok = 1, .stages_known = 1,
	};
	p->file = file;
	p->ndims = DIM_COUNT;
	for (int i = 0; i < DIM_COUNT; i++) {
		p->dims[i] = 1;
		p->dim_order[i] = (uint8_t)i;
	}
	p->place = PLACE_DEFAULT;
	p->latency_ns = PROG_DEFAULT_LATENCY_NS;
	p->bandwidth = PROG_DEFAULT_BANDWIDTH;
	p->device_per_node = PROG_DEFAULT_DEVICES_PER_NODE;
	p->peak_flops = PROG_DEFAULT_FLOPS;

	int nstage_stmts = 0, nskip_stmts = 0;
	for (AstStmt *s = ast->head; s; s = s->next) {
		nstage_stmts += s->kind == AST_STAGE;
		nskip_stmts += s->kind == AST_SKIP;
	}
	c.names = arena_alloc(a, (size_t)nstage_stmts * sizeof *c.names);
	c.name_stmt = arena_alloc(a, (size_t)nstage_stmts * sizeof *c.name_stmt);
	for (AstStmt *s = ast->head; s; s = s->next) {
		if (s->kind == AST_STAGE && s->name.s) {
			c.name_stmt[c.nnames] = s;
			c.names[c.nnames++] = s->name.s;
		}
	}
	int nblock_stmts = 0;
	for (AstStmt *s = ast->head; s; s = s->next)
		nblock_stmts += s->kind == AST_BLOCK;
	c.block_stmt = arena_alloc(a, (size_t)nblock_stmts * sizeof *c.block_stmt);
	c.block_ok = arena_alloc(a, (size_t)nblock_stmts + 1);
	for (AstStmt *s = ast->head; s; s = s->next)
		if (s->kind == AST_BLOCK && s->name.s)
			c.block_stmt[c.nblock_names++] = s;
	map_init(a, &c.stages, nstage_stmts);
	map_init(a, &c.skips, nskip_stmts);
	c.stage_stmt = arena_alloc(a, (size_t)nstage_stmts * sizeof *c.stage_stmt);
	c.stage_ok = arena_alloc(a, (size_t)nstage_stmts);
	c.cost_stmt = arena_alloc(a, (size_t)nstage_stmts * sizeof *c.cost_stmt);
	c.cost = arena_alloc(a, (size_t)nstage_stmts * sizeof *c.cost);
	c.cost_has = arena_alloc(a, (size_t)nstage_stmts * sizeof *c.cost_has);
	p->stages = arena_alloc(a, (size_t)nstage_stmts * sizeof *p->stages);
	p->skips = arena_alloc(a, (size_t)nskip_stmts * sizeof *p->skips);

	if (!ast->head) {
		if (!ast->lost && !d->nerrors)
			diag_error(d, (Loc){0}, "empty program: expected 'pipeline NAME;'");
		return p;
	}
	for (AstStmt *s = ast->head; s && !over_limit(&c); s = s->next) {
		int many = s->kind == AST_STAGE || s->kind == AST_SKIP || s->kind == AST_COST ||
		           s->kind == AST_ROUTE || s->kind == AST_BLOCK;
		AstStmt *first = c.first[s->kind];
		if (!first)
			c.first[s->kind] = s;
		if (first && !many) {
			diag_error(d, s->loc, "duplicate '%s' statement", ast_kind_names[s->kind]);
			diag_note(d, first->loc, "the first '%s' statement is here",
				ast_kind_names[s->kind]);
			continue;
		}
		if (s->bad) {
			if (s->kind == AST_STAGE)
				check_stage(&c, s); // keeps its name declared
			else if (s->kind == AST_BLOCK)
				check_block(&c, s); // keeps its name defined
			else if (s->kind == AST_MESH)
				c.mesh_ok = 0;
			else if (s->kind == AST_INPUT)
				c.input_ok = 0;
			continue;
		}
		check_stmt(&c, s);
	}
	if (over_limit(&c))
		return p;
	if (!ast->lost)
		check_required(&c);
	check_layers(&c);
	check_lists(&c);
	check_custom(&c);
	fill_costs(&c);
	return p;
}

Program *front_parse(Arena *a, Diag *d, const char *file, const char *src, size_t len)
{
	if (len > MAX_FILE) {
		diag_error(d, (Loc){0}, "file too large (%zu bytes, at most %u)", len, MAX_FILE);
		return NULL;
	}
	AstProgram *ast = ast_parse(a, d, src, len);
	Program *p = ast->stopped ? NULL : check(a, d, file, ast);
	return d->nerrors > 0 ? NULL : p;
}

/* ---- command-line overrides --------------------------------------------------- */

/* Appends "OPTION VALUE" to the options' text; the value's place in it. */
static Loc cmdline_add(char *buf, size_t *n, const char *opt, const char *val)
{
	*n += (size_t)sprintf(buf + *n, "%s%s ", *n ? " " : "", opt);
	Loc l = {DIAG_CMDLINE, (int)*n + 1, (int)strlen(val)};
	*n += (size_t)sprintf(buf + *n, "%s", val);
	return l;
}

int front_override(Arena *a, Diag *d, Program *p, const ProgOverrides *o)
{
	Check c = {.a = a, .d = d, .p = p};
	char mb[16];
	snprintf(mb, sizeof mb, "%d", o->microbatches < 0 ? -o->microbatches : o->microbatches);
	size_t n = 0, cap = 64 + (o->schedule ? strlen(o->schedule) : 0) +
		(o->from_csv ? strlen(o->from_csv) : 0);
	char *text = arena_alloc(a, cap);
	AstName name = {0};
	AstNum num = {.digits = mb, .unit = "", .neg = o->microbatches < 0};
	Loc csv = {0};
	if (o->schedule)
		name = (AstName){(char *)o->schedule, cmdline_add(text, &n, "--schedule", o->schedule)};
	if (o->microbatches)
		num.loc = cmdline_add(text, &n, "--microbatches", mb);
	if (o->from_csv)
		csv = cmdline_add(text, &n, "--from-torch-csv", o->from_csv);
	d->cmdline = text;

	int errors = d->nerrors;
	if (o->schedule) {
		if (!sched_find(name.s))
			unknown_schedule(&c, &name);
		else if (strcmp(name.s, "custom") == 0 && !p->custom)
			diag_error(d, name.loc, "schedule custom takes its order from the file's "
				"'schedule custom { rank 0: ...; }' statement, which it has not");
		else if (strcmp(name.s, "csv") == 0 && !p->csv_path)
			diag_error(d, name.loc,
				"schedule csv takes its order from a file: use --from-torch-csv FILE");
		p->schedule = arena_strdup(a, name.s);
		p->sched_loc = name.loc;
	}
	if (o->microbatches) {
		whole(&c, &num, "microbatches", 1, MAX_MICROBATCHES, &p->microbatches);
		p->mb_loc = num.loc;
	}
	if (o->from_csv) { // as if the file said `schedule csv "FILE";`
		if (!o->from_csv[0])
			diag_error(d, csv, "empty file name");
		p->schedule = arena_strdup(a, "csv");
		p->csv_path = arena_strdup(a, o->from_csv);
		p->sched_loc = csv;
	}
	return d->nerrors > errors;
}
