#!/bin/sh
# What the local hand-off between stages of one rank saves against a send to self.
#
# Method: a V model (2 ranks, 4 stages: rank 1 holds the bottom of the V, s1 -> s2, and
# rank 0 the skip s0 -> s3 across it), compiled for zbv and dualpipev both ways: with the
# default `--same-rank=local` (the edges are handed over in memory) and with
# `--same-rank=self-send` (each becomes a SEND and a RECV to self in one group).  For
# each, pipesim's predicted step (strict and overlap models; a send to self pays the
# link's latency + bytes / bandwidth like any transfer) and piperun's measured mean step
# on the threads backend (a send to self is a channel hand-shake and a memcpy).  Two
# ranks, one per core of the 2-core machine this was written on.  Figures only, no
# target: timings on a shared machine are noisy.  Env: BIN (tools folder), STEPS
# (default 50).
: "${BIN:=bin}"
: "${STEPS:=50}"
for tool in pipecc pipesim piperun; do
	if [ ! -x "$BIN/$tool" ]; then
		echo "bench_selfsend: skipped: $BIN/$tool not built"
		exit 0
	fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

cat >"$dir/v.pipe" <<'PIPE'
pipeline vbench;
mesh pp=2;
microbatches 8;
input 16x64;
stage s0 { linear 64; relu; }
stage s1 { linear 64; relu; }
stage s2 { linear 64; relu; }
stage s3 { linear 64; loss mse; }
skip s0 -> s3;
schedule zbv;
placement v;
cost * f=20 b=20 w=20;
link latency=5us bandwidth=25GB/s;
PIPE

num() { # KEY: the first number after "KEY" in stdin
	sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p" | head -n 1
}

printf '%-10s %-10s %12s %12s %14s\n' schedule same-rank "sim strict" "sim overlap" "run threads"
printf '%-10s %-10s %12s %12s %14s\n' "" "" "us/step" "us/step" "us/step"
for s in zbv dualpipev; do
	for how in local self-send; do
		"$BIN/pipecc" "$dir/v.pipe" -s "$s" --same-rank="$how" -o "$dir/$s-$how.plan" || exit 1
		st=$("$BIN/pipesim" --json "$dir/$s-$how.plan" | num makespan)
		ov=$("$BIN/pipesim" --json --model overlap "$dir/$s-$how.plan" | num makespan)
		run=$("$BIN/piperun" "$dir/$s-$how.plan" --json -q -n "$STEPS" | num mean_step_us)
		printf '%-10s %-10s %12s %12s %14s\n' "$s" "$how" "$st" "$ov" "$run"
	done
done
