/* The JSON report: one object per run, schema in docs/pipesim.md.  Times are printed
 * in microseconds with three decimals, which is exact for the integer nanoseconds the
 * simulation works in; sizes are integer bytes.  Written by hand (no library) because
 * it is small and its key order is part of the documented output. */
#include "sim.h"
#include "../plan/mem.h"
#include "../plan/line.h"
#include "../plan/trace.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *const stream_names[SIM_STREAM_COUNT] = {"rank", "compute", "comm"};

static void jop(FILE *f, const Plan *p, const SimOpRef *x)
{
	fprintf(f, "{\"rank\": %d, \"stream\": ", plan_world_rank(p, x->rank));
	plan_json_str(f, x->stream < SIM_STREAM_COUNT ? stream_names[x->stream] : "rank");
	fprintf(f, ", \"op\": %" PRId64, x->op);
	if (x->rank >= 0 && x->rank < p->world && x->op >= 0 && x->op < p->ranks[x->rank].nops) {
		char text[256];
		plan_format_op(p, &p->ranks[x->rank].ops[x->op], text, sizeof text);
		fprintf(f, ", \"line\": %" PRId64 ", \"text\": ", sim_op_line(p, x->rank, x->op));
		plan_json_str(f, text);
	} else {
		fputs(", \"line\": 0, \"text\": null", f);
	}
	fputc('}', f);
}

static void header(FILE *f, const Plan *p, const char *file)
{
	fprintf(f, "{\n  \"pipesim\": \"%s\",\n  \"plan\": ", SIM_VERSION);
	plan_json_str(f, file);
	if (!p)
		return;
	fputs(",\n  \"pipeline\": ", f);
	plan_json_str(f, p->name);
	fputs(",\n  \"schedule\": ", f);
	plan_json_str(f, p->schedule);
	/* A line plan: "world" is the mesh's, "line": true, and the ranks listed are line
	 * 0's, by world rank (every line runs alike, docs/pipesim.md "Line plans"). */
	fprintf(f, ",\n  \"mesh\": {\"pp\": %d, \"dp\": %d, \"tp\": %d},\n  \"world\": %d,\n"
	           "  \"line\": %s,\n  \"microbatches\": %d",
	        p->dims[DIM_PP], p->dims[DIM_DP], p->dims[DIM_TP], plan_mesh_world(p),
	        p->line ? "true" : "false", p->microbatches);
	if (p->prec != PREC_F32) // f32 plans read as before
		fprintf(f, ",\n  \"precision\": \"%s\"", plan_prec(p->prec)->name);
	if (p->sp)
		fputs(",\n  \"sequence_parallel\": true", f);
}

int sim_write_json(FILE *f, const Plan *p, const SimResult *res, const PlanError *verr,
                   const char *file, const PlanMem *mem)
{
	header(f, p, file);
	if (verr || !res) {
		fputs(",\n  \"ok\": false,\n  \"deadlock\": false,\n  \"verdict\": \"invalid\",\n"
		      "  \"error\": ",
		      f);
		plan_json_str(f, verr ? verr->msg : "no result");
		if (verr)
			fprintf(f, ",\n  \"error_%s\": %" PRId64 ",\n  \"error_rank\": %d,\n"
			           "  \"error_op\": %" PRId64,
			        verr->at_byte ? "byte" : "line", verr->line,
			        p && verr->rank >= 0 ? plan_world_rank(p, verr->rank) : verr->rank, verr->op);
		fputs("\n}\n", f);
		return ferror(f) ? -1 : 0;
	}
	fprintf(f, ",\n  \"model\": \"%s\",\n  \"eager\": %s,\n  \"ok\": %s,\n  \"deadlock\": %s,\n"
	           "  \"verdict\": \"%s\"",
	        sim_model_names[res->model], res->eager ? "true" : "false",
	        res->verdict == SIM_OK ? "true" : "false",
	        res->verdict == SIM_DEADLOCK ? "true" : "false", sim_verdict_names[res->verdict]);
	fprintf(f, ",\n  \"memory_cap_bytes\": %" PRId64, p->mem_cap);
	fputs(",\n  \"makespan\": ", f);
	plan_json_us(f, res->makespan);
	fprintf(f, ",\n  \"bubble\": %.6f,\n  \"ops\": %" PRId64 ",\n  \"ops_done\": %" PRId64
	           ",\n  \"busy\": %.6f,\n  \"compute\": ",
	        res->bubble, res->ops, res->ops_done, sim_busy(res, -1));
	plan_json_us(f, res->busy);
	if (res->world != p->world)
		return -1;
	PlanMem *own = mem ? NULL : plan_mem_all(p);
	if (!mem && !(mem = own))
		return -1;
	fputs(",\n  \"ranks\": [", f);
	for (int r = 0; r < res->world; r++) {
		const SimRankResult *rr = &res->ranks[r];
		fprintf(f, "%s\n    {\"rank\": %d, \"busy\": %.6f, \"compute\": ", r ? "," : "",
		        plan_world_rank(p, r), sim_busy(res, r));
		plan_json_us(f, rr->busy);
		fputs(", \"idle\": ", f);
		plan_json_us(f, rr->idle);
		fputs(", \"finish\": ", f);
		plan_json_us(f, rr->finish);
		fprintf(f, ", \"ops_done\": %" PRId64 ", \"peak_activation_bytes\": %" PRId64
		           ", \"peak_activation_units\": %" PRId64,
		        rr->ops_done, rr->peak_act_bytes, rr->peak_act_units);
		const PlanMem m = mem[r];
		fprintf(f, ", \"peak_total_bytes\": %" PRId64 ", \"param_bytes\": %" PRId64
		           ", \"grad_bytes\": %" PRId64 ", \"optim_state_bytes\": %" PRId64
		           ", \"saved_bytes_at_peak\": %" PRId64 ", \"inflight_bytes_at_peak\": %" PRId64
		           ", \"peak_op\": %" PRId64 ", \"peak_inflight_bytes\": %" PRId64
		           ", \"fits\": %s",
		        m.peak, m.params, m.grads, m.optim, m.saved, m.comm, m.peak_op, m.peak_comm,
		        !p->mem_cap || m.peak <= p->mem_cap ? "true" : "false");
		if (plan_prec(p->prec)->master) // bf16: the f32 master weights, a class of their own
			fprintf(f, ", \"master_bytes\": %" PRId64, m.master);
		fputc('}', f);
	}
	free(own);
	fputs("\n  ],\n  \"links\": [", f);
	for (int i = 0; i < res->nlinks; i++)
		fprintf(f, "%s\n    {\"src\": %d, \"dst\": %d, \"bytes\": %" PRId64
		           ", \"transfers\": %" PRId64 "}",
		        i ? "," : "", plan_world_rank(p, res->links[i].src),
		        plan_world_rank(p, res->links[i].dst), res->links[i].bytes, res->links[i].transfers);
	fputs(res->nlinks ? "\n  ],\n  \"allreduce\": [" : "],\n  \"allreduce\": [", f);
	for (int i = 0; i < res->ncollectives; i++)
		fprintf(f, "%s\n    {\"first_rank\": %d, \"members\": %d, \"bytes\": %" PRId64
		           ", \"count\": %" PRId64 "}",
		        i ? "," : "", res->collectives[i].first_rank, res->collectives[i].members,
		        res->collectives[i].bytes, res->collectives[i].count);
	fputs(res->ncollectives ? "\n  ],\n  \"tp_allreduce\": [" : "],\n  \"tp_allreduce\": [", f);
	for (int i = 0; i < res->ntp; i++)
		fprintf(f, "%s\n    {\"first_rank\": %d, \"members\": %d, \"bytes\": %" PRId64
		           ", \"count\": %" PRId64 "}",
		        i ? "," : "", res->tp[i].first_rank, res->tp[i].members, res->tp[i].bytes,
		        res->tp[i].count);
	fputs(res->ntp ? "\n  ],\n  \"critical_path\": [" : "],\n  \"critical_path\": [", f);
	for (int64_t i = 0; i < res->npath; i++) {
		const SimPathStep *st = &res->path[i];
		fprintf(f, "%s\n    {\"rank\": %d, \"first_op\": %" PRId64 ", \"last_op\": %" PRId64
		           ", \"first_line\": %" PRId64 ", \"last_line\": %" PRId64 ", \"start\": ",
		        i ? "," : "", plan_world_rank(p, st->rank), st->first_op, st->last_op,
		        sim_op_line(p, st->rank, st->first_op), sim_op_line(p, st->rank, st->last_op));
		plan_json_us(f, st->start);
		fputs(", \"end\": ", f);
		plan_json_us(f, st->end);
		fputs(", \"compute\": ", f);
		plan_json_us(f, st->compute);
		fputc('}', f);
	}
	fputs(res->npath ? "\n  ]" : "]", f);
	if (res->verdict != SIM_OK) {
		fputs(",\n  \"error\": ", f);
		plan_json_str(f, res->message);
		fputs(",\n  \"stall_time\": ", f);
		plan_json_us(f, res->stall_time);
		fputs(res->verdict == SIM_DEADLOCK ? ",\n  \"blocked\": [" : ",\n  \"mismatch\": [", f);
		for (int i = 0; i < res->nstuck; i++) {
			fputs(i ? ",\n    " : "\n    ", f);
			jop(f, p, &res->stuck[i]);
		}
		fputs(res->nstuck ? "\n  ],\n  \"cycle\": [" : "],\n  \"cycle\": [", f);
		for (int i = 0; i < res->ncycle; i++) {
			const SimWait *w = &res->cycle[i];
			fputs(i ? ",\n    {\"op\": " : "\n    {\"op\": ", f);
			jop(f, p, &w->from);
			fputs(",\n     \"waits_for\": ", f);
			jop(f, p, &w->on);
			fputs(",\n     \"behind\": ", f);
			jop(f, p, &w->behind);
			fputc('}', f);
		}
		fputs(res->ncycle ? "\n  ]" : "]", f);
	}
	fputs("\n}\n", f);
	return ferror(f) ? -1 : 0;
}
