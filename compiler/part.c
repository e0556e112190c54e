/* Automatic stage partitioning: `model { ... }` cut into stages by pipecc.
 *
 * The model's top-level layers are the units a cut may fall between: a plain layer or
 * a `residual { }` is one unit, a block use `NAME x N` is N units (so `llama x 32` may
 * be cut anywhere between its copies), and a `cut;` line between two of them pins a
 * cut there.  Nothing is ever cut inside a residual body or a block.
 *
 * The front end works in two steps around its checker (check.c's front_parse):
 * part_prepare writes k stage statements `s0`, `s1`, ... after the model, cut evenly,
 * and the program is checked once that way, quietly (the probe); part_choose reads
 * each unit's F+B+W time and bytes off the probe's layers (the checker's own cost
 * model: the layer table's FLOPs at the device's rate, its parameters and saved
 * bytes), runs the dynamic program part_split over the cut points and points the
 * stage statements at the chosen cut, which the front end then checks for real.  A
 * probe that fails keeps the even cut: the real check reports why, at the layers.
 *
 * The memory each stage may hold is the device's capacity over the stages per rank;
 * a stage holds its parameters (weights, gradients, master copy, optimizer state),
 * its saved bytes for each microbatch whose backward is pending at its peak, its
 * received input and its outputs not yet taken (every microbatch's under gpipe; as
 * 1F1B holds them, k - j saved and two outputs at stage j of k, about what plan/mem.c
 * measures of 1F1B; interleaved and V orders differ).  This is the DP's model:
 * the compiled plan is then checked against the capacity by the memory model
 * (plan/mem.c), as every plan is, and schedule auto confirms its orders in pipesim. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../plan/mem.h"
#include "../plan/optim.h"
#include "../plan/prec.h"
#include "part.h"
#include "schedule.h"

struct PartCut {
	AstStmt *model, *stages;
	int n, k, per_rank;
	int auto_count;        // the count is pp x per_rank (no `stages N;`)
	AstLayer *units;       // [n]: the model's top-level layers, block uses repeated
	uint8_t *pin;          // [n]: `cut;` before unit u
	Loc *pin_loc;          // [n]: where
	uint8_t *cut_ok;       // [n]: a stage may begin at unit u
	AstStmt **st;          // [k]: the stage statements written after the model
	int *cut;              // [k + 1]
	AstProgram *ast;
};

/* ---- the dynamic program --------------------------------------------------------- */

static int64_t sum(const int64_t *pre, int a, int b)
{
	return pre[b] - pre[a];
}

static int64_t *prefix(const int64_t *v, int n)
{
	int64_t *p = calloc((size_t)n + 1, sizeof *p);
	for (int i = 0; p && i < n; i++)
		p[i + 1] = p[i] + (v ? v[i] : 0);
	return p;
}

int64_t part_bottleneck(const PartProblem *pb, const int *cut)
{
	int64_t worst = 0;
	for (int j = 0; j < pb->k; j++) {
		int64_t t = 0;
		for (int u = cut[j]; u < cut[j + 1]; u++)
			t += pb->time[u];
		worst = t > worst ? t : worst;
	}
	return worst;
}

int64_t part_stage_mem(const PartProblem *pb, int j, int a, int b)
{
	int64_t m = 0;
	for (int u = a; u < b; u++)
		m += (pb->stat ? pb->stat[u] : 0) +
		     (pb->inflight ? pb->inflight[j] : 1) * (pb->act ? pb->act[u] : 0);
	if (pb->edge && a > 0)
		m += pb->edge[a];
	if (pb->edge && b < pb->n)
		m += (pb->outflight ? pb->outflight[j] : 1) * pb->edge[b];
	return m;
}

/* best[j][b]: the least bottleneck of j stages over units [0, b); from[j][b] the
 * first unit of the j-th.  A stage [a, b) as stage j - 1 may begin at a (cut_ok), may
 * not hold a pinned cut inside, and fits its share of memory. */
int64_t part_split(const PartProblem *pb, int *cut)
{
	int n = pb->n, k = pb->k;
	if (k < 1 || n < k)
		return PART_NONE;
	int64_t *tp = prefix(pb->time, n), *sp = prefix(pb->stat, n), *ap = prefix(pb->act, n);
	int *pins = calloc((size_t)n + 1, sizeof *pins); // pins[x]: pinned cuts at units < x
	int64_t *best = malloc((size_t)(k + 1) * (size_t)(n + 1) * sizeof *best);
	int *from = malloc((size_t)(k + 1) * (size_t)(n + 1) * sizeof *from);
	int64_t r = PART_OOM;
	if (!tp || !sp || !ap || !pins || !best || !from)
		goto out;
	for (int u = 0; u < n; u++)
		pins[u + 1] = pins[u] + (u > 0 && pb->pin && pb->pin[u]);
#define AT(j, b) ((size_t)(j) * (size_t)(n + 1) + (size_t)(b))
	for (size_t i = 0; i < (size_t)(k + 1) * (size_t)(n + 1); i++)
		best[i] = -1;
	best[AT(0, 0)] = 0;
	for (int j = 1; j <= k; j++) {
		int64_t room = pb->cap;
		int fl = pb->inflight ? pb->inflight[j - 1] : 1;
		int out = pb->outflight ? pb->outflight[j - 1] : 1;
		for (int b = j; b <= n - (k - j); b++) {
			int lo = j - 1, hi = b - 1;
			if (pb->max_len > 0 && b - pb->max_len > lo)
				lo = b - pb->max_len;
			if (pb->min_len > 0 && b - pb->min_len < hi)
				hi = b - pb->min_len;
			for (int a = lo; a <= hi; a++) {
				int64_t prev = best[AT(j - 1, a)];
				if (prev < 0 || (j == 1) != (a == 0))
					continue;
				if (a > 0 && pb->cut_ok && !pb->cut_ok[a])
					continue;
				if (pins[b] - pins[a + 1] > 0) // a pinned cut strictly inside [a, b)
					continue;
				if (room > 0 && sum(sp, a, b) + fl * sum(ap, a, b) +
				    (a > 0 && pb->edge ? pb->edge[a] : 0) +
				    (b < n && pb->edge ? out * pb->edge[b] : 0) > room)
					continue;
				int64_t t = sum(tp, a, b), v = t > prev ? t : prev;
				if (best[AT(j, b)] < 0 || v < best[AT(j, b)]) {
					best[AT(j, b)] = v;
					from[AT(j, b)] = a;
				}
			}
		}
	}
	r = best[AT(k, n)];
	if (r < 0) {
		r = PART_NONE;
		goto out;
	}
	cut[k] = n;
	for (int j = k; j > 0; j--)
		cut[j - 1] = from[AT(j, cut[j])];
#undef AT
out:
	free(tp);
	free(sp);
	free(ap);
	free(pins);
	free(best);
	free(from);
	return r;
}

/* ---- the model's units ----------------------------------------------------------- */

static const AstStmt *find_block(const AstProgram *ast, const char *name)
{
	for (const AstStmt *s = ast->head; s; s = s->next)
		if (s->kind == AST_BLOCK && s->name.s && !strcmp(s->name.s, name))
			return s;
	return NULL;
}

static int is_cut(const AstLayer *al)
{
	return al->name.s && !strcmp(al->name.s, "cut") && al->nargs == 0 && !al->has_body;
}

/* `NAME x N` of a block NAME: N (1 for `NAME;`); 0 when it is not a block use the
 * checker will accept (it then reports it, on one unit). */
static int block_times(const AstProgram *ast, const AstLayer *al)
{
	if (!al->name.s || al->has_body || !find_block(ast, al->name.s))
		return 0;
	if (al->nargs == 0)
		return 1;
	if (al->nargs != 2 || !al->args[0].is_name || al->args[0].has_val ||
	    strcmp(al->args[0].name.s, "x") || al->args[1].is_name || al->args[1].num.bad ||
	    al->args[1].num.neg || al->args[1].num.unit[0])
		return 0;
	char *end;
	long v = strtol(al->args[1].num.digits, &end, 10);
	return *end || v < 1 || v > 65536 ? 0 : (int)v;
}

/* Reports every `cut` in als[0..n): inside a residual body or a block (where) a cut
 * would split what must stay whole. */
static int misplaced_cuts(Diag *d, const AstLayer *als, int n, const char *where)
{
	int bad = 0;
	for (int i = 0; i < n; i++) {
		if (is_cut(&als[i])) {
			diag_error(d, als[i].loc, "'cut' stands only between the model's top-level "
			           "layers, not inside %s", where);
			bad++;
		}
		if (als[i].has_body)
			bad += misplaced_cuts(d, als[i].layers, als[i].nlayers, "a residual body");
	}
	return bad;
}

/* The one block statement named by al's use, defined above `before`, sound; else NULL. */
static const AstStmt *block_above(const AstProgram *ast, const AstLayer *al,
                                  const AstStmt *before)
{
	const AstStmt *found = NULL;
	for (const AstStmt *s = ast->head; s && s != before; s = s->next)
		if (s->kind == AST_BLOCK && s->name.s && al->name.s && !strcmp(s->name.s, al->name.s)) {
			if (found)
				return NULL;
			found = s;
		}
	return found && !found->bad && found->nlayers > 0 ? found : NULL;
}

/* Whether every block use in als[0..n) (bodies too) names a sound block above `before`
 * whose own uses do likewise, at most 64 deep: what the checker accepts, so that its
 * layers may be written out in a stage (the checker then sees no use to report on). */
static int uses_ok(const AstProgram *ast, const AstLayer *als, int n, const AstStmt *before,
                   int depth)
{
	for (int i = 0; i < n; i++) {
		const AstLayer *al = &als[i];
		if (al->name.s && find_block(ast, al->name.s)) {
			const AstStmt *b = block_above(ast, al, before);
			if (!b || !block_times(ast, al) || depth >= 64 ||
			    !uses_ok(ast, b->layers, b->nlayers, b, depth + 1))
				return 0;
		} else if (al->has_body && !uses_ok(ast, al->layers, al->nlayers, before, depth)) {
			return 0;
		}
	}
	return 1;
}

/* Unit al (a layer of the model, or of a block written out in it) into pc->units[*n..]
 * (counted only while pc->units is NULL).  A sound block use is written out: its
 * top-level layers, N times, are units (a stage may begin at any of them); any other
 * use stays whole, N copies of `NAME;`, for the checker to judge. */
static void collect(PartCut *pc, const AstLayer *al, const AstStmt *before, int depth, int *n)
{
	int t = block_times(pc->ast, al);
	const AstStmt *b = t > 0 ? block_above(pc->ast, al, before) : NULL;
	if (b && uses_ok(pc->ast, al, 1, before, depth)) {
		for (int c = 0; c < t; c++)
			for (int i = 0; i < b->nlayers; i++)
				collect(pc, &b->layers[i], b, depth + 1, n);
		return;
	}
	for (int c = 0; c < (t > 0 ? t : 1); c++) {
		if (pc->units) {
			pc->units[*n] = *al;
			if (t > 0) { // one copy of the block: `NAME;`
				pc->units[*n].nargs = 0;
				pc->units[*n].args = NULL;
			}
			/* `dropout` keeps only its mask: it cannot begin a stage */
			pc->cut_ok[*n] = !(al->name.s && !strcmp(al->name.s, "dropout"));
		}
		(*n)++;
	}
}

/* The checked layers unit al expands into (the probe checked it: its blocks exist). */
static int unit_size(const AstProgram *ast, const AstLayer *al)
{
	int times = block_times(ast, al);
	if (times > 0) {
		const AstStmt *b = find_block(ast, al->name.s);
		int one = 0;
		for (int i = 0; i < b->nlayers; i++)
			one += unit_size(ast, &b->layers[i]);
		return times * one;
	}
	int size = 1;
	for (int i = 0; al->has_body && i < al->nlayers; i++)
		size += unit_size(ast, &al->layers[i]);
	return size;
}

int part_mesh_pp(const AstProgram *ast)
{
	for (const AstStmt *s = ast->head; s; s = s->next)
		for (int i = 0; s->kind == AST_MESH && !s->bad && i < s->nkvs; i++) {
			const AstKv *kv = &s->kvs[i];
			if (kv->key.s && !strcmp(kv->key.s, "pp") && kv->has_val && !kv->val.bad &&
			    !kv->val.neg && !kv->val.unit[0]) {
				char *end;
				long v = strtol(kv->val.digits, &end, 10);
				if (!*end && v >= 1 && v <= (1 << 20))
					return (int)v;
			}
		}
	return 1;
}

/* The registry row the file's schedule names, or NULL. */
static const Schedule *file_schedule(const AstProgram *ast)
{
	for (const AstStmt *s = ast->head; s; s = s->next)
		if (s->kind == AST_SCHEDULE && !s->bad && s->name.s)
			return sched_find(s->name.s);
	return NULL;
}

/* The stage count: `stages N;`, else the mesh's pp times the schedule's chunks. */
static int stage_count(Diag *d, PartCut *pc, int *k)
{
	const AstStmt *s = pc->stages;
	const Schedule *row = file_schedule(pc->ast);
	pc->per_rank = row && row->chunks > 1 ? row->chunks : 1;
	*k = part_mesh_pp(pc->ast) * pc->per_rank;
	if (!s || s->bad)
		return 0;
	if (s->name.s) {
		if (strcmp(s->name.s, "auto")) {
			diag_error(d, s->name.loc, "'stages' takes a count or 'auto', got '%s'", s->name.s);
			return 1;
		}
		return 0;
	}
	const AstNum *v = &s->num;
	char *end;
	long n = strtol(v->digits, &end, 10);
	if (v->bad)
		return 1;
	if (*end || v->unit[0] || v->neg || n < 1 || n > 65536) {
		diag_error(d, v->loc, "'stages' takes a count from 1 to 65536 or 'auto', got '%s%s%s'",
		           v->neg ? "-" : "", v->digits, v->unit);
		return 1;
	}
	*k = (int)n;
	int pp = part_mesh_pp(pc->ast);
	pc->per_rank = (int)((n + pp - 1) / pp);
	return 0;
}

static void set_stages(PartCut *pc, const int *cut)
{
	for (int j = 0; j < pc->k; j++) {
		pc->cut[j] = cut[j];
		pc->st[j]->layers = pc->units + cut[j];
		pc->st[j]->nlayers = cut[j + 1] - cut[j];
	}
	pc->cut[pc->k] = pc->n;
}

/* The even cut: stage j begins at unit round(j n / k), moved to the next unit a stage
 * may begin at, pins kept (part_prepare made sure there is room). */
static void even_cut(const PartCut *pc, int *cut)
{
	PartProblem pb = {.n = pc->n, .k = pc->k, .cut_ok = pc->cut_ok, .pin = pc->pin};
	int64_t *ones = malloc((size_t)pc->n * sizeof *ones);
	if (ones) {
		for (int u = 0; u < pc->n; u++)
			ones[u] = 1;
		pb.time = ones;
		if (part_split(&pb, cut) >= 0) { // the least largest stage in units
			free(ones);
			return;
		}
		free(ones);
	}
	for (int j = 0; j <= pc->k; j++)
		cut[j] = (int)((int64_t)j * pc->n / pc->k);
}

/* The program's first `model`, `stages` and `stage` statements; cuts in blocks are
 * reported (their count added to *bad).  -1 when the three do not go together. */
static int find_model(Diag *d, AstProgram *ast, AstStmt **model, AstStmt **stages, int *bad)
{
	AstStmt *stage = NULL;
	*model = *stages = NULL;
	for (AstStmt *s = ast->head; s; s = s->next) {
		if (s->kind == AST_MODEL && !*model)
			*model = s;
		else if (s->kind == AST_STAGES && !*stages)
			*stages = s;
		else if (s->kind == AST_STAGE && !stage)
			stage = s;
		if (s->kind == AST_BLOCK)
			*bad += misplaced_cuts(d, s->layers, s->nlayers, "a block");
	}
	if (*model && stage) {
		diag_error(d, (*model)->loc, "a program gives either 'model' (pipecc cuts it into "
		           "stages) or 'stage' statements, not both");
		diag_note(d, stage->loc, "a stage is declared here");
		return -1;
	}
	if (*stages && !*model) {
		diag_error(d, (*stages)->loc, "'stages' says how many stages to cut a 'model { ... }' "
		           "into, and there is no model");
		return -1;
	}
	return 0;
}

/* The model's units (collect) and its pinned cuts: pc->pin, pc->pin_loc; *npins of them.
 * Returns the misplaced cuts reported. */
static int read_units(Arena *a, Diag *d, PartCut *pc, int *npins)
{
	const AstStmt *model = pc->model;
	pc->units = arena_alloc(a, (size_t)pc->n * sizeof *pc->units);
	pc->pin = arena_alloc(a, (size_t)pc->n + 1);
	pc->pin_loc = arena_alloc(a, ((size_t)pc->n + 1) * sizeof *pc->pin_loc);
	pc->cut_ok = arena_alloc(a, (size_t)pc->n + 1);
	int n = 0, bad = 0;
	*npins = 0;
	for (int i = 0; i < model->nlayers; i++) {
		const AstLayer *al = &model->layers[i];
		if (!is_cut(al)) {
			collect(pc, al, model, 0, &n);
			continue;
		}
		if (n == 0 || i == model->nlayers - 1 || is_cut(&model->layers[i + 1])) {
			diag_error(d, al->loc, "a 'cut' stands between two layers of the model, %s",
			           n == 0 ? "not before the first" : i == model->nlayers - 1 ?
			           "not after the last" : "once");
			bad++;
		} else if (!pc->pin[n]) {
			pc->pin[n] = 1;
			pc->pin_loc[n] = al->loc;
			++*npins;
		}
	}
	return bad;
}

/* Whether k stages can be cut from the pc->n units with the pins given; 0, or -1 after
 * reporting. */
static int cut_possible(Diag *d, const PartCut *pc, int k, int npins)
{
	const AstStmt *stages = pc->stages;
	int n = pc->n;
	Loc at = stages ? stages->loc : pc->model->loc;
	if (n < k) {
		diag_error(d, at, "the model has %d layer%s to cut, fewer than its %d stages", n,
		           n == 1 ? "" : "s", k);
		if (!stages || stages->name.s)
			diag_note(d, at, "%d pipeline ranks x %d stage%s per rank (the schedule's)",
			          k / pc->per_rank, pc->per_rank, pc->per_rank == 1 ? "" : "s");
		return -1;
	}
	for (int u = 1, seen = 0; u < n && npins > k - 1; u++)
		if (pc->pin[u] && ++seen == k) {
			diag_error(d, pc->pin_loc[u], "this cut makes %d stages, more than the %d "
			           "the model is cut into", npins + 1, k);
			return -1;
		}
	for (int u = 1; u < n; u++)
		if (pc->pin[u] && !pc->cut_ok[u]) {
			diag_error(d, pc->pin_loc[u], "a stage cannot begin with 'dropout' (it keeps "
			           "only its mask, not its input): cut before the layer above it");
			return -1;
		}
	return 0;
}

/* k stage statements s0 .. s(k-1) after the model's, their layers still to be given. */
static void insert_stages(Arena *a, AstProgram *ast, PartCut *pc, int k)
{
	AstStmt *model = pc->model, *after = model, *rest = model->next;
	pc->k = k;
	pc->st = arena_alloc(a, (size_t)k * sizeof *pc->st);
	pc->cut = arena_alloc(a, ((size_t)k + 1) * sizeof *pc->cut);
	for (int j = 0; j < k; j++) {
		AstStmt *s = arena_alloc(a, sizeof *s);
		char name[16];
		snprintf(name, sizeof name, "s%d", j);
		s->kind = AST_STAGE;
		s->loc = model->loc;
		s->span = model->span;
		s->name = (AstName){arena_strdup(a, name), model->loc};
		after->next = s;
		after = s;
		pc->st[j] = s;
	}
	after->next = rest;
	ast->nstmts += k;
}

int part_prepare(Arena *a, Diag *d, AstProgram *ast, int per_rank, PartCut **out)
{
	*out = NULL;
	AstStmt *model, *stages;
	int bad = 0;
	if (find_model(d, ast, &model, &stages, &bad))
		return 1;
	if (!model)
		return bad;
	PartCut *pc = arena_alloc(a, sizeof *pc);
	pc->model = model;
	pc->stages = stages;
	pc->ast = ast;
	for (int i = 0; i < model->nlayers; i++) {
		const AstLayer *al = &model->layers[i];
		if (al->has_body)
			bad += misplaced_cuts(d, al->layers, al->nlayers, "a residual body");
		if (!is_cut(al))
			collect(pc, al, model, 0, &pc->n);
	}
	if (model->bad)
		return 1;
	int npins, k;
	bad += read_units(a, d, pc, &npins);
	if (bad || stage_count(d, pc, &k))
		return 1;
	pc->auto_count = !stages || stages->bad || stages->name.s;
	if (pc->auto_count && per_rank > 0) {
		k = k / pc->per_rank * per_rank;
		pc->per_rank = per_rank;
	}
	if (cut_possible(d, pc, k, npins))
		return 1;
	insert_stages(a, ast, pc, k);
	int *cut = arena_alloc(a, ((size_t)k + 1) * sizeof *cut);
	even_cut(pc, cut);
	set_stages(pc, cut);
	*out = pc;
	return 0;
}

/* ---- choosing the cut ---------------------------------------------------------- */

/* Whether cut[0..k] (k = pt->k) splits pt->n units into non-empty stages that each
 * begin where a stage may, every `cut;` kept. */
static int cut_valid(const ProgPart *pt, const int *cut)
{
	if (cut[0] != 0 || cut[pt->k] != pt->n)
		return 0;
	for (int j = 1; j <= pt->k; j++)
		if (cut[j] <= cut[j - 1] || (j < pt->k && !pt->cut_ok[cut[j]]))
			return 0;
	for (int u = 1, j = 1; u < pt->n; u++) {
		while (j < pt->k && cut[j] < u)
			j++;
		if (pt->pin[u] && (j == pt->k || cut[j] != u))
			return 0;
	}
	return 1;
}

/* The stage of cut[0..k] with the most F+B+W (the first of equals). */
static int slowest(const ProgPart *pt, const int *cut)
{
	int slow = 0;
	int64_t worst = -1;
	for (int j = 0; j < pt->k; j++) {
		int64_t t = 0;
		for (int u = cut[j]; u < cut[j + 1]; u++)
			t += pt->unit[u];
		if (t > worst)
			worst = t, slow = j;
	}
	return slow;
}

/* cut with cut i moved by di and cut j (when j > 0) by dj, into c; whether valid. */
static int move(const ProgPart *pt, const int *cut, int i, int di, int j, int dj, int *c)
{
	memcpy(c, cut, ((size_t)pt->k + 1) * sizeof *c);
	c[i] += di;
	if (j > 0)
		c[j] += dj;
	return cut_valid(pt, c);
}

int part_moves(const ProgPart *pt, const int *cut, int *out)
{
	int k = pt->k, slow = slowest(pt, cut), js[4], nj = 0, n = 0;
	const int which[4] = {1, k - 1, slow, slow + 1}; // cut indices, in this order
	for (int i = 0; i < 4; i++) {
		int seen = which[i] < 1 || which[i] > k - 1;
		for (int e = 0; e < nj; e++)
			seen |= js[e] == which[i];
		if (!seen)
			js[nj++] = which[i];
	}
	size_t len = (size_t)k + 1;
	for (int a = 0; a < 2 * nj; a++) // one cut, one unit either way
		n += move(pt, cut, js[a / 2], a % 2 ? 1 : -1, 0, 0, out + (size_t)n * len);
	for (int a = 0; a < 2 * nj; a++) // two of them
		for (int b = (a / 2 + 1) * 2; b < 2 * nj; b++)
			n += move(pt, cut, js[a / 2], a % 2 ? 1 : -1, js[b / 2], b % 2 ? 1 : -1,
			          out + (size_t)n * len);
	return n;
}

ProgPart *part_choose(Arena *a, Diag *d, PartCut *pc, const Program *pr, const int *given)
{
	int n = pc->n, k = pc->k;
	int64_t *time = arena_alloc(a, (size_t)n * sizeof *time);
	int64_t *stat = arena_alloc(a, (size_t)n * sizeof *stat);
	int64_t *act = arena_alloc(a, (size_t)n * sizeof *act);
	int64_t *edge = arena_alloc(a, ((size_t)n + 1) * sizeof *edge);
	LayerShape sh = prog_layer_shape(pr);
	int tp = pr->dims[DIM_TP];
	int s = 0, l = 0;
	int64_t per_param = plan_prec_param_bytes(pr->prec) + plan_optim_state_bytes(pr->optim.kind);
	PlanRoof dev = prog_roof(pr);
	for (int u = 0; u < n; u++) {
		double ns = 0;
		for (int left = unit_size(pc->ast, &pc->units[u]); left > 0; left--) {
			while (s < pr->nstages && l == pr->stages[s].nlayers) {
				s++;
				l = 0;
			}
			if (s == pr->nstages)
				die("part: the model's units outnumber the checked layers");
			const ProgLayer *ly = &pr->stages[s].layers[l++];
			if (left == unit_size(pc->ast, &pc->units[u]))
				edge[u] = (int64_t)pr->rows * ly->in * plan_prec(pr->prec)->act;
			PlanLayer pl = prog_plan_layer(ly);
			LayerCost lc = plan_layer_figures_tp(&pl, &sh, tp);
			RoofWork w[3];
			plan_layer_work(&pl, &sh, tp, w);
			for (int k = 0; k < 3; k++)
				ns += plan_roof_ns(&dev, &w[k]);
			stat[u] += lc.params * per_param;
			act[u] += lc.save_fb + lc.save_fw; // what F saves (B to W: not counted)
		}
		time[u] = ns < 1 ? 1 : (int64_t)(ns + 0.5);
	}
	/* 1F1B's peak at stage j: the saved bytes of k - j microbatches and two outputs in
	 * flight (what plan/mem.c measures of it); gpipe's: every microbatch's */
	int *inflight = arena_alloc(a, (size_t)k * sizeof *inflight);
	int *outflight = arena_alloc(a, (size_t)k * sizeof *outflight);
	const Schedule *row = sched_find(pr->schedule);
	int gpipe = row && !strcmp(row->name, "gpipe"), m = pr->microbatches;
	for (int j = 0; j < k; j++) {
		inflight[j] = gpipe || k - j > m ? m : k - j;
		outflight[j] = gpipe || m < 2 ? m : 2;
	}
	PartProblem pb = {.n = n, .k = k, .time = time, .stat = stat, .act = act, .edge = edge,
	                  .cut_ok = pc->cut_ok, .pin = pc->pin, .inflight = inflight,
	                  .outflight = outflight};
	/* memory is the DP's to weigh only where the saved bytes are what it counts */
	int recomputes = pr->recompute_all != 0;
	for (int j = 0; j < pr->nstages; j++)
		recomputes |= pr->stages[j].recompute != 0;
	if (pr->mem_cap > 0 && !recomputes)
		pb.cap = pr->mem_cap / (pc->per_rank > 0 ? pc->per_rank : 1);
	ProgPart *pt = arena_alloc(a, sizeof *pt);
	pt->n = n;
	pt->k = k;
	pt->per_rank = pc->per_rank;
	pt->auto_count = pc->auto_count;
	pt->unit = time;
	pt->cut_ok = pc->cut_ok;
	pt->pin = pc->pin;
	pt->cut = arena_alloc(a, ((size_t)k + 1) * sizeof *pt->cut);
	int64_t r = part_split(&pb, pt->cut);
	if (r == PART_NONE && pb.cap > 0) {
		PartProblem free_pins = pb;
		free_pins.pin = NULL;
		int *tmp = arena_alloc(a, ((size_t)k + 1) * sizeof *tmp);
		if (part_split(&free_pins, tmp) >= 0) {
			for (int u = 1; u < n; u++)
				if (pc->pin[u]) {
					diag_error(d, pc->pin_loc[u], "no split with the cuts pinned here fits "
					           "the device's memory (%s a stage, the memory model's "
					           "estimate): move or drop the cut", plan_mem_text((char[32]){0},
					           32, pb.cap));
					break;
				}
			return NULL;
		}
		pb.cap = 0; // nothing fits: the cut for speed, the memory check says the rest
		r = part_split(&pb, pt->cut);
	}
	if (r == PART_OOM) {
		diag_error(d, pc->model->loc, "out of memory cutting the model into stages");
		return NULL;
	}
	if (r < 0) // the pins and the dropouts leave no cut: keep the even one
		memcpy(pt->cut, pc->cut, ((size_t)k + 1) * sizeof *pt->cut);
	if (given && cut_valid(pt, given)) // pipecc moving a cut (part_moves)
		memcpy(pt->cut, given, ((size_t)k + 1) * sizeof *pt->cut);
	pt->cap = pb.cap;
	pt->time = arena_alloc(a, (size_t)k * sizeof *pt->time);
	pt->mem = arena_alloc(a, (size_t)k * sizeof *pt->mem);
	for (int j = 0; j < k; j++) {
		for (int u = pt->cut[j]; u < pt->cut[j + 1]; u++)
			pt->time[j] += time[u];
		pt->mem[j] = part_stage_mem(&pb, j, pt->cut[j], pt->cut[j + 1]);
	}
	pt->bottleneck = part_bottleneck(&pb, pt->cut);
	/* the best split of equal layer counts (n / k, or one more), for comparison */
	PartProblem ub = {.n = n, .k = k, .time = time, .cut_ok = pc->cut_ok,
	                  .min_len = n / k, .max_len = (n + k - 1) / k};
	int *ucut = arena_alloc(a, ((size_t)k + 1) * sizeof *ucut);
	if (part_split(&ub, ucut) >= 0) {
		pt->ucut = ucut;
		pt->utime = arena_alloc(a, (size_t)k * sizeof *pt->utime);
		for (int j = 0; j < k; j++)
			for (int u = ucut[j]; u < ucut[j + 1]; u++)
				pt->utime[j] += time[u];
		pt->ubottleneck = part_bottleneck(&ub, ucut);
	}
	set_stages(pc, pt->cut);
	return pt;
}

void part_explain(FILE *f, const Program *p)
{
	const ProgPart *pt = p->part;
	char m[32], t[32];
	fprintf(f, "model: %d layers cut into %d stages (%d per rank), the slowest stage's "
	        "F+B+W least", pt->n, pt->k, pt->per_rank);
	if (pt->cap > 0)
		fprintf(f, ", each stage within %s", plan_mem_text(m, sizeof m, pt->cap));
	else
		fputs(", memory not weighed (no device memory, or recomputation)", f);
	fputs("\n  stage  layers         F+B+W        memory\n", f);
	for (int j = 0; j < pt->k; j++)
		fprintf(f, "  %-6s %4d..%-4d %10s  %12s\n", p->stages[j].name, pt->cut[j],
		        pt->cut[j + 1] - 1, plan_time_text(t, sizeof t, pt->time[j]),
		        pt->cap > 0 ? plan_mem_text(m, sizeof m, pt->mem[j]) : "-");
	fprintf(f, "  slowest stage %s\n", plan_time_text(t, sizeof t, pt->bottleneck));
	if (!pt->ucut) {
		fputs("best uniform split: none (no split of equal layer counts is possible)\n", f);
		return;
	}
	fputs("best uniform split (equal layer counts):", f);
	for (int j = 0; j < pt->k; j++)
		fprintf(f, " %d", pt->ucut[j + 1] - pt->ucut[j]);
	fprintf(f, "\n  slowest stage %s;", plan_time_text(t, sizeof t, pt->ubottleneck));
	for (int j = 0; j < pt->k; j++)
		fprintf(f, " %s", plan_time_text(t, sizeof t, pt->utime[j]));
	double gain = pt->ubottleneck ? 100.0 * (double)(pt->ubottleneck - pt->bottleneck) /
	                                (double)pt->ubottleneck : 0.0;
	fprintf(f, "\n  the cut's slowest stage is %.1f%% %s\n", gain < 0 ? -gain : gain,
	        gain >= 0 ? "faster" : "slower (memory kept it off the uniform split)");
}

void part_warn_balance(const Program *pr, Diag *d)
{
	if (pr->part || pr->nstages < 2)
		return;
	double total = 0, worst = -1;
	int at = 0;
	for (int s = 0; s < pr->nstages; s++) {
		const int64_t *c = pr->stages[s].cost;
		double t = (double)c[0] + (double)c[1] + (double)c[2];
		total += t;
		if (t > worst) {
			worst = t;
			at = s;
		}
	}
	double mean = total / pr->nstages;
	char a[32], b[32];
	if (worst > 1.1 * mean)
		diag_warning(d, pr->stages[at].loc, "stage '%s' is the slowest: its F+B+W takes %s, "
		             "%.0f%% above the mean stage's %s; 'model { ... }' with 'stages auto;' "
		             "lets pipecc cut the layers evenly by time", pr->stages[at].name,
		             plan_time_text(a, sizeof a, (int64_t)worst), 100 * (worst / mean - 1),
		             plan_time_text(b, sizeof b, (int64_t)(mean + 0.5)));
}
