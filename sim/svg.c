/* The SVG timeline, drawn the way the pipeline-schedule papers draw them: a row per
 * rank, time to the right, one box per compute op coloured by kind (F, B, W, fused BW,
 * optimizer) with its microbatch number inside, idle time left as the pale background
 * so bubbles show, and under each row a thin bar per communication group.  A legend and
 * a time axis close the picture; a deadlocked run gets a red line at the stall and the
 * op each rank is stuck at. */
#include "sim.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

enum {
	LEFT = 78,     // room for "rank N"
	RIGHT = 24,
	TOP = 44,
	ROW = 30,      // row pitch
	BOX = 22,      // box height
	PLOT_W = 1100, // width of the time axis
};

static const char *const fill[OP_COUNT] = {
    [OP_F] = "#6fa8dc", [OP_B] = "#93c47d", [OP_W] = "#f6b26b",
    [OP_BW] = "#6aa84f", [OP_OPTIM] = "#b4a7d6",
};

static void esc(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '<')
			fputs("&lt;", f);
		else if (*s == '>')
			fputs("&gt;", f);
		else if (*s == '&')
			fputs("&amp;", f);
		else
			fputc(*s, f);
	}
}

/* A tick step of 1, 2 or 5 times a power of ten giving about 10 ticks. */
static double tick_step(double span)
{
	if (span <= 0)
		return 1;
	double raw = span / 10, p = pow(10, floor(log10(raw)));
	double m = raw / p;
	return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

int sim_write_svg(FILE *f, const Plan *p, const SimResult *res)
{
	if (!res->ranks || !res->ranks[0].times) {
		fprintf(stderr, "pipesim: no op times recorded: cannot draw\n");
		return -1;
	}
	int64_t span = res->verdict == SIM_OK ? res->makespan : res->stall_time;
	if (span <= 0)
		span = 1;
	double sx = (double)PLOT_W / (double)span;
	int world = p->world;
	int h = TOP + world * ROW + 70;
	/* A deadlock gets a margin on the right for what each rank is stuck at. */
	int right = res->verdict == SIM_OK ? RIGHT : 430;
	int w = LEFT + PLOT_W + right;
	int64_t total = plan_total_ops(p);
	int labels = total <= 200000;
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
	           "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\">\n",
	        w, h, w, h);
	fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", w, h);
	fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"15\" font-weight=\"bold\">", LEFT);
	esc(f, p->name ? p->name : "plan");
	fprintf(f, ": %s, pp=%d dp=%d tp=%d, %d microbatches</text>\n",
	        p->schedule ? p->schedule : "?", p->dims[DIM_PP], p->dims[DIM_DP], p->dims[DIM_TP],
	        p->microbatches);
	fprintf(f, "<text x=\"%d\" y=\"36\" font-size=\"12\" fill=\"#444\">%s model, %s sends; ",
	        LEFT, sim_model_names[res->model], res->eager ? "eager" : "rendezvous");
	if (res->verdict == SIM_OK)
		fprintf(f, "makespan %.3f us, bubble %.1f%%</text>\n", (double)res->makespan / 1000,
		        100 * res->bubble);
	else
		fprintf(f, "%s at %.3f us</text>\n", sim_verdict_names[res->verdict],
		        (double)res->stall_time / 1000);

	for (int r = 0; r < world; r++) {
		const PlanRank *pr = &p->ranks[r];
		const SimOpTime *t = res->ranks[r].times;
		int y = TOP + r * ROW;
		fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"end\">rank %d</text>\n",
		        LEFT - 8, y + BOX / 2 + 4, r);
		fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#f1f1f1\"/>\n",
		        LEFT, y, PLOT_W, BOX);
		for (int64_t i = 0; i < pr->nops;) {
			const PlanOp *o = &pr->ops[i];
			if (plan_is_comm(o->kind)) {
				int64_t j = i, end = -1;
				int stuck = 0;
				while (j < pr->nops && plan_is_comm(pr->ops[j].kind) &&
				       pr->ops[j].group == o->group) {
					if (t[j].end < 0)
						stuck = 1;
					else if (t[j].end > end)
						end = t[j].end;
					j++;
				}
				if (t[i].start >= 0) {
					if (stuck)
						end = span;
					double x0 = LEFT + t[i].start * sx, x1 = LEFT + end * sx;
					if (x1 - x0 >= 0.5 || stuck)
						fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"3\" "
						           "fill=\"%s\"/>\n",
						        x0, y + BOX + 1, x1 - x0 > 1 ? x1 - x0 : 1,
						        stuck ? "#cc0000" : "#777777");
				}
				i = j;
				continue;
			}
			if (t[i].end >= 0 && t[i].end > t[i].start) {
				double x0 = LEFT + t[i].start * sx, x1 = LEFT + t[i].end * sx;
				fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
				           "stroke=\"white\" stroke-width=\"%s\"/>\n",
				        x0, y, x1 - x0, BOX, fill[o->kind] ? fill[o->kind] : "#999",
				        x1 - x0 > 4 ? "1" : "0");
				int digits = o->mb >= 100 ? 3 : o->mb >= 10 ? 2 : 1;
				if (labels && o->kind != OP_OPTIM && x1 - x0 >= 7.0 * digits + 3)
					fprintf(f, "<text x=\"%.2f\" y=\"%d\" font-size=\"12\" "
					           "text-anchor=\"middle\">%d</text>\n",
					        (x0 + x1) / 2, y + BOX / 2 + 4, o->mb);
			}
			i++;
		}
	}

	/* The stall and where each rank is stuck. */
	if (res->verdict != SIM_OK) {
		double x = LEFT + span * sx;
		fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#cc0000\" "
		           "stroke-width=\"2\"/>\n",
		        x, TOP - 4, x, TOP + world * ROW);
		for (int i = 0; i < res->nstuck; i++) {
			const SimOpRef *s = &res->stuck[i];
			if (s->rank < 0 || s->op < 0 || s->op >= p->ranks[s->rank].nops)
				continue;
			if (i && res->stuck[i - 1].rank == s->rank)
				continue; // overlap model: the comm stream's op says it
			char text[256];
			plan_format_op(p, &p->ranks[s->rank].ops[s->op], text, sizeof text);
			fprintf(f, "<text x=\"%.2f\" y=\"%d\" font-size=\"11\" fill=\"#cc0000\">stuck: ",
			        x + 8, TOP + s->rank * ROW + BOX / 2 + 4);
			esc(f, text);
			int64_t line = sim_op_line(p, s->rank, s->op);
			if (line)
				fprintf(f, " (line %" PRId64 ")", line);
			fputs("</text>\n", f);
		}
	}

	/* Time axis. */
	int ay = TOP + world * ROW + 4;
	fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT, ay,
	        LEFT + PLOT_W, ay);
	double step = tick_step((double)span / 1000);
	for (double v = 0; v <= (double)span / 1000 + 1e-9; v += step) {
		double x = LEFT + v * 1000 * sx;
		fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#333\"/>\n", x,
		        ay, x, ay + 4);
		fprintf(f, "<text x=\"%.2f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%g</text>\n",
		        x, ay + 15, v);
	}
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\">us</text>\n", LEFT + PLOT_W + 4,
	        ay + 15);

	/* Legend. */
	static const struct {
		const char *label, *color;
		int thin, kind;
	} legend[] = {
	    {"F forward", "#6fa8dc", 0, OP_F},
	    {"B input gradient", "#93c47d", 0, OP_B},
	    {"W weight gradient", "#f6b26b", 0, OP_W},
	    {"BW fused backward", "#6aa84f", 0, OP_BW},
	    {"optimizer", "#b4a7d6", 0, OP_OPTIM},
	    {"idle", "#f1f1f1", 0, -1},
	    {"communication", "#777777", 1, -1},
	};
	int present[OP_COUNT] = {0};
	for (int r = 0; r < world; r++)
		for (int64_t i = 0; i < p->ranks[r].nops; i++)
			present[p->ranks[r].ops[i].kind] = 1;
	int lx = LEFT, ly = ay + 32;
	for (size_t i = 0; i < sizeof legend / sizeof legend[0]; i++) {
		if (legend[i].kind >= 0 && !present[legend[i].kind])
			continue;
		if (legend[i].thin)
			fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"3\" fill=\"%s\"/>\n", lx,
			        ly + 5, legend[i].color);
		else
			fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\" "
			           "stroke=\"#bbb\" stroke-width=\"0.5\"/>\n",
			        lx, ly, legend[i].color);
		fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>\n", lx + 18, ly + 11,
		        legend[i].label);
		lx += 18 + 7 * (int)strlen(legend[i].label) + 18;
	}
	fputs("</svg>\n", f);
	return ferror(f) ? -1 : 0;
}
