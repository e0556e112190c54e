/* The plan file's checksums (plan/checksum.c, docs/plan-format.md "Checksum"): one row
 * per kind, each a hash of a stream fed in pieces of any size, so the writer sums as it
 * formats and the reader as it reads. */
#ifndef PLAN_CHECKSUM_H
#define PLAN_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#define PLAN_FNV_OFFSET 0xcbf29ce484222325ULL
#define PLAN_FNV_PRIME 0x100000001b3ULL

/* The header line's checksum kinds (plan/checksum.c, docs/plan-format.md "Checksum"):
 * the key before `=HEX` names the kind. */
typedef enum {
	PLAN_SUM_BLOCKS, // lanes4 of each 1 MiB block, chained: pipecc writes it; threads check it
	PLAN_SUM_LANES4, // four 64-bit multiply-rotate lanes over 8-byte words: still read
	PLAN_SUM_FNV1A,  // 64-bit FNV-1a of every byte: plans from before lanes4, still read
	PLAN_SUM_COUNT
} PlanSum;

#define PLAN_SUM_WRITTEN PLAN_SUM_BLOCKS // the kind plan_write puts in the header
#define PLAN_SUM_BLOCK (1 << 20)         // the blocks kind's block: bytes each lanes4 covers

/* A checksum being computed over a stream fed in pieces of any size. */
typedef struct {
	int kind;              // PlanSum
	uint64_t lane[4];      // the kind's state (FNV-1a uses lane[0])
	uint64_t total;        // bytes fed so far
	unsigned char tail[32]; // lanes4: the bytes of a stripe not yet complete
	unsigned ntail;
	uint64_t chain;        // blocks: the chain over the blocks done
	uint64_t inblock;      // blocks: bytes of the current block fed (lanes4's own total)
} PlanHash;

typedef struct {
	const char *name; // the header key, e.g. "lanes4" in `lanes4=HEX`
	void (*init)(PlanHash *h);
	void (*update)(PlanHash *h, const unsigned char *s, size_t n);
	uint64_t (*final)(const PlanHash *h);
} PlanSumKind;

extern const PlanSumKind plan_sums[PLAN_SUM_COUNT];
void plan_hash_init(PlanHash *h, int kind);
void plan_hash_update(PlanHash *h, const void *s, size_t n);
uint64_t plan_hash_final(const PlanHash *h); // the state is left as it was
uint64_t plan_hash(int kind, const void *s, size_t n); // one piece, start to end
/* The blocks kind from its parts, for a reader that hashes the blocks apart (on threads):
 * sums[j] = plan_hash(PLAN_SUM_LANES4, block j) for the n blocks of a text of total bytes. */
uint64_t plan_hash_blocks(const uint64_t *sums, size_t n, uint64_t total);
/* The kind whose key and `=` start s, or -1 with the keys listed in kinds[0, n). */
int plan_sum_key(const char *s, char *kinds, size_t n);

/* Folds n bytes into the FNV-1a checksum h: one serial chain, about four cycles a byte
 * (which is why the other kinds hash in lanes); unrolled so the loads stay off the chain. */
static inline uint64_t plan_fnv1a(uint64_t h, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		h = (h ^ u[i]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 1]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 2]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 3]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 4]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 5]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 6]) * PLAN_FNV_PRIME;
		h = (h ^ u[i + 7]) * PLAN_FNV_PRIME;
	}
	for (; i < n; i++)
		h = (h ^ u[i]) * PLAN_FNV_PRIME;
	return h;
}

#endif
