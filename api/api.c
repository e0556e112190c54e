/* libpipecc's public face (include/pipecc.h): each call wraps the module that does the
 * work (compiler/pipecc.c, plan/io.h, plan/verify, sim/sim.h, plan/mem.h, the torch CSV
 * emitter) and turns whatever would have been printed into PccDiag objects.  The
 * compiler's messages arrive through Diag's sink, whole and located; the plan reader's,
 * the verifier's and the simulator's through their PlanError or result.  Buffers come
 * from open_memstream and fmemopen, so every writer and reader runs unchanged. */
#include "../include/pipecc.h"
#include "../compiler/pipecc.h"
#include "../plan/binary.h"
#include "../plan/io.h"
#include "../plan/line.h"
#include "../plan/link.h"
#include "../plan/mem.h"
#include "../plan/oom.h"
#include "../sim/sim.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct PccDiags {
	int n, cap;
	int oom;     // a message could not be kept: the list is dropped
	PccDiag *v;
};

struct PccPlan {
	Plan *p;
	char *name;  // what messages about the plan call it
};

const char *pcc_version(void)
{
	return cli_version;
}

int pcc_diags_count(const PccDiags *ds)
{
	return ds ? ds->n : 0;
}

const PccDiag *pcc_diag(const PccDiags *ds, int i)
{
	return ds && i >= 0 && i < ds->n ? &ds->v[i] : NULL;
}

int pcc_diags_errors(const PccDiags *ds)
{
	int n = 0;
	for (int i = 0; i < pcc_diags_count(ds); i++)
		n += ds->v[i].severity == PCC_ERROR;
	return n;
}

void pcc_diags_free(PccDiags *ds)
{
	if (!ds)
		return;
	for (int i = 0; i < ds->n; i++) {
		free((char *)ds->v[i].file);
		free((char *)ds->v[i].message);
	}
	free(ds->v);
	free(ds);
}

/* Appends a message (copied); on failure marks the list, which the call then drops. */
static void add(PccDiags *ds, PccDiag m)
{
	if (!ds || ds->oom)
		return;
	if (ds->n == ds->cap) {
		int cap = ds->cap ? 2 * ds->cap : 4;
		PccDiag *v = realloc(ds->v, (size_t)cap * sizeof *v);
		if (!v) {
			ds->oom = 1;
			return;
		}
		ds->v = v, ds->cap = cap;
	}
	m.file = strdup(m.file ? m.file : "");
	m.message = strdup(m.message);
	if (!m.file || !m.message) {
		free((char *)m.file);
		free((char *)m.message);
		ds->oom = 1;
		return;
	}
	ds->v[ds->n++] = m;
}

static void addf(PccDiags *ds, const char *file, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* An error about file as a whole. */
static void addf(PccDiags *ds, const char *file, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	add(ds, (PccDiag){PCC_ERROR, file, 0, 0, -1, -1, msg});
}

static void add_plan_error(PccDiags *ds, const char *name, const PlanError *e)
{
	add(ds, (PccDiag){PCC_ERROR, name, e->line, 0, e->rank, e->op, e->msg});
}

/* The sink of the compiler's Diag. */
static void from_diag(void *ctx, const DiagMsg *m)
{
	static const PccSeverity sev[DIAG_KIND_COUNT] = {PCC_ERROR, PCC_WARNING, PCC_NOTE};
	int line = m->loc.line == DIAG_CMDLINE ? 0 : m->loc.line;
	add(ctx, (PccDiag){sev[m->kind], m->file, line, m->loc.col, -1, -1, m->msg});
}

static PccDiags *diags_new(void)
{
	return calloc(1, sizeof(PccDiags));
}

/* Hands the call's messages to the caller (NULL when out of memory), or frees them. */
static void diags_give(PccDiags *ds, PccDiags **out)
{
	if (ds && ds->oom) {
		pcc_diags_free(ds);
		ds = NULL;
	}
	if (out)
		*out = ds;
	else
		pcc_diags_free(ds);
}

/* p (taken) under name as a handle; NULL (p freed) when out of memory. */
static PccPlan *wrap(Plan *p, const char *name, PccDiags *ds)
{
	if (!p)
		return NULL;
	PccPlan *h = malloc(sizeof *h);
	char *n = strdup(name);
	if (!h || !n) {
		free(h);
		free(n);
		plan_free(p);
		addf(ds, name, "out of memory");
		return NULL;
	}
	*h = (PccPlan){p, n};
	return h;
}

void pcc_plan_free(PccPlan *h)
{
	if (!h)
		return;
	plan_free(h->p);
	free(h->name);
	free(h);
}

int pcc_plan_world(const PccPlan *h)
{
	return h->p->world;
}

int64_t pcc_plan_ops(const PccPlan *h)
{
	return plan_total_ops(h->p);
}

PccPlan *pcc_compile(const char *file, const char *src, size_t len, const PccOptions *o,
                     PccDiags **diags)
{
	PccDiags *ds = diags_new();
	PipeccOptions po = {0};
	if (o)
		po.schedule = o->schedule, po.microbatches = o->microbatches;
	Diag d;
	diag_init(&d, file, src, len, NULL);
	d.sink = from_diag, d.sink_ctx = ds;
	Plan *p = pipecc_compile(file, src, len, &po, &d);
	if (!p && !pcc_diags_errors(ds))
		addf(ds, file, "compilation failed");
	PccPlan *h = wrap(p, file, ds);
	diags_give(ds, diags);
	return h;
}

PccPlan *pcc_compile_file(const char *path, const PccOptions *o, PccDiags **diags)
{
	size_t len;
	char *src = pipecc_read_file(path, &len);
	if (!src) {
		PccDiags *ds = diags_new();
		addf(ds, path, "cannot read: %s", plan_strerror(errno));
		diags_give(ds, diags);
		return NULL;
	}
	PccPlan *h = pcc_compile(path, src, len, o, diags);
	free(src);
	return h;
}

PccPlan *pcc_plan_read_file(const char *path, PccDiags **diags)
{
	PccDiags *ds = diags_new();
	PlanError err;
	Plan *p = plan_read_file_as(path, PLAN_KEEP_ALL, &err);
	if (!p)
		add_plan_error(ds, path, &err);
	PccPlan *h = wrap(p, path, ds);
	diags_give(ds, diags);
	return h;
}

PccPlan *pcc_plan_read_buffer(const char *name, const void *buf, size_t len,
                              PccDiags **diags)
{
	PccDiags *ds = diags_new();
	PlanError err;
	Plan *p = NULL;
	FILE *f = len ? fmemopen((void *)buf, len, "rb") : NULL;
	if (!len) {
		addf(ds, name, "empty plan");
	} else if (!f) {
		addf(ds, name, "cannot read: %s", plan_strerror(errno));
	} else {
		p = plan_read_as(f, name, PLAN_KEEP_ALL, &err);
		fclose(f);
		if (!p)
			add_plan_error(ds, name, &err);
	}
	PccPlan *h = wrap(p, name, ds);
	diags_give(ds, diags);
	return h;
}

/* Writes p to f in fmt and closes f: 0, or -1 with the error in ds. */
static int write_to(const PccPlan *h, FILE *f, PccFormat fmt, const char *dest, PccDiags *ds)
{
	if (fmt < 0 || fmt >= PCC_FORMAT_COUNT) {
		if (f)
			fclose(f);
		addf(ds, dest, "no plan format %d", (int)fmt);
		return -1;
	}
	if (!f) {
		addf(ds, dest, "cannot write: %s", plan_strerror(errno));
		return -1;
	}
	int rc = plan_write_as(h->p, f, (int)fmt, 0);
	int e = errno;
	if (fclose(f) || rc) {
		addf(ds, dest, "cannot write: %s", plan_strerror(rc ? e : errno));
		return -1;
	}
	return 0;
}

int pcc_plan_write_file(const PccPlan *h, const char *path, PccFormat fmt, PccDiags **diags)
{
	PccDiags *ds = diags_new();
	int rc = write_to(h, fmt >= 0 && fmt < PCC_FORMAT_COUNT ? fopen(path, "wb") : NULL, fmt,
	                  path, ds);
	diags_give(ds, diags);
	return rc;
}

/* A stream into *buf, *len (freed with pcc_free), from open_memstream. */
static FILE *memout(char **buf, size_t *len)
{
	*buf = NULL, *len = 0;
	return open_memstream(buf, len);
}

/* After writing into a memstream: on failure the buffer is freed and NULL. */
static int memout_done(int rc, char **buf, size_t *len)
{
	if (rc) {
		free(*buf);
		*buf = NULL, *len = 0;
	}
	return rc;
}

int pcc_plan_write_buffer(const PccPlan *h, PccFormat fmt, char **buf, size_t *len,
                          PccDiags **diags)
{
	PccDiags *ds = diags_new();
	int rc = write_to(h, memout(buf, len), fmt, h->name, ds);
	diags_give(ds, diags);
	return memout_done(rc, buf, len);
}

int pcc_plan_verify(const PccPlan *h, PccDiags **diags)
{
	PccDiags *ds = diags_new();
	PlanError err;
	int rc = plan_verify(h->p, &err);
	if (rc)
		add_plan_error(ds, h->name, &err);
	diags_give(ds, diags);
	return rc ? -1 : 0;
}

static void copy_memory(const PlanMem *m, PccMemory *out)
{
	*out = (PccMemory){m->params, m->grads, m->master, m->optim, m->saved, m->comm, m->peak};
}

int pcc_plan_memory(const PccPlan *h, PccMemory *mem, PccDiags **diags)
{
	PccDiags *ds = diags_new();
	PlanMem *m = plan_mem_all(h->p);
	if (!m)
		addf(ds, h->name, "out of memory");
	for (int r = 0; m && r < h->p->world; r++)
		copy_memory(&m[r], &mem[r]);
	free(m);
	diags_give(ds, diags);
	return m ? 0 : -1;
}

/* The finding of a run that did not finish, at the first stuck op's plan line. */
static void add_finding(PccDiags *ds, const PccPlan *h, const Plan *p, const SimResult *r)
{
	PccDiag m = {PCC_ERROR, h->name, 0, 0, -1, -1, r->message};
	if (r->nstuck > 0 && r->stuck[0].op >= 0) {
		m.rank = plan_world_rank(p, r->stuck[0].rank), m.op = r->stuck[0].op;
		m.line = sim_op_line(p, r->stuck[0].rank, r->stuck[0].op);
	}
	add(ds, m);
}

/* res's figures from a finished run and the memory model. */
static int fill_result(PccSimResult *res, const Plan *p, const SimResult *r)
{
	PlanMem *mem = plan_mem_all(p);
	res->ranks = calloc((size_t)r->world, sizeof *res->ranks);
	if (!mem || !res->ranks) {
		free(mem);
		return -1;
	}
	res->makespan_ns = r->makespan, res->bubble = r->bubble, res->world = r->world;
	for (int i = 0; i < r->world; i++)
		res->ranks[i] = (PccRankStats){r->ranks[i].busy, r->ranks[i].finish,
		                               r->ranks[i].peak_act_bytes, mem[i].peak};
	free(mem);
	return 0;
}

/* Runs the verified plan p (h's, or its expansion) as pipesim does. */
static int run(const PccPlan *h, const Plan *p, PccModel model, PccSimResult *res,
               PccDiags *ds)
{
	SimOptions opt = {.model = (SimModel)model, .verified = 1};
	SimResult r;
	int rc = sim_run(p, &opt, &r);
	if (rc < 0) {
		addf(ds, h->name, "%s", r.message);
	} else if (rc > 0) {
		add_finding(ds, h, p, &r);
	} else if (r.makespan >= SIM_TIME_MAX) {
		addf(ds, h->name, "the step takes longer than the simulator counts (2^62 ns)");
		rc = -1;
	} else if (fill_result(res, p, &r)) {
		addf(ds, h->name, "out of memory");
		rc = -1;
	}
	sim_result_free(&r);
	return rc;
}

int pcc_simulate(const PccPlan *h, PccModel model, PccSimResult *res, PccDiags **diags)
{
	*res = (PccSimResult){0};
	if (model < 0 || model >= PCC_MODEL_COUNT) {
		PccDiags *ds = diags_new();
		addf(ds, h->name, "no simulation model %d", (int)model);
		diags_give(ds, diags);
		return -1;
	}
	if (pcc_plan_verify(h, diags))
		return -1;
	pcc_diags_free(diags ? *diags : NULL);
	PccDiags *ds = diags_new();
	/* A line plan whose lines do not all run alike runs whole, as in pipesim. */
	Plan *e = NULL;
	if (h->p->line && !plan_line_uniform(h->p)) {
		size_t failed;
		e = plan_expand(h->p, &failed);
		if (!e) {
			char m[512];
			addf(ds, h->name, "%s", plan_oom_text(m, sizeof m, 0, failed));
			diags_give(ds, diags);
			return -1;
		}
	}
	int rc = run(h, e ? e : h->p, model, res, ds);
	plan_free(e);
	diags_give(ds, diags);
	return rc;
}

void pcc_sim_free(PccSimResult *res)
{
	free(res->ranks);
	*res = (PccSimResult){0};
}

int pcc_emit_torch_csv(const PccPlan *h, int comms, char **buf, size_t *len,
                       PccDiags **diags)
{
	PccDiags *ds = diags_new();
	FILE *f = memout(buf, len);
	int rc = f ? pipecc_emit_torch_csv(h->p, f, comms) : -1;
	int e = errno;
	if (f && fclose(f))
		rc = -1, e = errno;
	if (rc)
		addf(ds, h->name, "cannot write the CSV: %s", plan_strerror(e));
	diags_give(ds, diags);
	return memout_done(rc, buf, len);
}

void pcc_free(void *buf)
{
	free(buf);
}
