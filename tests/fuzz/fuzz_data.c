/* libFuzzer target: the token-file readers (runtime/data.c), chiefly the .npy header's
 * dict-literal parser, on bytes from memory.  Every format either reads or gives a
 * message; a file that reads lies within the bytes (every id is read, so ASan catches a
 * layout past the end) and the vocabulary check names a reason or passes. */
#include "../../runtime/data.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
	for (int f = 0; f < RT_DATA_COUNT; f++) {
		RtData d;
		char err[512] = "";
		if (rt_data_parse(&d, data, len, f, "fuzz.npy", err, sizeof err)) {
			fuzz_assert(err[0], "%s: refused without a message", rt_data_format_names[f]);
			continue;
		}
		fuzz_assert(d.format != RT_DATA_AUTO, "auto left unresolved");
		fuzz_assert(d.tok >= data && (size_t)(d.tok - data) + (size_t)d.n * (size_t)d.width <= len,
		            "%s: %lld tokens of %d bytes past the input's %zu", rt_data_format_names[f],
		            (long long)d.n, d.width, len);
		int64_t sum = 0;
		for (int64_t i = 0; i < d.n; i++)
			sum += rt_data_at(&d, i);
		int rc = rt_data_check(&d, 1000, 1, err, sizeof err);
		fuzz_assert(rc == 0 || err[0], "check refused without a message (%lld)", (long long)sum);
	}
	return 0;
}
