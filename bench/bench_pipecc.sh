#!/bin/sh
# Compiler throughput: a generated 1f1b program with pp=128 and m=16384 (about 4.2
# million compute ops plus 8.3 million sends and receives) compiled to a plan file.
# Prints ops per second end to end (parse to written file) and peak RSS per op.
# Targets (issue 2): >= 5 M ops/s on one core, <= 64 bytes per op.  Then pipecc's path
# pass by pass on the largest (bench/lower_bench.c: parse to schedule, lower_program,
# plan_verify, plan_write to a file), best of REPS runs, CPU time split into user and
# system (the kernel's page faults for the plan's op lists, its copy into the page
# cache); issue 15's goals: lowering and writing >= 40 M ops/s each.
: "${BIN:=bin}"
REPS=${REPS:-3}
set -e
B=build/rel
OBJ=$(ls compiler/*.c sim/*.c plan/*.c | grep -v '_main\.c$' | sed "s|^|$B/|; s|\.c\$|.o|")
# shellcheck disable=SC2086 # one word per object
make -s $OBJ "$B/grammar/parser.o" "$B/grammar/lexer.o" "$BIN/pipecc"
mkdir -p "$B/bench"
# shellcheck disable=SC2086
${CC:-cc} -std=c11 -Wall -Wextra -Wpedantic -O2 -g -D_GNU_SOURCE -o "$B/bench/lower_bench" \
	bench/lower_bench.c $OBJ "$B/grammar/parser.o" "$B/grammar/lexer.o" -lm
[ -z "${BENCH_BUILD_ONLY:-}" ] || exit 0 # tests/cli/benches.sh: built, nothing run
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
gen() { # pp m
	echo "pipeline big; mesh pp=$1; microbatches $2; input 1x16;"
	i=0
	while [ $i -lt $(($1 - 1)) ]; do echo "stage s$i { linear 16; }"; i=$((i + 1)); done
	echo "stage s$i { linear 16; loss mse; }"
	echo "schedule 1f1b; cost * f=1 b=1 w=1; link ideal;"
}
for size in "32 1024" "128 4096" "128 16384"; do
	set -- $size
	gen "$1" "$2" >"$dir/big.pipe"
	echo "pp=$1 m=$2 (three runs; the machine may be shared, take the best):"
	for run in 1 2 3; do
		"$BIN/pipecc" --stats "$dir/big.pipe" -o "$dir/big.plan"
	done
	echo "  plan file: $(du -m "$dir/big.plan" | cut -f1) MiB"
done
echo "pp=128 m=16384 pass by pass (bench/lower_bench.c, best of $REPS):"
"$B/bench/lower_bench" "$dir/big.pipe" "$dir/big.plan" "$REPS"
