/* The MPI launcher: one rank per process, started by `mpirun -np WORLD piperun PLAN`
 * (or srun); the same binary runs across machines.  It initialises MPI (if nobody has),
 * checks the process count against the plan, and gives the process-level collectives
 * (MPI_Gather, MPI_Bcast on a duplicate of MPI_COMM_WORLD).  After a failure the process
 * exits 1 without finalizing, after a grace period that lets the other processes print
 * their own blocked ops first, and the launcher ends the job (mp_abort).  Communicators (comm_mpi.c, comm_nccl.cu) build on the
 * MPI it opened. */
#include "rt_private.h"

#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mpi_check.h"

typedef struct {
	MPI_Comm comm;
	int rank, size;
	int inited;    // we called MPI_Init (so we finalize)
	int failed;    // mp_abort ran: leave without MPI_Finalize, which would wait for peers
	int *peer_pid;  // per rank: its process id on this host, 0 on another host
} MpWorld;

int rt_mpi_failed(RtWorld *w, RtRank *r, int e, const char *call, const char *file, int line)
{
	char s[MPI_MAX_ERROR_STRING];
	int n = 0;
	MPI_Error_string(e, s, &n);
	if (r)
		return rt_error(r, "%s:%d: %s failed on host %s, rank %d: %s", file, line, call,
		                w->host, r->rank, s);
	return rt_world_error(w, "%s:%d: %s failed on host %s: %s", file, line, call, w->host, s);
}

static int mp_open(RtWorld *w)
{
	MpWorld *m = calloc(1, sizeof *m);
	if (!m)
		return rt_world_error(w, "out of memory");
	w->state[RT_PART_LAUNCHER] = m;
	m->comm = MPI_COMM_NULL;
	int inited = 0;
	MPI_Initialized(&inited);
	if (!inited) {
		int provided;
		MPICHECK_W(w, MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
		m->inited = 1;
	}
	MPICHECK_W(w, MPI_Comm_dup(MPI_COMM_WORLD, &m->comm));
	MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
	MPI_Comm_rank(m->comm, &m->rank);
	MPI_Comm_size(m->comm, &m->size);
	if (m->size != w->plan->world)
		return rt_world_error(w, "the plan has world %d but %d MPI processes were started "
		                         "(mpirun -np %d)",
		                      w->plan->world, m->size, w->plan->world);
	/* Who runs where: a rank that ends the job after a watchdog abort also kills its
	 * same-host peers itself, since a stopped (SIGSTOP) process outlives the job. */
	typedef struct {
		int pid;
		char host[64];
	} Who;
	Who me = {.pid = (int)getpid()};
	gethostname(me.host, sizeof me.host - 1);
	Who *all = calloc((size_t)m->size, sizeof *all);
	m->peer_pid = calloc((size_t)m->size, sizeof *m->peer_pid);
	if (!all || !m->peer_pid) {
		free(all);
		return rt_world_error(w, "out of memory");
	}
	int e = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, m->comm);
	for (int i = 0; e == MPI_SUCCESS && i < m->size; i++)
		if (i != m->rank && !strcmp(all[i].host, me.host))
			m->peer_pid[i] = all[i].pid;
	free(all);
	if (e != MPI_SUCCESS)
		return rt_mpi_failed(w, NULL, e, "MPI_Allgather", __FILE__, __LINE__);
	rt_world_set_ranks(w, m->rank, 1, m->rank == 0);
	return RT_OK;
}

static int mpi_live(void)
{
	int inited = 0, finalized = 0;
	MPI_Initialized(&inited);
	MPI_Finalized(&finalized);
	return inited && !finalized;
}

/* Whether a same-host process is stopped (state T in /proc/PID/stat). */
static int peer_stopped(int pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	return p && (p[2] == 'T' || p[2] == 't');
}

/* Ends the job after a failure: this process leaves without MPI_Finalize (mp_close)
 * and exits 1, and mpirun, seeing a process exit non-zero, kills the rest.  Not
 * MPI_Abort: Open MPI 4.1's MPI_Abort sends a help message to mpirun and then has the
 * job killed, and when a process is killed while its message (its own, or another
 * aborting process's) is on the way, mpirun logs `ORTE_ERROR_LOG: Data unpack had
 * inadequate space` (or `... would read past end of buffer`, `Out of resource`) from
 * show_help.c; measured, one run in two to four, and in every run of a stalled rank.
 * An exit sends nothing, and what mpirun prints then is its own (docs/runtime.md).
 * Before leaving: a grace second for the other processes to print their own blocked
 * ops, and after a watchdog abort, stopped same-host peers are killed (a stopped
 * process ignores the launcher's SIGTERM and would outlive the job). */
static void mp_abort(RtWorld *w)
{
	MpWorld *m = w->state[RT_PART_LAUNCHER];
	if (!mpi_live() || !m)
		return;
	fflush(stdout);
	fflush(stderr);
	struct timespec ts = {1, 0};
	nanosleep(&ts, NULL);
	if (m->peer_pid && atomic_load(&w->timed_out))
		for (int i = 0; i < m->size; i++)
			if (i != m->rank && m->peer_pid[i] > 0 && peer_stopped(m->peer_pid[i])) {
				kill((pid_t)m->peer_pid[i], SIGKILL);
				kill((pid_t)m->peer_pid[i], SIGCONT);
			}
	m->failed = 1;
}

static void mp_close(RtWorld *w)
{
	MpWorld *m = w->state[RT_PART_LAUNCHER];
	if (!m)
		return;
	if (mpi_live() && !m->failed) {
		if (m->comm != MPI_COMM_NULL)
			MPI_Comm_free(&m->comm);
		if (m->inited)
			MPI_Finalize();
	}
	free(m->peer_pid);
	free(m);
	w->state[RT_PART_LAUNCHER] = NULL;
}

static int mp_launch(RtWorld *w, int (*fn)(RtRank *))
{
	w->ranks[0].status = fn(&w->ranks[0]);
	return RT_OK;
}

static int mp_gather(RtWorld *w, const void *mine, int64_t n, void *all)
{
	MpWorld *m = w->state[RT_PART_LAUNCHER];
	if (n > (int64_t)1 << 30)
		return rt_world_error(w, "gather of %lld bytes per rank is too large", (long long)n);
	MPICHECK_W(w, MPI_Gather(mine, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, 0, m->comm));
	return RT_OK;
}

static int mp_bcast(RtWorld *w, void *buf, int64_t n)
{
	MpWorld *m = w->state[RT_PART_LAUNCHER];
	MPICHECK_W(w, MPI_Bcast(buf, (int)n, MPI_BYTE, 0, m->comm));
	return RT_OK;
}

const RtLauncher rt_launcher_mpi = {
	.name = "mpi",
	.open = mp_open,
	.launch = mp_launch,
	.gather = mp_gather,
	.bcast = mp_bcast,
	.abort = mp_abort,
	.close = mp_close,
};
