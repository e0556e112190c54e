#!/bin/sh
# piperun's progress line (docs/runtime.md "Progress"): on a terminal a redrawn line;
# with --progress, when stderr is not one, a line per step on stderr: the step of the
# total, the loss (the --json figures'), tokens/s, the step's time, the time left and,
# when the plan states a device (its `device peak=` line), the model FLOP utilisation.
# Never on stdout, never without a terminal or --progress, never with --quiet.
: "${BIN:=bin}"
TOOL=progress
. tests/lib/cli.sh

sed '/^device /d' examples/gpt-tiny.pipe >"$dir/nodev.pipe"
t "gpt-tiny: compiles" 0 "$BIN/pipecc" examples/gpt-tiny.pipe -o "$dir/g.plan"
t "without a device: compiles" 0 "$BIN/pipecc" "$dir/nodev.pipe" -o "$dir/n.plan"
# h100's dense f32 rate (compiler/check_layers.c's preset row)
has "the plan states the device's rate" "$dir/g.plan" "^device peak=67000000000000$"
check "no device, no rate" "$(! grep -q '^device' "$dir/n.plan"; echo $?)" "$(grep '^device' "$dir/n.plan")"
sed 's/^device peak=.*/device peak=5/' "$dir/g.plan" >"$dir/bad.plan"
t "a rate out of range is refused" 1 "$BIN/pipesim" "$dir/bad.plan"
has "a rate out of range: located" "$dir/err" "bad.plan:[0-9]*: error: peak= must be a number in \[1e+09, 1e+18\]"

num='[0-9][0-9.e+-]*'
line="^piperun: step [0-9]*/[0-9]* | loss $num | [0-9]* tok/s | $num ms | $num s left"
t "--progress --json: runs" 0 "$BIN/piperun" "$dir/g.plan" --steps 3 --progress --json
check "--progress: a line per step on stderr" "$(grep -c "$line | MFU $num%\$" "$dir/err" | grep -qx 3; echo $?)" \
	"$(cat "$dir/err")"
check "--progress: steps 1, 2, 3 in order" \
	"$(sed -n 's|^piperun: step \([0-9]*\)/3 .*|\1|p' "$dir/err" | tr '\n' ' ' | grep -qx '1 2 3 '; echo $?)" \
	"$(cat "$dir/err")"
sed 's/}, {/\n/g' "$dir/out" | sed -n 's/.*"loss": \([0-9.]*\),.*/\1/p' >"$dir/want"
sed -n 's/.* | loss \([0-9.]*\) | .*/\1/p' "$dir/err" >"$dir/got"
# the line prints 6 decimals, the JSON 8
check "--progress: the losses are the run's ($(tr '\n' ' ' <"$dir/got"))" "$(paste "$dir/got" "$dir/want" |
	awk '{ k++; d = $1 - $2; if (d < 0) d = -d; if ($2 == "" || d > 5e-7) bad = 1 }
		END { exit bad || k != 3 }'; echo $?)" "$(paste "$dir/got" "$dir/want" | tr '\n' ' ')"
check "--progress: the last step has no time left" "$(grep -q 'step 3/3 .* | 0.0 s left' "$dir/err"; echo $?)" \
	"$(tail -1 "$dir/err")"
check "--progress: stdout is the JSON alone" "$(! grep -q 'tok/s' "$dir/out" && head -c1 "$dir/out" | grep -q '{'; echo $?)" \
	"$(head -2 "$dir/out")"

t "without a device: runs" 0 "$BIN/piperun" "$dir/n.plan" --steps 2 --progress
check "without a device: no MFU" "$(grep -c "$line\$" "$dir/err" | grep -qx 2; echo $?)" "$(cat "$dir/err")"
t "not a terminal, no --progress" 0 "$BIN/piperun" "$dir/g.plan" --steps 2
check "not a terminal, no --progress: no line" "$([ ! -s "$dir/err" ]; echo $?)" "$(cat "$dir/err")"
t "--progress --quiet" 0 "$BIN/piperun" "$dir/g.plan" --steps 2 --progress --quiet
check "--progress --quiet: no line" "$([ ! -s "$dir/err" ]; echo $?)" "$(cat "$dir/err")"

# resumed: the steps count on from the checkpoint's
t "saved after 2 steps" 0 "$BIN/piperun" "$dir/n.plan" --steps 2 --save "$dir/ck"
t "resumed for 2 with --progress" 0 "$BIN/piperun" "$dir/n.plan" --steps 2 --progress \
	--resume "$dir/ck"
check "resumed: steps 3/4 and 4/4" \
	"$(sed -n 's|^piperun: step \([0-9]*/[0-9]*\) .*|\1|p' "$dir/err" | tr '\n' ' ' | grep -qx '3/4 4/4 '; echo $?)" \
	"$(cat "$dir/err")"

exit $((fails > 0))
