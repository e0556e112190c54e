/* piperun as a tool (piperun.h): everything between the parsed command line and the
 * exit status, over the public runtime API only (rt_world_open / run / close).
 * Combinations and the --trace path are checked before the plan is read, so a bad path
 * costs no run; the figures go to standard output on the process holding world rank 0,
 * the trace through cli_write (whole or not at all).  Under a launcher only the first
 * process prints what every process would. */
#include "piperun.h"
#include "hf.h"
#include "../plan/io.h"
#include "../plan/oom.h"
#include "../plan/line.h"
#include "../plan/units.h"

#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const piperun_dtype_names[RT_DTYPE_COUNT] = {"f32", "bf16"};

int piperun_first_process(void)
{
	const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
	for (int i = 0; i < 4; i++) {
		const char *v = getenv(vars[i]);
		if (v)
			return atoi(v) == 0;
	}
	return 1;
}

const char *piperun_backend_help(void)
{
	static char buf[256], names[128];
	snprintf(buf, sizeof buf,
	         "one of those built in: %s (default: mpi when\n"
	         "started by mpirun or srun with more than one process,\n"
	         "else %s)",
	         rt_backend_names(names, sizeof names), rt_backend_default());
	return buf;
}

const char *piperun_check_help(void)
{
	static char buf[256];
	snprintf(buf, sizeof buf,
	         "also run the model sequentially and compare every\n"
	         "step's loss and the final weights; exit 1 beyond the\n"
	         "bound: %g x the distance a shadow reference's\n"
	         "rounding makes, + %.2g (docs/runtime.md)",
	         RT_CHECK_NOISE_FACTOR, RT_CHECK_FLOOR);
	return buf;
}

const char *piperun_version_extra(void)
{
	static char buf[256], names[128];
	snprintf(buf, sizeof buf, "plan format %d; backends: %s", PLAN_VERSION,
	         rt_backend_names(names, sizeof names));
	return buf;
}

/* busy of rank r (-1: the mean over ranks): the fraction of the step it spends
 * computing, the same definition as pipesim's (docs/pipesim.md "Summary"): its compute
 * time over the steps run / the steps' total time.  Text prints it in percent, JSON as
 * a fraction, next to the compute time per step. */
static double busy_of(const RtResult *res, int r)
{
	double steps = 0, sum = 0;
	for (int s = 0; s < res->steps; s++)
		steps += (double)res->step_ns[s];
	if (!(steps > 0) || res->world <= 0)
		return 0;
	if (r >= 0)
		return (double)res->busy_ns[r] / steps;
	for (int k = 0; k < res->world; k++)
		sum += (double)res->busy_ns[k];
	return sum / ((double)res->world * steps);
}

/* "optimizer adamw lr=0.001 beta1=0.9 ... state 1234 bytes": the settings run (the
 * plan's or the options') and the optimizer-state bytes over all ranks. */
static void print_optim(const RtResult *res)
{
	PlanOptim o = res->optim;
	printf("optimizer %s", plan_optim_names[o.kind]);
	for (int h = 0; h < RT_HYPER_COUNT; h++)
		if (RT_HYPER_OF(h, o.kind))
			printf(" %s=%g", rt_hypers[h].name, *rt_hyper_field(&o, h));
	int64_t state = 0;
	for (int r = 0; r < res->world; r++)
		state += res->model_bytes[4 * r + 2];
	char b[32];
	printf(", state %s\n", plan_mem_text(b, sizeof b, state));
}

/* The check's bound and what set it (docs/runtime.md "--check and its bound"). */
static const char *bound_text(const RtResult *res, char *buf, size_t n)
{
	if (res->bound == RT_BOUND_GIVEN)
		snprintf(buf, n, "bound %.3g, --tolerance", res->tolerance);
	else if (res->bound == RT_BOUND_BF16)
		snprintf(buf, n, "bound %.3g, --dtype bf16's", res->tolerance);
	else if (!res->shadow)
		snprintf(buf, n, "bound %.3g, the floor: no error above it, no shadow run",
		         res->tolerance);
	else
		snprintf(buf, n, "bound %.3g = %g x the shadow reference's distance %.3g + %.3g",
		         res->tolerance, RT_CHECK_NOISE_FACTOR, res->noise, RT_CHECK_FLOOR);
	return buf;
}

/* Tokens (rows of a non-token input) and model FLOPs (F, B and W of every layer, as the
 * layer table counts them; recomputation not counted) of one step over all replicas. */
static void step_work(const Plan *p, double *tokens, double *flops)
{
	LayerShape sh = plan_shape(p);
	double mbs = (double)p->microbatches * p->dims[DIM_DP];
	*tokens = (sh.vocab ? (double)sh.batch * (double)sh.seq : (double)p->rows) * mbs;
	*flops = 0;
	for (int s = 0; s < p->nstages; s++)
		for (int l = 0; l < p->stages[s].nlayers; l++) {
			LayerCost c = plan_layer_figures(&p->stages[s].layers[l], &sh);
			*flops += (c.flops[0] + c.flops[1] + c.flops[2]) * mbs;
		}
}

static void print_text(const Plan *p, const RtWorld *w, const RtResult *res)
{
	char t[4][32];
	printf("piperun: %s (%s, pp=%d dp=%d tp=%d, %d rank%s, %d microbatch%s of ", p->name,
	       p->schedule, p->dims[DIM_PP], p->dims[DIM_DP], p->dims[DIM_TP], p->world,
	       p->world == 1 ? "" : "s", p->microbatches, p->microbatches == 1 ? "" : "es");
	if (p->seq > 0)
		printf("%d sequence%s x %d tokens", p->rows / p->seq, p->rows / p->seq == 1 ? "" : "s",
		       p->seq);
	else
		printf("%dx%d", p->rows, p->cols);
	printf(") on %s, %d step%s\n", rt_world_backend(w), res->steps, res->steps == 1 ? "" : "s");
	print_optim(res);
	const RtOptions *o = rt_world_options(w);
	if (o->resume)
		printf("resumed from %s after step %" PRId64 "\n", rt_ckpt_dir(o->resume),
		       res->first_step);
	double tok, fl;
	step_work(p, &tok, &fl);
	for (int s = 0; s < res->steps; s++) {
		double sec = res->step_ns[s] / 1e9;
		printf("step %" PRId64 ": loss %.6f time %s, %.0f tokens/s, %.4g TFLOP/s\n",
		       res->first_step + s + 1, res->loss[s],
		       plan_time_text(t[0], 32, (int64_t)res->step_ns[s]), sec > 0 ? tok / sec : 0,
		       sec > 0 ? fl / sec / 1e12 : 0);
		if (res->eval && !isnan(res->eval[s]))
			printf("eval after step %" PRId64 ": loss %.6f (held-out, %d sequences)\n",
			       res->first_step + s + 1,
			       res->eval[s], res->eval_seqs);
	}
	if (res->steps > 1) {
		double sum = 0;
		for (int s = 1; s < res->steps; s++)
			sum += (double)res->step_ns[s];
		printf("mean step time (steps 2-%d): %s\n", res->steps,
		       plan_time_text(t[0], 32, (int64_t)(sum / (res->steps - 1))));
	}
	printf("busy %.2f %% (mean over ranks)\n", 100.0 * busy_of(res, -1));
	printf("rank  pp  dp  tp   busy %%    compute   peak act peak total\n");
	for (int r = 0; r < res->world; r++) {
		int c[DIM_COUNT];
		plan_mesh_coords(p, r, c);
		printf("%4d %3d %3d %3d %7.2f %10s %10s %10s\n", r, c[DIM_PP], c[DIM_DP], c[DIM_TP],
		       100.0 * busy_of(res, r),
		       plan_time_text(t[1], 32, (int64_t)(res->busy_ns[r] / res->steps)),
		       plan_mem_text(t[2], 32, res->peak_act[r]),
		       plan_mem_text(t[3], 32, res->mem_peak[4 * r]));
	}
	if (res->saves)
		printf("checkpoints: %d written to %s (latest step-%" PRId64 "), %s in all\n",
		       res->saves, o->save, res->first_step + res->steps,
		       plan_time_text(t[0], 32, (int64_t)res->save_ns));
	if (res->checked) {
		char bound[256];
		printf("check: loss max abs err %.3g rel %.3g; weights max abs err %.3g rel %.3g "
		       "(%" PRId64 " weights): %s (%s)\n",
		       res->loss_abs, res->loss_rel, res->weight_abs, res->weight_rel, res->nweights,
		       res->check_ok ? "ok" : "FAILED", bound_text(res, bound, sizeof bound));
	}
}

static void jstr(const char *s)
{
	putchar('"');
	for (; s && *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

/* A JSON number, or null where JSON has none (a diverged run's inf and nan). */
static void jnum(const char *fmt, double v)
{
	if (isfinite(v))
		printf(fmt, v);
	else
		printf("null");
}

static void print_json(const Plan *p, const RtWorld *w, const RtResult *res)
{
	printf("{\"pipeline\": ");
	jstr(p->name);
	printf(", \"schedule\": ");
	jstr(p->schedule);
	printf(", \"backend\": \"%s\", \"world\": %d, \"pp\": %d, \"dp\": %d, \"tp\": %d, "
	       "\"microbatches\": %d,\n \"steps\": [",
	       rt_world_backend(w), p->world, p->dims[DIM_PP], p->dims[DIM_DP], p->dims[DIM_TP],
	       p->microbatches);
	for (int s = 0; s < res->steps; s++) {
		printf("%s{\"step\": %" PRId64 ", \"loss\": ", s ? ", " : "", res->first_step + s + 1);
		jnum("%.9g", res->loss[s]);
		printf(", \"time_us\": %.3f", res->step_ns[s] / 1e3);
		if (res->eval && !isnan(res->eval[s])) {
			printf(", \"eval_loss\": ");
			jnum("%.9g", res->eval[s]);
		}
		printf("}");
	}
	double mean = res->step_ns[0];
	if (res->steps > 1) {
		mean = 0;
		for (int s = 1; s < res->steps; s++)
			mean += (double)res->step_ns[s];
		mean /= res->steps - 1;
	}
	PlanOptim o = res->optim;
	printf("],\n \"optimizer\": {\"kind\": \"%s\"", plan_optim_names[o.kind]);
	for (int h = 0; h < RT_HYPER_COUNT; h++)
		if (RT_HYPER_OF(h, o.kind))
			printf(", \"%s\": %.9g", rt_hypers[h].name, *rt_hyper_field(&o, h));
	printf("},\n \"mean_step_us\": %.3f,\n \"busy\": %.6f,\n \"ranks\": [", mean / 1e3,
	       busy_of(res, -1));
	for (int r = 0; r < res->world; r++) {
		printf("%s{\"rank\": %d, \"busy\": %.6f, \"compute_us\": %.3f, \"peak_act_bytes\": %" PRId64
		       ", \"held_at_end_bytes\": %" PRId64 ", \"param_bytes\": %" PRId64
		       ", \"grad_bytes\": %" PRId64 ", \"optim_state_bytes\": %" PRId64,
		       r ? ", " : "", r, busy_of(res, r), res->busy_ns[r] / 1e3 / res->steps,
		       res->peak_act[r], res->held_end[r], res->model_bytes[4 * r],
		       res->model_bytes[4 * r + 1], res->model_bytes[4 * r + 2]);
		if (res->master) // bf16: the f32 master weights, a class of their own (as pipesim's)
			printf(", \"master_bytes\": %" PRId64, res->model_bytes[4 * r + 3]);
		printf(", \"peak_total_bytes\": %" PRId64 ", \"saved_bytes_at_peak\": %" PRId64
		       ", \"inflight_bytes_at_peak\": %" PRId64 ", \"peak_op\": %" PRId64 "}",
		       res->mem_peak[4 * r], res->mem_peak[4 * r + 1], res->mem_peak[4 * r + 2],
		       res->mem_peak[4 * r + 3]);
	}
	printf("]");
	const RtOptions *opt = rt_world_options(w);
	if (opt->resume) {
		printf(",\n \"resumed_from\": ");
		jstr(rt_ckpt_dir(opt->resume));
	}
	if (res->saves) {
		printf(",\n \"checkpoints\": {\"dir\": ");
		jstr(opt->save);
		printf(", \"written\": %d, \"latest\": %" PRId64 ", \"ms\": %.3f}", res->saves,
		       res->first_step + res->steps, res->save_ns / 1e6);
	}
	if (res->checked) {
		/* The bound's figures: null where they do not apply (the factor and the floor of
		 * a bound set otherwise, the noise without a shadow run). */
		int derived = res->bound == RT_BOUND_NOISE;
		double v[] = {res->loss_abs, res->loss_rel, res->weight_abs, res->weight_rel};
		const char *k[] = {"loss_abs", "loss_rel", "weight_abs", "weight_rel"};
		printf(",\n \"check\": {\"ok\": %s", res->check_ok ? "true" : "false");
		for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
			printf(", \"%s\": ", k[i]);
			jnum("%.6g", v[i]);
		}
		printf(", \"weights\": %" PRId64 ", \"tolerance\": ", res->nweights);
		jnum("%.6g", res->tolerance);
		printf(", \"bound\": \"%s\", \"noise_factor\": ", rt_bound_names[res->bound]);
		jnum("%g", derived ? RT_CHECK_NOISE_FACTOR : NAN);
		printf(", \"floor\": ");
		jnum("%.6g", derived ? RT_CHECK_FLOOR : NAN);
		printf(", \"shadow\": %s, \"noise\": ", res->shadow ? "true" : "false");
		jnum("%.6g", res->shadow ? res->noise : NAN);
		printf("}");
	}
	printf("}\n");
}

static void plan_error(const CliTool *t, const Plan *p, const PlanError *e)
{
	if (t->silent)
		return;
	int64_t line = e->line;
	if (!line && p && e->rank >= 0 && e->rank < p->world && e->op >= 0 &&
	    p->ranks[e->rank].first_line)
		line = p->ranks[e->rank].first_line + e->op;
	if (e->at_byte) // a binary plan's reader: the byte offset
		fprintf(stderr, "%s: byte %" PRId64 ": error: %s\n", t->in_name, line, e->msg);
	else if (line)
		fprintf(stderr, "%s:%" PRId64 ": error: %s\n", t->in_name, line, e->msg);
	else
		fprintf(stderr, "%s: error: %s\n", t->in_name, e->msg);
}

static int check_combinations(CliTool *t, PiperunArgs *a)
{
	if (a->calibrate && (a->o.check || a->json || a->trace))
		return cli_usage_error(t, "--calibrate prints cost lines; it takes no --check, --json "
		                          "or --trace");
	if (cli_given(t, &a->o.tolerance) && !a->o.check)
		return cli_usage_error(t, "--tolerance sets --check's bound; give --check too");
	if (cli_given(t, &a->o.eval_every) && !a->eval_data)
		return cli_usage_error(t, "--eval-every sets when --eval-data's loss is printed; give "
		                          "--eval-data too");
	if (cli_given(t, &a->data_format) && !a->data && !a->eval_data)
		return cli_usage_error(t, "--data-format reads --data's file; give --data too");
	if (cli_given(t, &a->o.save_every) && !a->o.save)
		return cli_usage_error(t, "--save-every sets when --save writes; give --save too");
	if (a->resume && (a->o.check || a->eval_data))
		return cli_usage_error(t, "--resume takes no --%s (its reference replays the training "
		                          "from the start)", a->o.check ? "check" : "eval-data");
	if (a->export_path && cli_is_std(a->export_path))
		return cli_usage_error(t, "--export writes a file, not standard output");
	if (a->init && a->resume)
		return cli_usage_error(t, "--init and --resume both give the starting weights; give one");
	if (a->resume && cli_given(t, &a->o.seed))
		return cli_usage_error(t, "--resume continues the checkpoint's seed; give no --seed");
	if (a->trace && cli_is_std(a->trace) && a->json)
		return cli_usage_error(t, "--json and --trace - both write to standard output");
	char msg[512];
	/* The optimizer's settings: the fields given replace the plan's (rt_optim_resolve). */
	a->o.optim_set = 0;
	if (cli_given(t, &a->optim)) {
		a->o.optim.kind = (uint8_t)a->optim;
		a->o.optim_set |= RT_OPTIM_SET_KIND;
	}
	for (int h = 0; h < RT_HYPER_COUNT; h++) {
		double *v = rt_hyper_field(&a->o.optim, h);
		if (!cli_given(t, v))
			continue;
		if (rt_hyper_check(h, *v, msg, sizeof msg))
			return cli_usage_error(t, "--%s: %s", rt_hypers[h].option, msg);
		a->o.optim_set |= RT_OPTIM_SET(h);
	}
	if (a->o.backend && rt_backend_check(a->o.backend, msg, sizeof msg))
		return cli_usage_error(t, "--backend: %s", msg);
	a->o.dtype = a->dtype;
	if (a->o.dtype == RT_DTYPE_BF16 &&
	    strcmp(a->o.backend ? a->o.backend : rt_backend_default(), "cuda"))
		return cli_usage_error(t, "--dtype bf16 needs --backend cuda (the CPU backends compute "
		                          "in f32 only)");
	return 0;
}

typedef struct {
	const Plan *p;
	const RtResult *res;
} TraceArg;

static int write_trace(FILE *f, void *arg)
{
	const TraceArg *ta = arg;
	return rt_trace_write(ta->p, ta->res, f);
}

static int64_t ops_done(void *arg)
{
	return rt_world_progress(arg);
}

/* The training's progress line (cli_progress_text): each step's number, loss, tokens/s
 * and time, the time left at the mean step time so far, and the model FLOP utilisation
 * against the plan's device rate (`device peak=`, when it states one), as llm.c prints. */
typedef struct {
	const Plan *p;
	const RtWorld *w;
	int steps, next;   // the run's steps; the next one to report
	int64_t first;     // steps done before the run (--resume)
	double tok, fl;    // one step's tokens and model FLOPs (step_work)
	double loss;       // the last reported step's loss and time
	int64_t ns, sum_ns; // ... and the reported steps' time
} Live;

static int live_text(void *arg, char *buf, size_t n, int latest)
{
	Live *v = arg;
	int got = 0;
	while (v->next < v->steps && (!got || latest) &&
	       !rt_world_step_live(v->w, v->next, &v->loss, &v->ns)) {
		v->sum_ns += v->ns;
		v->next++;
		got = 1;
	}
	if (!got && (!latest || !v->next))
		return 0;
	double sec = (double)v->ns / 1e9, left = (double)v->sum_ns / 1e9 / v->next * (v->steps - v->next);
	char loss[32] = "-", mfu[48] = ""; // "-": the loss stage runs in another process
	if (!isnan(v->loss))
		snprintf(loss, sizeof loss, "%.6f", v->loss);
	if (v->p->peak_flops > 0 && sec > 0)
		snprintf(mfu, sizeof mfu, " | MFU %.3g%%", 100.0 * v->fl / sec / (v->p->peak_flops * v->p->world));
	snprintf(buf, n, "step %" PRId64 "/%" PRId64 " | loss %s | %.0f tok/s | %.1f ms | %.1f s left%s",
	         v->first + v->next, v->first + v->steps, loss, sec > 0 ? v->tok / sec : 0, sec * 1e3,
	         left, mfu);
	return 1;
}

/* Prints the figures; returns the exit status. */
static int report(CliTool *t, PiperunArgs *a, const Plan *p, RtWorld *w, RtResult *res)
{
	int status = CLI_EXIT_OK;
	if (a->calibrate)
		rt_calibrate_write(p, res, stdout);
	else if (a->json)
		print_json(p, w, res);
	else if (!(a->trace && cli_is_std(a->trace)))
		print_text(p, w, res);
	if (cli_stdout_close(t))
		status = CLI_EXIT_FAIL;
	TraceArg ta = {p, res};
	if (a->trace && cli_write(t, a->trace, write_trace, &ta))
		status = CLI_EXIT_FAIL;
	for (int s = 0; s < res->steps; s++)
		if (!isfinite(res->loss[s])) { // Megatron stops on a nan loss or gradient norm too
			fprintf(stderr, "piperun: error: step %d: the loss is %s: the training diverged "
			                "(lower the learning rate, --lr; this run's: %g)\n",
			        s + 1, isnan(res->loss[s]) ? "nan" : "inf", res->optim.lr);
			status = CLI_EXIT_FAIL;
			break;
		}
	if (res->checked && !res->check_ok) { // name the larger error
		int loss = res->loss_rel > res->weight_rel;
		fprintf(stderr, "piperun: error: --check: the pipelined run differs from the "
		                "sequential one beyond the bound (%s: %.3g relative, bound %.3g)\n",
		        loss ? "loss" : "weights", loss ? res->loss_rel : res->weight_rel,
		        res->tolerance);
		status = CLI_EXIT_FAIL;
	}
	return status;
}

/* Maps --data's and --eval-data's files into *d and *e (NULL: not given) and checks
 * their ids against the plan's real vocabulary (never a padded row) and their length
 * against one sequence.  Returns 0, or -1 having said why, naming the file. */
static int open_data(const CliTool *t, const PiperunArgs *a, const Plan *p, RtData **d,
                     RtData **e)
{
	const char *path[2] = {a->data, a->eval_data};
	RtData **out[2] = {d, e};
	LayerShape sh = plan_shape(p);
	char msg[512];
	*d = *e = NULL;
	for (int i = 0; i < 2; i++) {
		if (!path[i])
			continue;
		if (!sh.vocab) {
			snprintf(msg, sizeof msg, "--%s needs a plan with token input (`input tokens BxS "
			         "vocab=V;`)", i ? "eval-data" : "data");
		} else if ((*out[i] = rt_data_open(path[i], a->data_format, msg, sizeof msg)) &&
		           !rt_data_check(*out[i], plan_vocab_real(&sh), sh.seq, msg, sizeof msg)) {
			continue;
		}
		if (!t->silent)
			fprintf(stderr, "%s: error: %s\n", path[i], msg);
		rt_data_close(*d);
		rt_data_close(*e);
		*d = *e = NULL;
		return -1;
	}
	return 0;
}

/* --export: the last checkpoint's weights (the run's final ones) with Hugging Face's
 * names; 0, or -1 having said why. */
static int export_model(const PiperunArgs *a, const Plan *p, int optim)
{
	char msg[1024];
	RtCkpt *c = rt_ckpt_open(a->o.save, msg, sizeof msg);
	int rc = !c || rt_hf_export(c, p, optim, a->export_path, msg, sizeof msg);
	if (rc)
		fprintf(stderr, "piperun: error: --export %s: %s\n", a->export_path, msg);
	rt_ckpt_close(c);
	return rc ? -1 : 0;
}

/* --export without --save writes the run's checkpoint to FILE.ckpt-tmp beside FILE (a
 * folder every process sees when FILE's does) and removes it once FILE is written. */
static int export_scratch(PiperunArgs *a)
{
	if (!a->export_path || a->o.save)
		return 0;
	size_t n = strlen(a->export_path) + sizeof ".ckpt-tmp";
	if (!(a->export_ck = malloc(n)))
		return -1;
	snprintf(a->export_ck, n, "%s.ckpt-tmp", a->export_path);
	a->o.save = a->export_ck;
	return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void export_scratch_end(PiperunArgs *a)
{
	if (a->export_ck && piperun_first_process())
		nftw(a->export_ck, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(a->export_ck);
	a->export_ck = NULL;
}

/* The files a run reads besides its plan: --data's, --eval-data's, --resume's, --init's. */
typedef struct {
	RtData *data, *eval;
	RtCkpt *ck;
	RtHf *hf;
} Inputs;

static void inputs_close(Inputs *in)
{
	rt_ckpt_close(in->ck);
	rt_hf_close(in->hf);
	rt_data_close(in->data);
	rt_data_close(in->eval);
}

/* Opens the run's input files into in and a->o (and prepares --save's folder); 0, or -1
 * having said why, all closed. */
static int inputs_open(const CliTool *t, PiperunArgs *a, const Plan *p, Inputs *in)
{
	char msg[1024];
	const char *say = NULL; // the message's prefix when one failed
	*in = (Inputs){0};
	if (open_data(t, a, p, &in->data, &in->eval))
		return -1;
	if ((a->resume && !(in->ck = rt_ckpt_open(a->resume, msg, sizeof msg))) ||
	    (a->o.save && piperun_first_process() && rt_ckpt_prepare(a->o.save, msg, sizeof msg)))
		say = a->resume && !in->ck ? "" : "piperun: error: --save ";
	else if (a->init && !(in->hf = rt_hf_open(a->init, p, msg, sizeof msg)))
		say = "";
	if (say) {
		if (!t->silent)
			fprintf(stderr, "%s%s\n", say, msg);
		inputs_close(in);
		return -1;
	}
	a->o.data = in->data;
	a->o.eval_data = in->eval;
	a->o.resume = in->ck;
	a->o.init = in->hf;
	return 0;
}

/* A run that ends before it starts: p freed, the process kept for its peers' sake. */
static int fail_early(Plan *p)
{
	plan_free(p);
	rt_launch_linger();
	return CLI_EXIT_FAIL;
}

/* The plan read, verified and (a line plan) expanded for this process; NULL having said
 * why. */
static Plan *read_plan(const CliTool *t)
{
	PlanError err;
	CliProgress *pr = cli_progress_start(t, "reading the plan");
	Plan *p = plan_read_file_as(t->in, 0, &err); // writes no plan: no source lines
	cli_progress_phase(pr, "verifying the plan");
	int bad = p && plan_verify(p, &err);
	cli_progress_end(pr);
	if (!p || bad) {
		plan_error(t, p, &err);
		plan_free(p);
		return NULL;
	}
	/* Read and verified as one line; the runtime takes world ranks.  A process that runs
	 * one rank of many derives lists for line 0 and itself only (the others borrow line
	 * 0's), so its start-up does not grow with dp or tp beyond a rank table. */
	if (p->line) {
		size_t failed;
		char msg[1024];
		Plan *e = plan_expand_for(p, rt_launch_one_rank(plan_mesh_world(p)), &failed);
		plan_free(p);
		if (!(p = e) && !t->silent)
			fprintf(stderr, "%s: error: %s\n", t->in_name,
			        plan_oom_text(msg, sizeof msg, 0, failed));
	}
	return p;
}

/* Runs the world w of p with the progress line; the tool's status. */
static int run_world(CliTool *t, PiperunArgs *a, const Plan *p, RtWorld *w, const RtCkpt *ck)
{
	int64_t total = rt_world_local_ops(w);
	char what[64];
	snprintf(what, sizeof what, "running %d step%s on %s, ops", a->o.steps,
	         a->o.steps == 1 ? "" : "s", rt_world_backend(w));
	Live live = {.p = p, .w = w, .steps = a->o.steps, .first = ck ? rt_ckpt_step(ck) : 0};
	step_work(p, &live.tok, &live.fl);
	CliProgress *pr = a->progress ? cli_progress_lines(t, what) : cli_progress_start(t, what);
	cli_progress_count(pr, ops_done, w, total * a->o.steps);
	cli_progress_text(pr, live_text, &live);
	RtResult res;
	int rc = rt_world_run(w, &res);
	cli_progress_end(pr);
	int status = CLI_EXIT_OK;
	if (rc) {
		rt_world_report(w, stderr);
		fflush(stderr);
		status = CLI_EXIT_FAIL;
	} else if (rt_world_root(w)) {
		status = report(t, a, p, w, &res);
		if (a->export_path && export_model(a, p, res.optim.kind))
			status = CLI_EXIT_FAIL;
	}
	rt_result_free(&res);
	rt_world_close(w, rc != 0);
	return status;
}

static int drive(CliTool *t, PiperunArgs *a)
{
	int rc = check_combinations(t, a);
	if (rc || (rc = cli_check_outputs(t)))
		return rc;
	a->o.trace = a->trace || a->calibrate;
	a->o.plan_path = t->in;
	Plan *p = read_plan(t);
	Inputs in;
	if (!p || inputs_open(t, a, p, &in))
		return fail_early(p);
	char msg[1024];
	RtWorld *w = rt_world_open(p, &a->o, msg, sizeof msg);
	if (!w) {
		if (!t->silent)
			fprintf(stderr, "%s: error: %s\n", t->in_name, msg);
		inputs_close(&in);
		return fail_early(p);
	}
	int status = run_world(t, a, p, w, in.ck);
	inputs_close(&in);
	plan_free(p);
	return status;
}

int piperun_drive(CliTool *t, PiperunArgs *a)
{
	if (export_scratch(a)) {
		fprintf(stderr, "piperun: error: out of memory\n");
		return CLI_EXIT_FAIL;
	}
	int rc = drive(t, a);
	export_scratch_end(a);
	return rc;
}
