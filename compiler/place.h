/* The placement pass: stage -> pipeline index, from the program or the schedule. */
#ifndef PLACE_H
#define PLACE_H

#include "schedule.h"

/* Fills c->stage_pp; reports errors and returns their number. */
int place_stages(SchedCtx *c, const Schedule *s);

#endif
