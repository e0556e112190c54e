#!/bin/sh
# What a person reads (issue 58, "Numbers and text"): times and sizes in scaled units
# (plan/units.h) in pipesim's report, piperun's text and pipecc's summary and --explain,
# raw numbers in --json; uniform rows said once ("ranks 0-13: ...", "0 -> 2 .. 12 -> 14
# (7 links, each)"); plurals; a token input in sequences and tokens; the tied table's
# all-reduce by name; and a text plan refused on a terminal unless -o - asks for it.
: "${BIN:=bin}"
TOOL=readable
. tests/lib/cli.sh

# pp=8 x dp=2, gpipe, one microbatch: every rank holds the same, the ends aside
{
	printf 'pipeline uniform;\nmesh pp=8 dp=2;\nmicrobatches 1;\ninput 8x64;\n'
	for s in 0 1 2 3 4 5 6; do printf 'stage s%d { linear 64; relu; }\n' $s; done
	printf 'stage s7 { linear 64; loss mse; }\nschedule gpipe;\ncost * f=1 b=1 w=1;\n'
	printf 'link latency=2us bandwidth=25GB/s;\n'
} >"$dir/u.pipe"
"$BIN/pipecc" "$dir/u.pipe" -o "$dir/u.plan" || exit 1

t "pipesim on the uniform plan" 0 "$BIN/pipesim" "$dir/u.plan"
cp "$dir/out" "$dir/sim"
has "the makespan in us" "$dir/sim" "^makespan   [0-9][0-9.]* us$"
has "one microbatch, singular" "$dir/sim" ", 1 microbatch, strict model"
has "rank rows alike said once (a line plan's ranks, 2 apart)" "$dir/sim" \
	"^ 0-14 by 2 *5\.19 *3 us *[0-9.]* us *4\.1 kB *1 *33\.3 kB$"
has "memory rows alike said once" "$dir/sim" "^ 2-12 by 2 *39\.4 kB "
check "links alike said once: 2 lines for 14 links" \
	"$(sed -n '/^links/,/^$/p' "$dir/sim" | grep -c '^  ' | grep -qx 2; echo $?)" \
	"$(sed -n '/^links/,/^$/p' "$dir/sim")"
has "... forward" "$dir/sim" "^  0 -> 2 \.\. 12 -> 14 (7 links, each): 2\.05 kB in 1 transfer$"
has "dp groups alike said once, one all-reduce" "$dir/sim" \
	"^  groups of ranks 0-14 by 2 (2 ranks): 16\.6 kB in 1 all-reduce$"
has "the critical path in scaled units" "$dir/sim" \
	"^critical path: 15 stretches, 24 us of compute, [0-9.]* us of communication and waiting$"
t "--json stays raw" 0 "$BIN/pipesim" --json "$dir/u.plan"
has "... the makespan in us with three decimals" "$dir/out" '"makespan": [0-9]*\.[0-9][0-9][0-9],$'

t "--emit summary" 0 "$BIN/pipecc" "$dir/u.pipe" --emit summary -o "$dir/sum"
has "one microbatch, singular" "$dir/sum" "^pipeline uniform: schedule gpipe, 8 stages, 1 microbatch of 8x64$"
has "memory rows alike said once" "$dir/sum" "^  ranks 0-13: peak 39\.4 kB = "
has "... the last pipeline rank's two" "$dir/sum" "^  ranks 14-15: peak 37\.4 kB = "
check "two memory lines for 16 ranks" "$(grep -c '^  ranks* [0-9]' "$dir/sum" | grep -qx 2; echo $?)" \
	"$(grep '^  rank' "$dir/sum")"
# 28 sends of 2048 bytes; 16 all-reduces of a stage's 4160 f32 gradients
has "bytes moved in scaled units" "$dir/sum" "^bytes moved per step: 57\.3 kB point-to-point, 266 kB all-reduce$"

# a token input, and a head tied to the embedding on another pipeline rank
sed 's/head;/head tied;/' examples/gpt-tiny.pipe >"$dir/t.pipe"
"$BIN/pipecc" "$dir/t.pipe" -o "$dir/t.plan" || exit 1
t "--emit summary of a token input" 0 "$BIN/pipecc" examples/gpt-tiny.pipe --emit summary
has "... in sequences and tokens" "$dir/out" "8 microbatches of 4 sequences x 64 tokens (vocabulary 512)$"
t "pipesim on a tied table" 0 "$BIN/pipesim" "$dir/t.plan"
has "the tied table's all-reduce by name" "$dir/out" \
	"^  tied table's copies (embedding on rank 0, head on rank 3): 262 kB in 1 all-reduce$"
! grep -q "group of rank 0 (2 ranks)" "$dir/out"
check "... not as a group of rank 0" $? "$(grep 'group of rank' "$dir/out")"

t "piperun's text" 0 "$BIN/piperun" "$dir/t.plan" --steps 1
has "... in sequences and tokens, one step" "$dir/out" "4 sequences x 64 tokens) on threads, 1 step$"
has "... the step's time scaled" "$dir/out" "^step 1: loss [0-9.]* time [0-9.]* [mun]*s, "
has "... the optimizer state in bytes" "$dir/out" "^optimizer sgd lr=0\.5, state 0 B$"
has "... ranks' figures scaled" "$dir/out" "^   0   0   0   0 *[0-9.]* *[0-9.]* [mun]*s *9\.46 MB *[0-9.]* MB$"

# a text plan on a terminal (script(1) gives one)
if command -v script >/dev/null 2>&1 && script -qec true /dev/null >/dev/null 2>&1; then
	t "a text plan to a terminal is refused" 0 script -qec \
		"'$BIN/pipecc' examples/tiny.pipe; echo rc=\$?" /dev/null
	has "... exit 2" "$dir/out" "^rc=2"
	has "... saying what to do" "$dir/out" \
		"pipecc: the plan would go to a terminal: give -o FILE, redirect standard output, or -o - to see it there"
	t "-o - writes it there" 0 script -qec "'$BIN/pipecc' examples/tiny.pipe -o -; echo rc=\$?" /dev/null
	has "... the plan" "$dir/out" "^pipecc-plan "
	has "... exit 0" "$dir/out" "^rc=0"
	t "--emit summary to a terminal is written" 0 script -qec \
		"'$BIN/pipecc' examples/tiny.pipe --emit summary" /dev/null
	has "... the summary" "$dir/out" "^pipeline tiny: "
fi
t "a text plan through a pipe is written" 0 sh -c "'$BIN/pipecc' examples/tiny.pipe | head -1"
has "... the plan" "$dir/out" "^pipecc-plan "

[ "$fails" -eq 0 ]
