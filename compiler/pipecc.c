/* The pass pipeline, in one readable function (run_passes): parse and check, search
 * (a registry row that searches, schedule auto, chooses what the passes after it take
 * as given), place, schedule, lower, verify, and the memory check.  Each pass returns
 * nonzero when it leaves diagnostics (or met an internal error), which stops the
 * pipeline; `--dump=PASS` prints the state after a pass (dumped).  Writing is the
 * caller's.  Out of memory anywhere in the arena's passes jumps back to pipecc_compile
 * (arena_oom), which reports it as a diagnostic and frees the compilation; the lowering
 * catches its own (lower.c). */
#include "pipecc.h"
#include "../plan/io.h"
#include "../plan/block.h"
#include "../plan/oom.h"
#include "../plan/line.h"

#include <errno.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "../plan/binary.h"
#include "../plan/mem.h"
#include "../plan/sysmem.h"
#include "batch.h"
#include "lower.h"
#include "part.h"
#include "place.h"
#include "program.h"
#include "schedule.h"

const char *const pipecc_pass_names[PASS_COUNT] = {"none", "parse", "place", "schedule",
                                                    "lower"};

static void dump_program(const Program *pr, FILE *f)
{
	fprintf(f, "pipeline %s\nmesh", pr->name);
	for (int i = 0; i < DIM_COUNT; i++)
		fprintf(f, " %s=%d", plan_dim_names[pr->dim_order[i]], pr->dims[pr->dim_order[i]]);
	fprintf(f, "\nmicrobatches %d\ninput %dx%d\nschedule %s\n", pr->microbatches, pr->rows,
	        pr->cols, pr->schedule);
	for (int s = 0; s < pr->nstages; s++) {
		const ProgStage *st = &pr->stages[s];
		fprintf(f, "stage %d %s in=%d out=%d f=%lldns b=%lldns w=%lldns:", s, st->name, st->in,
		        st->out, (long long)st->cost[0], (long long)st->cost[1],
		        (long long)st->cost[2]);
		for (int l = 0; l < st->nlayers; l++)
			fprintf(f, " %s(%d->%d)", plan_layers[st->layers[l].kind].name, st->layers[l].in,
			        st->layers[l].out);
		fputc('\n', f);
	}
	for (int k = 0; k < pr->nskips; k++)
		fprintf(f, "skip %s -> %s\n", pr->stages[pr->skips[k].src].name,
		        pr->stages[pr->skips[k].dst].name);
	if (pr->link_ideal)
		fprintf(f, "link ideal\n");
	else
		fprintf(f, "link latency=%lldns bandwidth=%.6gB/s\n", (long long)pr->latency_ns,
		        pr->bandwidth);
}

static void dump_schedule(const SchedCtx *c, FILE *f)
{
	for (int p = 0; p < c->pp; p++) {
		fprintf(f, "rank %d:", p);
		for (int i = 0; i < c->nacts[p]; i++)
			fprintf(f, " %d%c%d", c->acts[p][i].stage, plan_ops[c->acts[p][i].kind].torch,
			        c->acts[p][i].mb);
		fputc('\n', f);
	}
}

/* After errors located in the file, the values the command line changed, which may be
 * why: a custom order written for the file's microbatch count, say. */
static void note_overrides(Diag *d, const Program *pr)
{
	if (pr->sched_loc.line == DIAG_CMDLINE)
		diag_note(d, pr->sched_loc, "the schedule comes from the command line, not the file");
	if (pr->mb_loc.line == DIAG_CMDLINE)
		diag_note(d, pr->mb_loc,
			"the microbatch count comes from the command line, not the file");
}

/* The state of one compilation, on the heap: an arena allocation that fails jumps back
 * to pipecc_compile, and what changed between setjmp and longjmp must not be a local of
 * the function that called setjmp. */
typedef struct {
	Arena arena;
	jmp_buf oom;
	const char *file;
	const PipeccOptions *o;
	Diag *d;
	Program *pr;
	const Schedule *sched; // the program's registry row
	SchedChoice choice;    // a row that searches: what it chose
	SchedCtx c;
	int line;    // lowering one pipeline line (not for a dump)
	int tune;    // the lowering's communication tuning: the option's, or the search's
	Plan *plan;  // once lowered, until it is returned
	int errors;  // errors located in the file, once the command line has its say; or -1
	const char *src; // the source, for the program parsed again in another form (weigh)
	size_t len;
	int per_rank;    // stages a rank the program was cut for (0: its schedule's)
	char form[96];   // the form of k->pr when several are weighed (form())
} Compile;

/* The device's capacity against every rank's peak (plan/mem.h): an error at the
 * statement that states the capacity, naming the rank that needs the most. */
static int check_memory(const Program *pr, const Plan *p, Diag *d)
{
	if (!p->mem_cap)
		return 0;
	PlanMem worst = {0}, m;
	int wr = -1, over = 0;
	for (int r = 0; r < p->world; r++) {
		if (plan_mem_rank(p, r, &m)) {
			fprintf(d->out, "pipecc: out of memory computing the memory model\n");
			d->nerrors++;
			return -1;
		}
		over += m.peak > p->mem_cap;
		if (m.peak > p->mem_cap && m.peak > worst.peak)
			worst = m, wr = r;
	}
	if (wr < 0)
		return 0;
	char t[8][32], master[48] = "";
	const int *c = p->ranks[wr].coord;
	if (worst.master)
		snprintf(master, sizeof master, ", master weights %s",
		         plan_mem_text(t[7], 32, worst.master));
	diag_error(d, pr->mem_loc,
	           "the plan does not fit: rank %d (pp %d, dp %d) needs %s at its peak, the device "
	           "holds %s (parameters %s, gradients %s%s, optimizer state %s, saved activations "
	           "%s, in flight %s)",
	           plan_world_rank(p, wr), c[DIM_PP], c[DIM_DP], plan_mem_text(t[0], 32, worst.peak),
	           plan_mem_text(t[1], 32, p->mem_cap), plan_mem_text(t[2], 32, worst.params),
	           plan_mem_text(t[3], 32, worst.grads), master, plan_mem_text(t[4], 32, worst.optim),
	           plan_mem_text(t[5], 32, worst.saved), plan_mem_text(t[6], 32, worst.comm));
	int lines = p->line ? plan_mesh_world(p) / p->world : 1; // each line's ranks alike
	if (over * lines > 1)
		diag_note(d, pr->mem_loc, "%d of the %d ranks do not fit", over * lines,
		          p->world * lines);
	int all = 1, none = 1, attends = 0;
	for (int s = 0; s < p->nstages; s++) {
		all &= p->stages[s].recompute == PLAN_RECOMPUTE_FULL;
		none &= p->stages[s].recompute == PLAN_RECOMPUTE_NONE;
		attends |= prog_stage_attends(&pr->stages[s]) && !prog_stage_all_flash(&pr->stages[s]);
	}
	if (!all && worst.saved > worst.peak - p->mem_cap) { // recomputing could make it fit
		if (none && attends && p->dims[DIM_TP] == 1)
			diag_note(d, pr->mem_loc, "'recompute * selective;' drops only attention's "
			                          "probabilities, which B rebuilds at a fraction of F's cost");
		diag_note(d, pr->mem_loc, "'recompute *;' keeps only each stage's input from F to B");
	}
	return -1;
}

/* The plan size in ops as far as known: every compute action on every rank. */
static int64_t estimated_ops(const Compile *k)
{
	if (!k->pr)
		return 0;
	const Program *pr = k->pr;
	return (int64_t)pr->microbatches * pr->nstages * 3 * pr->dims[DIM_DP] * pr->dims[DIM_TP];
}

/* 1 (with the message) when the plan's ops alone would be more than the machine has:
 * the schedule's and the lowering's lists (or schedule auto's candidates') would grow,
 * overcommit granting them, until the OOM killer ended pipecc a minute later.  At least
 * every stage's F and B (or BW) per microbatch, and on every edge between two ranks a
 * SEND and a RECV each way (stage_pp NULL, a placement yet to be chosen: the stages'
 * chain crosses from rank to rank pp - 1 times at least); one pipeline line's for a
 * line plan, else the world's. */
static int too_big(const Program *pr, const int *stage_pp, int line, Diag *d)
{
	int64_t m = pr->microbatches, n = 2 * (int64_t)pr->nstages * m;
	int64_t cross = stage_pp ? 0 : pr->dims[DIM_PP] - 1;
	for (int s = 0; stage_pp && s + 1 < pr->nstages; s++)
		cross += stage_pp[s] != stage_pp[s + 1];
	for (int k = 0; stage_pp && k < pr->nskips; k++)
		cross += stage_pp[pr->skips[k].src] != stage_pp[pr->skips[k].dst];
	n += 4 * cross * m;
	if (!line)
		n *= (int64_t)pr->dims[DIM_DP] * pr->dims[DIM_TP];
	if (plan_sysmem_fits((double)n * sizeof(PlanOp)))
		return 0;
	char t[512];
	fprintf(d->out, "pipecc: %s\n", plan_oom_text(t, sizeof t, n, 0));
	d->nerrors++;
	d->noom++;
	return 1;
}

static void report_oom(Diag *d, int64_t ops, size_t failed)
{
	char t[512];
	fprintf(d->out, "pipecc: %s\n", plan_oom_text(t, sizeof t, ops, failed));
	d->nerrors++;
}

static void dump_placement(const Program *pr, const SchedCtx *c, FILE *f)
{
	for (int i = 0; i < c->nstages; i++)
		fprintf(f, "stage %d %s -> pp %d\n", i, pr->stages[i].name, c->stage_pp[i]);
}

/* The lowered plan, unverified, which is then dropped. */
static void dump_plan(Compile *k, FILE *f)
{
	errno = 0;
	if (plan_write(k->plan, f)) { // out of memory, or the stream failed
		fprintf(k->d->out, "pipecc: cannot write the lowered plan: %s\n",
		        errno ? plan_strerror(errno) : "write error");
		k->d->nerrors++;
	}
	plan_free(k->plan);
	k->plan = NULL;
}

/* --dump: after pass, when it is the one asked for, prints the state and says 1 (the
 * pipeline stops there). */
static int dumped(Compile *k, PipeccPass pass)
{
	FILE *f = k->o->dump_out ? k->o->dump_out : stdout;
	if (k->o->dump != pass)
		return 0;
	switch (pass) {
	case PASS_PARSE:
		dump_program(k->pr, f);
		break;
	case PASS_PLACE:
		dump_placement(k->pr, &k->c, f);
		break;
	case PASS_SCHEDULE:
		dump_schedule(&k->c, f);
		break;
	case PASS_LOWER:
		dump_plan(k, f);
		break;
	default:
		unreachable();
	}
	return 1;
}

/* Parse and check, with the command line's overrides; finds the schedule's row. */
static int parse(Compile *k, const char *src, size_t len)
{
	const PipeccOptions *o = k->o;
	Diag *d = k->d;
	k->src = src;
	k->len = len;
	/* -s NAME: a model with `stages auto;` is cut for that schedule's stages per rank */
	const Schedule *over = o->schedule ? sched_find(o->schedule) : NULL;
	int per_rank = over ? (over->chunks > 1 ? over->chunks : 1) : 0;
	k->per_rank = per_rank;
	Program *pr = k->pr = front_parse_split(&k->arena, d, k->file, src, len, per_rank,
	                                        o->microbatches > 0 ? o->microbatches : 0);
	if (!pr)
		return 1;
	ProgOverrides ov = {o->schedule, o->microbatches, o->from_csv};
	if (front_override(&k->arena, d, pr, &ov))
		return 1;
	if (o->same_rank > 0)
		pr->same_rank = o->same_rank - 1;
	k->errors = d->nerrors - d->ncmdline_errors;
	if (!(k->sched = sched_find(pr->schedule)))
		unreachable(); // the checker knows the registry
	k->line = o->line && o->dump == PASS_NONE;
	k->tune = o->tune_overlap;
	return 0;
}

/* Where the second cut's diagnostics go: nowhere (the first cut's were the user's). */
static ssize_t sink_write(void *cookie, const char *buf, size_t n)
{
	(void)cookie;
	(void)buf;
	return (ssize_t)n;
}

/* The form p is weighed in: its microbatches under `microbatches auto;` and, with
 * stages (a model cut both ways), its stages a rank: "16 microbatches of 2 sequences,
 * two stages a rank". */
static void form(char *buf, size_t n, const Program *p, int per_rank, int stages)
{
	int k = 0, each = p->batch ? p->batch / p->microbatches : 0;
	if (p->batch)
		k = snprintf(buf, n, "%d microbatches of %d %s%s", p->microbatches, each,
		             p->seq ? "sequence" : "row", each == 1 ? "" : "s");
	if (stages)
		snprintf(buf + k, n - (size_t)k, "%s%s stage%s a rank", k ? ", " : "",
		         per_rank == 2 ? "two" : "one", per_rank == 2 ? "s" : "");
}

/* Appends to the form's words the cuts `to` moved from `from` (k stages): ", s1 from
 * unit 9 to 10". */
static void moved(char *buf, size_t n, const int *from, const int *to, int k)
{
	size_t at = strlen(buf);
	for (int j = 1; j < k && at < n; j++)
		if (from[j] != to[j])
			at += (size_t)snprintf(buf + at, n - at, "%ss%d from unit %d to %d",
			                       at ? ", " : "", j, from[j], to[j]);
}

/* "two stages a rank win", "one stage a rank wins" (its cuts moved or not). */
static const char *wins(const char *form)
{
	static const char one[] = "one stage a rank";
	return strncmp(form, one, sizeof one - 1) ? "win" : "wins";
}

/* The program parsed again for per_rank stages a rank and m microbatches (cut at cut
 * when not NULL, a move of part_moves), and searched quietly (anything wrong there only
 * loses it: the first parse's diagnostics were the user's); it replaces k's program
 * when its confirmed step is shorter (ties: k's).  1 when it does. */
static int weigh_at(Compile *k, int per_rank, int m, int stages, const int *cut)
{
	int took = 0;
	const PipeccOptions *o = k->o;
	FILE *sink = fopencookie(NULL, "w", (cookie_io_functions_t){.write = sink_write});
	if (!sink)
		return 0;
	Diag quiet;
	diag_init(&quiet, k->file, k->src, k->len, sink);
	ProgOverrides ov = {o->schedule, o->microbatches, o->from_csv};
	Program *p2 = front_parse_given(&k->arena, &quiet, k->file, k->src, k->len, per_rank, m,
	                                cut);
	SchedChoice ch = {0};
	char t[2][32], what[96];
	if (p2 && !front_override(&k->arena, &quiet, p2, &ov) && !quiet.nerrors &&
	    !too_big(p2, NULL, k->line, &quiet)) {
		if (o->same_rank > 0)
			p2->same_rank = o->same_rank - 1;
		form(what, sizeof what, p2, per_rank, stages);
		if (cut && p2->part)
			moved(what, sizeof what, k->pr->part->cut, cut, p2->part->k);
		FILE *ex = o->explain ? stderr : NULL;
		if (ex) {
			fprintf(ex, "\nand again for %s:\n", what);
			if (p2->part)
				part_explain(ex, p2);
		}
		if (!k->sched->search(p2, &k->arena, &quiet, ex, &ch) && ch.acts) {
			int won = ch.step < k->choice.step;
			const char *f = won ? what : k->form;
			if (ex)
				fprintf(ex, "%s %s: %s against %s\n", f, wins(f),
				        plan_time_text(t[0], 32, won ? ch.step : k->choice.step),
				        plan_time_text(t[1], 32, won ? k->choice.step : ch.step));
			if (won) {
				sched_choice_free(&k->choice, k->pr->dims[DIM_PP]);
				k->choice = ch;
				k->pr = p2;
				snprintf(k->form, sizeof k->form, "%s", what);
				ch = (SchedChoice){0};
				took = 1;
			}
		}
	}
	sched_choice_free(&ch, p2 ? p2->dims[DIM_PP] : 0);
	fclose(sink);
	return took;
}

static void weigh(Compile *k, int per_rank, int m, int stages)
{
	weigh_at(k, per_rank, m, stages, NULL);
}

/* Under schedule auto with `stages auto;`, the winning form's cut moved where it pays:
 * its neighbours (part_moves: one or two of the cuts next to the first and the last
 * stage and around the slowest, one unit either way) are each parsed at that cut and
 * searched, the first whose confirmed step is shorter taken, and again from there,
 * until no neighbour is shorter or the budget is spent: MOVE_WORK stage-microbatches
 * (a search's work grows with stages x microbatches) or MOVE_TRIES searches; a program
 * whose one search costs more than a quarter of MOVE_WORK keeps its cut (its searches
 * are the slow ones: four more would pass the second the compile may take).  The DP's
 * objective, the slowest stage, misses the fill and the drain (the first and the last
 * stages count apart), a V order's pairing of stages on a rank and the transfer at a
 * cut; only a confirmed step decides.  A count the program writes keeps the DP's cut. */
enum { MOVE_WORK = 2048, MOVE_TRIES = 32 };

static void move_cuts(Compile *k, int stages)
{
	int64_t left = MOVE_WORK;
	int tries = MOVE_TRIES;
	if (4 * (int64_t)k->pr->nstages * k->pr->microbatches > MOVE_WORK)
		return;
	for (int took = 1; took && k->pr->part && k->pr->part->auto_count;) {
		const ProgPart *pt = k->pr->part;
		size_t len = (size_t)pt->k + 1;
		int *next = arena_alloc(&k->arena, PART_MOVES * len * sizeof *next);
		int n = part_moves(pt, pt->cut, next), m = k->pr->batch ? k->pr->microbatches : 0;
		took = 0;
		for (int i = 0; i < n && !took && tries-- > 0; i++) {
			left -= (int64_t)k->pr->nstages * k->pr->microbatches;
			if (left < 0)
				return;
			took = weigh_at(k, pt->per_rank, m, stages, next + (size_t)i * len);
		}
	}
}

/* Whether a `model` with `stages auto;` is cut for two stages a rank as well as one. */
static int cut_both(const Program *pr)
{
	int pp = pr->dims[DIM_PP];
	return pr->part && pr->part->auto_count && pr->part->per_rank == 1 && pp >= 2 &&
	       pr->part->n >= 2 * pp;
}

/* Under schedule auto, the program's other forms are searched too and the fastest
 * confirmed step wins: a `model` with `stages auto;` cut for two stages a rank as well
 * as one, and under `microbatches auto;` every count of microbatches the batch allows,
 * the most first (the first parse's). */
static void weigh_forms(Compile *k, int stages)
{
	const Program *pr = k->pr;
	int pp = pr->dims[DIM_PP], first = pr->microbatches;
	if (stages)
		weigh(k, 2, pr->batch ? first : 0, stages);
	if (!pr->batch || k->o->microbatches)
		return;
	BatchAuto b = {.batch = pr->batch, .pp = pp};
	int m[BATCH_COUNTS], n = batch_counts(&b, m, BATCH_COUNTS);
	for (int i = n - 1; i >= 0; i--) { // down from the most: ties keep the most
		if (m[i] == first)
			continue;
		weigh(k, k->per_rank, m[i], stages);
		if (stages)
			weigh(k, 2, m[i], stages);
	}
}

/* A row that searches chooses the placement, recomputation, tuning and order, which
 * the program then states as if it had written them (its schedule line too, for the
 * plan: the search's name for its winner); any other row has nothing to weigh.  A
 * search makes many orders: a plan whose ops alone could not fit is refused first. */
static int search(Compile *k)
{
	Program *pr = k->pr;
	SchedChoice *ch = &k->choice;
	if (k->o->explain && pr->part)
		part_explain(stderr, pr);
	if (!k->sched->search && pr->batch && !k->o->microbatches) {
		diag_error(k->d, pr->mb_loc, "microbatches auto is chosen by schedule auto's search, "
		           "and schedule %s does not search: write 'schedule auto;', or "
		           "'microbatches N;'", pr->schedule);
		return 1;
	}
	if (!k->sched->search) {
		if (k->o->explain)
			fprintf(stderr, "schedule %s is given: nothing to weigh ('schedule auto;' "
			                "searches)\n", pr->schedule);
		return 0;
	}
	int stages = cut_both(pr);
	form(k->form, sizeof k->form, pr, k->per_rank, stages);
	if (k->o->explain && pr->batch && !k->o->microbatches)
		fprintf(stderr, "microbatches auto: the step's %d %s cut into every count of "
		        "microbatches of at least pp=%d that divides it; first %s:\n", pr->batch,
		        pr->seq ? "sequences" : "rows", pr->dims[DIM_PP], k->form);
	if (too_big(pr, NULL, k->line, k->d) ||
	    k->sched->search(pr, &k->arena, k->d, k->o->explain ? stderr : NULL, ch))
		return 1;
	weigh_forms(k, stages);
	move_cuts(k, stages);
	pr = k->pr;
	pr->place = PLACE_LIST;
	pr->place_list = ch->stage_pp;
	if (ch->recompute)
		pr->recompute_all = ch->recompute;
	pr->schedule = arena_strdup(&k->arena, ch->label);
	k->tune = ch->tune_overlap;
	return 0;
}

/* Stage -> pipeline index, and the routes checked against it. */
static int place(Compile *k)
{
	Arena *a = &k->arena;
	Program *pr = k->pr;
	SchedCtx *c = &k->c;
	*c = (SchedCtx){.prog = pr, .arena = a, .diag = k->d, .pp = pr->dims[DIM_PP],
	                .m = pr->microbatches, .nstages = pr->nstages};
	c->stage_pp = arena_alloc(a, (size_t)c->nstages * sizeof *c->stage_pp);
	c->nacts = arena_alloc(a, (size_t)c->pp * sizeof *c->nacts);
	c->cap = arena_alloc(a, (size_t)c->pp * sizeof *c->cap);
	c->acts = arena_alloc(a, (size_t)c->pp * sizeof *c->acts);
	return place_stages(c, k->sched) || route_check(a, pr, c->stage_pp, k->d);
}

/* The compute order per pipeline index: the row's own, or the one its search chose.
 * A plan whose ops alone could not fit is refused before the order grows. */
static int schedule(Compile *k)
{
	const Schedule *s = k->sched;
	SchedCtx *c = &k->c;
	if ((s->check && s->check(c)) ||
	    (k->o->dump != PASS_SCHEDULE && too_big(k->pr, c->stage_pp, k->line, k->d)))
		return 1;
	if (s->search)
		sched_take(c, &k->choice);
	else
		s->fill(c);
	return k->d->nerrors != 0;
}

/* The plan; the orders are dropped once it is made. */
static int lower(Compile *k)
{
	k->plan = lower_program(k->pr, &k->c, k->d, k->o->allow_deadlock, k->tune, k->line);
	sched_free(&k->c);
	if (!k->plan)
		return 1;
	k->plan->mem_cap = k->pr->mem_cap;
	if (k->pr->device_preset || k->pr->peak_given)
		k->plan->peak_flops = k->pr->peak_flops;
	return 0;
}

/* The lowering must only produce valid plans: a plan that fails is a compiler bug. */
static int verify(Compile *k)
{
	PlanError err;
	if (k->o->allow_deadlock || !plan_verify(k->plan, &err))
		return 0;
	if (plan_error_is_oom(&err)) // not the plan's fault: report it as such
		arena_oom(&k->arena, 0);
	fprintf(k->d->out, "%s: internal error: lowered plan fails verification: %s\n", k->file,
	        err.msg);
	k->d->nerrors++;
	return 1;
}

/* Each pass returns nonzero where the pipeline stops: errors, or the dump asked for. */
static void run_passes(Compile *k, const char *src, size_t len)
{
	if (parse(k, src, len) || dumped(k, PASS_PARSE))
		return;
	if (k->o->balance_warn)
		part_warn_balance(k->pr, k->d);
	if (search(k) || place(k) || dumped(k, PASS_PLACE))
		return;
	if (schedule(k) || dumped(k, PASS_SCHEDULE))
		return;
	if (lower(k) || dumped(k, PASS_LOWER))
		return;
	if (verify(k) || check_memory(k->pr, k->plan, k->d)) {
		plan_free(k->plan);
		k->plan = NULL;
	}
}

Plan *pipecc_compile(const char *file, const char *src, size_t len, const PipeccOptions *o,
                     Diag *d)
{
	Compile *k = calloc(1, sizeof *k);
	if (!k) {
		report_oom(d, 0, sizeof *k);
		return NULL;
	}
	k->errors = -1;
	k->file = file, k->o = o, k->d = d;
	k->arena.oom = &k->oom;
	if (setjmp(k->oom)) {
		report_oom(d, estimated_ops(k), k->arena.failed);
		plan_free(k->plan);
		k->plan = NULL;
	} else {
		run_passes(k, src, len);
	}
	if (k->errors >= 0 && d->nerrors - d->ncmdline_errors > k->errors)
		note_overrides(d, k->pr);
	sched_free(&k->c);
	if (k->pr)
		sched_choice_free(&k->choice, k->pr->dims[DIM_PP]);
	d->cmdline = NULL; // its text lives in the arena
	arena_free(&k->arena);
	Plan *plan = k->plan;
	free(k);
	return plan;
}

/* What pipecc_read_file reads, told by its first bytes: a binary plan, read whole; a text
 * plan, which no NUL byte may be in; a program or CSV order, whose comments may hold any
 * byte. */
enum { READ_UNKNOWN, READ_BINARY, READ_PLAN, READ_SOURCE };

/* Where in the n bytes at s the input stops being worth reading: past its first NUL byte
 * (outside a comment in a source: *comment, inside one so far), which the parser
 * reports there; n when there is none. */
static size_t text_end(int kind, const char *s, size_t n, int *comment)
{
	if (kind == READ_BINARY)
		return n;
	if (kind == READ_PLAN) {
		const char *z = memchr(s, 0, n);
		return z ? (size_t)(z - s) + 1 : n;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '#')
			*comment = 1;
		else if (s[i] == '\n')
			*comment = 0;
		else if (!s[i] && !*comment)
			return i + 1;
	}
	return n;
}

/* The whole file ("-": standard input), malloc'd; NULL with errno set on failure.  A
 * text is read up to its first NUL byte (text_end), so that a device like /dev/zero
 * ends; a buffer of PLAN_FIT_MIN or more that would pass the machine's memory
 * (plan_sysmem_fits) is refused (ENOMEM) rather than filled until the kernel ends the
 * process. */
char *pipecc_read_file(const char *path, size_t *len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	if (!f)
		return NULL;
	size_t cap = 1 << 16, n = 0;
	int comment = 0, kind = READ_UNKNOWN, nul = 0;
	char *buf = malloc(cap);
	while (buf && !nul) {
		if (n == cap) {
			char *nb = cap * 2 >= PLAN_FIT_MIN && !plan_sysmem_fits((double)cap * 2)
			               ? NULL
			               : realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		size_t k = fread(buf + n, 1, cap - n, f);
		if (k && kind == READ_UNKNOWN)
			kind = plan_is_binary_start((unsigned char)buf[0])   ? READ_BINARY
			       : n + k >= sizeof PLAN_FORMAT &&
			               !memcmp(buf, PLAN_FORMAT " ", sizeof PLAN_FORMAT)
			           ? READ_PLAN
			           : READ_SOURCE;
		size_t end = text_end(kind, buf + n, k, &comment);
		nul = end < k;
		n += end;
		if (k == 0)
			break;
	}
	int e = !buf ? ENOMEM : ferror(f) ? (errno ? errno : EIO) : 0;
	if (f != stdin)
		fclose(f);
	if (e) {
		free(buf);
		errno = e;
		return NULL;
	}
	*len = n;
	return buf;
}
