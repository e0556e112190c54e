/* Ordered output from worker threads (par_out.h).  Pieces are formatted a batch at a
 * time by par_for, each into a slot of its own (the writer's buffer, and a memory stream
 * for what overflows it); the batch before is written out meanwhile by worker 0, which
 * is the calling thread, before it takes its first piece (or after the pass, when the
 * other workers took them all).  Only the calling thread writes, so a write error leaves
 * its errno where the caller reads it, as on one thread.  Slots keep their memory from
 * batch to batch: after the first two batches a piece allocates nothing.  At the end,
 * plan_fwrite: the writers' bytes to the stream, in pieces where the machine needs them. */
#include "par_out.h"
#include "io.h"
#include "thp.h"

#include "par.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* cut[(*k)++] = at, with room kept for the closing entry; NULL (cut freed) when out of
 * memory. */
static PlanPos *cut_add(PlanPos *cut, int64_t *k, int64_t *cap, PlanPos at)
{
	if (*k + 2 > *cap) {
		PlanPos *c = realloc(cut, (size_t)(*cap *= 2) * sizeof *cut);
		if (!c) {
			free(cut);
			return NULL;
		}
		cut = c;
	}
	cut[(*k)++] = at;
	return cut;
}

PlanPos *par_cut(const Plan *p, int64_t ops, int split, int64_t *n)
{
	int64_t cap = 16, k = 0, acc = 0;
	PlanPos *cut = malloc((size_t)cap * sizeof *cut);
	if (!cut)
		return NULL;
	cut[k++] = (PlanPos){0, 0};
	for (int32_t r = 0; r < p->world; r++) {
		const PlanRank *rk = &p->ranks[r];
		acc += 1 + rk->npeers;
		int64_t i = 0;
		for (;;) {
			int64_t take = ops - acc > 1 ? ops - acc : 1;
			if (!split || rk->nops - i <= take)
				break;
			if (!(cut = cut_add(cut, &k, &cap, (PlanPos){r, i + take})))
				return NULL;
			i += take; // the rest of the rank overfills this piece: a new one from here
			acc = 0;
		}
		acc += rk->nops - i;
		if (acc < ops || r + 1 == p->world)
			continue;
		if (!(cut = cut_add(cut, &k, &cap, (PlanPos){r + 1, 0})))
			return NULL;
		acc = 0;
	}
	cut[k] = (PlanPos){p->world, 0};
	*n = k;
	return cut;
}

typedef struct {
	void *mem; // the writer's buffer, kept for the slot's next piece
	char *s;   // what the piece spilled, s[0, n); its memory kept too
	size_t n, cap;
	int ok;    // mem and s hold the piece
	FILE *f;   // writes to s, unbuffered (the writers buffer), opened once per slot
} Piece;

typedef struct {
	ParPieceFn piece;
	ParEmitFn emit;
	void *arg;
	size_t slot_size;
	Piece *slot[2];    // two batches' pieces: the one being formatted, the one before
	int64_t first[2];  // each batch's first piece
	int64_t count[2];
	int cur;           // the batch being formatted
	int pending;       // the other one is still to write
} Ordered;

static ssize_t spill_write(void *cookie, const char *s, size_t n)
{
	Piece *pc = cookie;
	if (n > pc->cap - pc->n) {
		size_t cap = pc->cap ? pc->cap : 1 << 16;
		while (cap - pc->n < n)
			cap *= 2;
		char *t = realloc(pc->s, cap);
		if (!t)
			return -1;
		pc->s = t;
		pc->cap = cap;
	}
	memcpy(pc->s + pc->n, s, n);
	pc->n += n;
	return (ssize_t)n;
}

/* Writes the batch before the current one, on the calling thread. */
static void drain(Ordered *o)
{
	if (!o->pending)
		return;
	int b = !o->cur;
	for (int64_t k = 0; k < o->count[b]; k++) {
		Piece *pc = &o->slot[b][k];
		o->emit(o->arg, o->first[b] + k, pc->ok ? pc->mem : NULL, pc->s, pc->n);
		pc->n = 0;
		pc->ok = 0;
	}
	o->pending = 0;
}

static int run_piece(void *arg, int64_t k, int w)
{
	Ordered *o = arg;
	if (w == 0)
		drain(o);
	Piece *pc = &o->slot[o->cur][k];
	if (!pc->mem && !(pc->mem = malloc(o->slot_size)))
		return 1; // out of memory: this piece and those not started go to emit
	if (!pc->f) {
		pc->f = fopencookie(pc, "w", (cookie_io_functions_t){.write = spill_write});
		if (!pc->f || setvbuf(pc->f, NULL, _IONBF, 0))
			return 1;
	}
	int bad = o->piece(o->arg, o->first[o->cur] + k, w, pc->mem, pc->f);
	bad |= fflush(pc->f) != 0 || ferror(pc->f);
	clearerr(pc->f);
	pc->ok = !bad;
	return bad;
}

static void free_slots(Piece *s, int64_t n)
{
	for (int64_t k = 0; s && k < n; k++) {
		if (s[k].f)
			fclose(s[k].f);
		free(s[k].s);
		free(s[k].mem);
	}
	free(s);
}

void par_ordered(int64_t n, int batch, size_t slot_size, ParPieceFn piece, ParEmitFn emit,
                 void *arg)
{
	int64_t size = (int64_t)par_workers(n) * batch;
	Ordered o = {.piece = piece, .emit = emit, .arg = arg, .slot_size = slot_size};
	o.slot[0] = calloc((size_t)size, sizeof(Piece));
	o.slot[1] = calloc((size_t)size, sizeof(Piece));
	if (!o.slot[0] || !o.slot[1]) { // out of memory: the calling thread does it all
		for (int64_t i = 0; i < n; i++)
			emit(arg, i, NULL, NULL, 0);
		n = 0;
	}
	for (int64_t at = 0; at < n; at += size) {
		o.first[o.cur] = at;
		o.count[o.cur] = n - at < size ? n - at : size;
		par_for(o.count[o.cur], run_piece, &o);
		drain(&o); // when worker 0 took no piece of this batch
		o.cur = !o.cur;
		o.pending = 1;
	}
	drain(&o);
	free_slots(o.slot[0], size);
	free_slots(o.slot[1], size);
}

int par_write(const Plan *p, int64_t max_ops, int split, PlanPos **cut, int batch,
              size_t slot_size, ParPieceFn piece, ParEmitFn emit, void *arg)
{
	int64_t n, total = plan_total_ops(p), ops = total / (plan_threads * 8);
	if (!total)
		return 0; // the binary form's text part, say: a few lines a rank
	*cut = par_cut(p, ops < 1 ? 1 : ops > max_ops ? max_ops : ops, split, &n);
	if (!*cut || par_workers(n) < 2) {
		free(*cut);
		*cut = NULL;
		return 0;
	}
	par_ordered(n, batch, slot_size, piece, emit, arg);
	free(*cut);
	*cut = NULL;
	return 1;
}

size_t plan_write_piece(void)
{
	return plan_thp_machine()->reported ? PLAN_WRITE_PIECE : SIZE_MAX;
}

int plan_fwrite(const void *s, size_t n, FILE *f)
{
	const char *c = s;
	size_t piece = plan_write_piece();
	for (size_t at = 0, k; at < n; at += k) {
		k = n - at < piece ? n - at : piece;
		if (fwrite(c + at, 1, k, f) != k)
			return -1;
	}
	return 0;
}
