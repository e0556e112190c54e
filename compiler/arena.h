/* A bump allocator: one per compilation, freed once.  Out of memory is the user's to
 * hear about, not a crash: an allocation that fails records its size in `failed` and
 * jumps to the owner's `oom` (pipecc_compile sets it, reports plan_oom_text and
 * returns NULL), so callers never see NULL.  The compiler's few heap allocations
 * outside the arena report their failures the same way (arena_oom). */
#ifndef ARENA_H
#define ARENA_H

#include <setjmp.h>
#include <stddef.h>

typedef struct ArenaBlock ArenaBlock;
typedef struct {
	ArenaBlock *head;
	jmp_buf *oom;  // where a failed allocation jumps; the owner sets it before any use
	size_t failed; // bytes of the allocation that failed
} Arena;

void *arena_alloc(Arena *a, size_t n);          // zeroed, 16-byte aligned; never NULL
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
void arena_free(Arena *a);
/* Records that allocating `bytes` failed and jumps to a->oom (an internal error when
 * the owner set none). */
_Noreturn void arena_oom(Arena *a, size_t bytes);

#endif
