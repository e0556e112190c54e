/* Precision regimes (`precision NAME;`, plan/prec.h, docs/semantics.md "Precision"):
 * bf16 is Megatron's mixed precision, and its figures are the published ones.
 *
 * Anchors, derived by hand in each test:
 * - Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
 *   Models"), Table 2: a GPT layer keeps sbh(34 + 5as/h) bytes without parallelism and
 *   sbh(10 + 24/t + 5as/(ht)) with tensor parallelism t (bf16, one-byte dropout masks),
 *   sbh(10 + 24/t) with selective recomputation besides (less the rebuilt tensors);
 *   pipecc adds the f32 statistics the paper leaves out (each layer norm's mean and
 *   rstd, 8 bytes a token), and the layer holds what its W needs from B to W besides.
 * - Megatron-LM's megatron/training/theoretical_memory_usage.py: 18 bytes a parameter
 *   without the distributed optimizer (bf16 weight 2, f32 gradient 4, f32 master 4, Adam
 *   8), and its per-layer parameter count (GQA and a gated MLP: 2h(3/2 ffn + norms) +
 *   2h^2 (1 + kv/heads)).
 * - The devices' datasheets (dense, no sparsity): H100 SXM 67 TFLOP/s f32, 494.5 tf32,
 *   989 bf16. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "../compiler/pipecc.h"
#include "../plan/io.h"
#include "../plan/mem.h"
#include "plan_lib.h"
#include "../runtime/rt_private.h"

/* Saved bytes a microbatch (F to B or W: save_fb + save_fw) and held bytes (B to W:
 * save_bw) of n layers on one rank of a tp group of tp. */
static void layers_bytes(const PlanLayer *ls, int n, const LayerShape *sh, int tp,
                         int64_t *saved, int64_t *held)
{
	*saved = *held = 0;
	for (int i = 0; i < n; i++) {
		LayerCost c = plan_layer_figures_tp(&ls[i], sh, tp);
		*saved += c.save_fb + c.save_fw;
		*held += c.save_bw;
	}
}

/* A GPT-3 175B layer (h 12288, 96 heads, s 2048, b 1, MLP 4h, dropout 0.1 on the
 * attention probabilities and after both projections), as examples/gpt2.pipe writes
 * one: Korthikanti's Table 2 at t = 1 and t = 8, plus the norms' statistics. */
static void prec__gpt3_layer__korthikanti_table2(void **state)
{
	(void)state;
	const int64_t s = 2048, b = 1, h = 12288, a = 96;
	PlanLayer ls[] = {
		{.kind = LAYER_LAYERNORM, .in = h, .out = h},
		{.kind = LAYER_ATTN, .in = h, .out = h, .heads = a, .kv_heads = a,
		 .flags = LAYER_FLAG(LAYER_KEY_BIAS), .drop = 0.1},
		{.kind = LAYER_DROPOUT, .in = h, .out = h, .drop = 0.1},
		{.kind = LAYER_LAYERNORM, .in = h, .out = h},
		{.kind = LAYER_MLP, .in = h, .out = h, .hidden = 4 * h,
		 .flags = LAYER_FLAG(LAYER_KEY_BIAS)},
		{.kind = LAYER_DROPOUT, .in = h, .out = h, .drop = 0.1},
	};
	int n = sizeof ls / sizeof ls[0];
	LayerShape sh = {s * b, b, s, 0, 0, PREC_BF16, 1};
	int64_t saved, held, stats = 2 * 2 * 4 * s * b; // two norms' mean and rstd, f32
	layers_bytes(ls, n, &sh, 1, &saved, &held);
	assert_int_equal(saved, s * b * h * 34 + 5 * a * s * s * b + stats);
	for (int t = 2; t <= 8; t *= 2) {
		layers_bytes(ls, n, &sh, t, &saved, &held);
		assert_int_equal(saved, s * b * h * (10 + 24 / t) + 5 * a * s * s * b / t + stats);
	}
	/* selective recomputation drops the attention core's 5as^2b/t (probabilities 2,
	 * mask 1, dropped copy 2 bytes each) on each rank: sbh(10 + 24/t), Table 2's
	 * "selective activation recomputation" row with tensor parallelism, at t = 8 */
	layers_bytes(ls, n, &sh, 8, &saved, &held);
	int64_t re = 0;
	for (int i = 0; i < n; i++)
		re += plan_layer_rebuilt_bytes(&ls[i], &sh, 8);
	assert_int_equal(re, 5 * a * s * s * b / 8);
	assert_int_equal(saved - re, s * b * h * (10 + 24 / 8) + stats);
	/* held from B to W at t = 1: each weighted layer's output gradient (two norms, the
	 * attention's and the MLP's projections: 4 x 2sbh), dqkv 6sbh and dh 8sbh */
	layers_bytes(ls, n, &sh, 1, &saved, &held);
	assert_int_equal(held, s * b * h * (8 + 6 + 8));
	/* sequence parallelism (Table 2, "tensor + sequence parallel"): sbh(34/t +
	 * 5as/(ht)), the statistics split as well */
	sh.sp = 8;
	layers_bytes(ls, n, &sh, 8, &saved, &held);
	assert_int_equal(saved, (s * b * h * 34 + 5 * a * s * s * b + stats) / 8);
	/* with selective recomputation: theoretical_memory_usage.py's sbh(18 + 4 ffn/h)/t
	 * (ffn = 4h), plus the statistics */
	assert_int_equal(saved - plan_layer_rebuilt_bytes(&ls[1], &sh, 8),
	                 s * b * h * (18 + 4 * 4) / 8 + stats / 8);
	layers_bytes(ls, n, &sh, 1, &saved, &held); // tp 1: nothing to split along
	assert_int_equal(saved, s * b * h * 34 + 5 * a * s * s * b + stats);
	sh.sp = 1;
	/* f32 doubles every tensor but the one-byte masks and the f32 statistics: the
	 * 32sbh of bf16 tensors, the probabilities and their dropped copy (4as^2b of the
	 * 5), and leaves the masks (2sbh + as^2b) */
	sh.prec = PREC_F32;
	layers_bytes(ls, n, &sh, 1, &saved, &held);
	assert_int_equal(saved, s * b * h * (32 * 2 + 2) + (4 * 2 + 1) * a * s * s * b + stats);
	/* tf32 stores what f32 stores */
	sh.prec = PREC_TF32;
	int64_t saved32 = saved;
	layers_bytes(ls, n, &sh, 1, &saved, &held);
	assert_int_equal(saved, saved32);
}

/* A Llama-2-70B layer (h 8192, 64 heads, 8 key/value heads of 128, SwiGLU 28672,
 * RMSNorm, rotary, no biases, no dropout), s 4096, b 1, bf16, tp 8: parameters as
 * Megatron counts them, and its saved bytes, materialised and flash. */
static void prec__llama2_70b_layer__by_hand(void **state)
{
	(void)state;
	const int64_t s = 4096, b = 1, h = 8192, a = 64, kv = 8, hd = 128, f = 28672, t = 8;
	PlanLayer ls[] = {
		{.kind = LAYER_RMSNORM, .in = h, .out = h},
		{.kind = LAYER_ATTN, .in = h, .out = h, .heads = a, .kv_heads = kv,
		 .flags = LAYER_FLAG(LAYER_KEY_ROPE)},
		{.kind = LAYER_RMSNORM, .in = h, .out = h},
		{.kind = LAYER_SWIGLU, .in = h, .out = h, .hidden = f},
	};
	int n = sizeof ls / sizeof ls[0];
	LayerShape sh = {s * b, b, s, 0, 0, PREC_BF16, 1};
	int64_t params = 0;
	for (int i = 0; i < n; i++)
		params += plan_layer_figures(&ls[i], &sh).params;
	/* theoretical_memory_usage.py: 2h (3/2 ffn + 1) + 2 h^2 (1 + kv/a) */
	assert_int_equal(params, 2 * h * (3 * f / 2 + 1) + 2 * h * h * (a + kv) / a);
	assert_int_equal(params, 855654400);
	/* per rank: each norm keeps x (2sbh, whole) and rstd (f32, 4sb); attention keeps x
	 * (2sbh), q, k and v of its heads (2sb (h + 2 kv hd) / t), P (2 a s^2 b / t) and the
	 * heads' output (2sbh / t); swiglu keeps x (2sbh) and g, u, act(g) u (3 x 2sbf / t) */
	int64_t norms = 2 * (2 * s * b * h + 4 * s * b);
	int64_t attn = 2 * s * b * h + 2 * s * b * (h + 2 * kv * hd) / t + 2 * a * s * s * b / t +
	               2 * s * b * h / t;
	int64_t mlp = 2 * s * b * h + 3 * 2 * s * b * f / t;
	int64_t saved, held;
	layers_bytes(ls, n, &sh, (int)t, &saved, &held);
	assert_int_equal(saved, norms + attn + mlp);
	/* selective recomputation drops the rank's P: 375,422,976 bytes a layer, beside
	 * theoretical_memory_usage.py's sbh(10 + 24/t) = 436,207,616 (docs/semantics.md,
	 * "Against Megatron's formula", names each difference) */
	assert_int_equal(plan_layer_rebuilt_bytes(&ls[1], &sh, (int)t), 2 * a * s * s * b / t);
	assert_int_equal(saved - plan_layer_rebuilt_bytes(&ls[1], &sh, (int)t), 375422976);
	assert_int_equal(s * b * h * (10 + 24 / t) - 375422976,
	                 2 * s * b * h + 14680064 - 20971520 - 8 * s * b);
	/* flash keeps each row's f32 log-sum-exp (4 a s b / t) instead of P */
	ls[1].flags |= LAYER_FLAG(LAYER_KEY_FLASH);
	layers_bytes(ls, n, &sh, (int)t, &saved, &held);
	assert_int_equal(saved, norms + attn - 2 * a * s * s * b / t + 4 * a * s * b / t + mlp);
	/* sequence parallelism splits what tp left whole (the norms' x and rstd, the
	 * attention's and the MLP's x) along the sequence too */
	sh.sp = (int)t;
	layers_bytes(ls, n, &sh, (int)t, &saved, &held);
	assert_int_equal(saved, (norms + 2 * 2 * s * b * h) / t + attn - 2 * s * b * h -
	                            2 * a * s * s * b / t + 4 * a * s * b / t + mlp - 2 * s * b * h);
}

static const char *two_stages =
	"pipeline p;\n"
	"mesh pp=2 dp=2 tp=2;\n"
	"microbatches 4;\n"
	"input tokens 2x16 vocab=64;\n"
	"%s"
	"%s"
	"stage s0 { embed 32; residual { rmsnorm; attention heads=4 rope; } }\n"
	"stage s1 { residual { rmsnorm; swiglu 64; } rmsnorm; head; loss xent; }\n"
	"schedule 1f1b;\n";

static Plan *two(const char *prec, const char *optim)
{
	char src[1024];
	snprintf(src, sizeof src, two_stages, prec, optim);
	return compile_plan(src);
}

static int64_t stage_params(const Plan *p, int pp)
{
	int64_t n = 0;
	for (int s = 0; s < p->nstages; s++)
		if (p->stages[s].pp == pp)
			n += p->stages[s].params;
	return n;
}

/* The static classes per parameter: Megatron's 18 bytes for bf16 with Adam, and each
 * optimizer's state on top of the regime's 10 (bf16) or 8 (f32) bytes; a distributed
 * optimizer keeps the master weights and state of its shard, ceil(params / dp). */
static void prec__static_bytes__per_parameter(void **state)
{
	(void)state;
	const struct {
		const char *prec, *optim;
		int param, grad, master, opt, dist;
	} rows[] = {
		{"precision bf16;\n", "optimizer adamw distributed;\n", 2, 4, 4, 8, 1},
		{"", "optimizer momentum lr=0.1 distributed;\n", 4, 4, 0, 4, 1},
		{"precision bf16;\n", "optimizer adamw;\n", 2, 4, 4, 8, 0},
		{"precision bf16;\n", "optimizer momentum;\n", 2, 4, 4, 4, 0},
		{"precision bf16;\n", "", 2, 4, 4, 0, 0},
		{"precision f32;\n", "optimizer adamw;\n", 4, 4, 0, 8, 0},
		{"", "optimizer adamw;\n", 4, 4, 0, 8, 0},
		{"precision tf32;\n", "optimizer momentum;\n", 4, 4, 0, 4, 0},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		Plan *p = two(rows[i].prec, rows[i].optim);
		for (int r = 0; r < p->world; r++) {
			PlanMem m;
			assert_int_equal(plan_mem_rank(p, r, &m), 0);
			int64_t n = stage_params(p, p->ranks[r].coord[DIM_PP]);
			assert_true(n > 0);
			assert_int_equal(m.params, n * rows[i].param);
			assert_int_equal(m.grads, n * rows[i].grad);
			int64_t shard = rows[i].dist ? (n + 1) / 2 : n; // dp = 2
			assert_int_equal(m.master, shard * rows[i].master);
			assert_int_equal(m.optim, shard * rows[i].opt);
			assert_true(m.peak >= m.params + m.grads + m.master + m.optim + m.saved);
		}
		plan_free(p);
	}
	PlanOptim o = plan_optim_default(OPTIM_ADAMW);
	assert_int_equal(plan_optim_shard(&o, 7, 2), 7);
	o.distributed = 1;
	assert_int_equal(plan_optim_shard(&o, 7, 2), 4);
	assert_int_equal(plan_optim_shard(&o, 9, 3), 3);
	assert_int_equal(plan_optim_shard(&o, 7, 1), 7);
	/* piperun's shards: ceil(n / dp) each, the last shorter or empty; one shard (dp 1)
	 * is all of it whatever the rank's dp index */
	const struct {
		int64_t n;
		int dp, i;
		int64_t off, len, size;
	} sh[] = {{10, 1, 1, 0, 10, 10}, {10, 3, 0, 0, 4, 4}, {10, 3, 1, 4, 4, 4},
	          {10, 3, 2, 8, 2, 4},   {5, 4, 2, 4, 1, 2},   {5, 4, 3, 5, 0, 2}};
	for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
		int64_t off, len;
		assert_int_equal(rt_shard(sh[i].n, sh[i].dp, sh[i].i, &off, &len), sh[i].size);
		assert_int_equal(off, sh[i].off);
		assert_int_equal(len, sh[i].len);
		o.distributed = 1;
		assert_int_equal(plan_optim_shard(&o, sh[i].n, sh[i].dp), sh[i].size);
	}
}

/* Sum of the bytes of rank r's ops of kind k (each counted once). */
static int64_t op_bytes(const Plan *p, int r, OpKind k)
{
	const PlanRank *rk = &p->ranks[r];
	int64_t n = 0;
	for (int64_t i = 0; i < rk->nops; i++)
		if (rk->ops[i].kind == k)
			n += plan_op_bytes(p, &rk->ops[i]);
	return n;
}

/* Messages at the activation type: p2p and the tp all-reduces of activations halve in
 * bf16; the dp all-reduce of the f32 main gradients and xent's f32 sums do not. */
static void prec__messages__at_their_type(void **state)
{
	(void)state;
	Plan *f = two("", "optimizer adamw;\n"), *b = two("precision bf16;\n", "optimizer adamw;\n");
	assert_int_equal(f->nedges, 1);
	assert_int_equal(f->edges[0].bytes, 32 * 32 * 4);
	assert_int_equal(b->edges[0].bytes, 32 * 32 * 2);
	for (int r = 0; r < f->world; r++) {
		assert_int_equal(op_bytes(b, r, OP_SEND) * 2, op_bytes(f, r, OP_SEND));
		assert_int_equal(op_bytes(b, r, OP_ALLREDUCE), op_bytes(f, r, OP_ALLREDUCE));
		assert_int_equal(op_bytes(b, r, OP_ALLREDUCE),
		                 stage_params(b, b->ranks[r].coord[DIM_PP]) * 4);
	}
	/* tp: rank 0 (stage s0: the embedding's and the attention's forward sums, the
	 * attention's backward sum, 32 rows x 32 floats each, per microbatch) */
	assert_int_equal(op_bytes(b, 0, OP_TPREDUCE) * 2, op_bytes(f, 0, OP_TPREDUCE));
	/* the distributed optimizer reduce-scatters the f32 gradients and all-gathers the
	 * parameters at their type */
	Plan *d = two("precision bf16;\n", "optimizer adamw distributed;\n");
	for (int r = 0; r < d->world; r++) {
		int64_t n = stage_params(d, d->ranks[r].coord[DIM_PP]);
		assert_int_equal(op_bytes(d, r, OP_ALLREDUCE), 0);
		assert_int_equal(op_bytes(d, r, OP_REDSCATTER), n * 4);
		assert_int_equal(op_bytes(d, r, OP_ALLGATHER), n * 2);
	}
	plan_free(d);
	/* the last stage's cross-entropy all-reduces 3 f32 a row in either regime: the
	 * difference between the regimes is the activation sums alone (swiglu F and B, the
	 * head's B: 3 x 32 x 32 floats a microbatch, two bytes fewer each) */
	int last = f->world - 1;
	assert_int_equal(op_bytes(f, last, OP_TPREDUCE) - op_bytes(b, last, OP_TPREDUCE),
	                 (int64_t)f->microbatches * 3 * 32 * 32 * 2);
	plan_free(f);
	plan_free(b);
}

/* Derived costs use the preset's rate for the regime's GEMM operands; peak= is the
 * rate whatever the regime.  With the preset's bandwidth the roofline's default
 * efficiencies apply (docs/semantics.md "Costs"): the 4096 x 4096 GEMM is compute-bound
 * at 0.75 of the rate on every preset, in F the loss reads x
 * and its target (2 passes of 1024 x 4096 at the activation bytes) at 0.8 of the
 * bandwidth; without a device, FLOPs over the rate alone. */
static void prec__derived_costs__at_the_operand_rate(void **state)
{
	(void)state;
	const char *fmt = "pipeline p;\nmesh pp=1;\nmicrobatches 1;\ninput 1024x4096;\n"
	                  "%s%s\nstage s0 { linear 4096; loss mse; }\nschedule 1f1b;\n";
	const struct {
		const char *prec, *device;
		double rate, bw, act;
	} rows[] = {
		{"", "device h100;", 67e12, 3.35e12, 4},
		{"precision tf32;\n", "device h100;", 494.5e12, 3.35e12, 4},
		{"precision bf16;\n", "device h100;", 989e12, 3.35e12, 2},
		{"precision bf16;\n", "device a100;", 312e12, 2.039e12, 2},
		{"precision f32;\n", "device a100;", 19.5e12, 2.039e12, 4},
		{"precision tf32;\n", "device h200;", 494.5e12, 4.8e12, 4},
		{"precision f32;\n", "device h100 peak=500TFLOPs;", 500e12, 3.35e12, 4},
		{"precision bf16;\n", "device peak=500TFLOPs h100;", 500e12, 3.35e12, 2},
		{"precision bf16;\n", "", 100e12, 0, 2}, // PROG_DEFAULT_FLOPS, no bandwidth
		{"precision bf16;\n", "device peak=989TFLOPs;", 989e12, 0, 2},
	};
	double flops = 2.0 * 1024 * 4096 * 4096;
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		char src[512];
		snprintf(src, sizeof src, fmt, rows[i].device, rows[i].prec);
		Plan *p = compile_plan(src);
		double mse = 2 * rows[i].act * 1024 * 4096 * 1e9 / (rows[i].bw * 0.8);
		double ns = rows[i].bw > 0 ? flops * 1e9 / (rows[i].rate * 0.75) + mse
		                           : flops * 1e9 / rows[i].rate;
		assert_int_equal(p->stages[0].cost[0], llround(ns));
		plan_free(p);
	}
	/* the statement may come before or after `device` */
	char src[512];
	snprintf(src, sizeof src, fmt, "precision bf16;\n", "device h100;");
	Plan *p = compile_plan(src);
	assert_int_equal(p->stages[0].cost[0], llround(flops * 1e9 / (989e12 * 0.75) +
	                                               2.0 * 2 * 1024 * 4096 * 1e9 / (3.35e12 * 0.8)));
	plan_free(p);
}

/* The plan says `precision bf16`, reads back to the same plan, and its reader locates
 * a wrong regime; piperun runs bf16 where its device emulates it and refuses tf32. */
static void prec__plan_line__round_trips_and_refused_by_piperun(void **state)
{
	(void)state;
	Plan *p = two("precision bf16;\n", "");
	size_t n;
	char *t = text_of(p, &n);
	assert_non_null(strstr(t, "\nprecision bf16\n"));
	Plan *q = reread(t, n);
	assert_int_equal(q->prec, PREC_BF16);
	assert_true(same_text(p, q));
	char *plain = as_plain(t);
	read_broken(plain, "precision bf16", "precision fp8", "unknown precision 'fp8'");
	read_broken(plain, "precision bf16", "precision f32", "unknown precision 'f32'");
	read_broken(plain, "precision bf16", "precision bf16 x", "unexpected text 'x'");
	free(plain);
	char err[512];
	assert_null(rt_device_check(&rt_device_cpu, q, err, sizeof err)); // the cpu emulates it
	RtDevice plain_dev = rt_device_cpu;
	plain_dev.round_bf16 = NULL;
	assert_non_null(rt_device_check(&plain_dev, q, err, sizeof err));
	assert_non_null(strstr(err, "does not emulate bf16 storage"));
	plan_free(q);
	free(t);
	q = two("precision tf32;\n", "");
	assert_non_null(rt_device_check(&rt_device_cpu, q, err, sizeof err));
	assert_non_null(strstr(err, "piperun runs f32 and bf16 plans"));
	plan_free(q);
	Plan *g = two("", "");
	t = text_of(g, &n);
	assert_null(strstr(t, "precision")); // f32: no line, plans as before
	assert_null(rt_device_check(&rt_device_cpu, g, err, sizeof err));
	free(t);
	plan_free(g);
	g = two("", "optimizer adamw distributed;\n"); // dp = 2, f32: piperun runs it
	t = text_of(g, &n);
	assert_non_null(strstr(t, " distributed\n"));
	q = reread(t, n);
	assert_true(q->optim.distributed && same_text(g, q));
	assert_null(rt_device_check(&rt_device_cpu, q, err, sizeof err));
	plan_free(q);
	free(t);
	plan_free(g);
	plan_free(p);
}

/* `mesh ... sp`: the tensors between stages are the rank's share of the sequence (and
 * the recomputed stage input too); the plan's mesh line says sp and reads back; the
 * reader refuses sp without tp; the cpu device runs it (tests/cli/sp_run.sh). */
static void prec__sequence_parallel__plan(void **state)
{
	(void)state;
	char one[1024], src[1024];
	snprintf(one, sizeof one, two_stages, "precision bf16;\n", "");
	char *at = strstr(one, "tp=2;");
	snprintf(src, sizeof src, "%.*stp=2 sp;%s", (int)(at - one), one, at + 5);
	Plan *sp = compile_plan(src), *whole = two("precision bf16;\n", "");
	assert_int_equal(sp->sp, 1);
	assert_int_equal(sp->edges[0].bytes * 2, whole->edges[0].bytes);
	for (int r = 0; r < sp->world; r++)
		assert_int_equal(op_bytes(sp, r, OP_SEND) * 2, op_bytes(whole, r, OP_SEND));
	/* s0 (embed 32; a body of rmsnorm and attention with 4 heads): the body's kept x
	 * and the norm's rstd halve; the embedding keeps every token id (32 rows x 4) */
	const PlanStage *a = &sp->stages[0], *b = &whole->stages[0];
	int64_t xs = 32 * 32 * 2, rstd = 32 * 4; // a norm's x and rstd, bf16 / f32
	assert_int_equal(b->save_fw - a->save_fw, (xs + rstd + xs) / 2);
	size_t n;
	char *t = text_of(sp, &n);
	assert_non_null(strstr(t, "\nmesh pp=2 dp=2 tp=2 sp\n"));
	Plan *q = reread(t, n);
	assert_true(same_text(sp, q));
	char *plain = as_plain(t);
	read_broken(plain, "mesh pp=2 dp=2 tp=2 sp", "mesh pp=4 dp=2 tp=1 sp", "needs tp > 1");
	free(plain);
	char err[512];
	assert_null(rt_device_check(&rt_device_cpu, q, err, sizeof err));
	plan_free(q);
	free(t);
	plan_free(sp);
	plan_free(whole);
}

/* piperun's bf16 storage (rt_bf16): to nearest, ties to even, as a cast to bf16 does. */
static void prec__bf16_rounding__nearest_ties_to_even(void **state)
{
	(void)state;
	const float e8 = 1.0f / 256, e7 = 1.0f / 128, e6 = 1.0f / 64;
	assert_true(rt_bf16(1.0f) == 1.0f);
	assert_true(rt_bf16(1.0f + e8) == 1.0f);                 // a tie: to the even 1
	assert_true(rt_bf16(1.0f + e7 + e8) == 1.0f + e6);       // a tie: to the even 1 + 2^-6
	assert_true(rt_bf16(1.0f + e8 + 1.0f / 1048576) == 1.0f + e7); // past the tie: up
	assert_true(rt_bf16(3.14159265f) == 3.140625f);
	assert_true(rt_bf16(-3.14159265f) == -3.140625f);
	assert_true(isinf(rt_bf16(3.4e38f)) && rt_bf16(3.4e38f) > 0); // past bf16's largest
	assert_true(isinf(rt_bf16(INFINITY)) && isnan(rt_bf16(NAN)));
	float z = rt_bf16(-0.0f);
	assert_true(z == 0.0f && signbit(z));
	float t[3] = {1.0f + e8 + 1.0f / 1048576, 2.0f, 1.0f / 3};
	RtTensor x = {.data = t, .rows = 1, .cols = 3, .bytes = sizeof t};
	assert_int_equal(rt_device_cpu.round_bf16(NULL, &x), 0);
	assert_true(t[0] == 1.0f + e7 && t[1] == 2.0f && t[2] == rt_bf16(1.0f / 3) && t[2] != 1.0f / 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(prec__gpt3_layer__korthikanti_table2),
		cmocka_unit_test(prec__llama2_70b_layer__by_hand),
		cmocka_unit_test(prec__static_bytes__per_parameter),
		cmocka_unit_test(prec__messages__at_their_type),
		cmocka_unit_test(prec__derived_costs__at_the_operand_rate),
		cmocka_unit_test(prec__plan_line__round_trips_and_refused_by_piperun),
		cmocka_unit_test(prec__sequence_parallel__plan),
		cmocka_unit_test(prec__bf16_rounding__nearest_ties_to_even),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
