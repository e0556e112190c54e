#!/bin/sh
# Nesting limits: residual bodies nest at most 16 deep (PLAN_NEST_MAX, the depth piperun's
# walk holds), block uses at most 64 deep.  Before 2026-12-04 pipecc took any depth:
# 17 nested residuals compiled and simulated, and piperun failed at its first step
# ("residual blocks nest deeper than 16"); 20,000 blocks each using the one above
# overflowed the checker's stack (SIGSEGV), and each lookup of a block's name scanned
# every block (200,000 of them ran for minutes); 2,500 nested bodies made bison report
# "memory exhausted".
: "${BIN:=bin}"
TOOL=nesting
. tests/lib/cli.sh

# nested N: a program whose stage holds a relu inside N nested residuals.
nested() {
	printf 'pipeline d; mesh pp=1; microbatches 2; input 2x4;\nstage a { '
	i=0
	while [ "$i" -lt "$1" ]; do printf 'residual { '; i=$((i + 1)); done
	printf 'relu;'
	i=0
	while [ "$i" -lt "$1" ]; do printf ' }'; i=$((i + 1)); done
	printf ' linear 4; loss mse; }\nschedule gpipe;\n'
}
# chain N: blocks b0 .. b(N-1), each using the one before; the stage uses the last.
chain() {
	printf 'pipeline c; mesh pp=1; microbatches 2; input 2x4;\nblock b0 { relu; }\n'
	awk -v n="$1" 'BEGIN { for (i = 1; i < n; i++) printf "block b%d { b%d; }\n", i, i - 1 }'
	printf 'stage a { b%d; linear 4; loss mse; }\nschedule gpipe;\n' $(($1 - 1))
}

nested 16 >"$dir/n16.pipe"
t "16 nested residuals compile" 0 "$BIN/pipecc" "$dir/n16.pipe" -o "$dir/n16.plan"
t "... and run, as the sequential reference does" 0 "$BIN/piperun" "$dir/n16.plan" --check
nested 17 >"$dir/n17.pipe"
t "17 nested residuals are refused" 1 "$BIN/pipecc" "$dir/n17.pipe" -o "$dir/n17.plan"
has "... at the 17th residual" "$dir/err" \
	"n17.pipe:2:187: error: 'residual' bodies nest more than 16 deep here, the most the tools run"
check "... with no other error" "$(grep -c 'error:' "$dir/err" | awk '{ print ($1 != 1) }')" \
	"a follow-on error was printed"
check "... and no plan" "$([ ! -e "$dir/n17.plan" ]; echo $?)" "a plan was written"
nested 5000 >"$dir/n5000.pipe"
t "5000 nested residuals are refused by the parser" 1 "$BIN/pipecc" "$dir/n5000.pipe" -o "$dir/n.plan"
has "... saying why" "$dir/err" "n5000.pipe:2:27489: error: nested too deeply for the parser"

# The plan reader: stage 0 of tiny2 with 17 residuals around its linear and relu (all
# ending at the relu), and with two bodies that cross.
awk '/^stage 0 /{ sub(/layers=2/, "layers=19"); print; for (l = 0; l < 17; l++)
	printf "layer residual 8 8 span=%d\n", 18 - l; next } { print }' \
	tests/plans/good/tiny2.plan >"$dir/deep.plan"
for tool in pipesim piperun; do
	t "$tool refuses a plan with 17 nested bodies" 1 "$BIN/$tool" "$dir/deep.plan"
	has "... at the 17th" "$dir/err" \
		"deep.plan:28: error: residual bodies nest more than 16 deep here, the most the tools run"
done
awk '/^stage 0 /{ sub(/layers=2/, "layers=4"); print
	print "layer residual 8 8 span=2"; print "layer residual 8 8 span=2"; next } { print }' \
	tests/plans/good/tiny2.plan >"$dir/cross.plan"
t "a plan whose bodies cross is refused" 1 "$BIN/pipesim" "$dir/cross.plan"
has "... at the inner one" "$dir/err" \
	"cross.plan:13: error: span=2 ends past the body this layer is in (layer 2 ends it)"

chain 64 >"$dir/c64.pipe"
t "blocks 64 deep compile" 0 "$BIN/pipecc" "$dir/c64.pipe" -o "$dir/c64.plan"
chain 65 >"$dir/c65.pipe"
t "blocks 65 deep are refused" 1 "$BIN/pipecc" "$dir/c65.pipe" -o "$dir/c65.plan"
has "... at the deepest use" "$dir/err" \
	"c65.pipe:3:12: error: blocks nest more than 64 deep here: 'b0' is used inside 64 other blocks' uses"
chain 200000 >"$dir/c200k.pipe"
t "200,000 chained blocks end with the error, not a crash" 1 timeout 60 "$BIN/pipecc" \
	"$dir/c200k.pipe" -o "$dir/c.plan"
has "... at the deepest use" "$dir/err" "c200k.pipe:199938:17: error: blocks nest more than 64 deep"

[ "$fails" -eq 0 ]
