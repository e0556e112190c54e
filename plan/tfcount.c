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
	return (a->H + 2 * a->Hkv) * (a->d / a->H);
}

int64_t tk_attn_p_elems(const TkAttn *a)
{
	return a->B * a->H * a->S * a->S;
}

int64_t tk_attn_workspace(const TkAttn *a)
{
	return a->B * a->S * a->d + a->S * a->S;
}

/* ---- parameter counts ---- */

int64_t tk_params_linear(int64_t k, int64_t n, int bias)
{
	return k * n + (bias ? n : 0);
}

int64_t tk_params_embed(int64_t V, int64_t d, int64_t S, int learned_pos)
{
	return V * d + (learned_pos ? S * d : 0);
}

int64_t tk_params_layernorm(int64_t d)
{
	return 2 * d;
}

int64_t tk_params_rmsnorm(int64_t d)
{
	return d;
}

int64_t tk_params_attn(const TkAttn *a, int bias)
{
	return tk_params_linear(a->d, tk_attn_nqkv(a), bias) + tk_params_linear(a->d, a->d, bias);
}

int64_t tk_params_mlp(int64_t d, int64_t f, int bias)
{
	return tk_params_linear(d, f, bias) + tk_params_linear(f, d, bias);
}

int64_t tk_params_swiglu(int64_t d, int64_t f)
{
	return 3 * d * f;
}

int64_t tk_params_head(int64_t V, int64_t d, int tied)
{
	return tied ? 0 : V * d;
}

/* ---- memory ---- */

TkMem tk_mem_embed(int64_t N)
{
	(void)N; // the tokens are the input
	return (TkMem){0, 0, 0};
}

TkMem tk_mem_layernorm(int64_t N)
{
	return (TkMem){2 * N, 0, 0};
}

TkMem tk_mem_rmsnorm(int64_t N)
{
	return (TkMem){N, 0, 0};
}

TkMem tk_mem_attn(const TkAttn *a)
{
	int64_t N = a->B * a->S, nqkv = tk_attn_nqkv(a);
	return (TkMem){N * nqkv + tk_attn_p_elems(a) + N * a->d, N * nqkv, tk_attn_workspace(a)};
}

TkMem tk_mem_mlp(int64_t N, int64_t f)
{
	return (TkMem){2 * N * f, N * f, 0};
}

TkMem tk_mem_swiglu(int64_t N, int64_t f)
{
	return (TkMem){3 * N * f, 2 * N * f, 0};
}

TkMem tk_mem_head(int64_t N, int64_t V)
{
	(void)N, (void)V; // dlogits is the head's output gradient, kept as any layer's
	return (TkMem){0, 0, 0};
}

TkMem tk_mem_xent(int64_t N)
{
	return (TkMem){2 * N, 0, 0}; // lse and the targets; the logits are the input
}

/* ---- FLOPs ---- */

TkFlops tk_flops_linear(int64_t N, int64_t k, int64_t n)
{
	int64_t g = 2 * N * k * n;
	return (TkFlops){g, g, g};
}

TkFlops tk_flops_attn(const TkAttn *a)
{
	int64_t N = a->B * a->S, d = a->d, nqkv = tk_attn_nqkv(a);
	int64_t proj_in = 2 * N * d * nqkv, proj_out = 2 * N * d * d;
	int64_t sq = 2 * a->B * a->H * a->S * a->S * (d / a->H); // one S x S x hd GEMM per head
	return (TkFlops){proj_in + 2 * sq + proj_out, proj_out + 4 * sq + proj_in,
	                 proj_in + proj_out};
}

TkFlops tk_flops_mlp(int64_t N, int64_t d, int64_t f)
{
	int64_t g = 4 * N * d * f;
	return (TkFlops){g, g, g};
}

TkFlops tk_flops_swiglu(int64_t N, int64_t d, int64_t f)
{
	int64_t g = 6 * N * d * f;
	return (TkFlops){g, g, g};
}

TkFlops tk_flops_head(int64_t N, int64_t d, int64_t V)
{
	return tk_flops_linear(N, d, V);
}
