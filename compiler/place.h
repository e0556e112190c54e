/* The placement pass: stage -> pipeline index, from the program or the schedule. */
#ifndef PLACE_H
#define PLACE_H

#include "schedule.h"

/* Fills c->stage_pp; reports errors and returns their number. */
int place_stages(SchedCtx *c, const Schedule *s);

/* Checks the program's `route` statements against the placement (stage_pp) and the
 * mesh, and applies the devices they pick (compiler/route.c).  Returns the number of
 * errors reported. */
int route_check(Arena *a, Program *pr, const int *stage_pp, Diag *d);

#endif
