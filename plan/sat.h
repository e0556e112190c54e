/* Saturating 64-bit arithmetic, the one helper for every count and clock that must not
 * wrap: parameter, FLOP and byte counts (tfcount.h), times (the lowering's walk,
 * schedule auto's model, the simulator) and memory sums.  A result past the int64 range
 * is INT64_MAX (or INT64_MIN below it), never a wrapped number, so that the limits
 * (PLAN_COUNT_MAX, PLAN_MEM_MAX, PLAN_TIME_MAX) see a figure too large as too large. */
#ifndef PIPECC_SAT_H
#define PIPECC_SAT_H

#include <stdint.h>

static inline int64_t sat_add(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

static inline int64_t sat_mul(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_mul_overflow(a, b, &r))
		return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
	return r;
}

/* a / b for b >= 1, a saturated a staying saturated. */
static inline int64_t sat_div(int64_t a, int64_t b)
{
	return a == INT64_MAX || a == INT64_MIN ? a : a / b;
}

#endif
