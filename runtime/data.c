/* Token files (data.h): the layout of a file of token ids, found from its header or its
 * name, over bytes mapped once per process.  Nothing is copied or converted: a token is
 * read where it lies (rt_data_at), little-endian whatever the host, so a file of
 * gigabytes costs its pages, shared by every rank of the process.
 *
 * A .npy header is a Python dict literal ({'descr': '<u2', 'fortran_order': False,
 * 'shape': (123,), }); the parser below reads that grammar and nothing more (strings,
 * True/False, tuples of integers), and refuses any other key, so a file it accepts means
 * what it says.  The formats' facts (names, widths) are the tables at the top. */
#include "data.h"
#include "errf.h"
#include "mapf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const rt_data_format_names[RT_DATA_COUNT] = {"auto", "npy", "llmc", "u8", "u16",
                                                         "u32"};

/* The .npy dtypes read: NumPy's descr, bytes per id, signedness. */
static const struct {
	const char *descr;
	int width, is_signed;
} npy_types[] = {
	{"|u1", 1, 0}, {"<u2", 2, 0}, {"<u4", 4, 0}, {"<i4", 4, 1}, {"<i8", 8, 1},
};
#define NPY_NTYPES (int)(sizeof npy_types / sizeof *npy_types)

/* Raw formats: the extension that names each, and its width. */
static const struct {
	const char *ext;
	int format, width;
} raw_exts[] = {
	{".u8", RT_DATA_U8, 1}, {".u16", RT_DATA_U16, 2}, {".bin", RT_DATA_U16, 2},
	{".u32", RT_DATA_U32, 4},
};
#define RAW_NEXTS (int)(sizeof raw_exts / sizeof *raw_exts)

static uint64_t le(const unsigned char *p, int width)
{
	uint64_t v = 0;
	for (int i = width - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

int64_t rt_data_at(const RtData *d, int64_t i)
{
	uint64_t v = le(d->tok + i * d->width, d->width);
	if (d->is_signed && d->width == 4)
		return (int64_t)(int32_t)(uint32_t)v;
	return (int64_t)v; // <i8 as two's complement; u64 never occurs
}

/* ---- the .npy header: a cursor over the dict literal ---- */

typedef struct {
	const char *s, *end;
} Cur;

static void ws(Cur *c)
{
	while (c->s < c->end && (*c->s == ' ' || *c->s == '\t' || *c->s == '\n' || *c->s == '\r'))
		c->s++;
}

static int eat(Cur *c, char ch)
{
	ws(c);
	if (c->s < c->end && *c->s == ch) {
		c->s++;
		return 1;
	}
	return 0;
}

/* A quoted string (' or ") into out (at most n - 1 characters). */
static int str(Cur *c, char *out, size_t n)
{
	ws(c);
	if (c->s >= c->end || (*c->s != '\'' && *c->s != '"'))
		return 0;
	char q = *c->s++;
	size_t k = 0;
	while (c->s < c->end && *c->s != q) {
		if (k + 1 >= n)
			return 0;
		out[k++] = *c->s++;
	}
	out[k] = 0;
	return c->s < c->end && *c->s++ == q;
}

static int word(Cur *c, const char *w)
{
	ws(c);
	size_t k = strlen(w);
	if ((size_t)(c->end - c->s) < k || memcmp(c->s, w, k))
		return 0;
	c->s += k;
	return 1;
}

/* A tuple of non-negative integers, at most 8: "()", "(5,)", "(2, 3)". */
static int tuple(Cur *c, int64_t *dims, int *nd)
{
	*nd = 0;
	if (!eat(c, '('))
		return 0;
	for (;;) {
		ws(c);
		if (eat(c, ')'))
			return 1;
		if (*nd == 8 || c->s >= c->end || *c->s < '0' || *c->s > '9')
			return 0;
		int64_t v = 0;
		while (c->s < c->end && *c->s >= '0' && *c->s <= '9') {
			if (v > (INT64_MAX - 9) / 10)
				return 0;
			v = v * 10 + (*c->s++ - '0');
		}
		dims[(*nd)++] = v;
		if (!eat(c, ',') && !(ws(c), c->s < c->end && *c->s == ')'))
			return 0;
	}
}

/* Reads 'descr', 'fortran_order' and 'shape' from header text h[0..len). */
static int npy_dict(const char *h, size_t len, char *descr, size_t dn, int *fortran,
                    int64_t *dims, int *nd, char *err, size_t n)
{
	Cur c = {h, h + len};
	int seen = 0;
	if (!eat(&c, '{'))
		return rt_errf(err, n, ".npy header is not a dict literal");
	while (!eat(&c, '}')) {
		char key[32];
		if (!str(&c, key, sizeof key) || !eat(&c, ':'))
			return rt_errf(err, n, ".npy header: a key and ':' expected");
		if (!strcmp(key, "descr")) {
			if (!str(&c, descr, dn))
				return rt_errf(err, n, ".npy header: 'descr' is not a short string");
			seen |= 1;
		} else if (!strcmp(key, "fortran_order")) {
			if (word(&c, "True"))
				*fortran = 1;
			else if (word(&c, "False"))
				*fortran = 0;
			else
				return rt_errf(err, n, ".npy header: 'fortran_order' is not True or False");
			seen |= 2;
		} else if (!strcmp(key, "shape")) {
			if (!tuple(&c, dims, nd))
				return rt_errf(err, n, ".npy header: 'shape' is not a tuple of integers");
			seen |= 4;
		} else {
			return rt_errf(err, n, ".npy header: unknown key '%s'", key);
		}
		if (!eat(&c, ',') && !(ws(&c), c.s < c.end && *c.s == '}'))
			return rt_errf(err, n, ".npy header: ',' or '}' expected");
	}
	if (seen != 7)
		return rt_errf(err, n, ".npy header lacks '%s'",
		            !(seen & 1) ? "descr" : !(seen & 2) ? "fortran_order" : "shape");
	return 0;
}

static int parse_npy(RtData *d, const unsigned char *buf, size_t len, char *err, size_t n)
{
	if (len < 10 || memcmp(buf, "\x93NUMPY", 6))
		return rt_errf(err, n, "not a .npy file (no \\x93NUMPY magic)");
	int major = buf[6];
	size_t at = major == 1 ? 10 : 12;
	if (major < 1 || major > 3)
		return rt_errf(err, n, ".npy version %d is not supported (1, 2 or 3)", major);
	if (len < at)
		return rt_errf(err, n, ".npy header is cut short");
	size_t hlen = (size_t)le(buf + 8, major == 1 ? 2 : 4);
	if (hlen > len - at)
		return rt_errf(err, n, ".npy header of %zu bytes runs past the file's end", hlen);
	char descr[16];
	int fortran = 0, nd = 0;
	int64_t dims[8];
	if (npy_dict((const char *)buf + at, hlen, descr, sizeof descr, &fortran, dims, &nd, err, n))
		return -1;
	int t = 0;
	while (t < NPY_NTYPES && strcmp(npy_types[t].descr, descr))
		t++;
	if (t == NPY_NTYPES)
		return rt_errf(err, n, "dtype '%s' is not supported (token ids are |u1, <u2, <u4, <i4 or "
		                    "<i8: unsigned or signed integers, little-endian)", descr);
	if (fortran)
		return rt_errf(err, n, "fortran_order is True: only C order is read (np.ascontiguousarray)");
	if (nd < 1 || nd > 2)
		return rt_errf(err, n, "the array has %d dimensions; a token file has 1 or 2 (read flat)",
		            nd);
	int64_t count = 1;
	for (int i = 0; i < nd; i++) {
		if (dims[i] && count > INT64_MAX / 8 / dims[i])
			return rt_errf(err, n, ".npy shape is too large");
		count *= dims[i];
	}
	d->width = npy_types[t].width;
	d->is_signed = npy_types[t].is_signed;
	d->tok = buf + at + hlen;
	if ((uint64_t)count * (uint64_t)d->width > len - at - hlen)
		return rt_errf(err, n, "the shape says %lld tokens of %d bytes, the file holds %zu bytes "
		                    "of data", (long long)count, d->width, len - at - hlen);
	d->n = count;
	return 0;
}

static int parse_llmc(RtData *d, const unsigned char *buf, size_t len, char *err, size_t n)
{
	if (len < RT_DATA_LLMC_HEADER || le(buf, 4) != RT_DATA_LLMC_MAGIC)
		return rt_errf(err, n, "not an llm.c token file (no %d-byte header with magic %d)",
		            RT_DATA_LLMC_HEADER, RT_DATA_LLMC_MAGIC);
	uint64_t version = le(buf + 4, 4), count = le(buf + 8, 4);
	if (version != 1)
		return rt_errf(err, n, "llm.c token file version %llu is not supported (1: uint16 tokens)",
		            (unsigned long long)version);
	if (count * 2 > len - RT_DATA_LLMC_HEADER)
		return rt_errf(err, n, "the llm.c header says %llu tokens, the file holds %zu",
		            (unsigned long long)count, (len - RT_DATA_LLMC_HEADER) / 2);
	d->tok = buf + RT_DATA_LLMC_HEADER;
	d->width = 2;
	d->n = (int64_t)count;
	return 0;
}

/* The format of an RT_DATA_AUTO file: a magic first, then the name's extension. */
static int detect(const unsigned char *buf, size_t len, const char *name, char *err, size_t n)
{
	if (len >= 6 && !memcmp(buf, "\x93NUMPY", 6))
		return RT_DATA_NPY;
	if (len >= 4 && le(buf, 4) == RT_DATA_LLMC_MAGIC)
		return RT_DATA_LLMC;
	size_t k = name ? strlen(name) : 0;
	for (int e = 0; e < RAW_NEXTS; e++) {
		size_t m = strlen(raw_exts[e].ext);
		if (k >= m && !strcmp(name + k - m, raw_exts[e].ext))
			return raw_exts[e].format;
	}
	if (k >= 4 && !strcmp(name + k - 4, ".npy"))
		return RT_DATA_NPY; // its magic is missing: parse_npy says so
	return rt_errf(err, n, "cannot tell the token format: no .npy or llm.c magic, and the name "
	                    "does not end in .npy, .u8, .u16, .bin or .u32 (--data-format)");
}

int rt_data_parse(RtData *d, const unsigned char *buf, size_t len, int format,
                  const char *name, char *err, size_t n)
{
	memset(d, 0, sizeof *d);
	if (format == RT_DATA_AUTO && (format = detect(buf, len, name, err, n)) < 0)
		return -1;
	d->format = format;
	if (format == RT_DATA_NPY)
		return parse_npy(d, buf, len, err, n);
	if (format == RT_DATA_LLMC)
		return parse_llmc(d, buf, len, err, n);
	d->width = format == RT_DATA_U8 ? 1 : format == RT_DATA_U16 ? 2 : 4;
	if (len % (size_t)d->width)
		return rt_errf(err, n, "%zu bytes are not a whole number of %d-byte tokens (%s)", len,
		            d->width, rt_data_format_names[format]);
	d->tok = buf;
	d->n = (int64_t)(len / (size_t)d->width);
	return 0;
}

RtData *rt_data_open(const char *path, int format, char *err, size_t n)
{
	void *map;
	size_t len;
	int e = rt_map_file(path, &map, &len); // mapf.h: pages come in as sampled
	if (e) {
		rt_errf(err, n, "cannot %s the token file: %s", len ? "map" : "read", strerror(e));
		return NULL;
	}
	RtData *d = malloc(sizeof *d);
	if (!d || rt_data_parse(d, map ? map : (const void *)"", len, format, path, err, n)) {
		if (!d)
			rt_errf(err, n, "out of memory");
		free(d);
		rt_unmap_file(map, len);
		return NULL;
	}
	d->map = map;
	d->map_len = len;
	return d;
}

void rt_data_close(RtData *d)
{
	if (!d)
		return;
	rt_unmap_file(d->map, d->map_len);
	free(d);
}

int rt_data_check(const RtData *d, int64_t vocab, int64_t seq, char *err, size_t n)
{
	if (d->n < seq + 1)
		return rt_errf(err, n, "%lld tokens, shorter than one sequence of %lld (the plan's "
		                    "sequence length + 1)", (long long)d->n, (long long)(seq + 1));
	/* Every id once, before the run: a bad id is found here, where it can be named, not
	 * as a wrong row of the embedding in some step. */
	for (int64_t i = 0; i < d->n; i++) {
		int64_t v = rt_data_at(d, i);
		if (v < 0 || v >= vocab)
			return rt_errf(err, n, "token %lld (0-based) is %lld, not a token id of the plan's "
			                    "vocabulary of %lld", (long long)i, (long long)v, (long long)vocab);
	}
	return 0;
}
