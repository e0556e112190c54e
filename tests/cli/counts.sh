#!/bin/sh
# Figures too large to count (plan/layer.h PLAN_COUNT_MAX, plan/mem.h PLAN_MEM_MAX):
# a layer, a stage or a whole plan whose parameters, bytes or FLOPs would pass what 64
# bits hold is refused at its line by pipecc and by the plan reader (pipesim, piperun),
# where the figures once wrapped around silently (a 2^73-FLOP layer compiled to a 1 ns
# forward) or overflowed the memory model.  The largest programs below the limits still
# compile.
: "${BIN:=bin}"
TOOL=counts
. tests/lib/cli.sh

# A two-stage program: input SHAPE, stage a's and stage b's layers, microbatches M,
# then any more statements.
two() {
	printf 'pipeline big; mesh pp=2; microbatches %s; input %s;\n' "$4" "$1"
	printf 'stage a { %s }\nstage b { %s }\nschedule 1f1b;\n%s\n' "$2" "$3" "$5"
}

# A layer of 2 x 2^24 x 2^24 x 2^24 = 2^73 FLOPs: compiled to f=1 (1 ns) before.
two 16777216x16777216 'linear 16777216;' 'linear 16777216; loss mse;' 4 >"$dir/flops.pipe"
t "a layer of 2^73 FLOPs is refused" 1 "$BIN/pipecc" "$dir/flops.pipe" -o "$dir/flops.plan"
has "... at the layer, saying why" "$dir/err" \
	"flops.pipe:2:11: error: this layer is too large to count: its FLOPs per microbatch are more than 9.22e+18, the most the tools count"
check "... and writes no plan" "$([ ! -e "$dir/flops.plan" ]; echo $?)" "a plan was written"

# An attention of 16 sequences of 2^20 tokens with 2^16 heads: its probabilities alone
# (B x H x S x S) are 2^60 floats.
two 'tokens 16x1048576 vocab=64' 'embed 65536; attention heads=65536;' \
	'layernorm; head; loss xent;' 1 'cost * f=1 b=1 w=1;' >"$dir/attn.pipe"
t "an attention of 2^62 saved bytes is refused" 1 "$BIN/pipecc" "$dir/attn.pipe" -o "$dir/attn.plan"
has "... at the attention" "$dir/err" \
	"attn.pipe:2:24: error: this layer is too large to count: its saved bytes per microbatch are 4.61e+18, past 1.15e+18"

# Three attentions of 2^59 saved bytes each (16 sequences of 2^20 tokens, 8192 heads):
# each counts, their stage's sum does not.
two 'tokens 16x1048576 vocab=64' 'embed 8192; attention heads=8192; attention heads=8192;
	attention heads=8192;' 'layernorm; head; loss xent;' 1 'cost * f=1 b=1 w=1;' >"$dir/sum.pipe"
t "a stage whose layers' bytes add up past 2^60 is refused" 1 "$BIN/pipecc" "$dir/sum.pipe" \
	-o "$dir/sum.plan"
has "... at the stage" "$dir/err" \
	"sum.pipe:2:7: error: stage 'a' is too large to count: its layers' saved bytes per microbatch are 1.73e+18, past 1.15e+18, the most the tools count"

# 2^20 microbatches of 2^42 bytes saved by each stage: the step's memory passes 2^62.
two 1048576x1048576 'linear 1048576;' 'linear 1048576; loss mse;' 1048576 \
	'cost * f=1 b=1 w=1;' >"$dir/mem.pipe"
t "a program whose memory adds up past 2^62 bytes is refused" 1 "$BIN/pipecc" \
	"$dir/mem.pipe" -o "$dir/mem.plan"
has "... at the stage that passes it" "$dir/err" \
	"mem.pipe:2:7: error: the program's memory is too large to count: by stage 'a', 16 bytes a parameter and 1048576 microbatches' saved bytes and tensors in flight add up past 2^62 bytes (4.6 EB)"
check "... once" "$(grep -c 'too large to count' "$dir/err" | grep -qx 1; echo $?)" \
	"$(grep -c 'too large' "$dir/err") errors"

# Below the limits, huge figures are counted exactly: 2^15 microbatches of 2^42 bytes
# saved by each layer under gpipe (every forward before any backward), 2^58 bytes saved
# on rank 1 at its peak (its linear's input and its loss's, 2^43 a microbatch).
two 1048576x1048576 'linear 1048576;' 'linear 1048576; loss mse;' 32768 \
	'cost * f=1 b=1 w=1; link ideal;' | sed 's/1f1b/gpipe/' >"$dir/big.pipe"
t "a program of 2^58 saved bytes compiles" 0 "$BIN/pipecc" "$dir/big.pipe" -o "$dir/big.plan"
t "... and pipesim counts its memory" 0 "$BIN/pipesim" --json "$dir/big.plan"
has "... exactly" "$dir/out" \
	'{"rank": 1, .*"peak_total_bytes": 288239172253122560, "param_bytes": 4398050705408, "grad_bytes": 4398050705408, "optim_state_bytes": 0, "saved_bytes_at_peak": 288230376151711744, "inflight_bytes_at_peak": 0,'
t "... and its text report in scaled units" 0 "$BIN/pipesim" "$dir/big.plan"
has "... rank 1's peak 288 PB" "$dir/out" "^ 1  *288 PB  *4\.4 TB  *4\.4 TB "

# The plan reader: a version-1 plan (no checksum) from tests/plans with one figure
# raised.  Stage 0's parameters at 2^58, the fewest whose 16 bytes each reach 2^62;
# 2^58 - 2^20 is read, its memory counted.
g=tests/plans/good/tiny2.plan
sed 's/^\(stage 0 .*\) params=72 /\1 params=288230376150663168 /' "$g" >"$dir/params.plan"
t "a plan of 2^58 - 2^20 parameters is counted" 0 "$BIN/pipesim" "$dir/params.plan"
! grep -q "memory is too large" "$dir/err"
check "... by its memory" $? "$(head -1 "$dir/err")"
sed 's/^\(stage 0 .*\) params=72 /\1 params=288230376151711744 /' "$g" >"$dir/params.plan"
for tool in pipesim piperun; do
	t "$tool refuses a plan whose memory passes 2^62 bytes" 1 "$BIN/$tool" "$dir/params.plan"
	has "... at the stage's line" "$dir/err" \
		"params.plan:11: error: the plan's memory is too large to count: by this stage, 16 bytes a parameter and 2 microbatches' saved bytes and tensors in flight add up past 2^62 bytes (4.6 EB)"
done
t "pipecc refuses it as input" 1 "$BIN/pipecc" "$dir/params.plan" -o "$dir/again.plan"
has "... at the same line" "$dir/err" "params.plan:11: error: the plan's memory is too large"

# An edge of 2^60 - 1 bytes (its SENDs and RECVs too), 4 copies of it a microbatch: at
# the edge's line.
sed 's/ bytes=128 / bytes=1152921504606846975 /' "$g" >"$dir/edge.plan"
t "a plan whose edge passes 2^62 bytes is refused" 1 "$BIN/pipesim" "$dir/edge.plan"
has "... at the edge's line" "$dir/err" "edge.plan:18: error: the plan's memory is too large to count: by this edge"

# A layer 2^31 - 1 wide both ways: 2^62 parameters, more than its stage may count.
w=2147483647
sed -e "s/^layer linear 8 8\$/layer linear $w $w/" "$g" >"$dir/wide.plan"
t "a plan with a layer of 2^62 parameters is refused" 1 "$BIN/pipesim" "$dir/wide.plan"
has "... at the layer's line" "$dir/err" \
	"wide.plan:12: error: layer too large to count: its parameters are 4.61e+18, past 1.15e+18, the most the tools count"

# A stage of ten layers of 2^57 saved bytes (2^24 rows, 2^31 - 1 wide): each counts, the
# sum passes 2^60 at the ninth.
relus=$(printf 'layer relu 2147483647 2147483647\\n%.0s' 1 2 3 4 5 6 7 8 9 10)
sed -e 's/^input 4x8$/input 16777216x8/' -e "s/^layer relu 8 8\$/${relus%??}/" \
	-e 's/^\(stage 0 .*\) layers=2 /\1 layers=11 /' "$g" >"$dir/relus.plan"
t "a plan with a stage whose layers add up past 2^60 bytes is refused" 1 "$BIN/pipesim" \
	"$dir/relus.plan"
has "... at the layer that passes it" "$dir/err" \
	"relus.plan:21: error: stage too large to count by this layer: its layers' saved bytes per microbatch are 1.3e+18, past 1.15e+18"

# Times: the simulator saturates its clock rather than wrap; a step of 2^62 ns or more
# (forwards of 2^61 ns, the most a plan's cost may say) is refused rather than reported
# with saturated figures (makespan 6917529027641087.853 us and a bubble from it before).
sed 's/ f=1000 / f=2305843009213693951 /' "$g" >"$dir/long.plan"
t "pipesim refuses a step its clock cannot count" 1 "$BIN/pipesim" "$dir/long.plan"
has "... saying so about the plan" "$dir/err" \
	"long.plan: error: the simulated step takes more than 2^62 ns (146 years), more than the run's times can be counted in"
check "... and reports nothing" "$([ ! -s "$dir/out" ]; echo $?)" "it printed a report"
t "... also as JSON" 1 "$BIN/pipesim" --json --model overlap "$dir/long.plan"
check "... printing none" "$([ ! -s "$dir/out" ]; echo $?)" "it printed JSON"
# A deadlock whose steps before the stall saturate the clock: the deadlock is the
# finding (it was hidden behind the time error before), its report draws no picture
# of saturated times (the grid's header said 2305843009213693.951 us).
sed 's/ f=1000 b=1000 / f=2305843009213693951 b=2305843009213693951 /' \
	tests/plans/bad/head_to_head.plan >"$dir/hh.plan"
t "a deadlock past the clock's range is still reported as a deadlock" 1 "$BIN/pipesim" "$dir/hh.plan"
has "... with its cycle" "$dir/err" "hh.plan: error: deadlock: 2 of 2 ranks can never finish"
has "... and no picture of saturated times" "$dir/err" \
	"(no picture of the last steps: their times pass 2^62 ns)"
has "... then the time error" "$dir/err" \
	"hh.plan: error: the simulated steps before the failure take more than 2^62 ns"
check "... with no number of the saturated clock" \
	"$(grep -c '2305843009213693\|9223372036854775' "$dir/err")" "a saturated time was printed"

# The same for pipecc: 2^20 microbatches of 3000 s on one rank is 6.3e18 ns.  The
# lowering's walk wrapped around there (undefined behaviour; the plan came out and
# pipesim refused it); now the walk's clock stops at 2^62 ns and pipecc says so.
printf 'pipeline l; mesh pp=1; microbatches 1048576; input 2x4;\nstage a { linear 4; }\nstage b { linear 4; loss mse; }\nschedule gpipe; cost * f=1000s b=1000s w=1000s; link ideal;\n' >"$dir/long.pipe"
t "pipecc refuses a step its clock cannot count" 1 "$BIN/pipecc" "$dir/long.pipe" -o "$dir/long2.plan"
has "... at the schedule" "$dir/err" \
	"long.pipe:4:10: error: the schedule's step takes more than 2^62 ns (146 years) at the stages' costs"
check "... and writes no plan" "$([ ! -e "$dir/long2.plan" ]; echo $?)" "a plan was written"
sed 's/schedule gpipe/schedule auto/' "$dir/long.pipe" >"$dir/auto.pipe"
t "schedule auto refuses to weigh it" 1 "$BIN/pipecc" "$dir/auto.pipe" -o "$dir/long2.plan"
has "... before searching" "$dir/err" \
	"auto.pipe:4:10: error: schedule auto: the step's work adds up to 8.39e+18 ns one op after another, past 2^61 ns (73 years)"

[ "$fails" -eq 0 ]
