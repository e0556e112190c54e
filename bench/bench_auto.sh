#!/bin/sh
# `schedule auto` (issue 18): how fast the search evaluates candidates (goal: 10,000 fast-
# model evaluations per second at pp=8, m=32 on one core) and how its plans compare
# with Zero Bubble's automatic scheduler's heuristic (compiler/auto_zb.c) over
# p in {4, 8, 16}, m in {p, 2p, 4p}, four F:B:W ratios, communication 0/10/20 % of F and
# memory caps of p, 1.5p, 2p activations, and where the heuristic's order does not fit
# the cap, at equal real memory (auto under that order's own peak).  ZB_P="4 8" narrows
# the table.
# Built here, outside the Makefile, from the release objects.
: "${BIN:=bin}"
B=build/rel
OBJ=$(ls compiler/*.c sim/*.c plan/*.c | grep -v '_main\.c$' | sed "s|^|$B/|; s|\.c\$|.o|")
make -s $OBJ "$B/grammar/parser.o" "$B/grammar/lexer.o" || exit 1
mkdir -p "$B/bench"
${CC:-cc} -std=c11 -Wall -Wextra -Wpedantic -O2 -g -D_GNU_SOURCE -o "$B/bench/auto_bench" \
	bench/auto_bench.c $OBJ "$B/grammar/parser.o" "$B/grammar/lexer.o" \
	-lm || exit 1
[ -z "${BENCH_BUILD_ONLY:-}" ] || exit 0 # tests/cli/benches.sh: built, nothing run
"$B/bench/auto_bench" speed 8 32 || exit 1
"$B/bench/auto_bench" zb ${ZB_P:-4 8 16}
