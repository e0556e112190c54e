/* The checker's hash map (map.h): linear probing over a power-of-two table that is
 * sized once for its entries, so it never grows and never needs deleting. */
#include "map.h"

#include <string.h>

void map_init(Arena *a, Map *m, int n)
{
	m->cap = 16;
	while (m->cap < 2 * (size_t)n)
		m->cap *= 2;
	m->slots = arena_alloc(a, m->cap * sizeof *m->slots);
}

/* key's slot: its entry, or the free slot to fill (used == 0). */
Slot *map_slot(Map *m, const char *key, int64_t ikey)
{
	uint64_t h = (uint64_t)ikey * 0x9e3779b97f4a7c15u;
	if (key) {
		h = 1469598103934665603u;
		for (const char *s = key; *s; s++)
			h = (h ^ (unsigned char)*s) * 1099511628211u;
	}
	for (size_t i = (h ^ h >> 29) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		Slot *s = &m->slots[i];
		if (!s->used || (key ? strcmp(s->key, key) == 0 : s->ikey == ikey))
			return s;
	}
}

void map_set(Slot *s, const char *key, int64_t ikey, int val)
{
	*s = (Slot){key, ikey, val, 1};
}
