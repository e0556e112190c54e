/* The strict model on several threads (SimOptions.threads): the world's ranks cut into
 * contiguous blocks, a thread each, every thread running its ranks as sim.c's
 * run_strict does, and the same result to the bit.
 *
 * What makes it possible is that matching never depends on time (sim.c): the k-th SEND
 * from a to b meets the k-th RECV on b from a, and the pair completes at
 * max(a's post, b's post) plus the transfer.  So each side can compute its own op's
 * end, given the other side's post time: no side writes the other's state.  Each
 * direction of a pair of ranks has two feeds, single-producer single-consumer rings: the
 * posts of a's SENDs to b (a writes, b reads) and the posts of b's RECVs from a (b
 * writes, a reads).  A rank at a comm group publishes its ops' posts and completes each
 * op whose partner's post has arrived, both in program order, and parks (its thread
 * moves to its next rank) when neither can go on; an op's predecessor is the partner's
 * op when that posted later, as in sim.c, and a group binds to the first of its ops
 * among those ending last (group_end, which sim.c uses too).
 *
 * It runs what it can run exactly and declines the rest: plans without collectives
 * (dp = tp = 1, no table tied across ranks), rendezvous (not eager), a verified plan,
 * and no record of every op's times (SIM_RECORD_ALL's wide times are kept in one
 * list).  When every thread is done or parked and none has moved since each last
 * looked, nothing can move: the plan deadlocks.  Then, as when the run meets a
 * collective after all, sim_run runs the plan again on one thread, whose result and
 * stall analysis are the report's. */
#include "p2p.h"
#include "../plan/prefetch.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define PSIM_FEED 16 // a feed's ring: a power of two
#define PSIM_GROUP 8 // ops of a group whose ports it keeps

enum {
	PS_GO,      // running
	PS_STUCK,   // every thread parked: a deadlock, or a full feed
	PS_DECLINE, // a collective met: the plan is for one thread
	PS_OOM,     // out of memory making a chan
	PS_STOP,    // SimOptions.stop
};

/* One side's posts to one peer: written by one thread, read by one other.  Small, so
 * that every rank's feeds stay in the cache: 384 bytes. */
typedef struct {
	_Alignas(64) int64_t n; // published (the producer's, release), beside what it wrote
	struct {
		int64_t post, op;
	} e[PSIM_FEED];
	_Alignas(64) int64_t used; // consumed (the consumer's, release)
} Feed;

/* A chan's two feeds, and its figures, which its receiving side keeps. */
typedef struct {
	Feed sends, recvs;
	int64_t bytes, transfers;
} Pair;

/* A rank's side of a chan. */
typedef struct {
	int peer, recv;
	int node; // its chan's (the node link times it)
	Pair *pair;
	Feed *out, *in;
	int64_t npub, ndone; // its ops posted, and completed, on this chan
} Port;

/* A rank's state in the threaded run: its ports and where it is in its posted group. */
typedef struct {
	Port *port;
	int nport, cap;
	Port *gport[PSIM_GROUP]; // the ports of the posted group's first ops
	int64_t gend;     // the posted group's end
	int64_t px, cx;   // its next op to publish, and to complete
	uint8_t grouped;  // in a group
} PsimRank;

typedef struct Psim Psim;

/* A thread of the run and the block of ranks [lo, hi) it runs. */
typedef struct {
	Sim s; // a copy: its own transfer cache and last end, the rest shared
	Psim *ps;
	int lo, hi;
	pthread_t th;
	int started;
	int64_t mine;                // publications and consumptions so far
	_Alignas(64) int64_t moves; // ... made visible (the owner's, release)
	_Alignas(64) int64_t seen;  // parked, having looked after `moves` summed to this
	int done;
} PsimThread;

/* The threaded run: what its threads share. */
struct Psim {
	Sim *s;
	PsimRank *rk;
	PsimThread *th;
	int nth;
	int state; // PS_*, atomic
	pthread_mutex_t mu; // making chans (sim_chan_of, pairs)
	Pair **pair;        // by chan
	int npair;
};

static int64_t load(const int64_t *x)
{
	return __atomic_load_n(x, __ATOMIC_ACQUIRE);
}

static void store(int64_t *x, int64_t v)
{
	__atomic_store_n(x, v, __ATOMIC_RELEASE);
}

static void fail(Psim *ps, int why)
{
	int go = PS_GO;
	__atomic_compare_exchange_n(&ps->state, &go, why, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Its moves so far made visible (before it parks or looks for a deadlock). */
static void publish_moves(PsimThread *t)
{
	if (t->mine != t->moves)
		store(&t->moves, t->mine);
}

/* Rank r's port for o (a SEND or RECV), made on first use: NULL out of memory. */
static Port *port_make(PsimThread *t, int r, int peer, int recv);

static inline Port *port_of(PsimThread *t, int r, const PlanOp *o)
{
	PsimRank *g = &t->ps->rk[r];
	int recv = !(t->s.send_kinds >> o->kind & 1), peer = o->peer;
	for (int i = 0; i < g->nport; i++)
		if (g->port[i].peer == peer && g->port[i].recv == recv)
			return &g->port[i];
	return port_make(t, r, peer, recv);
}

static Port *port_make(PsimThread *t, int r, int peer, int recv)
{
	PsimRank *g = &t->ps->rk[r];
	if (g->nport == g->cap) {
		int cap = g->cap ? 2 * g->cap : 4;
		Port *np = realloc(g->port, (size_t)cap * sizeof *np);
		if (!np)
			return NULL;
		g->port = np;
		g->cap = cap;
	}
	Psim *ps = t->ps;
	pthread_mutex_lock(&ps->mu);
	int c = sim_chan_of(ps->s, r, peer, recv);
	int node = c >= 0 && ps->s->ch[c].node; // read under the lock: ch may move
	Pair *pr = NULL;
	if (c >= 0 && c >= ps->npair) {
		Pair **np = realloc(ps->pair, (size_t)(c + 1) * sizeof *np);
		if (np) {
			ps->pair = np;
			memset(np + ps->npair, 0, (size_t)(c + 1 - ps->npair) * sizeof *np);
			ps->npair = c + 1;
		}
	}
	if (c >= 0 && c < ps->npair && !(pr = ps->pair[c])) {
		pr = aligned_alloc(64, (sizeof *pr + 63) / 64 * 64);
		if (pr)
			*pr = (Pair){0};
		ps->pair[c] = pr;
	}
	pthread_mutex_unlock(&ps->mu);
	if (!pr)
		return NULL;
	Port *pt = &g->port[g->nport++];
	*pt = (Port){.peer = peer, .recv = recv, .pair = pr, .node = node, .out = recv ? &pr->recvs : &pr->sends,
	             .in = recv ? &pr->sends : &pr->recvs};
	return pt;
}

/* Op x of rank r (o) meets its partner's, posted at pt and being op pop of the peer. */
static void meet(PsimThread *t, int r, int64_t x, const PlanOp *o, Port *pt, int64_t ppost, int64_t pop)
{
	Sim *s = &t->s;
	SimRank *k = &s->rk[r];
	int64_t b = s->p->edges[o->stage].bytes;
	int64_t end = sat_add(max64(k->t, ppost), xfer(s, pt->node, b));
	if (s->opt.record_ops)
		record_code(s, r, x, k->t, end,
		            ppost > k->t ? peer_code(s, r, x, o->peer, pop) : pred_of(s, r, x, k->bind));
	if (pt->recv) {
		pt->pair->bytes = sat_add(pt->pair->bytes, b);
		pt->pair->transfers++;
	}
	group_end(k, end, REF(r, x));
}

/* Publishes op px of rank r's posted group: 0 when its feed is full. */
static int publish(PsimThread *t, int r, const PlanOp *o, PsimRank *g, const SimRank *k)
{
	Port *pt = port_of(t, r, o);
	if (!pt)
		return fail(t->ps, PS_OOM), 0;
	Feed *f = pt->out;
	int64_t j = pt->npub;
	if (j - load(&f->used) >= PSIM_FEED)
		return 0;
	if (g->px - k->pc < PSIM_GROUP)
		g->gport[g->px - k->pc] = pt;
	f->e[j & (PSIM_FEED - 1)].post = k->t;
	f->e[j & (PSIM_FEED - 1)].op = g->px;
	store(&f->n, j + 1);
	pt->npub++;
	t->mine++;
	return 1;
}

/* Completes op cx of rank r's posted group (published): 0 when the partner's post has
 * not arrived. */
static int complete(PsimThread *t, int r, const PlanOp *o, PsimRank *g, const SimRank *k)
{
	Port *pt = g->cx - k->pc < PSIM_GROUP ? g->gport[g->cx - k->pc] : port_of(t, r, o);
	Feed *f = pt->in;
	int64_t j = pt->ndone;
	if (load(&f->n) <= j)
		return 0;
	int64_t ppost = f->e[j & (PSIM_FEED - 1)].post, pop = f->e[j & (PSIM_FEED - 1)].op;
	store(&f->used, j + 1);
	pt->ndone++;
	t->mine++;
	meet(t, r, g->cx, o, pt, ppost, pop);
	return 1;
}

/* Runs rank r's posted group: publishes its ops and completes those whose partners'
 * posts have arrived, in program order each, until all are done (1) or neither can go
 * on (0: parked).  Completing while publishing is stalled on a full feed lets a group of
 * more ops to one peer than a feed holds meet its partner's, which frees the feed. */
static int run_group(PsimThread *t, int r, const PlanOp *ops)
{
	PsimRank *g = &t->ps->rk[r];
	SimRank *k = &t->s.rk[r];
	for (;;) {
		int64_t px = g->px, cx = g->cx;
		while (g->px < g->gend) {
			if (plan_op_sized(plan_op_kind(&ops[g->px])))
				return fail(t->ps, PS_DECLINE), 0;
			if (!publish(t, r, &ops[g->px], g, k))
				break;
			g->px++;
		}
		while (g->cx < g->px && complete(t, r, &ops[g->cx], g, k))
			g->cx++;
		if (g->cx == g->gend)
			break;
		if (g->px == px && g->cx == cx)
			return 0;
	}
	k->done += g->gend - k->pc;
	k->t = k->gmax;
	if (k->gmax_who != REF_NONE)
		k->bind = k->gmax_who;
	k->pc = g->gend;
	g->grouped = 0;
	return 1;
}

/* Runs rank r as far as it goes: 1 when it moved (ran an op, published or completed). */
static int run_rank(PsimThread *t, int r)
{
	Sim *s = &t->s;
	PsimRank *g = &t->ps->rk[r];
	SimRank *k = &s->rk[r];
	const PlanRank *pr = &s->p->ranks[r];
	const PlanOp *ops = pr->ops;
	int64_t n = pr->nops, m0 = t->mine, pc0 = k->pc;
	for (;;) {
		if (g->grouped && !run_group(t, r, ops))
			return t->mine != m0 || k->pc != pc0;
		int64_t i = k->pc, tm = k->t;
		while (i < n && !plan_op_is_comm(ops[i].kind)) {
			plan_prefetch(ops, i, n);
			tm = do_compute(s, r, i, &ops[i], tm, k->bind);
			k->bind = REF(r, i);
			i++;
		}
		k->pc = i;
		k->t = tm;
		if (i == n) {
			k->state = AG_DONE;
			return 1;
		}
		g->gend = plan_group_end(pr, i);
		g->px = g->cx = i;
		g->grouped = 1;
		k->gmax = tm;
		k->gmax_who = REF_NONE;
		prefetch_ops(pr, g->gend);
	}
}

static int64_t moves_now(Psim *ps)
{
	int64_t m = 0;
	for (int j = 0; j < ps->nth; j++)
		m += load(&ps->th[j].moves);
	return m;
}

/* Every thread done or parked having looked after the last move: nothing can move.
 * The moves are summed before and after the threads' marks are read; equal sums mean no
 * move happened while they were read. */
static int all_parked(Psim *ps)
{
	int64_t m = moves_now(ps);
	for (int j = 0; j < ps->nth; j++)
		if (!__atomic_load_n(&ps->th[j].done, __ATOMIC_ACQUIRE) && load(&ps->th[j].seen) != m)
			return 0;
	return moves_now(ps) == m;
}

static void relax(int *spins)
{
	if (++*spins < 100) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
		return;
	}
	*spins = 0;
	sched_yield();
}

static void *thread_main(void *arg)
{
	PsimThread *t = arg;
	Psim *ps = t->ps;
	int *live = malloc((size_t)(t->hi - t->lo + 1) * sizeof *live);
	int nlive = 0, spins = 0, parked = 0;
	if (!live) {
		fail(ps, PS_OOM);
		__atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
		return NULL;
	}
	for (int r = t->lo; r < t->hi; r++)
		live[nlive++] = r;
	while (nlive && __atomic_load_n(&ps->state, __ATOMIC_ACQUIRE) == PS_GO &&
	       !sim_stopped(&t->s)) {
		int64_t before = parked ? moves_now(ps) : -1;
		int went = 0;
		for (int j = 0; j < nlive; j++) {
			int r = live[j];
			int64_t pc0 = t->s.rk[r].pc;
			went |= run_rank(t, r);
			sim_count(&t->s, r, pc0);
			if (t->s.rk[r].state == AG_DONE)
				live[j--] = live[--nlive];
		}
		publish_moves(t);
		if (went) {
			parked = 0;
			spins = 0;
			store(&t->seen, -1);
		} else if (!parked) {
			parked = 1; // look once more, having summed the moves first
		} else {
			store(&t->seen, before);
			if (all_parked(ps))
				fail(ps, PS_STUCK);
			relax(&spins);
		}
	}
	if (sim_stopped(&t->s))
		fail(ps, PS_STOP);
	free(live);
	__atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* The threads' last ends into s (note_end's order), and the chans' figures. */
static void gather(Psim *ps)
{
	Sim *s = ps->s;
	for (int j = 0; j < ps->nth; j++) {
		Sim *x = &ps->th[j].s;
		if (x->last_end >= s->last_end &&
		    (x->last_end > s->last_end || x->last_ref < s->last_ref)) {
			s->last_end = x->last_end;
			s->last_ref = x->last_ref;
		}
	}
	for (int c = 0; c < s->nch && c < ps->npair; c++)
		if (ps->pair[c]) {
			s->ch[c].bytes = ps->pair[c]->bytes;
			s->ch[c].transfers = ps->pair[c]->transfers;
		}
}

int sim_run_threads(Sim *s)
{
	const Plan *p = s->p;
	int nth = s->opt.threads < p->world / 2 ? s->opt.threads : p->world / 2;
	if (nth < 2 || s->opt.model != SIM_STRICT || s->opt.eager || !s->opt.verified ||
	    s->opt.record_ops == SIM_RECORD_ALL || p->dims[DIM_DP] != 1 ||
	    p->dims[DIM_TP] != 1 || s->tie_e >= 0)
		return 0;
	Psim ps = {.s = s, .nth = nth, .state = PS_GO};
	ps.rk = calloc((size_t)p->world, sizeof *ps.rk);
	ps.th = aligned_alloc(64, ((size_t)nth * sizeof *ps.th + 63) / 64 * 64);
	if (!ps.rk || !ps.th) {
		free(ps.rk);
		free(ps.th);
		return 0;
	}
	pthread_mutex_init(&ps.mu, NULL);
	for (int j = 0; j < nth; j++) {
		PsimThread *t = &ps.th[j];
		memset(t, 0, sizeof *t);
		t->s = *s;
		t->ps = &ps;
		t->lo = (int)((int64_t)p->world * j / nth);
		t->hi = (int)((int64_t)p->world * (j + 1) / nth);
		t->seen = -1;
	}
	for (int j = 1; j < nth; j++)
		ps.th[j].started = !pthread_create(&ps.th[j].th, NULL, thread_main, &ps.th[j]);
	for (int j = 1; j < nth; j++)
		if (!ps.th[j].started)
			fail(&ps, PS_DECLINE);
	thread_main(&ps.th[0]);
	for (int j = 1; j < nth; j++)
		if (ps.th[j].started)
			pthread_join(ps.th[j].th, NULL);
	int state = ps.state;
	for (int j = 0; j < nth; j++)
		s->path_missing |= ps.th[j].s.path_missing;
	if (state == PS_GO)
		gather(&ps);
	for (int r = 0; r < p->world; r++)
		free(ps.rk[r].port);
	for (int c = 0; c < ps.npair; c++)
		free(ps.pair[c]);
	free(ps.pair);
	free(ps.rk);
	free(ps.th);
	pthread_mutex_destroy(&ps.mu);
	if (state != PS_GO)
		return state == PS_STOP ? -2 : -1;
	s->res->threads = nth;
	return 1;
}
