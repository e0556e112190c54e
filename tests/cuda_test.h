/* What tests/test_cuda.c (the tests that need no GPU, and main) and tests/cuda_gpu.c
 * (those that need one) share: one binary, test_cuda, of both files. */
#ifndef TESTS_CUDA_TEST_H
#define TESTS_CUDA_TEST_H

#include "../runtime/rt_private.h"

/* Every stage on one GPU: pp=1 and four stages, a skip, both activations. */
#define ONE_GPU_SRC                                                                        \
	"pipeline one;\nmesh pp=1;\nmicrobatches 4;\ninput 8x32;\n"                             \
	"stage s0 { linear 32; relu; }\n"                                                     \
	"stage s1 { linear 32; gelu; }\n"                                                     \
	"stage s2 { linear 32; relu; }\n"                                                     \
	"stage s3 { linear 16; loss mse; }\n"                                                 \
	"skip s0 -> s2;\n"                                                                    \
	"schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n"
extern const char one_gpu_src[];

/* The .pipe text compiled, or NULL (its diagnostics on stderr). */
Plan *compile_text(const char *src);

#ifdef HAVE_CUDA
/* The one-GPU plan's stages on two ranks, pp=2. */
extern const char two_gpu_src[];

RtOptions options(const char *backend, int steps, int check, int dtype);
/* Runs p; returns rt_world_run's code (-100: the world did not open) and in *report
 * (malloc'd) rt_world_open's message or rt_world_report's text. */
int run_plan(const Plan *p, const RtOptions *o, RtResult *res, char **report);
/* CUDA devices here; 0 (and a skip message) when none. */
int have_gpu(void);

/* tests/cuda_gpu.c: each skips with a message where there is no GPU. */
void cuda__kernels__match_cpu(void **state);
void cuda__many_rows__bias_grad_and_loss(void **state);
void cuda__tokens__bad_id_fails_at_sync(void **state);
void cuda__gen__matches_host_bit_for_bit(void **state);
void cuda__nccl_self__grouped_sendrecv_and_allreduce(void **state);
void cuda__hang__abort_ends_the_wait(void **state);
void cuda__plan_one_gpu__check_f32(void **state);
void cuda__plan_one_gpu__check_bf16(void **state);
void cuda__plan_transformer__check_f32(void **state);
void cuda__plan_transformer_flash__check_f32(void **state);
void cuda__plan_one_gpu__check_adamw(void **state);
void cuda__plan_two_gpus__check_f32(void **state);
void cuda__plan_tp2_two_gpus__check_f32(void **state);
#endif

#endif
