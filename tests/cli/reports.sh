#!/bin/sh
# Pictures and reports a new user reads: the SVG timeline (every compute box labelled
# stage-kind-microbatch, ranks by mesh coordinates, one arrow per transfer, a working
# axis for a stall at t = 0), the grid (no op lost in a narrow column), `busy` defined
# the same way by pipesim and piperun, and `make demo` saying where its picture is.
TOOL=reports
. tests/lib/cli.sh
SIM="$BIN/pipesim"
PCC="$BIN/pipecc"
RUN="$BIN/piperun"

# compute_ops PLAN: "RANK COUNT" per rank, the F/B/W/BW ops of the plan file.
compute_ops() {
	awk '/^rank [0-9]+ / { r = $2; n[r] = 0; next }
	     /^(F|B|W|BW) / { n[r]++ }
	     END { for (r in n) print r, n[r] }' "$1" | sort -n
}

# ---- the SVG ----
for ex in demo mlp4; do
	"$PCC" "examples/$ex.pipe" -o "$dir/$ex.plan" 2>"$dir/err"
	t "pipesim --svg on examples/$ex.pipe" 0 "$SIM" "$dir/$ex.plan" --svg "$dir/$ex.svg"
	want=$(compute_ops "$dir/$ex.plan" | awk '{ s += $2 } END { print s }')
	got=$(grep -c 'class="lab"' "$dir/$ex.svg")
	[ "$got" = "$want" ]
	check "$ex.svg labels every compute box" $? "$got labels for $want compute ops"
	has "$ex.svg labels a box kind-microbatch (F0), one stage a rank" "$dir/$ex.svg" '>F0</text>'
	has "$ex.svg labels a fused backward (BW7)" "$dir/$ex.svg" '>BW7</text>'
	# a line plan draws line 0's ranks, named by world rank
	has "$ex.svg names ranks by mesh coordinates" "$dir/$ex.svg" '>r4 pp=2 dp=0</text>'
	want=$(grep -c '^RECV ' "$dir/$ex.plan")
	got=$(grep -c 'class="xfer" marker-end' "$dir/$ex.svg")
	[ "$got" = "$((want + 1))" ] # and the legend's
	check "$ex.svg draws an arrow per transfer" $? "$got arrows for $want receives"
done
# mlp4: 1 us computes against 5 us links
has "a comm-bound picture says its axis is not to scale" "$dir/mlp4.svg" 'time not to scale'
has "a comm-bound picture hatches compressed stretches" "$dir/mlp4.svg" 'fill="url(#hatch)"'
if grep -q 'time not to scale' "$dir/demo.svg"; then
	check "the demo picture is drawn to scale" 1 "demo.svg is warped"
else
	check "the demo picture is drawn to scale" 0 ""
fi

t "a stall at t = 0 is drawn" 1 "$SIM" tests/plans/bad/stall_at_zero.plan --svg "$dir/zero.svg"
has "a stall at t = 0 gets a 0 .. 1 us axis" "$dir/zero.svg" 'class="tick">1</text>'
if grep -q '>0\.00*1</text>' "$dir/zero.svg"; then
	check "a stall at t = 0 has no 0.001 us ticks" 1 "tick below the unit"
else
	check "a stall at t = 0 has no 0.001 us ticks" 0 ""
fi

# ---- the grid: each row names or counts every compute op ----
for w in 60 25; do
	t "pipesim --grid --width $w on mlp4" 0 "$SIM" "$dir/mlp4.plan" --grid --width "$w"
	# one stage per rank and ops shorter than a column: equal neighbours are one op
	awk '/^rank +[0-9]+ \|/ {
		sub(/^rank +/, ""); r = $1 + 0; prev = ""; n = 0
		for (i = 3; i < NF; i++) {
			if ($i ~ /^\+/) n += substr($i, 2)
			else if ($i != "." && $i != prev) n++
			prev = $i
		}
		print r, n
	}' "$dir/out" >"$dir/grid.counts"
	compute_ops "$dir/mlp4.plan" >"$dir/plan.counts"
	cmp -s "$dir/grid.counts" "$dir/plan.counts"
	check "grid at $w columns shows or counts every op" $? "$(paste "$dir/grid.counts" "$dir/plan.counts" | tr '\n' ';')"
	has "grid at $w columns marks crowded cells" "$dir/out" ' +[2-9]'
done

# ---- busy: one definition, one key, one unit ----
# pipesim: busy = compute / makespan per rank; piperun: busy = compute per step x
# steps / total step time.  Both: a fraction in JSON, a percentage in text.
"$PCC" examples/tiny.pipe -o "$dir/tiny.plan" 2>"$dir/err"
t "pipesim --json" 0 "$SIM" "$dir/tiny.plan" --json
cp "$dir/out" "$dir/sim.json"
t "piperun --json" 0 "$RUN" "$dir/tiny.plan" --json --steps 3
cp "$dir/out" "$dir/run.json"
ms=$(sed -n 's/^  "makespan": \([0-9.]*\),$/\1/p' "$dir/sim.json")
grep -o '{"rank": [0-9]*, "busy": [0-9.]*, "compute": [0-9.]*' "$dir/sim.json" |
	tr -d '{",:' | awk -v ms="$ms" '
	{ n++; sum += $4; d = $4 - $6 / ms; if (d < -1e-5 || d > 1e-5 || $4 < 0 || $4 > 1) bad = 1 }
	END { printf "%.6f\n", sum / n; exit bad || n < 2 }' >"$dir/sim.mean"
check "pipesim busy = compute / makespan per rank, a fraction" $? "$(cat "$dir/sim.json")"
total=$(grep -o '"time_us": [0-9.]*' "$dir/run.json" | awk '{ s += $2 } END { print s }')
grep -o '{"rank": [0-9]*, "busy": [0-9.]*, "compute_us": [0-9.]*' "$dir/run.json" |
	tr -d '{",:' | awk -v total="$total" -v steps=3 '
	{ n++; sum += $4; want = $6 * steps / total
	  if ($4 < 0 || $4 > 1 || $4 - want > 1e-3 + 1e-3 * want || want - $4 > 1e-3 + 1e-3 * want) bad = 1 }
	END { printf "%.6f\n", sum / n; exit bad || n < 2 }' >"$dir/run.mean"
check "piperun busy = compute per step x steps / step time, a fraction" $? "$(cat "$dir/run.json")"
for j in sim run; do
	top=$(grep -o '"busy": [0-9.]*,' "$dir/$j.json" | head -1 | tr -d '",' | awk '{ print $2 }')
	awk -v a="$top" -v b="$(cat "$dir/$j.mean")" 'BEGIN { exit !(a - b < 2e-6 && b - a < 2e-6) }'
	check "$j JSON: top-level busy is the mean over ranks" $? "$top vs $(cat "$dir/$j.mean")"
done
t "pipesim text" 0 "$SIM" "$dir/tiny.plan"
has "pipesim text prints busy in percent" "$dir/out" '^ rank       busy %    compute       idle'
t "piperun text" 0 "$RUN" "$dir/tiny.plan" --steps 2
has "piperun text prints busy in percent" "$dir/out" '^rank  pp  dp  tp   busy %    compute'

# ---- make demo ----
t "scripts/demo.sh" 0 sh scripts/demo.sh "$BIN" "$dir/demo-out"
has "demo ends by naming the SVG" "$dir/out" "^demo: the timeline is in $dir/demo-out/demo.svg"
tail -n 1 "$dir/out" | grep -q "demo-out/demo.svg"
check "demo's last line is the SVG path" $? "$(tail -n 1 "$dir/out")"
grep -q '</svg>' "$dir/demo-out/demo.svg"
check "demo's SVG is complete" $? "no $dir/demo-out/demo.svg"
has "demo runs piperun --check" "$dir/out" 'check: .*: ok'

[ "$fails" -eq 0 ]
