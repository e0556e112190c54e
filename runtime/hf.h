/* Hugging Face's names and layouts for the models the language expresses (runtime/hf.c;
 * docs/runtime.md "Hugging Face files"): --export writes a run's final weights as one
 * safetensors file that `transformers` loads, --init starts a run from such a file. */
#ifndef RT_HF_H
#define RT_HF_H

#include "rt.h"

/* The architectures, told by the plan's layer kinds. */
typedef enum {
	RT_HF_GPT2,  // layernorm and mlp: GPT2LMHeadModel's names, Conv1D layout [in, out]
	RT_HF_LLAMA, // rmsnorm and swiglu: LlamaForCausalLM's, nn.Linear layout [out, in]
	RT_HF_COUNT
} RtHfArch;
extern const char *const rt_hf_arch_names[RT_HF_COUNT];

/* Writes plan p's whole model, its parameters read from checkpoint c (saved by p's run
 * with optimizer kind optim: checked against them first), into path (a temporary name,
 * renamed when whole).  0, or -1 with why in err: a layer with no name in the
 * architecture, a write error. */
int rt_hf_export(const RtCkpt *c, const Plan *p, int optim, const char *path, char *err,
                 size_t n);

/* --init: the file at path mapped and checked against plan p (every tensor the plan's
 * model needs present in its shape; others ignored); NULL with why in err, naming the
 * tensor.  rt_hf_fill: stage s's parameters in the whole (tp = 1) layout from it. */
typedef struct RtHf RtHf;
RtHf *rt_hf_open(const char *path, const Plan *p, char *err, size_t n);
int rt_hf_fill(const RtHf *h, int s, float *whole);
void rt_hf_close(RtHf *h);

#endif
