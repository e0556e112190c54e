/* The simulation core: executes a plan as docs/semantics.md defines it.
 *
 * Matching is decided by program order alone (the k-th SEND from a to b pairs with the
 * k-th RECV on b from a; the k-th ALLREDUCE of a dp group with every member's k-th), so
 * time never decides who meets whom.  That lets us run without a global clock: each
 * agent (a rank in the strict model; a rank's compute stream and its comm stream in the
 * overlap model) advances as far as it can, computing times in max-plus fashion, and
 * parks when it needs something that has not been posted yet.  Whoever posts the
 * missing half wakes it.  When no agent can move and some have not finished, no order
 * of execution could finish them either: that is a deadlock, and the parked agents with
 * their "waits for" edges are the wait-for graph in which we look for a cycle.
 *
 * Per op the work is O(1): a cursor step, a per-(sender, receiver) FIFO push or pop, a
 * counter for collectives.  The overlap model also keeps, per rank, a small hash of
 * values in flight between its streams (receives completed, data produced).  Times
 * saturate instead of overflowing, so any plan the reader accepts runs safely. */
#include "sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const sim_model_names[SIM_MODEL_COUNT] = {"strict", "overlap"};
const char *const sim_verdict_names[SIM_VERDICT_COUNT] = {"ok", "deadlock", "mismatch"};

enum {
	AG_READY,   // runnable or running
	AG_MATCH,   // parked in a posted group, waiting for partners
	AG_WAIT,    // parked before an op, waiting for a value of the other stream
	AG_DONE,    // reached the end of its op list
};

/* Keys of the per-rank hash (overlap model), never 0. */
enum {
	KEY_RECV = 1, // a completed RECV (dir, edge, mb): what a compute op consumes
	KEY_DATA = 2, // a produced tensor (dir, stage, mb): what a SEND transmits
	KEY_AR = 3,   // a completed ALLREDUCE of a stage: what OPTIM consumes
};

#define REF_NONE (-1)
#define REF_KEEP (-2) // complete an op without changing its critical-path predecessor
#define REF(r, i) (((int64_t)(r) << 40) | (int64_t)(i))
#define REF_RANK(x) ((int)((x) >> 40))
#define REF_OP(x) ((x) & (((int64_t)1 << 40) - 1))

typedef struct {
	int64_t post; // time the op was posted
	int64_t op;   // its index on its rank
} QEnt;

/* One ordered pair (src -> dst).  Only one side can have unmatched ops at a time. */
typedef struct {
	int src, dst;
	uint8_t side;       // what q holds: 0 sends of src, 1 receives of dst
	int64_t head, n, cap; // cap: 0 or a power of two (the ring is indexed by masking)
	QEnt *q;
	int64_t bytes, transfers;
} Chan;

typedef struct {
	int key; // peer * 2 + (1 when this rank receives)
	int chan;
} ChanRef;

typedef struct {
	uint64_t key;
	int64_t time;
	int64_t who;  // op whose end is `time`
	int64_t refs; // consumers still to come
} HEnt;

typedef struct {
	HEnt *e;
	int64_t cap, n;
} Hash;

typedef struct {
	int n;
	int *members;
	int arrived;
	int stage;
	int64_t bytes;
	int64_t maxpost, last_who; // latest arrival and who it was
	int first_rank;
	int64_t first_op;
	int64_t count, total;
} Coll;

typedef struct {
	/* The strict model's rank, or the overlap model's comm stream. */
	int64_t pc;        // next op; while parked in a group, its first op
	int64_t t;         // time of the stream
	int64_t bind;      // op whose end set t (critical path)
	int64_t gend;      // one past the posted group
	int pending;       // unmatched ops of the posted group
	int64_t gmax, gmax_who;
	int64_t ar_op;     // its posted ALLREDUCE, or -1
	uint8_t state;
	/* The overlap model's compute stream. */
	uint8_t cstate;
	int64_t cpc, ct, cbind;
	uint8_t queued[2];
	int64_t mem, peak_mem, units, peak_units, busy, done;
	int nch, chcap;
	ChanRef *ch;
	Hash h;
	int64_t *wdone;    // per local stage: W/BW done (overlap)
	int64_t *wlast, *wlast_who;
} Rk;

typedef struct {
	int64_t cost[OP_COUNT]; // per op kind (plan_op_cost): 0 for ops that do not compute
	int64_t dmem[OP_COUNT]; // saved bytes an op allocates (+) or frees (-)
	int nrin, nrout;   // remote in- and out-edges (overlap)
	int *rin, *rout;
} StageInfo;

typedef struct {
	const Plan *p;
	SimOptions opt;
	SimResult *res;
	int world;
	Rk *rk;
	StageInfo *st;
	int *local_idx;      // stage -> index among the stages of its pp
	int *nlocal;         // pp -> stages placed there
	Chan *ch;
	int nch, chcap;
	uint64_t *pairkey;   // open addressing (src, dst) -> chan + 1
	int *pairval;
	int64_t paircap;
	Coll *coll;
	int ncoll;
	int *collof;
	int *work;           // agent ids: rank * 2 + stream (0 rank/comm, 1 compute)
	int64_t nwork;
	int32_t **pred;      // per rank per op (record_ops): pred_code()
	int64_t xfer_bytes, xfer_ns; // last transfer time computed
	/* record_ops: the op that ends last (the first in (rank, op) order among equals),
	 * kept as ends are written (each op's end is written once) so that the critical
	 * path need not scan every op's time. */
	int64_t last_end, last_ref;
	int failed;          // a mismatch or out of memory stopped the run
	int oom;
} S;

/* ---- small helpers ---- */

static int64_t sat_add(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

static int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

static void *xcalloc(S *s, size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p && !s->oom) {
		s->oom = s->failed = 1;
		snprintf(s->res->message, sizeof s->res->message, "out of memory");
	}
	return p;
}

static int grow(S *s, void **arr, int64_t *cap, int64_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	int64_t c = *cap ? *cap * 2 : 8;
	while (c < need)
		c *= 2;
	void *p = realloc(*arr, (size_t)c * size);
	if (!p) {
		if (!s->oom) {
			s->oom = s->failed = 1;
			snprintf(s->res->message, sizeof s->res->message, "out of memory");
		}
		return -1;
	}
	*arr = p;
	*cap = c;
	return 0;
}

int64_t sim_op_line(const Plan *p, int rank, int64_t op)
{
	if (rank < 0 || rank >= p->world || op < 0 || !p->ranks[rank].first_line)
		return 0;
	return p->ranks[rank].first_line + op;
}

int sim_model_parse(const char *s)
{
	for (int m = 0; m < SIM_MODEL_COUNT; m++)
		if (!strcmp(s, sim_model_names[m]))
			return m;
	return -1;
}

/* plan_transfer_ns, saturated for absurd sizes, cached for the common repeated size. */
static int64_t xfer(S *s, int64_t bytes)
{
	if (bytes == s->xfer_bytes)
		return s->xfer_ns;
	const Plan *p = s->p;
	int64_t ns;
	if (p->link_ideal)
		ns = 0;
	else if ((double)bytes * 1e9 / p->bandwidth > 4e18)
		ns = INT64_MAX / 2;
	else
		ns = plan_transfer_ns(p, bytes);
	s->xfer_bytes = bytes;
	s->xfer_ns = ns;
	return ns;
}

int64_t sim_allreduce_ns(const Plan *p, int n, int64_t bytes)
{
	if (p->link_ideal || n <= 1)
		return 0;
	double x = ceil(2.0 * (n - 1) / n * (double)bytes * 1e9 / p->bandwidth);
	int64_t lat = p->latency_ns > INT64_MAX / (4 * (int64_t)n) ? INT64_MAX / 4
	                                                           : 2 * (int64_t)(n - 1) * p->latency_ns;
	if (!(x < 4e18))
		return INT64_MAX / 2;
	return sat_add(lat, (int64_t)x);
}

/* The critical path's predecessor of op i of rank r, in 32 bits (record_ops costs 24
 * bytes per op, not 28): -1 none; else a 2-bit tag and 29 bits.  Tag 0: op v of the
 * same rank; 1: op v of the op's p2p peer; 2: the matching all-reduce of dp member v
 * (found again by counting when the path is walked, which is rare).  Refs that fit none
 * of these (op indices of 2^29 and more) end the path there. */
#define PRED_BITS 29
static int32_t pred_code(const S *s, int r, int64_t i, int64_t ref)
{
	if (ref < 0)
		return -1;
	int q = REF_RANK(ref);
	int64_t v = REF_OP(ref);
	const PlanOp *o = &s->p->ranks[r].ops[i];
	if (v >= ((int64_t)1 << PRED_BITS) || q >= (1 << PRED_BITS))
		return -1;
	if (q == r)
		return (int32_t)v;
	if ((o->kind == OP_SEND || o->kind == OP_RECV) && o->peer == q)
		return (int32_t)((1 << PRED_BITS) | v);
	if (o->kind == OP_ALLREDUCE)
		return (int32_t)((2 << PRED_BITS) | q);
	return -1;
}

static int64_t pred_ref(const S *s, int r, int64_t i)
{
	int32_t c = s->pred[r][i];
	if (c < 0)
		return REF_NONE;
	int64_t v = c & ((1 << PRED_BITS) - 1);
	const PlanOp *o = &s->p->ranks[r].ops[i];
	switch (c >> PRED_BITS) {
	case 0:
		return REF(r, v);
	case 1:
		return REF(o->peer, v);
	case 2: { // the member's all-reduce with the same count as ours
		int64_t k = 0;
		for (int64_t j = 0; j < i; j++)
			k += s->p->ranks[r].ops[j].kind == OP_ALLREDUCE;
		const PlanRank *pm = &s->p->ranks[v];
		for (int64_t j = 0; j < pm->nops; j++)
			if (pm->ops[j].kind == OP_ALLREDUCE && k-- == 0)
				return REF(v, j);
		return REF_NONE;
	}
	}
	return REF_NONE;
}

static void record(S *s, int r, int64_t i, int64_t start, int64_t end, int64_t pred)
{
	if (!s->opt.record_ops)
		return;
	SimOpTime *t = &s->res->ranks[r].times[i];
	t->start = start;
	t->end = end;
	if (end >= s->last_end && (end > s->last_end || REF(r, i) < s->last_ref)) {
		s->last_end = end;
		s->last_ref = REF(r, i);
	}
	if (pred != REF_KEEP)
		s->pred[r][i] = pred_code(s, r, i, pred);
}

static void set_end(S *s, int r, int64_t i, int64_t end, int64_t pred)
{
	if (!s->opt.record_ops)
		return;
	s->res->ranks[r].times[i].end = end;
	if (end >= s->last_end && (end > s->last_end || REF(r, i) < s->last_ref)) {
		s->last_end = end;
		s->last_ref = REF(r, i);
	}
	if (pred != REF_KEEP)
		s->pred[r][i] = pred_code(s, r, i, pred);
}

/* A parked rank resumes at ops[i]: fetch its next ops now.  With many ranks the
 * hardware prefetcher cannot follow every rank's list, and a resumed rank would
 * otherwise start with a cache miss on every line of ops. */
static inline void prefetch_ops(const PlanRank *pr, int64_t i)
{
	if (i + 6 < pr->nops) {
		const char *a = (const char *)&pr->ops[i];
		__builtin_prefetch(a);
		__builtin_prefetch(a + 64);
		__builtin_prefetch(a + 128);
		__builtin_prefetch(a + 192);
	}
}

static void push_agent(S *s, int r, int stream)
{
	Rk *k = &s->rk[r];
	if (k->queued[stream])
		return;
	k->queued[stream] = 1;
	s->work[s->nwork++] = r * 2 + stream;
}

/* ---- the per-rank hash (overlap model) ---- */

static uint64_t hkey(int type, int dir, int idx, int mb)
{
	return ((uint64_t)type << 62) | ((uint64_t)(dir & 1) << 61) |
	       ((uint64_t)(uint32_t)idx << 31) | (uint64_t)(uint32_t)mb;
}

/* Fibonacci hashing: keys differ mostly in their low bits (the microbatch). */
static inline uint64_t hmix(uint64_t k)
{
	k *= 0x9e3779b97f4a7c15ULL;
	return k ^ (k >> 29);
}

static inline HEnt *hfind(Hash *h, uint64_t key)
{
	if (!h->cap)
		return NULL;
	for (uint64_t i = hmix(key) & (uint64_t)(h->cap - 1);; i = (i + 1) & (uint64_t)(h->cap - 1)) {
		if (h->e[i].key == key)
			return &h->e[i];
		if (!h->e[i].key)
			return NULL;
	}
}

static int hput(S *s, Hash *h, uint64_t key, int64_t time, int64_t who, int64_t refs)
{
	/* One probe run finds the key or the free slot it goes to (unless the table grows). */
	if ((h->n + 1) * 2 <= h->cap) {
		uint64_t mask = (uint64_t)(h->cap - 1);
		uint64_t i = hmix(key) & mask;
		while (h->e[i].key && h->e[i].key != key)
			i = (i + 1) & mask;
		HEnt *e = &h->e[i];
		if (!e->key) {
			*e = (HEnt){key, time, who, refs};
			h->n++;
			return 0;
		}
		e->refs = sat_add(e->refs, refs);
		if (time > e->time) {
			e->time = time;
			e->who = who;
		}
		return 0;
	}
	HEnt *e = hfind(h, key);
	if (e) {
		e->refs = sat_add(e->refs, refs);
		if (time > e->time) {
			e->time = time;
			e->who = who;
		}
		return 0;
	}
	if ((h->n + 1) * 2 > h->cap) {
		int64_t cap = h->cap ? h->cap * 2 : 16;
		HEnt *ne = calloc((size_t)cap, sizeof *ne);
		if (!ne) {
			s->oom = s->failed = 1;
			snprintf(s->res->message, sizeof s->res->message, "out of memory");
			return -1;
		}
		for (int64_t j = 0; j < h->cap; j++) {
			if (!h->e[j].key)
				continue;
			uint64_t i = hmix(h->e[j].key) & (uint64_t)(cap - 1);
			while (ne[i].key)
				i = (i + 1) & (uint64_t)(cap - 1);
			ne[i] = h->e[j];
		}
		free(h->e);
		h->e = ne;
		h->cap = cap;
	}
	uint64_t i = hmix(key) & (uint64_t)(h->cap - 1);
	while (h->e[i].key)
		i = (i + 1) & (uint64_t)(h->cap - 1);
	h->e[i] = (HEnt){key, time, who, refs};
	h->n++;
	return 0;
}

/* Removes e, shifting back the entries of its probe run (no tombstones). */
static void hdel(Hash *h, HEnt *e)
{
	uint64_t mask = (uint64_t)(h->cap - 1);
	uint64_t i = (uint64_t)(e - h->e);
	uint64_t j = i;
	for (;;) {
		h->e[i].key = 0;
		for (;;) {
			j = (j + 1) & mask;
			if (!h->e[j].key) {
				h->n--;
				return;
			}
			uint64_t home = hmix(h->e[j].key) & mask;
			// move e[j] to i unless its home lies cyclically in (i, j]
			if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
				continue;
			break;
		}
		h->e[i] = h->e[j];
		i = j;
	}
}

static void hconsume(Hash *h, HEnt *e)
{
	if (--e->refs <= 0)
		hdel(h, e);
}

/* ---- channels ---- */

static int chan_of(S *s, int r, int peer, int recv)
{
	Rk *k = &s->rk[r];
	int key = peer * 2 + recv;
	for (int i = 0; i < k->nch; i++)
		if (k->ch[i].key == key)
			return k->ch[i].chan;
	int src = recv ? peer : r, dst = recv ? r : peer;
	uint64_t pk = ((uint64_t)src << 32 | (uint64_t)dst) + 1;
	if ((int64_t)(s->nch + 1) * 2 > s->paircap) {
		int64_t cap = s->paircap ? s->paircap * 2 : 64;
		uint64_t *nk = calloc((size_t)cap, sizeof *nk);
		int *nv = calloc((size_t)cap, sizeof *nv);
		if (!nk || !nv) {
			free(nk);
			free(nv);
			s->oom = s->failed = 1;
			snprintf(s->res->message, sizeof s->res->message, "out of memory");
			return -1;
		}
		for (int64_t j = 0; j < s->paircap; j++) {
			if (!s->pairkey[j])
				continue;
			uint64_t i = hmix(s->pairkey[j]) & (uint64_t)(cap - 1);
			while (nk[i])
				i = (i + 1) & (uint64_t)(cap - 1);
			nk[i] = s->pairkey[j];
			nv[i] = s->pairval[j];
		}
		free(s->pairkey);
		free(s->pairval);
		s->pairkey = nk;
		s->pairval = nv;
		s->paircap = cap;
	}
	uint64_t i = hmix(pk) & (uint64_t)(s->paircap - 1);
	while (s->pairkey[i] && s->pairkey[i] != pk)
		i = (i + 1) & (uint64_t)(s->paircap - 1);
	int c;
	if (s->pairkey[i]) {
		c = s->pairval[i];
	} else {
		int64_t cap = s->chcap;
		if (grow(s, (void **)&s->ch, &cap, s->nch + 1, sizeof *s->ch))
			return -1;
		s->chcap = (int)cap;
		c = s->nch++;
		s->ch[c] = (Chan){.src = src, .dst = dst};
		s->pairkey[i] = pk;
		s->pairval[i] = c;
	}
	int64_t cap = k->chcap;
	if (grow(s, (void **)&k->ch, &cap, k->nch + 1, sizeof *k->ch))
		return -1;
	k->chcap = (int)cap;
	k->ch[k->nch++] = (ChanRef){key, c};
	return c;
}

static int chan_push(S *s, Chan *c, int side, int64_t post, int64_t op)
{
	if (c->n == c->cap) {
		int64_t cap = c->cap ? c->cap * 2 : 4;
		QEnt *q = malloc((size_t)cap * sizeof *q);
		if (!q) {
			s->oom = s->failed = 1;
			snprintf(s->res->message, sizeof s->res->message, "out of memory");
			return -1;
		}
		for (int64_t i = 0; i < c->n; i++)
			q[i] = c->q[(c->head + i) & (c->cap - 1)];
		free(c->q);
		c->q = q;
		c->head = 0;
		c->cap = cap;
	}
	c->side = (uint8_t)side;
	c->q[(c->head + c->n) & (c->cap - 1)] = (QEnt){post, op};
	c->n++;
	return 0;
}

static QEnt chan_pop(Chan *c)
{
	QEnt e = c->q[c->head];
	c->head = (c->head + 1) & (c->cap - 1);
	c->n--;
	return e;
}

/* ---- verdicts found on the way ---- */

static void mismatch(S *s, int ra, int64_t a, int rb, int64_t b, const char *why)
{
	if (s->failed)
		return;
	s->failed = 1;
	SimResult *res = s->res;
	res->verdict = SIM_MISMATCH;
	res->stuck = calloc(2, sizeof *res->stuck);
	if (res->stuck) {
		res->nstuck = 2;
		res->stuck[0] = (SimOpRef){ra, a, SIM_STREAM_RANK};
		res->stuck[1] = (SimOpRef){rb, b, SIM_STREAM_RANK};
	}
	snprintf(res->message, sizeof res->message, "%s", why);
}

/* The k-th SEND and the k-th RECV of a pair must agree on what they move. */
static int check_pair(S *s, int ra, int64_t a, int rb, int64_t b)
{
	const PlanOp *x = &s->p->ranks[ra].ops[a], *y = &s->p->ranks[rb].ops[b];
	const char *why = NULL;
	if (x->bytes != y->bytes)
		why = "bytes differ between a send and the receive it pairs with";
	else if (x->stage != y->stage || x->mb != y->mb || x->dir != y->dir)
		why = "FIFO order pairs a send with a receive of another edge, microbatch or direction";
	if (!why)
		return 0;
	mismatch(s, ra, a, rb, b, why);
	return -1;
}

/* ---- groups ---- */

/* Credits op i of rank r (in r's posted group) with completion at `end`. */
static inline void complete_op(S *s, int r, int64_t i, int64_t end, int64_t pred, int counted)
{
	Rk *k = &s->rk[r];
	set_end(s, r, i, end, pred);
	if (end > k->gmax || k->gmax_who == REF_NONE) {
		k->gmax = max64(end, k->gmax);
		k->gmax_who = REF(r, i);
	}
	if (counted && --k->pending == 0 && k->state == AG_MATCH)
		push_agent(s, r, 0);
}

static void post_p2p(S *s, int r, int64_t i, const PlanOp *o, int64_t t)
{
	int recv = o->kind == OP_RECV;
	int c = chan_of(s, r, o->peer, recv);
	if (c < 0)
		return;
	Chan *ch = &s->ch[c];
	int eager = s->opt.eager;
	if (ch->n && ch->side != recv) {
		QEnt e = chan_pop(ch);
		int sr = recv ? o->peer : r, rr = recv ? r : o->peer;
		int64_t si = recv ? e.op : i, ri = recv ? i : e.op;
		int64_t sp = recv ? e.post : t, rp = recv ? t : e.post;
		if (check_pair(s, sr, si, rr, ri))
			return;
		int64_t x = xfer(s, o->bytes);
		ch->bytes = sat_add(ch->bytes, o->bytes);
		ch->transfers++;
		int64_t sbind = REF_NONE, rbind = REF_NONE; // NONE: keep the group's binder
		if (eager) {
			int64_t arrive = sat_add(sp, x);
			int64_t rend = max64(arrive, rp);
			if (arrive > rp)
				rbind = REF(sr, si);
			if (!recv) // the send completes at once; its receive was waiting
				complete_op(s, r, i, t, REF_KEEP, 0);
			int64_t keep = REF_KEEP;
			complete_op(s, rr, ri, rend, rbind == REF_NONE ? keep : rbind, !recv);
			return;
		}
		int64_t start = max64(sp, rp);
		int64_t end = sat_add(start, x);
		if (rp > sp)
			sbind = REF(rr, ri);
		else if (sp > rp)
			rbind = REF(sr, si);
		int64_t skeep = REF_KEEP;
		int64_t rkeep = REF_KEEP;
		complete_op(s, sr, si, end, sbind == REF_NONE ? skeep : sbind, recv);
		complete_op(s, rr, ri, end, rbind == REF_NONE ? rkeep : rbind, !recv);
		return;
	}
	if (chan_push(s, ch, recv, t, i))
		return;
	if (!recv && eager)
		complete_op(s, r, i, t, REF_KEEP, 0);
	else
		s->rk[r].pending++;
}

static void post_allreduce(S *s, int r, int64_t i, const PlanOp *o, int64_t t)
{
	Coll *c = &s->coll[s->collof[r]];
	Rk *k = &s->rk[r];
	if (c->arrived == 0) {
		c->stage = o->stage;
		c->bytes = o->bytes;
		c->maxpost = t;
		c->last_who = REF(r, i);
		c->first_rank = r;
		c->first_op = i;
	} else {
		if (o->stage != c->stage || o->bytes != c->bytes) {
			mismatch(s, c->first_rank, c->first_op, r, i,
			         o->stage != c->stage
			             ? "members of a dp group all-reduce different stages at the same point"
			             : "members of a dp group all-reduce different sizes");
			return;
		}
		if (t >= c->maxpost) {
			c->maxpost = t;
			c->last_who = REF(r, i);
		}
	}
	k->ar_op = i;
	k->pending++;
	if (++c->arrived < c->n)
		return;
	int64_t end = sat_add(c->maxpost, sim_allreduce_ns(s->p, c->n, c->bytes));
	c->arrived = 0;
	c->count++;
	c->total = sat_add(c->total, c->bytes);
	for (int j = 0; j < c->n; j++) {
		int m = c->members[j];
		Rk *km = &s->rk[m];
		int64_t ai = km->ar_op;
		km->ar_op = -1;
		int64_t keep = REF_KEEP;
		complete_op(s, m, ai, end, c->last_who == REF(m, ai) ? keep : c->last_who, 1);
	}
}

static uint64_t send_key(S *s, const PlanOp *o);

/* Posts the group [i, end) at time t (end -1: find it).  take: the comm stream consumes
 * the tensors its sends transmit (overlap model).  Returns the end. */
static int64_t post_group(S *s, int r, int64_t i, int64_t end, int64_t t, int take)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	const PlanOp *ops = pr->ops;
	k->pending = 0;
	k->gmax = t;
	k->gmax_who = REF_NONE;
	if (end < 0) {
		end = plan_group_end(pr, i);
	}
	k->gend = end;
	for (int64_t x = i; x < end && !s->failed; x++) {
		const PlanOp *o = &ops[x];
		record(s, r, x, t, -1, k->bind);
		if (o->kind == OP_ALLREDUCE) {
			post_allreduce(s, r, x, o, t);
			continue;
		}
		if (take && o->kind == OP_SEND) {
			HEnt *e = hfind(&k->h, send_key(s, o));
			if (e)
				hconsume(&k->h, e);
		}
		post_p2p(s, r, x, o, t);
	}
	return end;
}

/* ---- compute ---- */

/* Runs compute op i (o) of rank r from `start`; returns its end. */
static inline int64_t do_compute(S *s, int r, int64_t i, const PlanOp *o, int64_t start,
                                 int64_t pred)
{
	Rk *k = &s->rk[r];
	int64_t end = start;
	if (plan_op_is_compute(o->kind)) {
		const StageInfo *st = &s->st[o->stage];
		int64_t cost = st->cost[o->kind];
		end = sat_add(start, cost);
		k->busy = sat_add(k->busy, cost);
		k->mem = sat_add(k->mem, st->dmem[o->kind]);
		if (k->mem > k->peak_mem)
			k->peak_mem = k->mem;
		uint8_t makes = plan_ops[o->kind].makes; // a microbatch is live from F to its W
		if (makes & PLAN_DEP_ACT) {
			if (++k->units > k->peak_units)
				k->peak_units = k->units;
		} else if (makes & PLAN_DEP_WGRAD) {
			k->units--;
		}
	}
	k->done++;
	if (s->opt.record_ops)
		record(s, r, i, start, end, pred);
	return end;
}

/* ---- the strict model ---- */

static void run_strict(S *s, int r)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	int64_t i = k->pc, t = k->t, n = pr->nops;
	if (k->state == AG_MATCH) { // woken: the group completed
		k->done += k->gend - i;
		t = k->gmax;
		k->bind = k->gmax_who;
		i = k->gend;
	}
	k->state = AG_READY;
	const PlanOp *ops = pr->ops;
	while (i < n) {
		const PlanOp *o = &ops[i];
		if (!plan_op_is_comm(o->kind)) {
			t = do_compute(s, r, i, o, t, k->bind);
			k->bind = REF(r, i);
			i++;
			continue;
		}
		int64_t end = post_group(s, r, i, -1, t, 0);
		if (s->failed)
			return;
		if (k->pending) {
			k->pc = i;
			k->t = t;
			k->state = AG_MATCH;
			prefetch_ops(pr, end);
			return;
		}
		k->done += end - i;
		t = k->gmax;
		if (k->gmax_who != REF_NONE)
			k->bind = k->gmax_who;
		i = end;
	}
	k->pc = n;
	k->t = t;
	k->state = AG_DONE;
}

/* ---- the overlap model ---- */

static int local_stage(S *s, int r, int stage)
{
	if (stage < 0 || stage >= s->p->nstages)
		return -1;
	if (s->p->stages[stage].pp != s->p->ranks[r].coord[DIM_PP])
		return -1;
	return s->local_idx[stage];
}

/* What compute op o consumes: up to n keys into keys[]; returns the count. */
static inline int consumed_keys(S *s, const PlanOp *o, uint64_t *keys, int n)
{
	int c = 0;
	uint8_t needs = plan_ops[o->kind].needs;
	if (needs & PLAN_DEP_IN_ACT) {
		const StageInfo *st = &s->st[o->stage];
		for (int j = 0; j < st->nrin && c < n; j++)
			keys[c++] = hkey(KEY_RECV, DIR_ACT, st->rin[j], o->mb);
	}
	if (needs & PLAN_DEP_OUT_GRAD) {
		const StageInfo *st = &s->st[o->stage];
		for (int j = 0; j < st->nrout && c < n; j++)
			keys[c++] = hkey(KEY_RECV, DIR_GRAD, st->rout[j], o->mb);
	}
	if ((needs & PLAN_DEP_REDUCED) && s->p->dims[DIM_DP] > 1)
		keys[c++] = hkey(KEY_AR, 0, o->stage, 0);
	return c;
}

/* The key a SEND's data is produced under. */
static uint64_t send_key(S *s, const PlanOp *o)
{
	const PlanEdge *e = &s->p->edges[o->stage];
	return o->dir == DIR_ACT ? hkey(KEY_DATA, DIR_ACT, e->src, o->mb)
	                         : hkey(KEY_DATA, DIR_GRAD, e->dst, o->mb);
}

#define MAXKEYS 64

static void run_compute(S *s, int r)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	int64_t i = k->cpc, t = k->ct, n = pr->nops;
	int progressed = 0;
	k->cstate = AG_READY;
	uint64_t keys[MAXKEYS];
	while (i < n) {
		const PlanOp *o = &pr->ops[i];
		if (plan_op_is_comm(o->kind)) {
			i++;
			continue;
		}
		int nk = consumed_keys(s, o, keys, MAXKEYS);
		int64_t start = t, bind = k->cbind;
		int missing = 0;
		HEnt *e = NULL;
		for (int j = 0; j < nk; j++) {
			e = hfind(&k->h, keys[j]);
			if (!e) {
				missing = 1;
				break;
			}
			if (e->time > start) {
				start = e->time;
				bind = e->who;
			}
		}
		if (missing) {
			k->cstate = AG_WAIT;
			prefetch_ops(pr, i);
			break;
		}
		if (nk == 1) // the hash has not changed since the lookup
			hconsume(&k->h, e);
		else
			for (int j = 0; j < nk; j++)
				hconsume(&k->h, hfind(&k->h, keys[j]));
		int64_t end = do_compute(s, r, i, o, start, bind);
		t = end;
		k->cbind = REF(r, i);
		progressed = 1;
		/* What it produces for the comm stream. */
		if (plan_op_is_compute(o->kind)) {
			const StageInfo *st = &s->st[o->stage];
			uint8_t makes = plan_ops[o->kind].makes;
			if ((makes & PLAN_DEP_ACT) && st->nrout &&
			    hput(s, &k->h, hkey(KEY_DATA, DIR_ACT, o->stage, o->mb), end, REF(r, i), st->nrout))
				return;
			if ((makes & PLAN_DEP_GRAD) && st->nrin &&
			    hput(s, &k->h, hkey(KEY_DATA, DIR_GRAD, o->stage, o->mb), end, REF(r, i), st->nrin))
				return;
			int ls = local_stage(s, r, o->stage);
			if ((makes & PLAN_DEP_WGRAD) && ls >= 0) {
				k->wdone[ls]++;
				if (end >= k->wlast[ls]) {
					k->wlast[ls] = end;
					k->wlast_who[ls] = REF(r, i);
				}
			}
		}
		i++;
	}
	k->cpc = i;
	k->ct = t;
	if (i == n)
		k->cstate = AG_DONE;
	if (progressed && k->state == AG_WAIT)
		push_agent(s, r, 0);
}

/* Whether the data of the group starting at op i is ready (its sends' tensors produced,
 * its all-reduce's last weight gradient done); the group's end in *end, the ready time
 * in *t.  One pass: groups are short but this runs once per group. */
static int group_ready(S *s, int r, int64_t i, int64_t *end, int64_t *t, int64_t *bind)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	int64_t x = i, e = plan_group_end(pr, i);
	for (; x < e; x++) {
		const PlanOp *o = &pr->ops[x];
		if (o->kind == OP_SEND) {
			HEnt *e = hfind(&k->h, send_key(s, o));
			if (!e)
				return 0;
			if (e->time > *t) {
				*t = e->time;
				*bind = e->who;
			}
		} else if (o->kind == OP_ALLREDUCE) {
			int ls = local_stage(s, r, o->stage);
			if (ls < 0)
				continue;
			if (k->wdone[ls] < s->p->microbatches)
				return 0;
			if (k->wlast[ls] > *t) {
				*t = k->wlast[ls];
				*bind = k->wlast_who[ls];
			}
		}
	}
	*end = x;
	return 1;
}

/* The comm stream's group [i, gend) completed at gmax: publish its receives. */
static int group_done(S *s, int r, int64_t i)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	int any = 0;
	for (int64_t x = i; x < k->gend; x++) {
		const PlanOp *o = &pr->ops[x];
		uint64_t key;
		if (o->kind == OP_RECV)
			key = hkey(KEY_RECV, o->dir, o->stage, o->mb);
		else if (o->kind == OP_ALLREDUCE)
			key = hkey(KEY_AR, 0, o->stage, 0);
		else
			continue;
		if (hput(s, &k->h, key, k->gmax, k->gmax_who, 1))
			return -1;
		any = 1;
	}
	k->done += k->gend - i;
	k->t = k->gmax;
	if (k->gmax_who != REF_NONE)
		k->bind = k->gmax_who;
	if (any && k->cstate == AG_WAIT)
		push_agent(s, r, 1);
	return 0;
}

static void run_comm(S *s, int r)
{
	const PlanRank *pr = &s->p->ranks[r];
	Rk *k = &s->rk[r];
	int64_t n = pr->nops;
	if (k->state == AG_MATCH) {
		if (group_done(s, r, k->pc))
			return;
		k->pc = k->gend;
	}
	k->state = AG_READY;
	int64_t i = k->pc;
	while (i < n) {
		if (!plan_op_is_comm(pr->ops[i].kind)) {
			i++;
			continue;
		}
		int64_t end, t = k->t, bind = k->bind;
		if (!group_ready(s, r, i, &end, &t, &bind)) {
			k->pc = i;
			k->state = AG_WAIT;
			prefetch_ops(pr, i);
			return;
		}
		int64_t saved = k->bind;
		k->bind = bind;
		post_group(s, r, i, end, t, 1);
		k->bind = saved;
		if (s->failed)
			return;
		k->pc = i;
		if (k->pending) {
			k->state = AG_MATCH;
			prefetch_ops(pr, k->gend);
			return;
		}
		if (group_done(s, r, i))
			return;
		i = k->gend;
	}
	k->pc = n;
	k->state = AG_DONE;
}

/* ---- setup ---- */

static int setup(S *s)
{
	const Plan *p = s->p;
	SimResult *res = s->res;
	int w = p->world;
	res->ranks = xcalloc(s, (size_t)w, sizeof *res->ranks);
	s->rk = xcalloc(s, (size_t)w, sizeof *s->rk);
	s->st = xcalloc(s, (size_t)p->nstages, sizeof *s->st);
	s->local_idx = xcalloc(s, (size_t)p->nstages, sizeof *s->local_idx);
	s->nlocal = xcalloc(s, (size_t)p->dims[DIM_PP], sizeof *s->nlocal);
	s->collof = xcalloc(s, (size_t)w, sizeof *s->collof);
	s->coll = xcalloc(s, (size_t)w, sizeof *s->coll);
	s->work = xcalloc(s, (size_t)w * 2, sizeof *s->work);
	if (s->failed)
		return -1;
	for (int i = 0; i < p->nstages; i++) {
		const PlanStage *ps = &p->stages[i];
		StageInfo *st = &s->st[i];
		for (int k = 0; k < OP_COUNT; k++)
			st->cost[k] = plan_op_cost((OpKind)k, ps->cost);
		st->dmem[OP_F] = sat_add(ps->save_fb, ps->save_fw);
		st->dmem[OP_B] = ps->save_bw - ps->save_fb;
		st->dmem[OP_W] = -sat_add(ps->save_fw, ps->save_bw);
		st->dmem[OP_BW] = -sat_add(ps->save_fb, ps->save_fw);
		if (ps->pp >= 0 && ps->pp < p->dims[DIM_PP])
			s->local_idx[i] = s->nlocal[ps->pp]++;
	}
	if (s->opt.model == SIM_OVERLAP) {
		for (int e = 0; e < p->nedges; e++) {
			const PlanEdge *ed = &p->edges[e];
			if (p->stages[ed->src].pp != p->stages[ed->dst].pp) {
				s->st[ed->src].nrout++;
				s->st[ed->dst].nrin++;
			}
		}
		for (int i = 0; i < p->nstages; i++) {
			s->st[i].rin = xcalloc(s, (size_t)s->st[i].nrin, sizeof(int));
			s->st[i].rout = xcalloc(s, (size_t)s->st[i].nrout, sizeof(int));
			s->st[i].nrin = s->st[i].nrout = 0;
		}
		if (s->failed)
			return -1;
		for (int e = 0; e < p->nedges; e++) {
			const PlanEdge *ed = &p->edges[e];
			if (p->stages[ed->src].pp != p->stages[ed->dst].pp) {
				StageInfo *a = &s->st[ed->src], *b = &s->st[ed->dst];
				a->rout[a->nrout++] = e;
				b->rin[b->nrin++] = e;
			}
		}
	}
	/* dp groups: one per rank whose dp coordinate is 0. */
	for (int r = 0; r < w; r++) {
		if (p->ranks[r].coord[DIM_DP] != 0)
			continue;
		Coll *c = &s->coll[s->ncoll];
		c->members = xcalloc(s, (size_t)p->dims[DIM_DP], sizeof *c->members);
		if (!c->members)
			return -1;
		c->n = plan_dim_members(p, r, DIM_DP, c->members);
		for (int j = 0; j < c->n; j++)
			s->collof[c->members[j]] = s->ncoll;
		s->ncoll++;
	}
	if (s->opt.record_ops) {
		s->pred = xcalloc(s, (size_t)w, sizeof *s->pred);
		if (!s->pred)
			return -1;
	}
	for (int r = 0; r < w; r++) {
		Rk *k = &s->rk[r];
		k->bind = k->cbind = REF_NONE;
		k->ar_op = -1;
		int64_t n = p->ranks[r].nops;
		if (s->opt.record_ops) {
			SimOpTime *t = malloc((size_t)(n ? n : 1) * sizeof *t);
			s->pred[r] = malloc((size_t)(n ? n : 1) * sizeof **s->pred);
			res->ranks[r].times = t;
			if (!t || !s->pred[r]) {
				s->oom = s->failed = 1;
				snprintf(res->message, sizeof res->message, "out of memory");
				return -1;
			}
			for (int64_t i = 0; i < n; i++) {
				t[i] = (SimOpTime){-1, -1};
				s->pred[r][i] = -1;
			}
		}
		if (s->opt.model == SIM_OVERLAP) {
			int pp = p->ranks[r].coord[DIM_PP];
			int nl = pp >= 0 && pp < p->dims[DIM_PP] ? s->nlocal[pp] : 0;
			k->wdone = xcalloc(s, (size_t)nl, sizeof *k->wdone);
			k->wlast = xcalloc(s, (size_t)nl, sizeof *k->wlast);
			k->wlast_who = xcalloc(s, (size_t)nl, sizeof *k->wlast_who);
			if (s->failed)
				return -1;
		}
	}
	s->xfer_bytes = -1;
	s->last_end = -1;
	s->last_ref = REF_NONE;
	return 0;
}

static void cleanup(S *s)
{
	if (s->rk) {
		for (int r = 0; r < s->world; r++) {
			free(s->rk[r].ch);
			free(s->rk[r].h.e);
			free(s->rk[r].wdone);
			free(s->rk[r].wlast);
			free(s->rk[r].wlast_who);
		}
	}
	free(s->rk);
	if (s->st) {
		for (int i = 0; i < s->p->nstages; i++) {
			free(s->st[i].rin);
			free(s->st[i].rout);
		}
	}
	free(s->st);
	free(s->local_idx);
	free(s->nlocal);
	for (int i = 0; i < s->nch; i++)
		free(s->ch[i].q);
	free(s->ch);
	free(s->pairkey);
	free(s->pairval);
	for (int i = 0; i < s->ncoll; i++)
		free(s->coll[i].members);
	free(s->coll);
	free(s->collof);
	free(s->work);
	if (s->pred)
		for (int r = 0; r < s->world; r++)
			free(s->pred[r]);
	free(s->pred);
}

/* ---- after the run: figures ---- */

static int cmp_link(const void *a, const void *b)
{
	const SimLink *x = a, *y = b;
	if (x->src != y->src)
		return x->src < y->src ? -1 : 1;
	return (x->dst > y->dst) - (x->dst < y->dst);
}

static void figures(S *s)
{
	const Plan *p = s->p;
	SimResult *res = s->res;
	int64_t mk = 0;
	for (int r = 0; r < s->world; r++) {
		Rk *k = &s->rk[r];
		int64_t fin = s->opt.model == SIM_OVERLAP ? max64(k->t, k->ct) : k->t;
		if (k->state == AG_MATCH)
			fin = max64(fin, k->gmax);
		SimRankResult *rr = &res->ranks[r];
		rr->finish = fin;
		rr->busy = k->busy;
		rr->ops_done = k->done;
		rr->peak_act_bytes = k->peak_mem;
		rr->peak_act_units = k->peak_units;
		mk = max64(mk, fin);
		res->busy = sat_add(res->busy, k->busy);
		res->ops_done += k->done;
	}
	res->makespan = mk;
	for (int r = 0; r < s->world; r++)
		res->ranks[r].idle = mk - res->ranks[r].busy;
	res->bubble = mk > 0 ? 1.0 - (double)res->busy / ((double)s->world * (double)mk) : 0;
	res->ops = plan_total_ops(p);

	int nl = 0;
	for (int i = 0; i < s->nch; i++)
		nl += s->ch[i].transfers > 0;
	res->links = calloc((size_t)(nl ? nl : 1), sizeof *res->links);
	if (res->links) {
		for (int i = 0; i < s->nch; i++)
			if (s->ch[i].transfers > 0)
				res->links[res->nlinks++] = (SimLink){s->ch[i].src, s->ch[i].dst,
				                                       s->ch[i].bytes, s->ch[i].transfers};
		qsort(res->links, (size_t)res->nlinks, sizeof *res->links, cmp_link);
	}
	int nc = 0;
	for (int i = 0; i < s->ncoll; i++)
		nc += s->coll[i].count > 0;
	res->collectives = calloc((size_t)(nc ? nc : 1), sizeof *res->collectives);
	if (res->collectives)
		for (int i = 0; i < s->ncoll; i++)
			if (s->coll[i].count > 0)
				res->collectives[res->ncollectives++] =
				    (SimCollective){s->coll[i].members[0], s->coll[i].n, s->coll[i].total,
				                    s->coll[i].count};
}

/* Walks the binding predecessors back from the op that finished last. */
static void critical_path(S *s)
{
	SimResult *res = s->res;
	int64_t best = s->last_end > -1 ? s->last_ref : REF_NONE;
	int64_t cap = 0, n = 0;
	SimPathStep *path = NULL;
	int64_t guard = res->ops + 1;
	for (int64_t x = best; x != REF_NONE && guard-- > 0;) {
		int r = REF_RANK(x);
		int64_t i = REF_OP(x);
		const SimOpTime *t = &res->ranks[r].times[i];
		const PlanOp *o = &s->p->ranks[r].ops[i];
		int64_t c = plan_op_is_compute(o->kind) ? s->st[o->stage].cost[o->kind] : 0;
		if (n && path[n - 1].rank == r) {
			SimPathStep *st = &path[n - 1];
			st->first_op = i;
			st->start = t->start;
			st->compute = sat_add(st->compute, c);
		} else {
			if (grow(s, (void **)&path, &cap, n + 1, sizeof *path)) {
				free(path);
				return;
			}
			path[n++] = (SimPathStep){r, i, i, t->start, t->end, c};
		}
		x = pred_ref(s, r, i);
	}
	for (int64_t a = 0, b = n - 1; a < b; a++, b--) {
		SimPathStep tmp = path[a];
		path[a] = path[b];
		path[b] = tmp;
	}
	/* A stretch entered through a comm op began when the previous one handed over,
	 * not when the op was posted. */
	for (int64_t i = 1; i < n; i++)
		if (path[i].start < path[i - 1].end)
			path[i].start = path[i - 1].end;
	res->path = path;
	res->npath = n;
}

/* ---- deadlock analysis ---- */

/* Index of the `skip`-th op on rank r at or after `from` matching the predicate. */
typedef int (*OpPred)(const PlanOp *o, const void *arg);

static int64_t find_op(const Plan *p, int r, int64_t from, int64_t skip, OpPred pred,
                       const void *arg)
{
	const PlanRank *pr = &p->ranks[r];
	for (int64_t i = from < 0 ? 0 : from; i < pr->nops; i++)
		if (pred(&pr->ops[i], arg) && skip-- == 0)
			return i;
	return -1;
}

typedef struct {
	int kind, peer;
	uint64_t key;
} Want;

static int want_p2p(const PlanOp *o, const void *arg)
{
	const Want *w = arg;
	return o->kind == w->kind && o->peer == w->peer;
}

static int want_kind(const PlanOp *o, const void *arg)
{
	return o->kind == ((const Want *)arg)->kind;
}

static int want_ar(const PlanOp *o, const void *arg)
{
	return o->kind == OP_ALLREDUCE && hkey(KEY_AR, 0, o->stage, 0) == ((const Want *)arg)->key;
}

static int want_recv_key(const PlanOp *o, const void *arg)
{
	const Want *w = arg;
	return o->kind == OP_RECV && hkey(KEY_RECV, o->dir, o->stage, o->mb) == w->key;
}

static int want_producer(const PlanOp *o, const void *arg)
{
	const Want *w = arg;
	uint8_t makes = plan_ops[o->kind].makes;
	if (makes & PLAN_DEP_ACT)
		return hkey(KEY_DATA, DIR_ACT, o->stage, o->mb) == w->key;
	if (makes & PLAN_DEP_GRAD)
		return hkey(KEY_DATA, DIR_GRAD, o->stage, o->mb) == w->key;
	return 0;
}

static int want_wgrad(const PlanOp *o, const void *arg)
{
	const Want *w = arg;
	return (plan_ops[o->kind].makes & PLAN_DEP_WGRAD) && (uint64_t)o->stage == w->key;
}

/* Whether op i of rank r (in its posted group) is still unmatched. */
static int unmatched(S *s, int r, int64_t i)
{
	const PlanOp *o = &s->p->ranks[r].ops[i];
	if (o->kind == OP_ALLREDUCE)
		return s->rk[r].ar_op == i;
	if (o->kind == OP_SEND && s->opt.eager)
		return 0;
	int recv = o->kind == OP_RECV;
	int src = recv ? o->peer : r, dst = recv ? r : o->peer;
	const Rk *k = &s->rk[r];
	for (int j = 0; j < k->nch; j++) {
		const Chan *c = &s->ch[k->ch[j].chan];
		if (c->src != src || c->dst != dst)
			continue;
		for (int64_t q = 0; q < c->n; q++)
			if (c->q[(c->head + q) % c->cap].op == i)
				return c->side == recv;
	}
	return 0;
}

/* Agents: rank * 2 + 0 (strict rank or comm stream), rank * 2 + 1 (compute stream). */
static int agent_blocked(S *s, int a)
{
	const Rk *k = &s->rk[a / 2];
	return (a & 1 ? k->cstate : k->state) != AG_DONE;
}

/* The op agent a is blocked at (the first unmatched op of a posted group). */
static int64_t agent_op(S *s, int a)
{
	int r = a / 2;
	Rk *k = &s->rk[r];
	if (a & 1)
		return k->cpc;
	if (k->state == AG_MATCH) {
		for (int64_t i = k->pc; i < k->gend; i++)
			if (unmatched(s, r, i))
				return i;
	}
	return k->pc;
}

/* Where agent a will post next: past its posted group. */
static int64_t agent_next_post(S *s, int a)
{
	Rk *k = &s->rk[a / 2];
	return k->state == AG_MATCH ? k->gend : k->pc;
}

/* The edges of agent a, in order; fills w for the idx-th.  0 when none left. */
static int agent_edge(S *s, int a, int idx, SimWait *w, int *to)
{
	int r = a / 2;
	Rk *k = &s->rk[r];
	const Plan *p = s->p;
	const PlanRank *pr = &p->ranks[r];
	uint8_t stream = s->opt.model == SIM_STRICT ? SIM_STREAM_RANK
	                 : (a & 1)                   ? SIM_STREAM_COMPUTE
	                                             : SIM_STREAM_COMM;
	uint8_t cstream = s->opt.model == SIM_STRICT ? SIM_STREAM_RANK : SIM_STREAM_COMM;
	int e = 0;
	if (a & 1) { // compute stream: the receives (or all-reduce) it consumes
		const PlanOp *o = &pr->ops[k->cpc];
		uint64_t keys[MAXKEYS];
		int nk = consumed_keys(s, o, keys, MAXKEYS);
		for (int j = 0; j < nk; j++) {
			if (hfind(&k->h, keys[j]))
				continue;
			if (e++ != idx)
				continue;
			Want wt = {.key = keys[j]};
			int64_t y = (keys[j] >> 62) == KEY_AR
			                ? find_op(p, r, k->pc, 0, want_ar, &wt)
			                : find_op(p, r, k->pc, 0, want_recv_key, &wt);
			*w = (SimWait){{r, k->cpc, stream}, {r, y, cstream}, {r, -1, cstream}};
			*to = r * 2;
			return 1;
		}
		return 0;
	}
	if (k->state == AG_WAIT) { // comm stream: the data of its sends
		int64_t end = plan_group_end(pr, k->pc);
		for (int64_t x = k->pc; x < end; x++) {
			const PlanOp *o = &pr->ops[x];
			Want wt = {0};
			int64_t y;
			if (o->kind == OP_SEND) {
				wt.key = send_key(s, o);
				if (hfind(&k->h, wt.key))
					continue;
				y = find_op(p, r, k->cpc, 0, want_producer, &wt);
			} else if (o->kind == OP_ALLREDUCE) {
				int ls = local_stage(s, r, o->stage);
				if (ls < 0 || k->wdone[ls] >= p->microbatches)
					continue;
				wt.key = (uint64_t)o->stage;
				y = find_op(p, r, k->cpc, 0, want_wgrad, &wt);
			} else {
				continue;
			}
			if (e++ != idx)
				continue;
			*w = (SimWait){{r, x, stream}, {r, y, SIM_STREAM_COMPUTE}, {r, -1, SIM_STREAM_COMPUTE}};
			*to = r * 2 + 1;
			return 1;
		}
		return 0;
	}
	/* Parked in a posted group: its unmatched ops wait for their partners. */
	for (int64_t x = k->pc; x < k->gend; x++) {
		if (!unmatched(s, r, x))
			continue;
		const PlanOp *o = &pr->ops[x];
		if (o->kind == OP_ALLREDUCE) {
			const Coll *c = &s->coll[s->collof[r]];
			for (int j = 0; j < c->n; j++) {
				int m = c->members[j];
				if (s->rk[m].ar_op >= 0)
					continue; // arrived
				if (e++ != idx)
					continue;
				Want wt = {.kind = OP_ALLREDUCE};
				int64_t y = find_op(p, m, agent_next_post(s, m * 2), 0, want_kind, &wt);
				*w = (SimWait){{r, x, stream}, {m, y, cstream}, {m, -1, cstream}};
				*to = m * 2;
				return 1;
			}
			continue;
		}
		if (e++ != idx)
			continue;
		int recv = o->kind == OP_RECV;
		int q = o->peer;
		/* Which unposted partner op: skip as many as are queued ahead of x. */
		int64_t ahead = 0;
		for (int j = 0; j < k->nch; j++) {
			const Chan *c = &s->ch[k->ch[j].chan];
			if (c->src != (recv ? q : r) || c->dst != (recv ? r : q))
				continue;
			for (int64_t z = 0; z < c->n && c->q[(c->head + z) % c->cap].op != x; z++)
				ahead++;
		}
		Want wt = {.kind = recv ? OP_SEND : OP_RECV, .peer = r};
		int64_t y = find_op(p, q, agent_next_post(s, q * 2), ahead, want_p2p, &wt);
		*w = (SimWait){{r, x, stream}, {q, y, cstream}, {q, -1, cstream}};
		*to = q * 2;
		return 1;
	}
	return 0;
}

static void analyse_stall(S *s)
{
	SimResult *res = s->res;
	const Plan *p = s->p;
	int nag = s->world * 2;
	int overlap = s->opt.model == SIM_OVERLAP;
	/* The stuck streams and their ops. */
	int nstuck = 0;
	for (int a = 0; a < nag; a++)
		if ((overlap || !(a & 1)) && agent_blocked(s, a))
			nstuck++;
	res->stuck = calloc((size_t)nstuck, sizeof *res->stuck);
	if (!res->stuck) {
		s->oom = 1;
		return;
	}
	for (int a = 0; a < nag; a++)
		if ((overlap || !(a & 1)) && agent_blocked(s, a))
			res->stuck[res->nstuck++] =
			    (SimOpRef){a / 2, agent_op(s, a),
			               !overlap ? SIM_STREAM_RANK : a & 1 ? SIM_STREAM_COMPUTE : SIM_STREAM_COMM};
	res->stall_time = 0;
	for (int r = 0; r < s->world; r++)
		res->stall_time = max64(res->stall_time, res->ranks[r].finish);

	/* Walk the wait-for graph from the first stuck stream, following the first edge
	 * that leads to another stuck stream, until a stream repeats. */
	int *seen = calloc((size_t)nag, sizeof *seen); // step + 1 at which visited
	SimWait *walk = calloc((size_t)nag + 1, sizeof *walk);
	if (!seen || !walk) {
		free(seen);
		free(walk);
		s->oom = 1;
		return;
	}
	int a = res->stuck[0].rank * 2 + (res->stuck[0].stream == SIM_STREAM_COMPUTE);
	int steps = 0;
	while (!seen[a]) {
		seen[a] = steps + 1;
		SimWait w, first;
		int to = -1, firstto = -1, found = 0;
		for (int idx = 0; agent_edge(s, a, idx, &w, &to); idx++) {
			if (firstto < 0) {
				first = w;
				firstto = to;
			}
			if (w.on.op >= 0 && agent_blocked(s, to)) {
				found = 1;
				break;
			}
		}
		if (!found) {
			/* What it waits for will never be posted: a pairing error verify missed. */
			res->verdict = SIM_MISMATCH;
			free(res->stuck);
			res->stuck = calloc(2, sizeof *res->stuck);
			if (res->stuck && firstto >= 0) {
				res->nstuck = 2;
				res->stuck[0] = first.from;
				res->stuck[1] = first.on;
				snprintf(res->message, sizeof res->message,
				         "rank %d waits for an op of rank %d that %s", first.from.rank,
				         first.on.rank,
				         first.on.op < 0 ? "does not exist"
				                         : "comes after the end of its list");
			} else {
				res->nstuck = 0;
				snprintf(res->message, sizeof res->message,
				         "rank %d is stuck waiting for nothing", a / 2);
			}
			free(seen);
			free(walk);
			return;
		}
		walk[steps++] = w;
		a = to;
	}
	int from = seen[a] - 1;
	res->ncycle = steps - from;
	res->cycle = calloc((size_t)res->ncycle, sizeof *res->cycle);
	if (!res->cycle) {
		s->oom = 1;
		res->ncycle = 0;
	} else {
		for (int j = 0; j < res->ncycle; j++) {
			res->cycle[j] = walk[from + j];
			res->cycle[j].behind = walk[from + (j + 1) % res->ncycle].from;
		}
	}
	free(seen);
	free(walk);
	int stuck_ranks = 0;
	for (int r = 0; r < s->world; r++)
		stuck_ranks += s->rk[r].state != AG_DONE || (overlap && s->rk[r].cstate != AG_DONE);
	snprintf(res->message, sizeof res->message,
	         "deadlock: %d of %d ranks can never finish (%s model, %s sends)", stuck_ranks,
	         p->world, sim_model_names[s->opt.model], s->opt.eager ? "eager" : "rendezvous");
}

/* After every rank finished: eager sends nobody received are still queued. */
static void leftover_sends(S *s)
{
	for (int i = 0; i < s->nch; i++) {
		Chan *c = &s->ch[i];
		if (!c->n)
			continue;
		QEnt e = c->q[c->head];
		if (c->side == 0)
			mismatch(s, c->src, e.op, c->dst, -1,
			         "a send has no matching receive (it completed only because sends are eager)");
		else
			mismatch(s, c->dst, e.op, c->src, -1, "a receive has no matching send");
		return;
	}
}

/* ---- entry points ---- */

int sim_run(const Plan *p, const SimOptions *opt, SimResult *res)
{
	memset(res, 0, sizeof *res);
	S s = {.p = p, .res = res, .world = p->world};
	if (opt)
		s.opt = *opt;
	if (s.opt.model < 0 || s.opt.model >= SIM_MODEL_COUNT)
		s.opt.model = SIM_STRICT;
	res->model = s.opt.model;
	res->eager = s.opt.eager;
	res->world = p->world;
	if (setup(&s)) {
		cleanup(&s);
		return -1;
	}
	int overlap = s.opt.model == SIM_OVERLAP;
	for (int r = p->world - 1; r >= 0; r--) {
		if (overlap)
			push_agent(&s, r, 1);
		push_agent(&s, r, 0);
	}
	while (s.nwork && !s.failed) {
		int a = s.work[--s.nwork];
		int r = a / 2;
		s.rk[r].queued[a & 1] = 0;
		if (!overlap)
			run_strict(&s, r);
		else if (a & 1)
			run_compute(&s, r);
		else
			run_comm(&s, r);
	}
	if (s.oom) {
		cleanup(&s);
		return -1;
	}
	figures(&s);
	if (!s.failed) {
		int stuck = 0;
		for (int r = 0; r < p->world && !stuck; r++)
			stuck = s.rk[r].state != AG_DONE || (overlap && s.rk[r].cstate != AG_DONE);
		if (stuck) {
			res->verdict = SIM_DEADLOCK;
			analyse_stall(&s);
		} else {
			leftover_sends(&s);
		}
	}
	if (s.opt.record_ops && !s.oom)
		critical_path(&s);
	int oom = s.oom;
	cleanup(&s);
	if (oom) {
		snprintf(res->message, sizeof res->message, "out of memory");
		return -1;
	}
	return res->verdict == SIM_OK ? 0 : 1;
}

void sim_result_free(SimResult *res)
{
	if (!res)
		return;
	if (res->ranks)
		for (int r = 0; r < res->world; r++)
			free(res->ranks[r].times);
	free(res->ranks);
	free(res->links);
	free(res->collectives);
	free(res->path);
	free(res->stuck);
	free(res->cycle);
	memset(res, 0, sizeof *res);
}
