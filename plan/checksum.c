/* The plan checksums, one row per kind (docs/plan-format.md, "Checksum").  The header
 * line names the kind by its key (`blocks=HEX`, `lanes4=HEX`, `fnv1a=HEX`); pipecc writes
 * blocks and
 * the reader checks any.  Each hashes a stream fed in pieces of any size: the writer
 * feeds it as it formats, the reader as it reads blocks, and the result is the same
 * however the bytes were split.
 *
 * lanes4 reads the text as 32-byte stripes of four little-endian 64-bit words, one per
 * lane; each lane is its own serial chain, so the four run side by side and the cost is
 * a fraction of a cycle per byte (FNV-1a's one chain is about four cycles a byte).  Every
 * step is a bijection of the lane for a fixed word and of the word for a fixed lane, so
 * any change confined to one word (any single-byte change) changes the result.
 *
 * blocks is lanes4 over each 1 MiB block of the text on its own, the blocks' sums then
 * chained by the same step: the blocks can be hashed apart, on as many threads as there
 * are, which lanes4's four chains through the whole text cannot (a reader with threads
 * hashes a 500 MiB plan in a few ms instead of 40). */
#include "plan.h"
#include "checksum.h"

#include <stdio.h>
#include <string.h>

#define LANES_K1 0x9e3779b97f4a7c15ULL // odd: multiplying by it is a bijection
#define LANES_K2 0xd6e8feb86659fd93ULL // odd

static inline uint64_t rotl64(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

/* A little-endian word whatever the host; compilers make it one load on x86 and ARM. */
static inline uint64_t le64(const unsigned char *u)
{
	return (uint64_t)u[0] | (uint64_t)u[1] << 8 | (uint64_t)u[2] << 16 | (uint64_t)u[3] << 24 |
	       (uint64_t)u[4] << 32 | (uint64_t)u[5] << 40 | (uint64_t)u[6] << 48 |
	       (uint64_t)u[7] << 56;
}

static inline uint64_t lane_step(uint64_t lane, uint64_t w)
{
	return rotl64(lane ^ (w * LANES_K1), 31) * LANES_K2;
}

static void lanes_init(PlanHash *h)
{
	for (int i = 0; i < 4; i++)
		h->lane[i] = (uint64_t)(i + 1) * LANES_K2;
}

/* Whole stripes of u[0, n) into the lanes; returns the bytes used (a multiple of 32). */
static size_t lanes_stripes(PlanHash *h, const unsigned char *u, size_t n)
{
	uint64_t a = h->lane[0], b = h->lane[1], c = h->lane[2], d = h->lane[3];
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		a = lane_step(a, le64(u + i));
		b = lane_step(b, le64(u + i + 8));
		c = lane_step(c, le64(u + i + 16));
		d = lane_step(d, le64(u + i + 24));
	}
	h->lane[0] = a;
	h->lane[1] = b;
	h->lane[2] = c;
	h->lane[3] = d;
	return i;
}

static void lanes_update(PlanHash *h, const unsigned char *u, size_t n)
{
	if (h->ntail) { // complete the stripe begun by the last piece
		size_t k = 32 - h->ntail < n ? 32 - h->ntail : n;
		memcpy(h->tail + h->ntail, u, k);
		h->ntail += (unsigned)k;
		u += k;
		n -= k;
		if (h->ntail < 32)
			return;
		lanes_stripes(h, h->tail, 32);
		h->ntail = 0;
	}
	size_t used = lanes_stripes(h, u, n);
	memcpy(h->tail, u + used, n - used);
	h->ntail = (unsigned)(n - used);
}

/* The last steps of both kinds: the length in, then mixed; one-to-one in x. */
static uint64_t finish(uint64_t x, uint64_t total)
{
	x ^= total;
	x ^= x >> 29;
	x *= LANES_K2;
	x ^= x >> 32;
	return x;
}

/* lanes4's result for the lanes and tail in h over a text of total bytes. */
static uint64_t lanes_sum(const PlanHash *h, uint64_t total)
{
	uint64_t x = 0;
	for (int i = 0; i < 4; i++)
		x = rotl64((x ^ h->lane[i]) * LANES_K1, 27);
	for (unsigned i = 0; i < h->ntail; i++)
		x = (x ^ h->tail[i]) * PLAN_FNV_PRIME;
	return finish(x, total);
}

static uint64_t lanes_final(const PlanHash *h)
{
	return lanes_sum(h, h->total);
}

#define BLOCKS_SEED (5 * LANES_K2)

static void blocks_init(PlanHash *h)
{
	lanes_init(h);
	h->chain = BLOCKS_SEED;
}

/* The text is cut where each block ends, whatever the pieces: a block's bytes go to a
 * lanes4 of its own, whose sum steps the chain when the block is full. */
static void blocks_update(PlanHash *h, const unsigned char *u, size_t n)
{
	while (n) {
		size_t k = PLAN_SUM_BLOCK - h->inblock;
		if (k > n)
			k = n;
		lanes_update(h, u, k);
		h->inblock += k;
		u += k;
		n -= k;
		if (h->inblock == PLAN_SUM_BLOCK) {
			h->chain = lane_step(h->chain, lanes_sum(h, PLAN_SUM_BLOCK));
			lanes_init(h);
			h->ntail = 0;
			h->inblock = 0;
		}
	}
}

static uint64_t blocks_final(const PlanHash *h)
{
	uint64_t x = h->chain;
	if (h->inblock) // the last block, short
		x = lane_step(x, lanes_sum(h, h->inblock));
	return finish(x, h->total);
}

uint64_t plan_hash_blocks(const uint64_t *sums, size_t n, uint64_t total)
{
	uint64_t x = BLOCKS_SEED;
	for (size_t j = 0; j < n; j++)
		x = lane_step(x, sums[j]);
	return finish(x, total);
}

static void fnv_init(PlanHash *h)
{
	h->lane[0] = PLAN_FNV_OFFSET;
}

static void fnv_update(PlanHash *h, const unsigned char *u, size_t n)
{
	h->lane[0] = plan_fnv1a(h->lane[0], (const char *)u, n);
}

static uint64_t fnv_final(const PlanHash *h)
{
	return h->lane[0];
}

const PlanSumKind plan_sums[PLAN_SUM_COUNT] = {
	[PLAN_SUM_BLOCKS] = {"blocks", blocks_init, blocks_update, blocks_final},
	[PLAN_SUM_LANES4] = {"lanes4", lanes_init, lanes_update, lanes_final},
	[PLAN_SUM_FNV1A] = {"fnv1a", fnv_init, fnv_update, fnv_final},
};

void plan_hash_init(PlanHash *h, int kind)
{
	memset(h, 0, sizeof *h);
	h->kind = kind;
	plan_sums[kind].init(h);
}

void plan_hash_update(PlanHash *h, const void *s, size_t n)
{
	h->total += n;
	plan_sums[h->kind].update(h, s, n);
}

uint64_t plan_hash_final(const PlanHash *h)
{
	return plan_sums[h->kind].final(h);
}

uint64_t plan_hash(int kind, const void *s, size_t n)
{
	PlanHash h;
	plan_hash_init(&h, kind);
	plan_hash_update(&h, s, n);
	return plan_hash_final(&h);
}

int plan_sum_key(const char *s, char *kinds, size_t n)
{
	for (int k = 0; k < PLAN_SUM_COUNT; k++) {
		size_t len = strlen(plan_sums[k].name);
		if (!strncmp(s, plan_sums[k].name, len) && s[len] == '=')
			return k;
	}
	kinds[0] = 0;
	for (int k = 0; k < PLAN_SUM_COUNT; k++)
		snprintf(kinds + strlen(kinds), n - strlen(kinds), "%s'%s=HEX'",
		         k ? (k + 1 < PLAN_SUM_COUNT ? ", " : " or ") : "", plan_sums[k].name);
	return -1;
}
