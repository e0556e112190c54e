/* Bump allocation in growing blocks; arena_free releases every block at once.
 * An allocation that cannot be had (the heap is exhausted, or the size does not fit a
 * size_t) is not returned as NULL: arena_oom jumps to the owner, which reports it. */
#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"

enum { ARENA_BLOCK = 65536 };

struct ArenaBlock {
	ArenaBlock *next;
	size_t used, cap;
	_Alignas(16) unsigned char data[];
};

_Noreturn void arena_oom(Arena *a, size_t bytes)
{
	if (!a->oom)
		die("out of memory (%zu bytes) in an arena without an out-of-memory handler", bytes);
	a->failed = bytes;
	longjmp(*a->oom, 1);
}

void *arena_alloc(Arena *a, size_t n)
{
	if (n > SIZE_MAX - sizeof(ArenaBlock) - 16)
		arena_oom(a, n);
	n = (n + 15) & ~(size_t)15;
	ArenaBlock *b = a->head;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
		b = malloc(sizeof *b + cap);
		if (!b)
			arena_oom(a, sizeof *b + cap);
		b->next = a->head;
		b->used = 0;
		b->cap = cap;
		a->head = b;
	}
	void *p = b->data + b->used;
	b->used += n;
	memset(p, 0, n);
	return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
	char *p = arena_alloc(a, n + 1);
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

char *arena_strdup(Arena *a, const char *s)
{
	return arena_strndup(a, s, strlen(s));
}

void arena_free(Arena *a)
{
	while (a->head) {
		ArenaBlock *next = a->head->next;
		free(a->head);
		a->head = next;
	}
}
