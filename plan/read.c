/* The plan reader: the inverse of write.c.  It is strict: every line must be exactly
 * what the writer would produce (keywords, order, counts), numbers must be in range,
 * and anything else is an error naming the plan-file line.  Cross-references that
 * need the whole plan (placement, peers, matching, dependencies) are plan_verify()'s.
 * Arrays grow as lines arrive, so a lying count cannot make us allocate much (a rank's
 * ops are allocated at once when the rest of the file can hold them: read_in.c).  Runs
 * of op lines go through read_op.c's fast path; it declines any line it does not take
 * whole, and that line comes here.  With `--threads N` the op lines of a regular file
 * are parsed on workers instead (read_par.c, plan_read_text_as). */
#include "mem.h"
#include "plan.h"
#include "io.h"
#include "checksum.h"
#include "oom.h"
#include "line.h"
#include "link.h"
#include "sizes.h"
#include "read_int.h"
#include "read_op.h"
#include "tfcount.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* `input tokens BxS vocab=V [padded=P]`: rows are the B*S tokens, one int32 id each. */
static int read_tokens(Rd *r, Plan *p)
{
	int b, s;
	if (rd_inum(r, &b, 1, INT_MAX, "input sequences"))
		return -1;
	if (*r->s != 'x')
		return rd_fail(r, "expected 'x' between input sequences and length");
	r->s++;
	if (rd_inum(r, &s, 1, INT_MAX, "sequence length") || rd_kv(r, "vocab=", &p->vocab, 1, INT_MAX))
		return -1;
	p->vocab_real = strstr(r->s, "padded=") ? p->vocab : 0; // then vocab is the padded one
	if ((p->vocab_real && rd_kv(r, "padded=", &p->vocab, p->vocab + 1, INT_MAX)) || rd_eol(r))
		return -1;
	if ((int64_t)b * s > INT_MAX)
		return rd_fail(r, "input has %lld tokens, more than %d", (long long)b * s, INT_MAX);
	p->rows = b * s;
	p->seq = s;
	p->cols = 1;
	return 0;
}

/* ` tune=overlap` after the schedule's name: the model its communication is ordered
 * for, when not the strict model (plans without it read as they always did). */
static int read_tune(Rd *r, Plan *p)
{
	rd_skip_sp(r);
	if (strncmp(r->s, "tune=", 5) != 0)
		return 0;
	if (rd_word(r, "tune=overlap"))
		return -1;
	p->tuned_overlap = 1;
	return 0;
}

/* `precision bf16`: a regime of plan/prec.h other than f32 (which has no line). */
static int read_prec(Rd *r, Plan *p)
{
	size_t n = rd_word(r, "precision") ? 0 : (rd_skip_sp(r), strcspn(r->s, " "));
	PlanPrec k = plan_prec_find(r->s, n);
	if (r->failed || k == PREC_COUNT || k == PREC_F32)
		return r->failed ? -1 : rd_fail(r, "unknown precision '%.20s' (tf32 or bf16)", r->s);
	return p->prec = (uint8_t)k, r->s += n, rd_eol(r);
}

/* `optimizer sgd lr=X` or `optimizer adamw lr=X beta1=X beta2=X eps=X weight_decay=X`,
 * then ` distributed` when it is. */
static int real(Rd *r, const char *k, double *v, double lo, double hi)
{
	if (rd_key(r, k))
		return -1;
	errno = 0;
	char *end;
	*v = strtod(r->s, &end);
	if (end == r->s || errno || !(*v >= lo && *v <= hi))
		return rd_fail(r, "%s must be a number in [%g, %g]", k, lo, hi);
	r->s = end;
	return 0;
}

static int read_optim(Rd *r, Plan *p)
{
	PlanOptim *o = &p->optim;
	if (rd_word(r, "optimizer"))
		return -1;
	rd_skip_sp(r);
	size_t n = strcspn(r->s, " ");
	o->kind = OPTIM_COUNT;
	for (int k = 0; k < OPTIM_COUNT; k++)
		if (strlen(plan_optim_names[k]) == n && !strncmp(r->s, plan_optim_names[k], n))
			o->kind = (uint8_t)k;
	if (o->kind == OPTIM_COUNT)
		return rd_fail(r, "unknown optimizer '%.*s'", (int)(n < 20 ? n : 20), r->s);
	r->s += n;
	o->given = 1;
	if (real(r, "lr=", &o->lr, 0, 1e6))
		return -1;
	if (o->kind == OPTIM_ADAMW &&
	    (real(r, "beta1=", &o->beta1, 0, 1) || real(r, "beta2=", &o->beta2, 0, 1) ||
	     real(r, "eps=", &o->eps, 0, 1) || real(r, "weight_decay=", &o->weight_decay, 0, 1e6)))
		return -1;
	if (o->kind == OPTIM_MOMENTUM && real(r, "momentum=", &o->momentum, 0, 1))
		return -1;
	rd_skip_sp(r);
	if (!strncmp(r->s, "distributed", 11) && (r->s[11] == '\n' || r->s[11] == ' ' || !r->s[11]))
		o->distributed = 1, r->s += 11;
	return rd_eol(r);
}

/* `k` and a probability in [0, 1), a dropout's P (-0 read as 0). */
static int prob(Rd *r, const char *k, double *v)
{
	return real(r, k, v, 0, 1) ? -1 : (*v += 0.0) < 1 ? 0 : rd_fail(r, "%s must be below 1", k);
}

/* `copy`, which only the compiler writes: on a tied head, after `tied`. */
static int copy_ok(const PlanLayer *ly, LayerKey k)
{
	return k == LAYER_KEY_COPY && ly->kind == LAYER_HEAD &&
	       (ly->flags & LAYER_FLAG(LAYER_KEY_TIED));
}

/* After `layer KIND IN OUT`: the keys plan_write puts, checked against the kind's row. */
static int read_layer_keys(Rd *r, PlanLayer *ly, int left)
{
	const LayerInfo *li = plan_layer(ly->kind);
	int has_p = 0;
	for (rd_skip_sp(r); *r->s; rd_skip_sp(r)) {
		size_t n = strcspn(r->s, " =");
		LayerKey k = plan_layer_key_find(r->s, n);
		if (!strncmp(r->s, "hidden=", 7) && li->arg == LAYER_ARG_HIDDEN) {
			if (rd_kv(r, "hidden=", &ly->hidden, 1, INT_MAX))
				return -1;
		} else if ((!strncmp(r->s, "p=", 2) && li->arg == LAYER_ARG_PROB) ||
		           (k == LAYER_KEY_DROPOUT && (li->keys & LAYER_FLAG(k)))) {
			has_p = li->arg == LAYER_ARG_PROB; // a dropout layer's p=, an attention's dropout=
			if (prob(r, has_p ? "p=" : "dropout=", &ly->drop))
				return -1;
		} else if (!strncmp(r->s, "span=", 5) && li->arg == LAYER_ARG_BODY) {
			if (rd_kv(r, "span=", &ly->span, 1, left))
				return -1;
		} else if (k == LAYER_KEY_HEADS && (li->keys & LAYER_FLAG(k))) {
			if (rd_kv(r, "heads=", &ly->heads, 1, ly->in) || rd_kv(r, "kv_heads=", &ly->kv_heads, 1,
			                                                 ly->heads))
				return -1;
			if (ly->in % ly->heads || ly->heads % ly->kv_heads)
				return rd_fail(r, "heads=%d kv_heads=%d do not divide the width %d and the heads",
				            ly->heads, ly->kv_heads, ly->in);
		} else if (k != LAYER_KEY_COUNT && !plan_layer_keys[k].number &&
		           ((li->keys & LAYER_FLAG(k)) || copy_ok(ly, k)) && r->s[n] != '=') {
			ly->flags |= LAYER_FLAG(k);
			r->s += n;
		} else {
			return rd_fail(r, "unexpected '%.*s' on a%s %s layer", (int)(n < 20 ? n : 20), r->s,
			               strchr("aeiou", li->name[0]) ? "n" : "", li->name);
		}
	}
	if (li->arg == LAYER_ARG_HIDDEN && !ly->hidden)
		return rd_fail(r, "a %s layer needs hidden=N", li->name);
	if (li->arg == LAYER_ARG_PROB && !has_p)
		return rd_fail(r, "a %s layer needs p=P", li->name);
	if (li->arg == LAYER_ARG_BODY && !ly->span)
		return rd_fail(r, "a %s layer needs span=N", li->name);
	if ((li->keys & LAYER_FLAG(LAYER_KEY_HEADS)) && !ly->heads)
		return rd_fail(r, "a %s layer needs heads=N kv_heads=N", li->name);
	return 0;
}

/* Layer l's place among the bodies open before it (open[0..*nopen), the last layer of
 * each, outermost first): a body it opens ends inside each of theirs, PLAN_NEST_MAX
 * deep at most. */
static int read_nest(Rd *r, const PlanLayer *ly, int l, int *open, int *nopen)
{
	while (*nopen && open[*nopen - 1] < l)
		--*nopen;
	if (plan_layer(ly->kind)->arg != LAYER_ARG_BODY)
		return 0;
	int end = l + ly->span;
	if (*nopen && end > open[*nopen - 1])
		return rd_fail(r, "span=%d ends past the body this layer is in (layer %d ends it)",
		               ly->span, open[*nopen - 1]);
	if (*nopen == PLAN_NEST_MAX)
		return rd_fail(r, "%s bodies nest more than %d deep here, the most the tools run",
		               plan_layer(ly->kind)->name, PLAN_NEST_MAX);
	open[(*nopen)++] = end;
	return 0;
}

/* The first line: `pipecc-plan VERSION [KIND=HEX]`; sets up the checksum. */
static int read_format(Rd *r)
{
	char first[32];
	snprintf(first, sizeof first, "'%s %d'", PLAN_FORMAT, PLAN_VERSION);
	if (rd_next_line(r, first))
		return -1;
	if (strncmp(r->buf, PLAN_FORMAT " ", strlen(PLAN_FORMAT) + 1) != 0) {
		/* A .pipe source starts with a comment or its `pipeline NAME;` line. */
		size_t len = strlen(r->name);
		if (r->buf[0] == '#' || !strncmp(r->buf, "pipeline ", 9) ||
		    (len > 5 && !strcmp(r->name + len - 5, ".pipe")))
			return rd_fail(r, "this is a pipecc source file, not a plan: compile it first with "
			               "`pipecc %s -o PLAN`",
			            strcmp(r->name, "<stdin>") ? r->name : "FILE");
		return rd_fail(r, "not a pipecc plan (first line must be '%s %d')", PLAN_FORMAT,
		            PLAN_VERSION);
	}
	r->s += strlen(PLAN_FORMAT);
	rd_skip_sp(r);
	int v;
	if (rd_inum(r, &v, 0, INT_MAX, "format version"))
		return -1;
	if (v != PLAN_VERSION && v != PLAN_VERSION_EXPANDED && v != PLAN_VERSION_PLAIN)
		return rd_fail(r, "plan format version %d is not supported (this build reads %d to %d)",
		            v, PLAN_VERSION_PLAIN, PLAN_VERSION);
	r->version = v;
	if (v != PLAN_VERSION_PLAIN) {
		rd_skip_sp(r);
		char *end;
		char kinds[96];
		int kind = plan_sum_key(r->s, kinds, sizeof kinds);
		if (kind < 0)
			return rd_fail(r, "expected a checksum, %s, after the format version", kinds);
		r->s += strlen(plan_sums[kind].name) + 1;
		errno = 0;
		r->want = strtoull(r->s, &end, 16);
		if (end - r->s != 16 || errno)
			return rd_fail(r, "the checksum must be 16 hex digits");
		r->s = end;
		r->check = RD_CHECK_STREAM;
		plan_hash_init(&r->h, kind);
		r->hashed = r->pos; // the text after this line, read so far
		rd_hash_to(r, r->len);
		if (kind == PLAN_SUM_BLOCKS && r->par && rd_par_scan(r))
			return -1;
	}
	return rd_eol(r);
}

/* `lines L devices_per_node=D` (format 3): the rank lists are one pipeline line's, L
 * lines run them, world rank w uses device w % D. */
static int read_lines_at(Rd *r, Plan *p)
{
	int n;
	if (rd_word(r, "lines") || rd_inum(r, &n, 1, 1 << 20, "lines") ||
	    rd_kv(r, "devices_per_node=", &p->dev_per_node, 1, INT_MAX) || rd_eol(r))
		return -1;
	if (n != p->world / p->dims[DIM_PP])
		return rd_fail(r, "lines %d is not the world over pp (%d)", n, p->world / p->dims[DIM_PP]);
	p->line = 1;
	r->stride = plan_pp_stride(p);
	return 0;
}

static int read_lines(Rd *r, Plan *p)
{
	return rd_next_line(r, "'lines N devices_per_node=D'") || read_lines_at(r, p);
}

/* A rank number of a line plan's file, a world rank on line 0, into its pipeline index. */
static int line_ref(Rd *r, const Plan *p, int *v)
{
	if (!p->line || r->failed)
		return r->failed ? -1 : 0;
	int stride = r->stride;
	if (*v % stride || *v / stride >= p->dims[DIM_PP])
		return rd_fail(r, "rank %d is not on the plan's pipeline line (dp=0 tp=0): a line plan "
		               "names only those ranks", *v);
	*v /= stride;
	return 0;
}

static int read_header(Rd *r, Plan *p)
{
	if (read_format(r))
		return -1;
	if (rd_next_line(r, "'pipeline NAME'") || rd_word(r, "pipeline") || !(p->name = rd_token(r, "a name")) ||
	    rd_eol(r))
		return -1;
	if (rd_next_line(r, "'source PATH'") || rd_word(r, "source"))
		return -1;
	rd_skip_sp(r);
	if (!(p->source = strdup(r->s)))
		return rd_fail(r, "out of memory");
	if (rd_next_line(r, "'schedule NAME'") || rd_word(r, "schedule") ||
	    !(p->schedule = rd_token(r, "a schedule name")) || read_tune(r, p) || rd_eol(r))
		return -1;

	if (rd_next_line(r, "'mesh ...'") || rd_word(r, "mesh"))
		return -1;
	int seen = 0;
	int64_t world = 1;
	for (int i = 0; i < DIM_COUNT; i++) {
		rd_skip_sp(r);
		int d;
		for (d = 0; d < DIM_COUNT; d++) {
			size_t n = strlen(plan_dim_names[d]);
			if (!strncmp(r->s, plan_dim_names[d], n) && r->s[n] == '=')
				break;
		}
		if (d == DIM_COUNT)
			return rd_fail(r, "expected a mesh dimension pp=, dp= or tp=");
		if (seen & (1 << d))
			return rd_fail(r, "mesh dimension %s repeated", plan_dim_names[d]);
		seen |= 1 << d;
		r->s += strlen(plan_dim_names[d]) + 1;
		if (rd_inum(r, &p->dims[d], 1, 1 << 20, plan_dim_names[d]))
			return -1;
		p->dim_order[i] = d;
		world *= p->dims[d];
	}
	if ((p->sp = !strcmp(r->s + strspn(r->s, " "), "sp")) && p->dims[DIM_TP] < 2)
		return rd_fail(r, "sequence parallelism (sp) needs tp > 1");
	if (!p->sp && rd_eol(r))
		return -1;
	if (world > (1 << 20))
		return rd_fail(r, "mesh has %lld ranks, more than %d", (long long)world, 1 << 20);
	if (rd_next_line(r, "'world N'") || rd_word(r, "world") ||
	    rd_inum(r, &p->world, 1, 1 << 20, "world") || rd_eol(r))
		return -1;
	if (p->world != world)
		return rd_fail(r, "world %d is not the product of the mesh dims (%lld)", p->world,
		            (long long)world);
	r->world = p->world;
	/* Format 3 has the lines line; a hand-written (format 1) plan may. */
	if (r->version == PLAN_VERSION && read_lines(r, p))
		return -1;
	if (rd_next_line(r, r->version == PLAN_VERSION_PLAIN ? "'lines N' or 'microbatches N'"
	                                                  : "'microbatches N'"))
		return -1;
	if (r->version == PLAN_VERSION_PLAIN && !strncmp(r->buf, "lines ", 6) &&
	    (read_lines_at(r, p) || rd_next_line(r, "'microbatches N'")))
		return -1;
	if (rd_word(r, "microbatches") ||
	    rd_inum(r, &p->microbatches, 1, INT_MAX, "microbatches") || rd_eol(r))
		return -1;
	if (rd_next_line(r, "'input RxC'") || rd_word(r, "input"))
		return -1;
	rd_skip_sp(r);
	if (!strncmp(r->s, "tokens ", 7)) {
		r->s += 7;
		if (read_tokens(r, p))
			return -1;
	} else {
		if (rd_inum(r, &p->rows, 1, INT_MAX, "input rows"))
			return -1;
		if (*r->s != 'x')
			return rd_fail(r, "expected 'x' between input rows and columns");
		r->s++;
		if (rd_inum(r, &p->cols, 1, INT_MAX, "input columns") || rd_eol(r))
			return -1;
	}

	if (rd_next_line(r, "'link ...'") || rd_word(r, "link"))
		return -1;
	rd_skip_sp(r);
	if (!strcmp(r->s, "ideal")) {
		p->link_ideal = 1;
		p->bandwidth = 0;
		return 0;
	}
	if (rd_kv64(r, "latency_ns=", &p->latency_ns, 0, INT64_MAX / 4) || rd_key(r, "bandwidth="))
		return -1;
	errno = 0;
	char *end;
	p->bandwidth = strtod(r->s, &end);
	if (end == r->s || errno || !(p->bandwidth > 0) || p->bandwidth > 1e18)
		return rd_fail(r, "bandwidth must be a positive number of bytes per second");
	r->s = end;
	return rd_eol(r);
}

/* A direction word, `act` or `grad` and a space, into *dir; `after` names what it follows
 * in the message (NULL: nothing). */
static int read_dir(Rd *r, uint8_t *dir, const char *after)
{
	rd_skip_sp(r);
	if (rd_prefix(r->s, "act ") == 4)
		*dir = DIR_ACT;
	else if (rd_prefix(r->s, "grad ") == 5)
		*dir = DIR_GRAD;
	else
		return rd_fail(r, "expected 'act' or 'grad'%s%s", after ? " after " : "", after ? after : "");
	r->s += *dir == DIR_ACT ? 4 : 5;
	return 0;
}

/* `node per_node=N latency_ns=L bandwidth=B[ collective=A]`: the node link (plan/link.h);
 * without collective=, auto. */
static int read_node(Rd *r, Plan *p)
{
	r->s += 4;
	if (rd_kv(r, "per_node=", &p->per_node, 0, INT_MAX) ||
	    rd_kv64(r, "latency_ns=", &p->node_latency_ns, 0, INT64_MAX / 4) ||
	    real(r, "bandwidth=", &p->node_bandwidth, 1e-300, 1e18))
		return -1;
	rd_skip_sp(r);
	if (*r->s && !rd_key(r, "collective=")) {
		size_t n = strcspn(r->s, " ");
		char name[32];
		snprintf(name, sizeof name, "%.*s", (int)(n < 31 ? n : 31), r->s);
		int a = plan_coll_parse(name);
		char list[64];
		if (a < 0 || n > 31)
			return rd_fail(r, "unknown collective algorithm '%s' (%s)", name,
			               plan_coll_list(list, sizeof list));
		p->coll_algo = (uint8_t)a;
		r->s += n;
	}
	return r->failed ? -1 : rd_eol(r);
}

/* Optional after save_bw: ` recompute [selective] save_re=N [residuals=K]`
 * (docs/plan-format.md). */
static int read_recompute(Rd *r, PlanStage *st)
{
	rd_skip_sp(r);
	if (strncmp(r->s, "recompute ", 10))
		return 0;
	int sel = !strncmp(r->s + 9, " selective ", 11);
	st->recompute = sel ? PLAN_RECOMPUTE_SELECTIVE : PLAN_RECOMPUTE_FULL;
	r->s += sel ? 19 : 9; // at the space before save_re=
	if (rd_kv64(r, "save_re=", &st->save_re, 0, INT64_MAX / 8))
		return -1;
	rd_skip_sp(r);
	if (sel || strncmp(r->s, "residuals=", 10))
		return 0;
	return rd_kv(r, "residuals=", &st->recompute_res, 1, INT_MAX);
}

/* A stage's optional ` o=NS`: its OPTIM's time (0 when absent). */
static int read_step(Rd *r, PlanStage *st)
{
	rd_skip_sp(r);
	if (strncmp(r->s, "o=", 2))
		return 0;
	return rd_kv64(r, "o=", &st->optim, 0, INT64_MAX / 4);
}

/* The plan's memory passes PLAN_MEM_MAX at `what` (plan_mem_stage_share). */
static int too_much(Rd *r, const char *what, int m)
{
	return rd_fail(r, "the plan's memory is too large to count: by %s, 16 bytes a parameter "
	               "and %d microbatches' saved bytes and tensors in flight add up past 2^62 "
	               "bytes (4.6 EB)", what, m);
}

/* Layer ly of a stage whose layers so far add up to *sum: its figures and the sums stay
 * within what every tool counts (plan_layer_uncountable). */
static int countable(Rd *r, const Plan *p, const PlanLayer *ly, LayerCost *sum)
{
	LayerShape sh = plan_shape(p);
	double v, most;
	char msg[160];
	const char *what = plan_layer_uncountable(ly, &sh, p->dims[DIM_TP], &v, &most);
	if (what)
		return rd_fail(r, "layer too large to count: its %s",
		               plan_uncountable_text(msg, sizeof msg, what, v, most));
	LayerCost c = plan_layer_figures(ly, &sh);
	plan_cost_add(sum, &c);
	if ((what = plan_cost_uncountable(sum, &v, &most)))
		return rd_fail(r, "stage too large to count by this layer: its layers' %s",
		               plan_uncountable_text(msg, sizeof msg, what, v, most));
	return 0;
}

static int read_stages(Rd *r, Plan *p)
{
	int n;
	if (rd_next_line(r, "'stages N'"))
		return -1;
	const char *next = "'stages N'";
	if ((!strncmp(r->buf, "node ", 5) && (read_node(r, p) || rd_next_line(r, next))) ||
	    (!strncmp(r->buf, "precision ", 10) && (read_prec(r, p) || rd_next_line(r, next))) ||
	    (!strncmp(r->buf, "optimizer ", 10) && (read_optim(r, p) || rd_next_line(r, next))))
		return -1;
	if (!strncmp(r->buf, "memory ", 7) &&
	    (rd_word(r, "memory") || rd_kv64(r, "cap=", &p->mem_cap, 1, INT64_MAX / 4) || rd_eol(r) ||
	     rd_next_line(r, "'stages N'")))
		return -1;
	if (!strncmp(r->buf, "device ", 7) &&
	    (rd_word(r, "device") || real(r, "peak=", &p->peak_flops, 1e9, 1e18) || rd_eol(r) ||
	     rd_next_line(r, next)))
		return -1;
	if (rd_word(r, "stages") ||
	    rd_inum(r, &n, 1, 1 << 20, "stages") || rd_eol(r))
		return -1;
	int64_t cap = 0;
	for (int s = 0; s < n; s++) {
		if (rd_grow(r, (void **)&p->stages, &cap, s + 1, sizeof *p->stages))
			return -1;
		p->nstages = s + 1; // only what exists, so plan_free stays safe
		PlanStage *st = &p->stages[s];
		int idx;
		if (rd_next_line(r, "a 'stage' line") || rd_word(r, "stage") ||
		    rd_inum(r, &idx, 0, INT_MAX, "stage index"))
			return -1;
		if (idx != s)
			return rd_fail(r, "stage %d where stage %d was expected", idx, s);
		if (!(st->name = rd_token(r, "a stage name")))
			return -1;
		if (rd_kv(r, "pp=", &st->pp, 0, p->dims[DIM_PP] - 1) ||
		    rd_kv(r, "in=", &st->in, 1, INT_MAX) || rd_kv(r, "out=", &st->out, 1, INT_MAX) ||
		    rd_kv64(r, "f=", &st->cost[0], 0, INT64_MAX / 4) ||
		    rd_kv64(r, "b=", &st->cost[1], 0, INT64_MAX / 4) ||
		    rd_kv64(r, "w=", &st->cost[2], 0, INT64_MAX / 4) ||
		    rd_kv64(r, "params=", &st->params, 0, INT64_MAX / 8) ||
		    rd_kv64(r, "save_fb=", &st->save_fb, 0, INT64_MAX / 8) ||
		    rd_kv64(r, "save_fw=", &st->save_fw, 0, INT64_MAX / 8) ||
		    rd_kv64(r, "save_bw=", &st->save_bw, 0, INT64_MAX / 8) || read_step(r, st) ||
		    read_recompute(r, st) ||
		    rd_kv(r, "layers=", &st->nlayers, 1, 1 << 20) || rd_loc(r, &st->loc) || rd_eol(r))
			return -1;
		if ((r->mem = sat_add(r->mem, plan_mem_stage_share(st, p->microbatches, p->prec))) >= PLAN_MEM_MAX)
			return too_much(r, "this stage", p->microbatches);
		int64_t lcap = 0;
		LayerCost sum = {0};
		int open[PLAN_NEST_MAX], nopen = 0;
		for (int l = 0; l < st->nlayers; l++) {
			if (rd_grow(r, (void **)&st->layers, &lcap, l + 1, sizeof *st->layers))
				return -1;
			PlanLayer *ly = &st->layers[l];
			if (rd_next_line(r, "a 'layer' line") || rd_word(r, "layer"))
				return -1;
			rd_skip_sp(r);
			size_t n = strcspn(r->s, " \n");
			LayerKind k = plan_layer_find(r->s, n);
			if (k == LAYER_COUNT || r->s[n] != ' ')
				return rd_fail(r, "unknown layer kind '%.20s'", r->s);
			r->s += n;
			ly->kind = k;
			rd_skip_sp(r);
			if (rd_inum(r, &ly->in, 1, INT_MAX, "layer input width"))
				return -1;
			rd_skip_sp(r);
			if (rd_inum(r, &ly->out, 1, INT_MAX, "layer output width") ||
			    read_layer_keys(r, ly, st->nlayers - l - 1) || countable(r, p, ly, &sum) ||
			    read_nest(r, ly, l, open, &nopen))
				return -1;
		}
	}
	return 0;
}

static int read_edges(Rd *r, Plan *p)
{
	if (rd_next_line(r, "'edges N'") || rd_word(r, "edges") ||
	    rd_inum(r, &p->nedges, 0, 1 << 22, "edges") || rd_eol(r))
		return -1;
	int64_t cap = 0;
	for (int e = 0; e < p->nedges; e++) {
		if (rd_grow(r, (void **)&p->edges, &cap, e + 1, sizeof *p->edges))
			return -1;
		PlanEdge *ed = &p->edges[e];
		int idx;
		if (rd_next_line(r, "an 'edge' line") || rd_word(r, "edge") ||
		    (rd_skip_sp(r), rd_inum(r, &idx, 0, INT_MAX, "edge index")))
			return -1;
		if (idx != e)
			return rd_fail(r, "edge %d where edge %d was expected", idx, e);
		rd_skip_sp(r);
		if (rd_inum(r, &ed->src, 0, p->nstages - 1, "edge source stage") || rd_key(r, "->") ||
		    rd_inum(r, &ed->dst, 0, p->nstages - 1, "edge destination stage"))
			return -1;
		rd_skip_sp(r);
		if (!strncmp(r->s, "chain ", 6))
			ed->skip = 0;
		else if (!strncmp(r->s, "skip ", 5))
			ed->skip = 1;
		else
			return rd_fail(r, "expected 'chain' or 'skip'");
		r->s += ed->skip ? 5 : 6;
		if (rd_kv64(r, "bytes=", &ed->bytes, 0, INT64_MAX / 8) || rd_loc(r, &ed->loc) || rd_eol(r))
			return -1;
		if ((r->mem = sat_add(r->mem, plan_mem_edge_share(ed->bytes, p->microbatches))) >=
		    PLAN_MEM_MAX)
			return too_much(r, "this edge", p->microbatches);
		if (ed->src >= ed->dst)
			return rd_fail(r, "edge %d goes from stage %d back to stage %d", e, ed->src, ed->dst);
		if (!ed->skip && ed->dst != ed->src + 1)
			return rd_fail(r, "chain edge %d must join consecutive stages", e);
	}
	return 0;
}

static int read_routes(Rd *r, Plan *p)
{
	if (rd_next_line(r, "'routes N'") || rd_word(r, "routes") ||
	    rd_inum(r, &p->nroutes, 0, INT_MAX, "routes") || rd_eol(r))
		return -1;
	int64_t cap = 0;
	p->routes_line = r->line + 1;
	for (int i = 0; i < p->nroutes; i++) {
		if (rd_grow(r, (void **)&p->routes, &cap, i + 1, sizeof *p->routes))
			return -1;
		PlanRoute *rt = &p->routes[i];
		int idx;
		if (rd_next_line(r, "a 'route' line") || rd_word(r, "route") ||
		    (rd_skip_sp(r), rd_inum(r, &idx, 0, INT_MAX, "route index")))
			return -1;
		if (idx != i)
			return rd_fail(r, "route %d where route %d was expected", idx, i);
		if (rd_kv(r, "e=", &rt->edge, 0, p->nedges - 1))
			return -1;
		if (read_dir(r, &rt->dir, NULL))
			return -1;
		rd_skip_sp(r);
		if (rd_inum(r, &rt->src_rank, 0, p->world - 1, "route source rank") || rd_key(r, ".d") ||
		    rd_inum(r, &rt->src_dev, 0, INT_MAX, "route source device") || rd_key(r, "->") ||
		    rd_inum(r, &rt->dst_rank, 0, p->world - 1, "route destination rank") ||
		    rd_key(r, ".d") || rd_inum(r, &rt->dst_dev, 0, INT_MAX, "route destination device") ||
		    line_ref(r, p, &rt->src_rank) || line_ref(r, p, &rt->dst_rank))
			return -1;
		rt->inverse_of = -1;
		if (rt->dir == DIR_GRAD && rd_kv(r, "inverse=", &rt->inverse_of, 0, p->nroutes - 1))
			return -1;
		if (rd_loc(r, &rt->loc) || rd_eol(r))
			return -1;
	}
	return 0;
}

static int op_kind(Rd *r)
{
	for (int k = 0; k < OP_COUNT; k++) {
		const char *name = plan_ops[k].name;
		size_t n = rd_prefix(r->s, name);
		if (!name[n] && (r->s[n] == ' ' || r->s[n] == 0)) {
			r->s += n;
			return k;
		}
	}
	return -1;
}

/* A compute op's fields: "stage mb [part=P]" (part= where its kind has one). */
static int read_compute(Rd *r, Plan *p, PlanOp *o)
{
	rd_skip_sp(r);
	if (rd_inum(r, &o->stage, 0, p->nstages - 1, "stage"))
		return -1;
	rd_skip_sp(r);
	if (rd_inum(r, &o->mb, 0, p->microbatches - 1, "microbatch"))
		return -1;
	rd_skip_sp(r);
	if ((plan_ops[o->kind].fields & OP_FIELD_PART) && !strncmp(r->s, "part=", 5)) {
		int part;
		if (p->dims[DIM_TP] == 1)
			return rd_fail(r, "part= in a plan with tp=1 (stages have one part each way)");
		if (rd_kv(r, "part=", &part, 1, UINT16_MAX))
			return -1;
		o->part = (uint16_t)part;
	}
	rd_skip_sp(r);
	if (!strncmp(r->s, "pair", 4) && (r->s[4] == ' ' || r->s[4] == '\n' || !r->s[4])) {
		o->dir = 1; // plan_op_paired
		r->s += 4;
		rd_skip_sp(r);
	}
	return 0;
}

/* Any other op's fields: its direction, then key=value for those its kind has
 * (OpInfo.fields), in the order op.h gives; *bytes set to bytes=. */
static int read_fields(Rd *r, Plan *p, PlanOp *o, int64_t *bytes)
{
	OpKind k = plan_op_kind(o);
	const OpInfo *in = &plan_ops[k];
	unsigned u = in->fields;
	int edge = in->at == OP_AT_EDGE, part = 0;
	if (in->over == OP_OVER_TP && p->dims[DIM_TP] == 1)
		return rd_fail(r, "a %s in a plan with tp=1 (it all-reduces over the tp group)",
		               in->name);
	if ((u & OP_FIELD_DIR) && read_dir(r, &o->dir, in->name))
		return -1;
	if (rd_kv(r, edge ? "e=" : "s=", &o->stage, 0, (edge ? p->nedges : p->nstages) - 1) ||
	    ((u & OP_FIELD_MB) && rd_kv(r, "m=", &o->mb, 0, p->microbatches - 1)) ||
	    ((u & OP_FIELD_PEER) &&
	     (rd_kv(r, plan_op_peer_key(k), &o->peer, 0, r->world - 1) || line_ref(r, p, &o->peer))) ||
	    ((u & OP_FIELD_PART) && rd_kv(r, "part=", &part, 0, UINT16_MAX)) ||
	    ((u & OP_FIELD_BYTES) &&
	     rd_kv64(r, "bytes=", bytes, plan_op_bytes_min(k), INT64_MAX / 8)) ||
	    ((u & OP_FIELD_GROUP) && rd_kv(r, "g=", &o->group, 0, INT_MAX)) ||
	    ((u & OP_FIELD_ROUTE) && rd_kv(r, "r=", &o->route, 0, p->nroutes - 1)))
		return -1;
	o->part = (uint16_t)part;
	return 0;
}

/* A rank's op count against its op lines, said as such rather than as whatever the
 * next line then fails as (a hand-deleted op line would read as "unknown op 'rank'").
 * ops_short: a 'rank' or 'end' line stands where rank rk's next op line should. */
static int ops_short(Rd *r, const PlanRank *rk, int idx, int64_t nops)
{
	if (strncmp(r->buf, "rank ", 5) != 0 && strcmp(r->buf, "end") != 0)
		return 0;
	return rd_fail(r, "rank %d's header (line %" PRId64 ") says ops=%" PRId64 ", but %" PRId64
	               " op line%s follow%s it", idx, rk->line, nops, rk->nops,
	               rk->nops == 1 ? "" : "s", rk->nops == 1 ? "s" : "");
}

/* ops_over: an op line stands where the line `want` ("rank " or "end") after rank i - 1's
 * nops ops should. */
static int ops_over(Rd *r, const Plan *p, int i, int stride, int64_t nops, const char *want)
{
	if (i == 0 || !strncmp(r->buf, want, strlen(want)) || op_kind(r) < 0)
		return 0;
	return rd_fail(r, "rank %d's header (line %" PRId64 ") says ops=%" PRId64 ", but more op "
	               "lines follow it", (i - 1) * stride, p->ranks[i - 1].line, nops);
}

int rd_read_op(Rd *r, Plan *p, PlanOp *o, int32_t *line)
{
	int k = op_kind(r);
	int64_t bytes = 0;
	if (k < 0) {
		size_t n = strcspn(r->s, " ");
		return rd_fail(r, "unknown op '%.*s'", (int)(n < 32 ? n : 32), r->s);
	}
	*o = (PlanOp){.kind = (uint8_t)k, .mb = -1, .peer = -1, .group = -1, .route = -1};
	if (plan_op_is_compute((OpKind)k) ? read_compute(r, p, o) : read_fields(r, p, o, &bytes))
		return -1;
	PlanLoc l;
	if (rd_loc(r, &l) || rd_eol(r))
		return -1;
	*line = l.line;
	int rc = plan_op_set_bytes(p, o, bytes);
	if (rc > 0) // a SEND's or RECV's: the edge's tensor
		return rd_fail(r, "bytes=%" PRId64 ", but edge %d carries %" PRId64 " bytes", bytes,
		               o->stage, p->edges[o->stage].bytes);
	return rc < 0 ? rd_fail(r, "out of memory") : 0;
}

static int read_ranks(Rd *r, Plan *p)
{
	int n = p->line ? p->dims[DIM_PP] : p->world, stride = p->line ? plan_pp_stride(p) : 1;
	PlanOpLimits lim = {p->nstages, p->nedges, p->nroutes, p->microbatches, r->world,
	                     p->line ? stride : 0, p->dims[DIM_PP], p->edges};
	p->ranks = calloc((size_t)n, sizeof *p->ranks);
	if (!p->ranks)
		return rd_fail(r, "out of memory");
	p->world = n; // entries, so plan_free stays safe
	if (r->par) {
		r->par->lim = lim;
		if (rd_par_ranks(r, n))
			return -1;
	}
	int64_t nops = 0; // the rank's op count; at the next rank's line, the last one's
	for (int i = 0; i < n; i++) {
		PlanRank *rk = &p->ranks[i];
		int idx;
		if (rd_next_line(r, "a 'rank' line") || ops_over(r, p, i, stride, nops, "rank ") ||
		    rd_word(r, "rank") || (rd_skip_sp(r), rd_inum(r, &idx, 0, INT_MAX, "rank")))
			return -1;
		if (idx != i * stride)
			return rd_fail(r, "rank %d where rank %d was expected", idx, i * stride);
		rk->line = r->line;
		if (rd_kv(r, "pp=", &rk->coord[DIM_PP], 0, p->dims[DIM_PP] - 1) ||
		    rd_kv(r, "dp=", &rk->coord[DIM_DP], 0, p->dims[DIM_DP] - 1) ||
		    rd_kv(r, "tp=", &rk->coord[DIM_TP], 0, p->dims[DIM_TP] - 1) ||
		    rd_kv(r, "device=", &rk->device, 0, INT_MAX) ||
		    rd_kv(r, "peers=", &rk->npeers, 0, INT_MAX) ||
		    rd_kv64(r, "ops=", &nops, 0, INT64_MAX / 64) || rd_eol(r))
			return -1;
		r->ops += nops;
		if (plan_mesh_rank(p, rk->coord) != idx)
			return rd_fail(r, "rank %d has the coordinates of rank %d", idx,
			            plan_mesh_rank(p, rk->coord));
		int64_t pcap = 0;
		for (int j = 0; j < rk->npeers; j++) {
			if (rd_grow(r, (void **)&rk->peers, &pcap, j + 1, sizeof *rk->peers))
				return -1;
			PlanPeer *pe = &rk->peers[j];
			if (rd_next_line(r, "a 'peer' line") || rd_word(r, "peer") ||
			    rd_kv(r, "s=", &pe->stage, 0, p->nstages - 1))
				return -1;
			rd_skip_sp(r);
			if (!strncmp(r->s, "in ", 3))
				pe->in = 1;
			else if (!strncmp(r->s, "out ", 4))
				pe->in = 0;
			else
				return rd_fail(r, "expected 'in' or 'out'");
			r->s += pe->in ? 3 : 4;
			if (rd_kv(r, "e=", &pe->edge, 0, p->nedges - 1) ||
			    rd_kv(r, "s=", &pe->peer_stage, 0, p->nstages - 1) ||
			    rd_kv(r, "rank=", &pe->peer_rank, 0, r->world - 1) ||
			    line_ref(r, p, &pe->peer_rank))
				return -1;
			rd_skip_sp(r);
			int k = 0;
			while (k < PEER_COUNT && strcmp(r->s, plan_peer_names[k]))
				k++;
			if (k == PEER_COUNT)
				return rd_fail(r, "expected 'local', 'remote' or 'self'");
			pe->local = (uint8_t)k;
		}
		if (r->par) { // read_par.c parses them once the whole file has read
			rk->first_line = r->line + 1;
			if (rd_par_skip(r, i, nops))
				return -1;
			continue;
		}
		if (rd_ops_alloc(r, p, rk, nops))
			return -1;
		rk->first_line = r->line + 1;
		while (rk->nops < nops) {
			size_t used;
			int64_t k = plan_read_ops_fast(r->blk + r->pos, r->blk + r->len, &lim,
			                               rk->ops + rk->nops, rk->lines ? rk->lines + rk->nops : NULL,
			                               rk->ops_cap - rk->nops, &used);
			r->pos += used;
			r->line += k;
			if ((rk->nops += k) == nops)
				break;
			PlanOp o;
			int32_t line;
			if (rd_line_in(r, "an op line") ||
			    (!plan_read_op_fast(r->buf, r->end, &lim, &o, &line) &&
			     (rd_no_nul(r) || ops_short(r, rk, idx, nops) || rd_read_op(r, p, &o, &line))))
				return -1;
			if (rk->nops == rk->ops_cap && rd_grow_ops(r, rk, nops))
				return -1;
			if (rk->lines)
				rk->lines[rk->nops] = line;
			rk->ops[rk->nops++] = o;
		}
	}
	if (rd_next_line(r, "'end'") || ops_over(r, p, n, stride, nops, "end"))
		return -1;
	if (strcmp(r->buf, "end") != 0)
		return rd_fail(r, "expected 'end' after the last rank's ops (op count too small?)");
	if (r->pos == r->len && rd_fill(r))
		return -1;
	if (r->pos < r->len) {
		r->line++;
		return rd_fail(r, "text after 'end'");
	}
	rd_hash_to(r, r->len);
	uint64_t h = r->check == RD_CHECK_APART ? rd_par_sum(r)
	             : r->check                 ? plan_hash_final(&r->h)
	                                        : 0;
	if (r->check && h != r->want && !(r->keep & PLAN_READ_REHASH)) {
		const char *f = strcmp(r->name, "<stdin>") ? r->name : "PLAN";
		r->line = 1;
		return rd_fail(r, "checksum mismatch: the plan was changed after pipecc wrote it (the "
		               "header says %016" PRIx64 ", the text hashes to %016" PRIx64 "); if the "
		               "change was meant, `pipecc %s --rehash -o %s` checks it and writes it "
		               "with a new checksum", r->want, h, f, f);
	}
	return 0;
}

Plan *plan_read_text(FILE *f, const char *name, PlanError *err)
{
	return plan_read_text_as(f, name, PLAN_KEEP_ALL, err);
}

/* The text plan in f; with par, its op lines are left to read_par.c's workers. */
Plan *rd_read_text(FILE *f, const char *name, unsigned keep, RdPar *par, PlanError *err)
{
	Rd r;
	rd_init(&r, f, name, err);
	r.keep = keep;
	r.par = par;
	Plan *p = plan_new();
	if (!p) {
		plan_oom_text(err->msg, sizeof err->msg, 0, sizeof *p);
		return NULL;
	}
	int bad = read_header(&r, p) || read_stages(&r, p) || read_edges(&r, p) ||
	          read_routes(&r, p) || read_ranks(&r, p);
	free(r.blk);
	if (!bad && !r.failed && par && rd_par_ops(&r, p))
		bad = 1;
	if (!bad && !r.failed && plan_sizes_canon(p)) {
		plan_oom_text(err->msg, sizeof err->msg, 0, (size_t)p->nsizes * 12);
		bad = 1;
	}
	if (bad || r.failed) {
		plan_free(p);
		return NULL;
	}
	return p;
}

/* With --threads N (plan_threads > 1) and a regular file, the op lines are parsed on
 * worker threads (read_par.c).  That attempt only ever succeeds with the plan the reader
 * below would make; any trouble in it at all (an error anywhere in the file, a line the
 * workers refuse, out of memory, a short read) throws it away, and the file is read
 * again from its start on this thread, which reports exactly what it always did.  So a
 * bad plan reads twice, and threads change speed, never a plan or a message. */
Plan *plan_read_text_as(FILE *f, const char *name, unsigned keep, PlanError *err)
{
	RdPar par;
	off_t at;
	if (plan_threads > 1 && (at = ftello(f)) >= 0 && !rd_par_init(&par, f)) {
		Plan *p = rd_read_text(f, name, keep, &par, err);
		rd_par_free(&par);
		if (p)
			return p;
		if (fseeko(f, at, SEEK_SET)) {
			*err = (PlanError){.rank = -1, .op = -1};
			snprintf(err->msg, sizeof err->msg, "cannot read the plan again: %s",
			         plan_strerror(errno));
			return NULL;
		}
		clearerr(f); // a failed read of the attempt is found again, or was passing
	}
	return rd_read_text(f, name, keep, NULL, err);
}
