/* The layer kinds: one row per kind, read by every tool.
 *
 * A row says how the language spells the layer, what it takes, and its tensors (their
 * shapes by name), from which its parameter count, saved bytes per microbatch and FLOPs
 * of F, B and W follow.
 * The checker (words, arguments, widths, FLOPs), the lowering (parameters, saved bytes)
 * and the runtime's model (the cross-check of the plan) read these rows and restate
 * nothing.  Adding a kind: its row in PLAN_LAYER_KINDS below (and its tensors function
 * in layer.c if it has tensors), its kernels in the runtime, its docs and test
 * (docs/architecture.md, "Adding a layer kind"). */
#ifndef PLAN_LAYER_H
#define PLAN_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "prec.h"
#include "roof.h"

struct TkAttn;

/* The layer table, one row a kind (QBE's ops.h): it expands into the LayerKind enum
 * here and into plan_layers[] (LayerInfo, below) in layer.c.  Columns: the kind, then
 * LayerInfo's fields in order: name, word, arg (LAYER_ARG_), example, loss, keys
 * (K(key) | ...), tokens, out (LAYER_OUT_), tp (LAYER_TP_), tensors (a function of
 * layer.c, or NULL), drops_x, io (IO(F, B, W): passes over an input-sized tensor). */
#define PLAN_LAYER_KINDS(X) \
	/* dense layer with bias, in -> out */ \
	X(LINEAR, "linear", "linear", WIDTH, "linear 512", 0, 0, 0, ARG, WHOLE, linear_tensors, 0, \
	  IO(0, 0, 0)) \
	/* elementwise max(x, 0) */ \
	X(RELU, "relu", "relu", NONE, "relu", 0, 0, 0, SAME, WHOLE, NULL, 0, IO(2, 3, 0)) \
	/* elementwise gelu (tanh approximation) */ \
	X(GELU, "gelu", "gelu", NONE, "gelu", 0, 0, 0, SAME, WHOLE, NULL, 0, IO(2, 3, 0)) \
	/* mean squared error loss against a synthetic target */ \
	X(MSE, "mse", "loss", NAME, "loss mse", 1, 0, 0, SAME, WHOLE, NULL, 0, IO(2, 3, 0)) \
	/* token embedding, tokens -> width (+ learned positions) */ \
	X(EMBED, "embed", "embed", WIDTH, "embed 768 positions", 0, K(POSITIONS), 1, ARG, VOCAB, \
	  embed_tensors, 0, IO(0, 0, 0)) \
	/* layer normalization with gain and bias */ \
	X(LAYERNORM, "layernorm", "layernorm", NONE, "layernorm", 0, 0, 0, SAME, WHOLE, \
	  layernorm_tensors, 0, IO(2, 3, 0)) \
	/* RMS normalization with gain */ \
	X(RMSNORM, "rmsnorm", "rmsnorm", NONE, "rmsnorm", 0, 0, 0, SAME, WHOLE, \
	  rmsnorm_tensors, 0, IO(2, 3, 0)) \
	/* causal multi-head self-attention with its projections (GQA, rotary) */ \
	X(ATTN, "attention", "attention", NONE, "attention heads=12", 0, \
	  K(HEADS) | K(KV_HEADS) | K(BIAS) | K(ROPE) | K(DROPOUT) | K(FLASH), 0, SAME, HEADS, \
	  attn_tensors, 0, IO(0, 0, 0)) \
	/* two-layer MLP with GELU, hidden width */ \
	X(MLP, "mlp", "mlp", HIDDEN, "mlp 3072 bias", 0, K(BIAS), 0, SAME, HIDDEN, \
	  mlp_tensors, 0, IO(0, 0, 0)) \
	/* gated SwiGLU MLP, hidden width, no biases */ \
	X(SWIGLU, "swiglu", "swiglu", HIDDEN, "swiglu 11008", 0, 0, 0, SAME, HIDDEN, \
	  swiglu_tensors, 0, IO(0, 0, 0)) \
	/* x + f(x), f the next `span` layers */ \
	X(RESIDUAL, "residual", "residual", BODY, "residual { rmsnorm; ... }", 0, 0, 0, SAME, \
	  WHOLE, NULL, 0, IO(3, 3, 0)) \
	/* vocabulary head, width -> vocab, no bias (tied or not) */ \
	X(HEAD, "head", "head", NONE, "head tied", 0, K(TIED), 1, VOCAB, VOCAB, \
	  head_tensors, 0, IO(0, 0, 0)) \
	/* cross-entropy on next-token targets */ \
	X(XENT, "xent", "loss", NAME, "loss xent", 1, 0, 1, SAME, VOCAB, \
	  xent_tensors, 0, IO(0, 0, 0)) \
	/* gated GeGLU MLP, hidden width, no biases (swiglu's tensors) */ \
	X(GEGLU, "geglu", "geglu", HIDDEN, "geglu 2048", 0, 0, 0, SAME, HIDDEN, \
	  swiglu_tensors, 0, IO(0, 0, 0)) \
	/* zeroes each element with probability P, scales the rest by 1/(1-P) */ \
	X(DROPOUT, "dropout", "dropout", PROB, "dropout 0.1", 0, 0, 0, SAME, WHOLE, \
	  dropout_tensors, 1, IO(0, 0, 0)) \
	/* elementwise relu(x)^2 (Primer's squared ReLU) */ \
	X(SQUARED_RELU, "squared_relu", "squared_relu", NONE, "squared_relu", 0, 0, 0, SAME, \
	  WHOLE, NULL, 0, IO(2, 3, 0))

typedef enum {
#define PLAN_LAYER_ENUM(kind, ...) LAYER_##kind,
	PLAN_LAYER_KINDS(PLAN_LAYER_ENUM)
#undef PLAN_LAYER_ENUM
	LAYER_COUNT
} LayerKind;

/* What follows a layer's word in a .pipe stage (besides its keys). */
typedef enum {
	LAYER_ARG_NONE,   // nothing: `relu;`
	LAYER_ARG_WIDTH,  // one whole number, the output width: `linear 512;`
	LAYER_ARG_NAME,   // one name, the row's name: `loss mse;`
	LAYER_ARG_HIDDEN, // one whole number, the hidden width; output = input: `mlp 3072;`
	LAYER_ARG_BODY,   // a sub-block in braces: `residual { ... }`
	LAYER_ARG_PROB,   // one real in [0, 1), the probability PlanLayer.drop: `dropout 0.1;`
	LAYER_ARG_COUNT
} LayerArg;

/* Keys a layer may take after its argument: numbers (`heads=12`), probabilities
 * (`dropout=0.1`) or flags (`bias`). */
typedef enum {
	LAYER_KEY_HEADS,     // attention: query heads (divides the width)
	LAYER_KEY_KV_HEADS,  // attention: key/value heads (divides heads); default heads
	LAYER_KEY_BIAS,      // flag: projections have biases
	LAYER_KEY_ROPE,      // flag: rotary position embedding on q and k
	LAYER_KEY_TIED,      // flag: the head reuses the embedding's table
	LAYER_KEY_POSITIONS, // flag: the embedding adds learned positions
	LAYER_KEY_COPY,      // flag, plan only: a tied head on another pipeline rank than its
	                     // embedding keeps (and counts) its own copy of the table
	LAYER_KEY_DROPOUT,   // attention: the probability it drops each attention probability
	                     // (Megatron's attention dropout), PlanLayer.drop; default 0
	LAYER_KEY_FLASH,     // flag: flash attention, F keeps the rows' log-sum-exp instead of
	                     // the S x S probabilities, which B rebuilds (one more q k^T)
	LAYER_KEY_COUNT
} LayerKey;

/* What follows a key's `=`. */
enum {
	LAYER_VAL_NONE,  // a flag: nothing
	LAYER_VAL_WHOLE, // a whole number: heads=12
	LAYER_VAL_PROB,  // a probability, a real in [0, 1): dropout=0.1
};

typedef struct {
	const char *name; // as written and in the plan file
	int number;       // LAYER_VAL_*: 0 for a flag
} LayerKeyInfo;

extern const LayerKeyInfo plan_layer_keys[LAYER_KEY_COUNT];

/* Flags of a layer, bit (1 << key) for the flag keys. */
#define LAYER_FLAG(key) (1u << (key))

/* One layer as the plan holds it. */
typedef struct {
	LayerKind kind;
	int32_t in, out;         // widths (an embedding's input is 1: a token id per row)
	int32_t heads, kv_heads; // attention; 0 otherwise
	int32_t hidden;          // mlp, swiglu: the hidden width; 0 otherwise
	int32_t span;            // residual: the next span layers are its sub-block
	uint32_t flags;          // LAYER_FLAG(LAYER_KEY_*) of the flag keys given
	double drop;             // dropout: the probability P in [0, 1) that an element is
	                         // dropped (the rest scaled by 1/(1-P)): of a dropout layer's
	                         // input, of an attention's probabilities (`dropout=P`); 0: none
} PlanLayer;

/* Bodies (residual) open at once in a stage, at most: a body's span ends inside the
 * span of each body it is in, and no layer is inside more than PLAN_NEST_MAX of them
 * (piperun's walk holds that many open; the checker and the plan reader refuse more). */
#define PLAN_NEST_MAX 16

/* The microbatch a layer works on: rows = batch * seq rows (tokens) of features;
 * a matrix input is batch = rows, seq = 1, vocab = 0.  vocab is what tables and logits
 * span, padded or not; real, when not 0, the vocabulary before padding (token ids and
 * the loss's columns are below it; plan_vocab_real). */
typedef struct {
	int64_t rows, batch, seq, vocab, real;
	int prec; // PlanPrec (plan/prec.h): what its tensors are stored in; 0: f32
	int sp;   // sequence parallelism (`mesh ... sp`): the rows of the replicated regions
	          // are split over the tp group, sp = tp; 0 or 1: not split
} LayerShape;

/* The vocabulary token ids are below and the loss spans: sh->vocab less any padding. */
static inline int64_t plan_vocab_real(const LayerShape *sh)
{
	return sh->real ? sh->real : sh->vocab;
}

/* ---- a layer's tensors: the one statement of its shapes ----
 * Each row's `tensors` function states the tensors of one layer on one rank of a tp
 * group, by name (the slot enums below): its parameters (with their initial values and
 * how tp cuts them), what F saves for B and W, what B holds for W, B's scratch, and the
 * all-reduces and non-weight GEMMs around it.  Its parameter count, saved and held
 * bytes and FLOPs (plan_layer_figures) and the runtime's buffers on every device
 * (runtime/) all read it: llm.c's fill_in_parameter_sizes. */

enum { LAYER_MAX_TENSORS = 8 }; // per list: parameters, saved, held

typedef enum {
	LAYER_INIT_ZERO,    // 0 (biases)
	LAYER_INIT_ONE,     // 1 (norm gains)
	LAYER_INIT_UNIFORM, // u[-1, 1) / sqrt(rows): a weight matrix of `rows` inputs
	LAYER_INIT_COUNT
} LayerInit;

typedef struct {
	int64_t rows, cols;
	LayerInit init;  // parameters: their initial values (docs/semantics.md "Model")
	int64_t fan;     // LAYER_INIT_UNIFORM: the whole tensor's rows its scale counts when
	                 // not all of them (a padded vocabulary table: the real vocabulary, so
	                 // the real rows start as they would unpadded); 0: rows
	int gemm;        // parameters: a GEMM weight, 2 FLOPs per row and element in each of
	                 // F, B and W (docs/layers.md)
	uint8_t mask;    // saved: one byte an element (a dropout mask of 0s and 1s, as PyTorch
	                 // keeps a bool mask); else the precision's activation bytes
	uint8_t wide;    // saved: four bytes an element at every precision (norm statistics,
	                 // log-sum-exps and token ids, f32 or int32 under bf16 too)
	uint8_t rebuilt; // saved: what selective recomputation drops after F and rebuilds
	                 // before B (attention's S x S tensors)
	uint8_t scratch; // saved slot, never kept: F computes it into scratch and frees it,
	                 // B rebuilds it into scratch for its input gradient and frees it
	                 // (flash attention's S x S tensors); counted in no saved bytes
} LayerTensor;

/* How a parameter of a layer split over a tp group (docs/semantics.md "Tensor
 * parallelism") is cut: along its rows or columns, which are nseg segments of the whole
 * tensor laid end to end (a fused qkv: q, k and v), each cut in tp equal pieces; rank t
 * of the group holds piece t of every segment, in segment order. */
typedef enum {
	LAYER_SPLIT_NONE, // whole on every rank
	LAYER_SPLIT_ROWS, // rows cut (a row-parallel weight, a vocabulary table)
	LAYER_SPLIT_COLS, // columns cut (a column-parallel weight and its bias)
	LAYER_SPLIT_COUNT
} LayerSplitAxis;

enum { LAYER_SPLIT_MAX_SEGS = 3 };

typedef struct {
	uint8_t axis;                      // LayerSplitAxis
	uint8_t nseg;
	int64_t seg[LAYER_SPLIT_MAX_SEGS]; // whole length of each segment along the axis
} LayerSplit;

/* The tensors of one layer for a microbatch, besides its input x (kept from F to B, or
 * to W for a kind with parameters) and, for a kind with parameters, its output gradient
 * dy (kept from B to W). */
typedef struct {
	int nparams;                          // parameters, laid out in this order in
	LayerTensor param[LAYER_MAX_TENSORS]; // the stage's flat buffer
	int borrowed;                         // the first `borrowed` of them are another
	                                      // layer's (a tied head's table): not laid
	                                      // out here, nor counted as the layer's
	int copy;                             // 1: param[0] is a tied head's own copy of
	                                      // the embedding's table on another rank
	int nsaved;                           // written by F, read by B and W; kept as
	LayerTensor saved[LAYER_MAX_TENSORS]; // long as x
	int nheld;                            // written by B, read by W
	LayerTensor held[LAYER_MAX_TENSORS];
	LayerTensor work;                     // B's scratch (rows 0: none)
	LayerSplit split[LAYER_MAX_TENSORS];  // with tp > 1: how each parameter is cut
	uint8_t x_ids;                        // 1: x is token ids, four bytes each at every
	                                      // precision (an embedding's)
	int64_t x_rows;                       // rows of x it keeps: the microbatch's, or under
	                                      // sequence parallelism the rank's share of them
	                                      // (plan_layer_tensors fills it)
	uint8_t x_whole;                      // 1: x keeps every row under sequence
	                                      // parallelism (the loss's vocabulary-split
	                                      // logits)
	int64_t in, out;                      // the rank's x and y widths: the layer's, but a
	                                      // vocabulary slice (head out, xent in) at tp > 1
	int64_t flops[3];                     // F, B, W FLOPs besides the GEMM weights'
	                                      // (attention's scores and P·V)
	int64_t tp_floats[2];                 // with tp > 1: floats per row all-reduced after
	                                      // the layer in F and after its B (0: none)
	uint8_t tp_wide;                      // 1: those floats are f32 at every precision
	                                      // (xent's maxima and sums)
	int64_t moved[3];                     // F, B, W bytes its own kernels read and write
	                                      // besides the GEMM weights' operands, the io
	                                      // passes and the gains' and biases' reductions
	uint8_t softmax;                      // 1: that work and flops[] are ROOF_ATTENTION's
	                                      // (attention, the loss's softmax); else
	                                      // ROOF_ELEMENTWISE's
} LayerTensors;

/* Named slots: param[], saved[] and held[] indices of each kind with tensors. */
enum { LINEAR_W, LINEAR_B };                 // params
enum { EMBED_WTE, EMBED_WPE };               // params (wpe with `positions`)
enum { LAYERNORM_GAIN, LAYERNORM_BIAS };     // params
enum { LAYERNORM_MEAN, LAYERNORM_RSTD };     // saved
enum { RMSNORM_GAIN };                       // params
enum { RMSNORM_RSTD };                       // saved
enum { ATTN_WQKV, ATTN_BQKV, ATTN_WO, ATTN_BO }; // params, the biases with `bias`
                                             // (absent, the others move up)
enum { ATTN_QKV, ATTN_PROBS, ATTN_ATT,       // saved: projections, softmax, heads' output,
       ATTN_MASK, ATTN_DROP };               // with dropout=P: P's mask, P dropped (times v);
                                             // with flash P, mask and P dropped are scratch
                                             // and the rows' log-sum-exp is the last saved
                                             // (nsaved - 1: plan_attn_lse_slot)
enum { ATTN_DQKV };                          // held
enum { MLP_W1, MLP_B1, MLP_W2, MLP_B2 };     // params, the biases with `bias`
enum { MLP_H, MLP_A };                       // saved: pre-activation, gelu(h)
enum { MLP_DH };                             // held
enum { SWIGLU_WG, SWIGLU_WU, SWIGLU_WD };    // params: gate, up, down (geglu too)
enum { SWIGLU_G, SWIGLU_U, SWIGLU_A };       // saved: x wg, x wu, silu(g) u (gelu)
enum { SWIGLU_DG, SWIGLU_DU };               // held
enum { HEAD_WV };                            // params (the embedding's when tied)
enum { XENT_LSE, XENT_TARGETS };             // saved
enum { DROPOUT_MASK };                       // saved (P > 0): 1 keeps, 0 drops

/* Fills t (zeroed by the caller) for layer ly on a microbatch of shape sh, on one rank of
 * a tp group of size tp (1: the whole layer): the rank's shard of every split tensor. */
typedef void (*LayerTensorsFn)(const PlanLayer *ly, const LayerShape *sh, int tp,
                               LayerTensors *t);

/* A layer's figures for one microbatch. */
typedef struct {
	int64_t params;                     // f32 parameters (weights and biases)
	int64_t save_fb, save_fw, save_bw;  // saved bytes, as PlanStage's fields of those names
	double flops[3];                    // F, B (input gradient), W (weight gradient)
	/* With tp > 1: bytes of the tp all-reduce after the layer, in the forward (Dir DIR_ACT)
	 * and in the backward (DIR_GRAD, after its input gradient); 0: none. */
	int64_t tp_bytes[2];
} LayerCost;

/* How a row's output width follows from its input. */
typedef enum {
	LAYER_OUT_SAME,  // out = in
	LAYER_OUT_ARG,   // out = the width argument
	LAYER_OUT_VOCAB, // out = the vocabulary size
} LayerOut;

/* What tensor parallelism splits in a layer (docs/semantics.md, "Tensor parallelism"). */
typedef enum {
	LAYER_TP_WHOLE,  // replicated: every rank of the tp group computes all of it
	LAYER_TP_HEADS,  // attention by heads: qkv column-parallel, output projection row-parallel
	LAYER_TP_HIDDEN, // mlp, swiglu by hidden width: column-parallel, then row-parallel
	LAYER_TP_VOCAB,  // embedding, head, cross-entropy by vocabulary
	LAYER_TP_COUNT
} LayerTp;

typedef struct {
	const char *name;    // the plan file's word and the name in messages ("mse")
	const char *word;    // the language's word ("loss"); rows may share one (LAYER_ARG_NAME)
	LayerArg arg;        // what follows the word
	const char *example; // a use, for "needs" messages ("linear 512")
	int loss;            // 1: must be the last layer of the last stage
	uint32_t keys;       // LAYER_FLAG(k) for each key k the layer takes
	int tokens;          // 1: needs a token input (`input tokens BxS vocab=V;`)
	LayerOut outw;       // its output width
	LayerTp tp;          // what a tp group splits
	/* Its tensors on one rank of a tp group of size tp; NULL: none but its input (an
	 * elementwise kind keeps x from F to B; a body kind keeps nothing). */
	LayerTensorsFn tensors;
	/* 1: F frees its input: B needs only the saved tensors (dropout: its mask), so x is
	 * neither kept nor counted.  Such a layer cannot begin a stage or a body, whose
	 * input that first layer keeps (the checker and the runtime's model refuse it). */
	int drops_x;
	/* F, B, W passes of its elementwise kernels over an input-sized tensor (rows x in at
	 * the activation bytes), each a read or a write: relu reads x and writes y in F (2),
	 * reads x and dy and writes dx in B (3).  docs/semantics.md "Costs". */
	uint8_t io[3];
} LayerInfo;

extern const LayerInfo plan_layers[LAYER_COUNT];

/* Row of kind k; k must be valid. */
const LayerInfo *plan_layer(LayerKind k);
/* The kind whose name is the n bytes at s, or LAYER_COUNT. */
LayerKind plan_layer_find(const char *s, size_t n);
/* Output width of a kind given its input width and its width argument (the vocabulary
 * for LAYER_OUT_VOCAB rows). */
int plan_layer_out(LayerKind k, int in, int width_arg);
/* Layer ly's tensors on one rank of a tp group of size tp: its row's, with in and out
 * filled (the layer's widths when the row leaves them 0). */
void plan_layer_tensors(const PlanLayer *ly, const LayerShape *sh, int tp, LayerTensors *t);
/* Figures of one layer on a microbatch of shape sh. */
LayerCost plan_layer_figures(const PlanLayer *l, const LayerShape *sh);
/* The attention shape (plan/tfcount.h) of an attention layer on microbatch sh. */
struct TkAttn plan_layer_attn(const PlanLayer *l, const LayerShape *sh);
/* Bytes of layer l's saved tensors that selective recomputation drops after F and
 * rebuilds before B (LayerTensor.rebuilt: attention's probabilities, and with dropout=P
 * their mask and dropped copy) on one rank of a tp group of size tp (its H / tp heads';
 * the whole layer's at tp 1); 0 for a kind without. */
int64_t plan_layer_rebuilt_bytes(const PlanLayer *l, const LayerShape *sh, int tp);
/* FLOPs of that rebuild on one rank of a tp group of size tp: the score product q k^T
 * of its heads, 2 x sequences x H / tp x S x S x (width / H) (the softmax and dropout
 * are elementwise: 0); 0 for a layer that rebuilds nothing (flash included, whose own
 * B pays its rebuild). */
double plan_layer_rebuild_flops(const PlanLayer *l, const LayerShape *sh, int tp);
/* With flash, attention's saved slot of the rows' log-sum-exp (B*H*S floats, per tp rank
 * its heads'): after its S x S tensors; -1 without flash. */
int plan_attn_lse_slot(const PlanLayer *l);
/* The rows a replicated region's tensor (and a tensor between stages) keeps on one rank
 * of a tp group of tp: all of sh's, or under sequence parallelism (sh->sp) its share. */
int64_t plan_seq_rows(const LayerShape *sh, int tp);
/* The rows layer l's kernels run over on one rank of a tp group of tp: a replicated
 * kind's x_rows (the rank's share under sequence parallelism), a split kind's all the
 * microbatch's (its input gathered, its output reduce-scattered after it). */
int64_t plan_layer_rows(const PlanLayer *l, const LayerShape *sh, int tp);
/* Bytes of tensor t at precision prec (PlanPrec: its activation bytes an element, four
 * for a wide tensor, one for a mask), saturating. */
int64_t plan_tensor_bytes(const LayerTensor *t, int prec);
/* The F, B and W work of layer l on one rank of a tp group of size tp, per roofline
 * class (plan/roof.h; the bytes of docs/semantics.md "Costs"), into w[3]. */
void plan_layer_work(const PlanLayer *l, const LayerShape *sh, int tp, RoofWork w[3]);
/* Figures of one layer on one rank of a tp group of size tp (the whole layer at tp 1). */
LayerCost plan_layer_figures_tp(const PlanLayer *l, const LayerShape *sh, int tp);
/* NULL when tp splits layer l on shape sh evenly; else what tp must divide ("the number
 * of heads (12)"), for the message "tp=5 does not divide ...". */
const char *plan_layer_tp_check(const PlanLayer *l, const LayerShape *sh, int tp, char *buf,
                                size_t n);
/* The largest figure of a layer or stage the tools count: parameters and bytes per
 * microbatch below 2^60 (about 1.15e18), FLOPs per microbatch below 2^63 (9.2e18; no op
 * that long fits the 1000 s an op may take on any device).  Figures past it saturate
 * (plan/tfcount.h), and bytes past 2^60 could not be summed over a rank's stages and a
 * step's microbatches in 64 bits: the checker refuses such a layer or stage at its
 * line, the plan reader at its `layer` line. */
#define PLAN_COUNT_MAX ((int64_t)1 << 60)
/* NULL when every figure of c is below its limit, else the first that is not
 * ("parameters", "saved bytes per microbatch", "FLOPs per microbatch", ...), its value
 * (at least that: a saturated figure is INT64_MAX) in *value and the limit in *limit. */
const char *plan_cost_uncountable(const LayerCost *c, double *value, double *limit);
/* "parameters are 4.61e+18, past 1.15e+18, the most the tools count" into buf, for
 * what plan_cost_uncountable gave (a saturated value is "more than" it). */
char *plan_uncountable_text(char *buf, size_t n, const char *what, double v, double most);
/* The same for layer l on shape sh, whole and on one rank of a tp group of size tp. */
const char *plan_layer_uncountable(const PlanLayer *l, const LayerShape *sh, int tp,
                                   double *value, double *limit);
/* sum += c, figure by figure, saturating (a stage's figures are its layers' sums). */
void plan_cost_add(LayerCost *sum, const LayerCost *c);
/* Figures of a layer without keys (linear, relu, gelu, mse) for rows rows. */
LayerCost plan_layer_cost(LayerKind k, int64_t rows, int in, int out);
/* The kind spelled word (and, for LAYER_ARG_NAME rows, name), or LAYER_COUNT; with name
 * NULL the first row spelled word. */
LayerKind plan_layer_parse(const char *word, const char *name);
/* Into out (LAYER_COUNT entries), in table order: with word NULL every distinct word
 * ("linear", "relu", "gelu", "loss", ...), else the names of the rows spelled word
 * ("mse", "xent").  Returns the count. */
int plan_layer_words(const char *word, const char **out);
/* The key called the n bytes at s, or LAYER_KEY_COUNT. */
LayerKey plan_layer_key_find(const char *s, size_t n);

#endif
