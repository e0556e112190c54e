/* The world: what one process does to run a plan.
 *
 * rt_world_open() finds the backend's three parts, builds the model and opens the
 * launcher (which says which world ranks live in this process: all of them for
 * threads, one for MPI), the device and the communicator, in that order.
 * rt_world_run() runs the ranks under the watchdog, each on its own thread of control:
 * open the rank on the device and the communicator, run the interpreter for every
 * step, keep the final weights for --check, free everything, close.  Then every
 * process contributes fixed-size blocks per rank to the root (the launcher's gather),
 * which turns them into the figures of RtResult and, for --check, has check.c replay
 * the model sequentially on the cpu device and compare.
 *
 * Failures never exit: the first failing rank marks the world aborted and wakes the
 * others, and rt_world_report() tells the story: errors as `plan:line: error: ...`
 * naming the op, a watchdog timeout as every rank's blocked ops. */
#include "rt_private.h"
#include "../plan/line.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- opening ---- */

/* Closes the parts that were opened, last opened first. */
static void close_parts(RtWorld *w, int failed)
{
	if (w->comm && w->comm->close)
		w->comm->close(w);
	if (w->dev && w->dev->close)
		w->dev->close(w);
	if (w->opt.check && w->dev != &rt_device_cpu && rt_device_cpu.close)
		rt_device_cpu.close(w);
	/* A failed run may leave other processes waiting for this one: end the job. */
	if (failed && w->launcher && w->launcher->abort)
		w->launcher->abort(w);
	if (w->launcher)
		w->launcher->close(w);
}

/* Opens the launcher, then the device (and the cpu device for the --check reference),
 * then the communicator.  Each may note that this process cannot run instead of
 * failing, so the collective steps of opening complete on every process. */
static int open_parts(RtWorld *w)
{
	if (w->launcher->open(w))
		return RT_EFAIL;
	if (w->dev->open && w->dev->open(w))
		return RT_EFAIL;
	if (w->opt.check && w->dev != &rt_device_cpu && rt_device_cpu.open &&
	    rt_device_cpu.open(w))
		return RT_EFAIL;
	return w->comm->open ? w->comm->open(w) : RT_OK;
}

static int alloc_ranks(RtWorld *w)
{
	const RtOptions *o = &w->opt;
	w->ranks = calloc((size_t)w->nlocal, sizeof *w->ranks);
	double *loss = calloc((size_t)w->nlocal * (size_t)o->steps, sizeof *loss);
	int64_t *step = calloc((size_t)w->nlocal * 2 * (size_t)o->steps, sizeof *step);
	if (!w->ranks || !loss || !step) {
		free(loss);
		free(step);
		free(w->ranks);
		w->ranks = NULL;
		return rt_world_error(w, "out of memory");
	}
	for (int i = 0; i < w->nlocal; i++) {
		RtRank *r = &w->ranks[i];
		r->w = w;
		r->rank = w->first_local + i;
		r->local = i;
		r->pr = plan_rank(w->plan, r->rank, NULL); // a local rank has its entry
		r->dev = w->dev;
		r->model = w->model;
		memcpy(r->coord, r->pr->coord, sizeof r->coord);
		r->loss_sum = loss + (size_t)i * (size_t)o->steps;
		r->step_t0 = step + (size_t)i * 2 * (size_t)o->steps;
		r->step_t1 = r->step_t0 + o->steps;
		atomic_store(&r->cur_op, -1);
	}
	return RT_OK;
}

/* What piperun does not run at tp > 1 (docs/runtime.md "Tensor parallelism"); 0 when
 * the plan is fine. */
static int tp_refuse(const RtWorld *w, char *err, size_t errn)
{
	const Plan *p = w->plan;
	const char *why = !w->dev->tp_split ? "its device does not compute tp shards yet" : NULL;
	/* Full recomputation re-runs F, which needs the tp all-reduces again; selective
	 * rebuilds a rank's own heads' probabilities from its own q and k, alone. */
	for (int s = 0; s < p->nstages && !why; s++)
		if (p->stages[s].recompute == PLAN_RECOMPUTE_FULL)
			why = "full recomputation (its forward would need the tp all-reduces again)";
	/* Sequence parallelism: the device's rows on a rank's rows, the communicator's
	 * reduce-scatter and all-gather, and a loss over all rows (xent on tokens; an mse
	 * over a rank's rows would need a sum of its own). */
	if (!why && p->sp)
		why = !w->dev->seq_split ? "sequence parallelism (its device does not split the sequence yet)"
		      : !w->comm->seq    ? "sequence parallelism (its communicator has no reduce-scatter by rows)"
		      : !plan_shape(p).vocab ? "sequence parallelism on a matrix input (it runs on token input)"
		                             : NULL;
	if (!why)
		return 0;
	snprintf(err, errn, "piperun cannot run this tp=%d plan on the %s backend: %s",
	         p->dims[DIM_TP], w->be->name, why);
	return -1;
}

/* Whether --resume's checkpoint fits this run (docs/runtime.md "Checkpoints"), its seed
 * and step taken over; 0 when fine. */
static int ckpt_refuse(RtWorld *w, char *err, size_t errn)
{
	const Plan *p = w->plan;
	if (!w->opt.resume)
		return 0;
	if (rt_ckpt_check(w->opt.resume, p, w->optim.kind, err, errn))
		return -1;
	w->opt.seed = rt_ckpt_seed(w->opt.resume);
	w->step0 = rt_ckpt_step(w->opt.resume);
	return 0;
}

RtWorld *rt_world_open(const Plan *p, const RtOptions *o, char *err, size_t errn)
{
	const char *name = o->backend ? o->backend : rt_backend_default();
	if (rt_backend_check(name, err, errn))
		return NULL;
	const RtBackend *be = rt_backend_find(name);
	RtWorld *w = calloc(1, sizeof *w);
	if (!w) {
		snprintf(err, errn, "out of memory");
		return NULL;
	}
	w->plan = p;
	w->opt = *o;
	w->be = be;
	if (rt_fault_parse(w, getenv("PIPERUN_FAULT"))) {
		snprintf(err, errn, "%s", w->err);
		free(w);
		return NULL;
	}
	w->launcher = be->auto_launcher ? rt_launcher_auto() : be->launcher;
	w->dev = be->device;
	w->comm = be->comm;
	gethostname(w->host, sizeof w->host - 1);
	if (rt_wrong_check(p, o, err, errn) || rt_device_check(w->dev, p, err, errn) ||
	    (o->check && rt_device_check(&rt_device_cpu, p, err, errn)) ||
	    rt_optim_resolve(p, o, &w->optim, err, errn)) {
		free(w);
		return NULL;
	}
	if (!w->dev->optim || !w->dev->optim[w->optim.kind]) {
		snprintf(err, errn, "the %s device has no %s optimizer step", w->dev->name,
		         plan_optim_names[w->optim.kind]);
		free(w);
		return NULL;
	}
	if (ckpt_refuse(w, err, errn)) {
		free(w);
		return NULL;
	}
	if (!(w->model = rt_model_new(p, p->dims[DIM_TP], err, errn))) {
		free(w);
		return NULL;
	}
	w->whole = w->model;
	if (p->dims[DIM_TP] > 1 && (tp_refuse(w, err, errn) ||
	                            !(w->whole = rt_model_new(p, 1, err, errn)))) {
		if (w->whole != w->model)
		rt_model_free(w->whole);
	rt_model_free(w->model);
		free(w);
		return NULL;
	}
	RtWatchdog *guard = rt_start_guard(w); // opening is collective: bound it
	if (guard)
		rt_fault_open(w); // test-only (PIPERUN_FAULT=stall-open)
	if (!guard || open_parts(w)) {
		snprintf(err, errn, "%s", w->err[0] ? w->err : "cannot open the backend");
		if (guard)
			rt_watchdog_stop(guard);
		/* Opening fails alike in every process (a wrong world size, say), so the
		 * parts close normally and the caller can still print the reason. */
		close_parts(w, 0);
		if (w->whole != w->model)
			rt_model_free(w->whole);
		rt_model_free(w->model);
		free(w);
		return NULL;
	}
	w->t0 = rt_now_ns();
	if (alloc_ranks(w) || rt_world_bcast(w, &w->t0, sizeof w->t0)) {
		snprintf(err, errn, "%s", w->err);
		rt_watchdog_stop(guard);
		rt_world_close(w, 1);
		return NULL;
	}
	rt_watchdog_stop(guard);
	return w;
}

void rt_world_close(RtWorld *w, int failed)
{
	if (!w)
		return;
	close_parts(w, failed);
	/* A rank thread stuck in an op may still use the ranks and the model; the process
	 * ends next, and they with it. */
	if (w->nstuck)
		return;
	if (w->ranks) {
		free(w->ranks[0].loss_sum);
		free(w->ranks[0].step_t0);
		for (int i = 0; i < w->nlocal; i++) {
			free(w->ranks[i].ev);
			free(w->ranks[i].weights);
		}
	}
	free(w->ranks);
	if (w->whole != w->model)
		rt_model_free(w->whole);
	rt_model_free(w->model);
	free(w);
}

/* ---- running ---- */

/* The classes of RtResult.model_bytes, in its order. */
static const int model_mem[4] = {RT_MEM_PARAM, RT_MEM_GRAD, RT_MEM_OPTIM, RT_MEM_MASTER};

static int rank_entry(RtRank *r)
{
	RtWorld *w = r->w;
	int rc = r->dev->rank_open ? r->dev->rank_open(r) : RT_OK;
	if (rc == RT_OK && w->comm->rank_open)
		rc = w->comm->rank_open(r);
	if (rc == RT_OK)
		rc = rt_rank_main(r);
	r->held_end = r->mem[RT_MEM_SAVED];
	for (int i = 0; i < 4; i++)
		r->model_bytes[i] = r->mem[model_mem[i]];
	if (rc == RT_OK && w->opt.check)
		rc = rt_check_keep(r);
	rt_rank_free(r);
	if (w->comm->rank_close)
		w->comm->rank_close(r);
	if (r->dev->rank_close)
		r->dev->rank_close(r);
	atomic_store(&r->done, 1);
	if (rc == RT_EFAIL)
		rt_abort(w);
	return rc;
}

/* Root-side buffer for `gather`: world blocks of n bytes. */
static int gather(RtWorld *w, const void *mine, int64_t n, void **all)
{
	*all = NULL;
	if (w->root && !(*all = calloc((size_t)w->plan->world, (size_t)(n ? n : 1))))
		return rt_world_error(w, "out of memory gathering %lld bytes per rank", (long long)n);
	return rt_world_gather(w, mine, n, w->root ? *all : NULL);
}

enum { NFIX = 13 }; // gathered figures: fixed words per rank, then 3 per step

/* Rank r's figures as words: NFIX fixed ones, then per step the loss sum, start, end. */
static void pack_figures(const RtWorld *w, const RtRank *r, int64_t *b)
{
	const Plan *p = w->plan;
	b[0] = r->busy_ns;
	b[1] = r->peak_act;
	b[2] = r->held_end;
	b[3] = r->nev;
	b[4] = r->coord[DIM_TP] == 0 && r->coord[DIM_PP] == p->stages[w->model->loss_stage].pp;
	for (int k = 0; k < 4; k++)
		b[5 + k] = r->model_bytes[k];
	for (int k = 0; k < 4; k++)
		b[9 + k] = r->peak_total[k];
	for (int s = 0; s < w->opt.steps; s++) {
		memcpy(&b[NFIX + 3 * s], &r->loss_sum[s], 8);
		b[NFIX + 1 + 3 * s] = r->step_t0[s];
		b[NFIX + 2 + 3 * s] = r->step_t1[s];
	}
}

/* The root's result: the run's facts and its arrays, sized to the world; 0, or -1. */
static int alloc_result(const RtWorld *w, RtResult *res)
{
	const Plan *p = w->plan;
	size_t steps = (size_t)w->opt.steps, world = (size_t)p->world;
	res->world = p->world;
	res->steps = w->opt.steps;
	res->optim = w->optim;
	res->master = plan_prec(p->prec)->master > 0;
	res->first_step = w->step0;
	res->saves = w->saves;
	res->save_ns = w->save_ns;
	res->loss = calloc(steps, sizeof *res->loss);
	res->step_ns = calloc(steps, sizeof *res->step_ns);
	res->busy_ns = calloc(world, sizeof *res->busy_ns);
	res->peak_act = calloc(world, sizeof *res->peak_act);
	res->held_end = calloc(world, sizeof *res->held_end);
	res->model_bytes = calloc(world * 4, sizeof *res->model_bytes);
	res->mem_peak = calloc(world * 4, sizeof *res->mem_peak);
	res->nev = calloc(world, sizeof *res->nev);
	res->ev = calloc(world, sizeof *res->ev);
	return res->loss && res->step_ns && res->busy_ns && res->peak_act && res->held_end &&
	               res->model_bytes && res->mem_peak && res->nev && res->ev
	           ? 0
	           : -1;
}

/* Rank r's words (b) into the result; t0 and t1 keep each step's earliest start and
 * latest end so far. */
static void unpack_figures(const RtWorld *w, RtResult *res, int r, const int64_t *b,
                           int64_t *t0, int64_t *t1)
{
	const Plan *p = w->plan;
	double norm = (double)p->microbatches * p->dims[DIM_DP];
	res->busy_ns[r] = b[0];
	res->peak_act[r] = b[1];
	res->held_end[r] = b[2];
	res->nev[r] = b[3];
	for (int k = 0; k < 4; k++)
		res->model_bytes[4 * r + k] = b[5 + k];
	for (int k = 0; k < 4; k++)
		res->mem_peak[4 * r + k] = b[9 + k];
	for (int s = 0; s < w->opt.steps; s++) {
		double l;
		memcpy(&l, &b[NFIX + 3 * s], 8);
		if (b[4])
			res->loss[s] += l / norm;
		if (r == 0 || b[NFIX + 1 + 3 * s] < t0[s])
			t0[s] = b[NFIX + 1 + 3 * s];
		if (r == 0 || b[NFIX + 2 + 3 * s] > t1[s])
			t1[s] = b[NFIX + 2 + 3 * s];
	}
}

/* The root's result from every rank's n-byte block of words (all); *maxev the longest
 * event list. */
static int merge_figures(RtWorld *w, RtResult *res, const char *all, int64_t n, int64_t *maxev)
{
	int steps = w->opt.steps;
	int64_t *t0 = calloc((size_t)steps, sizeof *t0), *t1 = calloc((size_t)steps, sizeof *t1);
	if (alloc_result(w, res) || !t0 || !t1) {
		free(t0);
		free(t1);
		return rt_world_error(w, "out of memory");
	}
	for (int r = 0; r < w->plan->world; r++) {
		unpack_figures(w, res, r, (const int64_t *)(all + r * n), t0, t1);
		if (res->nev[r] > *maxev)
			*maxev = res->nev[r];
	}
	for (int s = 0; s < steps; s++)
		res->step_ns[s] = t1[s] - t0[s];
	free(t0);
	free(t1);
	return RT_OK;
}

/* Every rank's events to the root's result, padded to the longest list (maxev, the
 * root's, sent to all). */
static int gather_events(RtWorld *w, RtResult *res, int64_t maxev)
{
	if (rt_world_bcast(w, &maxev, sizeof maxev))
		return RT_EFAIL;
	int64_t en = (maxev ? maxev : 1) * (int64_t)sizeof(RtEvent);
	char *ev = calloc((size_t)w->nlocal, (size_t)en);
	if (!ev)
		return rt_world_error(w, "out of memory");
	for (int i = 0; i < w->nlocal; i++)
		if (w->ranks[i].nev)
			memcpy(ev + i * en, w->ranks[i].ev, (size_t)w->ranks[i].nev * sizeof(RtEvent));
	void *all;
	int rc = gather(w, ev, en, &all);
	free(ev);
	for (int r = 0; !rc && w->root && r < w->plan->world; r++) {
		if (!(res->ev[r] = malloc((size_t)(res->nev[r] + 1) * sizeof(RtEvent))))
			rc = rt_world_error(w, "out of memory");
		else
			memcpy(res->ev[r], (char *)all + r * en, (size_t)res->nev[r] * sizeof(RtEvent));
	}
	free(all);
	return rc;
}

/* Every rank's figures (and with --trace its events) into the root's result. */
static int gather_figures(RtWorld *w, RtResult *res)
{
	int64_t n = (int64_t)(NFIX + 3 * w->opt.steps) * 8, maxev = 0;
	char *mine = calloc((size_t)w->nlocal, (size_t)n);
	if (!mine)
		return rt_world_error(w, "out of memory");
	for (int i = 0; i < w->nlocal; i++)
		pack_figures(w, &w->ranks[i], (int64_t *)(mine + i * n));
	void *all;
	int rc = gather(w, mine, n, &all);
	free(mine);
	if (!rc && w->root)
		rc = merge_figures(w, res, all, n, &maxev);
	free(all);
	if (rc || !w->opt.trace)
		return rc;
	return gather_events(w, res, maxev);
}

int rt_world_run(RtWorld *w, RtResult *res)
{
	memset(res, 0, sizeof *res);
	/* A process that cannot run fails now, after opening took part in every collective
	 * step; the others fail alike (or end by the watchdog). */
	if (w->unable[0])
		return rt_world_error(w, "%s", w->unable);
	RtWatchdog *wd = rt_watchdog_start(w);
	if (!wd)
		return RT_EFAIL;
	int rc = w->launcher->launch(w, rank_entry);
	rt_watchdog_stop(wd);
	for (int i = 0; i < w->nlocal; i++)
		if (w->ranks[i].status != RT_OK)
			rc = RT_EFAIL;
	if (rc || atomic_load(&w->timed_out) || rt_aborted(w))
		return RT_EFAIL;
	rc = gather_figures(w, res);
	if (rc == RT_OK && w->opt.check)
		rc = rt_check(w, res);
	if (rc == RT_OK && w->opt.eval_data && w->root)
		rc = rt_reference_eval(w, res);
	for (int i = 0; i < w->nlocal; i++) {
		free(w->ranks[i].weights);
		w->ranks[i].weights = NULL;
	}
	return rc ? RT_EFAIL : RT_OK;
}

void rt_result_free(RtResult *res)
{
	free(res->loss);
	free(res->step_ns);
	free(res->busy_ns);
	free(res->peak_act);
	free(res->held_end);
	free(res->model_bytes);
	free(res->mem_peak);
	free(res->eval);
	if (res->ev)
		for (int r = 0; r < res->world; r++)
			free(res->ev[r]);
	free(res->ev);
	free(res->nev);
	memset(res, 0, sizeof *res);
}

/* ---- reporting ---- */

static void op_where(const RtWorld *w, const RtRank *r, int64_t op, FILE *f)
{
	const char *path = w->opt.plan_path ? w->opt.plan_path : "plan";
	if (r->pr->first_line)
		fprintf(f, "%s:%lld: ", path, (long long)(r->pr->first_line + op));
	else
		fprintf(f, "%s: op %lld of rank %d: ", path, (long long)op, r->rank);
}

static void report_to(RtWorld *w, FILE *f)
{
	char txt[256];
	if (atomic_load(&w->timed_out)) {
		fprintf(f, "piperun: error: no rank made progress for %g s (deadlock?); blocked ops:\n",
		        w->opt.timeout_s);
		for (int i = 0; i < w->nlocal; i++) {
			RtRank *r = &w->ranks[i];
			int64_t op = r->wd_op, end = r->wd_end;
			int step = r->wd_step;
			if (r->wd_done && r->status == RT_OK) {
				fprintf(f, "piperun: note: rank %d finished its list\n", r->rank);
				continue;
			}
			if (op < 0) {
				fprintf(f, "piperun: note: rank %d waits for the other ranks before step %d\n",
				        r->rank, step + 1);
				continue;
			}
			for (int64_t k = op; k < end && k < r->pr->nops; k++) {
				plan_format_op(w->plan, &r->pr->ops[k], txt, sizeof txt);
				op_where(w, r, k, f);
				fprintf(f, "note: rank %d blocked in step %d at '%s'\n", r->rank, step + 1, txt);
			}
		}
		if (w->nstuck)
			fprintf(f, "piperun: note: %d rank thread%s did not return within %d s of the "
			        "abort (stuck in an op): piperun ends without waiting for %s\n", w->nstuck,
			        w->nstuck == 1 ? "" : "s", RT_STUCK_GRACE_S, w->nstuck == 1 ? "it" : "them");
		return;
	}
	if (w->err[0])
		fprintf(f, "piperun: error: %s\n", w->err);
	for (int i = 0; i < w->nlocal; i++) {
		RtRank *r = &w->ranks[i];
		if (r->status != RT_EFAIL)
			continue;
		int64_t op = atomic_load(&r->cur_op);
		if (op >= 0 && op < r->pr->nops) {
			plan_format_op(w->plan, &r->pr->ops[op], txt, sizeof txt);
			op_where(w, r, op, f);
			fprintf(f, "error: rank %d, step %d, '%s': %s\n", r->rank,
			        atomic_load(&r->cur_step) + 1, txt, r->err[0] ? r->err : "failed");
		} else {
			fprintf(f, "piperun: error: rank %d: %s\n", r->rank, r->err[0] ? r->err : "failed");
		}
	}
}

/* The report is built in memory and written with one call: under mpirun each process's
 * stderr is a pipe the launcher forwards as it reads, and a line written in pieces could
 * come out spliced with another process's line. */
void rt_world_report(RtWorld *w, FILE *f)
{
	char *buf = NULL;
	size_t len = 0;
	if (w->quiet)
		return;
	FILE *m = open_memstream(&buf, &len);
	if (!m) {
		report_to(w, f);
		return;
	}
	report_to(w, m);
	if (fclose(m) == 0 && len)
		fwrite(buf, 1, len, f);
	fflush(f);
	free(buf);
}

