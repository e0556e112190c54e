/* libFuzzer target: plan bytes through the public API alone (include/pipecc.h), as a
 * library user would pass them.  Any bytes either read into a plan or come back as
 * error objects with a message; a plan that reads writes back through the API to text
 * that reads to the same text; a plan that verifies simulates in both models to a
 * result or a located finding; a failure is never silent. */
#include "../../include/pipecc.h"
#include "fuzz.h"

/* A failing call's list: at least one error, each with a message and a file. */
static void check_errors(PccDiags *ds)
{
	fuzz_assert(pcc_diags_errors(ds) >= 1, "a call failed without an error object");
	for (int i = 0; i < pcc_diags_count(ds); i++)
		fuzz_assert(pcc_diag(ds, i)->message[0] && pcc_diag(ds, i)->file[0],
		            "an error object without a message or a file");
	pcc_diags_free(ds);
}

static void check_round_trip(const PccPlan *p)
{
	char *a, *b;
	size_t na, nb;
	fuzz_assert(pcc_plan_write_buffer(p, PCC_FORMAT_TEXT, &a, &na, NULL) == 0, "write failed");
	PccPlan *q = pcc_plan_read_buffer("again", a, na, NULL);
	fuzz_assert(q, "a written plan does not read");
	fuzz_assert(pcc_plan_write_buffer(q, PCC_FORMAT_TEXT, &b, &nb, NULL) == 0, "write failed");
	fuzz_assert(na == nb && !memcmp(a, b, na), "write -> read -> write changed the text");
	pcc_free(a);
	pcc_free(b);
	pcc_plan_free(q);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
	PccDiags *ds;
	PccPlan *p = pcc_plan_read_buffer("fuzz.plan", data, len, &ds);
	if (!p) {
		check_errors(ds);
		return 0;
	}
	pcc_diags_free(ds);
	check_round_trip(p);
	if (pcc_plan_verify(p, &ds)) {
		check_errors(ds);
		pcc_plan_free(p);
		return 0;
	}
	pcc_diags_free(ds);
	for (int m = 0; m < PCC_MODEL_COUNT && pcc_plan_ops(p) <= 200000; m++) {
		PccSimResult r;
		int rc = pcc_simulate(p, (PccModel)m, &r, &ds);
		if (rc)
			check_errors(ds);
		else
			pcc_diags_free(ds);
		fuzz_assert(rc || (r.ranks && r.world == pcc_plan_world(p)), "no per-rank figures");
		pcc_sim_free(&r);
	}
	pcc_plan_free(p);
	return 0;
}
