/* The checker's layers: the token input, layers and their keys, stages, blocks and
 * their expansion into a stage's layer list, the optimizer and the device, then, once
 * every stage is read, each layer's widths against its neighbours and the input.  Part
 * of check.c's single pass over the statements (see its opening comment); the layer
 * kinds' facts come from the layer table (plan/layer.c), never from here. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../plan/mem.h"
#include "../plan/tfcount.h"
#include "check_int.h"

/* `input tokens BxS vocab=V [pad=M];`: B sequences of S tokens; rows are the B*S tokens.
 * pad=M pads the vocabulary to a multiple of M x tp once tp is known (check_vocab_pad). */
static void check_tokens(Check *c, AstStmt *s)
{
	static const char *const keys[] = {"vocab", "pad"};
	static const char *const eg[] = {"vocab=50257", "pad=128"};
	Program *p = c->p;
	int b = 0, ok = 1, val[2] = {-1, 0};
	p->input_loc = s->span;
	if (strcmp(s->name3.s, "tokens") != 0) {
		diag_error(c->d, s->name3.loc, "unknown input kind '%s'; the input is 'ROWSxCOLS' or "
		           "'tokens BxS vocab=V'", s->name3.s);
		ok = 0;
	}
	ok &= whole(c, &s->shape.rows, "input sequences", 1, MAX_SIZE, &b);
	ok &= whole(c, &s->shape.cols, "sequence length", 1, MAX_SIZE, &p->seq);
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		int k = 0;
		while (k < 2 && strcmp(kv->key.s, keys[k]) != 0)
			k++;
		if (k == 2) {
			unknown_word(c, &kv->key, "input setting", keys, 2);
			ok = 0;
		} else if (repeated_key(c, s->kvs, i, "input setting")) {
			ok = 0;
		} else if (!kv->has_val) {
			diag_error(c->d, kv->loc, "'%s' needs a value, e.g. %s", keys[k], eg[k]);
			ok = 0;
		} else {
			ok &= whole(c, &kv->val, keys[k], 1, MAX_SIZE, &val[k]);
			if (k == 1)
				p->pad_loc = kv->loc;
		}
	}
	if (ok && val[0] < 0) {
		diag_error(c->d, s->span, "a token input needs its vocabulary: vocab=V");
		ok = 0;
	}
	if (ok && (int64_t)b * p->seq > MAX_SIZE) {
		diag_error(c->d, s->span, "the input has %lld tokens per microbatch, more than %d",
		           (long long)b * p->seq, MAX_SIZE);
		ok = 0;
	}
	if (ok) {
		p->rows = b * p->seq;
		p->cols = 1;
		p->vocab = val[0];
		p->vocab_pad = val[1];
	} else {
		p->seq = 0;
	}
	c->input_ok = ok;
}

void check_input(Check *c, AstStmt *s)
{
	Program *p = c->p;
	if (s->name3.s) {
		check_tokens(c, s);
		return;
	}
	for (int i = 0; i < s->nkvs; i++)
		diag_error(c->d, s->kvs[i].loc, "a matrix input takes no settings ('%s'); vocab= and "
		           "pad= belong to 'input tokens BxS vocab=V'", s->kvs[i].key.s);
	int ok = !s->nkvs;
	ok &= whole(c, &s->shape.rows, "input rows", 1, MAX_SIZE, &p->rows);
	ok &= whole(c, &s->shape.cols, "input columns", 1, MAX_SIZE, &p->cols);
	p->input_loc = ast_span(s->shape.rows.loc, s->shape.cols.loc);
	c->input_ok = ok;
}

/* What the layer table knows (plan_layer_words) into words, joined into list. */
static int layer_list(const char *word, const char **words, char *list, size_t n)
{
	int count = plan_layer_words(word, words);
	size_t len = 0;
	list[0] = 0;
	for (int i = 0; i < count && len < n; i++)
		len += (size_t)snprintf(list + len, n - len, "%s%s", i ? ", " : "", words[i]);
	return count;
}

/* "unknown layer 'x'" (word NULL) or "unknown loss 'x'" (word "loss"). */
static void unknown_layer(Check *c, const AstName *w, const char *word)
{
	const char *words[LAYER_COUNT];
	char list[256];
	const char *s = diag_suggest(w->s, words, layer_list(word, words, list, sizeof list));
	if (s)
		diag_error(c->d, w->loc, "unknown %s '%s'; did you mean '%s'?", word ? word : "layer",
			w->s, s);
	else
		diag_error(c->d, w->loc, "unknown %s '%s'; the %s%s are: %s", word ? word : "layer",
			w->s, word ? word : "layer", word ? " kinds" : "s", list);
}

/* A real without unit into *v, its sign applied; 0 after reporting (or when the number
 * was reported bad already). */
static int unitless(Check *c, const AstNum *n, const char *what, double *v)
{
	if (n->bad)
		return 0;
	if (n->unit[0]) {
		diag_error(c->d, n->loc, "%s takes no unit, got '%s'", what, n->unit);
		return 0;
	}
	if (!real(c, n, v))
		return 0;
	if (n->neg)
		*v = -*v;
	return 1;
}

/* A probability without unit in [0, 1) into *out (a dropout's P; -0 is 0). */
static int prob(Check *c, const AstNum *n, const char *what, double *out)
{
	double v;
	if (!unitless(c, n, what, &v))
		return 0;
	if (!(v >= 0 && v < 1)) {
		diag_error(c->d, n->loc, "%s must be in [0, 1), got %s%s", what, n->neg ? "-" : "",
		           n->digits);
		return 0;
	}
	*out = v + 0.0; // -0 is 0
	return 1;
}

/* `attention kv=8`: a key the layer kind does not take, with the one it may mean (`kv` is
 * short for `kv_heads`) or the keys it takes. */
static void unknown_key(Check *c, const LayerInfo *li, const AstName *key)
{
	const char *keys[LAYER_KEY_COUNT];
	char list[256];
	int n = 0;
	for (int k = 0; k < LAYER_KEY_COUNT; k++)
		if (li->keys & LAYER_FLAG(k))
			keys[n++] = plan_layer_keys[k].name;
	const char *s = diag_suggest(key->s, keys, n);
	word_list(list, sizeof list, keys, n);
	if (s)
		diag_error(c->d, key->loc, "'%s' takes no key '%s'; did you mean '%s'?", li->word,
		           key->s, s);
	else if (n)
		diag_error(c->d, key->loc, "'%s' takes no key '%s'; its keys are: %s", li->word,
		           key->s, list);
	else
		diag_error(c->d, key->loc, "'%s' takes no key '%s'", li->word, key->s);
}

/* The keys of one layer (`heads=12`, `bias`, `dropout=0.1`) into l; 0 after reporting. */
static int layer_keys(Check *c, const AstLayer *al, const LayerInfo *li, ProgLayer *l)
{
	int ok = 1;
	for (int i = 0; i < al->nargs; i++) {
		const AstArg *a = &al->args[i];
		if (!a->is_name)
			continue;
		LayerKey k = plan_layer_key_find(a->name.s, strlen(a->name.s));
		if (k == LAYER_KEY_COUNT) {
			if (a->has_val) {
				unknown_key(c, li, &a->name);
				ok = 0;
			}
			continue; // a positional name (`loss mse`), checked by the caller
		}
		const LayerKeyInfo *ki = &plan_layer_keys[k];
		if (!(li->keys & LAYER_FLAG(k))) {
			diag_error(c->d, a->name.loc, "'%s' takes no '%s'", li->word, ki->name);
			ok = 0;
			continue;
		}
		for (int j = 0; j < i; j++)
			if (al->args[j].is_name && !strcmp(al->args[j].name.s, a->name.s)) {
				diag_error(c->d, a->name.loc, "'%s' is given twice", a->name.s);
				ok = 0;
			}
		char what[64];
		snprintf(what, sizeof what, "'%s'", ki->name);
		if (ki->number && !a->has_val) {
			diag_error(c->d, a->loc, "'%s' needs a value, e.g. %s=%s", ki->name, ki->name,
			           ki->number == LAYER_VAL_PROB ? "0.1" : "4");
			ok = 0;
		} else if (!ki->number && a->has_val) {
			diag_error(c->d, a->num.loc, "'%s' takes no value", ki->name);
			ok = 0;
		} else if (!ki->number) {
			l->flags |= LAYER_FLAG(k);
		} else if (ki->number == LAYER_VAL_PROB) {
			ok &= prob(c, &a->num, what, &l->drop);
		} else {
			ok &= whole(c, &a->num, what, 1, MAX_SIZE,
			            k == LAYER_KEY_HEADS ? &l->heads : &l->kv_heads);
		}
	}
	if (ok && (li->keys & LAYER_FLAG(LAYER_KEY_HEADS)) && !l->heads) {
		diag_error(c->d, al->loc, "'%s' needs heads=N, e.g. %s", li->word, li->example);
		ok = 0;
	}
	if (ok && l->heads && !l->kv_heads)
		l->kv_heads = l->heads;
	return ok;
}

/* One layer into *l; 0 when it is unsound (reported, or a syntax error before).  The
 * layer table says how each kind is spelled, what follows its word and which keys it
 * takes.  Bodies (residual) are the caller's. */
static int check_layer(Check *c, const AstLayer *al, ProgLayer *l)
{
	*l = (ProgLayer){.kind = LAYER_COUNT, .loc = al->loc};
	if (!al->name.s)
		return 0;
	LayerKind k = plan_layer_parse(al->name.s, NULL);
	if (k == LAYER_COUNT) {
		unknown_layer(c, &al->name, NULL);
		return 0;
	}
	const LayerInfo *li = &plan_layers[k];
	const char *w = li->word, *names[LAYER_COUNT];
	char list[256];
	if (!layer_keys(c, al, li, l))
		return 0;
	/* the positional arguments: numbers, and names that are not keys */
	const AstArg *pos[2];
	int npos = 0;
	for (int i = 0; i < al->nargs; i++) {
		const AstArg *a = &al->args[i];
		if (!a->is_name || plan_layer_key_find(a->name.s, strlen(a->name.s)) == LAYER_KEY_COUNT)
			if (npos < 2)
				pos[npos++] = a;
	}
	int named = li->arg == LAYER_ARG_NAME;
	int number = li->arg == LAYER_ARG_WIDTH || li->arg == LAYER_ARG_HIDDEN;
	const char *what = named                          ? "kind"
	                   : li->arg == LAYER_ARG_HIDDEN ? "hidden width"
	                   : li->arg == LAYER_ARG_PROB   ? "probability"
	                                                 : "width";
	if (al->has_body != (li->arg == LAYER_ARG_BODY)) {
		diag_error(c->d, al->loc, al->has_body ? "'%s' takes no body { ... }" :
		           "'%s' needs a body, e.g. %s", w, li->example);
	} else if (li->arg == LAYER_ARG_NONE || li->arg == LAYER_ARG_BODY) {
		if (npos == 0)
			return l->kind = k, 1;
		diag_error(c->d, pos[0]->loc, "'%s' takes no arguments%s", w,
		           li->keys ? " but its keys" : "");
	} else if (npos == 0) {
		diag_error(c->d, al->loc, "'%s' needs a %s, e.g. %s", w, what, li->example);
	} else if (npos > 1 || pos[0]->is_name != named) {
		layer_list(w, names, list, sizeof list);
		diag_error(c->d, pos[npos > 1]->loc, "'%s' takes one %s%s%s", w, what,
			named ? ": " : "", named ? list : "");
	} else if (named) {
		k = plan_layer_parse(w, pos[0]->name.s);
		if (k != LAYER_COUNT)
			return l->kind = k, 1;
		unknown_layer(c, &pos[0]->name, w);
	} else {
		char msg[64];
		snprintf(msg, sizeof msg, "'%s' %s", w, what);
		if (number ? whole(c, &pos[0]->num, msg, 1, MAX_SIZE,
		                   li->arg == LAYER_ARG_HIDDEN ? &l->hidden : &l->out)
		           : prob(c, &pos[0]->num, msg, &l->drop))
			return l->kind = k, 1;
	}
	return 0;
}

enum { MAX_STAGE_LAYERS = 1 << 20 };

typedef struct {
	ProgLayer *v;
	int n, cap;
} LayerList;

static ProgLayer *layer_push(Check *c, LayerList *ls, Loc at)
{
	if (ls->n >= MAX_STAGE_LAYERS) {
		diag_error(c->d, at, "a stage may hold at most %d layers", MAX_STAGE_LAYERS);
		return NULL;
	}
	if (ls->n == ls->cap) {
		int cap = ls->cap ? 2 * ls->cap : 16;
		ProgLayer *v = arena_alloc(c->a, (size_t)cap * sizeof *v);
		if (ls->n)
			memcpy(v, ls->v, (size_t)ls->n * sizeof *v);
		ls->v = v;
		ls->cap = cap;
	}
	return &ls->v[ls->n++];
}

/* The block a layer line names, or -1: `NAME;` or `NAME x N;` uses block NAME, which
 * must be declared above (and, inside a block, above that block: `within`). */
static int block_use(Check *c, const AstLayer *al, int within, int *times)
{
	if (!al->name.s)
		return -1;
	const Slot *slot = map_slot(&c->blocks, al->name.s, 0);
	if (!slot->used)
		return -1;
	int b = slot->val;
	*times = 0;
	if (b >= within) {
		if (b < c->nblocks && b == within)
			diag_error(c->d, al->name.loc, "block '%s' uses itself", al->name.s);
		else
			diag_error(c->d, al->name.loc, "block '%s' is used before it is defined",
			           al->name.s);
		diag_note(c->d, c->block_stmt[b]->name.loc, "'%s' is defined here", al->name.s);
		return -2;
	}
	*times = 1;
	if (al->nargs == 0 && !al->has_body)
		return b;
	if (al->nargs == 2 && !al->has_body && al->args[0].is_name && !al->args[0].has_val &&
	    !strcmp(al->args[0].name.s, "x") && !al->args[1].is_name) {
		if (whole(c, &al->args[1].num, "repeat count", 1, MAX_STAGE_LAYERS, times))
			return b;
		return -2;
	}
	diag_error(c->d, al->loc, "a block is used as '%s;' or '%s x N;'", al->name.s,
	           al->name.s);
	return -2;
}

/* Block uses inside block uses, at most: the expansion recurses once per level. */
enum { MAX_BLOCK_NEST = 64 };

/* The layers als[0..n) into ls, blocks repeated and residual bodies flattened after
 * their residual (its span).  `within`: the blocks visible (declared above). */
static int expand(Check *c, const AstLayer *als, int n, int within, LayerList *ls)
{
	int ok = 1;
	for (int i = 0; i < n && !over_limit(c); i++) {
		const AstLayer *al = &als[i];
		int times = 0, b = block_use(c, al, within, &times);
		if (b == -2) {
			ok = 0;
			continue;
		}
		if (b >= 0 && c->in_blocks == MAX_BLOCK_NEST) {
			diag_error(c->d, al->name.loc, "blocks nest more than %d deep here: '%s' is "
			           "used inside %d other blocks' uses", MAX_BLOCK_NEST, al->name.s,
			           MAX_BLOCK_NEST);
			return 0;
		}
		if (b >= 0) {
			const AstStmt *bs = c->block_stmt[b];
			int bok = c->block_ok[b];
			const char *outer = c->block;
			Loc outer_use = c->block_use;
			c->block = bs->name.s;
			c->block_use = al->name.loc;
			c->in_blocks++;
			for (int t = 0; t < times && bok; t++)
				bok = expand(c, bs->layers, bs->nlayers, b, ls);
			c->in_blocks--;
			c->block = outer;
			c->block_use = outer_use;
			c->block_ok[b] = (uint8_t)bok; // its errors are reported once
			ok &= bok;
			continue;
		}
		if (al->has_body && c->in_bodies == PLAN_NEST_MAX) {
			diag_error(c->d, al->loc, "'%s' bodies nest more than %d deep here, the most "
			           "the tools run", al->name.s, PLAN_NEST_MAX);
			return 0;
		}
		ProgLayer l;
		int lok = check_layer(c, al, &l);
		ok &= lok;
		if (!lok && !al->has_body)
			continue;
		int at = ls->n;
		ProgLayer *slot = layer_push(c, ls, al->loc);
		if (!slot)
			return 0;
		*slot = l;
		slot->block = c->block;
		slot->use = c->block_use;
		if (!al->has_body)
			continue;
		c->in_bodies++;
		int body_ok = expand(c, al->layers, al->nlayers, within, ls);
		c->in_bodies--;
		ok &= body_ok;
		if (ls->n == at + 1 && lok && body_ok) { // else its error said why
			diag_error(c->d, al->loc, "'%s' needs at least one layer in its body",
			           al->name.s);
			ok = 0;
		}
		ls->v[at].span = ls->n - at - 1;
	}
	return ok;
}
void check_stage(Check *c, AstStmt *s)
{
	Program *p = c->p;
	if (!s->name.s) {
		c->widths_ok = c->stages_known = 0;
		return;
	}
	Slot *slot = map_slot(&c->stages, s->name.s, 0);
	if (slot->used) {
		c->stages_known = 0;
		diag_error(c->d, s->name.loc, "duplicate stage '%s'", s->name.s);
		diag_note(c->d, c->stage_stmt[slot->val]->name.loc, "'%s' is first declared here",
			s->name.s);
		return;
	}
	int i = p->nstages++;
	map_set(slot, s->name.s, 0, i);
	c->stage_stmt[i] = s;
	ProgStage *st = &p->stages[i];
	st->name = s->name.s;
	st->loc = s->name.loc;
	LayerList ls = {0};
	int ok = !s->bad;
	ok &= expand(c, s->layers, s->nlayers, c->nblocks, &ls);
	st->nlayers = ls.n;
	st->layers = ls.v;
	if (!s->bad && s->nlayers == 0) {
		diag_error(c->d, s->name.loc, "stage '%s' has no layers", s->name.s);
		ok = 0;
	}
	c->stage_ok[i] = (uint8_t)ok;
	if (!ok)
		c->widths_ok = 0;
}

/* `block NAME { layers }`: its layers are checked where a stage uses it. */
void check_block(Check *c, AstStmt *s)
{
	int b = c->nblocks;
	if (!s->name.s || b >= c->nblock_names || c->block_stmt[b] != s)
		return; // lost to a syntax error: not among the names collected
	c->nblocks++;
	c->block_ok[b] = !s->bad;
	int first = map_slot(&c->blocks, s->name.s, 0)->val;
	if (first != b) {
		diag_error(c->d, s->name.loc, "duplicate block '%s'", s->name.s);
		diag_note(c->d, c->block_stmt[first]->name.loc, "'%s' is first defined here",
		          s->name.s);
		c->block_ok[b] = 0;
		return;
	}
	if (plan_layer_parse(s->name.s, NULL) != LAYER_COUNT) {
		diag_error(c->d, s->name.loc, "block '%s' has the name of a layer kind", s->name.s);
		c->block_ok[b] = 0;
	}
	if (!s->bad && s->nlayers == 0) {
		diag_error(c->d, s->name.loc, "block '%s' has no layers", s->name.s);
		c->block_ok[b] = 0;
	}
}

/* A plain non-negative real without unit, in [lo, hi]. */
static int real_in(Check *c, const AstNum *n, const char *what, double lo, double hi,
                   double *out)
{
	double v;
	if (!unitless(c, n, what, &v))
		return 0;
	if (!(v >= lo && v <= hi)) {
		diag_error(c->d, n->loc, "%s must be in [%g, %g]", what, lo, hi);
		return 0;
	}
	*out = v;
	return 1;
}

/* `precision NAME;`: a regime of plan/prec.h. */
void check_precision(Check *c, AstStmt *s)
{
	const char *names[PREC_COUNT];
	char list[64] = "";
	for (int k = 0; k < PREC_COUNT; k++) {
		names[k] = plan_precs[k].name;
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", names[k],
		         k + 2 < PREC_COUNT ? ", " : k + 1 < PREC_COUNT ? " or " : "");
	}
	int k = find_word(s->name.s, names, PREC_COUNT);
	if (k < 0 && diag_suggest(s->name.s, names, PREC_COUNT))
		unknown_word(c, &s->name, "precision", names, PREC_COUNT);
	else if (k < 0)
		diag_error(c->d, s->name.loc, "unknown precision '%s' (%s)", s->name.s, list);
	else
		c->p->prec = (uint8_t)k;
}

void check_optimizer(Check *c, AstStmt *s)
{
	PlanOptim *o = &c->p->optim;
	/* Each kind's settings: lr first, then its own (a row per kind), then the flag
	 * `distributed` (Megatron's distributed optimizer), which every kind takes. */
	static const char *const keys[OPTIM_COUNT][6] = {
		[OPTIM_SGD] = {"lr", "distributed"},
		[OPTIM_ADAMW] = {"lr", "beta1", "beta2", "eps", "weight_decay", "distributed"},
		[OPTIM_MOMENTUM] = {"lr", "momentum", "distributed"},
	};
	static const int nkeys[OPTIM_COUNT] = {[OPTIM_SGD] = 2, [OPTIM_ADAMW] = 6, [OPTIM_MOMENTUM] = 3};
	int k = find_word(s->name.s, plan_optim_names, OPTIM_COUNT);
	if (k < 0) {
		unknown_word(c, &s->name, "optimizer", plan_optim_names, OPTIM_COUNT);
		return;
	}
	*o = plan_optim_default(k);
	double *adam[] = {&o->lr, &o->beta1, &o->beta2, &o->eps, &o->weight_decay};
	double *mom[] = {&o->lr, &o->momentum};
	static const double lo[OPTIM_COUNT][5] = {{1e-12}, {1e-12, 0, 0, 1e-30, 0}, {1e-12, 0}};
	static const double hi[OPTIM_COUNT][5] = {
		{1e6}, {1e6, 0.999999, 0.999999, 1, 1e6}, {1e6, 0.999999}};
	double **val = k == OPTIM_MOMENTUM ? mom : adam;
	int nk = nkeys[k];
	char what[32];
	snprintf(what, sizeof what, "%s setting", plan_optim_names[k]);
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		int j = find_word(kv->key.s, keys[k], nk);
		if (j < 0)
			unknown_word(c, &kv->key, what, keys[k], nk);
		else if (repeated_key(c, s->kvs, i, "optimizer setting"))
			;
		else if (j == nk - 1 && kv->has_val)
			diag_error(c->d, kv->loc, "'distributed' takes no value: it shards the optimizer "
			                          "over the dp group");
		else if (j == nk - 1)
			o->distributed = 1;
		else if (!kv->has_val)
			diag_error(c->d, kv->loc, "'%s' needs a value, e.g. %s=0.001", keys[k][j], keys[k][j]);
		else
			real_in(c, &kv->val, keys[k][j], lo[k][j], hi[k][j], val[j]);
	}
}

/* The device presets (SXM parts), one row each: the dense GEMM rate of each precision's
 * operands (plan/prec.h: f32 on the CUDA cores, tf32 and bf16 on the tensor cores, the
 * vendor's datasheet figures without sparsity), the memory the vendor names (decimal
 * GB) and its HBM bandwidth (the datasheets: A100 80GB SXM 2,039 GB/s, H100 SXM
 * 3.35 TB/s, H200 SXM 4.8 TB/s; docs/semantics.md "Costs"). */
static const struct {
	const char *name;
	double flops[PREC_COUNT];
	int64_t mem;
	double bw;
} device_presets[] = {
	{"a100", {[PREC_F32] = 19.5e12, [PREC_TF32] = 156e12, [PREC_BF16] = 312e12}, 80000000000,
	 2.039e12},
	{"h100", {[PREC_F32] = 67e12, [PREC_TF32] = 494.5e12, [PREC_BF16] = 989e12}, 80000000000,
	 3.35e12},
	{"h200", {[PREC_F32] = 67e12, [PREC_TF32] = 494.5e12, [PREC_BF16] = 989e12}, 141000000000,
	 4.8e12},
};
#define NPRESETS ((int)(sizeof device_presets / sizeof device_presets[0]))

/* The device's settings with a unit, after the presets among its words; the kernel
 * classes' efficiencies (plan_roof_classes) follow them. */
enum { DEV_PEAK, DEV_MEMORY, DEV_BANDWIDTH, DEV_COUNT };
static const char *const device_keys[DEV_COUNT] = {"peak", "memory", "bandwidth"};

/* `device peak=N;` or `device memory=N;`: a rate or a capacity with its unit. */
static void device_value(Check *c, const AstKv *kv, int mem)
{
	static const Unit rates[] = {{"GFLOPs", 1e9}, {"TFLOPs", 1e12}, {"PFLOPs", 1e15},
	                             {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15}};
	static const Unit bytes[] = {{"B", 1},       {"kB", 1e3},           {"MB", 1e6},
	                             {"GB", 1e9},    {"TB", 1e12},          {"KiB", 1024.0},
	                             {"MiB", 1048576.0}, {"GiB", 1073741824.0},
	                             {"TiB", 1099511627776.0}};
	const char *key = mem ? "memory" : "peak", *eg = mem ? "80GB" : "989TFLOPs";
	double scale, v;
	if (!kv->has_val)
		diag_error(c->d, kv->loc, "'%s' needs a value, e.g. %s=%s", key, key, eg);
	else if (!kv->val.bad && !kv->val.unit[0])
		diag_error(c->d, kv->val.loc, "%s needs a unit, e.g. %s", key, eg);
	else if (!kv->val.bad &&
	         unit_scale(c, &kv->val, mem ? bytes : rates, mem ? 9 : 6,
	                    mem ? "memory" : "FLOP rate",
	                    mem ? "B, kB, MB, GB, TB, KiB, MiB, GiB or TiB" : "GFLOPs, TFLOPs or PFLOPs",
	                    &scale) &&
	         real(c, &kv->val, &v)) {
		v *= kv->val.neg ? -scale : scale;
		if (mem && !(v >= 1e6 && v <= 1e15))
			diag_error(c->d, kv->val.loc, "memory must be between 1MB and 1000TB");
		else if (!mem && !(v >= 1e9 && v <= 1e18))
			diag_error(c->d, kv->val.loc, "peak must be between 1GFLOPs and 1000PFLOPs");
		else if (mem) {
			c->p->mem_cap = (int64_t)v;
			c->p->mem_loc = kv->loc;
		} else {
			c->p->peak_flops = v;
			c->p->peak_given = 1;
		}
	}
}

/* Setting k of device_keys, or efficiency k - DEV_COUNT: `gemm=0.8`, in (0, 1]. */
static void device_setting(Check *c, const AstKv *kv, int k)
{
	if (k < DEV_BANDWIDTH) {
		device_value(c, kv, k == DEV_MEMORY);
		return;
	}
	const char *key = k < DEV_COUNT ? device_keys[k] : plan_roof_classes[k - DEV_COUNT].name;
	double v;
	if (!kv->has_val)
		diag_error(c->d, kv->loc, "'%s' needs a value, e.g. %s=%s", key, key,
		           k == DEV_BANDWIDTH ? "3.35TB/s" : "0.8");
	else if (k == DEV_BANDWIDTH && bandwidth(c, &kv->val, &v))
		c->p->hbm_bw = v;
	else if (k > DEV_BANDWIDTH && real_in(c, &kv->val, key, 0, 1, &v) && v <= 0)
		diag_error(c->d, kv->val.loc, "%s must be above 0", key);
	else if (k > DEV_BANDWIDTH)
		c->p->eff[k - DEV_COUNT] = v;
}

/* `device NAME;` (a preset: FLOP rate, memory and bandwidth), `device peak=NTFLOPs;`,
 * `device memory=80GB;`, `device bandwidth=3.35TB/s;`, the kernel classes' efficiencies
 * (`gemm=0.8`), or a preset with settings replacing its own. */
void check_device(Check *c, AstStmt *s)
{
	enum { NWORDS = NPRESETS + DEV_COUNT + ROOF_COUNT };
	const char *names[NWORDS];
	for (int k = 0; k < NPRESETS; k++)
		names[k] = device_presets[k].name;
	for (int k = 0; k < DEV_COUNT; k++)
		names[NPRESETS + k] = device_keys[k];
	for (int k = 0; k < ROOF_COUNT; k++)
		names[NPRESETS + DEV_COUNT + k] = plan_roof_classes[k].name;
	if (s->nkvs == 0) {
		diag_error(c->d, s->span, "'device' takes a preset (a100, h100, h200), peak=N, "
		           "memory=N or bandwidth=N, e.g. device h100; or device peak=989TFLOPs "
		           "memory=80GB bandwidth=3.35TB/s;");
		return;
	}
	int preset = -1, given[DEV_COUNT] = {0};
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		int k = find_word(kv->key.s, names, NWORDS);
		if (k < 0) {
			unknown_word(c, &kv->key, "device", names, NWORDS);
		} else if (repeated_key(c, s->kvs, i, "device setting")) {
		} else if (k < NPRESETS && kv->has_val) {
			diag_error(c->d, kv->val.loc, "'%s' takes no value", names[k]);
		} else if (k < NPRESETS && preset >= 0) {
			diag_error(c->d, kv->key.loc, "'device' names one preset, not '%s' and '%s'",
			           device_presets[preset].name, names[k]);
		} else if (k < NPRESETS) {
			preset = k;
			c->p->device_preset = (uint8_t)(k + 1);
			if (!given[DEV_MEMORY]) {
				c->p->mem_cap = device_presets[k].mem;
				c->p->mem_loc = kv->key.loc;
			}
			if (!given[DEV_BANDWIDTH])
				c->p->hbm_bw = device_presets[k].bw;
		} else {
			if (k - NPRESETS < DEV_COUNT)
				given[k - NPRESETS] = 1;
			device_setting(c, kv, k - NPRESETS);
		}
	}
}

/* The divisors of d from h / 2 to 2 h, or failing any there the nearest one below h
 * and above it, as "8, 16" into buf: what `heads=` could be instead of h. */
static void divisors_near(int d, int h, char *buf, size_t n)
{
	int below = 0, above = 0, k = 0;
	size_t len = 0;
	buf[0] = 0;
	for (int v = 1; v <= d; v++) {
		if (d % v)
			continue;
		if (v < h)
			below = v;
		else if (!above)
			above = v;
		if (v >= h / 2 && v <= 2 * h && len < n)
			len += (size_t)snprintf(buf + len, n - len, "%s%d", k++ ? ", " : "", v);
	}
	if (!k && above)
		snprintf(buf, n, "%d, %d", below, above);
	else if (!k)
		snprintf(buf, n, "%d", below);
}

/* A layer's errors after the widths are known, held until every stage is walked so that
 * a layer in a block used N times is reported once, with a note at the block's first
 * failing use and how many more copies fail the same way; same source place and text
 * is the same error.  Past MAX_FAULTS distinct ones the rest are reported as they come
 * (the diagnostics' own limit stops them soon after). */
enum { MAX_FAULTS = 2 * DIAG_MAX_ERRORS };

typedef struct {
	Loc loc, use;
	const char *block;
	int copies;
	char msg[320];
} LayerFault;

typedef struct {
	LayerFault v[MAX_FAULTS];
	int n;
} Faults;

static void layer_fault(Check *c, Faults *f, const ProgLayer *l, const char *msg)
{
	for (int i = 0; l->block && i < f->n; i++) {
		LayerFault *x = &f->v[i];
		if (x->block && x->loc.line == l->loc.line && x->loc.col == l->loc.col &&
		    !strcmp(x->msg, msg)) {
			x->copies++;
			return;
		}
	}
	if (f->n == MAX_FAULTS) {
		diag_error(c->d, l->loc, "%s", msg);
		return;
	}
	LayerFault *x = &f->v[f->n++];
	*x = (LayerFault){.loc = l->loc, .use = l->use, .block = l->block, .copies = 1};
	snprintf(x->msg, sizeof x->msg, "%s", msg);
}

static void faults_report(Check *c, const Faults *f)
{
	for (int i = 0; i < f->n; i++) {
		const LayerFault *x = &f->v[i];
		diag_error(c->d, x->loc, "%s", x->msg);
		if (x->block && x->copies > 1)
			diag_note(c->d, x->use, "in block '%s' used here, and in %d more cop%s of it",
			          x->block, x->copies - 1, x->copies > 2 ? "ies" : "y");
		else if (x->block)
			diag_note(c->d, x->use, "in block '%s' used here", x->block);
	}
}

/* What one layer asks of the widths and the input, once its input width is known; 0
 * with the reason in msg (the caller reports it: layer_fault). */
static int check_layer_widths(const Check *c, const ProgStage *st, int j, int first,
                              const ProgLayer *embed, char *msg, size_t n)
{
	const Program *p = c->p;
	const ProgLayer *l = &st->layers[j];
	const LayerInfo *li = &plan_layers[l->kind];
	if (li->tokens && !p->seq) {
		snprintf(msg, n, "'%s' needs a token input: write 'input tokens BxS vocab=V;'",
		           li->word);
		return 0;
	}
	if (p->seq && first && l->kind != LAYER_EMBED) {
		snprintf(msg, n, "a token input goes into 'embed' first, e.g. %s",
		           plan_layers[LAYER_EMBED].example);
		return 0;
	}
	if (l->kind == LAYER_EMBED && !first) {
		snprintf(msg, n, "'embed' must be the first layer of the first stage");
		return 0;
	}
	if (li->drops_x && (j == 0 || plan_layers[st->layers[j - 1].kind].arg == LAYER_ARG_BODY)) {
		snprintf(msg, n, "'%s' keeps only its mask, not its input, so it cannot "
		           "begin a %s, whose first layer keeps that input; put it after another "
		           "layer", li->word, j == 0 ? "stage" : "residual body");
		return 0;
	}
	if (l->heads && l->in % l->heads) {
		char near[128];
		divisors_near(l->in, l->heads, near, sizeof near);
		snprintf(msg, n, "heads=%d does not divide the width %d; head counts near %d that "
		         "divide it: %s", l->heads, l->in, l->heads, near);
		return 0;
	}
	if (l->heads && l->heads % l->kv_heads) {
		snprintf(msg, n, "kv_heads=%d does not divide heads=%d", l->kv_heads, l->heads);
		return 0;
	}
	if (l->heads && (l->flags & LAYER_FLAG(LAYER_KEY_ROPE)) && (l->in / l->heads) % 2) {
		snprintf(msg, n, "rope needs an even head width, got %d / %d = %d", l->in,
		           l->heads, l->in / l->heads);
		return 0;
	}
	if (l->kind == LAYER_XENT && l->in != p->vocab) {
		snprintf(msg, n, "'loss xent' takes logits over the vocabulary (%d wide), got "
		           "width %d; put 'head' before it", p->vocab, l->in);
		return 0;
	}
	if ((l->flags & LAYER_FLAG(LAYER_KEY_TIED)) && (!embed || embed->out != l->in)) {
		if (embed)
			snprintf(msg, n, "'head tied' takes width %d but the embedding it ties "
			           "to has width %d", l->in, embed->out);
		else
			snprintf(msg, n, "'head tied' needs an 'embed' to tie to");
		return 0;
	}
	return 1;
}

/* Widths flow down the chain from the input; each loss must end the last stage. */
void check_layers(Check *c)
{
	Program *p = c->p;
	int n = p->nstages;
	for (int i = 0; i < n; i++) {
		ProgStage *st = &p->stages[i];
		if (!c->stage_ok[i])
			continue;
		for (int j = 0; j < st->nlayers; j++)
			if (plan_layers[st->layers[j].kind].loss && (i != n - 1 || j != st->nlayers - 1))
				diag_error(c->d, st->layers[j].loc,
					"'%s' must be the last layer of the last stage",
					plan_layers[st->layers[j].kind].word);
	}
	if (n > 0 && c->stage_ok[n - 1] && c->stages_known && !c->ast->lost) {
		ProgStage *last = &p->stages[n - 1];
		int k = 0;
		while (!plan_layers[k].loss || plan_layers[k].tokens != (p->seq > 0))
			k++; // the first loss in the table that suits the input is the example
		if (!plan_layers[last->layers[last->nlayers - 1].kind].loss)
			diag_error(c->d, last->loc, "the last stage '%s' must end with '%s'",
				last->name, plan_layers[k].example);
	}
	if (!c->widths_ok || !c->input_ok)
		return;
	int w = p->cols, ok = 1;
	const ProgLayer *embed = NULL;
	Faults *f = arena_alloc(c->a, sizeof *f);
	f->n = 0;
	char msg[sizeof f->v[0].msg];
	for (int i = 0; i < n; i++) {
		ProgStage *st = &p->stages[i];
		st->in = w;
		for (int j = 0; j < st->nlayers; j++) {
			ProgLayer *l = &st->layers[j];
			l->in = w;
			w = l->out = plan_layer_out(l->kind, w, l->kind == LAYER_HEAD ? p->vocab : l->out);
			if (!check_layer_widths(c, st, j, i == 0 && j == 0, embed, msg, sizeof msg)) {
				layer_fault(c, f, l, msg);
				ok = 0;
			}
			if (l->kind == LAYER_EMBED)
				embed = l;
		}
		st->out = w;
		for (int j = 0; j < st->nlayers; j++) {
			const ProgLayer *l = &st->layers[j];
			if (l->kind == LAYER_RESIDUAL && st->layers[j + l->span].out != l->in) {
				snprintf(msg, sizeof msg, "the body of 'residual' changes the width from "
				         "%d to %d", l->in, st->layers[j + l->span].out);
				layer_fault(c, f, l, msg);
				ok = 0;
			}
		}
	}
	faults_report(c, f);
	if (!ok) {
		c->widths_ok = 0;
		return;
	}
	for (int i = 0; i < p->nskips; i++) {
		ProgSkip *k = &p->skips[i];
		ProgStage *a = &p->stages[k->src], *b = &p->stages[k->dst];
		if (a->out != b->in)
			diag_error(c->d, k->loc,
				"skip width mismatch: '%s' outputs %d features, '%s' takes %d",
				a->name, a->out, b->name, b->in);
	}
}

/* Stage i's bound of plan_mem_stage_share and plan_mem_edge_share of its out-edges, from
 * its layers' whole figures `sum`: a recomputing stage keeps at most twice its saved
 * bytes (save_re beside them), every out-edge carries its output. */
static int64_t mem_share(const Program *p, int i, const LayerCost *sum)
{
	int64_t saved = sat_add(sat_add(sum->save_fb, sum->save_fw), sum->save_bw);
	int64_t share = sat_add(sat_mul(sum->params, PLAN_MEM_PARAM_BYTES(p->prec)), sat_mul(sat_mul(saved, 2), p->microbatches));
	int edges = i + 1 < p->nstages;
	for (int k = 0; k < p->nskips; k++)
		edges += p->skips[k].src == i;
	int64_t out = sat_mul(sat_mul(p->rows, p->stages[i].out), 4);
	return sat_add(share, sat_mul(plan_mem_edge_share(out, p->microbatches), edges));
}

/* Stage i's layers: every figure, their sums and the program's memory so far (*mem)
 * within what the tools count (plan/layer.h, plan/mem.h); their F, B, W ns per rank on
 * device d into ns[3] (plan/roof.h) and the parameters of one rank of its tp group into
 * *params.  0, or -1 after an error. */
static int count_stage(Check *c, int i, const LayerShape *sh, const PlanRoof *d, double *ns,
                       int64_t *params, int64_t *mem)
{
	Program *p = c->p;
	ProgStage *st = &p->stages[i];
	LayerCost sum = {0};
	const char *what;
	double v, most;
	char msg[160];
	int bad = 0;
	for (int j = 0; j < st->nlayers; j++) {
		PlanLayer pl = prog_plan_layer(&st->layers[j]);
		if (pl.kind == LAYER_HEAD && (pl.flags & LAYER_FLAG(LAYER_KEY_TIED)))
			pl.flags |= LAYER_FLAG(LAYER_KEY_COPY); // the lowering may give it a copy
		if ((what = plan_layer_uncountable(&pl, sh, p->dims[DIM_TP], &v, &most))) {
			diag_error(c->d, st->layers[j].loc, "this layer is too large to count: its %s",
			           plan_uncountable_text(msg, sizeof msg, what, v, most));
			bad = 1;
			continue;
		}
		LayerCost whole = plan_layer_figures(&pl, sh);
		plan_cost_add(&sum, &whole);
		RoofWork w[3];
		plan_layer_work(&pl, sh, p->dims[DIM_TP], w);
		*params = sat_add(*params, plan_layer_figures_tp(&pl, sh, p->dims[DIM_TP]).params);
		for (int k = 0; k < 3; k++)
			ns[k] += plan_roof_ns(d, &w[k]);
	}
	if (bad)
		return -1;
	if ((what = plan_cost_uncountable(&sum, &v, &most))) {
		diag_error(c->d, st->loc, "stage '%s' is too large to count: its layers' %s", st->name,
		           plan_uncountable_text(msg, sizeof msg, what, v, most));
		return -1;
	}
	if (*mem < PLAN_MEM_MAX && (*mem = sat_add(*mem, mem_share(p, i, &sum))) >= PLAN_MEM_MAX) {
		diag_error(c->d, st->loc, "the program's memory is too large to count: by stage '%s', "
		           "16 bytes a parameter and %d microbatches' saved bytes and tensors in "
		           "flight add up past 2^62 bytes (4.6 EB)", st->name, p->microbatches);
		return -1;
	}
	return 0;
}

/* Each stage's F, B, W: its own cost line, else `cost *`, else from its FLOPs (the
 * layer table's, at PROG_DEFAULT_FLOPS). */
LayerShape prog_layer_shape(const Program *p)
{
	return (LayerShape){p->rows, p->seq ? p->rows / p->seq : p->rows, p->seq ? p->seq : 1,
	                    p->vocab, p->vocab_real, p->prec, p->sp ? p->dims[DIM_TP] : 1};
}

PlanRoof prog_roof(const Program *p)
{
	PlanRoof d = plan_roof(p->peak_flops, p->hbm_bw);
	for (int k = 0; k < ROOF_COUNT; k++)
		d.eff[k] = p->eff[k];
	return d;
}

void check_costs(Check *c)
{
	Program *p = c->p;
	LayerShape shape = prog_layer_shape(p);
	if (p->device_preset && !p->peak_given)
		p->peak_flops = device_presets[p->device_preset - 1].flops[p->prec];
	PlanRoof dev = prog_roof(p);
	if (!c->widths_ok || !c->input_ok)
		return;
	int64_t mem = 0;
	for (int i = 0; i < p->nstages; i++) {
		ProgStage *st = &p->stages[i];
		double t[3] = {0, 0, 0}, worst = 0;
		int64_t params = 0;
		if (count_stage(c, i, &shape, &dev, t, &params, &mem))
			continue;
		int64_t shard = plan_optim_shard(&p->optim, params, p->dims[DIM_DP]);
		st->optim = llround(plan_roof_optim_ns(&dev, p->optim.kind, p->prec, shard));
		for (int k = 0; k < 3; k++) {
			double ns = t[k];
			if (c->cost_has[i][k]) {
				st->cost[k] = c->cost[i][k];
			} else if (c->all_has[k]) {
				st->cost[k] = c->all_cost[k];
			} else {
				worst = ns > worst ? ns : worst;
				st->cost[k] = ns < 1 ? 1 : ns > MAX_TIME_NS ? 0 : llround(ns);
			}
		}
		if (worst > MAX_TIME_NS)
			diag_error(c->d, st->loc,
				"stage '%s' would take %.0f s per microbatch at %g TFLOP/s; "
				"give its cost", st->name, worst / 1e9, p->peak_flops / 1e12);
	}
}
