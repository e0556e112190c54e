#!/bin/sh
# `microbatches auto;`: the input's first number is the step's batch and schedule auto's
# search chooses how many microbatches it is cut into (compiler/batch.c, pipecc.c).
# The choice is held against each count compiled by hand: its step is the least of
# theirs, in pipesim's overlap model.
: "${BIN:=bin}"
TOOL=batch
. tests/lib/cli.sh

# gpt-tiny with a step of 32 sequences: counts 4, 8, 16 and 32 at pp=4.
sed -e 's/^microbatches 8;/microbatches auto;/' -e 's/input tokens 4x64/input tokens 32x64/' \
	-e 's/^schedule 1f1b;/schedule auto;/' examples/gpt-tiny.pipe >"$dir/auto.pipe"
at=$(grep -n '^microbatches auto;' "$dir/auto.pipe" | cut -d: -f1):14 # the word auto
t "gpt-tiny, a step of 32 sequences, compiles" 0 "$BIN/pipecc" "$dir/auto.pipe" -o "$dir/auto.plan"
step() { "$BIN/pipesim" "$1" --model overlap --json | sed -n 's/^  "makespan": \([0-9.]*\),$/\1/p'; }
best= bestm=
for m in 4 8 16 32; do
	sed -e "s/^microbatches auto;/microbatches $m;/" -e "s/input tokens 32x64/input tokens $((32 / m))x64/" \
		"$dir/auto.pipe" >"$dir/m$m.pipe"
	"$BIN/pipecc" "$dir/m$m.pipe" -o "$dir/m$m.plan" 2>/dev/null || echo "m=$m failed"
	s=$(step "$dir/m$m.plan")
	if [ -z "$best" ] || awk "BEGIN { exit !($s < $best) }"; then best=$s bestm=$m; fi
done
got=$(step "$dir/auto.plan")
check "its step is the least of the four counts compiled by hand ($best us, m=$bestm)" \
	"$(awk "BEGIN { exit !($got == $best) }"; echo $?)" "auto's $got us"
grep -q "^microbatches $bestm\$" "$dir/auto.plan"
check "the plan has that count" $? "$(grep '^microbatches' "$dir/auto.plan")"
grep -q "^input tokens $((32 / bestm))x64 " "$dir/auto.plan"
check "... and the input its share of the batch" $? "$(grep '^input' "$dir/auto.plan")"
t "--explain" 0 "$BIN/pipecc" "$dir/auto.pipe" --explain -o "$dir/x.plan"
has "... says what it weighs" "$dir/err" "microbatches auto: the step's 32 sequences cut into every count of microbatches of at least pp=4 that divides it; first 32 microbatches of 1 sequence:"
has "... each count" "$dir/err" "^and again for 16 microbatches of 2 sequences:"
has "... and the winner" "$dir/err" "^$bestm microbatches of $((32 / bestm)) sequences\{0,1\} win"

# The command line fixes the count; it must divide the batch.
t "--microbatches 16" 0 "$BIN/pipecc" "$dir/auto.pipe" --microbatches 16 -o "$dir/x.plan"
grep -q '^input tokens 2x64 ' "$dir/x.plan" && grep -q '^microbatches 16$' "$dir/x.plan"
check "... cuts the batch into 16 of 2 sequences" $? "$(grep -E '^(input|microbatches)' "$dir/x.plan")"
t "--microbatches 5" 1 "$BIN/pipecc" "$dir/auto.pipe" --microbatches 5 -o "$dir/x.plan"
has "... does not divide the batch, located" "$dir/err" "auto.pipe:$at: error: microbatches auto: --microbatches 5 does not divide the step's batch of 32"

# A matrix input: the batch is rows.
printf 'pipeline m;\nmesh pp=2;\nmicrobatches auto;\ninput 12x32;\nstage a { linear 32; relu; }\nstage b { linear 32; loss mse; }\nschedule auto;\n' >"$dir/rows.pipe"
t "a matrix input of 12 rows" 0 "$BIN/pipecc" "$dir/rows.pipe" --explain -o "$dir/x.plan"
has "... weighs rows" "$dir/err" "^and again for 6 microbatches of 2 rows:"
m=$(sed -n 's/^microbatches //p' "$dir/x.plan")
grep -q "^input $((12 / m))x32\$" "$dir/x.plan"
check "... and the plan's input is its share ($m microbatches)" $? "$(grep '^input' "$dir/x.plan")"

# Mistakes.
sed 's/^schedule auto;/schedule 1f1b;/' "$dir/auto.pipe" >"$dir/given.pipe"
t "a schedule that does not search" 1 "$BIN/pipecc" "$dir/given.pipe" -o "$dir/x.plan"
has "... is told to write schedule auto" "$dir/err" "given.pipe:$at: error: microbatches auto is chosen by schedule auto's search, and schedule 1f1b does not search: write 'schedule auto;', or 'microbatches N;'"
t "... but --microbatches fixes it" 0 "$BIN/pipecc" "$dir/given.pipe" --microbatches 8 -o "$dir/x.plan"
sed 's/input tokens 32x64/input tokens 3x64/' "$dir/auto.pipe" >"$dir/small.pipe"
t "a batch of 3 at pp=4" 1 "$BIN/pipecc" "$dir/small.pipe" -o "$dir/x.plan"
has "... has no count" "$dir/err" "small.pipe:$at: error: microbatches auto: the step's batch of 3 (the input's first number) has no divisor of at least pp=4"
check "... writes no plan" "$([ ! -e "$dir/x.plan" ] || [ "$dir/x.plan" -ot "$dir/small.pipe" ]; echo $?)" "a plan was written"
[ "$fails" -eq 0 ]
