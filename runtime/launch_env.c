/* Where this process sits in a launch: how many processes the launcher (mpirun, srun)
 * started, this one's rank among them and among those of its node.  Pure functions of
 * a getenv-like lookup (tests fake one), used to pick a backend's launcher, to refuse a
 * threads launch that a launcher started several times, and to map ranks to GPUs. */
#include "rt_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A whole number >= lo, or -1. */
static int env_int(RtGetenv get, const char *name, int lo)
{
	const char *v = get(name);
	if (!v || !*v)
		return -1;
	char *end;
	long x = strtol(v, &end, 10);
	if (*end || x < lo || x > 1 << 30)
		return -1;
	return (int)x;
}

/* The first variable of vars[] that is set, as a whole number >= lo; -1 when none is
 * set or the first set one is not such a number. */
static int first_set(RtGetenv get, const char *const *vars, int lo)
{
	for (; *vars; vars++)
		if (get(*vars))
			return env_int(get, *vars, lo);
	return -1;
}

int rt_launch_env_nprocs(RtGetenv get)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
	                                   "SLURM_STEP_NUM_TASKS", NULL};
	int n = first_set(get, vars, 1);
	return n < 0 ? 0 : n;
}

int rt_launch_env_rank(RtGetenv get)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
	                                   "SLURM_PROCID", NULL};
	return first_set(get, vars, 0);
}

int rt_launch_env_local_rank(RtGetenv get)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
	                                   "SLURM_LOCALID", "MV2_COMM_WORLD_LOCAL_RANK",
	                                   "LOCAL_RANK", NULL};
	return first_set(get, vars, 0);
}

int rt_launch_hosts_local_rank(const char *hosts, size_t stride, int nproc, int me)
{
	if (!hosts || me < 0 || me >= nproc)
		return -1;
	int n = 0;
	for (int i = 0; i < me; i++)
		if (!strncmp(hosts + (size_t)i * stride, hosts + (size_t)me * stride, stride))
			n++;
	return n;
}

char *rt_real_getenv(const char *name)
{
	return getenv(name);
}

int rt_launch_one_rank(int world)
{
	int n = rt_launch_env_nprocs(rt_real_getenv), me = rt_launch_env_rank(rt_real_getenv);
	return n > 1 && n == world && me >= 0 && me < world ? me : -1;
}

void rt_launch_linger(void)
{
	if (rt_launch_env_nprocs(rt_real_getenv) <= 1)
		return;
	fflush(stdout);
	fflush(stderr);
	struct timespec ts = {1, 0};
	nanosleep(&ts, NULL);
}
