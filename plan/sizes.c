/* The sizes the sized ops move, each stored once in the plan: a table with a hash of
 * open slots beside it, shared by threads that read ranks at once (one lock), and put
 * in increasing order at the end so that a plan is the same however it was made. */
#include "sizes.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t size_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t size_hash(int64_t b, int32_t mask)
{
	uint64_t h = (uint64_t)b * 0x9e3779b97f4a7c15u;
	return (uint32_t)(h >> 32) & (uint32_t)mask;
}

/* p->size_slot (2 sizes_cap entries) rebuilt from p->sizes: slot h holds index + 1 of
 * the size that hashed there or probed on to it, 0 when free. */
static void size_slots_fill(Plan *p)
{
	int32_t mask = 2 * p->sizes_cap - 1;
	memset(p->size_slot, 0, 2 * (size_t)p->sizes_cap * sizeof *p->size_slot);
	for (int32_t i = 0; i < p->nsizes; i++) {
		uint32_t h = size_hash(p->sizes[i], mask);
		while (p->size_slot[h])
			h = (h + 1) & (uint32_t)mask;
		p->size_slot[h] = i + 1;
	}
}

/* Index of bytes in p->sizes, added when new; -1 out of memory.  Caller holds size_lock. */
static int32_t size_index(Plan *p, int64_t bytes)
{
	int32_t mask = 2 * p->sizes_cap - 1;
	for (uint32_t h = p->sizes_cap ? size_hash(bytes, mask) : 0; p->sizes_cap;
	     h = (h + 1) & (uint32_t)mask) {
		int32_t s = p->size_slot[h];
		if (!s)
			break;
		if (p->sizes[s - 1] == bytes)
			return s - 1;
	}
	if (p->nsizes == p->sizes_cap) {
		if (p->sizes_cap >= INT32_MAX / 4)
			return -1;
		int32_t cap = p->sizes_cap ? 2 * p->sizes_cap : 8;
		int64_t *v = realloc(p->sizes, (size_t)cap * sizeof *v);
		if (v)
			p->sizes = v;
		int32_t *slot = calloc(2 * (size_t)cap, sizeof *slot);
		if (!v || !slot) {
			free(slot);
			return -1;
		}
		free(p->size_slot);
		p->size_slot = slot;
		p->sizes_cap = cap;
		mask = 2 * cap - 1;
		size_slots_fill(p);
	}
	uint32_t h = size_hash(bytes, mask);
	while (p->size_slot[h])
		h = (h + 1) & (uint32_t)mask;
	p->sizes[p->nsizes] = bytes;
	p->size_slot[h] = ++p->nsizes;
	return p->nsizes - 1;
}

int plan_op_set_bytes(Plan *p, PlanOp *o, int64_t bytes)
{
	if (plan_ops[o->kind].at == OP_AT_EDGE)
		return bytes != p->edges[o->stage].bytes;
	if (!plan_op_sized(o->kind))
		return bytes != 0;
	pthread_mutex_lock(&size_lock);
	int32_t i = size_index(p, bytes);
	pthread_mutex_unlock(&size_lock);
	if (i < 0)
		return -1;
	o->route = -2 - i;
	return 0;
}

int plan_copy_sizes(Plan *e, const Plan *p)
{
	e->sizes = NULL;
	e->size_slot = NULL;
	e->nsizes = e->sizes_cap = 0;
	if (!p->sizes_cap)
		return 0;
	e->sizes = malloc((size_t)p->sizes_cap * sizeof *e->sizes);
	e->size_slot = malloc(2 * (size_t)p->sizes_cap * sizeof *e->size_slot);
	if (!e->sizes || !e->size_slot) {
		free(e->sizes);
		free(e->size_slot);
		e->sizes = NULL;
		e->size_slot = NULL;
		return -1;
	}
	memcpy(e->sizes, p->sizes, (size_t)p->nsizes * sizeof *e->sizes);
	memcpy(e->size_slot, p->size_slot, 2 * (size_t)p->sizes_cap * sizeof *e->size_slot);
	e->nsizes = p->nsizes;
	e->sizes_cap = p->sizes_cap;
	return 0;
}

static int by_value(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int plan_sizes_canon(Plan *p)
{
	int32_t n = p->nsizes, i = 1;
	while (i < n && p->sizes[i - 1] < p->sizes[i])
		i++;
	if (i >= n)
		return 0;
	int64_t *v = malloc((size_t)n * 2 * sizeof *v); // pairs: value, old index
	int32_t *to = malloc((size_t)n * sizeof *to);
	if (!v || !to) {
		free(v);
		free(to);
		return -1;
	}
	for (i = 0; i < n; i++) {
		v[2 * i] = p->sizes[i];
		v[2 * i + 1] = i;
	}
	qsort(v, (size_t)n, 2 * sizeof *v, by_value); // values are unique
	for (i = 0; i < n; i++) {
		to[v[2 * i + 1]] = i;
		p->sizes[i] = v[2 * i];
	}
	size_slots_fill(p);
	int held = !p->ranks ? 0 : p->view ? p->dims[DIM_PP] + 1 : p->world;
	for (int r = 0; r < held; r++) {
		PlanRank *rk = &p->ranks[r];
		for (int64_t k = 0; !rk->borrowed && k < rk->nops; k++)
			if (rk->ops[k].route < -1)
				rk->ops[k].route = -2 - to[-2 - rk->ops[k].route];
	}
	free(v);
	free(to);
	return 0;
}
