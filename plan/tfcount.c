/* The attention shape (see tfcount.h): its check and sizes, in elements, saturating. */
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
