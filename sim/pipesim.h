/* pipesim as a tool: the settings its command line fills (sim/pipesim_main.c) and the
 * function that runs it.  The simulator itself is sim.h. */
#ifndef PIPESIM_H
#define PIPESIM_H

#include "../plan/cli.h"
#include "sim.h"

#define PIPESIM_GRID_WIDTH 60 // --grid columns at most, unless --width says otherwise

typedef struct {
	int model;        // SimModel (--model)
	int eager;        // --eager
	int json;         // --json: one JSON object on standard output
	int grid;         // --grid: the text grid on standard output
	int width;        // --width
	int no_record;    // --no-record
	int expand;       // --expand: simulate every world rank of a line plan
	const char *trace; // --trace FILE, or NULL
	const char *svg;   // --svg FILE, or NULL
} PipesimArgs;

/* Checks option combinations and outputs, reads and verifies the plan, simulates it,
 * reports and writes.  Returns the exit status (cli.h). */
int pipesim_drive(CliTool *t, PipesimArgs *a);

#endif
