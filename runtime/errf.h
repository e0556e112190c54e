/* The readers' and the checkpoint code's failure: a message into err[n], printf style,
 * and -1.  One header, no object, so each reader (data.c, safet.c) still builds alone
 * into its fuzz target. */
#ifndef RT_ERRF_H
#define RT_ERRF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int rt_errf(char *err, size_t n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static inline int rt_errf(char *err, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, n, fmt, ap);
	va_end(ap);
	return -1;
}

#endif
