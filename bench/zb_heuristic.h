/* Zero Bubble's automatic scheduler's starting heuristic, reimplemented for comparison
 * (bench/zb_heuristic.c says from what and how it works). */
#ifndef ZB_HEURISTIC_H
#define ZB_HEURISTIC_H

#define ZB_MAXP 16
#define ZB_MAXM 256

typedef struct {
	int p, m;
	long cost[3][ZB_MAXP]; // F, B, W per stage
	long mem[3][ZB_MAXP];  // memory change of F, B, W per stage (they sum to 0)
	long maxmem[ZB_MAXP];
	long comm;             // one transfer
} ZbIn;

typedef struct {
	int n[ZB_MAXP];
	char kind[ZB_MAXP][3 * ZB_MAXM]; // 0 F, 1 B, 2 W
	int mb[ZB_MAXP][3 * ZB_MAXM];
	long makespan;                   // from time 0 to the last op
	long span;                       // the heuristic's own measure: the largest stage span
} ZbOut;

/* The best of the eight flag combinations by span; -1 when none fits the memory. */
int zb_initial_solution(const ZbIn *in, ZbOut *best);

#endif
