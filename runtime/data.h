/* Token files for `piperun --data` and `--eval-data` (runtime/data.c): a file of token ids
 * in one of the formats people have, mapped once per process and read in place by every
 * rank of the process.  How a microbatch's sequences are drawn from it is the model's
 * (rt_data_tokens, model.c; docs/semantics.md "Model").
 *
 * This module depends on nothing else of the runtime, so a fuzz target can link it
 * alone. */
#ifndef RT_DATA_H
#define RT_DATA_H

#include <stddef.h>
#include <stdint.h>

/* --data-format: how a file's bytes are token ids. */
typedef enum {
	RT_DATA_AUTO, // a .npy or llm.c magic, else the name's extension (rt_data_open)
	RT_DATA_NPY,  // NumPy .npy: |u1 <u2 <u4 <i4 <i8, C order, 1-D or 2-D read flat
	RT_DATA_LLMC, // llm.c's .bin: 256 int32 header (magic 20240520, version 1, count), u16
	RT_DATA_U8,   // raw bytes, each a token (byte-level models)
	RT_DATA_U16,  // raw little-endian uint16 (nanoGPT's train.bin)
	RT_DATA_U32,  // raw little-endian uint32
	RT_DATA_COUNT
} RtDataFormat;

extern const char *const rt_data_format_names[RT_DATA_COUNT]; // "auto", "npy", ...

#define RT_DATA_LLMC_MAGIC 20240520
#define RT_DATA_LLMC_HEADER 1024 // bytes: 256 int32

typedef struct RtData {
	const unsigned char *tok; // the first token's first byte
	int64_t n;                // tokens
	int width;                // bytes per token: 1, 2, 4 or 8
	int is_signed;            // <i4, <i8: a negative id is refused (rt_data_check)
	int format;               // RtDataFormat, resolved (never RT_DATA_AUTO)
	void *map;                // the mapping (rt_data_open), or NULL over a caller's buffer
	size_t map_len;
} RtData;

/* Reads the layout of a token file held in buf[0..len): d->tok points into buf.  format
 * RT_DATA_AUTO tells the format by magic, else by name's extension (.npy, .u8, .u16,
 * .bin: u16, .u32).  Returns 0, or -1 with why in err ("dtype '>u2' is not supported
 * ..."); the caller prefixes the file's name. */
int rt_data_parse(RtData *d, const unsigned char *buf, size_t len, int format,
                  const char *name, char *err, size_t n);
/* Maps the file at path and parses it; NULL with why in err. */
RtData *rt_data_open(const char *path, int format, char *err, size_t n);
void rt_data_close(RtData *d);
/* Token i, 0 <= i < d->n (a signed format's negative ids read as negative). */
int64_t rt_data_at(const RtData *d, int64_t i);
/* 0 when every id is in [0, vocab) and the file holds at least one sequence of seq + 1
 * tokens; else -1 and why in err, naming the first bad id's position and value. */
int rt_data_check(const RtData *d, int64_t vocab, int64_t seq, char *err, size_t n);

#endif
