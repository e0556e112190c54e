#!/bin/sh
# Compiler throughput: a generated 1f1b program with pp=128 and m=16384 (about 4.2
# million compute ops plus 8.3 million sends and receives) compiled to a plan file.
# Prints ops per second end to end (parse to written file) and peak RSS per op.
# Targets (issue 2): >= 5 M ops/s on one core, <= 64 bytes per op.
: "${BIN:=bin}"
set -e
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
