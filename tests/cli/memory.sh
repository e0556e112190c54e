#!/bin/sh
# The memory model (docs/semantics.md "Memory"): piperun's measured peak total and its
# parts equal pipesim's prediction, rank by rank, over programs with skips, hand-offs,
# sends to self, dp, transformers, AdamW and every schedule on mlp4.
TOOL=memory
. tests/lib/cli.sh

[ -x "$BIN/pipesim" ] || { echo "note: memory: pipesim not built: skipped"; exit 0; }

fields="peak_total_bytes param_bytes grad_bytes optim_state_bytes saved_bytes_at_peak inflight_bytes_at_peak peak_op"
# figs FILE FIELD: the field's values, one per rank, on one line.
figs() {
	grep -o "\"$2\": -*[0-9]*" "$1" | sed 's/.*: //' | tr '\n' ' '
}

# same NAME PLAN [PIPERUN OPTIONS]: every field of every rank agrees.
same() {
	name=$1 plan=$2
	shift 2
	"$BIN/piperun" "$plan" --json --steps 2 "$@" >"$dir/run.json" 2>"$dir/err"
	"$BIN/pipesim" --json "$plan" >"$dir/sim.json" 2>>"$dir/err"
	bad=""
	for f in $fields; do
		got=$(figs "$dir/run.json" "$f") want=$(figs "$dir/sim.json" "$f")
		[ -n "$got" ] && [ "$got" = "$want" ] || bad="$bad $f: measured $got, predicted $want;"
	done
	check "memory of $name: measured == predicted" "$([ -z "$bad" ]; echo $?)" "$bad"
}

sed 's/^schedule .*/optimizer adamw;\n&/' examples/mlp4.pipe >"$dir/mlp4-adamw.pipe"
for p in examples/tiny.pipe examples/mlp4.pipe examples/skips.pipe examples/gpt-tiny.pipe \
	examples/zbv.pipe examples/zbv-selfsend.pipe examples/interleaved.pipe \
	"$dir/mlp4-adamw.pipe"; do
	b=$(basename "$p" .pipe)
	t "compiles $b" 0 "$BIN/pipecc" "$p" -o "$dir/$b.plan"
	same "$b" "$dir/$b.plan"
done
has "AdamW's state is in the peak" "$dir/sim.json" '"optim_state_bytes": [1-9]'

schedules=$(sed -n 's/.*\.name = "\([A-Za-z0-9_]*\)".*/\1/p' compiler/sched_*.c | sort -u)
ran=0
for s in $schedules; do
	"$BIN/pipecc" examples/mlp4.pipe -s "$s" -o "$dir/m-$s.plan" >/dev/null 2>&1 || continue
	same "mlp4 under $s" "$dir/m-$s.plan"
	ran=$((ran + 1))
done
check "the schedule loop ran" "$([ $ran -gt 3 ]; echo $?)" "only $ran schedules"

exit $((fails > 0))
