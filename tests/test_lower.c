/* Lowering and plan tests: invariants over many shapes, hand-offs, skip gradients,
 * dp reductions, the plan file round trip and the reader on broken files (the verifier
 * on broken plans: test_verify.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../compiler/pipecc.h"
#include "../plan/mem.h"
#include "../plan/io.h"
#include "../plan/binary.h"
#include "../plan/line.h"
#include "../plan/op_line.h"

#include "lower_lib.h"

static int64_t count_ops(const Plan *p, int rank, int kind, int stage_or_edge)
{
	int64_t n = 0;
	for (int64_t i = 0; i < p->ranks[rank].nops; i++) {
		const PlanOp *o = &p->ranks[rank].ops[i];
		if (o->kind == kind && (stage_or_edge < 0 || o->stage == stage_or_edge))
			n++;
	}
	return n;
}

static void lower__matrix__verifies(void **state)
{
	(void)state;
	const char *scheds[] = {"gpipe", "1f1b"};
	int checked = 0;
	for (int si = 0; si < 2; si++)
		for (int pp = 1; pp <= 8; pp++)
			for (int dp = 1; dp <= 3; dp++)
				for (int mi = 0; mi < 3; mi++) {
					int m = mi == 0 ? 1 : mi == 1 ? 3 : 2 * pp;
					for (int variant = 0; variant < 4; variant++) {
						char extra[512] = "";
						if (variant == 1 && pp >= 3)
							snprintf(extra, sizeof extra, "skip s0 -> s2;");
						if (variant == 2 && pp >= 4)
							snprintf(extra, sizeof extra, "skip s0 -> s%d; skip s1 -> s3;", pp - 1);
						if (variant == 3) { // reversed placement
							int k = snprintf(extra, sizeof extra, "placement [");
							for (int s = 0; s < pp; s++)
								k += snprintf(extra + k, sizeof extra - k, "%s%d", s ? ", " : "",
								              pp - 1 - s);
							snprintf(extra + k, sizeof extra - k, "];");
						}
						Plan *p = compile_text(program(pp, pp, dp, m, extra), scheds[si], NULL, 0);
						assert_non_null(p);
						PlanError err;
						assert_int_equal(plan_verify(p, &err), 0);
						assert_int_equal(p->world, pp * dp);
						int64_t sends = 0, recvs = 0;
						for (int r = 0; r < p->world; r++) {
							int s = -1;
							for (int k = 0; k < p->nstages; k++)
								if (p->stages[k].pp == p->ranks[r].coord[DIM_PP])
									s = k;
							assert_int_equal(count_ops(p, r, OP_F, s), m);
							assert_int_equal(count_ops(p, r, OP_BW, s), m);
							assert_int_equal(count_ops(p, r, OP_ALLREDUCE, -1), dp > 1);
							assert_int_equal(count_ops(p, r, OP_OPTIM, -1), 1);
							sends += count_ops(p, r, OP_SEND, -1);
							recvs += count_ops(p, r, OP_RECV, -1);
							/* Every line runs the same number of ops. */
							int c[DIM_COUNT];
							memcpy(c, p->ranks[r].coord, sizeof c);
							c[DIM_DP] = 0;
							assert_int_equal(p->ranks[r].nops, p->ranks[plan_rank_of(p, c)].nops);
						}
						assert_int_equal(sends, recvs);
						/* Each remote edge moves m activations and m gradients per line. */
						int64_t want = 0;
						for (int e = 0; e < p->nedges; e++)
							want += 2 * m * (p->stages[p->edges[e].src].pp !=
							                 p->stages[p->edges[e].dst].pp);
						assert_int_equal(sends, want * dp);
						plan_free(p);
						checked++;
					}
				}
	assert_true(checked == 2 * 8 * 3 * 3 * 4);
}

/* A plan's bytes as a writer puts them (a malloc'd string of *n bytes). */
static char *plan_bytes(const Plan *p, size_t *n, int (*put)(const Plan *, FILE *))
{
	char *a = NULL;
	FILE *f = open_memstream(&a, n);
	assert_non_null(f);
	assert_int_equal(put(p, f), 0);
	fclose(f);
	return a;
}

static char *plan_text(const Plan *p, size_t *n)
{
	return plan_bytes(p, n, plan_write);
}

/* A schedule pipecc generates keeps no lines[]: every op's line is its stage's, or its
 * tensor's maker's (plan_stage_line).  --allow-deadlock lowers with lines kept, by the
 * same walk when the order runs: both plans must have the same ops, every op the same
 * line, and write the same text and binary form.  A custom order keeps its own lines. */
static void lower__stage_lines__as_the_walk_keeps_them(void **state)
{
	(void)state;
	const char *scheds[] = {"gpipe", "1f1b", "zbh1", "zbh2", // one stage per rank
	                        "interleaved", "loopedbfs", "zbv", "dualpipev"}; // two
	const char *extras[2][3] = {{"", "skip s0 -> s2; skip s1 -> s3;", "peers self_send;"},
	                            {"", "skip s0 -> s5; skip s2 -> s7;", "peers self_send;"}};
	int compared = 0;
	for (int si = 0; si < 8; si++)
		for (int xi = 0; xi < 3; xi++)
			for (int dp = 1; dp <= 2; dp++)
				for (int tune = 0; tune < 2; tune++) {
					int two = si >= 4;
					char *src = program_text(two ? 8 : 4, 4, dp, 8, scheds[si], "f=1 b=2 w=1",
					                         "latency=1us bandwidth=10GB/s", extras[two][xi]);
					PipeccOptions o = {.line = 1, .tune_overlap = tune};
					char errs[2048];
					Plan *p = compile_pipe(src, o, errs, sizeof errs);
					if (!p)
						fail_msg("%s: %s", scheds[si], errs);
					o.allow_deadlock = 1;
					Plan *k = compile_pipe(src, o, NULL, 0);
					assert_non_null(k);
					assert_int_equal(p->lines_by_stage, 1);
					assert_int_equal(k->lines_by_stage, 0);
					assert_int_equal(p->world, k->world);
					for (int r = 0; r < p->world; r++) {
						const PlanRank *a = &p->ranks[r], *b = &k->ranks[r];
						assert_null(a->lines);
						assert_non_null(b->lines);
						assert_int_equal(a->nops, b->nops);
						assert_memory_equal(a->ops, b->ops, (size_t)a->nops * sizeof *a->ops);
						for (int64_t i = 0; i < a->nops; i++) {
							assert_true(b->lines[i] > 0);
							assert_int_equal(plan_op_line(p, a, i), b->lines[i]);
						}
					}
					for (int bin = 0; bin < 2; bin++) {
						int (*put)(const Plan *, FILE *) = bin ? plan_write_binary : plan_write;
						size_t na, nb;
						char *ta = plan_bytes(p, &na, put), *tb = plan_bytes(k, &nb, put);
						assert_int_equal(na, nb);
						assert_memory_equal(ta, tb, na);
						free(ta);
						free(tb);
					}
					plan_free(p);
					plan_free(k);
					compared++;
				}
	assert_int_equal(compared, 8 * 3 * 2 * 2);
	const char *custom = "pipeline c; mesh pp=2; microbatches 2; input 2x8;\n"
	                     "stage a { linear 8; }\nstage b { linear 8; loss mse; }\n"
	                     "schedule custom {\n rank 0: 0F0 0F1 0B0 0B1;\n"
	                     " rank 1: 1F0 1B0 1F1 1B1;\n}\ncost * f=1 b=1 w=1; link ideal;\n";
	Plan *c = compile_src("custom.pipe", custom, strlen(custom));
	assert_int_equal(c->lines_by_stage, 0);
	assert_non_null(c->ranks[0].lines);
	assert_int_equal(c->ranks[0].lines[0], 5); // 0F0, on the schedule's line
	plan_free(c);
}

static void lower__same_rank_handoff__no_comm(void **state)
{
	(void)state;
	Plan *p = compile_text(program(4, 2, 1, 4, "placement [0, 0, 1, 1];"), "gpipe", NULL, 0);
	assert_non_null(p);
	/* Edge 0 (s0 -> s1) and edge 2 (s2 -> s3) stay on one rank; edge 1 crosses. */
	for (int r = 0; r < 2; r++)
		for (int64_t i = 0; i < p->ranks[r].nops; i++) {
			const PlanOp *o = &p->ranks[r].ops[i];
			if (o->kind == OP_SEND || o->kind == OP_RECV)
				assert_int_equal(o->stage, 1);
		}
	int local = 0;
	for (int i = 0; i < p->ranks[0].npeers; i++)
		if (p->ranks[0].peers[i].edge == 0) {
			assert_true(p->ranks[0].peers[i].local);
			assert_int_equal(p->ranks[0].peers[i].peer_rank, 0);
			local++;
		}
	assert_int_equal(local, 2); // s0 out and s1 in
	assert_int_equal(p->nroutes, 2);
	plan_free(p);
}

static void lower__skip_gradient__routes_back(void **state)
{
	(void)state;
	Plan *p = compile_text(program(4, 4, 1, 3, "skip s0 -> s2;"), NULL, NULL, 0);
	assert_non_null(p);
	int skip = 3;
	assert_true(p->edges[skip].skip);
	assert_int_equal(p->edges[skip].src, 0);
	assert_int_equal(p->edges[skip].dst, 2);
	/* Activations 0 -> 2, gradients 2 -> 0, once per microbatch. */
	assert_int_equal(count_ops(p, 0, OP_SEND, skip), 3);
	assert_int_equal(count_ops(p, 2, OP_RECV, skip), 3);
	assert_int_equal(count_ops(p, 2, OP_SEND, skip), 3);
	assert_int_equal(count_ops(p, 0, OP_RECV, skip), 3);
	for (int64_t i = 0; i < p->ranks[2].nops; i++) {
		const PlanOp *o = &p->ranks[2].ops[i];
		if (o->kind == OP_SEND && o->stage == skip) {
			assert_int_equal(o->dir, DIR_GRAD);
			assert_int_equal(o->peer, 0);
			const PlanRoute *g = &p->routes[o->route], *f = &p->routes[g->inverse_of];
			assert_int_equal(g->dir, DIR_GRAD);
			assert_int_equal(f->dir, DIR_ACT);
			assert_int_equal(g->src_rank, f->dst_rank);
			assert_int_equal(g->dst_rank, f->src_rank);
			assert_int_equal(g->src_dev, f->dst_dev);
		}
	}
	plan_free(p);
}

static void lower__dp_allreduce__after_last_backward(void **state)
{
	(void)state;
	Plan *p = compile_text(program(2, 2, 3, 4, ""), NULL, NULL, 0);
	assert_non_null(p);
	for (int r = 0; r < p->world; r++) {
		int64_t last_bw = -1, ar = -1, opt = -1;
		for (int64_t i = 0; i < p->ranks[r].nops; i++) {
			int k = p->ranks[r].ops[i].kind;
			if (k == OP_BW)
				last_bw = i;
			if (k == OP_ALLREDUCE)
				ar = i;
			if (k == OP_OPTIM)
				opt = i;
		}
		assert_true(last_bw >= 0 && ar > last_bw && opt > ar);
		const PlanOp *o = &p->ranks[r].ops[ar];
		assert_int_equal(plan_op_bytes(p, o), p->stages[o->stage].params * 4);
	}
	plan_free(p);
}

/* `recompute s1;`: s1 (linear 8, relu on 2 rows) saved 64 (relu, F to B), 64 (linear's
 * input, F to W) and 64 (its output gradient, B to W); recomputing it keeps its 64-byte
 * input from F to B, rebuilds 64 at B, holds 128 from B to W, and B costs f + b. */
static void lower__recompute__figures_and_cost(void **state)
{
	(void)state;
	Plan *p = compile_text(program(3, 3, 1, 4, "recompute s1;"), NULL, NULL, 0);
	assert_non_null(p);
	const PlanStage *s0 = &p->stages[0], *s1 = &p->stages[1];
	assert_int_equal(s0->recompute, 0);
	assert_int_equal(s0->save_fb, 64);
	assert_int_equal(s0->save_fw, 64);
	assert_int_equal(s0->save_bw, 64);
	assert_int_equal(s0->cost[1], 1000);
	assert_int_equal(s1->recompute, 1);
	assert_int_equal(s1->save_fb, 64);
	assert_int_equal(s1->save_fw, 0);
	assert_int_equal(s1->save_bw, 128);
	assert_int_equal(s1->save_re, 64);
	assert_int_equal(s1->cost[0], 1000);
	assert_int_equal(s1->cost[1], 2000);
	assert_int_equal(s1->cost[2], 1000);
	plan_free(p);
	p = compile_text(program(3, 3, 1, 4, "recompute *;"), NULL, NULL, 0);
	assert_non_null(p);
	for (int s = 0; s < 3; s++)
		assert_int_equal(p->stages[s].recompute, 1);
	plan_free(p);
}

/* Full recomputation of a transformer stage re-runs its residual bodies only, as
 * Megatron recomputes transformer layers: the embedding, the final norm, the head and
 * the loss keep what they save.  N = 16 tokens, d 16, mlp 32, V 32, f32 (bytes):
 *   embed: x (ids) 64 to W; layernorm: x 1024 + mean, rstd 128 to W, dy 1024 to W;
 *   mlp: x 1024, h 2048, a 2048 to W, dy 1024 + dh 2048 to W; head: x 1024 to W, dy
 *   2048 to W; xent: logits 2048 + lse 64 + targets 64 to B.
 * s0 (embed; a body of norm and mlp): the span is the body; F keeps its input (1024)
 * and the embedding's ids (64), B rebuilds 6272 - 1024 = 5248 and holds the body's
 * 6272 to W beside 1024 + 1024 + 3072; its FLOPs are all the body's: b gains f.
 * s1 (a body; norm, head, loss): F keeps the stage input (1024) and the tail's 2176
 * to B and 1152 + 1024 to W; B rebuilds 5248; the body has 32768 of the stage's 49152
 * F FLOPs (the head 16384): b gains 2/3 of f. */
static void lower__recompute__leaves_embedding_head_and_loss_alone(void **state)
{
	(void)state;
	const char *src = "pipeline t;\nmesh pp=2;\nmicrobatches 2;\ninput tokens 2x8 vocab=32;\n"
	                  "stage s0 { embed 16; residual { layernorm; mlp 32; } }\n"
	                  "stage s1 { residual { layernorm; mlp 32; } layernorm; head; loss xent; }\n"
	                  "cost * f=3us b=3us w=3us;\nrecompute *;\nschedule 1f1b;\n";
	Plan *p = compile_text(src, NULL, NULL, 0);
	assert_non_null(p);
	const PlanStage *s0 = &p->stages[0], *s1 = &p->stages[1];
	assert_int_equal(s0->recompute, PLAN_RECOMPUTE_FULL);
	assert_int_equal(s0->save_fb, 1024);
	assert_int_equal(s0->save_fw, 64);
	assert_int_equal(s0->save_re, 5248);
	assert_int_equal(s0->save_bw, 1024 + 1024 + 3072 + 6272);
	assert_int_equal(s0->cost[1], 6000);
	assert_int_equal(s1->save_fb, 1024 + 2176);
	assert_int_equal(s1->save_fw, 1152 + 1024);
	assert_int_equal(s1->save_re, 5248);
	assert_int_equal(s1->save_bw, 1024 + 3072 + 1024 + 2048 + 6272);
	assert_int_equal(s1->cost[1], 5000);
	int lo, hi;
	plan_recompute_span(s1, &lo, &hi);
	assert_int_equal(lo, 0);
	assert_int_equal(hi, 3);
	plan_recompute_span(s0, &lo, &hi);
	assert_int_equal(lo, 1);
	assert_int_equal(hi, 4);
	plan_free(p);
}

/* Reads text back, verifies it and writes it again: the same bytes; the plan read. */
static Plan *read_back(const char *text, size_t n)
{
	FILE *in = fmemopen((void *)text, n, "r");
	PlanError err;
	Plan *q = plan_read(in, "mem", &err);
	fclose(in);
	if (!q)
		fail_msg("line %lld: %s", (long long)err.line, err.msg);
	assert_int_equal(plan_verify(q, &err), 0);
	size_t nb;
	char *b = plan_text(q, &nb);
	assert_int_equal(n, nb);
	assert_memory_equal(text, b, n);
	free(b);
	return q;
}

/* Selective: s0's attention (2 sequences of 16 tokens, 2 heads of 16) drops its 2 x 2 x
 * 16 x 16 probabilities (4096 bytes) from what F keeps; B rebuilds them, gaining the
 * score product's share of F's FLOPs: 2 x 2 x 2 x 16 x 16 x 16 = 32768 of 327680
 * (the qkv projection 196608, the two S x S products 65536, the output 65536), a tenth
 * of f.  `*` passes over s1 (no attention); a stage's own statement wins over `*`; the
 * plan's text keeps the mode. */
static void lower__selective__figures_and_cost(void **state)
{
	(void)state;
	const char *head = "pipeline g; mesh pp=2; microbatches 4; input tokens 2x16 vocab=64;\n"
	                   "stage s0 { embed 32; residual { layernorm; attention heads=2; } }\n"
	                   "stage s1 { layernorm; head; loss xent; }\n"
	                   "schedule 1f1b; cost * f=1000ns b=1000ns w=1000ns;\n";
	char src[512];
	snprintf(src, sizeof src, "%s", head);
	Plan *none = compile_text(src, NULL, NULL, 0);
	snprintf(src, sizeof src, "%srecompute * selective;\n", head);
	Plan *p = compile_text(src, NULL, NULL, 0);
	assert_non_null(none);
	assert_non_null(p);
	const PlanStage *a = &none->stages[0], *s0 = &p->stages[0], *s1 = &p->stages[1];
	assert_int_equal(s0->recompute, PLAN_RECOMPUTE_SELECTIVE);
	assert_int_equal(s0->save_re, 4096);
	assert_int_equal(s0->save_fw, a->save_fw - 4096);
	assert_int_equal(s0->save_fb, a->save_fb);
	assert_int_equal(s0->save_bw, a->save_bw);
	assert_int_equal(s0->cost[1], 1100);
	assert_int_equal(s1->recompute, PLAN_RECOMPUTE_NONE);
	assert_memory_equal(s1->cost, none->stages[1].cost, sizeof s1->cost);
	size_t n = 0;
	char *text = plan_text(p, &n);
	assert_non_null(strstr(text, " recompute selective save_re=4096 "));
	Plan *q = read_back(text, n);
	assert_int_equal(q->stages[0].recompute, PLAN_RECOMPUTE_SELECTIVE);
	assert_int_equal(q->stages[0].save_re, 4096);
	free(text);
	plan_free(q);
	plan_free(p);
	snprintf(src, sizeof src, "%srecompute * selective;\nrecompute s0 full;\n", head);
	p = compile_text(src, NULL, NULL, 0);
	assert_non_null(p);
	assert_int_equal(p->stages[0].recompute, PLAN_RECOMPUTE_FULL);
	plan_free(p);
	plan_free(none);
}

static void lower__plan__roundtrip_byte_identical(void **state)
{
	(void)state;
	const char *extras[] = {"", "skip s0 -> s2;", "placement [2, 0, 1];",
	                        "route s0 -> s1 forward 0:d0 -> 2:d5;",
	                        "recompute s1;\ndevice memory=1GB;"};
	for (int i = 0; i < 5; i++) {
		Plan *p = compile_text(program(3, 3, 2, 5, extras[i]), NULL, NULL, 0);
		assert_non_null(p);
		size_t na = 0;
		char *a = plan_text(p, &na);
		plan_free(read_back(a, na));
		free(a);
		plan_free(p);
	}
}

/* What pipecc --emit summary (kind 0) or torch-csv (1) writes for p. */
static char *emit_text(const Plan *p, int kind, size_t *n)
{
	char *a = NULL;
	FILE *f = open_memstream(&a, n);
	int rc = kind == 0 ? pipecc_emit_summary(p, f) : pipecc_emit_torch_csv(p, f, 1);
	fclose(f);
	assert_int_equal(rc, 0);
	return a;
}

static char *file_text(FILE *f, size_t *n)
{
	fflush(f);
	long end = ftell(f);
	assert_true(end >= 0);
	char *b = malloc((size_t)end + 1);
	assert_non_null(b);
	rewind(f);
	assert_int_equal(fread(b, 1, (size_t)end, f), (size_t)end);
	*n = (size_t)end;
	return b;
}

/* The writer formats a plan once into a regular file (the header line put in its
 * place last, wherever the plan starts) and twice into anything else (a memory stream,
 * a file opened for appending); the reader reads in 1 MiB blocks.  A plan of several
 * blocks comes out the same bytes every way and reads back from the file. */
static void plan__write_read__same_bytes_every_way(void **state)
{
	(void)state;
	Plan *p = compile_text(program(3, 3, 1, 6000, ""), NULL, NULL, 0);
	assert_non_null(p);
	size_t na, nb, nc;
	char *a = plan_text(p, &na);
	assert_true(na > (2u << 20));
	FILE *f = tmpfile();
	assert_non_null(f);
	fputs("x\n", f);
	assert_int_equal(plan_write(p, f), 0);
	char *b = file_text(f, &nb);
	assert_int_equal(nb, na + 2);
	assert_memory_equal(b, "x\n", 2);
	assert_memory_equal(b + 2, a, na);
	fseek(f, 2, SEEK_SET);
	PlanError err;
	Plan *q = plan_read(f, "tmp", &err);
	fclose(f);
	if (!q)
		fail_msg("line %lld: %s", (long long)err.line, err.msg);
	char path[] = "/tmp/test_lower.XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "a+");
	assert_non_null(f);
	unlink(path);
	assert_int_equal(plan_write(q, f), 0);
	char *c = file_text(f, &nc);
	fclose(f);
	assert_int_equal(nc, na);
	assert_memory_equal(c, a, na);
	free(a);
	free(b);
	free(c);
	plan_free(p);
	plan_free(q);
}

static char *gpt_program(int tp, int l0, int l1, const char *schedule);

/* src lowered as the world and as one line: the line expands to the world byte for
 * byte, and the line plan reads, verifies and writes back the same.  line_want: whether
 * the program can be a line plan at all. */
static void check_line(const char *src, const char *schedule, int line_want)
{
	want_line = 0;
	Plan *w = compile_text(src, schedule, NULL, 0);
	want_line = 1;
	Plan *l = compile_text(src, schedule, NULL, 0);
	want_line = 0;
	assert_non_null(w);
	assert_non_null(l);
	if (l->line != line_want || w->line)
		fail_msg("line plan %d, wanted %d:\n%s", l->line, line_want, src);
	if (line_want)
		assert_int_equal(l->world, w->dims[DIM_PP]);
	size_t failed, nw, nx, nl;
	Plan *x = line_want ? plan_expand(l, &failed) : NULL;
	char *tw = plan_text(w, &nw), *tx = plan_text(x ? x : l, &nx), *tl = plan_text(l, &nl);
	if (nw != nx || memcmp(tw, tx, nw))
		fail_msg("the expanded line is not the world's plan:\n%s", src);
	Plan *q = read_back(tl, nl);
	/* the summary and the torch CSV read the line as they read the world */
	for (int kind = 0; kind < 2; kind++) {
		size_t na, nb2;
		char *ea = emit_text(w, kind, &na), *eb = emit_text(l, kind, &nb2);
		if (na != nb2 || memcmp(ea, eb, na))
			fail_msg("--emit %s differs on the line:\n%s", kind ? "torch-csv" : "summary", src);
		free(ea);
		free(eb);
	}
	/* one process's view (plan_expand_for): every rank's ops, borrowed or its own, are
	 * the world's as plan_rank_op gives them */
	for (int only = 0; line_want && only < w->world; only += w->world / 3 + 1) {
		Plan *y = plan_expand_for(l, only, &failed);
		assert_non_null(y);
		assert_int_equal(y->world, w->world);
		/* a view: line 0 and its own rank held, line 0's routes, nothing per world rank */
		assert_int_equal(y->view, only + 1);
		assert_int_equal(y->nroutes, l->nroutes);
		assert_false(plan_rank(y, only, NULL)->borrowed);
		for (int r = 0; r < w->world; r++) {
			PlanRank tmp;
			const PlanRank *a = plan_rank(y, r, &tmp), *b = &w->ranks[r];
			assert_memory_equal(a->coord, b->coord, sizeof a->coord);
			assert_int_equal(a->device, b->device);
			assert_int_equal(a->nops, b->nops);
			for (int64_t i = 0; i < a->nops; i++) {
				PlanOp x = plan_rank_op(y, r, i);
				const PlanOp *o = &b->ops[i];
				assert_true(x.kind == o->kind && x.dir == o->dir && x.part == o->part &&
				            x.stage == o->stage && x.mb == o->mb && x.peer == o->peer &&
				            x.group == o->group && x.route == o->route &&
				            plan_op_bytes(y, &x) == plan_op_bytes(w, o));
			}
		}
		plan_free(y);
	}
	free(tw);
	free(tx);
	free(tl);
	plan_free(w);
	plan_free(l);
	plan_free(x);
	plan_free(q);
}

static void lower__line__expands_to_the_world(void **state)
{
	(void)state;
	/* the last two state devices off the rule w % per_node: only the world says them */
	const char *extras[] = {"", "skip s0 -> s2;", "placement [2, 0, 1];", "peers self_send;",
	                        "devices per_node=4;", "route s0 -> s1 forward 0:d0 -> 2:d2;",
	                        "route s0 -> s1 forward 0:d0 -> 2:d5;", "devices [0, 1, 2, 3, 5, 4];"};
	for (int i = 0; i < 8; i++) {
		check_line(program(3, 3, 2, 5, extras[i]), NULL, i < 6);
		if (i == 5 || i == 6) // the routes name pp-outer world ranks
			continue;
		char *src = program(3, 3, 2, 5, extras[i]);
		memcpy(strstr(src, "mesh pp=3 dp=2;"), "mesh dp=2 pp=3;", 15); // pp innermost
		check_line(src, NULL, i < 6);
	}
	/* a route stated on line 1: only the world can carry its place */
	check_line(program(3, 3, 2, 5, "route s0 -> s1 forward 1:d1 -> 3:d3;"), NULL, 0);
	const char *scheds[] = {"1f1b", "gpipe", "zbh1"};
	for (int tp = 1; tp <= 2; tp++)
		for (int k = 0; k < 3; k++) {
			check_line(gpt_program(tp, 1, 1, scheds[k]), NULL, 1);
			char *src = gpt_program(tp, 1, 1, scheds[k]), mesh[32];
			snprintf(mesh, sizeof mesh, "mesh tp=%d pp=2 dp=2;", tp); // tp outermost
			memcpy(strstr(src, "mesh pp=2 dp=2 tp="), mesh, strlen(mesh));
			check_line(src, NULL, 1);
		}
}

/* The truncation and corruption checks below, on an expanded plan and on a line plan. */
static void reader_rejects(int line);

static void plan__reader__rejects_truncated_and_garbled(void **state)
{
	(void)state;
	reader_rejects(0);
	reader_rejects(1);
}

static void reader_rejects(int line)
{
	want_line = line;
	Plan *p = compile_text(program(3, 3, 1 + line, 2, "skip s0 -> s2;"), NULL, NULL, 0);
	want_line = 0;
	assert_non_null(p);
	assert_int_equal(p->line, line);
	size_t n;
	char *text = plan_text(p, &n);
	plan_free(p);
	/* Every truncation at a line boundary fails with a line number. */
	int lines = 0;
	for (size_t cut = 0; cut < n; cut++) {
		if (cut && text[cut - 1] != '\n')
			continue;
		FILE *in = fmemopen(text, cut ? cut : 1, "r");
		PlanError err;
		Plan *q = cut ? plan_read(in, "mem", &err) : NULL;
		fclose(in);
		assert_null(q);
		lines++;
	}
	assert_true(lines > 20);
	/* Random byte changes: never a crash; a plan that still reads must still verify or
	 * fail verification cleanly. */
	srand(7);
	char *copy = malloc(n);
	int rejected = 0;
	for (int it = 0; it < 3000; it++) {
		memcpy(copy, text, n);
		for (int k = 0; k < 1 + it % 3; k++)
			copy[rand() % n] = "0123456789 -=x@\nZ"[rand() % 17];
		FILE *in = fmemopen(copy, n, "r");
		PlanError err;
		Plan *q = plan_read(in, "mem", &err);
		fclose(in);
		if (!q) {
			rejected++;
			assert_true(err.line > 0);
			assert_true(err.msg[0] != 0);
			continue;
		}
		if (plan_verify(q, &err))
			assert_true(err.msg[0] != 0);
		plan_free(q);
	}
	assert_true(rejected > 1000);
	free(copy);
	free(text);
}

/* Every SEND to self of p is followed by its RECV from self in the same group; returns
 * how many there are. */
static int self_sends_paired(const Plan *p)
{
	int selfs = 0;
	for (int r = 0; r < p->world; r++) {
		const PlanRank *rk = &p->ranks[r];
		for (int64_t i = 0; i < rk->nops; i++) {
			const PlanOp *o = &rk->ops[i];
			if (o->kind != OP_SEND || o->peer != r)
				continue;
			selfs++;
			assert_true(i + 1 < rk->nops);
			assert_int_equal(rk->ops[i + 1].kind, OP_RECV);
			assert_int_equal(rk->ops[i + 1].peer, r);
			assert_int_equal(rk->ops[i + 1].group, o->group);
		}
	}
	return selfs;
}

/* An order that cannot run, lowered naively (--allow-deadlock): each send to self still
 * shares its group with its receive (in a group of its own the receive would never be
 * posted while the send waits), so the plan verifies and pipesim sees the cross-rank
 * cycle, not a send to self that never completes. */
static void lower__allow_deadlock__self_send_keeps_its_receive(void **state)
{
	(void)state;
	const char *src = "pipeline t; mesh pp=2; microbatches 2; input 2x8;\n"
	                  "stage s0 { linear 8; relu; }\nstage s1 { linear 8; relu; }\n"
	                  "stage s2 { linear 8; relu; }\nstage s3 { linear 8; loss mse; }\n"
	                  "skip s0 -> s3; placement v; peers self_send;\n"
	                  "schedule custom {\n rank 0: 0F0 3F0 0F1 3F1 3B0 3B1 0B0 0B1;\n"
	                  " rank 1: 1F1 1F0 2F0 2F1 2B0 2B1 1B0 1B1;\n}\n";
	char errs[2048];
	assert_null(compile_pipe(src, (PipeccOptions){0}, errs, sizeof errs));
	assert_non_null(strstr(errs, "cannot run"));
	Plan *p = compile_pipe(src, (PipeccOptions){.allow_deadlock = 1}, errs, sizeof errs);
	if (!p)
		fail_msg("%s", errs);
	assert_true(self_sends_paired(p) > 0);
	PlanError err;
	assert_int_equal(plan_verify(p, &err), 0);
	plan_free(p);
}

/* `peers self_send;`: same-rank edges become a SEND and a RECV to self in one group,
 * registered `self`; the plan verifies and reads back byte for byte, and the verifier
 * names a send to self without its receive and a `local` entry for an edge sent. */
static void lower__self_send__one_group_and_verified(void **state)
{
	(void)state;
	Plan *p = compile_text(program(4, 2, 1, 4, "peers self_send;"), "zbv", NULL, 0);
	assert_non_null(p);
	int peers = 0;
	for (int r = 0; r < p->world; r++)
		for (int i = 0; i < p->ranks[r].npeers; i++)
			peers += p->ranks[r].peers[i].local == PEER_SELF;
	assert_true(self_sends_paired(p) > 0);
	assert_true(peers > 0);
	PlanError err;
	assert_int_equal(plan_verify(p, &err), 0);
	char *a = NULL, *b = NULL;
	size_t na = 0, nb = 0;
	FILE *f = open_memstream(&a, &na);
	assert_int_equal(plan_write(p, f), 0);
	fclose(f);
	assert_non_null(strstr(a, " self\n"));
	FILE *in = fmemopen(a, na, "r");
	Plan *q = plan_read(in, "mem", &err);
	fclose(in);
	if (!q)
		fail_msg("line %lld: %s", (long long)err.line, err.msg);
	f = open_memstream(&b, &nb);
	assert_int_equal(plan_write(q, f), 0);
	fclose(f);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na);
	free(a);
	free(b);
	plan_free(q);

	/* Drop the first receive from self. */
	int r = 1;
	int64_t k = -1;
	for (int64_t i = 0; i < p->ranks[r].nops && k < 0; i++)
		if (p->ranks[r].ops[i].kind == OP_RECV && p->ranks[r].ops[i].peer == r)
			k = i;
	assert_true(k >= 0);
	PlanOp keep = p->ranks[r].ops[k];
	memmove(&p->ranks[r].ops[k], &p->ranks[r].ops[k + 1],
	        (size_t)(p->ranks[r].nops - k - 1) * sizeof(PlanOp));
	p->ranks[r].nops--;
	expect_verify_error(p, "a send to self", "never completes");
	memmove(&p->ranks[r].ops[k + 1], &p->ranks[r].ops[k],
	        (size_t)(p->ranks[r].nops - k) * sizeof(PlanOp));
	p->ranks[r].ops[k] = keep;
	p->ranks[r].nops++;
	assert_int_equal(plan_verify(p, &err), 0);
	/* A `local` entry for an edge the plan sends to self. */
	for (int i = 0; i < p->ranks[r].npeers; i++)
		if (p->ranks[r].peers[i].local == PEER_SELF) {
			p->ranks[r].peers[i].local = PEER_LOCAL;
			break;
		}
	expect_verify_error(p, "should name stage", "(self)");
	plan_free(p);
}

static void lower__bad_placement__diagnosed(void **state)
{
	(void)state;
	char errs[2048];
	assert_null(compile_text(program(4, 2, 1, 4, ""), "1f1b", errs, sizeof errs));
	assert_non_null(strstr(errs, "one stage per pipeline rank"));
	assert_null(compile_text(program(2, 4, 1, 4, ""), "gpipe", errs, sizeof errs));
	assert_non_null(strstr(errs, "gets no stage"));
	assert_null(compile_text(program(3, 2, 1, 4, "placement v;"), "gpipe", errs, sizeof errs));
	assert_non_null(strstr(errs, "two stages per pipeline rank"));
}

static void emit__torch_csv__pytorch_names(void **state)
{
	(void)state;
	Plan *p = compile_text(program(2, 2, 1, 2, ""), "1f1b", NULL, 0);
	assert_non_null(p);
	char *a = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&a, &n);
	pipecc_emit_torch_csv(p, f, 0);
	fclose(f);
	assert_string_equal(a, "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
	free(a);
	f = open_memstream(&a, &n);
	pipecc_emit_torch_csv(p, f, 1);
	fclose(f);
	assert_non_null(strstr(a, "0SEND_F0"));
	assert_non_null(strstr(a, "1RECV_F0"));
	assert_non_null(strstr(a, "1SEND_B0"));
	assert_non_null(strstr(a, "0RECV_B0"));
	free(a);
	plan_free(p);
}


/* A small GPT on pp=2 dp=2 tp=T: s0 = embedding and L0 layers, s1 = L1 layers, norm,
 * head and loss; every layer is attention then MLP, each in a residual. */
static char *gpt_program(int tp, int l0, int l1, const char *schedule)
{
	static char buf[2048];
	snprintf(buf, sizeof buf,
	         "pipeline g;\nmesh pp=2 dp=2 tp=%d;\nmicrobatches 4;\n"
	         "input tokens 2x16 vocab=64;\n"
	         "block gpt { residual { layernorm; attention heads=4 bias; }\n"
	         "            residual { layernorm; mlp 128 bias; } }\n"
	         "stage s0 { embed 32 positions; gpt x %d; }\n"
	         "stage s1 { gpt x %d; layernorm; head; loss xent; }\n"
	         "schedule %s;\ncost * f=100 b=100 w=100;\n",
	         tp, l0, l1, schedule);
	return buf;
}

/* Megatron's all-reduces, counted from the program: forward after the embedding, each
 * attention, each MLP and the loss; backward after each attention, each MLP and the
 * head.  A stage has one more part than cuts unless its last layer (forward) or first
 * (backward) ends in one. */
static void lower__tp__reduce_counts_from_formula(void **state)
{
	(void)state;
	const char *scheds[] = {"1f1b", "gpipe", "zbh1"};
	const int tps[] = {2, 4};
	for (int si = 0; si < 3; si++)
		for (int ti = 0; ti < 2; ti++)
			for (int l0 = 1; l0 <= 2; l0++) {
				int l1 = 3 - l0, m = 4, tp = tps[ti];
				Plan *p = compile_text(gpt_program(tp, l0, l1, scheds[si]), NULL, NULL, 0);
				assert_non_null(p);
				int fwd[2] = {1 + 2 * l0, 2 * l1 + 1}; // embedding / loss
				int bwd[2] = {2 * l0, 2 * l1 + 1};     // head
				int fparts[2] = {fwd[0], fwd[1]};      // both stages end in a cut
				int bparts[2] = {bwd[0] + 1, bwd[1] + 1}; // neither begins with one
				assert_int_equal(p->world, 2 * 2 * tp);
				for (int r = 0; r < p->world; r++) {
					int q = p->ranks[r].coord[DIM_PP];
					int64_t act = 0, grad = 0, back = 0;
					for (int64_t i = 0; i < p->ranks[r].nops; i++) {
						const PlanOp *o = &p->ranks[r].ops[i];
						act += o->kind == OP_TPREDUCE && o->dir == DIR_ACT;
						grad += o->kind == OP_TPREDUCE && o->dir == DIR_GRAD;
						back += o->kind == OP_B || o->kind == OP_BW;
						if (o->kind == OP_TPREDUCE)
							assert_true(plan_op_bytes(p, o) == 2 * 16 * 32 * 4 ||
							            plan_op_bytes(p, o) == 2 * 16 * 3 * 4);
					}
					assert_int_equal(act, m * fwd[q]);
					assert_int_equal(grad, m * bwd[q]);
					assert_int_equal(count_ops(p, r, OP_F, -1), m * fparts[q]);
					assert_int_equal(back, m * bparts[q]);
					assert_int_equal(count_ops(p, r, OP_W, -1), strcmp(scheds[si], "zbh1") ? 0 : m);
					/* every member of the tp group runs the same list */
					int c[DIM_COUNT];
					memcpy(c, p->ranks[r].coord, sizeof c);
					c[DIM_TP] = 0;
					const PlanRank *a = &p->ranks[plan_rank_of(p, c)], *b = &p->ranks[r];
					assert_int_equal(a->nops, b->nops);
					for (int64_t i = 0; i < a->nops; i++) {
						assert_int_equal(a->ops[i].kind, b->ops[i].kind);
						assert_int_equal(a->ops[i].stage, b->ops[i].stage);
						assert_int_equal(a->ops[i].mb, b->ops[i].mb);
						assert_int_equal(a->ops[i].part, b->ops[i].part);
					}
				}
				PlanError err;
				assert_int_equal(plan_verify(p, &err), 0);
				plan_free(p);
			}
	/* tp = 1: no TPREDUCE and no part */
	Plan *p = compile_text(gpt_program(1, 1, 2, "1f1b"), NULL, NULL, 0);
	assert_non_null(p);
	for (int r = 0; r < p->world; r++) {
		assert_int_equal(count_ops(p, r, OP_TPREDUCE, -1), 0);
		for (int64_t i = 0; i < p->ranks[r].nops; i++)
			assert_int_equal(p->ranks[r].ops[i].part, 0);
	}
	plan_free(p);
}

/* Per-rank parameters at tp: the split layers' weights divided by tp, the row-parallel
 * biases, positions and norms whole; the dp all-reduce moves a rank's share. */
static void lower__tp__params_divided(void **state)
{
	(void)state;
	const int64_t d = 32, f = 128, V = 64, S = 16;
	for (int tp = 1; tp <= 4; tp *= 2) {
		Plan *p = compile_text(gpt_program(tp, 1, 1, "1f1b"), NULL, NULL, 0);
		assert_non_null(p);
		int64_t attn = (d * 3 * d + 3 * d) / tp + d * d / tp + d;
		int64_t mlp = (d * f + f) / tp + f / tp * d + d;
		int64_t layer = 2 * 2 * d + attn + mlp;
		assert_int_equal(p->stages[0].params, V / tp * d + S * d + layer);
		assert_int_equal(p->stages[1].params, layer + 2 * d + V / tp * d);
		for (int r = 0; r < p->world; r++)
			for (int64_t i = 0; i < p->ranks[r].nops; i++)
				if (p->ranks[r].ops[i].kind == OP_ALLREDUCE)
					assert_int_equal(plan_op_bytes(p, &p->ranks[r].ops[i]),
					                 p->stages[p->ranks[r].ops[i].stage].params * 4);
		/* write -> read -> write is byte-identical with TPREDUCE and part= */
		size_t na = 0;
		char *a = plan_text(p, &na);
		Plan *q = read_back(a, na);
		assert_int_equal(q->per_node, tp > 1 ? 8 : 0); // the node line comes with tp > 1
		free(a);
		plan_free(q);
		plan_free(p);
	}
}
int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lower__matrix__verifies),
		cmocka_unit_test(lower__stage_lines__as_the_walk_keeps_them),
		cmocka_unit_test(lower__same_rank_handoff__no_comm),
		cmocka_unit_test(lower__skip_gradient__routes_back),
		cmocka_unit_test(lower__dp_allreduce__after_last_backward),
		cmocka_unit_test(lower__plan__roundtrip_byte_identical),
		cmocka_unit_test(lower__recompute__figures_and_cost),
		cmocka_unit_test(lower__recompute__leaves_embedding_head_and_loss_alone),
		cmocka_unit_test(lower__selective__figures_and_cost),
		cmocka_unit_test(plan__reader__rejects_truncated_and_garbled),
		cmocka_unit_test(lower__self_send__one_group_and_verified),
		cmocka_unit_test(lower__allow_deadlock__self_send_keeps_its_receive),
		cmocka_unit_test(lower__bad_placement__diagnosed),
		cmocka_unit_test(emit__torch_csv__pytorch_names),
		cmocka_unit_test(lower__tp__reduce_counts_from_formula),
		cmocka_unit_test(lower__tp__params_divided),
		cmocka_unit_test(lower__line__expands_to_the_world),
		cmocka_unit_test(plan__write_read__same_bytes_every_way),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
