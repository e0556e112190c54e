/* Vocabulary padding (`input tokens BxS vocab=V pad=M;`, docs/language.md): the padded
 * vocabulary is Megatron's (_vocab_size_with_padding: the least multiple of M x tp at
 * least V), the tables, the head and the loss are counted over it (parameters, FLOPs,
 * saved bytes, the tp split), the plan keeps both vocabularies, and the loss kernels
 * leave the padded columns out: a padded column's logit, however large, changes neither
 * the loss nor the real columns' gradient, and gets none itself. */
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
#include "plan_lib.h"
#include "../runtime/tkernels.h"

/* examples/gpt2.pipe with `mesh pp=4 tp=TP;` and `vocab=50257 pad=128`. */
static Plan *gpt2(int tp, int tied)
{
	FILE *f = fopen("examples/gpt2.pipe", "rb");
	assert_non_null(f);
	static char src[1 << 16], out[1 << 16];
	size_t n = fread(src, 1, sizeof src - 1, f);
	fclose(f);
	src[n] = 0;
	char mesh[32];
	snprintf(mesh, sizeof mesh, "mesh pp=4 tp=%d;", tp);
	const char *from[] = {"mesh pp=4;", "vocab=50257;", "head tied;"};
	const char *to[] = {mesh, "vocab=50257 pad=128;", tied ? "head tied;" : "head;"};
	for (int i = 0; i < 3; i++) {
		char *at = strstr(src, from[i]);
		assert_non_null(at);
		snprintf(out, sizeof out, "%.*s%s%s", (int)(at - src), src, to[i],
		         at + strlen(from[i]));
		memcpy(src, out, strlen(out) + 1);
	}
	return compile_plan(src);
}

/* The whole model's parameters (each layer at tp 1, whatever the plan's tp). */
static int64_t whole_params(const Plan *p)
{
	LayerShape sh = plan_shape(p);
	int64_t n = 0;
	for (int s = 0; s < p->nstages; s++)
		for (int l = 0; l < p->stages[s].nlayers; l++)
			n += plan_layer_figures(&p->stages[s].layers[l], &sh).params;
	return n;
}

/* GPT-2 small is 124,439,808 parameters over 50,257 words (docs/layers.md), its table
 * 50257 x 768 counted once (tied).  Megatron pads to a multiple of 128 x tp:
 *   tp=1: 128:  ceil(50257 / 128)  = 393 -> 50304, 47 rows:  +36,096  = 124,475,904
 *   tp=2: 256:  ceil(50257 / 256)  = 197 -> 50432, 175 rows: +134,400 = 124,574,208
 *   tp=4: 512:  ceil(50257 / 512)  =  99 -> 50688, 431 rows: +331,008 = 124,770,816
 * (tp=8, 1024: 50 -> 51200; GPT-2's 12 heads do not split 8 ways, so not compiled here.)
 * Untied, the head adds a second padded table: 124,475,904 + 50304 x 768 = 163,109,376 at
 * tp=1 (163,037,184 unpadded + 2 x 36,096). */
static void vocabpad__gpt2__megatron_padded_counts(void **state)
{
	(void)state;
	static const struct {
		int tp, tied, vocab;
		int64_t params;
	} want[] = {
	    {1, 1, 50304, 124475904},
	    {2, 1, 50432, 124574208},
	    {4, 1, 50688, 124770816},
	    {1, 0, 50304, 163109376},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		Plan *p = gpt2(want[i].tp, want[i].tied);
		assert_int_equal(p->vocab, want[i].vocab);
		assert_int_equal(p->vocab_real, 50257);
		assert_int_equal(whole_params(p), want[i].params);
		/* Stage s0 (the embedding, layers 0..1) on one rank of the tp group holds its
		 * 1/tp of the padded table's rows. */
		LayerShape sh = plan_shape(p);
		LayerCost e = plan_layer_figures_tp(&p->stages[0].layers[0], &sh, want[i].tp);
		assert_int_equal(e.params, (int64_t)want[i].vocab / want[i].tp * 768 + 1024 * 768);
		plan_free(p);
	}
}

/* The head's FLOPs and the loss's saved bytes grow with the padded vocabulary, as
 * Megatron computes the padded logits. */
static void vocabpad__figures__span_the_padded_vocabulary(void **state)
{
	(void)state;
	Plan *p = gpt2(1, 1);
	LayerShape sh = plan_shape(p), unpadded = sh;
	unpadded.vocab = 50257, unpadded.real = 0;
	const PlanStage *st = &p->stages[p->nstages - 1];
	const PlanLayer *head = &st->layers[st->nlayers - 2], *xent = &st->layers[st->nlayers - 1];
	assert_int_equal(head->kind, LAYER_HEAD);
	assert_int_equal(xent->kind, LAYER_XENT);
	assert_int_equal(head->out, 50304);
	LayerCost h = plan_layer_figures(head, &sh);
	assert_true(h.flops[0] == 2.0 * 8 * 1024 * 768 * 50304); // F: logits = x wv^T
	PlanLayer small = *xent;
	small.in = 50257;
	LayerCost a = plan_layer_figures(xent, &sh), b = plan_layer_figures(&small, &unpadded);
	int64_t sa = a.save_fb + a.save_fw + a.save_bw, sb = b.save_fb + b.save_fw + b.save_bw;
	assert_int_equal(p->prec, PREC_BF16);
	assert_int_equal(sa - sb, (int64_t)8 * 1024 * 47 * 2); // the logits: 47 more bf16 columns
	plan_free(p);
}

/* A plan keeps `vocab=257 padded=272` byte for byte; old plans read as before. */
static void vocabpad__plan__round_trips_both_vocabularies(void **state)
{
	(void)state;
	Plan *p = compile_plan("pipeline v; mesh pp=2 tp=2; microbatches 2;\n"
	                       "input tokens 2x8 vocab=257 pad=8;\n"
	                       "stage s0 { embed 16; } stage s1 { head; loss xent; }\n"
	                       "schedule 1f1b;\n");
	assert_int_equal(p->vocab, 272);
	assert_int_equal(p->vocab_real, 257);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_int_equal(plan_write(p, f), 0);
	fclose(f);
	assert_non_null(strstr(text, "\ninput tokens 2x8 vocab=257 padded=272\n"));
	FILE *in = fmemopen(text, len, "r");
	PlanError err = {0};
	Plan *q = plan_read(in, "v.plan", &err);
	fclose(in);
	if (!q)
		fail_msg("%s", err.msg);
	assert_int_equal(q->vocab, 272);
	assert_int_equal(q->vocab_real, 257);
	LayerShape sh = plan_shape(q);
	assert_int_equal(plan_vocab_real(&sh), 257);
	plan_free(q);
	plan_free(p);
	free(text);
}

/* Logits N x Vp with V real columns: the padded columns hold a logit larger than any
 * real one; the loss and the real columns' gradient are those of the N x V logits, the
 * padded columns' gradient 0, whole and split over 2 ranks (Vp / 2 columns each, rank
 * 1's slice part real, part padding) and over 4 (rank 3's slice all padding). */
enum { N_ = 3, V_ = 5, VP_ = 8 };

static void vocabpad__xent__padded_columns_left_out(void **state)
{
	(void)state;
	float lg[N_ * VP_], small[N_ * V_], lse[N_], lse0[N_], d[N_ * VP_], d0[N_ * V_];
	int32_t tgt[N_] = {0, 4, 2};
	for (int i = 0; i < N_; i++)
		for (int j = 0; j < VP_; j++) {
			lg[i * VP_ + j] = j < V_ ? (float)sin(1.0 + i * 7 + j) : 50.0f;
			if (j < V_)
				small[i * V_ + j] = lg[i * VP_ + j];
		}
	double loss, loss0;
	assert_int_equal(tk_xent_fwd(small, tgt, lse0, &loss0, N_, V_, V_), TK_OK);
	assert_int_equal(tk_xent_fwd(lg, tgt, lse, &loss, N_, V_, VP_), TK_OK);
	assert_true(fabs(loss - loss0) < 1e-12);
	assert_int_equal(tk_xent_bwd(small, tgt, lse0, 1.0f, d0, N_, V_, V_), TK_OK);
	assert_int_equal(tk_xent_bwd(lg, tgt, lse, 1.0f, d, N_, V_, VP_), TK_OK);
	for (int i = 0; i < N_; i++)
		for (int j = 0; j < VP_; j++)
			assert_true(d[i * VP_ + j] == (j < V_ ? d0[i * V_ + j] : 0.0f));
	for (int tp = 2; tp <= 4; tp *= 2) {
		int n = VP_ / tp;
		float mx[N_], sum[N_], zt[N_], s[N_], z[N_], m[N_];
		for (int i = 0; i < N_; i++)
			m[i] = -INFINITY, s[i] = z[i] = 0;
		for (int r = 0; r < tp; r++) { // the max all-reduce
			float part[N_ * VP_];
			for (int i = 0; i < N_; i++)
				memcpy(part + i * n, lg + i * VP_ + r * n, (size_t)n * sizeof(float));
			tk_xent_tp_max(part, mx, N_, V_, r * n, n);
			for (int i = 0; i < N_; i++)
				m[i] = mx[i] > m[i] ? mx[i] : m[i];
		}
		for (int r = 0; r < tp; r++) { // the sum all-reduce
			float part[N_ * VP_];
			for (int i = 0; i < N_; i++)
				memcpy(part + i * n, lg + i * VP_ + r * n, (size_t)n * sizeof(float));
			assert_int_equal(tk_xent_tp_sums(part, tgt, m, sum, zt, N_, V_, r * n, n), TK_OK);
			for (int i = 0; i < N_; i++)
				s[i] += sum[i], z[i] += zt[i];
		}
		float l2[N_];
		double loss2;
		tk_xent_tp_end(m, s, z, l2, &loss2, N_);
		assert_true(fabs(loss2 - loss0) < 1e-6);
		for (int r = 0; r < tp; r++) {
			float part[N_ * VP_], dp[N_ * VP_];
			for (int i = 0; i < N_; i++)
				memcpy(part + i * n, lg + i * VP_ + r * n, (size_t)n * sizeof(float));
			assert_int_equal(tk_xent_tp_bwd(part, tgt, l2, 1.0f, dp, N_, V_, r * n, n), TK_OK);
			for (int i = 0; i < N_; i++)
				for (int j = 0; j < n; j++)
					assert_true(fabsf(dp[i * n + j] - d[i * VP_ + r * n + j]) < 1e-6f);
		}
	}
	tgt[1] = V_; // a padded row is never a token
	assert_int_equal(tk_xent_fwd(lg, tgt, lse, &loss, N_, V_, VP_), TK_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(vocabpad__gpt2__megatron_padded_counts),
	    cmocka_unit_test(vocabpad__figures__span_the_padded_vocabulary),
	    cmocka_unit_test(vocabpad__plan__round_trips_both_vocabularies),
	    cmocka_unit_test(vocabpad__xent__padded_columns_left_out),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
