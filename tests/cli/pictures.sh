#!/bin/sh
# The pictures (docs/pipesim.md "Pictures"): the SVG's shades per stage on ranks that
# hold several, its box labels, its time axis (1-2-5 ticks with a unit, increasing,
# never touching) and its memory track per rank, whose peak is pipesim's; the Chrome
# traces of pipesim and piperun: one flow per send/receive pair and a memory counter per
# rank whose highest point is the memory model's peak.
TOOL=pictures
. tests/lib/cli.sh
SIM="$BIN/pipesim"
PCC="$BIN/pipecc"
RUN="$BIN/piperun"

# sends PLAN: the SEND ops of the plan file (each pairs with one RECV).
sends() { grep -c '^SEND ' "$1"; }
# peaks_json: "RANK PEAK" per rank from pipesim --json on stdin.
peaks_json() {
	grep -o '"rank": [0-9]*[^}]*"peak_total_bytes": [0-9]*' |
		sed 's/"rank": \([0-9]*\).*"peak_total_bytes": \([0-9]*\)/\1 \2/'
}
# peaks_svg SVG: "RANK PEAK" per memory track.
peaks_svg() {
	grep -o 'class="mem" data-rank="[0-9]*" data-peak="[0-9]*"' "$1" |
		sed 's/.*data-rank="\([0-9]*\)" data-peak="\([0-9]*\)"/\1 \2/'
}
# peaks_trace JSON: "RANK PEAK", the largest sum of a rank's memory counter.
peaks_trace() {
	grep '"ph": "C"' "$1" |
		sed 's/.*"pid": \([0-9]*\).*"model state": \([0-9]*\), "saved activations": \([0-9]*\), "in flight": \([0-9]*\).*/\1 \2 \3 \4/' |
		awk '{ v = $2 + $3 + $4; if (!($1 in m) || v > m[$1]) m[$1] = v }
		     END { for (r in m) print r, m[r] }' | sort -n
}
# ticks SVG: the axis's tick labels, one "X LABEL" a line.
ticks() {
	grep 'class="tick"' "$1" | sed 's/.*x="\([0-9.]*\)".*>\([^<]*\)<\/text>/\1 \2/'
}
# ticks_ok SVG: labels strictly increasing, and no two closer than their half widths
# (6 px a character) plus 10 px.
ticks_ok() {
	ticks "$1" | awk 'NR > 1 && ($2 + 0 <= v + 0 || $1 - x < (length($2) + length(v)) * 3 + 10) { bad = 1 }
	                  { x = $1; v = $2; n++ } END { exit bad || n < 3 }'
}
# flows_forward JSON: every flow ends no earlier than it starts, and each id has both ends;
# and there is at least one flow.
flows_forward() {
	grep '"ph": "[sf]"' "$1" | sed 's/.*"ph": "\([sf]\)", "id": \([0-9]*\).*"ts": \([0-9.]*\).*/\1 \2 \3/' |
		awk '$1 == "s" { s[$2] = $3; n++ } $1 == "f" { f[$2] = $3 }
		     END { for (i in s) if (!(i in f) || f[i] + 0 < s[i] + 0) bad = 1; for (i in f) if (!(i in s)) bad = 1; exit bad || !n }'
}
json_valid() { # FILE: valid JSON where jq is installed
	command -v jq >/dev/null 2>&1 || return 0
	jq -e . "$1" >/dev/null
}
svg_valid() { # FILE: well-formed XML where xmllint is installed
	command -v xmllint >/dev/null 2>&1 || return 0
	xmllint --noout "$1"
}
# program PP M SCHEDULE WIDTH: a pipeline of PP stages of linear WIDTH layers.
program() {
	echo "pipeline p; mesh pp=$1; microbatches $2; input 64x$4;"
	i=0
	while [ $i -lt $(($1 - 1)) ]; do echo "stage s$i { linear $4; relu; }"; i=$((i + 1)); done
	echo "stage s$i { linear $4; loss mse; }"
	echo "schedule $3; link ideal;"
}

# ---- the SVG: shades and labels ----
"$PCC" examples/zbv.pipe -o "$dir/zbv.plan" 2>"$dir/err"
t "pipesim --svg of zbv" 0 "$SIM" "$dir/zbv.plan" --svg "$dir/zbv.svg" --json
cp "$dir/out" "$dir/zbv.json"
svg_valid "$dir/zbv.svg"
check "zbv.svg is well-formed XML" $? "xmllint refused it"
n=$(grep -o 'fill="#[0-9a-f]*" stroke="white"' "$dir/zbv.svg" | sort -u | wc -l)
[ "$n" -ge 6 ]
check "zbv's two stages a rank get their own shades of F, B and W" $? "$n box colours"
has "zbv's legend explains the shades, two a rank" "$dir/zbv.svg" "shades: a rank's 1st and 2nd stage<"
n=$(grep -c '<rect x="[0-9]*" y="[0-9]*" width="4" height="14"' "$dir/zbv.svg")
check "... with two swatches" "$([ "$n" -eq 2 ]; echo $?)" "$n swatches"
has "zbv's boxes name the stage (a rank holds two)" "$dir/zbv.svg" 'class="lab">[0-9][0-9]*F[0-9][0-9]*<'
"$PCC" examples/demo.pipe -o "$dir/demo.plan" 2>"$dir/err"
t "pipesim --svg of demo (1f1b)" 0 "$SIM" "$dir/demo.plan" --svg "$dir/demo.svg" --json
cp "$dir/out" "$dir/demo.json"
grep -q 'class="lab">F[0-9]' "$dir/demo.svg" && ! grep -q 'shades:' "$dir/demo.svg" &&
	! grep -q 'class="lab">[0-9][0-9]*F' "$dir/demo.svg"
check "one stage a rank: no shades, no stage in labels" $? "demo.svg has them, or no F labels"

# ---- the SVG: the time axis ----
for c in "16 64 1f1b 1024 us" "16 64 1f1b 16384 ms" "4 8 interleaved 64 us"; do
	set -- $c
	program "$1" "$2" "$3" "$4" >"$dir/p.pipe"
	"$PCC" "$dir/p.pipe" -o "$dir/p.plan" 2>"$dir/err"
	t "pipesim --svg pp=$1 m=$2 $3 width $4" 0 "$SIM" "$dir/p.plan" --svg "$dir/p.svg"
	ticks_ok "$dir/p.svg"
	check "pp=$1 m=$2 $3: tick labels increase and never touch" $? "$(ticks "$dir/p.svg" | tr '\n' ' ')"
	has "pp=$1 m=$2 $3: the axis is in $5" "$dir/p.svg" ">time ($5)"
	grep -q 'class="tick">' "$dir/p.svg" && ! grep -q 'class="tick">[0-9.]*e[+-]' "$dir/p.svg"
	check "pp=$1 m=$2 $3: no exponent in tick labels" $? "$(ticks "$dir/p.svg" | tr '\n' ' ')"
	step=$(ticks "$dir/p.svg" | awk 'NR == 2 { print $2 }')
	case $step in
	1 | 2 | 5 | 10 | 20 | 50 | 100 | 200 | 500 | 0.1 | 0.2 | 0.5 | 0.05 | 0.02 | 0.01) r=0 ;;
	*) r=1 ;;
	esac
	check "pp=$1 m=$2 $3: the first step is 1, 2 or 5 times a power of ten" $r "step $step"
done

# ---- the SVG: memory tracks ----
for ex in zbv demo; do
	peaks_json <"$dir/$ex.json" >"$dir/want"
	peaks_svg "$dir/$ex.svg" >"$dir/got"
	[ -s "$dir/got" ] && cmp -s "$dir/want" "$dir/got"
	check "$ex.svg: a memory track per rank, its peak pipesim's" $? "$(tr '\n' ' ' <"$dir/got") vs $(tr '\n' ' ' <"$dir/want")"
	n=$(grep -c 'class="peak">peak ' "$dir/$ex.svg")
	[ "$n" = "$(wc -l <"$dir/want")" ]
	check "$ex.svg marks each rank's peak" $? "$n marks"
done
has "the memory legend names the classes" "$dir/zbv.svg" '>saved activations<'

# ---- pipesim's trace ----
for ex in zbv demo; do
	t "pipesim --trace of $ex" 0 "$SIM" "$dir/$ex.plan" --trace "$dir/$ex.trace.json"
	json_valid "$dir/$ex.trace.json"
	check "$ex trace is valid JSON" $? "jq refused it"
	s=$(grep -c '"ph": "s"' "$dir/$ex.trace.json")
	f=$(grep -c '"ph": "f"' "$dir/$ex.trace.json")
	nsend=$(sends "$dir/$ex.plan")
	[ "$s" = "$nsend" ] && [ "$f" = "$nsend" ]
	check "$ex trace: a flow per send/receive pair" $? "$s starts, $f ends, $nsend sends"
	flows_forward "$dir/$ex.trace.json"
	check "$ex trace: each flow has both ends and runs forward in time" $? ""
	peaks_trace "$dir/$ex.trace.json" >"$dir/got"
	peaks_json <"$dir/$ex.json" >"$dir/want"
	[ -s "$dir/got" ] && cmp -s "$dir/want" "$dir/got"
	check "$ex trace: each rank's memory counter peaks at pipesim's peak" $? "$(tr '\n' ' ' <"$dir/got")"
done

# ---- piperun's trace ----
"$PCC" examples/tiny.pipe -o "$dir/tiny.plan" 2>"$dir/err"
"$SIM" "$dir/tiny.plan" --json >"$dir/tiny.json"
t "piperun --trace, 3 steps" 0 "$RUN" "$dir/tiny.plan" --steps 3 --trace "$dir/run.json"
json_valid "$dir/run.json"
check "piperun's trace is valid JSON" $? "jq refused it"
s=$(grep -c '"ph": "s"' "$dir/run.json")
f=$(grep -c '"ph": "f"' "$dir/run.json")
nflows=$(($(sends "$dir/tiny.plan") * 3))
[ "$s" = "$nflows" ] && [ "$f" = "$nflows" ]
check "piperun's trace: a flow per send/receive pair and step" $? "$s starts, $f ends, want $nflows"
flows_forward "$dir/run.json"
check "piperun's flows have both ends and run forward in time" $? ""
has "piperun's flows carry the step" "$dir/run.json" '"ph": "f".*"step": 3'
peaks_trace "$dir/run.json" >"$dir/got"
peaks_json <"$dir/tiny.json" >"$dir/want"
[ -s "$dir/got" ] && cmp -s "$dir/want" "$dir/got"
check "piperun's measured memory counter peaks at pipesim's peak (cpu)" $? "$(tr '\n' ' ' <"$dir/got") vs $(tr '\n' ' ' <"$dir/want")"

# under mpirun the events come from other processes (gathered to the root): the same
if case $BIN in *san*) false ;; esac && command -v mpirun >/dev/null 2>&1 &&
	"$RUN" --version | grep -q mpi; then
	export OMPI_MCA_rmaps_base_oversubscribe=1
	t "piperun --trace under mpirun -np 2" 0 timeout 300 mpirun --allow-run-as-root --oversubscribe \
		--mca btl self,vader -np 2 "$RUN" "$dir/tiny.plan" --steps 3 --trace "$dir/mpi.json"
	s=$(grep -c '"ph": "s"' "$dir/mpi.json")
	[ "$s" = "$nflows" ]
	check "mpirun trace: a flow per send/receive pair and step" $? "$s flows, want $nflows"
	peaks_trace "$dir/mpi.json" >"$dir/got"
	cmp -s "$dir/want" "$dir/got"
	check "mpirun trace: measured memory peaks at pipesim's" $? "$(tr '\n' ' ' <"$dir/got")"
else
	echo "testing $TOOL piperun --trace under mpirun ... skipped: no mpirun or no MPI backend"
fi

[ "$fails" -eq 0 ]
