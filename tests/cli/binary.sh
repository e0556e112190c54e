#!/bin/sh
# The binary plan form (docs/plan-format.md "Binary form"): pipecc --plan-format=binary
# writes it, pipesim and piperun read it with no flag and say what they say on the
# text; pipecc given a plan converts it, text -> binary -> text and binary -> text ->
# binary byte for byte on every example (line and expanded) and test plan; a damaged
# binary plan is refused at a byte, with exit 1; wrong combinations are usage errors;
# --threads N writes the bytes one thread does.
: "${BIN:=bin}"
TOOL=binary
. tests/lib/cli.sh

# trip NAME TEXTPLAN: text -> binary -> text and binary -> text -> binary are identical.
trip() {
	name=$1 plan=$2
	why=""
	"$BIN/pipecc" "$plan" --plan-format=binary -o "$dir/t.bin" 2>"$dir/err" || why="to binary: $(cat "$dir/err")"
	"$BIN/pipecc" "$dir/t.bin" -o "$dir/t.txt" 2>"$dir/err" || why="$why; to text: $(cat "$dir/err")"
	"$BIN/pipecc" "$dir/t.txt" --plan-format binary -o "$dir/t2.bin" 2>"$dir/err" || why="$why; again: $(cat "$dir/err")"
	cmp -s "$dir/t.bin" "$dir/t2.bin" || why="$why; binary -> text -> binary differs"
	"$BIN/pipecc" "$plan" -o "$dir/canon.txt" 2>/dev/null # the text pipecc writes for it
	cmp -s "$dir/t.txt" "$dir/canon.txt" || why="$why; text -> binary -> text differs"
	[ "$(head -c 4 "$dir/t.bin" | od -An -tx1 | tr -d ' ')" = 89504350 ] || why="$why; no binary magic"
	check "$name" "$([ -z "$why" ]; echo $?)" "$why"
}

for f in examples/*.pipe; do
	b=$(basename "$f" .pipe)
	"$BIN/pipecc" "$f" -o "$dir/$b.plan" 2>/dev/null || continue
	trip "$b: round trips byte for byte" "$dir/$b.plan"
	cmp -s "$dir/t.txt" "$dir/$b.plan"
	check "$b: its text back is pipecc's" $? "differs"
	"$BIN/pipecc" --expand "$f" -o "$dir/$b.x.plan" 2>/dev/null || continue
	trip "$b --expand: round trips byte for byte" "$dir/$b.x.plan"
	"$BIN/pipecc" --expand --plan-format=binary "$f" -o "$dir/$b.x.bin" &&
		"$BIN/pipecc" "$dir/$b.x.bin" -o "$dir/$b.x.txt"
	cmp -s "$dir/$b.x.txt" "$dir/$b.x.plan"
	check "$b --expand --plan-format=binary: the expanded plan" $? "differs"
	"$BIN/pipecc" --plan-format=binary "$f" -o "$dir/$b.bin"
	cmp -s "$dir/$b.bin" "$dir/t.bin" || cmp -s "$dir/$b.bin" "$(
		"$BIN/pipecc" "$dir/$b.plan" --plan-format=binary -o "$dir/c.bin"; echo "$dir/c.bin")"
	check "$b: pipecc --plan-format=binary writes what converting its plan does" $? "differs"
	# (ops are named by their line in a text plan, by their index in a binary one)
	"$BIN/pipesim" "$dir/$b.plan" >"$dir/a" 2>&1
	ra=$?
	"$BIN/pipesim" "$dir/$b.bin" >"$dir/b" 2>&1
	rb=$?
	sed -i 's/ (line [0-9]*)//g; s/ (op [0-9]*)//g' "$dir/a" "$dir/b"
	check "$b: pipesim reads the binary plan as the text" \
		"$([ $ra = $rb ] && cmp -s "$dir/a" "$dir/b"; echo $?)" "exit $ra and $rb; $(diff "$dir/a" "$dir/b" | head -3)"
done
for f in tests/plans/good/*.plan; do
	trip "$(basename "$f"): round trips byte for byte" "$f"
done

# Every tool reads it, with no flag, also from standard input.
"$BIN/pipecc" --plan-format=binary examples/tiny.pipe -o "$dir/tiny.bin"
t "pipesim reads a binary plan from standard input" 0 sh -c "\"$BIN/pipesim\" - <\"$dir/tiny.bin\""
t "pipesim reads it from a pipe" 0 sh -c "cat \"$dir/tiny.bin\" | \"$BIN/pipesim\" -q -"
t "piperun runs a binary plan" 0 "$BIN/piperun" "$dir/tiny.bin"
t "pipecc - reads a pipe" 0 sh -c "cat \"$dir/tiny.bin\" | \"$BIN/pipecc\" - -o \"$dir/p.txt\""
t "pipecc --plan-format=binary -o - writes standard output" 0 sh -c \
	"\"$BIN/pipecc\" --plan-format=binary examples/tiny.pipe -o - >\"$dir/o.bin\""
cmp -s "$dir/o.bin" "$dir/tiny.bin"
check "standard output gets the same bytes" $? "differs"
# Version 1 as pipecc wrote it before the text plans' blocks checksum (tests/plans/binary:
# its text part's header is lanes4, which version 1 keeps): read, and written the same.
t "a binary plan of 2026-12-04 reads" 0 "$BIN/pipesim" tests/plans/binary/tiny-v1.bin
has "... and runs" "$dir/out" "makespan   15 us"
cmp -s tests/plans/binary/tiny-v1.bin "$dir/tiny.bin"
check "... and pipecc writes those bytes still" $? "differs"

# Damage: a cut file, a changed byte, an unknown version, bytes appended.
size=$(wc -c <"$dir/tiny.bin")
head -c $((size - 3)) "$dir/tiny.bin" >"$dir/cut.bin"
t "pipesim refuses a truncated binary plan" 1 "$BIN/pipesim" "$dir/cut.bin"
has "... at the byte where it ends" "$dir/err" "^$dir/cut.bin: byte $((size - 8)): error: the file ends inside the checksum (truncated file?)$"
cp "$dir/tiny.bin" "$dir/flip.bin"
printf '\377' | dd of="$dir/flip.bin" bs=1 seek=$((size - 20)) conv=notrunc 2>/dev/null
t "pipesim refuses a changed byte" 1 "$BIN/pipesim" "$dir/flip.bin"
has "... at a byte of the file" "$dir/err" "^$dir/flip.bin: byte [0-9]*: error: "
t "piperun refuses it too" 1 "$BIN/piperun" "$dir/flip.bin"
has "... at a byte of the file" "$dir/err" "^$dir/flip.bin: byte [0-9]*: error: "
t "pipecc refuses to convert it too" 1 "$BIN/pipecc" "$dir/flip.bin" -o "$dir/x.plan"
has "... at a byte of the file" "$dir/err" "^$dir/flip.bin: byte [0-9]*: error: "
cp "$dir/tiny.bin" "$dir/v2.bin"
printf '\002' | dd of="$dir/v2.bin" bs=1 seek=8 conv=notrunc 2>/dev/null
t "pipesim refuses an unknown version" 1 "$BIN/pipesim" "$dir/v2.bin"
has "... naming it" "$dir/err" "^$dir/v2.bin: byte 8: error: binary plan format version 2 is not supported (this build reads version 1)$"
t "pipesim --json reports the byte" 1 "$BIN/pipesim" --json "$dir/v2.bin"
has "... as error_byte" "$dir/out" '"error_byte": 8,'
{ cat "$dir/tiny.bin"; printf 'x'; } >"$dir/more.bin"
t "pipesim refuses bytes after the checksum" 1 "$BIN/pipesim" "$dir/more.bin"
has "... at the first of them" "$dir/err" "^$dir/more.bin: byte $size: error: data after the checksum$"
printf '\211PNG\r\n\032\n' >"$dir/png.bin"
t "pipesim refuses another binary file" 1 "$BIN/pipesim" "$dir/png.bin"
has "... saying what a binary plan starts with" "$dir/err" "byte 2: error: not a pipecc plan"

# --threads 3 decodes the ranks on three workers: pipesim says the same on good plans
# and on damaged ones (a damaged one is read again on one thread, which says what it
# always said), from a file or from a pipe (which it reads on one thread).
same_threads() { # NAME EXIT FILE: pipesim FILE exits EXIT, and says the same with --threads 3
	"$BIN/pipesim" "$3" >"$dir/s1" 2>&1
	r1=$?
	"$BIN/pipesim" --threads 3 "$3" >"$dir/s3" 2>&1
	r3=$?
	check "$1" "$([ $r1 = "$2" ] && [ $r3 = "$2" ] && cmp -s "$dir/s1" "$dir/s3"; echo $?)" \
		"exit $r1 and $r3; $(diff "$dir/s1" "$dir/s3" | head -3)"
}
for f in "$dir"/*.x.bin; do
	same_threads "pipesim --threads 3 $(basename "$f"): the same output" 0 "$f"
done
same_threads "... on a truncated plan" 1 "$dir/cut.bin"
same_threads "... on a changed byte" 1 "$dir/flip.bin"
same_threads "... on bytes after the checksum" 1 "$dir/more.bin"
size=$(wc -c <"$dir/mlp4.x.bin")
for at in 40 $((size / 3)) $((size / 2)) $((size - 40)) $((size - 12)) $((size - 3)); do
	cp "$dir/mlp4.x.bin" "$dir/d.bin"
	printf '\040' | dd of="$dir/d.bin" bs=1 seek="$at" conv=notrunc 2>/dev/null
	same_threads "... on byte $at changed" 1 "$dir/d.bin"
	head -c "$at" "$dir/mlp4.x.bin" >"$dir/d.bin"
	same_threads "... on the plan cut at byte $at" 1 "$dir/d.bin"
done
"$BIN/pipesim" - <"$dir/flip.bin" >"$dir/s1" 2>&1
"$BIN/pipesim" --threads 3 - <"$dir/flip.bin" >"$dir/s3" 2>&1
cmp -s "$dir/s1" "$dir/s3"
check "... on standard input" $? "$(diff "$dir/s1" "$dir/s3" | head -3)"
for f in mlp4.x.bin flip.bin; do
	cat "$dir/$f" | "$BIN/pipesim" - >"$dir/s1" 2>&1
	cat "$dir/$f" | "$BIN/pipesim" --threads 3 - >"$dir/s3" 2>&1
	cmp -s "$dir/s1" "$dir/s3"
	check "... on $f from a pipe" $? "$(diff "$dir/s1" "$dir/s3" | head -3)"
done

# The flags.
t "--plan-format goes with --emit plan" 2 "$BIN/pipecc" --plan-format=binary --emit summary examples/tiny.pipe
t "--plan-format takes text or binary" 2 "$BIN/pipecc" --plan-format=bin examples/tiny.pipe -o "$dir/x"
t "a plan input takes no compiling option" 2 "$BIN/pipecc" --schedule gpipe "$dir/tiny.bin" -o "$dir/x"
has "... naming it" "$dir/err" "pipecc: the input is a plan: --schedule is for compiling a program"
t "a plan input is written only as a plan" 2 "$BIN/pipecc" --emit summary "$dir/tiny.bin"
cat "$dir/tiny.bin" >"$dir/in.bin"
t "... also from standard input" 2 sh -c "\"$BIN/pipecc\" --emit summary - <\"$dir/in.bin\""
t "a text plan converts to the text pipecc writes" 0 "$BIN/pipecc" tests/plans/good/tiny-fnv1a.plan -o "$dir/f.plan"
has "... with a blocks checksum" "$dir/f.plan" "^pipecc-plan [23] blocks="
t "--expand of a line plan writes the world" 0 "$BIN/pipecc" --expand "$dir/mlp4.plan" -o "$dir/w.plan"
has "... as format 2" "$dir/w.plan" "^pipecc-plan 2 "
t "--expand --plan-format=binary of a line plan" 0 "$BIN/pipecc" --expand --plan-format=binary "$dir/mlp4.plan" -o "$dir/w.bin"
t "... reads back as the expanded text" 0 "$BIN/pipecc" "$dir/w.bin" -o "$dir/w2.plan"
cmp -s "$dir/w.plan" "$dir/w2.plan"
check "... byte for byte" $? "differs"
mkfifo "$dir/fifo"
cat examples/tiny.pipe >"$dir/fifo" &
t "a program from a named pipe compiles (looking for a plan takes no bytes of a pipe)" 0 \
	timeout 60 "$BIN/pipecc" "$dir/fifo" -o "$dir/fifo.plan"
wait
cat "$dir/tiny.bin" >"$dir/fifo" &
t "a binary plan from a named pipe converts" 0 timeout 60 "$BIN/pipecc" "$dir/fifo" -o "$dir/fifo2.plan"
wait
# --threads N: the writers format ranks on N workers; the bytes are one thread's, in
# either form, into a file or a pipe, and a failed write says what it says on one.
for b in tiny interleaved llama2-7b-tp zbv-selfsend; do
	for fmt in text binary; do
		why=""
		"$BIN/pipecc" --plan-format=$fmt "examples/$b.pipe" -o "$dir/one" || why="1 thread failed"
		"$BIN/pipecc" --threads 3 --plan-format=$fmt "examples/$b.pipe" -o "$dir/three" || why="$why; 3 threads failed"
		cmp -s "$dir/one" "$dir/three" || why="$why; the file differs"
		"$BIN/pipecc" --threads 3 --plan-format=$fmt "examples/$b.pipe" -o - | cmp -s - "$dir/one" || why="$why; standard output differs"
		"$BIN/pipecc" --threads 2 --expand --plan-format=$fmt "examples/$b.pipe" -o "$dir/three" &&
			"$BIN/pipecc" --expand --plan-format=$fmt "examples/$b.pipe" -o "$dir/one" &&
			cmp -s "$dir/one" "$dir/three" || why="$why; --expand differs"
		check "--threads 3 --plan-format=$fmt $b: one thread's bytes" "$([ -z "$why" ]; echo $?)" "$why"
	done
done
for fmt in text binary; do
	"$BIN/pipecc" --plan-format=$fmt examples/llama2-7b-tp.pipe -o /dev/full 2>"$dir/err1"
	rc1=$?
	"$BIN/pipecc" --threads 3 --plan-format=$fmt examples/llama2-7b-tp.pipe -o /dev/full 2>"$dir/err3"
	rc3=$?
	[ "$rc1" -eq 1 ] && [ "$rc3" -eq 1 ] && cmp -s "$dir/err1" "$dir/err3" && grep -q "No space left" "$dir/err3"
	check "--threads 3 --plan-format=$fmt to /dev/full: one thread's error" $? "exit $rc1 and $rc3: $(cat "$dir/err3")"
done

# A plan past 2 MiB of ops (pp=4 x dp=2, 4,000 microbatches: 160,016 ops): the lowering
# and the readers of a whole file put every rank's arrays in one block
# (plan_block_ops), the streaming reader (a pipe) and a rank that grows do not.  All of
# them make the same plan: the text round trips, pipesim says the same on the text, on
# the binary from a file and from a pipe, with one thread and with three.
{
	echo "pipeline big; mesh pp=4 dp=2; microbatches 4000; input 1x16;"
	echo "stage a { linear 16; } stage b { linear 16; } stage c { linear 16; }"
	echo "stage d { linear 16; loss mse; } schedule 1f1b; cost * f=1 b=1 w=1;"
} >"$dir/big.pipe"
"$BIN/pipecc" --expand "$dir/big.pipe" -o "$dir/big.plan"
check "a plan past 2 MiB of ops compiles" $? ""
trip "... round trips byte for byte" "$dir/big.plan"
"$BIN/pipesim" "$dir/big.plan" >"$dir/a" 2>&1
n=$(sed -n 's/.* ran \([0-9]*\) ops to the end$/\1/p' "$dir/a")
check "... it has more than 65,536 ops (${n:-none})" "$([ "${n:-0}" -gt 65536 ]; echo $?)" ""
for how in "file" "pipe" "file --threads 3" "pipe --threads 3"; do
	set -- $how
	if [ "$1" = file ]; then
		"$BIN/pipesim" ${2:+"$2"} ${3:+"$3"} "$dir/t.bin" >"$dir/b" 2>&1
	else
		"$BIN/pipesim" ${2:+"$2"} ${3:+"$3"} - <"$dir/t.bin" >"$dir/b" 2>&1
	fi
	sed -i 's/ (line [0-9]*)//g; s/ (op [0-9]*)//g' "$dir/b"
	sed 's/ (line [0-9]*)//g; s/ (op [0-9]*)//g' "$dir/a" | cmp -s - "$dir/b"
	check "... pipesim on its binary form ($how) says what it says on the text" $? \
		"$(sed 's/ (line [0-9]*)//g; s/ (op [0-9]*)//g' "$dir/a" | diff - "$dir/b" | head -3)"
done
"$BIN/pipesim" --threads 3 "$dir/big.plan" >"$dir/b" 2>&1
cmp -s "$dir/a" "$dir/b"
check "... pipesim --threads 3 on the text says the same" $? "$(diff "$dir/a" "$dir/b" | head -3)"

# A binary plan is not written to a terminal (as gzip refuses): a usage error before
# any work, for a program and for a plan converted; redirected or -o FILE, it is written.
if command -v script >/dev/null 2>&1 && script -qec true /dev/null >/dev/null 2>&1; then
	"$BIN/pipecc" examples/tiny.pipe -o "$dir/tty.plan"
	"$BIN/pipecc" examples/tiny.pipe --plan-format=binary -o "$dir/tty.bplan"
	for in in examples/tiny.pipe "$dir/tty.plan"; do
		t "binary to a terminal is refused ($in)" 0 script -qec \
			"'$BIN/pipecc' '$in' --plan-format=binary; echo rc=\$?" /dev/null
		has "... exit 2, saying why" "$dir/out" "^rc=2"
		has "... and what to do" "$dir/out" \
			"pipecc: the binary plan would go to a terminal: give -o FILE, or redirect standard output"
	done
	t "binary through a pipe from a terminal is written" 0 script -qec \
		"'$BIN/pipecc' examples/tiny.pipe --plan-format=binary | cmp - '$dir/tty.bplan' && echo same" /dev/null
	has "... the same bytes" "$dir/out" "^same"
fi

t "--help names the flag" 0 "$BIN/pipecc" --help
has "... --plan-format" "$dir/out" "--plan-format FORMAT"

[ "$fails" -eq 0 ]
