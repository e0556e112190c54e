/* The registries: every launcher, device and communicator, and the backends (names for
 * combinations of one of each).  The only place that lists them; --help, --version,
 * error messages and the tests walk these arrays.  A part not built into this binary
 * (no mpicc, no nvcc) is NULL here, so its backend's name stays known and a request for
 * it says it was left out rather than that it does not exist.
 *
 * Adding a part: its file, defining one RtLauncher, RtDevice or RtComm, plus its row
 * below (its declaration and its entry), and a backend row naming a combination with
 * it. */
#include "rt_backend.h"

#include <stdio.h>
#include <string.h>

/* The parts, each defined in its own file. */
extern const RtLauncher rt_launcher_threads; // launch_threads.c
extern const RtLauncher rt_launcher_mpi;     // launch_mpi.c (HAVE_MPI)
extern const RtDevice rt_device_cuda;        // device_cuda.cu (HAVE_CUDA)
extern const RtComm rt_comm_shm;             // comm_shm.c
extern const RtComm rt_comm_mpi;             // comm_mpi.c (HAVE_MPI)
extern const RtComm rt_comm_nccl;            // comm_nccl.cu (HAVE_CUDA)

#ifdef HAVE_MPI
#define MPI_PART(x) (&(x))
#else
#define MPI_PART(x) NULL
#endif
#ifdef HAVE_CUDA
#define CUDA_PART(x) (&(x))
#else
#define CUDA_PART(x) NULL
#endif

const RtLauncher *const rt_launchers[] = {
	&rt_launcher_threads,
	MPI_PART(rt_launcher_mpi),
};
const int rt_nlaunchers = sizeof rt_launchers / sizeof *rt_launchers;

const RtDevice *const rt_devices[] = {
	&rt_device_cpu,
	CUDA_PART(rt_device_cuda),
};
const int rt_ndevices = sizeof rt_devices / sizeof *rt_devices;

const RtComm *const rt_comms[] = {
	&rt_comm_shm,
	MPI_PART(rt_comm_mpi),
	CUDA_PART(rt_comm_nccl),
};
const int rt_ncomms = sizeof rt_comms / sizeof *rt_comms;

const RtBackend rt_backends[] = {
	{"threads", &rt_launcher_threads, &rt_device_cpu, &rt_comm_shm, 0},
	{"mpi", MPI_PART(rt_launcher_mpi), &rt_device_cpu, MPI_PART(rt_comm_mpi), 0},
	{"cuda", NULL, CUDA_PART(rt_device_cuda), CUDA_PART(rt_comm_nccl), 1},
};
const int rt_nbackends = sizeof rt_backends / sizeof *rt_backends;

const RtBackend *rt_backend_find(const char *name)
{
	for (int i = 0; i < rt_nbackends; i++)
		if (!strcmp(rt_backends[i].name, name))
			return &rt_backends[i];
	return NULL;
}

int rt_backend_built(const RtBackend *b)
{
	return (b->launcher || b->auto_launcher) && b->device && b->comm;
}

/* Names joined by ", " (all: every row; else the built ones), into buf. */
static const char *join(char *buf, size_t n, int all, const char *sep)
{
	size_t len = 0;
	buf[0] = 0;
	for (int i = 0; i < rt_nbackends; i++) {
		if (!all && !rt_backend_built(&rt_backends[i]))
			continue;
		int k = snprintf(buf + len, n - len, "%s%s", len ? sep : "", rt_backends[i].name);
		if (k < 0 || (size_t)k >= n - len)
			break;
		len += (size_t)k;
	}
	return buf;
}

const char *rt_backend_names(char *buf, size_t n)
{
	return join(buf, n, 0, " ");
}

const char *rt_backend_default(void)
{
	const RtBackend *mpi = rt_backend_find("mpi");
	if (rt_launch_env_nprocs(rt_real_getenv) > 1 && mpi && rt_backend_built(mpi))
		return "mpi";
	return "threads";
}

const RtLauncher *rt_launcher_auto(void)
{
	if (rt_launch_env_nprocs(rt_real_getenv) > 1)
		for (int i = 0; i < rt_nlaunchers; i++)
			if (rt_launchers[i] && !strcmp(rt_launchers[i]->name, "mpi"))
				return rt_launchers[i];
	return &rt_launcher_threads;
}

int rt_backend_check(const char *name, char *msg, size_t n)
{
	char all[256];
	const RtBackend *b = rt_backend_find(name);
	if (!b) {
		snprintf(msg, n, "unknown backend '%s' (valid backends are %s)", name,
		         join(all, sizeof all, 1, ", "));
		return -1;
	}
	if (!rt_backend_built(b)) {
		snprintf(msg, n, "the %s backend is not built into this piperun (it was built "
		                 "without it; see `make` notices; built in: %s)",
		         name, join(all, sizeof all, 0, ", "));
		return -1;
	}
	return 0;
}
