/* libFuzzer target: reader + verifier + simulator in every model, keeping every op's
 * times and keeping the critical path alone, which must agree (tests/sim_path_same.h).
 * A plan the verifier accepts never meets a run-time mismatch, and every deadlock has a
 * wait-for cycle.  A plan it refuses is simulated too (sim.h: sim_run is safe on any
 * plan the reader accepts; pipesim --threads runs it beside the verifier), and must not
 * crash. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
	PlanError err;
	if (len == 0) // fmemopen cannot open an empty buffer; tests/cli covers empty files
		return 0;
	Plan *p = fuzz_read_plan(data, len, &err);
	if (!p)
		return 0;
	if (plan_total_ops(p) <= 200000) {
		if (plan_verify(p, &err) == 0)
			fuzz_check_sim(p);
		else
			fuzz_run_sim(p);
	}
	plan_free(p);
	return 0;
}
