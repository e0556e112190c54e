/* A test-only allocation-failure hook.  The tools are linked a second time, from the
 * same objects, with `-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,
 * --wrap=strndup` and this file (make builds them in $(BUILD)/failalloc/), so every
 * allocation the project's own code asks for, the grammar's generated code included,
 * comes here first.  With PIPECC_FAIL_ALLOC=N the N-th of them fails (returns NULL
 * with errno ENOMEM); with N+ the N-th and every later one fails, as when the heap is
 * really exhausted.  The first injected failure prints one line, "failalloc: failing
 * allocation N (K bytes)", on standard error, so a test knows that it happened;
 * without the variable the wrappers only count.  Allocations inside the C library
 * (stdio buffers, getline) are not seen.  The production tools never contain this
 * file: its counter is the one mutable global, on purpose. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

static struct {
	long at;     // the allocation that fails first, 1-based; 0: none; -1: not read yet
	int persist; // N+: every later one fails too
	long count;  // allocations seen
} fa = {.at = -1};

static int fail_now(size_t bytes)
{
	if (__atomic_load_n(&fa.at, __ATOMIC_ACQUIRE) < 0) {
		const char *e = getenv("PIPECC_FAIL_ALLOC");
		char *end = NULL;
		long at = e ? strtol(e, &end, 10) : 0;
		fa.persist = end && *end == '+';
		__atomic_store_n(&fa.at, at > 0 ? at : 0, __ATOMIC_RELEASE);
	}
	long at = fa.at;
	if (at == 0)
		return 0;
	long k = __atomic_add_fetch(&fa.count, 1, __ATOMIC_RELAXED);
	if (k < at || (k > at && !fa.persist))
		return 0;
	if (k == at) { // no stdio here: it may allocate
		char line[96];
		int len = snprintf(line, sizeof line, "failalloc: failing allocation %ld (%zu bytes)\n",
		                   k, bytes);
		if (len > 0 && write(2, line, (size_t)len) < 0)
			return 1;
	}
	errno = ENOMEM;
	return 1;
}

void *__wrap_malloc(size_t n)
{
	return fail_now(n) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return fail_now(n * size) ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
	return fail_now(n) ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
	return fail_now(strlen(s) + 1) ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
	return fail_now(strnlen(s, n) + 1) ? NULL : __real_strndup(s, n);
}
