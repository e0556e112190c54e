#!/bin/sh
# The roofline cost model (docs/semantics.md "Costs"): the summary's bottleneck line
# against its golden (PIPECC_UPDATE_GOLDEN=1 rewrites it), the optimizer step in the plan
# (o=) and in pipesim's step, and a device without bandwidth keeping FLOPs alone.
TOOL=roof
. tests/lib/cli.sh

f=tests/golden/roof/head.pipe
t "summary" 0 "$BIN/pipecc" "$f" --emit summary
grep '^bottleneck ' "$dir/out" >"$dir/line"
[ -n "$PIPECC_UPDATE_GOLDEN" ] && cp "$dir/line" tests/golden/roof/head.summary
cmp -s "$dir/line" tests/golden/roof/head.summary
check "summary names the bottleneck as its golden" $? "$(diff tests/golden/roof/head.summary "$dir/line")"
t "plan" 0 "$BIN/pipecc" "$f" -o "$dir/x.plan"
has "every stage's step is timed" "$dir/x.plan" "^stage 2 s2 .* o=[1-9][0-9]* layers=3"
if [ -x "$BIN/pipesim" ]; then
	t "pipesim" 0 "$BIN/pipesim" "$dir/x.plan"
	has "pipesim names the bottleneck" "$dir/out" "^bottleneck stage s2 (pp 2): "
	has "the step ends with an OPTIM on the critical path" "$dir/out" "OPTIM s=0 (line"
fi
# device peak= alone: no bandwidth, no o=, FLOPs over the rate
sed 's/^device h100;/device peak=989TFLOPs;/' "$f" >"$dir/flat.pipe"
t "no bandwidth" 0 "$BIN/pipecc" "$dir/flat.pipe" -o "$dir/flat.plan"
grep -q ' o=' "$dir/flat.plan"
check "no bandwidth: the step costs nothing" "$([ $? -ne 0 ]; echo $?)" "o= in the plan"
exit $((fails > 0))
