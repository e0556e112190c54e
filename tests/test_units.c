/* Figures as people read them (plan/units.h): a time and a size scaled to the unit that
 * keeps them under 1000, rounding that carries into the next unit, figures past the
 * last unit written whole, and uniform rows of a per-rank table said once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../plan/units.h"

typedef struct {
	int64_t v;
	const char *want;
} Case;

static void units__time__scaled_4_digits(void **state)
{
	(void)state;
	static const Case c[] = {
		{0, "0 ns"},           {999, "999 ns"},         {1000, "1 us"},
		{57123, "57.12 us"},   {999960, "1 ms"},        {347200000, "347.2 ms"},
		{2285064643, "2.285 s"}, {INT64_MAX, "9223372037 s"}, {-1500, "-1.5 us"},
	};
	char buf[32];
	for (size_t i = 0; i < sizeof c / sizeof *c; i++)
		assert_string_equal(plan_time_text(buf, sizeof buf, c[i].v), c[i].want);
}

static void units__bytes__scaled_3_digits(void **state)
{
	(void)state;
	static const Case c[] = {
		{0, "0 B"},         {999, "999 B"},        {1000, "1 kB"},    {1152, "1.15 kB"},
		{999600, "1 MB"},   {80000000000, "80 GB"}, {INT64_MAX, "9.22 EB"},
	};
	char buf[32];
	for (size_t i = 0; i < sizeof c / sizeof *c; i++)
		assert_string_equal(plan_mem_text(buf, sizeof buf, c[i].v), c[i].want);
}

/* rows(ids, texts, one, many): what plan_rows_put writes, in a static buffer. */
static const char *rows(const int *id, const char *const *t, int n, const char *one,
                        const char *many)
{
	static char out[1024];
	char text[16][16];
	for (int i = 0; i < n; i++)
		snprintf(text[i], sizeof text[i], "%s", t[i]);
	FILE *f = fmemopen(out, sizeof out, "w");
	assert_non_null(f);
	plan_rows_put(f, "", one, many, 0, id, text[0], sizeof text[0], n);
	fclose(f);
	return out;
}

static void units__rows__runs_said_once(void **state)
{
	(void)state;
	const int seq[] = {0, 1, 2, 3, 4, 5}, strided[] = {0, 2, 4, 6}, gap[] = {0, 1, 3};
	const char *const a[] = {": x", ": y", ": y", ": y", ": y", ": x"};
	assert_string_equal(rows(seq, a, 6, "rank", "ranks"),
	                    "rank 0: x\nranks 1-4: y\nrank 5: x\n");
	const char *const same[] = {" x", " x", " x", " x"};
	assert_string_equal(rows(strided, same, 4, "", ""), "0-6 by 2 x\n");
	/* ids that do not keep one step are separate runs */
	assert_string_equal(rows(gap, same, 3, "rank", "ranks"), "ranks 0-1 x\nrank 3 x\n");
	assert_string_equal(rows(seq, same, 1, "rank", "ranks"), "rank 0 x\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(units__time__scaled_4_digits),
		cmocka_unit_test(units__bytes__scaled_3_digits),
		cmocka_unit_test(units__rows__runs_said_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
