/* Safetensors files (runtime/safet.c), the format of piperun's checkpoints: an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype, shape and byte
 * range (data_offsets, from the end of the header) plus a `__metadata__` object of
 * strings, then the tensors' bytes.  A small writer and a strict reader of our own:
 * Debian packages no small C library for the format.  Only F32 tensors are written or
 * read (piperun keeps parameters and optimizer state in f32). */
#ifndef RT_SAFET_H
#define RT_SAFET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RT_ST_NAME 128      // a tensor name's or metadata string's bytes, at most (with NUL)
#define RT_ST_MAX_DIMS 4    // dimensions of a tensor, at most
#define RT_ST_MAX_HEADER (64 << 20) // header bytes, at most

typedef struct {
	char name[RT_ST_NAME];
	int ndim;
	int64_t dim[RT_ST_MAX_DIMS];
	int64_t begin, end; // byte range within the data (after the header)
} RtStTensor;

typedef struct {
	char key[RT_ST_NAME], val[RT_ST_NAME];
} RtStMeta;

/* A file read (rt_st_parse) or being written (rt_st_add): its tensors in header order. */
typedef struct {
	int n, cap;
	RtStTensor *t;
	int nmeta, capmeta;
	RtStMeta *meta;
	const unsigned char *data; // read: the tensors' bytes (inside the caller's buffer)
	int64_t datalen;
} RtStFile;

/* Writing: adds a tensor of f32 elements (its data laid out in order of addition) or a
 * metadata string.  0, or -1 with why in err (out of memory, a name too long). */
int rt_st_add(RtStFile *f, const char *name, int ndim, const int64_t *dim, char *err, size_t n);
int rt_st_meta(RtStFile *f, const char *key, const char *val, char *err, size_t n);
/* The file's first bytes: the length and the header, padded with spaces so the data
 * start 8-aligned (malloc'd, *len of them; NULL when out of memory).  The caller writes
 * each tensor's bytes after them, in order of addition. */
unsigned char *rt_st_header(const RtStFile *f, size_t *len);

/* Reading: parses the n bytes at buf (the whole file), strictly: a header within the
 * file, valid JSON of the shape above with nothing after it but spaces, F32 tensors
 * only, each with a shape whose bytes are its range, names unique, ranges that cover
 * the data exactly, in any order, without overlap.  0, or -1 with the first fault and
 * where it is ("header byte 41: expected ':'", "tensor 'w': ...") in err.  Free with
 * rt_st_free (also after a failed parse). */
int rt_st_parse(RtStFile *f, const unsigned char *buf, size_t n, char *err, size_t errn);
/* The tensor named name, or NULL; the metadata value of key, or NULL. */
const RtStTensor *rt_st_find(const RtStFile *f, const char *name);
const char *rt_st_get(const RtStFile *f, const char *key);
/* Elements of t (the product of its dimensions). */
int64_t rt_st_elems(const RtStTensor *t);
void rt_st_free(RtStFile *f);

#endif
