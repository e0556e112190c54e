/* Safetensors files (safet.h): a writer that states a header for tensors laid out in
 * order, and a strict reader.  The reader trusts nothing: every length is checked
 * against the buffer before it is used, every header byte is either the grammar's or
 * an error naming its offset, and the tensors' ranges must tile the data exactly (the
 * format's own rule: no holes, no overlap), so a truncated or padded file is refused
 * before a checksum is even consulted. */
#include "safet.h"
#include "errf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing ---- */

int rt_st_add(RtStFile *f, const char *name, int ndim, const int64_t *dim, char *err, size_t n)
{
	if (strlen(name) >= RT_ST_NAME || ndim < 1 || ndim > RT_ST_MAX_DIMS)
		return rt_errf(err, n, "tensor '%s': name longer than %d bytes or %d dimensions", name,
		            RT_ST_NAME - 1, ndim);
	if (f->n == f->cap) {
		int cap = f->cap ? 2 * f->cap : 16;
		RtStTensor *t = realloc(f->t, (size_t)cap * sizeof *t);
		if (!t)
			return rt_errf(err, n, "out of memory");
		f->t = t;
		f->cap = cap;
	}
	RtStTensor *t = &f->t[f->n];
	memset(t, 0, sizeof *t);
	strcpy(t->name, name);
	t->ndim = ndim;
	memcpy(t->dim, dim, (size_t)ndim * sizeof *dim);
	t->begin = f->datalen;
	t->end = t->begin + 4 * rt_st_elems(t);
	f->datalen = t->end;
	f->n++;
	return 0;
}

int rt_st_meta(RtStFile *f, const char *key, const char *val, char *err, size_t n)
{
	if (strlen(key) >= RT_ST_NAME || strlen(val) >= RT_ST_NAME)
		return rt_errf(err, n, "metadata '%s': longer than %d bytes", key, RT_ST_NAME - 1);
	if (f->nmeta == f->capmeta) {
		int cap = f->capmeta ? 2 * f->capmeta : 8;
		RtStMeta *m = realloc(f->meta, (size_t)cap * sizeof *m);
		if (!m)
			return rt_errf(err, n, "out of memory");
		f->meta = m;
		f->capmeta = cap;
	}
	strcpy(f->meta[f->nmeta].key, key);
	strcpy(f->meta[f->nmeta].val, val);
	f->nmeta++;
	return 0;
}

/* A JSON string of s (our names and values: printable ASCII, escaped where JSON says). */
static void jstr(FILE *o, const char *s)
{
	fputc('"', o);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(o, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(o, "\\u%04x", c);
		else
			fputc(c, o);
	}
	fputc('"', o);
}

unsigned char *rt_st_header(const RtStFile *f, size_t *len)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&buf, &n);
	if (!m)
		return NULL;
	fputs("        {\"__metadata__\":{", m); // 8 bytes for the length, filled below
	for (int i = 0; i < f->nmeta; i++) {
		if (i)
			fputc(',', m);
		jstr(m, f->meta[i].key);
		fputc(':', m);
		jstr(m, f->meta[i].val);
	}
	fputc('}', m);
	for (int i = 0; i < f->n; i++) {
		const RtStTensor *t = &f->t[i];
		fputc(',', m);
		jstr(m, t->name);
		fputs(":{\"dtype\":\"F32\",\"shape\":[", m);
		for (int d = 0; d < t->ndim; d++)
			fprintf(m, "%s%" PRId64, d ? "," : "", t->dim[d]);
		fprintf(m, "],\"data_offsets\":[%" PRId64 ",%" PRId64 "]}", t->begin, t->end);
	}
	fputc('}', m);
	while (ftell(m) % 8) // the data 8-aligned, as the format recommends
		fputc(' ', m);
	if (fclose(m)) {
		free(buf);
		return NULL;
	}
	for (int i = 0; i < 8; i++)
		buf[i] = (char)((uint64_t)(n - 8) >> (8 * i));
	*len = n;
	return (unsigned char *)buf;
}

/* ---- reading ---- */

typedef struct {
	const unsigned char *s;
	size_t n, i;
	char *err;
	size_t errn;
} Json;

static int jfail(Json *j, const char *what)
{
	return rt_errf(j->err, j->errn, "header byte %zu: %s", j->i, what);
}

static void ws(Json *j)
{
	while (j->i < j->n && strchr(" \t\r\n", j->s[j->i]) && j->s[j->i])
		j->i++;
}

static int expect(Json *j, char c)
{
	ws(j);
	if (j->i >= j->n || j->s[j->i] != c) {
		char what[32];
		snprintf(what, sizeof what, "expected '%c'", c);
		return jfail(j, what);
	}
	j->i++;
	return 0;
}

/* Peeks the next non-space byte: c there, consumed? */
static int next_is(Json *j, char c)
{
	ws(j);
	if (j->i < j->n && j->s[j->i] == c) {
		j->i++;
		return 1;
	}
	return 0;
}

/* A string of printable ASCII (escapes of it too) into out[RT_ST_NAME]. */
static int jstring(Json *j, char *out)
{
	if (expect(j, '"'))
		return -1;
	size_t k = 0;
	for (;;) {
		if (j->i >= j->n)
			return jfail(j, "unterminated string");
		unsigned char c = j->s[j->i++];
		if (c == '"')
			break;
		if (c < 0x20 || c >= 0x7f)
			return jfail(j, "a control or non-ASCII byte in a string");
		if (c == '\\') {
			if (j->i >= j->n)
				return jfail(j, "unterminated string");
			const char *esc = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
			unsigned char e = j->s[j->i++];
			const char *p = e ? strchr(esc, e) : NULL;
			if (p) {
				c = (unsigned char)to[p - esc];
			} else if (e == 'u' && j->i + 4 <= j->n) {
				unsigned v = 0;
				for (int d = 0; d < 4; d++) {
					unsigned char h = j->s[j->i++];
					int x = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
					        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
					if (x < 0)
						return jfail(j, "bad \\u escape");
					v = v * 16 + (unsigned)x;
				}
				if (v == 0 || v >= 0x80)
					return jfail(j, "a \\u escape outside ASCII (unsupported)");
				c = (unsigned char)v;
			} else {
				return jfail(j, "bad escape");
			}
		}
		if (k + 1 >= RT_ST_NAME)
			return jfail(j, "string longer than the reader's limit");
		out[k++] = (char)c;
	}
	out[k] = 0;
	return 0;
}

/* A non-negative integer below 2^53, no leading zeros. */
static int jint(Json *j, int64_t *v)
{
	ws(j);
	size_t s = j->i;
	int64_t x = 0;
	while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
		if (x > ((int64_t)1 << 53) / 10)
			return jfail(j, "integer too large");
		x = x * 10 + (j->s[j->i++] - '0');
	}
	if (j->i == s)
		return jfail(j, "expected a non-negative integer");
	if (j->i - s > 1 && j->s[s] == '0')
		return jfail(j, "integer with a leading zero");
	*v = x;
	return 0;
}

/* [a, b, ...] of up to max integers; *n of them. */
static int jints(Json *j, int64_t *v, int max, int *n)
{
	if (expect(j, '['))
		return -1;
	*n = 0;
	if (next_is(j, ']'))
		return 0;
	do {
		if (*n == max)
			return jfail(j, "too many numbers in a list");
		if (jint(j, &v[(*n)++]))
			return -1;
	} while (next_is(j, ','));
	return expect(j, ']');
}

static int tensor(Json *j, RtStTensor *t)
{
	int seen = 0, noff = 0;
	int64_t off[2];
	char key[RT_ST_NAME], val[RT_ST_NAME];
	if (expect(j, '{'))
		return -1;
	do {
		size_t at = j->i;
		if (jstring(j, key) || expect(j, ':'))
			return -1;
		int bit = !strcmp(key, "dtype") ? 1 : !strcmp(key, "shape") ? 2
		          : !strcmp(key, "data_offsets") ? 4 : 0;
		if (!bit || (seen & bit)) {
			j->i = at;
			return rt_errf(j->err, j->errn, "header byte %zu: tensor '%s': %s key '%s'", at, t->name,
			            bit ? "repeated" : "unknown", key);
		}
		seen |= bit;
		if (bit == 1) {
			if (jstring(j, val))
				return -1;
			if (strcmp(val, "F32"))
				return rt_errf(j->err, j->errn, "tensor '%s': dtype %s (piperun reads F32 only)",
				            t->name, val);
		} else if (bit == 2) {
			if (jints(j, t->dim, RT_ST_MAX_DIMS, &t->ndim))
				return -1;
		} else if (jints(j, off, 2, &noff)) {
			return -1;
		}
	} while (next_is(j, ','));
	if (expect(j, '}'))
		return -1;
	if (seen != 7)
		return rt_errf(j->err, j->errn, "tensor '%s': needs dtype, shape and data_offsets", t->name);
	if (noff != 2)
		return rt_errf(j->err, j->errn, "tensor '%s': data_offsets is not [begin, end]", t->name);
	t->begin = off[0];
	t->end = off[1];
	int64_t e = 1;
	for (int d = 0; d < t->ndim; d++) {
		if (t->dim[d] && e > (((int64_t)1 << 53) / 4) / t->dim[d])
			return rt_errf(j->err, j->errn, "tensor '%s': shape too large", t->name);
		e *= t->dim[d];
	}
	if (t->begin > t->end || t->end - t->begin != 4 * e)
		return rt_errf(j->err, j->errn, "tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "] "
		            "do not hold its %" PRId64 " F32 elements", t->name, t->begin, t->end, e);
	return 0;
}

static int by_begin(const void *a, const void *b)
{
	const RtStTensor *x = *(const RtStTensor *const *)a, *y = *(const RtStTensor *const *)b;
	return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* The tensors' ranges tile [0, datalen). */
static int tiled(RtStFile *f, char *err, size_t errn)
{
	const RtStTensor **o = malloc((size_t)(f->n ? f->n : 1) * sizeof *o);
	if (!o)
		return rt_errf(err, errn, "out of memory");
	for (int i = 0; i < f->n; i++)
		o[i] = &f->t[i];
	qsort(o, (size_t)f->n, sizeof *o, by_begin);
	int64_t at = 0;
	int rc = 0;
	for (int i = 0; i < f->n && !rc; i++) {
		if (o[i]->begin != at)
			rc = rt_errf(err, errn, "tensor '%s': its data start at byte %" PRId64 " of the data, "
			          "not %" PRId64 " (%s)", o[i]->name, o[i]->begin, at,
			          o[i]->begin < at ? "overlap" : "a hole");
		at = o[i]->end;
	}
	if (!rc && at != f->datalen)
		rc = rt_errf(err, errn, "the tensors end at byte %" PRId64 " of the data, the file has %"
		          PRId64 " (%s)", at, f->datalen, at > f->datalen ? "truncated" : "trailing bytes");
	free(o);
	return rc;
}

int rt_st_parse(RtStFile *f, const unsigned char *buf, size_t n, char *err, size_t errn)
{
	memset(f, 0, sizeof *f);
	if (n < 8)
		return rt_errf(err, errn, "%zu bytes: shorter than the 8-byte header length", n);
	uint64_t h = 0;
	for (int i = 0; i < 8; i++)
		h |= (uint64_t)buf[i] << (8 * i);
	if (h < 2 || h > RT_ST_MAX_HEADER || h > n - 8)
		return rt_errf(err, errn, "header length %" PRIu64 " %s", h,
		            h > n - 8 ? "runs past the end of the file (truncated?)"
		                      : "out of range");
	Json j = {buf + 8, (size_t)h, 0, err, errn};
	if (expect(&j, '{'))
		return -1;
	int meta = 0;
	if (!next_is(&j, '}')) {
		do {
			char key[RT_ST_NAME];
			size_t at = j.i;
			if (jstring(&j, key) || expect(&j, ':'))
				return -1;
			if (!strcmp(key, "__metadata__")) {
				if (meta++)
					return jfail(&j, "a second __metadata__");
				if (expect(&j, '{'))
					return -1;
				if (next_is(&j, '}'))
					continue;
				do {
					char k[RT_ST_NAME], v[RT_ST_NAME];
					if (jstring(&j, k) || expect(&j, ':') || jstring(&j, v))
						return -1;
					if (rt_st_get(f, k))
						return rt_errf(err, errn, "metadata '%s' given twice", k);
					if (rt_st_meta(f, k, v, err, errn))
						return -1;
				} while (next_is(&j, ','));
				if (expect(&j, '}'))
					return -1;
				continue;
			}
			if (rt_st_find(f, key))
				return rt_errf(err, errn, "header byte %zu: tensor '%s' named twice", at, key);
			int64_t one = 1;
			if (rt_st_add(f, key, 1, &one, err, errn)) // its fields follow
				return -1;
			RtStTensor *t = &f->t[f->n - 1];
			memset(t->dim, 0, sizeof t->dim);
			t->ndim = 0;
			if (tensor(&j, t))
				return -1;
		} while (next_is(&j, ','));
		if (expect(&j, '}'))
			return -1;
	}
	while (j.i < j.n && j.s[j.i] == ' ')
		j.i++;
	if (j.i != j.n)
		return jfail(&j, "bytes after the header's object");
	f->data = buf + 8 + h;
	f->datalen = (int64_t)(n - 8 - h);
	return tiled(f, err, errn);
}

const RtStTensor *rt_st_find(const RtStFile *f, const char *name)
{
	for (int i = 0; i < f->n; i++)
		if (!strcmp(f->t[i].name, name))
			return &f->t[i];
	return NULL;
}

const char *rt_st_get(const RtStFile *f, const char *key)
{
	for (int i = 0; i < f->nmeta; i++)
		if (!strcmp(f->meta[i].key, key))
			return f->meta[i].val;
	return NULL;
}

int64_t rt_st_elems(const RtStTensor *t)
{
	int64_t e = 1;
	for (int d = 0; d < t->ndim; d++)
		e *= t->dim[d];
	return e;
}

void rt_st_free(RtStFile *f)
{
	free(f->t);
	free(f->meta);
	memset(f, 0, sizeof *f);
}
