/* User-written schedules: `schedule custom { rank 0: 0F0 0F1 0B0 0B1; ... }` in the
 * program, or `schedule csv "order.csv";` (and `pipecc --from-torch-csv FILE`) naming
 * the CSV that `pipecc --emit torch-csv` or PyTorch's _dump_csv writes: a row per
 * pipeline rank, one action per cell.  Actions use PyTorch's notation: stage, kind,
 * microbatch, where F is a forward, B a fused backward (our BW), I an input gradient
 * (our B) and W a weight gradient; (a;b)OVERLAP_F_B is the F&B pair a&b.  A CSV
 * without SEND/RECV cells leaves communication to the lowering; one with them
 * (PyTorch's compute_comms format) has them checked and kept in c->comms, in their
 * order (keep_comms, lower_given.c).  Waits, UNSHARD/RESHARD and empty cells are skipped.
 *
 * The order is loaded into the schedule context once, by whichever of infer_place
 * (no `placement` written: each stage goes where it appears) or check (a placement
 * given: each action must sit on its stage's rank) runs first, and validated there:
 * each (stage, microbatch) has one F and either one B or one I and one W, I before W,
 * F before its backward, microbatches in range, stages known.  Errors point at the
 * action (in the CSV file for CSV orders, file:line:col) with a note showing that
 * rank's actions around it.  Orders that are valid per rank but cannot run across
 * ranks are the lowering's to report (lower.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pipecc.h"
#include "sched_common.h"
#include "../plan/oom.h"

enum { CONTEXT = 3 }; // actions shown on each side in a note

typedef struct {
	SchedCtx *c;
	Diag *d;       // where action locations point: the program, or the CSV file
	Loc whole;     // for errors about the whole order
	Loc *row;      // per pp index: its `rank N:` or CSV row (line 0: none)
	int csv;
	struct CommRow *crow; // per pp index: the CSV's communication cells
	int sendrecv;  // the CSV names SEND/RECV: its communication order is kept
} Load;

static int act_text(const SchedAct *a, char *buf, size_t n)
{
	return snprintf(buf, n, "%d%c%d", a->stage, plan_ops[a->kind].torch, a->mb);
}

/* A note with rank p's actions around position i, the action at i in brackets. */
static void note_context(Load *L, int p, int i)
{
	const SchedCtx *c = L->c;
	char buf[512];
	size_t k = 0;
	int lo = i - CONTEXT > 0 ? i - CONTEXT : 0;
	int hi = i + CONTEXT + 1 < c->nacts[p] ? i + CONTEXT + 1 : c->nacts[p];
	if (lo > 0)
		k += (size_t)snprintf(buf + k, sizeof buf - k, " ...");
	for (int j = lo; j < hi && k < sizeof buf - 40; j++) {
		char t[40];
		act_text(&c->acts[p][j], t, sizeof t);
		k += (size_t)snprintf(buf + k, sizeof buf - k, j == i ? " [%s]" : " %s", t);
	}
	if (hi < c->nacts[p] && k < sizeof buf - 8)
		snprintf(buf + k, sizeof buf - k, " ...");
	diag_note(L->d, (Loc){sched_loc(c, p, &c->acts[p][i]).line, 0, 0}, "rank %d runs%s", p,
	          buf);
}

/* ---- the sources --------------------------------------------------------------- */

static int load_custom(Load *L)
{
	SchedCtx *c = L->c;
	const Program *pr = c->prog;
	int errs = 0;
	if (pr->ncustom == 0) {
		diag_error(L->d, pr->sched_loc,
		           "schedule custom has no rank bodies: write custom { rank 0: 0F0 0B0; ... }");
		return 1;
	}
	for (int i = 0; i < pr->ncustom; i++) {
		const ProgCustomRank *cr = &pr->custom[i];
		if (cr->rank < 0 || cr->rank >= c->pp)
			continue; // the checker reported it
		if (L->row[cr->rank].line) {
			diag_error(L->d, cr->loc, "rank %d is given twice", cr->rank);
			diag_note(L->d, L->row[cr->rank], "first given here");
			errs++;
			continue;
		}
		L->row[cr->rank] = cr->loc;
		for (int j = 0; j < cr->nacts; j++) {
			const ProgAction *a = &cr->acts[j];
			sched_push_at(c, cr->rank, a->kind, a->stage, a->mb, a->loc);
			const char *why = j > 0 && cr->acts[j - 1].pair ? sched_pair(c, cr->rank) : NULL;
			if (why) {
				diag_error(L->d, a->loc, "%s", why);
				errs++;
			}
		}
	}
	return errs;
}

/* One CSV cell's meaning, from PyTorch's _ComputationType: what it becomes here. */
typedef enum {
	CELL_SKIP,    // empty, or nothing for the plan (WAIT_SEND_*, WAIT_REDUCE_GRAD, UNSHARD, ...)
	CELL_ACT,     // a compute action: F, I, W, B
	CELL_COMM,    // a SEND/RECV or REDUCE_GRAD the plan keeps in the CSV's order
	CELL_BAD,     // unreadable
} CellKind;

/* PyTorch's multi-letter actions, longest first where one is a prefix of another, as
 * its _action_regex tries them. */
static const struct {
	const char *word;
	CellKind cell;
	int8_t comm;   // SchedCommKind, or -1
	int8_t dir;    // DIR_ACT or DIR_GRAD, or -1
	int8_t mb;     // 1: a microbatch follows
	int8_t wait;   // PyTorch's host waits here: it ends a run of sends and receives
} csv_words[] = {
	{"WAIT_REDUCE_GRAD", CELL_SKIP, -1, -1, 0, 1},
	{"WAIT_SEND_F", CELL_SKIP, -1, -1, 1, 1},
	{"WAIT_SEND_B", CELL_SKIP, -1, -1, 1, 1},
	{"REDUCE_GRAD", CELL_COMM, SCHED_COMM_REDUCE, -1, 0, 1},
	{"UNSHARD", CELL_SKIP, -1, -1, 0, 0},
	{"RESHARD", CELL_SKIP, -1, -1, 0, 0},
	{"SEND_F", CELL_COMM, SCHED_COMM_SEND, DIR_ACT, 1, 0},
	{"RECV_F", CELL_COMM, SCHED_COMM_RECV, DIR_ACT, 1, 0},
	{"SEND_B", CELL_COMM, SCHED_COMM_SEND, DIR_GRAD, 1, 0},
	{"RECV_B", CELL_COMM, SCHED_COMM_RECV, DIR_GRAD, 1, 0},
};

typedef struct {
	int stage, kind, mb; // kind: an OpKind (CELL_ACT) or SchedCommKind (CELL_COMM)
	int dir;
	int wait;            // csv_words' wait (CELL_ACT: 1, a compute action ends a run too)
} Cell;

static int csv_num(const char *s, size_t n, size_t *i, long *v)
{
	size_t i0 = *i;
	for (*v = 0; *i < n && s[*i] >= '0' && s[*i] <= '9'; (*i)++)
		if ((*v = 10 * *v + (s[*i] - '0')) > 1 << 30)
			return 0;
	return *i > i0;
}

/* One CSV cell, trimmed, that is not an overlapped pair. */
static CellKind csv_cell(const char *s, size_t n, Cell *out)
{
	size_t i = 0;
	long v = 0;
	if (n == 0)
		return CELL_SKIP;
	if (!csv_num(s, n, &i, &v) || i == n)
		return CELL_BAD;
	*out = (Cell){.stage = (int)v, .mb = -1, .dir = -1};
	for (size_t k = 0; k < sizeof csv_words / sizeof csv_words[0]; k++) {
		size_t l = strlen(csv_words[k].word);
		if (n - i < l || memcmp(s + i, csv_words[k].word, l) != 0)
			continue;
		i += l;
		if (csv_words[k].mb ? !csv_num(s, n, &i, &v) || i != n : i != n)
			return CELL_BAD;
		out->kind = csv_words[k].comm;
		out->dir = csv_words[k].dir;
		out->wait = csv_words[k].wait;
		out->mb = csv_words[k].mb ? (int)v : -1;
		return csv_words[k].cell;
	}
	out->kind = (int)plan_op_of_torch(s[i]);
	out->wait = 1;
	if (out->kind == OP_COUNT || ++i == n || !csv_num(s, n, &i, &v) || i != n)
		return CELL_BAD;
	out->mb = (int)v;
	return CELL_ACT;
}

/* The given communication order while the CSV is read: per row, grown on the heap,
 * moved into the arena at the end (keep_comms). */
typedef struct CommRow {
	SchedComm *v;
	int n, cap;
	int run;      // the last cell was a SEND or RECV: the next one joins its group
} CommRow;

static int comm_push(CommRow *r, SchedComm c)
{
	if (r->n == r->cap) {
		int cap = r->cap ? 2 * r->cap : 64;
		SchedComm *v = realloc(r->v, (size_t)cap * sizeof *v);
		if (!v)
			return -1;
		r->v = v;
		r->cap = cap;
	}
	r->v[r->n++] = c;
	return 0;
}

static int cell_error(Load *L, Loc at, const char *a, const char *b)
{
	diag_error(L->d, at,
	           "cannot read cell '%.*s': expected an action like 0F1, 1I0, 1W0, 2B3, "
	           "0SEND_F1 or (0F3;3B1)OVERLAP_F_B",
	           (int)(b - a), a);
	return 1;
}

/* One cell [a, b) of row `row`, at `at`: its actions pushed, its communication kept.
 * An overlapped pair `(0F3;3B1)OVERLAP_F_B` is an F&B pair (SchedAct.pair, sched_pair).
 * Sets *got when the cell holds something for the plan; returns errors. */
static int csv_take(Load *L, int row, const char *a, const char *b, Loc at, int *got)
{
	SchedCtx *c = L->c;
	const char *p = a, *q = b, *close = NULL;
	static const char overlap[] = "OVERLAP_F_B";
	size_t ol = sizeof overlap - 1;
	if (b > a && *a == '(') { // (x;y;...)OVERLAP_F_B
		close = memchr(a, ')', (size_t)(b - a));
		if (!close || (size_t)(b - close - 1) != ol || memcmp(close + 1, overlap, ol) != 0)
			return cell_error(L, at, a, b);
		p = a + 1;
	}
	do {
		const char *pe = close ? memchr(p, ';', (size_t)(close - p)) : NULL;
		if (close)
			q = pe ? pe : close;
		const char *x = p, *y = q;
		while (x < y && *x == ' ')
			x++;
		while (y > x && y[-1] == ' ')
			y--;
		Cell cl;
		CellKind k = csv_cell(x, (size_t)(y - x), &cl);
		if (k == CELL_BAD || (close && k != CELL_ACT))
			return cell_error(L, at, a, b);
		*got |= k != CELL_SKIP;
		if (row >= c->pp)
			continue;
		int join = L->crow[row].run;
		if (k != CELL_SKIP || cl.wait)
			L->crow[row].run = k == CELL_COMM && cl.kind != SCHED_COMM_REDUCE;
		if (k == CELL_SKIP)
			continue;
		if (cl.stage >= c->nstages) {
			diag_error(L->d, at, "stage index %d in '%.*s' is out of range: there %s %d stage%s",
			           cl.stage, (int)(b - a), a, c->nstages == 1 ? "is" : "are", c->nstages,
			           c->nstages == 1 ? "" : "s");
			return 1;
		}
		if (k == CELL_ACT) {
			sched_push_at(c, row, cl.kind, cl.stage, cl.mb, at);
			const char *why = close && p > a + 1 ? sched_pair(c, row) : NULL;
			if (why) {
				diag_error(L->d, at, "in '%.*s': %s", (int)(b - a), a, why);
				return 1;
			}
			continue;
		}
		L->sendrecv |= cl.kind != SCHED_COMM_REDUCE;
		SchedComm sc = {.at = c->nacts[row], .kind = (uint8_t)cl.kind, .join = (uint8_t)join,
		                .dir = (uint8_t)(cl.dir < 0 ? 0 : cl.dir), .edge = cl.stage,
		                .mb = cl.mb, .loc = at};
		if (comm_push(&L->crow[row], sc)) // pipecc_compile reports it
			arena_oom(c->arena, (size_t)(L->crow[row].cap ? 2 * L->crow[row].cap : 64) * sizeof sc);
	} while (close && (p = q + 1) <= close);
	return 0;
}

static int load_csv_text(Load *L, const char *src, size_t len)
{
	SchedCtx *c = L->c;
	int errs = 0, line = 0, last_nonempty = 0;
	const char *s = src, *end = src + len;
	while (s < end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		const char *e = nl ? nl : end;
		line++;
		int row = line - 1, ncells = 0;
		for (const char *cell = s; cell <= e;) {
			const char *ce = memchr(cell, ',', (size_t)(e - cell));
			if (!ce)
				ce = e;
			const char *a = cell, *b = ce;
			if (a == src && b - a >= 3 && !memcmp(a, "\xef\xbb\xbf", 3))
				a += 3; // the byte-order mark a spreadsheet puts first in a UTF-8 file
			while (a < b && (*a == ' ' || *a == '\t'))
				a++;
			while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
				b--;
			if (b - a >= 2 && *a == '"' && b[-1] == '"')
				a++, b--;
			Loc at = {line, (int)(a - s) + 1, b > a ? (int)(b - a) : 1};
			int got = 0;
			errs += csv_take(L, row, a, b, at, &got);
			ncells += got;
			if (got && row >= c->pp) {
				diag_error(L->d, (Loc){line, 1, 1},
				           "row %d has actions, but the mesh has pp=%d (one row per pipeline "
				           "rank)",
				           line, c->pp);
				errs++;
				break;
			}
			cell = ce + 1;
		}
		if (row < c->pp)
			L->row[row] = (Loc){line, 1, 1};
		if (ncells || e > s)
			last_nonempty = line;
		s = e + 1;
	}
	if (last_nonempty < c->pp) {
		diag_error(L->d, (Loc){0},
		           "the file has %d row%s, but the mesh has pp=%d (one row per pipeline rank)",
		           last_nonempty, last_nonempty == 1 ? "" : "s", c->pp);
		errs++;
	}
	return errs;
}

/* ---- placement and validation ---------------------------------------------------- */

/* No placement written: each stage goes where it appears, on one rank only. */
static int infer(Load *L)
{
	SchedCtx *c = L->c;
	const Program *pr = c->prog;
	int errs = 0;
	int *first_p = arena_alloc(c->arena, (size_t)c->nstages * sizeof *first_p);
	int *first_i = arena_alloc(c->arena, (size_t)c->nstages * sizeof *first_i);
	uint8_t *told = arena_alloc(c->arena, (size_t)c->nstages);
	for (int s = 0; s < c->nstages; s++)
		c->stage_pp[s] = -1;
	for (int p = 0; p < c->pp; p++)
		for (int i = 0; i < c->nacts[p]; i++) {
			const SchedAct *a = &c->acts[p][i];
			int s = a->stage;
			if (c->stage_pp[s] < 0) {
				c->stage_pp[s] = p;
				first_p[s] = p;
				first_i[s] = i;
			} else if (c->stage_pp[s] != p && !told[s]) {
				told[s] = 1;
				diag_error(L->d, sched_loc(c, p, a),
				           "stage %d (%s) appears on rank %d and on rank %d: a stage runs on "
				           "one pipeline rank",
				           s, pr->stages[s].name, c->stage_pp[s], p);
				int q = first_p[s];
				diag_note(L->d, sched_loc(c, q, &c->acts[q][first_i[s]]),
				          "first on rank %d here", q);
				errs++;
			}
		}
	for (int s = 0; s < c->nstages; s++)
		if (c->stage_pp[s] < 0) {
			diag_error(L->d, L->whole, "stage %d (%s) appears on no rank", s,
			           pr->stages[s].name);
			errs++;
		}
	for (int p = 0; p < c->pp && !errs; p++)
		if (sched_stages_on(c, p) == 0) {
			diag_error(L->d, L->row[p].line ? L->row[p] : L->whole,
			           "pipeline rank %d runs no stage: every rank needs at least one", p);
			errs++;
		}
	return errs;
}

/* A placement was written: every action must sit on its stage's rank. */
static int check_placed(Load *L)
{
	SchedCtx *c = L->c;
	int errs = 0;
	uint8_t *told = arena_alloc(c->arena, (size_t)c->nstages);
	for (int p = 0; p < c->pp; p++)
		for (int i = 0; i < c->nacts[p]; i++) {
			const SchedAct *a = &c->acts[p][i];
			if (c->stage_pp[a->stage] == p || told[a->stage])
				continue;
			told[a->stage] = 1;
			char t[40];
			act_text(a, t, sizeof t);
			diag_error(L->d, sched_loc(c, p, a),
			           "'%s' is on rank %d, but the placement puts stage %d (%s) on pp index %d",
			           t, p, a->stage, c->prog->stages[a->stage].name, c->stage_pp[a->stage]);
			errs++;
		}
	return errs;
}

/* Per (stage, microbatch) and kind: 1 + position of its first action on the stage's
 * rank, 0 when absent. */
typedef struct {
	int *at[OP_BW + 1];
} Seen;

static int validate(Load *L)
{
	SchedCtx *c = L->c;
	const Program *pr = c->prog;
	int m = c->m, errs = 0;
	size_t cells = (size_t)c->nstages * m;
	Seen sn;
	for (int k = 0; k <= OP_BW; k++)
		sn.at[k] = arena_alloc(c->arena, (cells ? cells : 1) * sizeof *sn.at[k]);
	int *count = arena_alloc(c->arena, (size_t)c->nstages * sizeof *count);
	char t[40], u[40];

	/* Pass 1: microbatch range, repeats, first positions. */
	for (int p = 0; p < c->pp; p++)
		for (int i = 0; i < c->nacts[p]; i++) {
			SchedAct *a = &c->acts[p][i];
			act_text(a, t, sizeof t);
			count[a->stage]++;
			if (a->mb < 0 || a->mb >= m) {
				diag_error(L->d, sched_loc(c, p, a),
				           "microbatch %d in '%s' is out of range: the program has %d "
				           "microbatch%s (0 to %d)",
				           a->mb, t, m, m == 1 ? "" : "es", m - 1);
				note_context(L, p, i);
				errs++;
				continue;
			}
			int *at = &sn.at[a->kind][(size_t)a->stage * m + a->mb];
			if (*at) {
				diag_error(L->d, sched_loc(c, p, a), "'%s' appears twice on rank %d", t, p);
				diag_note(L->d, sched_loc(c, p, &c->acts[p][*at - 1]), "first here");
				errs++;
				continue;
			}
			*at = i + 1;
		}

	/* Pass 2: each action against its microbatch's others, in order. */
	for (int p = 0; p < c->pp; p++)
		for (int i = 0; i < c->nacts[p]; i++) {
			SchedAct *a = &c->acts[p][i];
			if (a->mb < 0 || a->mb >= m || sn.at[a->kind][(size_t)a->stage * m + a->mb] != i + 1)
				continue;
			size_t key = (size_t)a->stage * m + a->mb;
			int f = sn.at[OP_F][key], in = sn.at[OP_B][key], w = sn.at[OP_W][key],
			    bw = sn.at[OP_BW][key];
			SchedAct u_act = *a;
			act_text(a, t, sizeof t);
			const char *msg = NULL;
			/* B and BW make the input gradient and need their forward, BW and W make the
			 * weight gradient, W needs the input gradient (the op table's makes, needs) */
			unsigned makes = plan_ops[a->kind].makes, needs = plan_ops[a->kind].needs;
			if ((makes & PLAN_DEP_GRAD) && in && bw && i + 1 == (in > bw ? in : bw)) {
				const SchedAct *other = &c->acts[p][(in < bw ? in : bw) - 1]; // on this rank
				act_text(other, u, sizeof u);
				diag_error(L->d, sched_loc(c, p, a),
				           "'%s' and '%s' both appear: a microbatch's backward is either B, "
				           "or I and W",
				           u, t);
				diag_note(L->d, sched_loc(c, p, other), "'%s' is here", u);
				errs++;
				continue;
			}
			if ((needs & PLAN_DEP_ACT) && f > i + 1) {
				msg = "'%s' comes before its forward '%s'";
				u_act.kind = OP_F;
			} else if ((makes & PLAN_DEP_GRAD) && !(makes & PLAN_DEP_WGRAD) && !w && !bw) {
				msg = "'%s' has no weight gradient '%s' after it";
				u_act.kind = OP_W;
			} else if ((needs & PLAN_DEP_GRAD) && bw && !in) {
				msg = "'%s' goes with an input gradient, but the microbatch has a fused "
				      "backward '%s'";
				u_act.kind = OP_BW;
			} else if ((needs & PLAN_DEP_GRAD) && !in) {
				msg = "'%s' has no input gradient '%s' before it";
				u_act.kind = OP_B;
			} else if ((needs & PLAN_DEP_GRAD) && in > i + 1) {
				msg = "'%s' comes before its input gradient '%s'";
				u_act.kind = OP_B;
			}
			if (msg) {
				act_text(&u_act, u, sizeof u);
				diag_error(L->d, sched_loc(c, p, a), msg, t, u);
				note_context(L, p, i);
				errs++;
			}
		}

	/* Pass 3: what is missing, at the row of the stage's rank. */
	for (int s = 0; s < c->nstages; s++) {
		int p = c->stage_pp[s];
		Loc at = L->row[p].line ? L->row[p] : L->whole;
		if (count[s] == 0) {
			diag_error(L->d, at, "rank %d runs no action of stage %d (%s), which is placed there",
			           p, s, pr->stages[s].name);
			errs++;
			continue;
		}
		for (int mb = 0; mb < m; mb++) {
			size_t key = (size_t)s * m + mb;
			if (!sn.at[OP_F][key]) {
				diag_error(L->d, at, "rank %d has no forward '%dF%d' of stage %d (%s)", p, s,
				           mb, s, pr->stages[s].name);
				errs++;
			}
			if (!sn.at[OP_B][key] && !sn.at[OP_BW][key] && !sn.at[OP_W][key]) {
				diag_error(L->d, at,
				           "rank %d has no backward of stage %d (%s) microbatch %d: '%dB%d', or "
				           "'%dI%d' and '%dW%d'",
				           p, s, pr->stages[s].name, mb, s, mb, s, mb, s, mb);
				errs++;
			}
		}
	}
	return errs;
}

/* ---- the CSV's communication ------------------------------------------------------ */

static const char *const comm_words[2][2] = {{"SEND_F", "SEND_B"}, {"RECV_F", "RECV_B"}};

/* A transfer's cell as PyTorch names it: the stage at this rank's end. */
static const char *comm_text(int stage, int recv, int dir, int mb, char *buf, size_t n)
{
	snprintf(buf, n, "%d%s%d", stage, comm_words[recv][dir], mb);
	return buf;
}

/* Rank p's cell k: the chain edge it moves a tensor along, checked against the
 * placement; *bit is 1 for a send, 2 for a receive.  Returns -1 after an error. */
static int comm_edge(Load *L, int p, const SchedComm *k, int *bit)
{
	SchedCtx *c = L->c;
	int st = k->edge, send = k->kind == SCHED_COMM_SEND, act = k->dir == DIR_ACT;
	int e = send == act ? st : st - 1, other = st == e ? e + 1 : e;
	char t[64];
	comm_text(st, !send, k->dir, k->mb, t, sizeof t);
	*bit = send ? 1 : 2;
	if (k->mb < 0 || k->mb >= c->m)
		diag_error(L->d, k->loc, "microbatch %d in '%s' is out of range: the program has %d "
		           "microbatch%s (0 to %d)", k->mb, t, c->m, c->m == 1 ? "" : "es", c->m - 1);
	else if (e < 0 || e >= c->nstages - 1)
		diag_error(L->d, k->loc, "'%s' moves nothing: stage %d is the %s stage", t, st,
		           st == 0 ? "first" : "last");
	else if (c->stage_pp[st] != p)
		diag_error(L->d, k->loc, "'%s' is on rank %d, but stage %d (%s) runs on rank %d", t, p,
		           st, c->prog->stages[st].name, c->stage_pp[st]);
	else if (c->stage_pp[other] == p)
		diag_error(L->d, k->loc, "'%s' moves a tensor between stages %d and %d, which both run "
		           "on rank %d: they hand over locally", t, e, e + 1, p);
	else
		return e;
	return -1;
}

/* Every cell named once (keep_comms' first part): each send comes after the compute
 * that makes its tensor and each receive before the compute that uses it, and between
 * two ranks the k-th send pairs with the k-th receive (NCCL's order; the plan's too). */
static int comms_in_order(Load *L)
{
	SchedCtx *c = L->c;
	int m = c->m, pp = c->pp;
	size_t nk = (size_t)c->nstages * m, nt = (size_t)(c->nstages - 1) * m * 2;
	int *made = arena_alloc(c->arena, (nk + 1) * 2 * sizeof *made); // per (stage, mb, dir)
	int *seq = arena_alloc(c->arena, (nt + 1) * 2 * sizeof *seq);  // per transfer, side
	int *count = arena_alloc(c->arena, ((size_t)pp * pp + 1) * 2 * sizeof *count);
	const SchedComm **recv = arena_alloc(c->arena, (nt + 1) * sizeof *recv);
	char t[64], u[64];
	for (int p = 0; p < pp; p++)
		for (int i = 0; i < c->nacts[p]; i++) {
			const SchedAct *a = &c->acts[p][i];
			if (plan_ops[a->kind].makes & (PLAN_DEP_ACT | PLAN_DEP_GRAD)) // F, B, BW
				made[((size_t)a->stage * m + a->mb) * 2 + plan_ops[a->kind].dir] = i;
		}
	for (int p = 0; p < pp; p++)
		for (int i = 0; i < L->crow[p].n; i++) {
			const SchedComm *k = &L->crow[p].v[i];
			if (k->kind == SCHED_COMM_REDUCE)
				continue;
			int send = k->kind == SCHED_COMM_SEND, act = k->dir == DIR_ACT;
			int st = send == act ? k->edge : k->edge + 1, other = k->edge + (st == k->edge);
			int at = made[((size_t)st * m + k->mb) * 2 + !act]; // st's action on this rank
			size_t key = ((size_t)k->edge * m + k->mb) * 2 + k->dir;
			comm_text(st, !send, k->dir, k->mb, t, sizeof t);
			if (send ? at >= k->at : at < k->at) {
				diag_error(L->d, k->loc, send ? "'%s' comes before the compute that makes its "
				           "tensor" : "'%s' comes after the compute that uses its tensor", t);
				return 1;
			}
			int peer = c->stage_pp[other];
			seq[key * 2 + !send] = count[((size_t)(send ? p : peer) * pp + (send ? peer : p)) * 2 + !send]++;
			if (!send)
				recv[key] = k;
		}
	for (size_t key = 0; key < nt; key++) {
		const SchedComm *k = recv[key];
		if (!k || seq[key * 2] == seq[key * 2 + 1])
			continue;
		int e = (int)(key / 2 / (size_t)m), dir = (int)(key % 2), act = dir == DIR_ACT;
		int to = act ? e + 1 : e, from = act ? e : e + 1;
		diag_error(L->d, k->loc, "'%s' is rank %d's receive #%d from rank %d, but '%s' is rank "
		           "%d's send #%d to rank %d: between two ranks, sends and receives pair in "
		           "order", comm_text(to, 1, dir, k->mb, t, sizeof t), c->stage_pp[to],
		           seq[key * 2 + 1] + 1, c->stage_pp[from],
		           comm_text(from, 0, dir, k->mb, u, sizeof u), c->stage_pp[from],
		           seq[key * 2] + 1, c->stage_pp[to]);
		return 1;
	}
	return 0;
}

/* A CSV that names SEND/RECV cells keeps its communication order: each cell is checked
 * against the placement, every transfer between ranks must be named once on each side,
 * and the cells move into c->comms for the lowering (lower_given.c).  A CSV without
 * them (compute only) leaves c->comms NULL: the lowering places the transfers. */
static int keep_comms(Load *L)
{
	SchedCtx *c = L->c;
	int m = c->m, ns = c->nstages, errs = 0;
	size_t nt = (size_t)(ns > 1 ? ns - 1 : 1) * m * 2;
	uint8_t *seen = arena_alloc(c->arena, nt), *red = arena_alloc(c->arena, (size_t)ns);
	char t[64];
	for (int p = 0; p < c->pp; p++)
		for (int i = 0; i < L->crow[p].n; i++) {
			SchedComm *k = &L->crow[p].v[i];
			int st = k->edge, bit;
			if (k->kind == SCHED_COMM_REDUCE) {
				if (c->stage_pp[st] != p || red[st]++) {
					diag_error(L->d, k->loc, red[st] > 1 ? "'%dREDUCE_GRAD' appears twice on "
					           "rank %d" : "'%dREDUCE_GRAD' is on rank %d, but the stage runs "
					           "elsewhere", st, p);
					errs++;
				}
				continue;
			}
			int e = comm_edge(L, p, k, &bit);
			size_t key = ((size_t)(e < 0 ? 0 : e) * m + (size_t)k->mb) * 2 + k->dir;
			if (e >= 0 && (seen[key] & bit)) {
				diag_error(L->d, k->loc, "'%s' appears twice on rank %d",
				           comm_text(st, bit == 2, k->dir, k->mb, t, sizeof t), p);
				e = -1;
			}
			if (e < 0) {
				errs++;
				continue;
			}
			seen[key] |= (uint8_t)bit;
			k->edge = e;
		}
	for (int e = 0; e + 1 < ns && !errs; e++)
		for (int mb = 0; mb < m && c->stage_pp[e] != c->stage_pp[e + 1]; mb++)
			for (int dir = 0; dir < 2; dir++)
				for (int recv = 0; recv < 2; recv++) {
					if (seen[((size_t)e * m + mb) * 2 + dir] & (1 << recv))
						continue;
					int st = (dir == DIR_ACT) == !recv ? e : e + 1, p = c->stage_pp[st];
					diag_error(L->d, L->row[p], "rank %d has no '%s': a CSV that names "
					           "communication must name every transfer", p,
					           comm_text(st, recv, dir, mb, t, sizeof t));
					errs++;
				}
	if (errs || comms_in_order(L))
		return errs ? errs : 1;
	c->comms = arena_alloc(c->arena, (size_t)c->pp * sizeof *c->comms);
	c->ncomms = arena_alloc(c->arena, (size_t)c->pp * sizeof *c->ncomms);
	for (int p = 0; p < c->pp; p++) {
		c->ncomms[p] = L->crow[p].n;
		c->comms[p] = arena_alloc(c->arena, (size_t)(L->crow[p].n + 1) * sizeof **c->comms);
		memcpy(c->comms[p], L->crow[p].v, (size_t)L->crow[p].n * sizeof **c->comms);
	}
	return 0;
}

/* Loads the order into c->acts and validates it.  Returns the error count. */
static int load(SchedCtx *c, int infer_it)
{
	const Program *pr = c->prog;
	Load L = {.c = c, .d = c->diag, .whole = pr->sched_loc};
	L.row = arena_alloc(c->arena, (size_t)c->pp * sizeof *L.row);
	Diag cd;
	char *src = NULL;
	int errs;
	if (strcmp(pr->schedule, "csv") == 0) {
		if (!pr->csv_path) {
			diag_error(c->diag, pr->sched_loc,
			           "schedule csv needs a file: schedule csv \"order.csv\";");
			return 1;
		}
		size_t len = 0;
		src = pipecc_read_file(pr->csv_path, &len);
		if (!src) {
			diag_error(c->diag, pr->sched_loc, "cannot read %s: %s", pr->csv_path,
			           plan_strerror(errno ? errno : EIO));
			return 1;
		}
		diag_init(&cd, pr->csv_path, src, len, c->diag->out);
		cd.max_errors = c->diag->max_errors;
		L.d = &cd;
		L.whole = (Loc){0};
		L.csv = 1;
		L.crow = calloc((size_t)c->pp, sizeof *L.crow);
		if (!L.crow)
			diag_error(c->diag, pr->sched_loc, "out of memory reading %s", pr->csv_path);
		errs = L.crow ? load_csv_text(&L, src, len) : 1;
	} else {
		errs = load_custom(&L);
	}
	if (!errs)
		errs = infer_it ? infer(&L) : check_placed(&L);
	if (!errs)
		errs = validate(&L);
	/* PyTorch has no cells for skip connections or sends to self: such programs place
	 * their communication themselves. */
	if (!errs && L.sendrecv && pr->nskips == 0 && pr->same_rank != SAME_RANK_SELF_SEND)
		errs = keep_comms(&L);
	for (int p = 0; L.crow && p < c->pp; p++)
		free(L.crow[p].v);
	free(L.crow);
	if (L.csv) {
		c->diag->nerrors += cd.nerrors;
		free(src);
	}
	return errs;
}

static int loaded(const SchedCtx *c)
{
	for (int p = 0; p < c->pp; p++)
		if (c->nacts[p])
			return 1;
	return 0;
}

static int infer_place(SchedCtx *c)
{
	return load(c, 1);
}

static int check(SchedCtx *c)
{
	return loaded(c) ? 0 : load(c, 0);
}

static void fill(SchedCtx *c)
{
	(void)c; // check() loaded the order
}

/* CSV orders point into the CSV file; downstream locations are the program's. */
static void fill_csv(SchedCtx *c)
{
	sched_drop_locs(c);
}

#define PLACEMENTS "any placement: each stage where its actions are, or as 'placement' says"

const Schedule sched_custom = {
	.name = "custom",
	.default_place = PLACE_LOOP,
	.given = 1,
	.placements = PLACEMENTS,
	.infer_place = infer_place,
	.check = check,
	.fill = fill,
};

const Schedule sched_csv = {
	.name = "csv",
	.default_place = PLACE_LOOP,
	.given = 1,
	.placements = PLACEMENTS,
	.infer_place = infer_place,
	.check = check,
	.fill = fill_csv,
};
