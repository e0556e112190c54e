/* Emitters other than the plan file: PyTorch's schedule CSV and the human summary.
 * Naming across the two worlds: our B (input gradient) is PyTorch's I, our fused BW is
 * PyTorch's B.  A SEND/RECV cell names the stage at this rank's end of the transfer:
 * the sender stage for SEND, the receiver stage for RECV. */
#include "pipecc.h"
#include "../plan/mem.h"
#include "../plan/line.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

/* One cell, comma-separated from the row's earlier ones. */
static void cell(FILE *f, int *first, const char *fmt, int stage, const char *word, int mb)
{
	fputs(*first ? "" : ",", f);
	fprintf(f, fmt, stage, word, mb);
	*first = 0;
}

/* The cell of F&B pair a, b (plan_op_paired): PyTorch's `(0F3;3B1)OVERLAP_F_B`. */
static void pair_cell(FILE *f, int *first, const PlanOp *a, const PlanOp *b)
{
	fprintf(f, "%s(%d%c%d;%d%c%d)OVERLAP_F_B", *first ? "" : ",", a->stage, plan_ops[a->kind].torch,
	        a->mb, b->stage, plan_ops[b->kind].torch, b->mb);
	*first = 0;
}

static int in_group(const PlanOp *o, int group)
{
	return plan_op_is_p2p(o->kind) && o->group == group;
}

/* The SEND/RECV cell of op o: the stage at this rank's end, as PyTorch names it. */
static int comm_stage(const Plan *p, const PlanOp *o)
{
	const PlanEdge *e = &p->edges[o->stage];
	return (o->dir == DIR_ACT) == plan_ops[o->kind].sends ? e->src : e->dst;
}

/* With comms, the form torch's _PipelineScheduleRuntime._load_csv(..., "compute_comms")
 * runs: a group's SEND and RECV cells, then a WAIT_SEND per send of the group (torch's
 * host posts them all, then waits, as the plan's group does; a receive is waited for
 * by the compute that uses it), and REDUCE_GRAD, WAIT_REDUCE_GRAD where the stage's
 * optimizer step is. */
int pipecc_emit_torch_csv(const Plan *p, FILE *f, int comms)
{
	static const char *const word[2][2] = {{"RECV_F", "RECV_B"}, {"SEND_F", "SEND_B"}};
	int c[DIM_COUNT] = {0};
	for (int q = 0; q < p->dims[DIM_PP]; q++) {
		c[DIM_PP] = q;
		const PlanRank *rk = &p->ranks[plan_rank_of(p, c)];
		int first = 1;
		for (int64_t i = 0; i < rk->nops; i++) {
			const PlanOp *o = &rk->ops[i];
			char kind[2] = {plan_ops[o->kind].torch, 0};
			if (plan_op_is_compute(o->kind) && o->part > 0)
				continue; // a tp part: PyTorch's action is the whole op, at its first part
			if (plan_op_paired(o) && i + 1 < rk->nops) // an F&B pair: one cell
				pair_cell(f, &first, o, &rk->ops[++i]);
			else if (plan_op_is_compute(o->kind))
				cell(f, &first, "%d%s%d", o->stage, kind, o->mb);
			else if (comms && plan_ops[o->kind].role == OP_ROLE_STEP) {
				cell(f, &first, "%d%s", o->stage, "REDUCE_GRAD", 0);
				cell(f, &first, "%d%s", o->stage, "WAIT_REDUCE_GRAD", 0);
			}
			if (!comms || !plan_op_is_p2p(o->kind))
				continue;
			int send = plan_ops[o->kind].sends;
			cell(f, &first, "%d%s%d", comm_stage(p, o), word[send][o->dir], o->mb);
			if (i + 1 < rk->nops && in_group(&rk->ops[i + 1], o->group))
				continue; // not the group's last op yet
			int64_t j = i;
			while (j > 0 && in_group(&rk->ops[j - 1], o->group))
				j--;
			for (; j <= i; j++)
				if (plan_ops[rk->ops[j].kind].sends)
					cell(f, &first, "%dWAIT_%s%d", comm_stage(p, &rk->ops[j]),
					     word[1][rk->ops[j].dir], rk->ops[j].mb);
		}
		fputc('\n', f);
	}
	return ferror(f) ? -1 : 0;
}

/* Per stage: parameters, FLOPs of F, B and W per microbatch (the layer table's, from the
 * plan's layers), activation bytes saved per microbatch, and the bytes of parameters,
 * gradients and optimizer state (f32; AdamW keeps two moments per parameter).  Exact
 * counts, not scaled as the rest: they are the figures checked byte for byte against
 * published formulas (Megatron's, Korthikanti et al.'s; tests/cli/megatron.sh).  A tied
 * head's copy of the table (`copy`) counts on its stage, which holds it, and not in the
 * model's total, which counts the table once. */
static void summary_stages(const Plan *p, FILE *f)
{
	LayerShape sh = plan_shape(p);
	int state = plan_optim_state_bytes(p->optim.kind);
	int64_t total = 0, copies = 0;
	double tf[3] = {0, 0, 0};
	if (p->dims[DIM_TP] > 1)
		fprintf(f, "per rank of a tp group of %d (Megatron split: attention by heads, mlp by "
		           "hidden width, embedding, head and loss by vocabulary; the rest whole):\n",
		        p->dims[DIM_TP]);
	fprintf(f, "stage        pp      params     F flops     B flops     W flops   act bytes"
	           "  param+grad+opt bytes\n");
	for (int s = 0; s < p->nstages; s++) {
		const PlanStage *st = &p->stages[s];
		double fl[3] = {0, 0, 0};
		for (int l = 0; l < st->nlayers; l++) {
			LayerCost c = plan_layer_figures_tp(&st->layers[l], &sh, p->dims[DIM_TP]);
			for (int k = 0; k < 3; k++)
				fl[k] += c.flops[k];
			if (st->layers[l].flags & LAYER_FLAG(LAYER_KEY_COPY))
				copies += c.params;
		}
		for (int k = 0; k < 3; k++)
			tf[k] += fl[k];
		total += st->params;
		fprintf(f, "%-12s %2d %11" PRId64 " %11.4g %11.4g %11.4g %11" PRId64 " %21" PRId64 "\n",
		        st->name, st->pp, st->params, fl[0], fl[1], fl[2],
		        st->save_fb + st->save_fw + st->save_bw, plan_stage_state_bytes(p, s));
	}
	fprintf(f, "parameters %" PRId64 "; FLOPs per microbatch F %.4g B %.4g W %.4g; "
	           "optimizer %s (%d bytes of state per parameter)\n",
	        total - copies, tf[0], tf[1], tf[2], plan_optim_names[p->optim.kind], state);
	if (p->prec != PREC_F32) {
		const PlanPrecInfo *pi = plan_prec(p->prec);
		fprintf(f, "precision %s: %d-byte parameters and activations, %d-byte gradients",
		        pi->name, pi->param, pi->grad);
		if (pi->master)
			fprintf(f, ", %d-byte master weights", pi->master);
		fprintf(f, " (%d bytes a parameter with the optimizer state)\n",
		        plan_prec_param_bytes(p->prec) + state);
	}
	if (p->optim.distributed)
		fprintf(f, "distributed optimizer: master weights and optimizer state sharded over "
		           "dp=%d (%d + %d/%d bytes a parameter)\n", p->dims[DIM_DP],
		        plan_prec(p->prec)->param + plan_prec(p->prec)->grad,
		        plan_prec(p->prec)->master + state, p->dims[DIM_DP]);
	if (copies)
		fprintf(f, "tied table: %" PRId64 " parameters held twice (embedding and head on two "
		           "pipeline ranks, summed by TIEREDUCE), counted once above\n", copies);
}

/* Per world rank: the memory model's peak (plan/mem.h) and its parts, against the device.
 * On a line plan every line's rank at pipeline index q has line rank q's figures. */
static int summary_memory(const Plan *p, FILE *f)
{
	char t[2][32];
	int master = plan_prec(p->prec)->master > 0; // bf16: the f32 master weights too
	fprintf(f, "memory per rank (peak = params + grads + %soptimizer + saved + in flight)",
	        master ? "master weights + " : "");
	if (p->mem_cap)
		fprintf(f, ", device holds %s", plan_mem_text(t[0], 32, p->mem_cap));
	fputc('\n', f);
	for (int s = 0; s < p->nstages; s++) {
		const PlanStage *st = &p->stages[s];
		int sel = st->recompute == PLAN_RECOMPUTE_SELECTIVE;
		char res[48] = "";
		if (st->recompute_res)
			snprintf(res, sizeof res, " its first %d residual bodies", st->recompute_res);
		if (st->recompute)
			fprintf(f, "  stage %s recomputes%s: F keeps %s, B rebuilds %s\n", st->name,
			        sel ? " attention's probabilities" : res,
			        plan_mem_text(t[0], 32, st->save_fb + st->save_fw),
			        plan_mem_text(t[1], 32, st->save_re));
	}
	PlanMem *mem = plan_mem_all(p);
	if (!mem) { // the summary is not written without it (write_output)
		errno = ENOMEM;
		return -1;
	}
	int stride = plan_pp_stride(p), world = plan_mesh_world(p);
	enum { ROW = 200 };
	char *text = malloc((size_t)world * ROW);
	int *id = malloc((size_t)world * sizeof *id);
	for (int r = 0; text && id && r < world; r++) {
		PlanMem m = mem[p->line ? r / stride % p->dims[DIM_PP] : r];
		char *row = text + (size_t)r * ROW;
		id[r] = r;
		int64_t v[PLAN_MEM_PARTS];
		int n = plan_mem_parts(p, &m, v);
		int k = snprintf(row, ROW, ": peak %s =", plan_mem_text(t[0], 32, m.peak));
		for (int i = 0; i < n; i++)
			k += snprintf(row + k, ROW - (size_t)k, "%s %s", i ? " +" : "",
			              plan_mem_text(t[0], 32, v[i]));
		if (p->mem_cap)
			snprintf(row + k, ROW - (size_t)k, " (%.1f %% of the device)",
			         100.0 * (double)m.peak / (double)p->mem_cap);
	}
	if (text && id) // uniform ranks in one line ("ranks 4-127: ...")
		plan_rows_put(f, "  ", "rank", "ranks", 0, id, text, ROW, world);
	free(text), free(id), free(mem);
	if (!text || !id) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

int pipecc_emit_summary(const Plan *p, FILE *f)
{
	int64_t count[OP_COUNT] = {0}, p2p_bytes = 0, ar_bytes = 0, tp_bytes = 0;
	int64_t lines = plan_mesh_world(p) / p->world; // a line plan: each line's lists alike
	for (int r = 0; r < p->world; r++)
		for (int64_t i = 0; i < p->ranks[r].nops; i++) {
			const PlanOp *o = &p->ranks[r].ops[i];
			const OpInfo *info = &plan_ops[o->kind];
			count[o->kind]++;
			if (info->sends) // a transfer counts once, at its sending side
				p2p_bytes += plan_op_bytes(p, o);
			else if (info->over == OP_OVER_TP)
				tp_bytes += plan_op_bytes(p, o);
			else if (plan_op_is_coll(o->kind)) // the gradients' reductions: dp, tied table
				ar_bytes += plan_op_bytes(p, o);
		}
	for (int k = 0; k < OP_COUNT; k++)
		count[k] *= lines;
	p2p_bytes *= lines;
	ar_bytes *= lines;
	tp_bytes *= lines;
	fprintf(f, "pipeline %s: schedule %s, %d stage%s, %d microbatch%s of ", p->name,
	        p->schedule, p->nstages, p->nstages == 1 ? "" : "s", p->microbatches,
	        p->microbatches == 1 ? "" : "es");
	if (p->seq > 0) {
		int seqs = p->rows / p->seq;
		fprintf(f, "%d sequence%s x %d tokens (vocabulary %d", seqs, seqs == 1 ? "" : "s",
		        p->seq, p->vocab_real ? p->vocab_real : p->vocab);
		if (p->vocab_real)
			fprintf(f, ", padded to %d", p->vocab);
		fprintf(f, ")\n");
	} else {
		fprintf(f, "%dx%d\n", p->rows, p->cols);
	}
	fprintf(f, "mesh");
	for (int i = 0; i < DIM_COUNT; i++)
		fprintf(f, " %s=%d", plan_dim_names[p->dim_order[i]], p->dims[p->dim_order[i]]);
	fprintf(f, "%s (%d ranks)\n", p->sp ? " sp (sequence parallel)" : "", plan_mesh_world(p));
	for (int q = 0; q < p->dims[DIM_PP]; q++) {
		fprintf(f, "  pp %d:", q);
		for (int s = 0; s < p->nstages; s++)
			if (p->stages[s].pp == q)
				fprintf(f, " %s", p->stages[s].name);
		fputc('\n', f);
	}
	int nskip = 0, nlocal = 0;
	for (int e = 0; e < p->nedges; e++) {
		nskip += p->edges[e].skip;
		nlocal += p->stages[p->edges[e].src].pp == p->stages[p->edges[e].dst].pp;
	}
	fprintf(f, "edges: %d (%d skip, %d local hand-off)\n", p->nedges, nskip, nlocal);
	fprintf(f, "ops: %" PRId64 " total;", plan_total_ops(p) * lines);
	for (int k = 0; k < OP_COUNT; k++)
		if (count[k])
			fprintf(f, " %s %" PRId64, plan_ops[k].name, count[k]);
	char b[3][32];
	fprintf(f, "\nbytes moved per step: %s point-to-point, %s %s",
	        plan_mem_text(b[0], 32, p2p_bytes), plan_mem_text(b[1], 32, ar_bytes),
	        p->optim.distributed ? "reduce-scatter and all-gather" : "all-reduce");
	if (p->dims[DIM_TP] > 1)
		fprintf(f, ", %s tp all-reduce", plan_mem_text(b[2], 32, tp_bytes));
	fputc('\n', f);
	summary_stages(p, f);
	char line[256];
	plan_bottleneck(p, line, sizeof line);
	fprintf(f, "%s\n", line);
	return summary_memory(p, f) || ferror(f) ? -1 : 0;
}
