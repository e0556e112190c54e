#!/bin/sh
# Automatic stage partitioning (`model { ... }`, `stages`, `cut`; docs/schedules.md
# "Partitioning"): examples/llama3-8b-auto.pipe's stated figures are what the tools
# print, the same model written by hand with 4 layers a stage gets --emit summary's
# warning and a slower step, --explain shows the cut beside the best uniform split, a
# bad model exits 1 with a located error, and the cut is deterministic.
: "${BIN:=bin}"
TOOL=partition
. tests/lib/cli.sh

[ -x "$BIN/pipesim" ] || { echo "note: partition: pipesim not built: skipped"; exit 0; }
ex=examples/llama3-8b-auto.pipe

t "the example compiles with --explain" 0 "$BIN/pipecc" "$ex" --explain -o "$dir/auto.plan"
has "--explain says how it cut" "$dir/err" "^model: 68 layers cut into 8 stages (1 per rank)"
has "--explain: s0 takes the embedding and 4 layers" "$dir/err" "^  s0 *0\.\.8 *94\.32 ms"
has "--explain: s7 the norm, head and loss" "$dir/err" "^  s7 *60\.\.67 *98\.47 ms"
has "--explain: the slowest stage" "$dir/err" "^  slowest stage 106\.8 ms$"
has "--explain: the best uniform split beside it" "$dir/err" "^best uniform split (equal layer counts):"
has "--explain: then two stages a rank" "$dir/err" "^model: 68 layers cut into 16 stages (2 per rank)"
has "--explain: their slowest stage" "$dir/err" "^  slowest stage 59\.75 ms$"
has "--explain: which wins" "$dir/err" "^two stages a rank win: 3\.618 s against 3\.762 s$"
t "pipesim runs the cut plan" 0 "$BIN/pipesim" --model overlap --json "$dir/auto.plan"
has "the example's stated step" "$dir/out" '"makespan": 3617726\.650,$'

# the same model by hand: 4 layers a stage
sed -e '/^model/d' -e '/^stages/d' "$ex" >"$dir/hand.pipe"
j=0
while [ $j -lt 8 ]; do
	pre= post=
	[ $j -eq 0 ] && pre="embed 4096; "
	[ $j -eq 7 ] && post=" rmsnorm; head; loss xent;"
	echo "stage s$j { ${pre}llama x 4;$post }" >>"$dir/hand.pipe"
	j=$((j + 1))
done
t "the hand-written split compiles" 0 "$BIN/pipecc" "$dir/hand.pipe" -o "$dir/hand.plan"
check "no warning without --emit summary" "$([ ! -s "$dir/err" ]; echo $?)" "$(head -2 "$dir/err")"
t "--emit summary on it" 0 "$BIN/pipecc" "$dir/hand.pipe" --emit summary
has "--emit summary warns at the slowest stage" "$dir/err" \
	"hand.pipe:.*: warning: stage 's7' is the slowest: its F+B+W takes 132.9 ms, 34% above the mean stage's 99.01 ms"
t "pipesim runs the hand-written plan" 0 "$BIN/pipesim" --model overlap --json "$dir/hand.plan"
has "the example's stated step by hand" "$dir/out" '"makespan": 4673637\.252,$'
t "--emit summary on the cut plan" 0 "$BIN/pipecc" "$ex" --emit summary
check "no balance warning on pipecc's own cut" "$(grep -c 'is the slowest' "$dir/err")" "warned"

# a balanced hand-written split gets no warning; mlp4's s3 (declared 2, 2, 1.5 us against
# 1, 1, 1) does
t "--emit summary on a balanced split" 0 "$BIN/pipecc" examples/tiny.pipe --emit summary
check "no warning on tiny" "$(grep -c warning "$dir/err")" "warned"
t "--emit summary on mlp4" 0 "$BIN/pipecc" examples/mlp4.pipe --emit summary
has "mlp4: s3 is named" "$dir/err" "mlp4.pipe:10:7: warning: stage 's3' is the slowest: its F+B+W takes 5.5 us, 52% above the mean stage's 3.625 us"

# deterministic: the same plan twice
"$BIN/pipecc" "$ex" -o "$dir/again.plan" 2>/dev/null
t "the cut is deterministic" 0 cmp "$dir/auto.plan" "$dir/again.plan"

# `stages 8;` keeps one a rank: schedule auto weighs that cut alone
sed 's/^stages auto;/stages 8;/' "$ex" >"$dir/eight.pipe"
t "stages 8 compiles" 0 "$BIN/pipecc" "$dir/eight.pipe" --explain -o "$dir/eight.plan"
check "stages 8: one cut weighed" "$(grep -c 'stages a rank' "$dir/err")" "a second cut"
t "pipesim runs it" 0 "$BIN/pipesim" --model overlap --json "$dir/eight.plan"
has "stages 8: the one-a-rank step" "$dir/out" '"makespan": 3761823\.228,$'

# -s NAME cuts for that schedule's stages per rank
t "-s zbv on the example" 0 "$BIN/pipecc" "$ex" -s zbv --dump=parse
check "-s zbv: 16 stages, two a rank" "$([ "$(grep -c '^stage ' "$dir/out")" -eq 16 ]; echo $?)" \
	"$(grep -c '^stage ' "$dir/out") stages"
t "-s 1f1b on the example" 0 "$BIN/pipecc" "$ex" -s 1f1b --dump=parse
check "-s 1f1b: 8 stages" "$([ "$(grep -c '^stage ' "$dir/out")" -eq 8 ]; echo $?)" \
	"$(grep -c '^stage ' "$dir/out") stages"

# bad models: exit 1, located
printf 'pipeline t;\nmesh pp=4;\nmicrobatches 8;\ninput 16x64;\nmodel { linear 64; loss mse; }\nschedule 1f1b;\n' >"$dir/few.pipe"
t "a model with fewer layers than stages" 1 "$BIN/pipecc" "$dir/few.pipe" -o "$dir/x.plan"
has "... is located" "$dir/err" "few.pipe:5:1: error: the model has 2 layers to cut, fewer than its 4 stages"
check "... writes no plan" "$([ ! -e "$dir/x.plan" ]; echo $?)" "a plan was written"
[ "$fails" -eq 0 ]
