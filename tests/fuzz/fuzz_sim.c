/* libFuzzer target: reader + verifier + simulator in every model.  A plan the verifier
 * accepts never meets a run-time mismatch, and every deadlock has a wait-for cycle. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
	PlanError err;
	if (len == 0) // fmemopen cannot open an empty buffer; tests/cli covers empty files
		return 0;
	Plan *p = fuzz_read_plan(data, len, &err);
	if (!p)
		return 0;
	if (plan_total_ops(p) <= 200000 && plan_verify(p, &err) == 0)
		fuzz_check_sim(p);
	plan_free(p);
	return 0;
}
