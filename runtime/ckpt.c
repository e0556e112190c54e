/* Checkpoints (--save, --resume; docs/runtime.md "Checkpoints").
 *
 * A checkpoint is a directory DIR/step-N: one safetensors file per rank of dp replica 0
 * (the replicas hold the same weights and state: they apply the same averaged gradient;
 * under a distributed optimizer, where each holds a shard of the master weights and the
 * optimizer state, the dp group all-gathers them first, so the file is the same whole)
 * and a text MANIFEST naming every tensor, its file, stage, layer, part, shape and tp
 * shard, with a checksum per file and per tensor.  Tensors are named by the model's
 * logical layout, never the mesh's: `layer<G>.<kind>.<P>` is parameter P (the layer
 * table's order) of the layer at position G of the whole model (the stages' layers in
 * stage order), with `.m` and `.v` for the optimizer's first and second buffers.  A
 * tensor a tp group cuts is stored as its pieces, one per tp rank, and the manifest says
 * how it was cut (shard I/N, axis); any other is stored whole, by tp rank 0.  So a plan
 * with another pp split, dp or tp of the same layers reads the same names: resuming puts
 * the pieces back whole (rt_split_put) and cuts what the rank needs (rt_model_shard).  A
 * tied head's copy of the embedding's table on another rank is the same numbers and is
 * stored once, under the embedding's name.
 *
 * Saving is atomic: each writing rank puts its file (written, fsynced) and its lines of
 * the manifest in DIR/.tmp-N; after a barrier over every rank world rank 0 joins the
 * lines into MANIFEST, fsyncs it, renames the directory to DIR/step-N and points
 * DIR/latest at it (written to a temporary name, fsynced, renamed).  A crash before the
 * rename leaves a .tmp-N that the next --save removes and --resume never reads.
 *
 * Data sampling and dropout masks are pure functions of (seed, step, replica, microbatch,
 * ...) (model.c), and the optimizer's step count is the step: seed and step are all a
 * bit-exact resume needs beside the tensors. */
#include "rt_private.h"
#include "safet.h"
#include "errf.h"
#include "mapf.h"
#include "../plan/checksum.h"
#include "../plan/line.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#define CK_MAGIC "pipecc-checkpoint"
#define CK_VERSION 1
#define CK_MANIFEST "MANIFEST"
#define CK_SUM PLAN_SUM_BLOCKS // the checksum kind written
#define CK_PATH (PATH_MAX + 128) // a file in a directory of PATH_MAX
#define RT_CKPT_MAX_SHARDS 4096  // tp pieces of a tensor, at most
#define CK_STR_(x) #x
#define CK_XSTR(x) CK_STR_(x)

/* The optimizer state's buffers, as RtStageBufs holds them: suffix of each name. */
static const char *const part_suffix[3] = {"", ".m", ".v"};

/* ---- the plan's tensors ---- */

typedef struct {
	char name[RT_ST_NAME]; // without the state's suffix
	int layer, part;       // in the stage
	int64_t rows, cols;    // whole
	int64_t off;           // in the stage's whole (tp = 1) buffer
	int copy;              // a tied head's copy: the embedding's table, stored by it
	const PlanLayer *ly;
	/* Written by a rank of a tp group (rank_pieces): its piece, shard of nshard cut
	 * along axis (LayerSplitAxis), or the whole (nshard 1) from tp rank 0 alone (skip:
	 * another tp rank's). */
	int shard, nshard, axis, skip;
} CkEnt;

/* The tp cut's axes as the manifest spells them, per LayerSplitAxis. */
static const char *const axis_names[LAYER_SPLIT_COUNT] = {"none", "rows", "cols"};

/* Stage s's parameters in its buffer's order (borrowed ones are not in it): *n of them
 * into out (malloc'd). */
static int stage_ents(const Plan *p, int s, CkEnt **out, int *n)
{
	const PlanStage *st = &p->stages[s];
	LayerShape shape = plan_shape(p);
	int cap = 0;
	*n = 0;
	for (int l = 0; l < st->nlayers; l++) {
		LayerTensors t;
		plan_layer_tensors(&st->layers[l], &shape, 1, &t);
		cap += t.nparams;
	}
	*out = malloc((size_t)(cap ? cap : 1) * sizeof **out);
	if (!*out)
		return -1;
	int64_t off = 0;
	for (int l = 0; l < st->nlayers; l++) {
		const PlanLayer *ly = &st->layers[l];
		LayerTensors t;
		plan_layer_tensors(ly, &shape, 1, &t);
		for (int j = t.borrowed; j < t.nparams; j++) {
			CkEnt *e = &(*out)[(*n)++];
			e->layer = l;
			e->part = j;
			e->rows = t.param[j].rows;
			e->cols = t.param[j].cols;
			e->off = off;
			e->copy = t.copy && j == 0;
			e->ly = ly;
			e->shard = 0;
			e->nshard = 1;
			e->axis = LAYER_SPLIT_NONE;
			e->skip = 0;
			int es = s, el = e->copy ? rt_model_embed_layer(p, &es) : l;
			if (el < 0)
				es = s, el = l;
			snprintf(e->name, sizeof e->name, "layer%d.%s.%d", rt_layer_position(p, es, el),
			         plan_layers[p->stages[es].layers[el].kind].name, e->copy ? 0 : j);
			off += e->rows * e->cols;
		}
	}
	return 0;
}

/* ---- writing ---- */

/* Rank r's pieces of stage s's entries e[0..n) (stage_ents' order): its layout's. */
static void rank_pieces(const RtRank *r, int s, CkEnt *e, int n)
{
	const RtStageModel *sm = &r->model->st[s];
	int tp = r->model->tp, i = 0;
	for (int l = 0; l < r->w->plan->stages[s].nlayers; l++) {
		const RtLayerAt *at = &sm->at[l];
		int64_t off = at->off;
		for (int j = at->t.borrowed; j < at->t.nparams && i < n; j++, i++) {
			const LayerTensor *pc = &at->t.param[j];
			int axis = tp > 1 ? at->t.split[j].axis : LAYER_SPLIT_NONE;
			e[i].rows = pc->rows;
			e[i].cols = pc->cols;
			e[i].off = off;
			e[i].axis = axis;
			e[i].nshard = axis == LAYER_SPLIT_NONE ? 1 : tp;
			e[i].shard = axis == LAYER_SPLIT_NONE ? 0 : r->coord[DIM_TP];
			e[i].skip = axis == LAYER_SPLIT_NONE && r->coord[DIM_TP] != 0;
			off += pc->rows * pc->cols;
		}
	}
}

static int write_all(int fd, const void *buf, size_t n, PlanHash *h)
{
	const char *s = buf;
	if (h)
		plan_hash_update(h, buf, n);
	while (n) {
		ssize_t k = write(fd, s, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		s += k;
		n -= (size_t)k;
	}
	return 0;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	close(fd);
	return rc;
}

/* Writes n bytes to path (created) and fsyncs it. */
static int write_file(const char *path, const void *buf, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
	if (fd < 0)
		return -1;
	int rc = write_all(fd, buf, n, NULL) || fsync(fd) ? -1 : 0;
	return close(fd) || rc ? -1 : 0;
}

/* A rank's part of a checkpoint in memory: its stages' entries and their state on the
 * host (host[3 * i + k]: stage i's state k), and the file's header. */
typedef struct {
	int n, nstate;
	const int *stages;
	CkEnt **ents;
	int *nents;
	float **host;
	RtStFile f;
} Part;

static void part_free(Part *o)
{
	for (int i = 0; o->host && i < 3 * o->n; i++)
		free(o->host[i]);
	for (int i = 0; o->ents && i < o->n; i++)
		free(o->ents[i]);
	free(o->host);
	free(o->ents);
	free(o->nents);
	rt_st_free(&o->f);
}

/* State k of local stage s (0 the parameters, or under bf16 the f32 master weights whose
 * rounding the kernels' parameters are; 1 and 2 the optimizer's buffers) whole, in the
 * rank's tp layout, into host.  Under a distributed optimizer the rank holds its shard
 * (rt_shard) of the master weights and the buffers: every dp member then all-gathers
 * the shards into a whole through the communicator's ALLGATHER (outside the plan's ops;
 * the shards are disjoint, so the whole is exact). */
static int fetch_state(RtRank *r, int s, const RtStageBufs *b, int k, float *host)
{
	RtTensor *src[3] = {b->master ? b->master : b->params, b->m, b->v};
	int64_t np = r->model->st[s].nparams, off, len;
	int dp = rt_optim_dp(r);
	if (!np)
		return RT_OK;
	if (dp == 1 || (k == 0 && !b->master))
		return r->dev->download(r, src[k], host);
	rt_shard(np, dp, r->coord[DIM_DP], &off, &len);
	RtTensor *all = rt_tensor_new(r, 1, np, RT_MEM_TEMP);
	if (!all)
		return RT_EFAIL;
	RtTensor mine = rt_tensor_view(all, off, 1, len), have = rt_tensor_view(src[k], 0, 1, len);
	/* op 0: a mismatch (which every member's same walk rules out) names the list's first */
	RtMsg msg = {.edge = s, .mb = -1, .dir = -1, .op = 0, .bytes = np * 4};
	const RtComm *c = r->w->comm;
	int rc = (len && r->dev->copy(r, &mine, &have)) || c->group_start(r) ||
	                 c->shard(r, all, 1, &msg) || c->group_end(r) || r->dev->sync(r) ||
	                 r->dev->download(r, all, host)
	             ? RT_EFAIL
	             : RT_OK;
	rt_tensor_free(r, all);
	return rc;
}

/* Rank r's n stages' state on the host (o->host), whole: collective over the dp group
 * under a distributed optimizer, so every member calls it. */
static int part_fetch(RtRank *r, RtStageBufs *const *bufs, Part *o)
{
	int n = o->n;
	o->nstate = plan_optim_state_bytes(r->w->optim.kind) / 4;
	o->host = calloc((size_t)(n ? n : 1) * 3, sizeof *o->host);
	if (!o->host)
		return rt_error(r, "out of memory writing the checkpoint");
	for (int i = 0; i < n; i++) {
		int64_t np = r->model->st[o->stages[i]].nparams;
		for (int k = 0; k <= o->nstate; k++) {
			if (!(o->host[3 * i + k] = malloc((size_t)(np ? np : 1) * sizeof(float))))
				return rt_error(r, "out of memory writing the checkpoint");
			if (fetch_state(r, o->stages[i], bufs[i], k, o->host[3 * i + k]))
				return RT_EFAIL;
		}
	}
	return RT_OK;
}

/* Rank r's part after step `step` (its state fetched): its entries, the header's
 * metadata and tensors. */
static int part_make(RtRank *r, int64_t step, Part *o)
{
	const Plan *p = r->w->plan;
	int n = o->n;
	char err[256], v[64], rank[32];
	o->ents = calloc((size_t)(n ? n : 1), sizeof *o->ents);
	o->nents = calloc((size_t)(n ? n : 1), sizeof *o->nents);
	if (!o->ents || !o->nents)
		return rt_error(r, "out of memory writing the checkpoint");
	snprintf(v, sizeof v, "%" PRId64, step);
	snprintf(rank, sizeof rank, "%d", r->rank);
	if (rt_st_meta(&o->f, "format", CK_MAGIC, err, sizeof err) ||
	    rt_st_meta(&o->f, "step", v, err, sizeof err) ||
	    rt_st_meta(&o->f, "optimizer", plan_optim_names[r->w->optim.kind], err, sizeof err) ||
	    rt_st_meta(&o->f, "rank", rank, err, sizeof err))
		return rt_error(r, "checkpoint: %s", err);
	for (int i = 0; i < n; i++) {
		if (stage_ents(p, o->stages[i], &o->ents[i], &o->nents[i]))
			return rt_error(r, "out of memory writing the checkpoint");
		rank_pieces(r, o->stages[i], o->ents[i], o->nents[i]);
		for (int e = 0; e < o->nents[i]; e++) {
			const CkEnt *c = &o->ents[i][e];
			for (int k = 0; k <= o->nstate && !c->copy && !c->skip; k++) {
				char name[RT_ST_NAME + 4];
				int64_t dim[2] = {c->rows, c->cols};
				snprintf(name, sizeof name, "%s%s", c->name, part_suffix[k]);
				if (rt_st_add(&o->f, name, 2, dim, err, sizeof err))
					return rt_error(r, "checkpoint: %s", err);
			}
		}
	}
	return RT_OK;
}

/* Writes part o's file into fd (hashing it into h) and its manifest lines into lf. */
static int part_write(const RtRank *r, const Part *o, const char *fname, int fd, PlanHash *h,
                      FILE *lf)
{
	const Plan *p = r->w->plan;
	int ti = 0;
	for (int i = 0; i < o->n; i++)
		for (int e = 0; e < o->nents[i]; e++) {
			const CkEnt *c = &o->ents[i][e];
			size_t bytes = (size_t)(c->rows * c->cols) * sizeof(float);
			for (int k = 0; k <= o->nstate && !c->copy && !c->skip; k++, ti++) {
				const float *d = o->host[3 * i + k] + c->off;
				if (write_all(fd, d, bytes, h))
					return -1;
				fprintf(lf, "tensor %s %s stage=%s layer=%d part=%d shape=%" PRId64 "x%" PRId64
				        " shard=%d/%d axis=%s %s=%016" PRIx64 "\n", o->f.t[ti].name, fname,
				        p->stages[o->stages[i]].name, c->layer, c->part, c->rows, c->cols,
				        c->shard, c->nshard, axis_names[c->axis], plan_sums[CK_SUM].name,
				        plan_hash(CK_SUM, d, bytes));
			}
		}
	return 0;
}

/* Rank r's file of the checkpoint after step `step` (its part o, state fetched) into tmp
 * (written, fsynced), and its lines of the manifest, the file's first, in rank<R>.list. */
static int write_rank(RtRank *r, const char *tmp, int64_t step, Part *o)
{
	char path[CK_PATH], fname[64], *list = NULL;
	size_t listlen = 0, hlen = 0;
	unsigned char *hdr = NULL;
	int rc = part_make(r, step, o);
	if (rc == RT_OK && !(hdr = rt_st_header(&o->f, &hlen)))
		rc = rt_error(r, "out of memory writing the checkpoint");
	snprintf(fname, sizeof fname, "rank%d.safetensors", r->rank);
	snprintf(path, sizeof path, "%s/%s", tmp, fname);
	int fd = rc ? -1 : open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
	FILE *lf = fd < 0 ? NULL : open_memstream(&list, &listlen);
	PlanHash h;
	plan_hash_init(&h, CK_SUM);
	if (rc == RT_OK && (!lf || write_all(fd, hdr, hlen, &h) ||
	                    part_write(r, o, fname, fd, &h, lf) || fsync(fd)))
		rc = rt_error(r, "checkpoint: %s: %s", path, strerror(errno));
	if (fd >= 0 && close(fd) && rc == RT_OK)
		rc = rt_error(r, "checkpoint: %s: %s", path, strerror(errno));
	if (lf && fclose(lf) && rc == RT_OK)
		rc = rt_error(r, "out of memory writing the checkpoint");
	if (rc == RT_OK) {
		char head[256];
		int hn = snprintf(head, sizeof head, "file %s %zu %s=%016" PRIx64 "\n", fname,
		                  hlen + (size_t)o->f.datalen, plan_sums[CK_SUM].name, plan_hash_final(&h));
		char *all = malloc((size_t)hn + listlen + 1);
		snprintf(path, sizeof path, "%s/rank%d.list", tmp, r->rank);
		if (!all) {
			rc = rt_error(r, "out of memory writing the checkpoint");
		} else {
			memcpy(all, head, (size_t)hn);
			memcpy(all + hn, list, listlen);
			if (write_file(path, all, (size_t)hn + listlen))
				rc = rt_error(r, "checkpoint: %s: %s", path, strerror(errno));
			free(all);
		}
	}
	free(list);
	free(hdr);
	return rc;
}

/* Removes a checkpoint directory's files we write, then the directory; 0 when done or
 * absent. */
static int remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -1;
	struct dirent *e;
	char path[CK_PATH];
	while ((e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			unlink(path);
		}
	closedir(d);
	return rmdir(dir);
}

/* World rank 0, once every rank's files are in tmp: the manifest, the rename, latest. */
static int finish(RtRank *r, const char *tmp, int64_t step)
{
	RtWorld *w = r->w;
	const Plan *p = w->plan;
	const char *dir = w->opt.save;
	char *man = NULL, path[CK_PATH], final[CK_PATH];
	size_t len = 0;
	FILE *m = open_memstream(&man, &len);
	if (!m)
		return rt_error(r, "out of memory writing the checkpoint");
	fprintf(m, "%s %d\nstep %" PRId64 "\nseed %" PRIu64 "\noptimizer %s\n"
	        "plan %s pp=%d dp=%d tp=%d\n", CK_MAGIC, CK_VERSION, step, w->opt.seed,
	        plan_optim_names[w->optim.kind], p->name, p->dims[DIM_PP], p->dims[DIM_DP],
	        p->dims[DIM_TP]);
	int rc = 0;
	for (int k = 0; k < p->world && !rc; k++) {
		int c[DIM_COUNT];
		plan_mesh_coords(p, k, c);
		if (c[DIM_DP])
			continue;
		snprintf(path, sizeof path, "%s/rank%d.list", tmp, k);
		FILE *f = fopen(path, "r");
		if (!f) {
			rc = -1;
			break;
		}
		char buf[4096];
		size_t got;
		while ((got = fread(buf, 1, sizeof buf, f)))
			fwrite(buf, 1, got, m);
		rc = ferror(f) ? -1 : 0;
		fclose(f);
		unlink(path);
	}
	if (fclose(m) || rc) {
		free(man);
		return rt_error(r, "checkpoint: %s: %s", path, strerror(errno));
	}
	snprintf(path, sizeof path, "%s/" CK_MANIFEST, tmp);
	rc = write_file(path, man, len);
	free(man);
	if (rc || fsync_dir(tmp))
		return rt_error(r, "checkpoint: %s: %s", path, strerror(errno));
	snprintf(final, sizeof final, "%s/step-%" PRId64, dir, step);
	if (remove_dir(final) || rename(tmp, final))
		return rt_error(r, "checkpoint: renaming %s to %s: %s", tmp, final, strerror(errno));
	char line[64];
	int n = snprintf(line, sizeof line, "step-%" PRId64 "\n", step);
	snprintf(path, sizeof path, "%s/.latest.tmp", dir);
	snprintf(final, sizeof final, "%s/latest", dir);
	if (write_file(path, line, (size_t)n) || rename(path, final) || fsync_dir(dir))
		return rt_error(r, "checkpoint: %s: %s", final, strerror(errno));
	return RT_OK;
}

int rt_ckpt_save(RtRank *r, int run_step, int n, const int *stages, RtStageBufs *const *bufs)
{
	RtWorld *w = r->w;
	int64_t step = w->step0 + run_step + 1; // steps done
	int64_t t0 = rt_now_ns();
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof tmp, "%s/.tmp-%" PRId64, w->opt.save, step);
	/* dp replica 0 writes; under a distributed optimizer its dp peers help it gather */
	Part o = {.n = n, .stages = stages};
	int writes = r->coord[DIM_DP] == 0, rc = RT_OK;
	if (writes || rt_optim_dp(r) > 1)
		rc = part_fetch(r, bufs, &o);
	if (rc == RT_OK && writes && mkdir(tmp, 0777) && errno != EEXIST)
		rc = rt_error(r, "checkpoint: %s: %s", tmp, strerror(errno));
	if (rc == RT_OK && writes)
		rc = write_rank(r, tmp, step, &o);
	part_free(&o);
	if (rc)
		return rc;
	rt_fault_save(r, run_step);
	rc = w->comm->barrier(r);
	if (rc == RT_OK && r->rank == 0) {
		rc = finish(r, tmp, step);
		w->save_ns += rt_now_ns() - t0;
		w->saves++;
	}
	return rc;
}

int rt_ckpt_prepare(const char *dir, char *err, size_t n)
{
	if (mkdir(dir, 0777) && errno != EEXIST)
		return rt_errf(err, n, "%s: %s", dir, strerror(errno));
	DIR *d = opendir(dir);
	if (!d)
		return rt_errf(err, n, "%s: %s", dir, strerror(errno));
	struct dirent *e;
	char path[CK_PATH];
	int rc = 0;
	while ((e = readdir(d)) && !rc)
		if (!strncmp(e->d_name, ".tmp-", 5)) { // an interrupted save
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			if (remove_dir(path))
				rc = rt_errf(err, n, "%s: cannot remove an interrupted save: %s", path,
				          strerror(errno));
		}
	closedir(d);
	return rc;
}

/* ---- reading ---- */

typedef struct {
	char name[64];
	int64_t bytes;
	int sumkind;
	uint64_t sum;
	void *map;
	size_t len;
	RtStFile st;
	int parsed;        // st read whole (a failed parse leaves some of it)
} CkFile;

typedef struct {
	char name[RT_ST_NAME];
	int file;
	int line;
	int64_t rows, cols;
	int shard, nshard, axis; // piece shard of nshard cut along axis (1: whole)
	int sumkind;
	uint64_t sum;
	const RtStTensor *st;
} CkTensor;

struct RtCkpt {
	char dir[PATH_MAX]; // the step directory
	int64_t step;
	uint64_t seed;
	int optim;          // OptimKind
	int nfiles, nt;
	CkFile *f;
	CkTensor *t;        // sorted by name
};

void rt_ckpt_close(RtCkpt *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->nfiles; i++) {
		rt_unmap_file(c->f[i].map, c->f[i].len);
		rt_st_free(&c->f[i].st);
	}
	free(c->f);
	free(c->t);
	free(c);
}

int64_t rt_ckpt_step(const RtCkpt *c)
{
	return c->step;
}

uint64_t rt_ckpt_seed(const RtCkpt *c)
{
	return c->seed;
}

const char *rt_ckpt_dir(const RtCkpt *c)
{
	return c->dir;
}

/* By name, then shard: a tensor's pieces follow one another. */
static int by_name(const void *a, const void *b)
{
	const CkTensor *x = a, *y = b;
	int d = strcmp(x->name, y->name);
	return d ? d : (x->shard > y->shard) - (x->shard < y->shard);
}

/* The tensor named name, its first piece when cut. */
static const CkTensor *find(const RtCkpt *c, const char *name)
{
	CkTensor key;
	snprintf(key.name, sizeof key.name, "%s", name);
	key.shard = 0;
	return bsearch(&key, c->t, (size_t)c->nt, sizeof *c->t, by_name);
}

/* "KIND=HEX" into *kind, *sum; -1 when it is not one. */
static int parse_sum(const char *s, int *kind, uint64_t *sum)
{
	char kinds[128];
	if (!s || (*kind = plan_sum_key(s, kinds, sizeof kinds)) < 0)
		return -1;
	const char *hex = strchr(s, '=') + 1;
	char *end;
	errno = 0;
	*sum = strtoull(hex, &end, 16);
	return errno || end == hex || *end || strlen(hex) != 16 ? -1 : 0;
}

/* The LayerSplitAxis spelled s, or -1. */
static int axis_of(const char *s)
{
	for (int a = 0; a < LAYER_SPLIT_COUNT; a++)
		if (!strcmp(s, axis_names[a]))
			return a;
	return -1;
}

/* The value of "key=..." in tok, or NULL. */
static const char *val(const char *tok, const char *key)
{
	size_t k = strlen(key);
	return tok && !strncmp(tok, key, k) && tok[k] == '=' ? tok + k + 1 : NULL;
}

static int map_file(const char *dir, CkFile *f, char *err, size_t n)
{
	char path[CK_PATH];
	snprintf(path, sizeof path, "%s/%s", dir, f->name);
	int e = rt_map_file(path, &f->map, &f->len); // a size without a map: a wrong size first
	if (e && !f->len)
		return rt_errf(err, n, "%s: error: %s", path, strerror(e));
	if (f->len != (size_t)f->bytes) // mapped or not: rt_ckpt_close unmaps it
		return rt_errf(err, n, "%s: error: %zu bytes, the manifest says %" PRId64 " (%s)", path,
		            f->len, f->bytes, f->len < (size_t)f->bytes ? "truncated" : "grown");
	if (e)
		return rt_errf(err, n, "%s: error: %s", path, strerror(e));
	char why[512];
	int bad = plan_hash(f->sumkind, f->map, f->len) != f->sum;
	if (rt_st_parse(&f->st, f->map, f->len, why, sizeof why))
		return rt_errf(err, n, "%s: error: %s%s", path, bad ? "checksum mismatch; " : "", why);
	f->parsed = 1;
	if (bad)
		return rt_errf(err, n, "%s: error: checksum mismatch (its header reads; a tensor's "
		            "bytes or the header's changed)", path);
	return 0;
}

/* After a file checksum mismatch, the tensor whose own checksum differs, if any. */
static int locate(const RtCkpt *c, int file, char *err, size_t n)
{
	for (int i = 0; i < c->nt; i++) {
		const CkTensor *t = &c->t[i];
		if (t->file != file || !t->st)
			continue;
		const unsigned char *d = c->f[file].st.data + t->st->begin;
		if (plan_hash(t->sumkind, d, (size_t)(t->st->end - t->st->begin)) != t->sum)
			return rt_errf(err, n, "%s/%s: error: tensor '%s' (data bytes %" PRId64 " to %" PRId64
			            "): checksum mismatch (corrupted)", c->dir, c->f[file].name, t->name,
			            t->st->begin, t->st->end);
	}
	return 0;
}

/* A manifest's header line number head (0-4): the magic, step, seed, optimizer and
 * plan lines, in that order.  NULL, or what was expected. */
static const char *head_line(RtCkpt *c, int head, char **tok, int nt)
{
	char *end = NULL;
	if (head == 0)
		return nt != 2 || strcmp(tok[0], CK_MAGIC) || strcmp(tok[1], "1")
		           ? "expected '" CK_MAGIC " 1' (not a checkpoint, or a newer format)"
		           : NULL;
	if (head == 1 || head == 2) {
		const char *key = head == 1 ? "step" : "seed";
		unsigned long long v = 0;
		if (nt == 2 && !strcmp(tok[0], key))
			v = strtoull(tok[1], &end, 10);
		if (nt != 2 || strcmp(tok[0], key) || !end || *end || end == tok[1])
			return head == 1 ? "expected 'step N'" : "expected 'seed S'";
		if (head == 1)
			c->step = (int64_t)v;
		else
			c->seed = v;
		return NULL;
	}
	if (head == 3) {
		c->optim = -1;
		for (int k = 0; k < OPTIM_COUNT && nt == 2 && !strcmp(tok[0], "optimizer"); k++)
			if (!strcmp(tok[1], plan_optim_names[k]))
				c->optim = k;
		return c->optim < 0 ? "expected 'optimizer NAME'" : NULL;
	}
	return nt < 1 || strcmp(tok[0], "plan") ? "expected 'plan NAME ...'" : NULL;
}

/* A `file NAME BYTES KIND=HEX` line into c->f (room made by the caller). */
static const char *file_line(RtCkpt *c, char **tok)
{
	CkFile *f = &c->f[c->nfiles];
	char *end;
	memset(f, 0, sizeof *f);
	long long b = strtoll(tok[2], &end, 10);
	if (strlen(tok[1]) >= sizeof f->name || strchr(tok[1], '/') || *end || end == tok[2] ||
	    b < 0 || parse_sum(tok[3], &f->sumkind, &f->sum))
		return "expected 'file NAME BYTES KIND=HEX'";
	for (int k = 0; k < c->nfiles; k++)
		if (!strcmp(c->f[k].name, tok[1]))
			return "a file named twice";
	snprintf(f->name, sizeof f->name, "%s", tok[1]);
	f->bytes = b;
	c->nfiles++;
	return NULL;
}

/* A `tensor NAME FILE stage= layer= part= shape= shard= axis= KIND=HEX` line into c->t
 * (room made by the caller). */
static const char *tensor_line(RtCkpt *c, char **tok, int ln)
{
	CkTensor *t = &c->t[c->nt];
	memset(t, 0, sizeof *t);
	t->file = -1;
	for (int k = 0; k < c->nfiles; k++)
		if (!strcmp(c->f[k].name, tok[2]))
			t->file = k;
	const char *shape = val(tok[6], "shape");
	long long r = -1, cl = -1;
	char x = 0;
	if (shape && (sscanf(shape, "%lld%c%lld", &r, &x, &cl) != 3 || x != 'x'))
		r = -1;
	if (strlen(tok[1]) >= sizeof t->name || t->file < 0)
		return "expected 'tensor NAME FILE ...' naming a file line above";
	if (!val(tok[3], "stage") || !val(tok[4], "layer") || !val(tok[5], "part") || r < 0 ||
	    cl < 0 || !val(tok[7], "shard") || !val(tok[8], "axis") ||
	    parse_sum(tok[9], &t->sumkind, &t->sum))
		return "expected 'tensor NAME FILE stage=S layer=L part=P shape=RxC shard=I/N axis=A "
		       "KIND=HEX'";
	if (sscanf(val(tok[7], "shard"), "%d/%d%c", &t->shard, &t->nshard, &x) != 2 ||
	    t->nshard < 1 || t->nshard > RT_CKPT_MAX_SHARDS || t->shard < 0 || t->shard >= t->nshard)
		return "expected shard=I/N, 0 <= I < N <= " CK_XSTR(RT_CKPT_MAX_SHARDS);
	if ((t->axis = axis_of(val(tok[8], "axis"))) < 0 ||
	    (t->axis == LAYER_SPLIT_NONE) != (t->nshard == 1))
		return "expected axis=none for a whole tensor, rows or cols for a piece";
	snprintf(t->name, sizeof t->name, "%s", tok[1]);
	t->rows = r;
	t->cols = cl;
	t->line = ln;
	c->nt++;
	return NULL;
}

/* Grows an array of *cap elements of size sz holding n to hold one more; 0, or -1. */
static int room(void **a, int n, int *cap, size_t sz)
{
	if (n < *cap)
		return 0;
	int k = *cap ? 2 * *cap : 16;
	void *b = realloc(*a, (size_t)k * sz);
	if (!b)
		return -1;
	*a = b;
	*cap = k;
	return 0;
}

/* The manifest mp, line by line, into c; its tensors sorted by name and shard. */
static int read_manifest(RtCkpt *c, const char *mp, char *err, size_t n)
{
	FILE *mf = fopen(mp, "r");
	if (!mf)
		return rt_errf(err, n, "%s: error: %s (no checkpoint: --resume takes a --save directory "
		            "or one of its step-N)", mp, strerror(errno));
	char line[1024];
	int ln = 0, fcap = 0, tcap = 0, rc = 0;
	while (!rc && fgets(line, sizeof line, mf)) {
		size_t L = strlen(line);
		ln++;
		if (!L || line[L - 1] != '\n') {
			rc = rt_errf(err, n, "%s:%d: error: line too long or unterminated", mp, ln);
			break;
		}
		line[L - 1] = 0;
		char *tok[16], *save = NULL;
		int nt = 0;
		for (char *s = strtok_r(line, " ", &save); s && nt < 16; s = strtok_r(NULL, " ", &save))
			tok[nt++] = s;
		const char *why;
		if (ln <= 5)
			why = head_line(c, ln - 1, tok, nt);
		else if (nt == 4 && !strcmp(tok[0], "file"))
			why = room((void **)&c->f, c->nfiles, &fcap, sizeof *c->f) ? "out of memory"
			                                                            : file_line(c, tok);
		else if (nt == 10 && !strcmp(tok[0], "tensor"))
			why = room((void **)&c->t, c->nt, &tcap, sizeof *c->t) ? "out of memory"
			                                                       : tensor_line(c, tok, ln);
		else
			why = "expected a 'file' or 'tensor' line";
		if (why)
			rc = rt_errf(err, n, "%s:%d: error: %s", mp, ln, why);
	}
	if (!rc && (ferror(mf) || ln < 5))
		rc = rt_errf(err, n, "%s:%d: error: %s", mp, ln, ferror(mf) ? strerror(errno) : "truncated");
	fclose(mf);
	if (rc)
		return rc;
	qsort(c->t, (size_t)c->nt, sizeof *c->t, by_name);
	for (int i = 0; i + 1 < c->nt; i++)
		if (!by_name(&c->t[i], &c->t[i + 1]))
			return rt_errf(err, n, "%s: error: tensor '%s' (shard %d) named twice", mp, c->t[i].name,
			            c->t[i].shard);
	return 0;
}

/* File k of c: mapped and verified, and its tensors those its manifest lines name. */
static int open_file(RtCkpt *c, int k, char *err, size_t n)
{
	char why[1024];
	if (map_file(c->dir, &c->f[k], why, sizeof why)) {
		/* A checksum mismatch in a file whose header reads: name the tensor. */
		if (c->f[k].parsed) {
			for (int i = 0; i < c->nt; i++)
				if (c->t[i].file == k)
					c->t[i].st = rt_st_find(&c->f[k].st, c->t[i].name);
			if (locate(c, k, err, n))
				return -1;
		}
		return rt_errf(err, n, "%s", why);
	}
	int count = 0;
	for (int i = 0; i < c->nt; i++) {
		CkTensor *t = &c->t[i];
		if (t->file != k)
			continue;
		count++;
		t->st = rt_st_find(&c->f[k].st, t->name);
		if (!t->st || t->st->ndim != 2 || t->st->dim[0] != t->rows || t->st->dim[1] != t->cols)
			return rt_errf(err, n, "%s/%s: error: tensor '%s': %s the manifest's %" PRId64 "x%" PRId64,
			            c->dir, c->f[k].name, t->name, t->st ? "its shape is not" : "absent, unlike",
			            t->rows, t->cols);
	}
	if (count != c->f[k].st.n)
		return rt_errf(err, n, "%s/%s: error: %d tensors, the manifest names %d", c->dir,
		            c->f[k].name, c->f[k].st.n, count);
	return 0;
}

RtCkpt *rt_ckpt_open(const char *path, char *err, size_t n)
{
	RtCkpt *c = calloc(1, sizeof *c);
	char mp[PATH_MAX + 16];
	if (!c) {
		rt_errf(err, n, "out of memory");
		return NULL;
	}
	/* DIR with `latest`, or a step directory with a manifest. */
	snprintf(mp, sizeof mp, "%s/latest", path);
	FILE *lf = fopen(mp, "r");
	if (lf) {
		char step[256] = "";
		int ok = fgets(step, sizeof step, lf) != NULL;
		fclose(lf);
		step[strcspn(step, "\n")] = 0;
		if (!ok || strncmp(step, "step-", 5) || strchr(step, '/')) {
			rt_errf(err, n, "%s: error: not a step directory's name ('%s')", mp, step);
			rt_ckpt_close(c);
			return NULL;
		}
		snprintf(c->dir, sizeof c->dir, "%s/%s", path, step);
	} else {
		snprintf(c->dir, sizeof c->dir, "%s", path);
	}
	snprintf(mp, sizeof mp, "%s/" CK_MANIFEST, c->dir);
	int rc = read_manifest(c, mp, err, n);
	for (int k = 0; k < c->nfiles && !rc; k++)
		rc = open_file(c, k, err, n);
	if (rc) {
		rt_ckpt_close(c);
		return NULL;
	}
	return c;
}

/* ---- against a plan ---- */

/* Entry e's piece when cut in nshard (its layer's tensors at that tp): shape, split. */
static void piece_of(const Plan *p, const CkEnt *e, int nshard, LayerTensor *pc, LayerSplit *sp)
{
	LayerShape shape = plan_shape(p);
	LayerTensors t;
	plan_layer_tensors(e->ly, &shape, nshard, &t);
	*pc = t.param[e->part];
	*sp = t.split[e->part];
}

/* 0 when the pieces t[0..) of entry e (whole: e's shape) fit the plan's layer cut
 * t->nshard ways, else -1 naming the first that does not. */
static int check_pieces(const RtCkpt *c, const Plan *p, const CkEnt *e, const CkTensor *t,
                        char *err, size_t n)
{
	int ns = t->nshard;
	LayerTensor pc;
	LayerSplit sp;
	piece_of(p, e, ns, &pc, &sp);
	int fits = sp.axis == t->axis;
	for (int k = 0; k < sp.nseg && fits; k++)
		fits = sp.seg[k] % ns == 0;
	for (int k = 0; k < ns; k++) {
		const CkTensor *q = t + k;
		if (q >= c->t + c->nt || strcmp(q->name, t->name) || q->shard != k || q->nshard != ns)
			return rt_errf(err, n, "checkpoint %s: tensor '%s' lacks its shard %d of %d", c->dir,
			            t->name, k, ns);
		if (!fits || q->rows != pc.rows || q->cols != pc.cols)
			return rt_errf(err, n, "checkpoint %s/%s: tensor '%s' shard %d/%d is %" PRId64 "x%" PRId64
			            " cut along %s, and the plan's cut %d ways is %" PRId64 "x%" PRId64
			            " along %s", c->dir, c->f[q->file].name, t->name, k, ns, q->rows, q->cols,
			            axis_names[q->axis], ns, pc.rows, pc.cols, axis_names[sp.axis]);
	}
	return 0;
}

int rt_ckpt_check(const RtCkpt *c, const Plan *p, int optim, char *err, size_t n)
{
	if (c->optim != optim)
		return rt_errf(err, n, "checkpoint %s: saved with the %s optimizer, and this run's is %s (its "
		            "state differs: give --optimizer %s)", c->dir, plan_optim_names[c->optim],
		            plan_optim_names[optim], plan_optim_names[c->optim]);
	int nstate = plan_optim_state_bytes(optim) / 4, rc = 0;
	char *seen = calloc((size_t)(c->nt ? c->nt : 1), 1);
	if (!seen)
		return rt_errf(err, n, "out of memory");
	for (int s = 0; s < p->nstages && !rc; s++) {
		CkEnt *e;
		int ne;
		if (stage_ents(p, s, &e, &ne)) {
			rc = rt_errf(err, n, "out of memory");
			break;
		}
		for (int i = 0; i < ne && !rc; i++)
			for (int k = 0; k <= nstate && !rc; k++) {
				char name[RT_ST_NAME + 4];
				snprintf(name, sizeof name, "%s%s", e[i].name, part_suffix[k]);
				const CkTensor *t = find(c, name);
				if (!t)
					rc = rt_errf(err, n, "checkpoint %s: the plan's tensor '%s' (stage %s, its layer %d) "
					          "is not in the checkpoint (another model?)", c->dir, name,
					          p->stages[s].name, e[i].layer);
				else if (t->nshard > 1)
					rc = check_pieces(c, p, &e[i], t, err, n);
				else if (t->rows != e[i].rows || t->cols != e[i].cols)
					rc = rt_errf(err, n, "checkpoint %s/%s: tensor '%s' is %" PRId64 "x%" PRId64 ", and "
					          "the plan's (stage %s, its layer %d) is %" PRId64 "x%" PRId64, c->dir,
					          c->f[t->file].name, name, t->rows, t->cols, p->stages[s].name,
					          e[i].layer, e[i].rows, e[i].cols);
				for (int q = 0; !rc && q < t->nshard; q++)
					seen[t - c->t + q] = 1;
			}
		free(e);
	}
	const CkTensor *first = NULL; // the first tensor of the manifest the plan lacks
	for (int i = 0; i < c->nt && !rc; i++)
		if (!seen[i] && (!first || c->t[i].line < first->line))
			first = &c->t[i];
	if (first)
		rc = rt_errf(err, n, "checkpoint %s/" CK_MANIFEST ":%d: tensor '%s' is not in the plan "
		          "(another model?)", c->dir, first->line, first->name);
	free(seen);
	return rc;
}

int rt_ckpt_fill(const RtCkpt *c, const Plan *p, int s, int k, float *whole)
{
	CkEnt *e;
	int ne;
	if (stage_ents(p, s, &e, &ne))
		return -1;
	for (int i = 0; i < ne; i++) {
		char name[RT_ST_NAME + 4];
		snprintf(name, sizeof name, "%s%s", e[i].name, part_suffix[k]);
		const CkTensor *t = find(c, name); // rt_ckpt_check found every one, and its pieces
		if (t->nshard == 1) {
			memcpy(whole + e[i].off, c->f[t->file].st.data + t->st->begin,
			       (size_t)(e[i].rows * e[i].cols) * sizeof(float));
			continue;
		}
		LayerTensor pc;
		LayerSplit sp;
		piece_of(p, &e[i], t->nshard, &pc, &sp);
		float *buf = malloc((size_t)(pc.rows * pc.cols + 1) * sizeof(float));
		if (!buf) {
			free(e);
			return -1;
		}
		for (int q = 0; q < t->nshard; q++) { // the file's bytes may lie unaligned
			memcpy(buf, c->f[t[q].file].st.data + t[q].st->begin,
			       (size_t)(pc.rows * pc.cols) * sizeof(float));
			rt_split_put(&pc, &sp, t->nshard, q, buf, whole + e[i].off);
		}
		free(buf);
	}
	free(e);
	return 0;
}
