/* Plan file checksum tests (plan/checksum.c, docs/plan-format.md "Checksum"): every
 * kind gives one sum however the text is split; lanes4 catches every single-byte change,
 * and blocks, which pipecc writes (lanes4 of each 1 MiB block, chained), is its blocks'
 * sums put together, whatever the pieces, and catches changes at and across the blocks'
 * edges; plans written with the older sums (FNV-1a, lanes4) still read, and write back
 * as blocks plans with the same text after the header; every digit changed in a plan of
 * any kind is refused with a located error. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/binary.h"
#include "../plan/par_out.h"
#include "../plan/plan.h"
#include "../plan/io.h"
#include "../plan/checksum.h"
#include "../plan/block.h"
#include "../plan/thp.h"
#include "../plan/sizes.h"
#include "../plan/op_line.h"
#include "plan_lib.h"

#define FNV_PLAN "tests/plans/good/tiny-fnv1a.plan" // written by pipecc before lanes4

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long end = ftell(f);
	assert_true(end > 0);
	rewind(f);
	char *b = malloc((size_t)end + 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, (size_t)end, f), (size_t)end);
	fclose(f);
	b[end] = 0;
	*n = (size_t)end;
	return b;
}

static Plan *read_text(const char *text, size_t n, PlanError *err)
{
	FILE *in = fmemopen((void *)text, n, "r");
	assert_non_null(in);
	Plan *p = plan_read(in, "mem", err);
	fclose(in);
	return p;
}

/* Text that must read and verify (read_good, plan_lib.h, reads a file): the plan, or
 * the test fails with the located error. */
static Plan *read_good_text(const char *text, size_t n)
{
	PlanError err;
	Plan *p = read_text(text, n, &err);
	if (!p)
		fail_msg("line %lld: %s", (long long)err.line, err.msg);
	if (plan_verify(p, &err))
		fail_msg("does not verify: line %lld: %s", (long long)err.line, err.msg);
	return p;
}

/* Pieces of 1 to 70 bytes give the one-piece sum, for every kind; FNV-1a is the plain
 * byte-wise function.  The documented test vectors (docs/plan-format.md) hold. */
static void checksum__any_split__same_sum(void **state)
{
	(void)state;
	size_t n;
	char *text = slurp(FNV_PLAN, &n);
	for (int k = 0; k < PLAN_SUM_COUNT; k++) {
		uint64_t whole = plan_hash(k, text, n);
		for (size_t step = 1; step <= 70; step++) {
			PlanHash h;
			plan_hash_init(&h, k);
			for (size_t i = 0; i < n; i += step)
				plan_hash_update(&h, text + i, i + step <= n ? step : n - i);
			assert_true(plan_hash_final(&h) == whole);
		}
	}
	assert_true(plan_hash(PLAN_SUM_FNV1A, text, n) == plan_fnv1a(PLAN_FNV_OFFSET, text, n));
	const char *fox = "The quick brown fox jumps over the lazy dog";
	assert_true(plan_hash(PLAN_SUM_LANES4, "", 0) == 0x5e2d83b6c3f3989bULL);
	assert_true(plan_hash(PLAN_SUM_LANES4, fox, strlen(fox)) == 0x85a69049acf294fcULL);
	assert_true(plan_hash(PLAN_SUM_BLOCKS, "", 0) == 0xb30fd255da56d465ULL);
	assert_true(plan_hash(PLAN_SUM_BLOCKS, fox, strlen(fox)) == 0x564dcc89f05d93cfULL);
	free(text);
}

/* A text of 3 blocks and a bit: fed in pieces of sizes that cut the blocks anywhere (a
 * byte before, at and after each edge), the blocks sum is the blocks' lanes4 sums put
 * together (what a reader on threads computes); a byte changed on either side of each
 * edge, two blocks swapped, and the text cut at an edge each change it. */
static void checksum__blocks__blocks_apart_and_edges(void **state)
{
	(void)state;
	const size_t B = PLAN_SUM_BLOCK, n = 3 * B + 100;
	unsigned char *t = malloc(n);
	assert_non_null(t);
	for (size_t i = 0; i < n; i++)
		t[i] = (unsigned char)(i * 7 + i / 253);
	uint64_t whole = plan_hash(PLAN_SUM_BLOCKS, t, n), sums[4];
	for (size_t j = 0; j < 4; j++)
		sums[j] = plan_hash(PLAN_SUM_LANES4, t + j * B, j < 3 ? B : 100);
	assert_true(plan_hash_blocks(sums, 4, n) == whole);
	assert_true(plan_hash(PLAN_SUM_BLOCKS, t, 2 * B + 1000) == 0x57967027885f174aULL);
	const size_t steps[] = {1, 31, 4096, B - 1, B, B + 1, 777777, n};
	for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
		PlanHash h;
		plan_hash_init(&h, PLAN_SUM_BLOCKS);
		for (size_t i = 0; i < n; i += steps[k])
			plan_hash_update(&h, t + i, i + steps[k] <= n ? steps[k] : n - i);
		assert_true(plan_hash_final(&h) == whole);
	}
	const size_t at[] = {0, B - 1, B, B + 1, 2 * B - 8, 2 * B, 3 * B - 1, 3 * B, n - 1};
	for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
		t[at[k]] ^= 0x20;
		assert_true(plan_hash(PLAN_SUM_BLOCKS, t, n) != whole);
		t[at[k]] ^= 0x20;
	}
	uint64_t swapped[4] = {sums[1], sums[0], sums[2], sums[3]};
	assert_true(plan_hash_blocks(swapped, 4, n) != whole);
	assert_true(plan_hash(PLAN_SUM_BLOCKS, t, 3 * B) != plan_hash_blocks(sums, 3, 3 * B + 1));
	assert_true(plan_hash(PLAN_SUM_BLOCKS, t, 3 * B) == plan_hash_blocks(sums, 3, 3 * B));
	assert_true(plan_hash(PLAN_SUM_BLOCKS, t, 3 * B) != plan_hash(PLAN_SUM_BLOCKS, t, 3 * B + 1));
	free(t);
}

/* Every byte of a plan changed to each of a few other values changes the lanes4 sum,
 * and so does a byte dropped at the end (the length is in the sum). */
static void checksum__lanes4__every_byte_change_caught(void **state)
{
	(void)state;
	size_t n;
	char *text = slurp(FNV_PLAN, &n);
	uint64_t want = plan_hash(PLAN_SUM_LANES4, text, n);
	int tried = 0;
	for (size_t i = 0; i < n; i++) {
		char was = text[i];
		const unsigned char by[] = {1, 0x20, 0x80, 0xff};
		for (size_t j = 0; j < sizeof by; j++) {
			text[i] = (char)(was ^ by[j]);
			assert_true(plan_hash(PLAN_SUM_LANES4, text, n) != want);
			tried++;
		}
		text[i] = was;
		assert_true(plan_hash(PLAN_SUM_LANES4, text, i) != want);
	}
	assert_true(tried > 4000);
	free(text);
}

/* Plans pipecc wrote with the older sums (FNV-1a: the file; lanes4: its text under a
 * lanes4 header) read, checked, and write back with the blocks sum: the header line
 * differs, the text after it is the same bytes, and that reads too. */
static void plan__older_sums__read_and_write_blocks(void **state)
{
	(void)state;
	size_t n, nb;
	char *text = slurp(FNV_PLAN, &n);
	assert_memory_equal(text, "pipecc-plan 3 fnv1a=", 20);
	const char *body = strchr(text, '\n') + 1;
	size_t len = n - (size_t)(body - text);
	for (int kind = 0; kind < 2; kind++) {
		char *t = text;
		size_t tn = n;
		if (kind) { // the same text under a lanes4 header
			t = malloc(len + 64);
			assert_non_null(t);
			int hl = sprintf(t, "pipecc-plan 3 lanes4=%016llx\n",
			                 (unsigned long long)plan_hash(PLAN_SUM_LANES4, body, len));
			memcpy(t + hl, body, len);
			tn = (size_t)hl + len;
		}
		Plan *p = read_good_text(t, tn);
		char *b = text_of(p, &nb);
		const char *bbody = strchr(b, '\n') + 1;
		assert_int_equal(nb - (size_t)(bbody - b), len);
		assert_memory_equal(body, bbody, len);
		char want[64];
		snprintf(want, sizeof want, "pipecc-plan 3 blocks=%016llx\n",
		         (unsigned long long)plan_hash(PLAN_SUM_BLOCKS, bbody, len));
		assert_memory_equal(b, want, strlen(want));
		plan_free(read_good_text(b, nb));
		if (kind) { // and a lanes4 plan changed is refused too
			t[tn - 10] ^= 1;
			PlanError err;
			assert_null(read_text(t, tn, &err));
			free(t);
		}
		plan_free(p);
		free(b);
	}
	free(text);
}

/* A tp > 1 plan without its `node` line reads (no tp group is then inside a node,
 * docs/plan-format.md) and writes back without one, text that reads again to the same
 * text: the writer once put `node per_node=0 ... bandwidth=0` there, which the reader
 * refuses (found by fuzz_plan). */
static void plan__tp_plan_without_node_line__writes_back_readable(void **state)
{
	(void)state;
	size_t n, nb, nc;
	char *text = slurp("tests/plans/good/tp2.plan", &n);
	char *node = strstr(text, "\nnode ");
	assert_non_null(node);
	const char *eol = strchr(node + 1, '\n');
	memmove(node, eol, strlen(eol) + 1);
	Plan *p = read_good_text(text, strlen(text));
	char *b = text_of(p, &nb);
	assert_null(strstr(b, "\nnode "));
	Plan *q = read_good_text(b, nb);
	char *c = text_of(q, &nc);
	assert_int_equal(nb, nc);
	assert_memory_equal(b, c, nb);
	plan_free(q);
	plan_free(p);
	free(c);
	free(b);
	free(text);
}

/* Each digit after the header changed to another digit: the plan is refused with a
 * located error, a checksum mismatch at line 1 whenever the text still parses. */
static void refuse_digit_changes(char *text, size_t n)
{
	int refused = 0, mismatches = 0;
	for (size_t i = (size_t)(strchr(text, '\n') - text); i < n; i++) {
		if (text[i] < '0' || text[i] > '9')
			continue;
		char was = text[i];
		text[i] = was == '9' ? '0' : (char)(was + 1);
		PlanError err;
		Plan *q = read_text(text, n, &err);
		text[i] = was;
		if (q)
			fail_msg("a changed digit at byte %zu was accepted", i);
		assert_true(err.line > 0);
		refused++;
		if (strstr(err.msg, "checksum mismatch")) {
			assert_int_equal(err.line, 1);
			mismatches++;
		}
	}
	assert_true(refused > 100);
	assert_true(mismatches > 50);
}

static void plan__reader__changed_digits_refused(void **state)
{
	(void)state;
	size_t n, nb;
	char *text = slurp(FNV_PLAN, &n);
	PlanError err;
	Plan *p = read_text(text, n, &err);
	assert_non_null(p);
	char *b = text_of(p, &nb);
	refuse_digit_changes(text, n);
	refuse_digit_changes(b, nb);
	plan_free(p);
	free(b);
	free(text);
}

/* The header names a known kind and 16 hex digits, or the reader says what it wants. */
static void plan__reader__bad_checksum_header_located(void **state)
{
	(void)state;
	size_t n;
	char *text = slurp(FNV_PLAN, &n);
	const char *heads[][2] = {
		{"pipecc-plan 3 crc32=eaca0fd848f82cfe",
		 "expected a checksum, 'blocks=HEX', 'lanes4=HEX' or 'fnv1a=HEX', after the format "
		 "version"},
		{"pipecc-plan 3 lanes4eaca0fd848f82cfe", "expected a checksum"},
		{"pipecc-plan 3 lanes4=eaca0fd848f82cf ", "the checksum must be 16 hex digits"},
		{"pipecc-plan 3 lanes4=eaca0fd848f82cfe", "checksum mismatch"},
		{"pipecc-plan 3 blocks=eaca0fd848f82cfe", "checksum mismatch"},
	};
	for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
		char *body = strchr(text, '\n');
		size_t hl = strlen(heads[i][0]), bl = n - (size_t)(body - text);
		char *t = malloc(hl + bl);
		assert_non_null(t);
		memcpy(t, heads[i][0], hl);
		memcpy(t + hl, body, bl);
		PlanError err;
		Plan *q = read_text(t, hl + bl, &err);
		assert_null(q);
		assert_int_equal(err.line, 1);
		if (!strstr(err.msg, heads[i][1]))
			fail_msg("'%s' lacks '%s'", err.msg, heads[i][1]);
		free(t);
	}
	free(text);
}

/* text with its first line made `pipecc-plan 1` (unchecked, so edits read) and line k
 * (0-based) replaced by op, each space of op doubled when wide: the reader's fast path
 * takes single-spaced op lines only, so the wide form goes through the general parser. */
static char *with_line(const char *text, int k, const char *op, int wide, size_t *n)
{
	size_t cap = strlen(text) + 2 * strlen(op) + 32, at = 0;
	char *t = malloc(cap);
	assert_non_null(t);
	at += (size_t)sprintf(t, "pipecc-plan 1\n");
	const char *s = strchr(text, '\n') + 1;
	for (int line = 1; *s; line++) {
		const char *e = strchr(s, '\n') + 1;
		if (line == k) {
			for (const char *c = op; *c; c++) {
				t[at++] = *c;
				if (*c == ' ' && wide)
					t[at++] = ' ';
			}
			t[at++] = '\n';
		} else {
			memcpy(t + at, s, (size_t)(e - s));
			at += (size_t)(e - s);
		}
		s = e;
	}
	*n = at;
	return t;
}

/* The fast path (plan/read_op.c) and the general parser agree: op lines of the plan at
 * path (every `every`-th), changed at random `iters` times each, read the same way
 * single-spaced (fast path first) and with every space doubled (general parser only):
 * both refuse it, or both read the same plan.  Returns how many read and how many were
 * refused in *same and *refused. */
static void fast_path_agrees(const char *path, int every, int iters, int *same, int *refused)
{
	size_t n;
	char *text = slurp(path, &n);
	srand(11);
	*same = *refused = 0;
	int line = 0;
	for (const char *s = text; *s; s = strchr(s, '\n') + 1, line++) {
		if (!strchr("FBWSR", *s) || !strncmp(s, "stage", 5) || !strncmp(s, "route", 5) ||
		    line % every)
			continue;
		size_t len = (size_t)(strchr(s, '\n') - s);
		for (int it = 0; it < iters; it++) {
			char op[128];
			snprintf(op, sizeof op, "%.*s", (int)len, s);
			for (int k = 0; it && k < 1 + it % 2; k++)
				op[rand() % (int)len] = "0123456789 -=x@:ABSEFRWactgd"[rand() % (it % 2 ? 10 : 28)];
			size_t n1, n2;
			char *t1 = with_line(text, line, op, 0, &n1), *t2 = with_line(text, line, op, 1, &n2);
			PlanError e1, e2;
			Plan *p1 = read_text(t1, n1, &e1), *p2 = read_text(t2, n2, &e2);
			if (!p1 != !p2)
				fail_msg("%s: '%s' is %s single-spaced but %s wide", path, op,
				         p1 ? "read" : "refused", p2 ? "read" : "refused");
			if (p1) {
				if (!same_text(p1, p2))
					fail_msg("%s: '%s' reads differently through the fast path", path, op);
				(*same)++;
			} else {
				assert_int_equal(e1.line, line + 1);
				(*refused)++;
			}
			plan_free(p1);
			plan_free(p2);
			free(t1);
			free(t2);
		}
	}
	free(text);
}

static void plan__reader__fast_path_agrees_with_parser(void **state)
{
	(void)state;
	int same, refused;
	fast_path_agrees(FNV_PLAN, 1, 200, &same, &refused);
	assert_true(same > 300);
	assert_true(refused > 500);
}

/* The same on a plan whose ranks run many ops of each shape (12 microbatches, a skip:
 * numbers gain digits from one line to the next, edges alternate), where most op lines
 * are read against the last line of their shape (read_op.c's templates): a line changed
 * inside the text it shares with that one, or in its microbatch or group. */
static void plan__reader__fast_path_by_shape_agrees_with_parser(void **state)
{
	(void)state;
	int same, refused;
	fast_path_agrees("tests/plans/good/skip12.plan", 3, 40, &same, &refused);
	assert_true(same > 200);
	assert_true(refused > 2000);
}

/* Reads the plan at path from the file (a regular file: its op arrays allocated at once,
 * runs of op lines parsed in place in 64 KiB blocks) and from a stream of its text (no
 * size known: the arrays grow): the same plan, or the same located error. */
static Plan *read_both_ways(const char *path, PlanError *e1)
{
	size_t n;
	char *text = slurp(path, &n);
	PlanError e2;
	Plan *p1 = plan_read_file(path, e1), *p2 = read_text(text, n, &e2);
	assert_int_equal(!p1, !p2);
	if (p1) {
		size_t w1, w2;
		char *a = text_of(p1, &w1), *b = text_of(p2, &w2);
		assert_true(w1 == n && w2 == n && !memcmp(a, text, n) && !memcmp(b, text, n));
		free(a);
		free(b);
	} else {
		assert_int_equal(e1->line, e2.line);
		assert_string_equal(e1->msg, e2.msg);
	}
	plan_free(p2);
	free(text);
	return p1;
}

/* A plan with nothing but `world` empty ranks (and no edges), for the tests of its
 * arrays and tables; the test fails when out of memory. */
static Plan *bare_plan(int world)
{
	Plan *p = plan_new();
	assert_non_null(p);
	p->world = world;
	p->ranks = calloc((size_t)world, sizeof *p->ranks);
	assert_non_null(p->ranks);
	return p;
}

/* plan_block_ops: three ranks' arrays in one block, its start on a 2 MiB boundary (it
 * is past PLAN_HUGE_MIN), ops then lines; pushes within a rank's count write in place;
 * one more copies the rank out with every op and line kept; plan_free frees the block
 * once (the sanitizer build catches a double free or a leak). */
static void plan__block__ranks_share_one_aligned_block(void **state)
{
	(void)state;
	Plan *p = bare_plan(3);
	const int64_t n[3] = {70000, 0, 30000};
	assert_true((size_t)(n[0] + n[2]) * sizeof(PlanOp) >= PLAN_HUGE_MIN);
	assert_int_equal(plan_block_ops(p, NULL, n, 3, 1), 0);
	assert_int_equal(p->nblocks, 1);
	PlanRank *r0 = &p->ranks[0];
	PlanOp *block = r0->ops;
	assert_int_equal((uintptr_t)block % ((uintptr_t)2 << 20), 0);
	assert_ptr_equal(p->ranks[2].ops, block + n[0]);
	assert_ptr_equal(r0->lines, (int32_t *)(block + n[0] + n[2]));
	assert_ptr_equal(p->ranks[2].lines, r0->lines + n[0]);
	for (int r = 0; r < 3; r++) {
		assert_true(p->ranks[r].inblock);
		assert_int_equal(p->ranks[r].ops_cap, n[r]);
		assert_int_equal(p->ranks[r].nops, 0);
	}
	for (int64_t i = 0; i < n[0]; i++)
		assert_non_null(plan_push_op(r0, (PlanOp){.kind = OP_F, .mb = (int32_t)i}, (int32_t)i + 1));
	assert_ptr_equal(r0->ops, block);
	assert_true(r0->inblock);
	assert_int_equal(plan_reserve_ops(r0, n[0] / 2, 1), 0); // a block's arrays stay
	assert_ptr_equal(r0->ops, block);
	assert_non_null(plan_push_op(r0, (PlanOp){.kind = OP_B, .mb = 7}, 9));
	assert_false(r0->inblock);
	assert_true(r0->ops != block);
	assert_true(r0->ops_cap > n[0]);
	for (int64_t i = 0; i < n[0]; i++) {
		assert_int_equal(r0->ops[i].mb, i);
		assert_int_equal(r0->lines[i], i + 1);
	}
	assert_int_equal(r0->ops[n[0]].kind, OP_B);
	assert_int_equal(r0->lines[n[0]], 9);
	/* the other ranks' arrays are where they were */
	assert_ptr_equal(p->ranks[2].ops, block + n[0]);
	plan_free(p);
}

/* plan_block_new: past PLAN_HUGE_MIN the block starts on a 2 MiB boundary within the
 * first 2 MiB of what is freed, and `zero` zeroes it; below, it is the allocation. */
static void plan__block_new__aligned_and_zeroed(void **state)
{
	(void)state;
	void *raw;
	size_t big = PLAN_HUGE_MIN + 12345;
	unsigned char *a = plan_block_new(big, 1, &raw);
	assert_non_null(a);
	assert_int_equal((uintptr_t)a % ((uintptr_t)2 << 20), 0);
	assert_true(a >= (unsigned char *)raw && a - (unsigned char *)raw < (2 << 20));
	for (size_t i = 0; i < big; i += 4093)
		assert_int_equal(a[i], 0);
	assert_int_equal(a[big - 1], 0);
	memset(a, 0xab, big); // all of it is ours (the sanitizer build checks)
	free(raw);
	unsigned char *s = plan_block_new(100, 1, &raw);
	assert_ptr_equal(s, raw);
	for (int i = 0; i < 100; i++)
		assert_int_equal(s[i], 0);
	free(raw);
}

/* plan_populate: an element reaching into a new PLAN_POPULATE_STEP pages that step in
 * (up to the array's end, whole pages only), one that does not pages nothing, and no
 * byte changes.  Seen through mincore on a fresh mapping nobody writes. */
static int resident(const unsigned char *a, uintptr_t page)
{
	unsigned char v;
	assert_int_equal(mincore((void *)(a + page * 4096), 4096, &v), 0);
	return v & 1;
}

static void plan__populate__pages_in_the_step_an_element_enters(void **state)
{
	(void)state;
	enum { STEPS = 4 };
	const uintptr_t step = PLAN_POPULATE_STEP, per = step / 4096;
	size_t len = (STEPS + 1) * step;
	unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(m != MAP_FAILED);
	unsigned char *base = (unsigned char *)(((uintptr_t)m + step - 1) & ~(step - 1));
	memset(base, 0x5a, 100); // page 0: written before
	typedef struct {
		char b[24]; // no power of two: elements straddle the boundaries
	} El;
	El *arr = (El *)(base + 8);
	const unsigned char *end = base + 2 * step + 5000; // in page 2 * per + 1
	size_t n = (size_t)(end - (unsigned char *)arr) / sizeof(El);
	for (size_t i = 0; i + 1 < (step - 8) / sizeof(El); i++) // all within step 0
		plan_populate(&arr[i], end);
	for (uintptr_t pg = 1; pg < STEPS * per; pg++)
		assert_int_equal(resident(base, pg), 0);
#ifdef MADV_POPULATE_WRITE
	if (madvise(base + step - 4096, 4096, MADV_POPULATE_WRITE)) { // kernel before 5.14
		munmap(m, len);
		skip();
	}
	for (size_t i = 0; i < n; i++)
		plan_populate(&arr[i], end);
	assert_int_equal(resident(base, 0), 1);
	for (uintptr_t pg = 1; pg < per - 1; pg++) // step 0: never entered, only written
		assert_int_equal(resident(base, pg), 0);
	for (uintptr_t pg = per; pg < 2 * per + 1; pg++) // steps 1 and 2 to end's page
		assert_int_equal(resident(base, pg), 1);
	for (uintptr_t pg = 2 * per + 1; pg < STEPS * per; pg++) // end's page and past
		assert_int_equal(resident(base, pg), 0);
#endif
	for (size_t i = 0; i < STEPS * step; i++)
		if (base[i] != (i < 100 ? 0x5a : 0))
			fail_msg("byte %zu changed", i);
	munmap(m, len);
}

/* plan_block_take: ranks whose arrays pass PLAN_TAKE_MIN are carved one after the other
 * from one block (each rank's ops on a cache line, its lines after them), a small one
 * gets arrays of its own, one that does not fit the block's rest starts another; the
 * arrays hold what is written into them and plan_free frees each block once. */
static void plan__block_take__carves_ranks_in_turn(void **state)
{
	(void)state;
	Plan *p = bare_plan(4);
	int64_t n = (int64_t)(PLAN_TAKE_MIN / sizeof(PlanOp)) + 3; // past the minimum
	assert_int_equal(plan_block_take(p, &p->ranks[0], n, 1), 0);
	assert_int_equal(plan_block_take(p, &p->ranks[1], n, 0), 0);
	assert_int_equal(plan_block_take(p, &p->ranks[2], 100, 1), 0);
	assert_int_equal(p->nblocks, 1);
	PlanRank *a = &p->ranks[0], *b = &p->ranks[1], *s = &p->ranks[2];
	assert_true(a->inblock && b->inblock && !s->inblock);
	assert_int_equal((uintptr_t)a->ops % ((uintptr_t)2 << 20), 0);
	assert_ptr_equal(a->lines, (int32_t *)(a->ops + n));
	size_t used = ((size_t)n * (sizeof(PlanOp) + sizeof(int32_t)) + 63) & ~(size_t)63;
	assert_ptr_equal((char *)b->ops, (char *)a->ops + used);
	assert_null(b->lines);
	assert_int_equal(a->ops_cap, n);
	assert_int_equal(s->ops_cap, 100);
	/* more than the block has left: a block of its own */
	int64_t big = (int64_t)(PLAN_TAKE_BLOCK / sizeof(PlanOp));
	assert_int_equal(plan_block_take(p, &p->ranks[3], big, 0), 0);
	assert_int_equal(p->nblocks, 2);
	for (int64_t i = 0; i < n; i++) {
		a->ops[a->nops] = (PlanOp){.kind = OP_F, .mb = (int32_t)i};
		a->lines[a->nops++] = (int32_t)i;
		b->ops[b->nops++] = (PlanOp){.kind = OP_B, .mb = (int32_t)(n - i)};
	}
	p->ranks[3].ops[big - 1] = (PlanOp){.kind = OP_W, .mb = 5};
	for (int64_t i = 0; i < n; i++) {
		assert_int_equal(a->ops[i].mb, i);
		assert_int_equal(a->lines[i], i);
		assert_int_equal(b->ops[i].mb, n - i);
	}
	assert_int_equal(p->ranks[3].ops[big - 1].mb, 5);
	plan_free(p);
}

/* Whether the mapping holding a is marked for huge pages (VmFlags "hg" in
 * /proc/self/smaps); -1 when that cannot be told. */
static int huge_flag(const void *a)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	if (!f)
		return -1;
	char line[512];
	int in = 0, flag = -1;
	while (flag < 0 && fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) // a mapping's first line
			in = (uintptr_t)a >= lo && (uintptr_t)a < hi;
		else if (in && !strncmp(line, "VmFlags:", 8))
			flag = strstr(line, " hg") != NULL;
	}
	fclose(f);
	return flag;
}

/* A big block is offered for huge pages with PIPECC_HUGE_PAGES=1, all of it, not with
 * PIPECC_HUGE_PAGES=0, and without either as this machine's sysfs decides (where the
 * kernel has transparent huge pages at all).  (A block malloc serves from the heap
 * leaves its hint on that memory when freed; these are mappings of their own.) */
static void plan__block_new__huge_hint_as_asked_or_as_the_machine_says(void **state)
{
	(void)state;
	FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (!thp)
		skip(); // no transparent huge pages: madvise refuses the hint
	fclose(thp);
	static const char *const env[] = {"0", "1", NULL};
	for (int i = 0; i < 3; i++) {
		if (env[i])
			assert_int_equal(setenv("PIPECC_HUGE_PAGES", env[i], 1), 0);
		else
			unsetenv("PIPECC_HUGE_PAGES");
		int want = env[i] ? env[i][0] == '1' : plan_thp_read("/sys").offer;
		assert_int_equal(plan_huge_pages(), want);
		void *raw;
		size_t n = (size_t)64 << 20; // past malloc's largest mmap threshold: a fresh mapping
		char *a = plan_block_new(n, 1, &raw);
		assert_non_null(a);
		assert_int_equal(huge_flag(a), want);
		assert_int_equal(huge_flag(a + n - 1), want);
		free(raw);
	}
	unsetenv("PIPECC_HUGE_PAGES");
}

/* A fake sysfs tree under a temporary folder: put(t, rel, text) writes one file. */
typedef struct {
	char root[64];
} FakeSys;

static void put(FakeSys *t, const char *rel, const char *text)
{
	char path[512], cmd[600];
	snprintf(path, sizeof path, "%s/%s", t->root, rel);
	snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
	assert_int_equal(system(cmd), 0);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "%s\n", text);
	assert_int_equal(fclose(f), 0);
}

#define THP "kernel/mm/transparent_hugepage/"
#define BALLOON "bus/virtio/devices/virtio0/"
#define REPORTING "0110010100000000000000000000000010000000" // bit 5: free page reporting

/* plan_thp_read on trees shaped like the kernels we know: the largest page a region
 * asking for huge pages gets, the free blocks a balloon reports to its host, and the
 * answer: offer them only where the kernel gives such pages and nothing reports free
 * memory (a virtio balloon that negotiated reporting, or Hyper-V's balloon). */
static void plan__thp_read__offers_only_where_nothing_reports_free_memory(void **state)
{
	(void)state;
	const int64_t k = 1024, page = sysconf(_SC_PAGESIZE);
	static const char *const mode[] = {"always [madvise] never", "[always] madvise never",
	                                   "always madvise [never]"};
	for (int top = 0; top < 3; top++)
		for (int balloon = 0; balloon < 4; balloon++) { // none, reporting, not, Hyper-V
			FakeSys t;
			strcpy(t.root, "/tmp/pipecc-thp.XXXXXX");
			assert_non_null(mkdtemp(t.root));
			put(&t, THP "enabled", mode[top]);
			put(&t, THP "hpage_pmd_size", "2097152");
			put(&t, "module/page_reporting/parameters/page_reporting_order", "9");
			put(&t, "bus/virtio/devices/virtio1/device", "0x0002");
			put(&t, "bus/virtio/devices/virtio1/features", "1111111");
			if (balloon == 1 || balloon == 2) {
				put(&t, BALLOON "device", "0x0005");
				put(&t, BALLOON "features", balloon == 1 ? REPORTING : "0110000");
			}
			if (balloon == 3)
				put(&t, "bus/vmbus/drivers/hv_balloon/uevent", "");
			int reports = balloon == 1 || balloon == 3, gives = top < 2;
			/* Before Linux 6.8: no page sizes of their own, the PMD size. */
			PlanThp r = plan_thp_read(t.root);
			assert_int_equal(r.largest, gives ? 2048 * k : 0);
			assert_int_equal(r.reported, reports ? page << 9 : 0);
			assert_int_equal(r.offer, gives && !reports);
			/* 6.8 and later: 2 MiB inheriting, 64 KiB and 16 KiB set apart. */
			put(&t, THP "hugepages-2048kB/enabled", "always [inherit] madvise never");
			put(&t, THP "hugepages-64kB/enabled", "always inherit [madvise] never");
			put(&t, THP "hugepages-16kB/enabled", "always inherit madvise [never]");
			r = plan_thp_read(t.root);
			assert_int_equal(r.largest, gives ? 2048 * k : 64 * k); // the largest is tried first
			assert_int_equal(r.offer, !reports);
			put(&t, THP "hugepages-64kB/enabled", "always inherit madvise [never]");
			r = plan_thp_read(t.root);
			assert_int_equal(r.largest, gives ? 2048 * k : 0);
			assert_int_equal(r.offer, gives && !reports);
			put(&t, THP "hugepages-2048kB/enabled", "always inherit madvise [never]");
			put(&t, THP "hugepages-64kB/enabled", "always [inherit] madvise never");
			put(&t, "module/page_reporting/parameters/page_reporting_order", "4");
			r = plan_thp_read(t.root);
			assert_int_equal(r.largest, gives ? 64 * k : 0);
			assert_int_equal(r.reported, reports ? page << 4 : 0);
			assert_int_equal(r.offer, gives && !reports);
			char buf[160], cmd[120];
			plan_thp_describe(&r, buf, sizeof buf);
			assert_string_equal(buf, !gives ? "no: the kernel gives no huge pages to regions "
			                                  "that ask"
			                         : !reports ? "yes: 64 KiB pages, and nothing reports "
			                                      "free memory to a host"
			                                    : "no: 64 KiB pages, but free blocks of 64 "
			                                      "KiB are reported to the host");
			snprintf(cmd, sizeof cmd, "rm -rf '%s'", t.root);
			assert_int_equal(system(cmd), 0);
		}
	/* No THP at all (no such folder): nothing to offer. */
	PlanThp r = plan_thp_read("/nonexistent-sys");
	assert_int_equal(r.largest, 0);
	assert_int_equal(r.offer, 0);
}

/* An unbuffered stream that keeps what it is given and the largest single write, and
 * takes at most `room` bytes in all (then falls short, as a full disk would). */
typedef struct {
	char *buf;
	size_t n, cap, largest, room;
} Sink;

static ssize_t sink_write(void *cookie, const char *s, size_t n)
{
	Sink *k = cookie;
	if (n > k->largest)
		k->largest = n;
	if (k->n + n > k->room)
		n = k->room - k->n;
	if (k->n + n > k->cap) {
		k->cap = (k->n + n) * 2;
		k->buf = realloc(k->buf, k->cap);
		assert_non_null(k->buf);
	}
	memcpy(k->buf + k->n, s, n);
	k->n += n;
	return n ? (ssize_t)n : -1;
}

static FILE *sink_open(Sink *k, size_t room)
{
	*k = (Sink){.room = room};
	FILE *f = fopencookie(k, "w", (cookie_io_functions_t){.write = sink_write});
	assert_non_null(f);
	assert_int_equal(setvbuf(f, NULL, _IONBF, 0), 0); // each fwrite reaches the sink whole
	return f;
}

/* The plan writers hand the stream pieces of at most plan_write_piece() bytes (32 KiB
 * where a balloon reports free memory to the host, as on the VMs we test on): the
 * text of a 3 MB plan, and its binary form, byte for byte what a file gets; a stream
 * that fills up is an error. */
static void plan__writers__write_in_pieces_where_the_machine_needs_it(void **state)
{
	(void)state;
	size_t piece = plan_write_piece();
	assert_int_equal(piece, plan_thp_machine()->reported ? PLAN_WRITE_PIECE : SIZE_MAX);
	PlanError err;
	Plan *p = plan_read_file(FNV_PLAN, &err);
	assert_non_null(p);
	char *big = malloc(3 << 20);
	assert_non_null(big);
	for (size_t i = 0; i < 3u << 20; i++)
		big[i] = (char)(i * 2654435761u >> 13);
	Sink k;
	FILE *f = sink_open(&k, SIZE_MAX);
	assert_int_equal(plan_fwrite(big, 3 << 20, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(k.n, 3 << 20);
	assert_memory_equal(k.buf, big, k.n);
	assert_true(k.largest <= piece);
	if (piece == PLAN_WRITE_PIECE)
		assert_int_equal(k.largest, PLAN_WRITE_PIECE);
	free(k.buf);
	f = sink_open(&k, (1 << 20) + 5);
	assert_int_equal(plan_fwrite(big, 3 << 20, f), -1);
	fclose(f);
	free(k.buf);
	free(big);
	/* The writers: a plan of 100k ops (about 3 MB of text). */
	PlanRank *rk = &p->ranks[0];
	int64_t n0 = rk->nops;
	while (rk->nops < 100000)
		plan_push_op(rk, rk->ops[rk->nops % n0], 0);
	for (int bin = 0; bin < 2; bin++) {
		char path[] = "/tmp/pipecc-pieces.XXXXXX";
		int fd = mkstemp(path);
		assert_true(fd >= 0);
		FILE *file = fdopen(fd, "w+");
		assert_non_null(file);
		f = sink_open(&k, SIZE_MAX);
		assert_int_equal(bin ? plan_write_binary(p, f) : plan_write(p, f), 0);
		assert_int_equal(fflush(f), 0);
		assert_int_equal(bin ? plan_write_binary(p, file) : plan_write(p, file), 0);
		assert_int_equal(fflush(file), 0);
		size_t fn = (size_t)ftello(file);
		assert_true(fn > (bin ? 100000u : 2000000u));
		assert_true(k.largest <= piece);
		assert_int_equal(k.n, fn);
		char *back = malloc(fn);
		assert_non_null(back);
		rewind(file);
		assert_int_equal(fread(back, 1, fn, file), fn);
		assert_memory_equal(back, k.buf, fn);
		free(back);
		fclose(file);
		fclose(f);
		free(k.buf);
		remove(path);
	}
	plan_free(p);
}

/* A plan of 100k ops (3 MB, lines across every block boundary) reads back to its own
 * text from a file and from a stream; with a rank's count raised past what the file
 * holds, both refuse it at the same line with the same message. */
static void plan__reader__big_plan_file_and_stream_agree(void **state)
{
	(void)state;
	PlanError err;
	Plan *p = plan_read_file(FNV_PLAN, &err);
	assert_non_null(p);
	PlanRank *rk = &p->ranks[0];
	int64_t base = rk->nops;
	assert_true(base > 0);
	for (int64_t i = 0; rk->nops < 100000; i++)
		assert_non_null(plan_push_op(rk, rk->ops[i % base], plan_op_kept_line(rk, i % base)));
	char path[] = "/tmp/pipecc-test-plan.XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *f = fdopen(fd, "w");
	assert_non_null(f);
	assert_int_equal(plan_write(p, f), 0);
	assert_int_equal(fclose(f), 0);
	Plan *back = read_both_ways(path, &err);
	assert_non_null(back);
	assert_int_equal(back->ranks[0].nops, 100000);
	plan_free(back);

	size_t n;
	char *text = slurp(path, &n);
	char *at = strstr(text, " ops=100000\n");
	assert_non_null(at);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "%.*s ops=100000000%s", (int)(at - text), text, at + strlen(" ops=100000"));
	assert_int_equal(fclose(f), 0);
	assert_null(read_both_ways(path, &err));
	assert_true(err.line > 100000);
	remove(path);
	free(text);
	plan_free(p);
}

/* ---- the sizes of the sized kinds ---- */

typedef struct {
	Plan *p;
	int t;
} SizeArg;

static void *add_sizes(void *arg)
{
	SizeArg *a = arg;
	for (int i = 0; i < 1000; i++) {
		PlanOp o = {.kind = OP_TPREDUCE, .route = -1};
		int64_t b = 1000 + (i * 7 + a->t * 131) % 1000;
		if (plan_op_set_bytes(a->p, &o, b) || plan_op_bytes(a->p, &o) != b)
			return a;
	}
	return NULL;
}

/* An ALLREDUCE's, TIEREDUCE's or TPREDUCE's size is one of the plan's sizes[], each
 * distinct size once, whatever threads add them; a SEND's or RECV's is its edge's and
 * any other kind's 0; plan_sizes_canon numbers the sizes in increasing order, every op
 * still moving what it did. */
static void plan__sizes__each_once_in_increasing_order(void **state)
{
	(void)state;
	Plan *p = bare_plan(1);
	p->nedges = 2;
	p->edges = calloc(2, sizeof *p->edges);
	assert_non_null(p->edges);
	p->edges[0].bytes = 64;
	p->edges[1].bytes = 96;
	const int64_t want[] = {300, 100, 300, 7, 100, 0};
	PlanRank *rk = &p->ranks[0];
	for (int i = 0; i < 6; i++) {
		PlanOp o = {.kind = i % 2 ? OP_ALLREDUCE : OP_TIEREDUCE, .mb = -1, .peer = -1,
		            .group = i, .route = -1};
		assert_int_equal(plan_op_set_bytes(p, &o, want[i]), 0);
		assert_true(o.route <= -2);
		assert_non_null(plan_push_op(rk, o, 0));
	}
	assert_int_equal(p->nsizes, 4);
	assert_int_equal(rk->ops[0].route, rk->ops[2].route);
	assert_int_equal(rk->ops[1].route, rk->ops[4].route);
	assert_int_not_equal(rk->ops[0].route, rk->ops[1].route);
	for (int i = 0; i < 6; i++)
		assert_int_equal(plan_op_bytes(p, &rk->ops[i]), want[i]);
	PlanOp s = {.kind = OP_RECV, .stage = 1, .route = 3};
	assert_int_equal(plan_op_set_bytes(p, &s, 96), 0);
	assert_int_equal(plan_op_set_bytes(p, &s, 64), 1);
	assert_int_equal(s.route, 3);
	assert_int_equal(plan_op_bytes(p, &s), 96);
	PlanOp f = {.kind = OP_OPTIM, .route = -1};
	assert_int_equal(plan_op_set_bytes(p, &f, 0), 0);
	assert_int_equal(plan_op_set_bytes(p, &f, 5), 1);
	assert_int_equal(plan_op_bytes(p, &f), 0);
	assert_int_equal(p->nsizes, 4); // none of those added one
	assert_int_equal(plan_sizes_canon(p), 0);
	const int64_t sorted[] = {0, 7, 100, 300};
	assert_memory_equal(p->sizes, sorted, sizeof sorted);
	for (int i = 0; i < 6; i++)
		assert_int_equal(plan_op_bytes(p, &rk->ops[i]), want[i]);
	PlanOp again = {.kind = OP_TPREDUCE, .route = -1};
	assert_int_equal(plan_op_set_bytes(p, &again, 300), 0);
	assert_int_equal(again.route, rk->ops[0].route);
	assert_int_equal(again.route, -2 - 3);
	/* four threads adding the same 1000 sizes, each in its own order */
	pthread_t th[4];
	SizeArg a[4];
	for (int t = 0; t < 4; t++) {
		a[t] = (SizeArg){p, t};
		assert_int_equal(pthread_create(&th[t], NULL, add_sizes, &a[t]), 0);
	}
	for (int t = 0; t < 4; t++) {
		void *bad;
		pthread_join(th[t], &bad);
		assert_null(bad);
	}
	assert_int_equal(p->nsizes, 4 + 1000);
	assert_int_equal(plan_sizes_canon(p), 0);
	for (int i = 1; i < p->nsizes; i++)
		assert_true(p->sizes[i - 1] < p->sizes[i]);
	for (int i = 0; i < 6; i++)
		assert_int_equal(plan_op_bytes(p, &rk->ops[i]), want[i]);
	plan_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(checksum__any_split__same_sum),
		cmocka_unit_test(checksum__lanes4__every_byte_change_caught),
		cmocka_unit_test(checksum__blocks__blocks_apart_and_edges),
		cmocka_unit_test(plan__older_sums__read_and_write_blocks),
		cmocka_unit_test(plan__tp_plan_without_node_line__writes_back_readable),
		cmocka_unit_test(plan__reader__changed_digits_refused),
		cmocka_unit_test(plan__reader__bad_checksum_header_located),
		cmocka_unit_test(plan__reader__fast_path_agrees_with_parser),
		cmocka_unit_test(plan__sizes__each_once_in_increasing_order),
		cmocka_unit_test(plan__reader__fast_path_by_shape_agrees_with_parser),
		cmocka_unit_test(plan__reader__big_plan_file_and_stream_agree),
		cmocka_unit_test(plan__block__ranks_share_one_aligned_block),
		cmocka_unit_test(plan__block_new__aligned_and_zeroed),
		cmocka_unit_test(plan__block_take__carves_ranks_in_turn),
		cmocka_unit_test(plan__block_new__huge_hint_as_asked_or_as_the_machine_says),
		cmocka_unit_test(plan__thp_read__offers_only_where_nothing_reports_free_memory),
		cmocka_unit_test(plan__populate__pages_in_the_step_an_element_enters),
		cmocka_unit_test(plan__writers__write_in_pieces_where_the_machine_needs_it),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
