/* libFuzzer target: the safetensors reader of piperun's checkpoints (runtime/safet.c),
 * on bytes from memory.  A file either reads or gives a message; one that reads has
 * every tensor within its data and its shape's bytes in its range, finds each tensor by
 * its name, and written again by the writer (tensors in data order, the metadata) reads
 * back to the same tensors at the same offsets. */
#include "../../runtime/safet.h"
#include "fuzz.h"

static int by_begin(const void *a, const void *b)
{
	const RtStTensor *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
	RtStFile f;
	char err[512] = "";
	if (rt_st_parse(&f, data, len, err, sizeof err)) {
		fuzz_assert(err[0], "refused without a message");
		rt_st_free(&f);
		return 0;
	}
	fuzz_assert(f.data >= data + 8 && f.data + f.datalen == data + len, "data outside the file");
	for (int i = 0; i < f.n; i++) {
		const RtStTensor *t = &f.t[i];
		fuzz_assert(t->begin >= 0 && t->begin <= t->end && t->end <= f.datalen,
		            "tensor '%s' outside the data", t->name);
		fuzz_assert(t->end - t->begin == 4 * rt_st_elems(t), "tensor '%s': shape and range",
		            t->name);
		fuzz_assert(rt_st_find(&f, t->name) == t, "tensor '%s' not found by name", t->name);
	}
	/* written again */
	RtStTensor *o = malloc((size_t)(f.n + 1) * sizeof *o);
	fuzz_assert(o, "out of memory");
	memcpy(o, f.t, (size_t)f.n * sizeof *o);
	qsort(o, (size_t)f.n, sizeof *o, by_begin);
	RtStFile w = {0};
	for (int i = 0; i < f.n; i++)
		fuzz_assert(!rt_st_add(&w, o[i].name, o[i].ndim ? o[i].ndim : 1,
		                       o[i].ndim ? o[i].dim : (const int64_t[]){1}, err, sizeof err) ||
		                o[i].ndim == 0, "%s", err);
	for (int i = 0; i < f.nmeta; i++)
		fuzz_assert(!rt_st_meta(&w, f.meta[i].key, f.meta[i].val, err, sizeof err), "%s", err);
	size_t h;
	unsigned char *hdr = rt_st_header(&w, &h);
	fuzz_assert(hdr, "out of memory");
	unsigned char *again = malloc(h + (size_t)f.datalen + 1);
	fuzz_assert(again, "out of memory");
	memcpy(again, hdr, h);
	memcpy(again + h, f.data, (size_t)f.datalen);
	RtStFile g;
	int scalars = 0; // a 0-dimensional tensor is written as [1]: same bytes, other shape
	for (int i = 0; i < f.n; i++)
		scalars += f.t[i].ndim == 0;
	int rc = rt_st_parse(&g, again, h + (size_t)f.datalen, err, sizeof err);
	fuzz_assert(rc == 0, "the writer's own file refused: %s", err);
	fuzz_assert(g.n == f.n && g.nmeta == f.nmeta, "another count of tensors or metadata");
	for (int i = 0; i < f.n; i++) {
		const RtStTensor *t = rt_st_find(&g, f.t[i].name);
		fuzz_assert(t && t->begin == f.t[i].begin && t->end == f.t[i].end &&
		                (scalars || (t->ndim == f.t[i].ndim &&
		                             !memcmp(t->dim, f.t[i].dim, (size_t)t->ndim * 8))),
		            "tensor '%s' read back otherwise", f.t[i].name);
	}
	for (int i = 0; i < f.nmeta; i++)
		fuzz_assert(!strcmp(rt_st_get(&g, f.meta[i].key), f.meta[i].val), "metadata '%s'",
		            f.meta[i].key);
	rt_st_free(&g);
	rt_st_free(&w);
	rt_st_free(&f);
	free(again);
	free(hdr);
	free(o);
	return 0;
}
