/* Checkpoint files (runtime/safet.c, runtime/ckpt.c): safetensors written by our writer
 * read back tensor by tensor and byte by byte, with their metadata; every refusal of the
 * strict reader with the place it names (the header's byte, the tensor); and a
 * checkpoint directory made here read through rt_ckpt_open, whose refusals name the
 * file and the tensor (a flipped bit, a truncated file, a manifest line). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/rt_private.h"
#include "../runtime/safet.h"
#include "../plan/checksum.h"

static char dir[] = "/tmp/test_ckpt_XXXXXX";

/* A file of our writer: tensors a (2x3), b (5) and c (1x2x2x1), element i of the whole
 * data being i + 0.5; its bytes in *n (malloc'd). */
static unsigned char *sample(size_t *n)
{
	RtStFile f = {0};
	char err[256];
	int64_t a[2] = {2, 3}, b[1] = {5}, c[4] = {1, 2, 2, 1};
	assert_int_equal(rt_st_add(&f, "layer0.linear.0", 2, a, err, sizeof err), 0);
	assert_int_equal(rt_st_add(&f, "layer0.linear.1", 1, b, err, sizeof err), 0);
	assert_int_equal(rt_st_add(&f, "odd \"name\"", 4, c, err, sizeof err), 0);
	assert_int_equal(rt_st_meta(&f, "step", "7", err, sizeof err), 0);
	assert_int_equal(rt_st_meta(&f, "format", "pipecc-checkpoint", err, sizeof err), 0);
	size_t h;
	unsigned char *hdr = rt_st_header(&f, &h);
	assert_non_null(hdr);
	assert_int_equal(h % 8, 0); // the data 8-aligned
	assert_int_equal(f.datalen, 4 * (6 + 5 + 4));
	unsigned char *buf = malloc(h + (size_t)f.datalen);
	assert_non_null(buf);
	memcpy(buf, hdr, h);
	for (int i = 0; i < 15; i++) {
		float v = (float)i + 0.5f;
		memcpy(buf + h + 4 * i, &v, 4);
	}
	*n = h + (size_t)f.datalen;
	free(hdr);
	rt_st_free(&f);
	return buf;
}

static void ckpt__safetensors__round_trip(void **state)
{
	(void)state;
	size_t n;
	unsigned char *buf = sample(&n);
	RtStFile f;
	char err[256] = "";
	assert_int_equal(rt_st_parse(&f, buf, n, err, sizeof err), 0);
	assert_int_equal(f.n, 3);
	const RtStTensor *a = rt_st_find(&f, "layer0.linear.0"), *b = rt_st_find(&f, "layer0.linear.1"),
	                 *c = rt_st_find(&f, "odd \"name\"");
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(c);
	assert_null(rt_st_find(&f, "layer0.linear.2"));
	assert_int_equal(a->ndim, 2);
	assert_int_equal(a->dim[0], 2);
	assert_int_equal(a->dim[1], 3);
	assert_int_equal(b->ndim, 1);
	assert_int_equal(rt_st_elems(b), 5);
	assert_int_equal(c->ndim, 4);
	assert_int_equal(rt_st_elems(c), 4);
	float v;
	memcpy(&v, f.data + b->begin, 4);
	assert_true(v == 6.5f); // element 6 of the whole data: b's first
	memcpy(&v, f.data + c->end - 4, 4);
	assert_true(v == 14.5f);
	assert_string_equal(rt_st_get(&f, "step"), "7");
	assert_string_equal(rt_st_get(&f, "format"), "pipecc-checkpoint");
	assert_null(rt_st_get(&f, "seed"));
	rt_st_free(&f);
	free(buf);
}

/* The bytes of a file with header json and datalen zero bytes of data. */
static unsigned char *file_of(const char *json, size_t datalen, size_t *n)
{
	size_t h = strlen(json);
	unsigned char *b = calloc(8 + h + datalen + 1, 1);
	assert_non_null(b);
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)h >> (8 * i));
	memcpy(b + 8, json, h);
	*n = 8 + h + datalen;
	return b;
}

static void ckpt__safetensors__refusals_say_where(void **state)
{
	(void)state;
	static const struct {
		const char *json;
		size_t data;
		const char *want;
	} bad[] = {
		{"{\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
		 "tensor 'a': dtype BF16 (piperun reads F32 only)"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
		 "tensor 'a': data_offsets [0, 4] do not hold its 2 F32 elements"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
		 "header byte 54: tensor 'a' named twice"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
		 "tensor 'a': its data start at byte 4 of the data, not 0 (a hole)"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "(overlap)"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6,
		 "the tensors end at byte 4 of the data, the file has 6 (trailing bytes)"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 2,
		 "the tensors end at byte 4 of the data, the file has 2 (truncated)"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
		 "tensor 'a': unknown key 'x'"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0,
		 "tensor 'a': needs dtype, shape and data_offsets"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4,
		 "integer with a leading zero"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
		 "header byte 29: expected a non-negative integer"},
		{"{\"\\u00e9\":{}}", 0, "a \\u escape outside ASCII"},
		{"{} x", 0, "header byte 3: bytes after the header's object"},
		{"[]", 0, "header byte 0: expected '{'"},
		{"{\"__metadata__\":{\"k\":1}}", 0, "header byte 21: expected '\"'"},
		{"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "a second __metadata__"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
		 "expected '}'"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		size_t n;
		unsigned char *b = file_of(bad[i].json, bad[i].data, &n);
		RtStFile f;
		char err[256] = "";
		int rc = rt_st_parse(&f, b, n, err, sizeof err);
		if (rc == 0 || !strstr(err, bad[i].want))
			fail_msg("case %zu: rc %d, '%s' lacks '%s'", i, rc, err, bad[i].want);
		rt_st_free(&f);
		free(b);
	}
	/* the length itself */
	RtStFile f;
	char err[256] = "";
	unsigned char b[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
	assert_int_equal(rt_st_parse(&f, b, 10, err, sizeof err), -1);
	assert_non_null(strstr(err, "header length 200 runs past the end of the file (truncated?)"));
	assert_int_equal(rt_st_parse(&f, b, 5, err, sizeof err), -1);
	assert_non_null(strstr(err, "5 bytes: shorter than the 8-byte header length"));
	b[0] = 2;
	assert_int_equal(rt_st_parse(&f, b, 10, err, sizeof err), 0); // {} : no tensors
	assert_int_equal(f.n, 0);
	rt_st_free(&f);
}

static void put(const char *name, const void *b, size_t n)
{
	char p[256];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, n, f), n);
	fclose(f);
}

/* A checkpoint of the sample file as rank0.safetensors (its three tensors) into dir,
 * with `latest`; the manifest's line for tensor i given by hand when line3 is set. */
static void write_ckpt(const unsigned char *buf, size_t n, const char *line3)
{
	RtStFile f;
	char err[256], man[2048], sub[300];
	assert_int_equal(rt_st_parse(&f, buf, n, err, sizeof err), 0);
	int k = snprintf(man, sizeof man, "pipecc-checkpoint 1\nstep 7\nseed 42\noptimizer sgd\n"
	                 "plan t pp=1 dp=1 tp=1\nfile rank0.safetensors %zu blocks=%016llx\n", n,
	                 (unsigned long long)plan_hash(PLAN_SUM_BLOCKS, buf, n));
	for (int i = 0; i < f.n; i++) {
		const RtStTensor *t = &f.t[i];
		if (i == 2 && line3) {
			k += snprintf(man + k, sizeof man - (size_t)k, "%s\n", line3);
			continue;
		}
		k += snprintf(man + k, sizeof man - (size_t)k, "tensor %s rank0.safetensors stage=s "
		              "layer=0 part=%d shape=%lldx%lld shard=0/1 axis=none blocks=%016llx\n",
		              i == 2 ? "c" : t->name, i, (long long)(t->ndim == 2 ? t->dim[0] : 1),
		              (long long)(t->ndim == 2 ? t->dim[1] : rt_st_elems(t)),
		              (unsigned long long)plan_hash(PLAN_SUM_BLOCKS, f.data + t->begin,
		                                            (size_t)(t->end - t->begin)));
	}
	snprintf(sub, sizeof sub, "%s/step-7", dir);
	mkdir(sub, 0777);
	put("step-7/MANIFEST", man, (size_t)k);
	put("step-7/rank0.safetensors", buf, n);
	put("latest", "step-7\n", 7);
	rt_st_free(&f);
}

static void ckpt__open__reads_and_locates_faults(void **state)
{
	(void)state;
	/* our sample's third tensor is 4-D and the manifest speaks of rows x cols: one
	 * that is 2-D instead */
	RtStFile f = {0};
	char err[512];
	int64_t a[2] = {2, 3}, b[2] = {1, 5}, c[2] = {2, 2};
	rt_st_add(&f, "layer0.linear.0", 2, a, err, sizeof err);
	rt_st_add(&f, "layer0.linear.1", 2, b, err, sizeof err);
	rt_st_add(&f, "c", 2, c, err, sizeof err);
	size_t h;
	unsigned char *hdr = rt_st_header(&f, &h);
	size_t n = h + (size_t)f.datalen;
	unsigned char *buf = calloc(n, 1);
	memcpy(buf, hdr, h);
	for (size_t i = h; i < n; i++)
		buf[i] = (unsigned char)i;
	free(hdr);
	rt_st_free(&f);

	write_ckpt(buf, n, NULL);
	RtCkpt *ck = rt_ckpt_open(dir, err, sizeof err);
	if (!ck)
		fail_msg("%s", err);
	assert_int_equal(rt_ckpt_step(ck), 7);
	assert_int_equal(rt_ckpt_seed(ck), 42);
	assert_non_null(strstr(rt_ckpt_dir(ck), "/step-7"));
	rt_ckpt_close(ck);

	buf[n - 1] ^= 4; // a bit of c's last element
	put("step-7/rank0.safetensors", buf, n);
	buf[n - 1] ^= 4;
	assert_null(rt_ckpt_open(dir, err, sizeof err));
	assert_non_null(strstr(err, "step-7/rank0.safetensors: error: tensor 'c' (data bytes 44 to "
	                            "60): checksum mismatch"));

	/* the header damaged after two tensors read: the parse's error, nothing read past */
	unsigned char *dt = NULL;
	for (size_t i = 8; i + 5 < n; i++)
		if (!memcmp(buf + i, "\"F32\"", 5))
			dt = buf + i + 1;
	assert_non_null(dt);
	*dt = 'G';
	put("step-7/rank0.safetensors", buf, n);
	*dt = 'F';
	assert_null(rt_ckpt_open(dir, err, sizeof err));
	assert_non_null(strstr(err, "rank0.safetensors: error: checksum mismatch; tensor 'c': dtype "
	                            "G32 (piperun reads F32 only)"));

	write_ckpt(buf, n, NULL);
	put("step-7/rank0.safetensors", buf, n - 3);
	assert_null(rt_ckpt_open(dir, err, sizeof err));
	assert_non_null(strstr(err, "rank0.safetensors: error:"));
	assert_non_null(strstr(err, "(truncated)"));

	write_ckpt(buf, n, "tensor c rank0.safetensors stage=s layer=0 part=2 shape=2x2 shard=2/2 "
	           "axis=rows blocks=0000000000000000");
	assert_null(rt_ckpt_open(dir, err, sizeof err));
	assert_non_null(strstr(err, "step-7/MANIFEST:9: error: expected shard=I/N, 0 <= I < N <= 4096"));
	write_ckpt(buf, n, "tensor c rank0.safetensors stage=s layer=0 part=2 shape=2x2 shard=0/1 "
	           "axis=rows blocks=0000000000000000");
	assert_null(rt_ckpt_open(dir, err, sizeof err));
	assert_non_null(strstr(err, "MANIFEST:9: error: expected axis=none for a whole tensor"));
	write_ckpt(buf, n, "tensor c rank0.safetensors stage=s layer=0 part=2 shape=2x2 shard=1/2 "
	           "axis=cols blocks=0000000000000000"); // a piece: read (its plan checks the rest)
	RtCkpt *pc = rt_ckpt_open(dir, err, sizeof err);
	if (!pc)
		fail_msg("%s", err);
	rt_ckpt_close(pc);

	write_ckpt(buf, n, "tensor c rank0.safetensors stage=s layer=0 part=2 shape=4x1 shard=0/1 "
	           "axis=none blocks=0000000000000000");
	assert_null(rt_ckpt_open(dir, err, sizeof err));
	assert_non_null(strstr(err, "rank0.safetensors: error: tensor 'c': its shape is not the "
	                            "manifest's 4x1"));

	write_ckpt(buf, n, "tensor c rank1.safetensors");
	assert_null(rt_ckpt_open(dir, err, sizeof err));
	assert_non_null(strstr(err, "MANIFEST:9: error: expected a 'file' or 'tensor' line"));

	put("latest", "../x\n", 5);
	assert_null(rt_ckpt_open(dir, err, sizeof err));
	assert_non_null(strstr(err, "latest: error: not a step directory's name ('../x')"));
	free(buf);
}

int main(void)
{
	if (!mkdtemp(dir))
		return 1;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ckpt__safetensors__round_trip),
		cmocka_unit_test(ckpt__safetensors__refusals_say_where),
		cmocka_unit_test(ckpt__open__reads_and_locates_faults),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd))
		rc = rc ? rc : 1;
	return rc;
}
