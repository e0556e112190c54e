/* An open-addressing hash map from a string or an integer to an index, in the
 * compilation's arena, so the checker's lookups stay O(1) however many stages and
 * skips a file holds. */
#ifndef MAP_H
#define MAP_H

#include <stdint.h>

#include "arena.h"

typedef struct {
	const char *key;  // string keys
	int64_t ikey;     // integer keys, when the map's key is NULL
	int val;
	uint8_t used;
} Slot;

typedef struct {
	Slot *slots;
	size_t cap;       // power of two, at least twice the entries
} Map;

/* A map for n entries. */
void map_init(Arena *a, Map *m, int n);
/* key's slot (a string key, or ikey when key is NULL): its entry, or the free slot to
 * fill (used == 0). */
Slot *map_slot(Map *m, const char *key, int64_t ikey);
void map_set(Slot *s, const char *key, int64_t ikey, int val);

#endif
