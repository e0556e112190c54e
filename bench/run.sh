#!/bin/sh
# Runs every benchmark script bench/bench_*.sh; each prints its own figures.
: "${BIN:=bin}"
export BIN
rc=0
for b in bench/bench_*.sh; do
	[ -f "$b" ] || continue
	echo "== $b"
	sh "$b" || rc=1
done
exit $rc
