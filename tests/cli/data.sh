#!/bin/sh
# piperun on real tokens (--data, docs/runtime.md "Training on a token file"): a byte
# file of the project's own docs trains a small transformer that --check agrees with on
# threads and under mpirun; two meshes of gpt-tiny see the same data and so the same
# step-1 loss; the loss falls; --eval-data prints a held-out loss when asked; and every
# refusal names the file and the reason.
: "${BIN:=bin}"
TOOL=data
. tests/lib/cli.sh

# ASCII text (ids below 128), as make demo's conversion: the bytes are the tokens
LC_ALL=C tr -cd '\11\12\40-\176' <docs/runtime.md >"$dir/text.u8"
LC_ALL=C tr -cd '\11\12\40-\176' <docs/semantics.md >"$dir/held.bytes"
cat >"$dir/small.pipe" <<'EOF'
pipeline small;
mesh pp=2;
microbatches 4;
input tokens 2x16 vocab=128;
block layer {
	residual { layernorm; attention heads=2; }
	residual { layernorm; mlp 64; }
}
stage a { embed 32 positions; layer; }
stage b { layer; layernorm; head; loss xent; }
schedule 1f1b;
EOF
"$BIN/pipecc" "$dir/small.pipe" -o "$dir/small.plan"
runs "on a token file" "$dir/small.plan" --data "$dir/text.u8"
mpi_check "on a token file under mpirun" 2 "$dir/small.plan" --data "$dir/text.u8"

# the loss falls on text
t "trains 8 steps on text" 0 "$BIN/piperun" "$dir/small.plan" --data "$dir/text.u8" \
	--steps 8 --optimizer adamw --lr 1e-2
first=$(sed -n 's/^step 1: loss \([0-9.]*\).*/\1/p' "$dir/out")
last=$(sed -n 's/^step 8: loss \([0-9.]*\).*/\1/p' "$dir/out")
check "the loss falls (step 1 $first, step 8 $last)" \
	"$(awk -v a="$first" -v b="$last" 'BEGIN { print (b < a - 0.5) ? 0 : 1 }')" "$first -> $last"
has "steps print tokens/s and TFLOP/s" "$dir/out" \
	"^step 8: loss [0-9.]* time [0-9.]* [mun]*s, [0-9]* tokens/s, [0-9.e+-]* TFLOP/s$"

# two meshes, one data set: the step-1 loss is the same number to the last digit (the
# same stage code on the same sequences from the same weights; the step's loss is the
# mean of the microbatches' f32 losses summed in double, exact in any order, so the
# schedule's order does not show)
sed 's/vocab=512/vocab=256/' examples/gpt-tiny.pipe >"$dir/pp4.pipe"
sed -e 's/mesh pp=4;/mesh pp=2;/' -e 's/schedule 1f1b;/schedule interleaved;/' \
	"$dir/pp4.pipe" >"$dir/pp2.pipe"
cat docs/*.md >"$dir/docs.u8"
for m in pp4 pp2; do
	"$BIN/pipecc" "$dir/$m.pipe" -o "$dir/$m.plan"
	t "gpt-tiny $m, 1 step" 0 "$BIN/piperun" "$dir/$m.plan" --data "$dir/docs.u8" --steps 1 \
		--seed 9 --json
	sed -n 's/.*"step": 1, "loss": \([0-9.e+-]*\).*/\1/p' "$dir/out" >"$dir/$m.loss"
done
check "pp=4 and pp=2 see the same data ($(cat "$dir/pp4.loss") and $(cat "$dir/pp2.loss"))" \
	"$(cmp -s "$dir/pp4.loss" "$dir/pp2.loss" && [ -s "$dir/pp4.loss" ]; echo $?)" "differ"
t "another seed, other sequences" 0 "$BIN/piperun" "$dir/pp2.plan" --data "$dir/docs.u8" \
	--steps 1 --seed 10 --json
sed -n 's/.*"step": 1, "loss": \([0-9.e+-]*\).*/\1/p' "$dir/out" >"$dir/seed10.loss"
check "another seed gives another step-1 loss ($(cat "$dir/seed10.loss"))" \
	"$(! cmp -s "$dir/seed10.loss" "$dir/pp2.loss" && [ -s "$dir/seed10.loss" ]; echo $?)" "same"

# held-out loss: after steps 2 and 4 (every 2) and 5 (the last), nowhere else
t "--eval-data --eval-every 2" 0 "$BIN/piperun" "$dir/small.plan" --data "$dir/text.u8" \
	--eval-data "$dir/held.bytes" --data-format u8 --steps 5 --eval-every 2
check "held-out loss after steps 2, 4 and 5" \
	"$(sed -n 's/^eval after step \([0-9]*\): loss [0-9.]* (held-out, 8 sequences)$/\1/p' \
		"$dir/out" | tr '\n' ' ' | grep -qx '2 4 5 '; echo $?)" "$(grep eval "$dir/out")"
t "--eval-data alone: after the last step" 0 "$BIN/piperun" "$dir/small.plan" \
	--eval-data "$dir/text.u8" --steps 2
has "one held-out loss" "$dir/out" "^eval after step 2: loss"

# refusals: each names the file and what is wrong
printf 'z' >"$dir/short.u8"
t "a file shorter than a sequence" 1 "$BIN/piperun" "$dir/small.plan" --data "$dir/short.u8"
has "says how short" "$dir/err" "short.u8: error: 1 tokens, shorter than one sequence of 17"
t "an id past the vocabulary" 1 "$BIN/piperun" "$dir/small.plan" --data "$dir/docs.u8"
has "names the position and the id" "$dir/err" \
	"docs.u8: error: token [0-9]* (0-based) is [0-9]*, not a token id of the plan's vocabulary of 128"
t "a name that tells no format" 1 "$BIN/piperun" "$dir/small.plan" --data "$dir/small.pipe"
has "asks for --data-format" "$dir/err" "cannot tell the token format.*--data-format"
t "a file that is not there" 1 "$BIN/piperun" "$dir/small.plan" --data "$dir/none.u16"
has "cannot read it" "$dir/err" "none.u16: error: cannot read the token file: No such file"
"$BIN/pipecc" examples/tiny.pipe -o "$dir/tiny.plan"
t "--data on a plan without tokens" 1 "$BIN/piperun" "$dir/tiny.plan" --data "$dir/text.u8"
has "needs token input" "$dir/err" "needs a plan with token input"
t "--eval-every without --eval-data" 2 "$BIN/piperun" "$dir/small.plan" --eval-every 2
t "--data-format without a file" 2 "$BIN/piperun" "$dir/small.plan" --data-format u16

exit "$fails"
