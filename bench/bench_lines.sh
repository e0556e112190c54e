#!/bin/sh
# Plans at cluster scale (issue 17): pipecc, pipesim and piperun's plan loading as dp and
# tp grow at fixed pp=16 and 64 microbatches, world 16 to 65,536.  Goal: pp=16 x dp=512 x
# tp=8 (65,536 ranks) compiles in under 0.1 s to a plan under 1 MB, and pipesim proves it
# in under 0.1 s with the verdict and makespan of `pipesim --expand` (every world rank).
#
# The model: a Llama-style stack, 16 stages of 2 blocks (attention heads=32, SwiGLU),
# tp innermost and a node of 8 devices, as examples/llama2-7b-tp.pipe.  Per size: the
# wall time (date, process start included) and peak RSS (/usr/bin/time; 0 without it)
# of each tool, the plan's bytes, and for worlds
# up to EXPAND_MAX (default 65536) `pipesim --expand` with its time, RSS and whether its
# verdict and makespan equal the line's.  "load" is piperun's plan loading in one process
# of `mpirun -np WORLD` (read and verify the line plan, derive lists for line 0 and the
# process's rank: plan_expand_for), "load all" the same for the threads launcher (one
# process, every rank's lists); bench/load_bench.c times them from the release objects.
: "${BIN:=bin}"
EXPAND_MAX=${EXPAND_MAX:-65536}
MESHES=${MESHES:-"1x1 8x1 64x1 512x1 4096x1 1x8 8x8 64x8 512x8"}
. bench/lib.sh
bench_build load_bench
[ -z "${BENCH_BUILD_ONLY:-}" ] || exit 0 # tests/cli/benches.sh: built, nothing run
T=$(mktemp -d /tmp/lines-bench.XXXXXX)
trap 'rm -rf "$T"' EXIT

# timed OUT CMD...: runs CMD, its stdout to OUT; prints "SECONDS RSS_MIB" of it.
timed() {
	out=$1
	shift
	t0=$(date +%s.%N)
	if [ -x /usr/bin/time ]; then
		/usr/bin/time -f "%M" -o "$T/time" "$@" >"$out" 2>"$T/err" || { cat "$T/err" >&2; return 1; }
	else
		"$@" >"$out" 2>"$T/err" || return 1
		echo 0 >"$T/time"
	fi
	t1=$(date +%s.%N)
	awk -v a="$t0" -v b="$t1" '{ printf "%6.3f %7.1f", b - a, $1 / 1024 }' "$T/time"
}

gen() { # gen DP TP: the program
	printf 'pipeline llama_lines;\nmesh pp=16 dp=%d tp=%d;\ndevices per_node=8;\n' "$1" "$2"
	printf 'microbatches 64;\ninput tokens 1x4096 vocab=32000;\n'
	printf 'link latency=5us bandwidth=50GB/s node_latency=1us node_bandwidth=300GB/s;\n'
	printf 'block llama {\n\tresidual { rmsnorm; attention heads=32 rope; }\n'
	printf '\tresidual { rmsnorm; swiglu 11008; }\n}\n'
	printf 'stage s0 { embed 4096; llama x 2; }\n'
	i=1
	while [ $i -lt 15 ]; do printf 'stage s%d { llama x 2; }\n' $i; i=$((i + 1)); done
	printf 'stage s15 { llama x 2; rmsnorm; head; loss xent; }\nschedule 1f1b;\n'
}

echo "pp=16, 64 microbatches, 1f1b; seconds and peak RSS MiB per tool"
printf '%6s %4s %3s | %-14s %9s | %-14s %-14s %-14s | %-14s %s\n' world dp tp "pipecc s MiB" \
	"plan B" "pipesim s MiB" "load s MiB" "load all" "--expand s MiB" "same verdict+makespan"
for m in $MESHES; do
	dp=${m%x*} tp=${m#*x}
	world=$((16 * dp * tp))
	gen "$dp" "$tp" >"$T/m.pipe"
	c=$(timed /dev/null "$BIN/pipecc" "$T/m.pipe" -o "$T/m.plan") || exit 1
	bytes=$(wc -c <"$T/m.plan")
	s=$(timed "$T/line.txt" "$BIN/pipesim" --no-record "$T/m.plan") || exit 1
	l=$(timed /dev/null "$B/bench/load_bench" "$T/m.plan" $((world - 1))) || exit 1
	la="-"
	[ "$world" -gt "$EXPAND_MAX" ] ||
		la=$(timed /dev/null "$B/bench/load_bench" "$T/m.plan") || exit 1
	e="-" same="-"
	if [ "$world" -le "$EXPAND_MAX" ]; then
		e=$(timed "$T/exp.txt" "$BIN/pipesim" --no-record --expand "$T/m.plan") || exit 1
		a=$(grep -E '^(ok|makespan)' "$T/line.txt" | sed 's/ (.*//; s/ ops to the end.*//')
		b=$(grep -E '^(ok|makespan)' "$T/exp.txt" | sed 's/ (.*//; s/ ops to the end.*//')
		if [ "$a" = "$b" ] && [ -n "$a" ]; then same=yes; else same="NO"; fi
	fi
	printf '%6d %4d %3d | %-14s %9d | %-14s %-14s %-14s | %-14s %s %s\n' "$world" "$dp" "$tp" \
		"$c" "$bytes" "$s" "$l" "$la" "$e" "$same" "$(grep '^makespan' "$T/line.txt" | tr -s ' ')"
done
