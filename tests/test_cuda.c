/* CUDA backend tests.  Most of them need no GPU and run everywhere, CUDA or not: the
 * cuda device's and nccl communicator's place in the registries, the launcher
 * environment, device choice, the two-ranks-on-one-GPU check and the text of a failed
 * library call (cuda_env.c and launch_env.c, built everywhere), the dtype-dependent
 * --check bound and --dtype validation.  With CUDA also: the
 * CUDACHECK/CUBLASCHECK/NCCLCHECK macros, the refusal of two ranks on one GPU through
 * piperun, and a clear "no CUDA device" failure (exit 1 from piperun) where there is no
 * GPU, and that every layer kind the cpu device computes has a cuda row with the same
 * parts.  The rest need a GPU and skip with a message without one; they are in
 * tests/cuda_gpu.c, linked into this binary when CUDA is built (tests/cuda_test.h).
 *
 * Built without CUDA (no nvcc or nccl.h), the cuda parts must be absent and asking for
 * the backend is a usage error.  The command-line tests run $BIN/piperun (tests/run.sh
 * sets BIN) and skip when it is not there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../compiler/pipecc.h"
#include "../plan/io.h"
#include "../runtime/cuda_env.h"
#include "../runtime/rt_private.h"
#include "cuda_test.h"

#ifdef HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

/* ---- helpers ---- */

Plan *compile_text(const char *src)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	Diag d;
	diag_init(&d, "test.pipe", src, strlen(src), out);
	PipeccOptions o = {0};
	Plan *p = pipecc_compile("test.pipe", src, strlen(src), &o, &d);
	fclose(out);
	if (!p)
		fprintf(stderr, "%s", buf ? buf : "");
	free(buf);
	return p;
}

const char one_gpu_src[] = ONE_GPU_SRC;

/* ---- no GPU needed ---- */

#ifdef HAVE_CUDA
/* Every member of a table, as an array of function pointers from `first` to its end. */
static int all_filled(const void *table, size_t size, size_t first)
{
	void (*const *fn)(void) = (void (*const *)(void))((const char *)table + first);
	size_t n = (size - first) / sizeof *fn;
	for (size_t i = 0; i < n; i++)
		if (!fn[i])
			return 0;
	return 1;
}
#endif

static void cuda__registry__parts_present_iff_built(void **state)
{
	(void)state;
	char msg[512], names[256];
	int dev = 0, comm = 0;
	for (int i = 0; i < rt_ndevices; i++)
		dev += rt_devices[i] && !strcmp(rt_devices[i]->name, "cuda");
	for (int i = 0; i < rt_ncomms; i++)
		comm += rt_comms[i] && !strcmp(rt_comms[i]->name, "nccl");
	const RtBackend *b = rt_backend_find("cuda");
	assert_non_null(b); // the name is known, built or not
	assert_true(b->auto_launcher);
#ifdef HAVE_CUDA
	assert_int_equal(dev, 1);
	assert_int_equal(comm, 1);
	assert_non_null(b->device);
	assert_string_equal(b->device->name, "cuda");
	assert_string_equal(b->comm->name, "nccl");
	assert_int_equal(b->device->async, 1);
	assert_int_equal(rt_backend_check("cuda", msg, sizeof msg), 0);
	assert_non_null(strstr(rt_backend_names(names, sizeof names), "cuda"));
	/* Every entry is filled: the interpreter and the world call all of them (but the
	 * optional last ones: round_bf16, the cuda device does not emulate bf16 storage yet;
	 * seq, the nccl communicator does not run sequence parallelism yet). */
	assert_true(all_filled(b->device, offsetof(RtDevice, round_bf16), offsetof(RtDevice, open)));
	assert_null(b->device->round_bf16);
	assert_true(all_filled(b->comm, offsetof(RtComm, seq), offsetof(RtComm, open)));
	assert_null(b->comm->seq);
	/* Every layer kind's cuda row has exactly the cpu row's parts: a kind the cpu
	 * device computes, the cuda device computes too (residual has no row on either). */
	int rows = 0;
	for (int k = 0; k < LAYER_COUNT; k++) {
		const RtLayerKernels *c = &b->device->layers[k], *h = &rt_device_cpu.layers[k];
		if (!c->fwd != !h->fwd || !c->bwd_in != !h->bwd_in || !c->bwd_w != !h->bwd_w)
			fail_msg("layer kind %s: the cuda row has other kernels than the cpu row",
			         plan_layers[k].name);
		if (!c->fwd != (plan_layers[k].arg == LAYER_ARG_BODY))
			fail_msg("layer kind %s: %s", plan_layers[k].name,
			         c->fwd ? "a row for the model's own kind" : "no cuda row");
		rows += c->fwd != NULL;
	}
	assert_true(rows > 0);
#else
	assert_int_equal(dev, 0);
	assert_int_equal(comm, 0);
	assert_null(b->device);
	assert_int_equal(rt_backend_check("cuda", msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "the cuda backend is not built into this piperun"));
	assert_null(strstr(rt_backend_names(names, sizeof names), "cuda"));
#endif
}

/* f32 runs get the derived bound, bf16 runs their own fixed one, and a tolerance given
 * replaces either. */
static void cuda__check_bound__depends_on_dtype(void **state)
{
	(void)state;
	RtOptions o = {.dtype = RT_DTYPE_F32};
	assert_int_equal(rt_check_bound(&o), RT_BOUND_NOISE);
	o.dtype = RT_DTYPE_BF16;
	assert_int_equal(rt_check_bound(&o), RT_BOUND_BF16);
	o.tolerance = 1e-3;
	assert_int_equal(rt_check_bound(&o), RT_BOUND_GIVEN);
	assert_true(RT_CHECK_TOL_BF16 > RT_CHECK_FLOOR);
	/* bf16 keeps 8 significant bits: a bound below 2^-8 could not hold. */
	assert_true(RT_CHECK_TOL_BF16 >= 1.0 / 256);
}

/* The piperun binary for command-line tests, or NULL. */
static const char *piperun_path(void)
{
	static char path[512];
	const char *bin = getenv("BIN");
	snprintf(path, sizeof path, "%s/piperun", bin && *bin ? bin : "bin");
	return access(path, X_OK) == 0 ? path : NULL;
}

/* Runs a shell command; returns its exit status and its stderr (malloc'd). */
static int shell(const char *command, char **err)
{
	char out[] = "/tmp/test_cuda.XXXXXX";
	int fd = mkstemp(out);
	assert_true(fd >= 0);
	close(fd);
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "%s >/dev/null 2>'%s'", command, out);
	int st = system(cmd);
	FILE *f = fopen(out, "r");
	char *buf = calloc(1, 8192);
	if (f) {
		size_t n = fread(buf, 1, 8191, f);
		buf[n] = 0;
		fclose(f);
	}
	unlink(out);
	*err = buf;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Runs piperun with args, as shell(). */
static int piperun(const char *args, char **err)
{
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "'%s' %s", piperun_path(), args);
	return shell(cmd, err);
}

/* Writes a compiled program to a temporary file; returns its path (malloc'd). */
static char *plan_file_of(const char *src)
{
	char *path = strdup("/tmp/test_cuda_plan.XXXXXX");
	Plan *p = compile_text(src);
	assert_non_null(p);
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *f = fdopen(fd, "w");
	assert_int_equal(plan_write(p, f), 0);
	fclose(f);
	plan_free(p);
	return path;
}

/* The one-GPU plan as a file, made once. */
static const char *plan_file(void)
{
	static char *path;
	if (!path)
		path = plan_file_of(one_gpu_src);
	return path;
}

static void cuda__cli_dtype__validated(void **state)
{
	(void)state;
	if (!piperun_path())
		skip();
	char args[1024], *err;
	snprintf(args, sizeof args, "'%s' --dtype f16", plan_file());
	assert_int_equal(piperun(args, &err), 2);
	assert_non_null(strstr(err, "--dtype: unknown type 'f16' (valid: f32, bf16)"));
	free(err);
	snprintf(args, sizeof args, "'%s' --backend threads --dtype bf16", plan_file());
	assert_int_equal(piperun(args, &err), 2);
	assert_non_null(strstr(err, "--dtype bf16 needs --backend cuda"));
	free(err);
	snprintf(args, sizeof args, "'%s' --backend threads --dtype f32 --steps 1 --check",
	         plan_file());
	assert_int_equal(piperun(args, &err), 0);
	free(err);
}

/* A getenv over a fixed table: "NAME=value" strings, NULL-terminated. */
static const char *const *fake_env;
static char *fake_getenv(const char *name)
{
	size_t n = strlen(name);
	for (const char *const *e = fake_env; e && *e; e++)
		if (!strncmp(*e, name, n) && (*e)[n] == '=')
			return (char *)*e + n + 1;
	return NULL;
}

static int nprocs_of(const char *const *env)
{
	fake_env = env;
	return rt_launch_env_nprocs(fake_getenv);
}

static int local_of(const char *const *env)
{
	fake_env = env;
	return rt_launch_env_local_rank(fake_getenv);
}

static void cuda__env__reads_launchers(void **state)
{
	(void)state;
	assert_int_equal(nprocs_of((const char *const[]){NULL}), 0);
	assert_int_equal(nprocs_of((const char *const[]){"OMPI_COMM_WORLD_SIZE=8", NULL}), 8);
	assert_int_equal(nprocs_of((const char *const[]){"PMI_SIZE=4", NULL}), 4);
	assert_int_equal(nprocs_of((const char *const[]){"PMIX_SIZE=2", NULL}), 2);
	assert_int_equal(nprocs_of((const char *const[]){"SLURM_STEP_NUM_TASKS=16", NULL}), 16);
	/* A batch script's allocation is not a launch: piperun there runs one process. */
	assert_int_equal(nprocs_of((const char *const[]){"SLURM_NTASKS=16", NULL}), 0);
	assert_int_equal(nprocs_of((const char *const[]){"OMPI_COMM_WORLD_SIZE=x", NULL}), 0);
	assert_int_equal(nprocs_of((const char *const[]){"OMPI_COMM_WORLD_SIZE=0", NULL}), 0);
	/* Open MPI's own variable wins over srun's. */
	assert_int_equal(nprocs_of((const char *const[]){"SLURM_STEP_NUM_TASKS=32",
	                                                "OMPI_COMM_WORLD_SIZE=2", NULL}),
	                 2);

	assert_int_equal(local_of((const char *const[]){NULL}), -1);
	assert_int_equal(local_of((const char *const[]){"OMPI_COMM_WORLD_LOCAL_RANK=3", NULL}), 3);
	assert_int_equal(local_of((const char *const[]){"MPI_LOCALRANKID=5", NULL}), 5);
	assert_int_equal(local_of((const char *const[]){"SLURM_LOCALID=0", NULL}), 0);
	assert_int_equal(local_of((const char *const[]){"MV2_COMM_WORLD_LOCAL_RANK=7", NULL}), 7);
	assert_int_equal(local_of((const char *const[]){"LOCAL_RANK=1", NULL}), 1);
	assert_int_equal(local_of((const char *const[]){"SLURM_LOCALID=-1", NULL}), -1);
	assert_int_equal(local_of((const char *const[]){"SLURM_LOCALID=2x", NULL}), -1);
	assert_int_equal(local_of((const char *const[]){"SLURM_LOCALID=", NULL}), -1);
	assert_int_equal(local_of((const char *const[]){"SLURM_LOCALID=6",
	                                               "OMPI_COMM_WORLD_LOCAL_RANK=2", NULL}),
	                 2);

	fake_env = (const char *const[]){NULL};
	assert_int_equal(rt_launch_env_rank(fake_getenv), -1);
	fake_env = (const char *const[]){"OMPI_COMM_WORLD_RANK=1", NULL};
	assert_int_equal(rt_launch_env_rank(fake_getenv), 1);
	fake_env = (const char *const[]){"SLURM_PROCID=4", "PMIX_RANK=2", NULL};
	assert_int_equal(rt_launch_env_rank(fake_getenv), 2);
	fake_env = (const char *const[]){"PMI_RANK=z", NULL};
	assert_int_equal(rt_launch_env_rank(fake_getenv), -1);
}

static void cuda__hosts__local_rank_counts_earlier_same_host(void **state)
{
	(void)state;
	char hosts[6][64] = {"a", "b", "a", "a", "b", "c"};
	const char *h = &hosts[0][0];
	int want[6] = {0, 0, 1, 2, 1, 0};
	for (int i = 0; i < 6; i++)
		assert_int_equal(rt_launch_hosts_local_rank(h, 64, 6, i), want[i]);
	assert_int_equal(rt_launch_hosts_local_rank(h, 64, 6, 6), -1);
	assert_int_equal(rt_launch_hosts_local_rank(h, 64, 6, -1), -1);
	assert_int_equal(rt_launch_hosts_local_rank(NULL, 64, 6, 0), -1);
}

static void cuda__pick_device__plan_then_local_rank(void **state)
{
	(void)state;
	char why[256];
	/* The plan's device when visible. */
	assert_int_equal(rt_cuda_pick_device(3, -1, 8, why, sizeof why), 3);
	assert_int_equal(rt_cuda_pick_device(3, 5, 8, why, sizeof why), 3);
	/* A launcher that gives each process its own GPU: one visible device. */
	assert_int_equal(rt_cuda_pick_device(3, 3, 1, why, sizeof why), 0);
	/* Not visible, local rank known: wrap over what is visible. */
	assert_int_equal(rt_cuda_pick_device(9, 5, 4, why, sizeof why), 1);
	/* Not visible and no launcher: an error that says why. */
	why[0] = 0;
	assert_int_equal(rt_cuda_pick_device(4, -1, 2, why, sizeof why), -1);
	assert_non_null(strstr(why, "device 4"));
	assert_non_null(strstr(why, "sees 2 CUDA devices"));
	why[0] = 0;
	assert_int_equal(rt_cuda_pick_device(0, 0, 0, why, sizeof why), -1);
	assert_non_null(strstr(why, "no CUDA device"));
}

static void cuda__report__names_call_host_rank_and_line(void **state)
{
	(void)state;
	RtWorld w;
	memset(&w, 0, sizeof w);
	snprintf(w.host, sizeof w.host, "node7");
	RtRank r;
	memset(&r, 0, sizeof r);
	r.w = &w;
	r.rank = 3;
	assert_int_equal(rt_cuda_report(&w, &r, "cudaMalloc(size)", "cudaErrorMemoryAllocation",
	                                "out of memory", "", "x.cu", 12),
	                 RT_EFAIL);
	assert_string_equal(r.err, "x.cu:12: cudaMalloc(size) failed on host node7, rank 3: "
	                           "cudaErrorMemoryAllocation: out of memory");
	/* The first error wins. */
	rt_cuda_report(&w, &r, "other", "n", "m", "", "y.cu", 1);
	assert_null(strstr(r.err, "other"));
	r.err[0] = 0;
	r.rank = RT_REF_RANK;
	rt_cuda_report(&w, &r, "ncclSend", "ncclRemoteError", "remote", " (peer gone)", "z.cu", 5);
	assert_string_equal(r.err, "z.cu:5: ncclSend failed on host node7, the --check reference: "
	                           "ncclRemoteError: remote (peer gone)");
	rt_cuda_report(&w, NULL, "cudaGetDeviceCount", NULL, NULL, NULL, "d.cu", 9);
	assert_string_equal(w.err, "d.cu:9: cudaGetDeviceCount failed on host node7: ?: ?");
	assert_string_equal(rt_cuda_nccl_name(6), "ncclRemoteError");
	assert_string_equal(rt_cuda_nccl_name(99), "ncclResult (unknown)");
	assert_string_equal(rt_cuda_nccl_name(-1), "ncclResult (unknown)");
}

/* Three ranks, two of them on device 0: the plan's devices table. */
static const char shared_gpu_src[] = "pipeline shared;\nmesh pp=3;\nmicrobatches 3;\n"
                                     "input 4x8;\ndevices [1, 0, 0];\n"
                                     "stage s0 { linear 8; relu; }\n"
                                     "stage s1 { linear 8; relu; }\n"
                                     "stage s2 { linear 8; loss mse; }\n"
                                     "schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n";

static void cuda__shared_device__names_ranks_device_and_host(void **state)
{
	(void)state;
	Plan *p = compile_text(shared_gpu_src);
	assert_non_null(p);
	char why[512] = "";
	/* One process (no host table): ranks 1 and 2 share device 0 of this host. */
	assert_int_equal(rt_cuda_shared_device(p, NULL, 0, "box", 22805, why, sizeof why), -1);
	assert_non_null(strstr(why, "ranks 1 and 2 on one GPU, device 0 of host box"));
	assert_non_null(strstr(why, "NCCL 2.28.5 refuses two ranks"));
	why[0] = 0;
	assert_int_equal(rt_cuda_shared_device(p, NULL, 0, "box", 0, why, sizeof why), -1);
	assert_non_null(strstr(why, "NCCL before 2.30"));
	/* Ranks 1 and 2 on different hosts: each GPU has one rank. */
	char hosts[3][64] = {"a", "a", "b"};
	assert_int_equal(rt_cuda_shared_device(p, &hosts[0][0], 64, "a", 0, why, sizeof why), 0);
	/* ...and on the same host, named in the message. */
	snprintf(hosts[2], sizeof hosts[2], "a");
	assert_int_equal(rt_cuda_shared_device(p, &hosts[0][0], 64, "x", 0, why, sizeof why), -1);
	assert_non_null(strstr(why, "ranks 1 and 2 on one GPU, device 0 of host a "));
	/* The default devices (rank r on device r % 8): one GPU each. */
	Plan *q = compile_text(one_gpu_src);
	assert_non_null(q);
	assert_int_equal(rt_cuda_shared_device(q, NULL, 0, "box", 0, why, sizeof why), 0);
	plan_free(q);
	plan_free(p);
}

#ifndef HAVE_CUDA
static void cuda__cli_not_built__usage_error(void **state)
{
	(void)state;
	if (!piperun_path())
		skip();
	char args[1024], *err;
	snprintf(args, sizeof args, "'%s' --backend cuda", plan_file());
	assert_int_equal(piperun(args, &err), 2);
	assert_non_null(strstr(err, "the cuda backend is not built into this piperun"));
	free(err);
}
#else

const char two_gpu_src[] = "pipeline two;\nmesh pp=2;\nmicrobatches 4;\ninput 8x32;\n"
                           "stage s0 { linear 32; relu; }\n"
                           "stage s1 { linear 32; gelu; }\n"
                           "stage s2 { linear 32; relu; }\n"
                           "stage s3 { linear 16; loss mse; }\n"
                           "skip s0 -> s2;\n"
                           "schedule gpipe;\ncost * f=1 b=1 w=1;\nlink ideal;\n";

RtOptions options(const char *backend, int steps, int check, int dtype)
{
	return (RtOptions){.backend = backend, .steps = steps, .seed = 3,
	                   .check = check, .timeout_s = 60, .blas_threads = 1, .dtype = dtype};
}

int run_plan(const Plan *p, const RtOptions *o, RtResult *res, char **report)
{
	char err[1024];
	memset(res, 0, sizeof *res);
	RtWorld *w = rt_world_open(p, o, err, sizeof err);
	if (!w) {
		*report = strdup(err);
		return -100;
	}
	int rc = rt_world_run(w, res);
	size_t len = 0;
	*report = NULL;
	FILE *f = open_memstream(report, &len);
	if (rc)
		rt_world_report(w, f);
	fclose(f);
	rt_world_close(w, rc != 0);
	return rc;
}

int have_gpu(void)
{
	char why[256];
	int n = rt_cuda_device_count(why, sizeof why);
	if (n == 0)
		print_message("skipped: no CUDA device (%s)\n", why);
	return n;
}

static void cuda__no_device__run_fails_with_message(void **state)
{
	(void)state;
	char why[256];
	if (rt_cuda_device_count(why, sizeof why) > 0)
		skip(); // a GPU is there: the GPU tests below cover the backend
	Plan *p = compile_text(one_gpu_src);
	assert_non_null(p);
	for (int dtype = 0; dtype < RT_DTYPE_COUNT; dtype++) {
		RtOptions o = options("cuda", 1, 1, dtype);
		RtResult res;
		char *report;
		int rc = run_plan(p, &o, &res, &report);
		assert_int_equal(rc, RT_EFAIL); // a runtime failure: piperun exits 1
		assert_non_null(strstr(report, "no CUDA device on host"));
		assert_non_null(strstr(report, "cudaGetDeviceCount"));
		free(report);
		rt_result_free(&res);
	}
	plan_free(p);
}

/* Two ranks on one GPU: refused before any NCCL call, with or without a GPU here. */
static void cuda__cli_shared_device__exit_1(void **state)
{
	(void)state;
	if (!piperun_path())
		skip();
	char *plan = plan_file_of(shared_gpu_src);
	char args[1024], *err;
	snprintf(args, sizeof args, "'%s' --backend cuda --steps 1", plan);
	assert_int_equal(piperun(args, &err), 1);
	assert_non_null(strstr(err, "piperun: error: the plan puts ranks 1 and 2 on one GPU, "
	                            "device 0 of host "));
	assert_null(strstr(err, "no CUDA device")); // the plan's problem comes first
	free(err);
	unlink(plan);
	free(plan);
}

static void cuda__cli_no_device__exit_1(void **state)
{
	(void)state;
	char why[256];
	if (!piperun_path() || rt_cuda_device_count(why, sizeof why) > 0)
		skip();
	const char *extra[] = {"", "--dtype bf16", "--check", "--json", "--calibrate"};
	for (size_t i = 0; i < sizeof extra / sizeof *extra; i++) {
		char args[1024], *err;
		snprintf(args, sizeof args, "'%s' --backend cuda %s", plan_file(), extra[i]);
		assert_int_equal(piperun(args, &err), 1);
		assert_non_null(strstr(err, "piperun: error: no CUDA device on host"));
		free(err);
	}
}

/* Under mpirun the backend opens MPI through the MPI backend's functions, gathers the
 * host names and broadcasts the NCCL id; without a GPU every process must still end
 * with the no-device error, and the job with exit 1, not a hang. */
static void cuda__cli_mpirun_no_device__exit_1(void **state)
{
	(void)state;
	char why[256];
	if (!piperun_path() || rt_cuda_device_count(why, sizeof why) > 0 ||
	    system("command -v mpirun >/dev/null 2>&1 && mpirun --version 2>&1 | "
	           "grep -q 'Open MPI'") != 0 ||
	    !rt_backend_find("mpi") || !rt_backend_built(rt_backend_find("mpi")))
		skip();
	char *plan = plan_file_of(two_gpu_src);
	char cmd[2048], *err;
	snprintf(cmd, sizeof cmd, "timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "
	                          "'%s' '%s' --backend cuda",
	         piperun_path(), plan);
	assert_int_equal(shell(cmd, &err), 1);
	assert_non_null(strstr(err, "piperun: error: no CUDA device on host"));
	free(err);
	unlink(plan);
	free(plan);
}

/* The macros return from the function they are used in: wrap each in one. */
static int cuda_line;
static int fail_cuda(RtRank *r)
{
	CUDACHECK(r, cudaSuccess);
	cuda_line = __LINE__ + 1;
	CUDACHECK(r, cudaErrorInvalidValue);
	return RT_OK;
}

static int fail_cublas(RtRank *r)
{
	CUBLASCHECK(r, CUBLAS_STATUS_SUCCESS);
	CUBLASCHECK(r, CUBLAS_STATUS_INVALID_VALUE);
	return RT_OK;
}

static int fail_nccl(RtRank *r)
{
	NCCLCHECK(r, ncclSuccess);
	NCCLCHECK(r, ncclInProgress); // a non-blocking communicator's answer: no failure
	NCCLCHECK(r, ncclInvalidArgument);
	return RT_OK;
}

static int fail_world(RtWorld *w)
{
	NCCLCHECK_W(w, ncclSuccess);
	CUDACHECK_W(w, cudaErrorNoDevice);
	return RT_OK;
}

static void cuda__check_macros__name_call_host_rank_and_line(void **state)
{
	(void)state;
	RtWorld w;
	memset(&w, 0, sizeof w);
	snprintf(w.host, sizeof w.host, "node7");
	RtRank r;
	memset(&r, 0, sizeof r);
	r.w = &w;
	r.rank = 3;
	char want[256];

	assert_int_equal(fail_cuda(&r), RT_EFAIL);
	snprintf(want, sizeof want, "test_cuda.c:%d: cudaErrorInvalidValue failed on host node7, "
	                            "rank 3: cudaErrorInvalidValue: invalid argument",
	         cuda_line);
	assert_non_null(strstr(r.err, want));

	r.err[0] = 0;
	assert_int_equal(fail_cublas(&r), RT_EFAIL);
	assert_non_null(strstr(r.err, "CUBLAS_STATUS_INVALID_VALUE failed on host node7, rank 3: "
	                              "CUBLAS_STATUS_INVALID_VALUE"));
	assert_non_null(strstr(r.err, "test_cuda.c:"));

	r.err[0] = 0;
	assert_int_equal(fail_nccl(&r), RT_EFAIL);
	assert_non_null(strstr(r.err, "ncclInvalidArgument failed on host node7, rank 3: "
	                              "ncclInvalidArgument: invalid argument"));

	r.err[0] = 0;
	r.rank = RT_REF_RANK;
	assert_int_equal(fail_cuda(&r), RT_EFAIL);
	assert_non_null(strstr(r.err, "on host node7, the --check reference: "));

	assert_int_equal(fail_world(&w), RT_EFAIL);
	assert_non_null(strstr(w.err, "cudaErrorNoDevice failed on host node7: cudaErrorNoDevice: "));
	assert_null(strstr(w.err, "rank"));

	/* The first error wins, as everywhere in the runtime. */
	r.rank = 3;
	assert_int_equal(fail_cublas(&r), RT_EFAIL);
	assert_null(strstr(r.err, "CUBLAS"));

	assert_string_equal(rt_cuda_nccl_name(ncclRemoteError), "ncclRemoteError");
	assert_string_equal(rt_cuda_nccl_name(99), "ncclResult (unknown)");
}

#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(cuda__registry__parts_present_iff_built),
		cmocka_unit_test(cuda__check_bound__depends_on_dtype),
		cmocka_unit_test(cuda__cli_dtype__validated),
		cmocka_unit_test(cuda__env__reads_launchers),
		cmocka_unit_test(cuda__hosts__local_rank_counts_earlier_same_host),
		cmocka_unit_test(cuda__pick_device__plan_then_local_rank),
		cmocka_unit_test(cuda__report__names_call_host_rank_and_line),
		cmocka_unit_test(cuda__shared_device__names_ranks_device_and_host),
#ifndef HAVE_CUDA
		cmocka_unit_test(cuda__cli_not_built__usage_error),
#else
		cmocka_unit_test(cuda__no_device__run_fails_with_message),
		cmocka_unit_test(cuda__cli_no_device__exit_1),
		cmocka_unit_test(cuda__cli_mpirun_no_device__exit_1),
		cmocka_unit_test(cuda__cli_shared_device__exit_1),
		cmocka_unit_test(cuda__check_macros__name_call_host_rank_and_line),
		cmocka_unit_test(cuda__kernels__match_cpu),
		cmocka_unit_test(cuda__tokens__bad_id_fails_at_sync),
		cmocka_unit_test(cuda__gen__matches_host_bit_for_bit),
		cmocka_unit_test(cuda__many_rows__bias_grad_and_loss),
		cmocka_unit_test(cuda__nccl_self__grouped_sendrecv_and_allreduce),
		cmocka_unit_test(cuda__plan_one_gpu__check_f32),
		cmocka_unit_test(cuda__plan_one_gpu__check_bf16),
		cmocka_unit_test(cuda__plan_one_gpu__check_adamw),
		cmocka_unit_test(cuda__plan_transformer__check_f32),
		cmocka_unit_test(cuda__plan_transformer_flash__check_f32),
		cmocka_unit_test(cuda__plan_two_gpus__check_f32),
		cmocka_unit_test(cuda__plan_tp2_two_gpus__check_f32),
		cmocka_unit_test(cuda__hang__abort_ends_the_wait), // last: it aborts NCCL
#endif
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
