/* Scaled units (units.h): one walk over a unit table per quantity, a row per unit. The
 * figure is rounded before the unit is final, so 999.96 us reads "1 ms", never
 * "1000 us" or "1e+03 kB"; past the last unit it is written whole ("2388 s"). */
#include "units.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	double scale;     // the unit's size in the quantity's base unit
	const char *name; // as printed after the figure
} Unit;

static const Unit time_units[] = {{1, "ns"}, {1e3, "us"}, {1e6, "ms"}, {1e9, "s"}};
static const Unit byte_units[] = {{1, "B"},     {1e3, "kB"},  {1e6, "MB"}, {1e9, "GB"},
                                  {1e12, "TB"}, {1e15, "PB"}, {1e18, "EB"}};

/* v in the largest unit of u[0..nu) it reaches, sig significant digits. */
static char *scaled(char *buf, size_t n, double v, const Unit *u, int nu, int sig)
{
	double lim = 1;
	for (int k = 0; k < sig; k++)
		lim *= 10;
	int i = 0;
	while (i + 1 < nu && (v < 0 ? -v : v) >= u[i + 1].scale)
		i++;
	for (;;) {
		double x = v / u[i].scale;
		double ax = x < 0 ? -x : x;
		if (ax >= lim) { // only past the last unit: no exponent
			snprintf(buf, n, "%.0f %s", x, u[i].name);
			return buf;
		}
		snprintf(buf, n, "%.*g %s", sig, x, u[i].name);
		double r = strtod(buf, NULL);
		if (i + 1 < nu && (r >= 1000 || r <= -1000)) { // rounded up into the next unit
			i++;
			continue;
		}
		return buf;
	}
}

char *plan_time_text(char *buf, size_t n, int64_t ns)
{
	return scaled(buf, n, (double)ns, time_units, 4, 4);
}

char *plan_mem_text(char *buf, size_t n, int64_t b)
{
	return scaled(buf, n, (double)b, byte_units, 7, 3);
}

/* How many rows from i on have row i's text and ids a constant step apart (*step). */
static int run_len(const int *id, const char *text, size_t stride, int i, int nrows, int *step)
{
	const char *t = text + (size_t)i * stride;
	*step = i + 1 < nrows ? id[i + 1] - id[i] : 0;
	if (*step <= 0)
		return 1;
	int k = 1;
	while (i + k < nrows && id[i + k] == id[i] + k * *step &&
	       !strcmp(text + (size_t)(i + k) * stride, t))
		k++;
	return k;
}

void plan_rows_put(FILE *f, const char *pre, const char *one, const char *many, int width,
                   const int *id, const char *text, size_t stride, int nrows)
{
	for (int i = 0, k, step; i < nrows; i += k) {
		char label[96], by[24] = "";
		k = run_len(id, text, stride, i, nrows, &step);
		const char *w = k > 1 ? many : one, *sp = *w ? " " : "";
		if (k > 1 && step > 1)
			snprintf(by, sizeof by, " by %d", step);
		if (k == 1)
			snprintf(label, sizeof label, "%s%s%d", w, sp, id[i]);
		else
			snprintf(label, sizeof label, "%s%s%d-%d%s", w, sp, id[i], id[i + k - 1], by);
		fprintf(f, "%s%-*s%s\n", pre, width, label, text + (size_t)i * stride);
	}
}
