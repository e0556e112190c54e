/* A bump allocator: one per compilation, freed once.  Allocation failure is fatal
 * (out of memory is not a user error we can report usefully). */
#ifndef ARENA_H
#define ARENA_H

#include <stddef.h>

typedef struct ArenaBlock ArenaBlock;
typedef struct {
	ArenaBlock *head;
} Arena;

void *arena_alloc(Arena *a, size_t n);          // zeroed, 16-byte aligned
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
void arena_free(Arena *a);

#endif
