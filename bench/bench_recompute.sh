#!/bin/sh
# Recomputation's trade (issue 18): for the transformer examples, each rank's peak
# memory and the step in pipesim's overlap model with no recomputation, with
# `recompute * selective` (attention's probabilities only) and with `recompute *`
# (full), under the example's own schedule and mesh.  Printed: the largest peak over the
# ranks, the sum of saved activations at the peaks, the step in us and the step's ratio
# to no recomputation.  Then piperun on gpt-tiny (threads backend, 3 steps, --check)
# with each mode: its measured step and the check's verdict.  Figures only; nothing is
# asserted.  Env: BIN (tools folder, default bin).
: "${BIN:=bin}"
for tool in pipecc pipesim piperun; do
	if [ ! -x "$BIN/$tool" ]; then
		echo "bench_recompute: skipped: $BIN/$tool not built"
		exit 0
	fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
num() { sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" "$2" | head -n 1; }
all() { grep -o "\"$1\": [0-9]*" "$2" | sed 's/.*: //'; }

printf '%-12s %-10s %12s %14s %12s %7s\n' example recompute "max peak MB" "saved at peaks" "step us" ratio
for p in examples/gpt-tiny.pipe examples/gpt2.pipe examples/llama2-7b.pipe; do
	b=$(basename "$p" .pipe)
	base=""
	for mode in none selective full; do
		sed '/^recompute/d' "$p" >"$dir/p.pipe"
		[ "$mode" = selective ] && echo "recompute * selective;" >>"$dir/p.pipe"
		[ "$mode" = full ] && echo "recompute *;" >>"$dir/p.pipe"
		# the examples' own capacity check is not the point here
		sed -i 's/^device \([a-z0-9]*\).*;/device \1 memory=10TB;/' "$dir/p.pipe"
		if ! "$BIN/pipecc" -q "$dir/p.pipe" -o "$dir/p.plan" 2>"$dir/err"; then
			printf '%-12s %-10s %s\n' "$b" "$mode" "$(head -n 1 "$dir/err")"
			continue
		fi
		"$BIN/pipesim" --json --model overlap "$dir/p.plan" >"$dir/s.json"
		step=$(num makespan "$dir/s.json")
		peak=$(all peak_total_bytes "$dir/s.json" | sort -n | tail -n 1)
		saved=$(all saved_bytes_at_peak "$dir/s.json" | awk '{ s += $1 } END { print s }')
		[ -z "$base" ] && base=$step
		printf '%-12s %-10s %12.1f %14.1f %12.1f %7.3f\n' "$b" "$mode" "$(echo "$peak" | awk '{ print $1 / 1e6 }')" \
			"$(echo "$saved" | awk '{ print $1 / 1e6 }')" "$step" "$(awk -v a="$step" -v b="$base" 'BEGIN { print a / b }')"
	done
done

echo
echo "piperun, gpt-tiny, threads backend, 3 steps, --check:"
for mode in none selective full; do
	sed '/^recompute/d' examples/gpt-tiny.pipe >"$dir/g.pipe"
	[ "$mode" = selective ] && echo "recompute * selective;" >>"$dir/g.pipe"
	[ "$mode" = full ] && echo "recompute *;" >>"$dir/g.pipe"
	"$BIN/pipecc" -q "$dir/g.pipe" -o "$dir/g.plan" || continue
	"$BIN/piperun" "$dir/g.plan" --backend threads --steps 3 --check --json >"$dir/r.json" 2>"$dir/err"
	ok=$(grep -c '"check": {"ok": true' "$dir/r.json")
	printf '  %-10s step %10s us  max measured peak %8.2f MB  check %s\n' "$mode" \
		"$(num mean_step_us "$dir/r.json")" "$(all peak_total_bytes "$dir/r.json" | sort -n | tail -n 1 | awk '{ print $1 / 1e6 }')" \
		"$([ "$ok" -ge 1 ] && echo ok || echo FAILED)"
done
