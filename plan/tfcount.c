/* Transformer counts (see tfcount.h): every figure is a closed formula of the shapes, in
 * elements or FLOPs (a multiply-add counts two); docs/layers.md derives each one. */
#include "tfcount.h"

#include <stddef.h>

const char *tk_attn_check(const TkAttn *a)
{
	if (a->B <= 0 || a->S <= 0 || a->d <= 0 || a->H <= 0 || a->Hkv <= 0)
		return "sizes must be positive";
	if (a->d % a->H)
		return "the number of heads must divide the width";
	if (a->H % a->Hkv)
		return "the number of key/value heads must divide the number of heads";
	if (a->rope && (a->d / a->H) % 2)
		return "rotary needs an even head width";
	if (a->rope && !(a->rope_theta > 0))
		return "rotary base must be positive";
	return NULL;
}

int64_t tk_attn_nqkv(const TkAttn *a)
{
	return sat_mul(sat_add(a->H, sat_mul(2, a->Hkv)), a->d / a->H);
}

int64_t tk_attn_p_elems(const TkAttn *a)
{
	return sat_mul(sat_mul(sat_mul(a->B, a->H), a->S), a->S);
}

int64_t tk_attn_workspace(const TkAttn *a)
{
	return sat_add(sat_mul(sat_mul(a->B, a->S), a->d), sat_mul(a->S, a->S));
}

/* ---- parameter counts ---- */

int64_t tk_params_linear(int64_t k, int64_t n, int bias)
{
	return sat_add(sat_mul(k, n), bias ? n : 0);
}

int64_t tk_params_embed(int64_t V, int64_t d, int64_t S, int learned_pos)
{
	return tk_params_embed_tp(V, d, S, learned_pos, 1);
}

int64_t tk_params_embed_tp(int64_t V, int64_t d, int64_t S, int learned_pos, int64_t tp)
{
	return sat_add(sat_mul(V / tp, d), learned_pos ? sat_mul(S, d) : 0);
}

int64_t tk_params_layernorm(int64_t d)
{
	return sat_mul(2, d);
}

int64_t tk_params_rmsnorm(int64_t d)
{
	return d;
}

int64_t tk_params_attn(const TkAttn *a, int bias)
{
	return tk_params_attn_tp(a, bias, 1);
}

/* wqkv and bqkv by heads, wo by its input rows; bo whole. */
int64_t tk_params_attn_tp(const TkAttn *a, int bias, int64_t tp)
{
	int64_t nq = sat_div(tk_attn_nqkv(a), tp);
	return sat_add(sat_add(tk_params_linear(a->d, nq, bias), sat_mul(a->d / tp, a->d)),
	              bias ? a->d : 0);
}

int64_t tk_params_mlp(int64_t d, int64_t f, int bias)
{
	return tk_params_mlp_tp(d, f, bias, 1);
}

int64_t tk_params_mlp_tp(int64_t d, int64_t f, int bias, int64_t tp)
{
	return sat_add(sat_add(tk_params_linear(d, f / tp, bias), sat_mul(f / tp, d)), bias ? d : 0);
}

int64_t tk_params_swiglu(int64_t d, int64_t f)
{
	return tk_params_swiglu_tp(d, f, 1);
}

int64_t tk_params_swiglu_tp(int64_t d, int64_t f, int64_t tp)
{
	return sat_mul(sat_mul(3, d), f / tp);
}

int64_t tk_params_head(int64_t V, int64_t d, int tied)
{
	return tk_params_head_tp(V, d, tied, 1);
}

int64_t tk_params_head_tp(int64_t V, int64_t d, int tied, int64_t tp)
{
	return tied ? 0 : sat_mul(V / tp, d);
}

/* ---- memory ---- */

TkMem tk_mem_embed(int64_t N)
{
	(void)N; // the tokens are the input
	return (TkMem){0, 0, 0};
}

TkMem tk_mem_layernorm(int64_t N)
{
	return (TkMem){sat_mul(2, N), 0, 0};
}

TkMem tk_mem_rmsnorm(int64_t N)
{
	return (TkMem){N, 0, 0};
}

TkMem tk_mem_attn(const TkAttn *a)
{
	return tk_mem_attn_tp(a, 1);
}

/* Each rank keeps its heads' qkv, probabilities and outputs. */
TkMem tk_mem_attn_tp(const TkAttn *a, int64_t tp)
{
	int64_t N = sat_mul(a->B, a->S), nq = sat_div(tk_attn_nqkv(a), tp);
	return (TkMem){sat_add(sat_add(sat_mul(N, nq), sat_div(tk_attn_p_elems(a), tp)),
	                      sat_mul(N, a->d / tp)),
	               sat_mul(N, nq), tk_attn_workspace(a)};
}

TkMem tk_mem_mlp(int64_t N, int64_t f)
{
	return tk_mem_mlp_tp(N, f, 1);
}

TkMem tk_mem_mlp_tp(int64_t N, int64_t f, int64_t tp)
{
	return (TkMem){sat_mul(sat_mul(2, N), f / tp), sat_mul(N, f / tp), 0};
}

TkMem tk_mem_swiglu(int64_t N, int64_t f)
{
	return tk_mem_swiglu_tp(N, f, 1);
}

TkMem tk_mem_swiglu_tp(int64_t N, int64_t f, int64_t tp)
{
	return (TkMem){sat_mul(sat_mul(3, N), f / tp), sat_mul(sat_mul(2, N), f / tp), 0};
}

TkMem tk_mem_head(int64_t N, int64_t V)
{
	return tk_mem_head_tp(N, V, 1);
}

TkMem tk_mem_head_tp(int64_t N, int64_t V, int64_t tp)
{
	(void)N, (void)V, (void)tp; // dlogits is the head's output gradient, kept as any layer's
	return (TkMem){0, 0, 0};
}

TkMem tk_mem_xent(int64_t N)
{
	return (TkMem){sat_mul(2, N), 0, 0}; // lse and the targets; the logits are the input
}

/* ---- FLOPs ---- */

TkFlops tk_flops_linear(int64_t N, int64_t k, int64_t n)
{
	int64_t g = sat_mul(sat_mul(sat_mul(2, N), k), n);
	return (TkFlops){g, g, g};
}

TkFlops tk_flops_attn(const TkAttn *a)
{
	return tk_flops_attn_tp(a, 1);
}

/* tp divides H, so every term divides exactly. */
TkFlops tk_flops_attn_tp(const TkAttn *a, int64_t tp)
{
	int64_t N = sat_mul(a->B, a->S), d = a->d, nqkv = tk_attn_nqkv(a);
	int64_t proj_in = sat_mul(sat_mul(sat_mul(2, N), d), sat_div(nqkv, tp));
	int64_t proj_out = sat_mul(sat_mul(sat_mul(2, N), d / tp), d);
	int64_t sq = sat_mul(sat_mul(sat_mul(sat_mul(sat_mul(2, a->B), a->H / tp), a->S), a->S),
	                    d / a->H); // one S x S x hd GEMM per head
	return (TkFlops){sat_add(sat_add(proj_in, sat_mul(2, sq)), proj_out),
	                 sat_add(sat_add(proj_out, sat_mul(4, sq)), proj_in), sat_add(proj_in, proj_out)};
}

TkFlops tk_flops_mlp(int64_t N, int64_t d, int64_t f)
{
	return tk_flops_mlp_tp(N, d, f, 1);
}

TkFlops tk_flops_mlp_tp(int64_t N, int64_t d, int64_t f, int64_t tp)
{
	int64_t g = sat_mul(sat_mul(sat_mul(4, N), d), f / tp);
	return (TkFlops){g, g, g};
}

TkFlops tk_flops_swiglu(int64_t N, int64_t d, int64_t f)
{
	return tk_flops_swiglu_tp(N, d, f, 1);
}

TkFlops tk_flops_swiglu_tp(int64_t N, int64_t d, int64_t f, int64_t tp)
{
	int64_t g = sat_mul(sat_mul(sat_mul(6, N), d), f / tp);
	return (TkFlops){g, g, g};
}

TkFlops tk_flops_head(int64_t N, int64_t d, int64_t V)
{
	return tk_flops_head_tp(N, d, V, 1);
}

TkFlops tk_flops_head_tp(int64_t N, int64_t d, int64_t V, int64_t tp)
{
	return tk_flops_linear(N, d, V / tp);
}
