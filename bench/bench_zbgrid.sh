#!/bin/sh
# `schedule auto` against Zero Bubble's heuristic as its authors publish it (issue 51):
# 324 configurations, p in {4, 8, 16}, m in {p, 2p, 4p}, F:B:W in {1:1:1, 10:11:9,
# 10:12:6, 10:8:12} (F = 10 us), a transfer of 0, 10 % or 20 % of F and a cap of p,
# 1.5p or 2p activations (auto_bench.c, grid).  The published heuristic's makespans
# are bench/zb_grid.txt (its header says how they were made); our implementation of
# the heuristic (compiler/auto_zb.c) must give the same.  Prints one row a
# configuration and the counts: our heuristic equal to the published one, its order
# compiled to its ASAP time, auto equal, faster or slower.  ZB_P="4 8" narrows it.
# auto_bench is built by bench/bench_auto.sh.
: "${BIN:=bin}"
BENCH_BUILD_ONLY=1 sh bench/bench_auto.sh || exit 1
[ -z "${BENCH_BUILD_ONLY:-}" ] || exit 0
build/rel/bench/auto_bench grid bench/zb_grid.txt ${ZB_P:-4 8 16}
