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

#include "check_int.h"
#include "batch.h"
#include "part.h"
#include "schedule.h"

int over_limit(const Check *c)
{
	int limit = c->d->max_errors > 0 ? c->d->max_errors : 20;
	return c->d->nerrors > limit;
}

/* ---- numbers ------------------------------------------------------------------ */

/* A whole number without unit in [min, max] into *out; 0 after reporting. */
/* A name where a number belongs (`key=name`: no digits); reports it. */
static int not_number(Check *c, const AstNum *n)
{
	if (n->digits[0])
		return 0;
	diag_error(c->d, n->loc, "expected a number, got '%s'", n->unit);
	return 1;
}

int whole(Check *c, const AstNum *n, const char *what, long min, long max, int *out)
{
	if (n->bad || not_number(c, n))
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

static const Unit time_units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
static const Unit rate_units[] = {
	{"B/s", 1}, {"KB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12},
	{"KiB/s", 1024.0}, {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0},
	{"TiB/s", 1099511627776.0},
};

/* The scale of n's unit among units[0..nu); reports an unknown one. */
int unit_scale(Check *c, const AstNum *n, const Unit *units, int nu,
	const char *kind, const char *expected, double *scale)
{
	const char *names[16];
	if (not_number(c, n))
		return 0;
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

int real(Check *c, const AstNum *n, double *v)
{
	if (not_number(c, n))
		return 0;
	*v = strtod(n->digits, NULL);
	if (!isfinite(*v) || *v > 1e300) {
		diag_error(c->d, n->loc, "number too large");
		return 0;
	}
	return 1;
}

/* A time in integer nanoseconds; a bare number is microseconds. */
int time_ns(Check *c, const AstNum *n, const char *what, int64_t *out)
{
	double scale = 1e3, v;
	if (n->bad || not_number(c, n))
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

int bandwidth(Check *c, const AstNum *n, double *out)
{
	double scale, v;
	if (n->bad || not_number(c, n))
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

/* "a, b, c": words[0..n) joined into list (size size), or "" if they are too many to
 * read (the layer kinds have their own list: check_layers.c). */
void word_list(char *list, size_t size, const char *const *words, int n)
{
	enum { LIST_MAX = 24 };
	size_t len = 0;
	list[0] = 0;
	for (int i = 0; i < n && n <= LIST_MAX && len < size; i++)
		if (words[i])
			len += (size_t)snprintf(list + len, size - len, "%s%s", len ? ", " : "", words[i]);
}

/* Reports a word that is not one of words[0..n); `what` names the kind of word.  With
 * no close word to suggest, the message lists them. */
void unknown_word(Check *c, const AstName *w, const char *what,
	const char *const *words, int n)
{
	const char *s = diag_suggest(w->s, words, n);
	char list[512];
	word_list(list, sizeof list, words, n);
	if (s)
		diag_error(c->d, w->loc, "unknown %s '%s'; did you mean '%s'?", what, w->s, s);
	else if (list[0])
		diag_error(c->d, w->loc, "unknown %s '%s'; valid: %s", what, w->s, list);
	else
		diag_error(c->d, w->loc, "unknown %s '%s'", what, w->s);
}

int find_word(const char *s, const char *const *words, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(s, words[i]) == 0)
			return i;
	return -1;
}

/* The index of the stage a skip or cost names, which must be declared above it. */
int check_resolve(Check *c, const AstName *n)
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
int repeated_key(Check *c, const AstKv *kvs, int i, const char *what)
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

static void check_skip(Check *c, AstStmt *s)
{
	Program *p = c->p;
	int a = check_resolve(c, &s->name);
	int b = check_resolve(c, &s->name2);
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
		target = check_resolve(c, &s->name);
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

/* The statements that declare a name, which the plan and the reports carry. */
static const uint8_t declares_name[AST_COUNT] = {
	[AST_PIPELINE] = 1, [AST_STAGE] = 1, [AST_BLOCK] = 1,
};

static void check_stmt(Check *c, AstStmt *s)
{
	Program *p = c->p;
	if (declares_name[s->kind] && s->name.s && strchr(s->name.s, '-'))
		diag_error(c->d, s->name.loc, "'%s' is not a name: names are letters, digits and "
		           "'_'", s->name.s);
	switch (s->kind) {
	case AST_PIPELINE:
		p->name = s->name.s;
		p->name_loc = s->name.loc;
		break;
	case AST_MESH:
		check_mesh(c, s);
		break;
	case AST_MICROBATCHES:
		if (s->name.s) // auto with an input the checker refuses (compiler/batch.c)
			break;
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
		int a = check_resolve(c, &s->name), b = check_resolve(c, &s->name2);
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
	case AST_RECOMPUTE:
		check_recompute(c, s);
		break;
	case AST_PRECISION:
		check_precision(c, s);
		break;
	case AST_MODEL:  // compiler/part.c wrote its stages after it
	case AST_STAGES:
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
		if (!c->first[req[i].kind] && !(req[i].kind == AST_STAGE && c->first[AST_MODEL]))
			diag_error(c->d, (Loc){0}, "%s", req[i].msg);
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

/* "12F3" at s in token t: stage digits, one letter, microbatch digits (the lexer made
 * sure; a pair `0F3&3B1` is two, check_custom reads each); *end: past it. */
static int action(Check *c, const AstName *t, const char *s, const char **end, ProgAction *a)
{
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
	*a = (ProgAction){.kind = k, .stage = (int)v[0], .mb = (int)v[1], .loc = t->loc};
	*end = s;
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
		cr->acts = arena_alloc(c->a, (size_t)r->nacts * 2 * sizeof *cr->acts); // pairs: two
		for (int j = 0; j < r->nacts && !over_limit(c); j++)
			for (const char *s = r->acts[j].s;
			     action(c, &r->acts[j], s, &s, &cr->acts[cr->nacts]); s++) {
				ProgAction *a = &cr->acts[cr->nacts++];
				if (!(a->pair = *s == '&'))
					break;
			}
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
	p->node_latency_ns = PROG_DEFAULT_NODE_LATENCY_NS;
	p->node_bandwidth = PROG_DEFAULT_NODE_BANDWIDTH;
	p->peak_flops = PROG_DEFAULT_FLOPS;
	for (int k = 0; k < ROOF_COUNT; k++)
		p->eff[k] = plan_roof_classes[k].eff;

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
	map_init(a, &c.blocks, nblock_stmts);
	for (AstStmt *s = ast->head; s; s = s->next)
		if (s->kind == AST_BLOCK && s->name.s) {
			Slot *slot = map_slot(&c.blocks, s->name.s, 0);
			if (!slot->used)
				map_set(slot, s->name.s, 0, c.nblock_names);
			c.block_stmt[c.nblock_names++] = s;
		}
	map_init(a, &c.stages, nstage_stmts);
	map_init(a, &c.skips, nskip_stmts);
	c.stage_stmt = arena_alloc(a, (size_t)nstage_stmts * sizeof *c.stage_stmt);
	c.stage_ok = arena_alloc(a, (size_t)nstage_stmts);
	c.cost_stmt = arena_alloc(a, (size_t)nstage_stmts * sizeof *c.cost_stmt);
	c.recompute_stmt = arena_alloc(a, (size_t)nstage_stmts * sizeof *c.recompute_stmt);
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
		           s->kind == AST_RECOMPUTE ||
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
	check_vocab_pad(&c);
	check_layers(&c);
	check_lists(&c);
	check_custom(&c);
	check_costs(&c);
	check_tp(&c);
	check_selective(&c);
	return p;
}

/* Where the probe's diagnostics go: nowhere. */
static ssize_t sink_write(void *cookie, const char *buf, size_t n)
{
	(void)cookie;
	(void)buf;
	return (ssize_t)n;
}

Program *front_parse(Arena *a, Diag *d, const char *file, const char *src, size_t len)
{
	return front_parse_cut(a, d, file, src, len, 0);
}

Program *front_parse_cut(Arena *a, Diag *d, const char *file, const char *src, size_t len,
                         int per_rank)
{
	return front_parse_split(a, d, file, src, len, per_rank, 0);
}

Program *front_parse_split(Arena *a, Diag *d, const char *file, const char *src, size_t len,
                           int per_rank, int m)
{
	return front_parse_given(a, d, file, src, len, per_rank, m, NULL);
}

Program *front_parse_given(Arena *a, Diag *d, const char *file, const char *src, size_t len,
                           int per_rank, int m, const int *cut)
{
	if (len > MAX_FILE) {
		diag_error(d, (Loc){0}, "file too large (%zu bytes, at most %u)", len, MAX_FILE);
		return NULL;
	}
	AstProgram *ast = ast_parse(a, d, src, len);
	if (ast->stopped)
		return NULL;
	BatchAuto ba;
	int split = batch_find(ast, &ba);
	PartCut *pc = NULL;
	if ((split && batch_split(a, d, &ba, m)) || part_prepare(a, d, ast, per_rank, &pc)) {
		check(a, d, file, ast); // the rest of the file's errors too
		return NULL;
	}
	ProgPart *part = NULL;
	if (pc && !d->nerrors) {
		/* the evenly cut program, checked quietly: its layers' figures choose the cut;
		 * when it fails the even cut stays, for the real check to say why */
		FILE *sink = fopencookie(NULL, "w", (cookie_io_functions_t){.write = sink_write});
		Diag quiet;
		diag_init(&quiet, file, src, len, sink);
		quiet.max_errors = 1;
		Program *probe = sink ? check(a, &quiet, file, ast) : NULL;
		if (probe && !quiet.nerrors && !(part = part_choose(a, d, pc, probe, cut))) {
			fclose(sink);
			return NULL;
		}
		if (sink)
			fclose(sink);
	}
	Program *p = check(a, d, file, ast);
	if (p) {
		p->part = part;
		p->batch = split ? ba.batch : 0;
	}
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
