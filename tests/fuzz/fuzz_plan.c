/* libFuzzer target: the plan reader and verifier.  Any bytes either read into a plan or
 * get a located error; a plan that reads writes back stably (write -> read -> write). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
	PlanError err;
	if (len == 0) // fmemopen cannot open an empty buffer; tests/cli covers empty files
		return 0;
	Plan *p = fuzz_read_plan(data, len, &err);
	if (!p) {
		fuzz_assert(err.msg[0], "read failed without a message");
		return 0;
	}
	fuzz_check_round_trip(p);
	if (plan_verify(p, &err) != 0)
		fuzz_assert(err.msg[0], "verify failed without a message");
	plan_free(p);
	return 0;
}
