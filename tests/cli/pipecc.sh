#!/bin/sh
# pipecc's command line: exit codes, outputs, stdin/stdout, dumps.
: "${BIN:=bin}"
TOOL=pipecc
. tests/lib/cli.sh

t "no arguments is a usage error" 2 "$BIN/pipecc"
t "unknown option is a usage error" 2 "$BIN/pipecc" --frobnicate examples/tiny.pipe
t "bad --emit is a usage error" 2 "$BIN/pipecc" --emit xml examples/tiny.pipe
t "--comms without torch-csv is a usage error" 2 "$BIN/pipecc" --comms examples/tiny.pipe
t "bad --microbatches is a usage error" 2 "$BIN/pipecc" -m 0 examples/tiny.pipe
t "bad --dump is a usage error" 2 "$BIN/pipecc" --dump=nothing examples/tiny.pipe
t "two inputs is a usage error" 2 "$BIN/pipecc" examples/tiny.pipe examples/mlp4.pipe
t "--help" 0 "$BIN/pipecc" --help
has "--help lists --emit" "$dir/out" "--emit"
t "--version" 0 "$BIN/pipecc" --version
has "--version names the plan format" "$dir/out" "plan format 3"
t "missing file is an input error" 1 "$BIN/pipecc" "$dir/nonexistent.pipe"
has "missing file is named" "$dir/err" "nonexistent.pipe"

for f in examples/*.pipe; do
	t "compiles $f" 0 "$BIN/pipecc" "$f" -o "$dir/x.plan"
	has "$f plan has a header" "$dir/x.plan" "^pipecc-plan [23] blocks=[0-9a-f]\{16\}$"
done

t "stdin to stdout" 0 sh -c "'$BIN/pipecc' - <examples/tiny.pipe"
has "stdin plan ends with end" "$dir/out" "^end$"
t "summary" 0 "$BIN/pipecc" examples/mlp4.pipe --emit summary
has "summary counts ranks" "$dir/out" "(8 ranks)"
has "summary counts ops" "$dir/out" "ops: 400 total"
t "torch csv" 0 "$BIN/pipecc" examples/tiny.pipe --emit torch-csv
has "torch csv row of rank 0" "$dir/out" "^0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3$"
t "torch csv with comms" 0 "$BIN/pipecc" examples/tiny.pipe --emit torch-csv --comms
has "torch csv names sends" "$dir/out" "0SEND_F0"
t "--schedule overrides" 0 "$BIN/pipecc" examples/tiny.pipe --schedule gpipe --emit torch-csv
has "gpipe order" "$dir/out" "^0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3$"
t "--microbatches overrides" 0 "$BIN/pipecc" examples/tiny.pipe -m 2 --emit torch-csv
has "two microbatches" "$dir/out" "^1F0,1B0,1F1,1B1$"
t "unknown --schedule is an input error" 1 "$BIN/pipecc" examples/tiny.pipe --schedule nope
for pass in parse place schedule lower; do
	t "--dump=$pass" 0 "$BIN/pipecc" examples/tiny.pipe --dump=$pass
done
t "--dump=schedule output" 0 "$BIN/pipecc" examples/tiny.pipe --dump=schedule
has "--dump=schedule shows rank 1" "$dir/out" "^rank 1: 1F0 1B0"

# A program with an error: located diagnostic, exit 1, nothing written.
printf 'pipeline x;\nmicrobatches 2;\ninput 2x4;\nstage a { linear 4; loss mse; }\nschedule 1f1b;\nmesh pp=2;\n' >"$dir/bad.pipe"
t "one stage on two ranks is an input error" 1 "$BIN/pipecc" "$dir/bad.pipe" -o "$dir/bad.plan"
has "the error is located" "$dir/err" "bad.pipe:[0-9]*:[0-9]*: error:"
if [ -e "$dir/bad.plan" ]; then
	echo "testing pipecc no plan on error ... FAILED"
	fails=$((fails + 1))
else
	echo "testing pipecc no plan on error ... passed"
fi
t "writing to /dev/null" 0 "$BIN/pipecc" examples/tiny.pipe -o /dev/null
[ -c /dev/null ]
check "/dev/null stays a device" $? "pipecc replaced /dev/null"
t "unwritable output is an error" 1 "$BIN/pipecc" examples/tiny.pipe -o /nonexistent/dir/x.plan
[ "$fails" -eq 0 ]
