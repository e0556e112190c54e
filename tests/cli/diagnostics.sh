#!/bin/sh
# Diagnostics a new user meets: errors caused by a command-line override say so and quote
# the option, not the file's line; warnings do not change the exit status; plan route
# errors carry their line; --allow-deadlock plans reach pipesim's deadlock report.
: "${BIN:=bin}"
TOOL=diagnostics
. tests/lib/cli.sh

# same NAME FILE: FILE holds exactly the text on standard input.
same() {
	cat >"$dir/want"
	if cmp -s "$dir/want" "$2"; then
		echo "testing $TOOL $1 ... passed"
	else
		echo "testing $TOOL $1 ... FAILED (text differs)"
		diff "$dir/want" "$2" | sed 's/^/  | /' | head -20
		fails=$((fails + 1))
	fi
}

# ---- files from other editors ----------------------------------------------------
# A UTF-8 byte-order mark first and Windows line endings compile as the plain file does
# (the plans compared from inside two folders: a plan names its source path); a mark
# elsewhere is a stray byte; a plan with Windows line endings is refused, saying why.
mkdir "$dir/plain" "$dir/bom" "$dir/crlf"
cp examples/tiny.pipe "$dir/plain/x.pipe"
printf '\357\273\277' | cat - examples/tiny.pipe >"$dir/bom/x.pipe"
sed 's/$/\r/' examples/tiny.pipe >"$dir/crlf/x.pipe"
case $BIN in /*) BIN_ABS=$BIN ;; *) BIN_ABS=$PWD/$BIN ;; esac
pc=$BIN_ABS/pipecc
for k in plain bom crlf; do
	(cd "$dir/$k" && "$pc" x.pipe -o x.plan) 2>"$dir/err-$k"
	check "a $k .pipe compiles" $? "$(head -1 "$dir/err-$k")"
done
cmp -s "$dir/plain/x.plan" "$dir/bom/x.plan"
check "a byte-order mark first changes nothing" $? "the plans differ"
cmp -s "$dir/plain/x.plan" "$dir/crlf/x.plan"
check "Windows line endings change nothing" $? "the plans differ"
printf 'pipeline a;\357\273\277\n' >"$dir/late.pipe"
t "a byte-order mark later is refused" 1 "$BIN/pipecc" "$dir/late.pipe"
has "a byte-order mark later is a stray byte" "$dir/err" "late.pipe:1:12: error: stray byte 0xef$"
sed 's/$/\r/' "$dir/plain/x.plan" >"$dir/crlf.plan"
t "a plan with Windows line endings is refused" 1 "$BIN/pipesim" "$dir/crlf.plan"
has "the plan's carriage return is named" "$dir/err" \
	"crlf.plan:1: error: the line ends with a carriage return: plans have Unix line endings"

# ---- command-line overrides ------------------------------------------------------
ex=examples/interleaved.pipe
t "-s with an unserved stage count" 1 "$BIN/pipecc" $ex -s 1f1b -o "$dir/x.plan"
same "-s error is the command line's" "$dir/err" <<'END'
<command line>: error: schedule 1f1b needs one stage per pipeline rank: 8 stages on pp=4
 --schedule 1f1b
            ^~~~
END
t "unknown -s" 1 "$BIN/pipecc" $ex -s 1f1bb -o "$dir/x.plan"
same "unknown -s suggests" "$dir/err" <<'END'
<command line>: error: unknown schedule '1f1bb'; did you mean '1f1b'?
 --schedule 1f1bb
            ^~~~~
END
t "-s custom without a body" 1 "$BIN/pipecc" $ex -s custom -o "$dir/x.plan"
has "-s custom says what it needs" "$dir/err" \
	"^<command line>: error: schedule custom takes its order from the file's"
t "-s csv without a file" 1 "$BIN/pipecc" $ex -s csv -o "$dir/x.plan"
has "-s csv points at --from-torch-csv" "$dir/err" "use --from-torch-csv FILE"
t "-m the schedule cannot take" 1 "$BIN/pipecc" $ex -m 9 -o "$dir/x.plan"
same "-m error is the command line's" "$dir/err" <<'END'
<command line>: error: schedule interleaved needs a multiple of 2 microbatches (they go through the ranks in 2 rounds of m / 2), got 9
 --microbatches 9
                ^
END
t "-m too large" 1 "$BIN/pipecc" $ex -m 2000000 -o "$dir/x.plan"
has "-m gets the file's limit" "$dir/err" \
	"^<command line>: error: microbatches must be at most 1048576, got 2000000$"
t "-s and -m together" 1 "$BIN/pipecc" $ex -m 2 -s 1f1b -o "$dir/x.plan"
has "both options quoted" "$dir/err" "^ --schedule 1f1b --microbatches 2$"
t "--from-torch-csv of a missing file" 1 "$BIN/pipecc" $ex --from-torch-csv "$dir/none.csv" \
	-o "$dir/x.plan"
has "missing CSV is the command line's" "$dir/err" \
	"^<command line>: error: cannot read $dir/none.csv: No such file or directory$"
has "missing CSV quoted" "$dir/err" "^ --from-torch-csv $dir/none.csv$"
t "-m against the file's custom order" 1 "$BIN/pipecc" examples/custom.pipe -m 3 -o "$dir/x.plan"
has "the order's error is the file's" "$dir/err" "^examples/custom.pipe:19:47: error: microbatch 3 in '0F3'"
has "a note names the override" "$dir/err" \
	"^<command line>: note: the microbatch count comes from the command line, not the file$"
t "-s against the file's placement" 1 "$BIN/pipecc" $ex -s zbv -o "$dir/x.plan"
tail -3 "$dir/err" >"$dir/tail"
same "a note names the -s override" "$dir/tail" <<'END'
<command line>: note: the schedule comes from the command line, not the file
 --schedule zbv
            ^~~
END
for o in "-s 1f1b" "-s 1f1bb" "-m 2" "--from-torch-csv $dir/none.csv"; do
	"$BIN/pipecc" $ex $o -o "$dir/x.plan" 2>"$dir/err"
	check "$o points at no line of the file" "$(grep -c "^$ex:" "$dir/err")" \
		"an error located in $ex"
done

# ---- warnings ---------------------------------------------------------------------
cat >"$dir/shared.pipe" <<'END'
pipeline shared;
mesh pp=3;
microbatches 4;
input 4x8;
stage s0 { linear 8; relu; }
stage s1 { linear 8; relu; }
stage s2 { linear 8; loss mse; }
schedule 1f1b;
devices [0, 0, 1];
END
t "two ranks on one GPU compiles" 0 "$BIN/pipecc" "$dir/shared.pipe" -o "$dir/shared.plan"
has "two ranks on one GPU warns at the list" "$dir/err" \
	"^$dir/shared.pipe:9:13: warning: ranks 0 and 1 share GPU 0 of one node; NCCL before 2.30"
has "the warning says where it runs" "$dir/err" "runs on CPU backends only$"
check "the plan is written" "$(test -s "$dir/shared.plan"; echo $?)" "no plan"
t "the plan runs on threads" 0 "$BIN/piperun" "$dir/shared.plan" --backend threads
t "the plan simulates" 0 "$BIN/pipesim" "$dir/shared.plan"
sed 's/devices .*/devices [0, 1, 2];/' "$dir/shared.pipe" >"$dir/apart.pipe"
t "one GPU each" 0 "$BIN/pipecc" "$dir/apart.pipe" -o "$dir/apart.plan"
check "one GPU each warns nothing" "$(grep -c warning "$dir/err")" "a warning"

# ---- plan route and peer errors carry their line ----------------------------------
b=tests/plans/bad
t "a route with the wrong device" 1 "$BIN/pipesim" $b/route_devices.plan
same "the route's line is named" "$dir/err" <<END
$b/route_devices.plan:20: error: route 0 names devices d0->d2 but the ranks use d0->d1
END
t "a backward route that is not an inverse" 1 "$BIN/pipesim" $b/route_not_inverse.plan
has "the backward route's line is named" "$dir/err" \
	"^$b/route_not_inverse.plan:21: error: backward route 1 is not the inverse of forward route 1$"
t "a peer entry that says local" 1 "$BIN/pipesim" $b/peer_local.plan
has "the peer entry's line is named" "$dir/err" \
	"^$b/peer_local.plan:34: error: rank 1: peer entry 0 for edge 0 should name stage 0"
sed '/^peer s=1 in e=0/d; s/^\(rank 1 .*\) peers=1/\1 peers=0/' tests/plans/good/tiny2.plan \
	>"$dir/nopeer.plan"
t "a rank without its peer entry" 1 "$BIN/pipesim" "$dir/nopeer.plan"
has "the rank's line is named" "$dir/err" \
	"^$dir/nopeer.plan:33: error: rank 1: no peer registered for edge 0 entering stage 1$"
t "piperun names the route's line too" nonzero "$BIN/piperun" $b/route_devices.plan \
	--backend threads
has "piperun's route error has the line" "$dir/err" "route_devices.plan:20"

# ---- --allow-deadlock plans reach pipesim's deadlock report -----------------------
# dl NAME PLACEMENT SKIPS RANK0 RANK1 [DP]: 4 stages on pp=2, m=2, a custom order.
dl() {
	cat >"$dir/$1.pipe" <<END
pipeline $1;
mesh pp=2 dp=${6:-1};
microbatches 2;
input 4x8;
stage s0 { linear 8; relu; }
stage s1 { linear 8; relu; }
stage s2 { linear 8; relu; }
stage s3 { linear 8; loss mse; }
$3
placement $2;
schedule custom {
	rank 0: $4;
	rank 1: $5;
}
END
}
# the issue's case: rank 0 starts with stage 3's forward, a skip s1 -> s3
dl skip13 "[0, 1, 1, 0]" "skip s1 -> s3;" "3F0 0F0 0F1 3F1 3B0 3B1 0B0 0B1" \
	"1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1"
dl noskip "[0, 1, 1, 0]" "" "3F0 0F0 0F1 3F1 3B0 3B1 0B0 0B1" "1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1"
dl loop "[0, 1, 0, 1]" "skip s0 -> s3;" "2F0 0F0 2F1 0F1 2B0 2B1 0B0 0B1" \
	"1F0 3F0 1F1 3F1 3B0 1B0 3B1 1B1"
dl blocks "[0, 0, 1, 1]" "skip s0 -> s2; skip s1 -> s3;" "0F0 1F0 1B0 0F1 1F1 0B0 1B1 0B1" \
	"2F1 3F1 3B1 2B1 2F0 3F0 3B0 2B0"
dl dp2 "[0, 1, 1, 0]" "skip s1 -> s3;" "3F0 0F0 0F1 3F1 3B0 3B1 0B0 0B1" \
	"1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1" 2
for n in skip13 noskip loop blocks dp2; do
	t "$n: the order cannot run" 1 "$BIN/pipecc" "$dir/$n.pipe" -o "$dir/$n.plan"
	has "$n: pipecc says so" "$dir/err" "the schedule cannot run"
	t "$n: --allow-deadlock writes the plan" 0 "$BIN/pipecc" "$dir/$n.pipe" --allow-deadlock \
		-o "$dir/$n.plan"
	for model in strict overlap; do
		t "$n: pipesim --model $model finds the deadlock" 1 "$BIN/pipesim" "$dir/$n.plan" \
			--model $model
		has "$n: pipesim --model $model reports a deadlock" "$dir/err" "error: deadlock"
		has "$n: pipesim --model $model shows the wait-for cycle" "$dir/err" "cycle"
		check "$n: pipesim --model $model sees no mismatch" \
			"$(grep -c 'differ\|mismatch\|matched' "$dir/err")" "a FIFO mismatch"
	done
done
# a rank that waits on itself: no plan, with or without --allow-deadlock
dl self "[0, 0, 1, 1]" "" "0F0 1F0 0B0 0F1 1F1 1B0 1B1 0B1" "2F0 3F0 2F1 3F1 3B0 2B0 3B1 2B1"
t "a rank waiting on itself" 1 "$BIN/pipecc" "$dir/self.pipe" --allow-deadlock -o "$dir/self.plan"
has "both actions are named" "$dir/err" \
	"self.pipe:12:18: error: '0B0' needs '1B0', which comes later on rank 0"

# ---- hand-edited plans -----------------------------------------------------------
# A rank whose op lines disagree with its header's ops= is reported as that, at the line
# where they part (tests/golden/plan/op_count.err); an edit that parses fails only on its
# checksum, whose message names the way out, and `pipecc PLAN --rehash -o PLAN` takes it:
# the header's checksum is all that changes.
"$BIN/pipecc" examples/tiny.pipe -o "$dir/tiny.plan"
r0=$(grep -n '^rank 0 ' "$dir/tiny.plan" | cut -d: -f1)
r1=$(grep -n '^rank 1 ' "$dir/tiny.plan" | cut -d: -f1)
sed "$((r1 - 1))d" "$dir/tiny.plan" >"$dir/deleted.plan"
sed "${r0}s/ops=\([0-9]*\)/ops=1\1/" "$dir/tiny.plan" >"$dir/more.plan"
sed "${r1}s/ops=17/ops=16/" "$dir/tiny.plan" >"$dir/fewer.plan"
for k in deleted more fewer; do
	(cd "$dir" && "$pc" "$k.plan" -o /dev/null) 2>>"$dir/opcount"
	check "a $k op line is refused" $((! $?)) "pipecc took $k.plan"
done
same "op counts against the rank's header" "$dir/opcount" <tests/golden/plan/op_count.err
sed 's/ f=1000 / f=1200 /' "$dir/tiny.plan" >"$dir/edited.plan"
t "an edited plan is refused" 1 "$BIN/pipesim" "$dir/edited.plan"
has "the checksum message names --rehash" "$dir/err" \
	"edited.plan:1: error: checksum mismatch: .*; if the change was meant, \`pipecc $dir/edited.plan --rehash -o $dir/edited.plan\` checks it"
cp "$dir/edited.plan" "$dir/rehashed.plan"
t "--rehash writes the plan over itself" 0 "$BIN/pipecc" "$dir/rehashed.plan" --rehash \
	-o "$dir/rehashed.plan"
check "--rehash changes the checksum line alone" \
	"$(diff "$dir/edited.plan" "$dir/rehashed.plan" | grep -c '^[<>] [^p]')" "other lines differ"
! cmp -s "$dir/edited.plan" "$dir/rehashed.plan"
check "--rehash changes the checksum" $? "the checksum line is the same"
t "the rehashed plan reads" 0 "$BIN/pipesim" "$dir/rehashed.plan"
has "the rehashed plan keeps the edit" "$dir/rehashed.plan" " f=1200 "
cp "$dir/deleted.plan" "$dir/still.plan"
t "--rehash still checks the plan" 1 "$BIN/pipecc" "$dir/still.plan" --rehash -o "$dir/still.plan"
cmp -s "$dir/deleted.plan" "$dir/still.plan"
check "a refused --rehash leaves the file" $? "the file changed"
t "--rehash of a program" 2 "$BIN/pipecc" examples/tiny.pipe --rehash -o "$dir/x.plan"
has "--rehash of a program says why" "$dir/err" "rehash is for a plan as the input"
t "without --rehash a plan is not written over itself" 2 "$BIN/pipecc" "$dir/edited.plan" \
	-o "$dir/edited.plan"

# ---- the model a plan is tuned for --------------------------------------------------
# pipecc --tune=overlap (and schedule auto, which ranks in the overlap model) records
# ` tune=overlap` on the plan's schedule line; pipesim then simulates it in that model
# unless --model says otherwise, and says which (tests/golden/plan/tuned.out).  A plan
# without it reads as before, in the strict model; the record survives the binary form.
"$BIN/pipecc" examples/tiny.pipe --tune=overlap -o "$dir/tuned.plan"
"$BIN/pipecc" examples/tiny.pipe -o "$dir/plain.plan"
has "the plan records its tuning" "$dir/tuned.plan" "^schedule 1f1b tune=overlap$"
has "a strict plan records none" "$dir/plain.plan" "^schedule 1f1b$"
: >"$dir/tuned"
for run in "tuned.plan" "tuned.plan --model strict" "tuned.plan --model overlap" "plain.plan"; do
	(cd "$dir" && "$BIN_ABS/pipesim" $run | head -1) >>"$dir/tuned"
done
same "pipesim states the model and the plan's tuning" "$dir/tuned" <tests/golden/plan/tuned.out
"$BIN/pipesim" "$dir/tuned.plan" | grep makespan >"$dir/m-default"
"$BIN/pipesim" "$dir/tuned.plan" --model overlap | grep makespan >"$dir/m-overlap"
cmp -s "$dir/m-default" "$dir/m-overlap"
check "a tuned plan's default run is the overlap model's" $? "$(cat "$dir/m-default")"
"$BIN/pipecc" "$dir/tuned.plan" --plan-format binary -o "$dir/tuned.bin"
"$BIN/pipecc" "$dir/tuned.bin" -o "$dir/tuned2.plan"
cmp -s "$dir/tuned.plan" "$dir/tuned2.plan"
check "the tuning survives the binary form" $? "the plans differ"
sed 's/^schedule 1f1b tune=overlap$/schedule 1f1b tune=fast/' "$dir/tuned.plan" >"$dir/badtune.plan"
t "an unknown tuning is refused" 1 "$BIN/pipesim" "$dir/badtune.plan"
has "an unknown tuning is located" "$dir/err" \
	"badtune.plan:4: error: expected 'tune=overlap', found 'tune=fast'"

[ "$fails" -eq 0 ]
