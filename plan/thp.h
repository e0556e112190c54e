/* Whether the plan's big blocks are worth offering for transparent huge pages on this
 * machine (plan/thp.c), as sysfs says: the answer plan_block_new (plan/block.h) and the
 * plan writers' pieces (plan/par_out.h) follow. */
#ifndef PLAN_THP_H
#define PLAN_THP_H

#include <stddef.h>
#include <stdint.h>

/* What the machine gives a region offered for huge pages (plan/thp.c), from sysfs under
 * a root (the machine's: "/sys"). */
typedef struct {
	int64_t largest;  // bytes of the largest page THP gives such a region; 0: none
	int64_t reported; // bytes of the free blocks a balloon reports to the host; 0: none
	int offer;        // worth offering: largest > 0 and reported == 0
} PlanThp;
PlanThp plan_thp_read(const char *sys);
/* plan_thp_read("/sys"), read once per process. */
const PlanThp *plan_thp_machine(void);
/* Whether plan_block_new offers its blocks: PIPECC_HUGE_PAGES=1 yes, =0 no; unset (or
 * anything else) plan_thp_machine()->offer.  On a VM whose host backs the
 * memory its balloon reported free again at its first use, huge pages (2 MiB or 64 KiB
 * alike) cost more than small pages (docs/pipesim.md, "Huge pages, decided by the
 * machine"). */
int plan_huge_pages(void);
/* One line saying what plan_thp_read found and why that decides. */
void plan_thp_describe(const PlanThp *t, char *buf, size_t n);

#endif
