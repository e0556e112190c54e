/* The checker's mesh: the `mesh` statement (its dimensions in order, their sizes, the
 * world's size, the `tp_spans_nodes` opt-in), the nodes and links ranks talk over
 * (`devices`, `link`: plan/link.h times them) and, once every stage is read, tensor
 * parallelism against the layers and the nodes.  Part of check.c's single pass over the
 * statements (see its opening comment); how tp splits a layer is the layer table's
 * (plan_layer_tp_check, plan/layer.c). */
#include <stdio.h>
#include <string.h>

#include "check_int.h"
#include "../plan/link.h"

/* `mesh pp=P dp=D tp=T [tp_spans_nodes] [sp];`, dimensions outermost first. */
void check_mesh(Check *c, AstStmt *s)
{
	Program *p = c->p;
	static const char *const dims[DIM_COUNT] = {"pp", "dp", "tp"};
	uint8_t seen[DIM_COUNT] = {0};
	int ok = 1, n = 0;
	if (s->nkvs == 0) {
		diag_error(c->d, s->span, "'mesh' needs at least one dimension, e.g. mesh pp=4;");
		ok = 0;
	}
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		if (!strcmp(kv->key.s, "tp_spans_nodes") || !strcmp(kv->key.s, "sp")) {
			if (kv->has_val)
				diag_error(c->d, kv->val.loc, "'%s' takes no value", kv->key.s);
			if (kv->key.s[0] == 's') { // sequence parallelism (check_sp)
				p->sp = 1;
				p->sp_loc = kv->key.loc;
			} else { // the opt-in for tp > devices per node
				p->tp_spans_nodes = 1;
			}
			continue;
		}
		int d = find_word(kv->key.s, dims, DIM_COUNT);
		if (d < 0) {
			unknown_word(c, &kv->key, "mesh dimension", dims, DIM_COUNT);
			ok = 0;
			continue;
		}
		if (repeated_key(c, s->kvs, i, "mesh dimension")) {
			ok = 0;
			continue;
		}
		seen[d] = 1;
		p->dim_order[n++] = (uint8_t)d;
		char what[32];
		snprintf(what, sizeof what, "mesh dimension '%s'", dims[d]);
		if (!kv->has_val) {
			diag_error(c->d, kv->loc, "%s needs a size, e.g. %s=2", what, dims[d]);
			ok = 0;
		} else if (!whole(c, &kv->val, what, 1, MAX_RANKS, &p->dims[d])) {
			ok = 0;
		} else if (d == DIM_TP) {
			p->tp_loc = kv->loc;
		}
	}
	for (int d = 0; d < DIM_COUNT; d++)
		if (!seen[d])
			p->dim_order[n++] = (uint8_t)d;
	if (ok) {
		int64_t world = 1;
		for (int d = 0; d < DIM_COUNT; d++)
			world *= p->dims[d];
		if (world > MAX_RANKS) {
			diag_error(c->d, s->span, "the mesh has %lld ranks, more than %d",
				(long long)world, MAX_RANKS);
			ok = 0;
		}
	}
	p->mesh_loc = s->span;
	c->mesh_ok = ok;
}

/* Devices a node holds: `devices per_node=N`, or with a list the number of distinct
 * devices it names (as warn_shared_devices reads it). */
int prog_node_size(const Program *p)
{
	if (p->device_per_node > 0)
		return p->device_per_node;
	int n = 0;
	for (int i = 0; i < p->ndevices; i++) {
		int seen = 0;
		for (int j = 0; j < i && !seen; j++)
			seen = p->devices[j] == p->devices[i];
		n += !seen;
	}
	return n > 0 ? n : 1;
}

/* pad=M on the token input: the vocabulary the tables, the head and the loss span is the
 * least multiple of M x tp at least V (Megatron's _vocab_size_with_padding, whose M is
 * make-vocab-size-divisible-by, 128 by default): GPT-2's 50257 is 50304 at tp=1, 50432
 * at tp=2 and 51200 at tp=8.  The padded rows are parameters like any other; token ids
 * stay below V and the loss leaves the padded logits out. */
void check_vocab_pad(Check *c)
{
	Program *p = c->p;
	int tp = p->dims[DIM_TP] > 0 ? p->dims[DIM_TP] : 1;
	if (!c->input_ok || !p->seq || !p->vocab_pad)
		return;
	int64_t m = (int64_t)p->vocab_pad * tp, v = (p->vocab + m - 1) / m * m;
	if (v > MAX_SIZE) {
		diag_error(c->d, p->pad_loc, "pad=%d at tp=%d pads the vocabulary (%d) to %lld, more "
		           "than %d", p->vocab_pad, tp, p->vocab, (long long)v, MAX_SIZE);
		c->input_ok = 0;
		return;
	}
	p->vocab_real = v != p->vocab ? p->vocab : 0;
	p->vocab = (int)v;
}

/* Tensor parallelism: every split layer divides evenly (heads, key/value heads, hidden
 * width, vocabulary), and the tp groups fit a node unless the mesh opts out with
 * `tp_spans_nodes` (a group that spans nodes anyway, by the mesh order, is a warning). */
/* Sequence parallelism splits each sequence (a matrix input: its rows) over the tp
 * group, as Megatron's --sequence-parallel does. */
static void check_sp(Check *c)
{
	Program *p = c->p;
	int tp = p->dims[DIM_TP], rows = p->seq ? p->seq : p->rows;
	if (!p->sp || !c->mesh_ok || !c->input_ok)
		return;
	if (tp <= 1)
		diag_error(c->d, p->sp_loc, "sequence parallelism (sp) splits along the tp group: "
		           "it needs tp > 1");
	else if (rows % tp)
		diag_error(c->d, p->sp_loc, "sequence parallelism splits %s of %d %s over tp=%d: "
		           "tp must divide it", p->seq ? "each sequence" : "the input", rows,
		           p->seq ? "tokens" : "rows", tp);
}

void check_tp(Check *c)
{
	Program *p = c->p;
	int tp = p->dims[DIM_TP];
	check_sp(c);
	if (tp <= 1 || !c->mesh_ok || !c->widths_ok || !c->input_ok)
		return;
	LayerShape shape = {p->rows, p->seq ? p->rows / p->seq : p->rows, p->seq ? p->seq : 1,
	                    p->vocab, p->vocab_real, p->prec, p->sp ? tp : 1};
	int bad = 0, vocab = 0;
	for (int i = 0; i < p->nstages; i++)
		for (int j = 0; j < p->stages[i].nlayers; j++) {
			const ProgLayer *ly = &p->stages[i].layers[j];
			PlanLayer pl = prog_plan_layer(ly);
			char what[96];
			if (!plan_layer_tp_check(&pl, &shape, tp, what, sizeof what))
				continue;
			diag_error(c->d, ly->loc, "tp=%d does not divide %s of this %s layer", tp, what,
				plan_layers[ly->kind].name);
			if (!bad++)
				diag_note(c->d, p->tp_loc, "tp is set here");
			if (plan_layers[ly->kind].tp == LAYER_TP_VOCAB && !vocab++)
				diag_note(c->d, p->input_loc, "pad=M on the token input pads the vocabulary "
				          "to a multiple of M x tp, as Megatron does (e.g. pad=128)");
		}
	int node = prog_node_size(p);
	if (tp > node && !p->tp_spans_nodes) {
		diag_error(c->d, p->tp_loc,
			"tp=%d is larger than a node (%d devices): its all-reduces would cross the "
			"network inside every layer; write 'mesh ... tp_spans_nodes;' to allow it",
			tp, node);
		return;
	}
	if (p->tp_spans_nodes)
		return;
	int stride = 1, world = p->dims[DIM_PP] * p->dims[DIM_DP] * tp;
	for (int i = DIM_COUNT - 1; i >= 0 && p->dim_order[i] != DIM_TP; i--)
		stride *= p->dims[p->dim_order[i]];
	for (int r = 0; r < world; r++) {
		int t = r / stride % tp, first = r - t * stride, last = first + (tp - 1) * stride;
		if (t == 0 && first / node != last / node) {
			diag_warning(c->d, p->tp_loc,
				"the tp group of rank %d (%d ranks, %d apart) spans nodes %d to %d (%d "
				"devices each): its all-reduces cross the network; write tp last in the "
				"mesh to keep each group inside a node", first, tp, stride, first / node,
				last / node, node);
			return;
		}
	}
}

/* `link collective=NAME`: the algorithm of collectives spanning nodes (plan/link.h). */
static void link_collective(Check *c, const AstKv *kv)
{
	char list[64];
	int a = kv->word.s ? plan_coll_parse(kv->word.s) : -1;
	if (a >= 0) {
		c->p->coll_algo = (uint8_t)a;
		return;
	}
	const char *s = kv->word.s ? diag_suggest(kv->word.s, plan_coll_names, PLAN_COLL_COUNT) : NULL;
	if (s)
		diag_error(c->d, kv->val.loc, "unknown collective algorithm '%s'; did you mean '%s'?",
		           kv->word.s, s);
	else
		diag_error(c->d, kv->val.loc, "'collective' must be one of %s",
		           plan_coll_list(list, sizeof list));
}

/* The keys of `link`: a row each (ideal is the one without a value). */
enum { LINK_LATENCY, LINK_BANDWIDTH, LINK_IDEAL, LINK_NODE_LATENCY, LINK_NODE_BANDWIDTH,
       LINK_COLLECTIVE, LINK_COUNT };
static const struct {
	const char *key, *eg;
	uint8_t node; // states how ranks sit on nodes (Program.nodes_stated)
} link_keys[LINK_COUNT] = {
	[LINK_LATENCY] = {"latency", "latency=5us", 0},
	[LINK_BANDWIDTH] = {"bandwidth", "bandwidth=50GB/s", 0},
	[LINK_IDEAL] = {"ideal", "ideal", 0},
	[LINK_NODE_LATENCY] = {"node_latency", "node_latency=1us", 1},
	[LINK_NODE_BANDWIDTH] = {"node_bandwidth", "node_bandwidth=300GB/s", 1},
	[LINK_COLLECTIVE] = {"collective", "collective=hierarchical", 1},
};

static void link_value(Check *c, int k, const AstKv *kv)
{
	Program *p = c->p;
	p->nodes_stated |= link_keys[k].node;
	if (k == LINK_LATENCY)
		time_ns(c, &kv->val, "latency", &p->latency_ns);
	else if (k == LINK_BANDWIDTH)
		bandwidth(c, &kv->val, &p->bandwidth);
	else if (k == LINK_NODE_LATENCY)
		time_ns(c, &kv->val, "node_latency", &p->node_latency_ns);
	else if (k == LINK_NODE_BANDWIDTH)
		bandwidth(c, &kv->val, &p->node_bandwidth);
	else
		link_collective(c, kv);
}

void check_link(Check *c, AstStmt *s)
{
	Program *p = c->p;
	const char *keys[LINK_COUNT];
	for (int k = 0; k < LINK_COUNT; k++)
		keys[k] = link_keys[k].key;
	int ideal = -1, other = -1;
	p->link_loc = s->span;
	if (s->nkvs == 0)
		diag_error(c->d, s->span, "'link' needs latency=, bandwidth= or ideal");
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		int k = find_word(kv->key.s, keys, LINK_COUNT);
		if (k < 0) {
			unknown_word(c, &kv->key, "link property", keys, LINK_COUNT);
			continue;
		}
		if (repeated_key(c, s->kvs, i, "link property"))
			continue;
		if (k == LINK_IDEAL) {
			ideal = i;
			if (kv->has_val)
				diag_error(c->d, kv->val.loc, "'ideal' takes no value");
			continue;
		}
		if (other < 0 && k != LINK_COLLECTIVE)
			other = i;
		if (!kv->has_val)
			diag_error(c->d, kv->loc, "'%s' needs a value, e.g. %s", keys[k], link_keys[k].eg);
		else
			link_value(c, k, kv);
	}
	if (ideal >= 0 && other >= 0) {
		diag_error(c->d, s->kvs[ideal].key.loc,
			"'ideal' cannot be combined with latency or bandwidth");
	} else if (ideal >= 0) {
		p->link_ideal = 1;
		p->latency_ns = 0;
	}
}

void check_devices(Check *c, AstStmt *s)
{
	Program *p = c->p;
	p->devices_loc = s->span;
	p->nodes_stated = 1;
	if (s->has_list) {
		p->device_per_node = 0;
		p->ndevices = s->nnums;
		p->devices = arena_alloc(c->a, (size_t)s->nnums * sizeof *p->devices);
		for (int i = 0; i < s->nnums; i++)
			whole(c, &s->nums[i], "device index", 0, MAX_DEVICE, &p->devices[i]);
		c->devices = s;
		return;
	}
	static const char *const keys[] = {"per_node"};
	if (s->nkvs == 0)
		diag_error(c->d, s->span, "'devices' needs per_node=N or a list [d0, d1, ...]");
	for (int i = 0; i < s->nkvs; i++) {
		AstKv *kv = &s->kvs[i];
		if (strcmp(kv->key.s, "per_node") != 0)
			unknown_word(c, &kv->key, "devices property", keys, 1);
		else if (repeated_key(c, s->kvs, i, "devices property"))
			;
		else if (!kv->has_val)
			diag_error(c->d, kv->loc, "'per_node' needs a value, e.g. per_node=8");
		else
			whole(c, &kv->val, "'per_node'", 1, MAX_DEVICE, &p->device_per_node);
	}
}
