/* The verifier on plans broken by hand: each fault named with the op, and the FIFO
 * matching's exact messages (one walk per rank, plan/verify_ops.c).  Then the thread
 * layer (plan/par.h) and the passes on it that are not the readers' or writers'. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/mem.h"
#include "../plan/par.h"
#include "../plan/line.h"

#include "lower_lib.h"
#include "plan_lib.h"

static void verify__broken_plans__named(void **state)
{
	(void)state;
	const char *src = program(2, 2, 1, 3, "");
	/* Two receives swapped: FIFO pairs the wrong microbatches, both ops named. */
	Plan *p = compile_text(src, "gpipe", NULL, 0);
	int64_t a = find_op(p, 1, OP_RECV, 0), b = find_op(p, 1, OP_RECV, 1);
	int t = p->ranks[1].ops[a].mb;
	p->ranks[1].ops[a].mb = p->ranks[1].ops[b].mb;
	p->ranks[1].ops[b].mb = t;
	expect_verify_error(p, "microbatches differ", "rank 0 op");
	plan_free(p);
	/* A receive of another direction (a receive of another size cannot be said: a SEND's
	 * or RECV's is its edge's, and the readers refuse any other). */
	p = compile_text(src, "gpipe", NULL, 0);
	p->ranks[1].ops[find_op(p, 1, OP_RECV, 0)].dir = DIR_GRAD;
	expect_verify_error(p, "RECV grad", "rank 0 op");
	plan_free(p);
	/* A missing send. */
	p = compile_text(src, "gpipe", NULL, 0);
	int64_t s = find_op(p, 0, OP_SEND, 2);
	memmove(&p->ranks[0].ops[s], &p->ranks[0].ops[s + 1],
	        (size_t)(p->ranks[0].nops - s - 1) * sizeof(PlanOp));
	p->ranks[0].nops--;
	expect_verify_error(p, "no matching SEND", "RECV");
	plan_free(p);
	/* Compute before its input: move rank 1's first F ahead of its receive. */
	p = compile_text(src, "gpipe", NULL, 0);
	int64_t f = find_op(p, 1, OP_F, 0), r = find_op(p, 1, OP_RECV, 0);
	assert_true(r < f);
	PlanOp tmp = p->ranks[1].ops[r];
	p->ranks[1].ops[r] = p->ranks[1].ops[f];
	p->ranks[1].ops[f] = tmp;
	expect_verify_error(p, "runs before its input", "F 1 0");
	plan_free(p);
	/* A missing peer registration. */
	p = compile_text(src, "gpipe", NULL, 0);
	p->ranks[1].npeers = 0;
	expect_verify_error(p, "no peer registered", NULL);
	plan_free(p);
	/* A backward route that is not the inverse. */
	p = compile_text(src, "gpipe", NULL, 0);
	p->routes[1].dst_dev += 1;
	expect_verify_error(p, "route", NULL);
	plan_free(p);
	/* W before B. */
	p = compile_text(program(2, 2, 1, 1, ""), "gpipe", NULL, 0);
	int64_t bw = find_op(p, 0, OP_BW, 0);
	p->ranks[0].ops[bw].kind = OP_W;
	expect_verify_error(p, "W before its B", NULL);
	plan_free(p);
	/* A reduction before the last backward. */
	p = compile_text(program(2, 2, 2, 2, ""), "gpipe", NULL, 0);
	int64_t ar = find_op(p, 0, OP_ALLREDUCE, 0), lb = find_op(p, 0, OP_BW, 1);
	PlanOp x = p->ranks[0].ops[ar];
	memmove(&p->ranks[0].ops[lb + 1], &p->ranks[0].ops[lb], (size_t)(ar - lb) * sizeof x);
	p->ranks[0].ops[lb] = x;
	expect_verify_error(p, "reduction before", NULL);
	plan_free(p);
}

/* ---- the matching's exact messages ---- */

/* "rank R op I `TEXT`": how the verifier names op i of rank r of a plan not read from
 * a file (no line numbers). */
static const char *op_named(const Plan *p, int r, int64_t i, char *buf, size_t n)
{
	char text[200];
	plan_format_op(p, &p->ranks[r].ops[i], text, sizeof text);
	snprintf(buf, n, "rank %d op %lld `%s`", r, (long long)i, text);
	return buf;
}

/* p fails verification with exactly the message want, at op i of rank r. */
static void expect_exact(const Plan *p, int r, int64_t i, const char *want)
{
	PlanError err;
	assert_int_equal(plan_verify(p, &err), -1);
	assert_string_equal(err.msg, want);
	assert_int_equal(err.rank, r);
	assert_int_equal(err.op, i);
}

/* Rank r's nth op of kind SEND or RECV whose peer is q; -1 when there is none. */
static int64_t find_p2p(const Plan *p, int r, int kind, int q, int nth)
{
	for (int64_t i = 0; i < p->ranks[r].nops; i++) {
		const PlanOp *o = &p->ranks[r].ops[i];
		if (o->kind == kind && o->peer == q && nth-- == 0)
			return i;
	}
	return -1;
}

static void drop_op(Plan *p, int r, int64_t i)
{
	PlanRank *rk = &p->ranks[r];
	assert_true(i >= 0 && i < rk->nops);
	memmove(&rk->ops[i], &rk->ops[i + 1], (size_t)(rk->nops - i - 1) * sizeof *rk->ops);
	rk->nops--;
}

/* The microbatches of rank r's RECVs number j and k from q swapped: FIFO then pairs
 * the j-th with the wrong SEND. */
static void swap_recv_mbs(Plan *p, int r, int q, int j, int k)
{
	PlanOp *a = &p->ranks[r].ops[find_p2p(p, r, OP_RECV, q, j)];
	PlanOp *b = &p->ranks[r].ops[find_p2p(p, r, OP_RECV, q, k)];
	assert_int_not_equal(a->mb, b->mb);
	int t = a->mb;
	a->mb = b->mb;
	b->mb = t;
}

/* "rank A op J `SEND...` is matched (FIFO position K from rank A to rank B) with rank B
 * op I `RECV...`: the microbatches differ", for the k-th message from a to b. */
static void expect_fifo_mismatch(const Plan *p, int a, int b, int k)
{
	int64_t j = find_p2p(p, a, OP_SEND, b, k), i = find_p2p(p, b, OP_RECV, a, k);
	char x[300], y[300], want[700];
	snprintf(want, sizeof want, "%s is matched (FIFO position %d from rank %d to rank %d) "
	         "with %s: the microbatches differ", op_named(p, a, j, x, sizeof x), k, a, b,
	         op_named(p, b, i, y, sizeof y));
	expect_exact(p, b, i, want);
}

/* "rank B op I `RECV...` has no matching SEND: rank A sends only N message(s) to rank B"
 * for b's k-th RECV from a. */
static void expect_no_send(const Plan *p, int a, int b, int k, const char *n)
{
	int64_t i = find_p2p(p, b, OP_RECV, a, k);
	char x[300], want[700];
	snprintf(want, sizeof want, "%s has no matching SEND: rank %d sends only %s to rank %d",
	         op_named(p, b, i, x, sizeof x), a, n, b);
	expect_exact(p, b, i, want);
}

/* "rank A op J `SEND...` has no matching RECV on rank B" for a's k-th SEND to b. */
static void expect_no_recv(const Plan *p, int a, int b, int k)
{
	int64_t j = find_p2p(p, a, OP_SEND, b, k);
	char x[300], want[700];
	snprintf(want, sizeof want, "%s has no matching RECV on rank %d",
	         op_named(p, a, j, x, sizeof x), b);
	expect_exact(p, a, j, want);
}

/* Both pairs of two ranks broken (activations 0 -> 1, gradients 1 -> 0): the RECV
 * first in rank order is named, then, that one fixed, the other. */
static void verify__fifo_mismatch__two_pairs_of_two_ranks(void **state)
{
	(void)state;
	Plan *p = compile_text(program(2, 2, 1, 3, ""), "gpipe", NULL, 0);
	assert_non_null(p);
	swap_recv_mbs(p, 1, 0, 1, 2);
	swap_recv_mbs(p, 0, 1, 0, 2);
	expect_fifo_mismatch(p, 1, 0, 0);
	swap_recv_mbs(p, 0, 1, 0, 2);
	expect_fifo_mismatch(p, 0, 1, 1);
	swap_recv_mbs(p, 1, 0, 1, 2);
	PlanError err;
	assert_int_equal(plan_verify(p, &err), 0);
	plan_free(p);
}

/* A RECV whose SEND is gone, with the sender's count; a SEND whose RECV is gone (the
 * matching is reported before what the missing RECV does to the dependencies).  The
 * last message of a pair goes missing: a missing first one would shift the pairing. */
static void verify__unmatched__recv_and_send_named(void **state)
{
	(void)state;
	Plan *p = compile_text(program(2, 2, 1, 3, ""), "gpipe", NULL, 0);
	assert_non_null(p);
	drop_op(p, 0, find_p2p(p, 0, OP_SEND, 1, 2));
	expect_no_send(p, 0, 1, 2, "2 messages");
	drop_op(p, 0, find_p2p(p, 0, OP_SEND, 1, 1));
	expect_no_send(p, 0, 1, 1, "1 message");
	drop_op(p, 0, find_p2p(p, 0, OP_SEND, 1, 0));
	expect_no_send(p, 0, 1, 0, "0 messages");
	plan_free(p);
	p = compile_text(program(2, 2, 1, 3, ""), "gpipe", NULL, 0);
	drop_op(p, 1, find_p2p(p, 1, OP_RECV, 0, 2));
	expect_no_recv(p, 0, 1, 2);
	drop_op(p, 0, find_p2p(p, 0, OP_RECV, 1, 2));
	expect_no_recv(p, 0, 1, 2); // rank 0's SEND left over is named before rank 1's
	plan_free(p);
}

/* A line plan (pp=2 dp=2: its ranks[] are line 0, world ranks 0 and 2) holds pipeline
 * indices in memory; the verifier names ranks and peers as the file writes them, world
 * ranks, so a message's text matches the line it points at. */
static void verify__line_plan__world_ranks_named(void **state)
{
	(void)state;
	want_line = 1;
	Plan *p = compile_text(program(2, 2, 2, 3, ""), "gpipe", NULL, 0);
	want_line = 0;
	assert_non_null(p);
	assert_true(p->line);
	assert_int_equal(plan_world_rank(p, 1), 2);
	swap_recv_mbs(p, 1, 0, 1, 2);
	PlanError err;
	assert_int_equal(plan_verify(p, &err), -1);
	if (!strstr(err.msg, "rank 2 op") || !strstr(err.msg, "from=0") ||
	    !strstr(err.msg, "rank 0 op") || !strstr(err.msg, "to=2") || strstr(err.msg, "rank 1") ||
	    strstr(err.msg, "to=1"))
		fail_msg("not the file's ranks: %s", err.msg);
	swap_recv_mbs(p, 1, 0, 1, 2);
	assert_int_equal(plan_verify(p, &err), 0);
	drop_op(p, 0, find_p2p(p, 0, OP_SEND, 1, 2));
	assert_int_equal(plan_verify(p, &err), -1);
	if (!strstr(err.msg, "no matching SEND: rank 0 sends only 2 messages to rank 2") ||
	    !strstr(err.msg, "rank 2 op"))
		fail_msg("not the file's ranks: %s", err.msg);
	plan_free(p);
}

/* Rank 0 sends to seven ranks (skips from s0 to every later stage): its first receivers
 * scan its list, the later ones take its sends indexed by receiver; both meet the same
 * messages. */
static void verify__many_peers__each_pair_matched(void **state)
{
	(void)state;
	const char *src = program(8, 8, 1, 4,
	                          "skip s0 -> s2; skip s0 -> s3; skip s0 -> s4; skip s0 -> s5; "
	                          "skip s0 -> s6; skip s0 -> s7; skip s1 -> s7;");
	const char *scheds[] = {"gpipe", "1f1b"};
	for (int si = 0; si < 2; si++) {
		Plan *p = compile_text(src, scheds[si], NULL, 0);
		assert_non_null(p);
		PlanError err;
		assert_int_equal(plan_verify(p, &err), 0);
		for (int q = 1; q < 8; q++) // a pair per receiver, 4 messages each
			assert_true(find_p2p(p, 0, OP_SEND, q, 3) >= 0 && find_p2p(p, 0, OP_SEND, q, 4) < 0);
		swap_recv_mbs(p, 7, 0, 1, 3);
		expect_fifo_mismatch(p, 0, 7, 1);
		swap_recv_mbs(p, 2, 0, 0, 2);
		expect_fifo_mismatch(p, 0, 2, 0);
		plan_free(p);

		p = compile_text(src, scheds[si], NULL, 0);
		drop_op(p, 0, find_p2p(p, 0, OP_SEND, 6, 3));
		expect_no_send(p, 0, 6, 3, "3 messages");
		plan_free(p);
		p = compile_text(src, scheds[si], NULL, 0);
		drop_op(p, 5, find_p2p(p, 5, OP_RECV, 0, 3));
		expect_no_recv(p, 0, 5, 3);
		drop_op(p, 3, find_p2p(p, 3, OP_RECV, 0, 3));
		expect_no_recv(p, 0, 3, 3); // rank 0 sends to 3 before it sends to 5
		plan_free(p);
	}
}

/* par_for: every item once, on a worker in range, whatever the thread count. */
typedef struct {
	int *seen;
	int workers;
	int bad_worker;
} ParCount;

static int count_item(void *arg, int64_t i, int w)
{
	ParCount *c = arg;
	__atomic_fetch_add(&c->seen[i], 1, __ATOMIC_RELAXED);
	if (w < 0 || w >= c->workers)
		__atomic_store_n(&c->bad_worker, 1, __ATOMIC_RELAXED);
	return 0;
}

static int stop_at_5(void *arg, int64_t i, int w)
{
	(void)arg, (void)w;
	return i == 5 ? 7 : 0;
}

static void par__every_item_once__and_a_stop_is_returned(void **state)
{
	(void)state;
	const int threads[] = {1, 2, 3, 8};
	const int64_t sizes[] = {0, 1, 2, 7, 1000};
	for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
		plan_threads = threads[t];
		for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
			int64_t n = sizes[k];
			ParCount c = {calloc((size_t)n + 1, sizeof(int)), par_workers(n), 0};
			assert_int_equal(c.workers, n < 1 ? 1 : n < threads[t] ? n : threads[t]);
			assert_int_equal(par_for(n, count_item, &c), 0);
			for (int64_t i = 0; i < n; i++)
				assert_int_equal(c.seen[i], 1);
			assert_int_equal(c.bad_worker, 0);
			free(c.seen);
		}
		assert_int_equal(par_for(100, stop_at_5, NULL), 7);
	}
	plan_threads = 1;
}

/* par_hold: threads busy elsewhere are not handed items; at least one worker stays. */
static void par__hold__fewer_workers_at_least_one(void **state)
{
	(void)state;
	plan_threads = 4;
	assert_int_equal(par_workers(100), 4);
	par_hold(1);
	assert_int_equal(par_workers(100), 3);
	assert_int_equal(par_workers(2), 2);
	par_hold(5);
	assert_int_equal(par_workers(100), 1);
	par_hold(-6);
	assert_int_equal(par_workers(100), 4);
	plan_threads = 1;
}

/* plan_mem_ranks, on 1 and 3 threads, gives every rank what plan_mem_rank gives it. */
static void mem_ranks_same(const char *path)
{
	Plan *p = compile_example(path);
	PlanMem *want = calloc((size_t)p->world, sizeof *want);
	PlanMem *got = calloc((size_t)p->world, sizeof *got);
	for (int r = 0; r < p->world; r++)
		assert_int_equal(plan_mem_rank(p, r, &want[r]), 0);
	const int threads[] = {1, 3};
	for (int t = 0; t < 2; t++) {
		plan_threads = threads[t];
		memset(got, 0xff, (size_t)p->world * sizeof *got);
		assert_int_equal(plan_mem_ranks(p, got), 0);
		for (int r = 0; r < p->world; r++) {
			assert_true(want[r].peak > 0);
			assert_memory_equal(&got[r], &want[r], sizeof *got);
		}
	}
	plan_threads = 1;
	free(want);
	free(got);
	plan_free(p);
}

static void mem__ranks_on_threads__each_rank_as_alone(void **state)
{
	(void)state;
	assert_true(each_file("examples", ".pipe", mem_ranks_same) >= 10);
}

/* par_prefault pages arrays in beside a writer and changes no byte of them. */
static void par__prefault__changes_nothing(void **state)
{
	(void)state;
	enum { N = 5, BYTES = 3 << 20 };
	void *arr[N];
	size_t bytes[N];
	for (int i = 0; i < N; i++) {
		arr[i] = malloc(BYTES + i * 4099);
		assert_non_null(arr[i]);
		bytes[i] = BYTES + i * 4099;
		memset(arr[i], 0x5a + i, bytes[i] / 2); // written before, the rest during
	}
	plan_threads = 2;
	ParTask *t = par_prefault(arr, bytes, N);
#ifdef MADV_POPULATE_WRITE
	assert_non_null(t); // started (it stops at once where the kernel cannot)
#endif
	for (int i = 0; i < N; i++)
		memset((char *)arr[i] + bytes[i] / 2, 0xa5 - i, bytes[i] - bytes[i] / 2);
	par_join(t);
	for (int i = 0; i < N; i++) {
		const unsigned char *c = arr[i];
		for (size_t k = 0; k < bytes[i]; k++)
			if (c[k] != (k < bytes[i] / 2 ? 0x5a + i : 0xa5 - i))
				fail_msg("array %d byte %zu changed", i, k);
		free(arr[i]);
	}
	plan_threads = 1;
	assert_null(par_prefault(arr, bytes, 0)); // one thread: no task
}

/* par_prefault called from a par_spawn task (as pipesim's simulation beside the
 * verifier calls it): a task of its own only with a thread left over, the caller's and
 * the running task's being two of plan_threads; else the work waits for par_help, and
 * par_join drops it when no thread helped.  Seen from outside: whether the pages of a
 * fresh mapping that nothing writes become resident (mincore). */
enum { INSIDE_PAGES = 64 };

typedef struct {
	int help;                // 1: the caller par_helps between ready and helped
	int started, resident;   // par_prefault returned a task; pages resident at par_join
	int ready, helped;       // the handshake, __atomic
} Inside;

static int resident_pages(void *a, size_t bytes)
{
	unsigned char v[INSIDE_PAGES];
	if (mincore(a, bytes, v))
		return -1;
	int n = 0;
	for (size_t i = 0; i < bytes / (size_t)sysconf(_SC_PAGESIZE); i++)
		n += v[i] & 1;
	return n;
}

static void prefault_inside(void *arg)
{
	Inside *in = arg;
	size_t bytes = INSIDE_PAGES * (size_t)sysconf(_SC_PAGESIZE);
	void *a = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a == MAP_FAILED)
		return;
	void *arr[1] = {a};
	size_t sz[1] = {bytes};
	ParTask *t = par_prefault(arr, sz, 1);
	in->started = t != NULL;
	__atomic_store_n(&in->ready, 1, __ATOMIC_RELEASE);
	while (in->help && !__atomic_load_n(&in->helped, __ATOMIC_ACQUIRE))
		sched_yield();
	if (plan_threads > 2) // a thread of its own pages them in, in its own time
		for (int k = 0; k < 100000 && resident_pages(a, bytes) < INSIDE_PAGES; k++)
			usleep(100);
	in->resident = resident_pages(a, bytes);
	par_join(t);
	munmap(a, bytes);
}

static void par__prefault__only_with_a_thread_to_spare(void **state)
{
	(void)state;
	for (int threads = 2; threads <= 3; threads++)
		for (int help = 0; help <= 1; help++) {
			plan_threads = threads;
			Inside in = {.help = help, .started = -1, .resident = -1};
			ParTask *t = par_spawn(prefault_inside, &in);
			assert_non_null(t);
			while (!__atomic_load_n(&in.ready, __ATOMIC_ACQUIRE))
				sched_yield();
			if (help)
				par_help();
			__atomic_store_n(&in.helped, 1, __ATOMIC_RELEASE);
			par_join(t);
			par_help(); // nothing is left waiting: par_join dropped what no one took
#ifdef MADV_POPULATE_WRITE
			assert_int_equal(in.started, 1);
			/* Deferred and not helped: never run, nothing touched the pages. */
			assert_int_equal(in.resident, threads == 2 && !help ? 0 : INSIDE_PAGES);
#else
			assert_int_equal(in.started, 0);
#endif
		}
	plan_threads = 1;
}

/* par_free frees every block (the sanitizer build checks: no leak, no bad free),
 * NULL ones skipped, on one thread or on two (pages handed back in slices first), and
 * touches no byte outside them: small allocations made around them keep theirs. */
static void par__free__blocks_freed_and_nothing_else_touched(void **state)
{
	(void)state;
	enum { N = 4, SMALL = 5000 };
	const size_t sizes[N] = {(size_t)40 << 20, 0, ((size_t)17 << 20) + 5, 100};
	mallopt(M_MMAP_THRESHOLD, 64 << 20); // on the heap, side by side with the small ones
	for (int threads = 1; threads <= 2; threads++) {
		plan_threads = threads;
		unsigned char *before = malloc(SMALL), *after;
		void *raw[N];
		for (int i = 0; i < N; i++) {
			raw[i] = sizes[i] ? malloc(sizes[i]) : NULL;
			assert_true(!sizes[i] || raw[i]);
			if (raw[i])
				memset(raw[i], 0x77, sizes[i]);
		}
		after = malloc(SMALL);
		assert_non_null(before);
		assert_non_null(after);
		memset(before, 0x5a, SMALL);
		memset(after, 0xa5, SMALL);
		par_free(raw, N);
		for (int k = 0; k < SMALL; k++)
			if (before[k] != 0x5a || after[k] != 0xa5)
				fail_msg("byte %d of a neighbour changed (%d threads)", k, threads);
		free(before);
		free(after);
	}
	plan_threads = 1;
}

/* --threads 0: one worker per online CPU, within bounds; any other count stays. */
static void par__threads_0__one_per_cpu(void **state)
{
	(void)state;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	plan_threads = 0;
	par_threads_auto();
	assert_int_equal(plan_threads, cpus < 1 ? 1 : cpus > PAR_MAX_THREADS ? PAR_MAX_THREADS : cpus);
	plan_threads = 5;
	par_threads_auto();
	assert_int_equal(plan_threads, 5);
	plan_threads = 1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(verify__broken_plans__named),
		cmocka_unit_test(verify__line_plan__world_ranks_named),
		cmocka_unit_test(verify__fifo_mismatch__two_pairs_of_two_ranks),
		cmocka_unit_test(verify__unmatched__recv_and_send_named),
		cmocka_unit_test(verify__many_peers__each_pair_matched),
		cmocka_unit_test(par__every_item_once__and_a_stop_is_returned),
		cmocka_unit_test(par__prefault__changes_nothing),
		cmocka_unit_test(par__prefault__only_with_a_thread_to_spare),
		cmocka_unit_test(par__free__blocks_freed_and_nothing_else_touched),
		cmocka_unit_test(par__hold__fewer_workers_at_least_one),
		cmocka_unit_test(mem__ranks_on_threads__each_rank_as_alone),
		cmocka_unit_test(par__threads_0__one_per_cpu),
	};
	/* Then the same with the verifier's walk on 3 workers (--threads 3): the same
	 * faults, named the same. */
	return cmocka_run_group_tests(tests, NULL, NULL) |
	       cmocka_run_group_tests_name("verify, 3 threads", tests, threads_3, threads_1);
}
