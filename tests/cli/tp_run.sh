#!/bin/sh
# Tensor parallelism trained by piperun (threads): every schedule that compiles on a
# small GPT at tp=2 gives the whole model's sequential losses and weights (--check: each
# rank's shard against its slice of the tp=1 reference), so do tp=4, dp=2 with a skip
# connection, a Llama-style model (rotary grouped-query attention, swiglu, rmsnorm) and a
# head tied to the embedding (on its rank, and across pipeline ranks); tp=2 trains exactly as tp=1 does (the same losses); the
# measured peak activation bytes and the memory model's peak (total, in flight, op)
# equal pipesim's on every rank; --calibrate sums a microbatch's parts; a stalled tp
# member ends by the watchdog; what piperun does not run at tp > 1 is refused with its
# reason.  (MPI: tests/cli/piperun_mpi.sh.)
: "${BIN:=bin}"
TOOL=tp-run
. tests/lib/cli.sh

small_gpt tp_tiny "pp=4 tp=2" 4 >"$dir/gpt.pipe"

ran=0
schedules=$(sed -n 's/.*\.name = "\([A-Za-z0-9_]*\)".*/\1/p' compiler/sched_*.c | sort -u)
for s in $schedules; do
	case $s in
	custom | csv) continue ;; # orders of their own; tests/cli/piperun.sh runs them
	zbv | dualpipev) sed 's/mesh pp=4 tp=2;/mesh pp=2 tp=2;/' "$dir/gpt.pipe" >"$dir/t.pipe" ;;
	*) cp "$dir/gpt.pipe" "$dir/t.pipe" ;;
	esac
	"$BIN/pipecc" "$dir/t.pipe" -s "$s" -o "$dir/$s.plan" 2>/dev/null || continue
	runs "tp=2 $s" "$dir/$s.plan"
	ran=$((ran + 1))
done
check "tp=2 ran on at least 6 schedules" "$([ "$ran" -ge 6 ]; echo $?)" "$ran"

# tp=2 is tp=1 split: the same losses, to the printed digits
sed 's/mesh pp=4 tp=2;/mesh pp=4;/' "$dir/gpt.pipe" >"$dir/tp1.pipe"
"$BIN/pipecc" "$dir/tp1.pipe" -o "$dir/tp1.plan"
"$BIN/piperun" "$dir/tp1.plan" --steps 3 | grep '^step' | sed 's/ time.*//' >"$dir/l1"
"$BIN/piperun" "$dir/1f1b.plan" --steps 3 | grep '^step' | sed 's/ time.*//' >"$dir/l2"
check "tp=2 and tp=1 print the same losses" "$(cmp -s "$dir/l1" "$dir/l2"; echo $?)" \
	"$(tr '\n' ' ' <"$dir/l1") vs $(tr '\n' ' ' <"$dir/l2")"
check "the losses were printed" "$([ "$(wc -l <"$dir/l1")" -eq 3 ]; echo $?)" "$(cat "$dir/l1")"

# tp=4 (4 heads, one a rank), with zbh2 and gpipe
for s in 1f1b zbh2; do
	sed 's/mesh pp=4 tp=2;/mesh pp=2 tp=4;/; s/^stage s1 { gpt; }$//; s/^stage s2 { gpt; }$//' \
		"$dir/gpt.pipe" >"$dir/t4.pipe"
	t "tp=4 $s compiles" 0 "$BIN/pipecc" "$dir/t4.pipe" -s "$s" -o "$dir/tp4-$s.plan"
	runs "tp=4 $s" "$dir/tp4-$s.plan"
done

# dp=2 and a skip connection between transformer stages
sed 's/mesh pp=4 tp=2;/mesh pp=4 dp=2 tp=2;/; s/^schedule 1f1b;$/skip s0 -> s2;\nschedule 1f1b;/' \
	"$dir/gpt.pipe" >"$dir/skipdp.pipe"
t "a skip at dp=2 tp=2 compiles" 0 "$BIN/pipecc" "$dir/skipdp.pipe" -o "$dir/skipdp.plan"
has "the plan has the skip edge" "$dir/skipdp.plan" "^edge .* skip"
runs "skip dp=2 tp=2" "$dir/skipdp.plan"

# Llama-style: rmsnorm, rotary grouped-query attention (2 kv heads: one a rank), swiglu
small_llama llama_tp "pp=2 tp=2" rope >"$dir/llama.pipe"
t "llama-style tp=2 compiles" 0 "$BIN/pipecc" "$dir/llama.pipe" -o "$dir/llama.plan"
runs "llama-style tp=2 zbh1 adamw" "$dir/llama.plan"

# a head tied to the embedding on its rank: the table's rows split alike
sed 's/mesh pp=4 tp=2;/mesh pp=2 tp=2;/; s/head;/head tied;/' "$dir/gpt.pipe" >"$dir/tied.pipe"
t "tied head tp=2 compiles" 0 "$BIN/pipecc" "$dir/tied.pipe" -s zbv -o "$dir/tied.plan"
runs "tied head tp=2 zbv" "$dir/tied.plan"

# a head tied to the embedding on another pipeline rank: each rank's copy of its rows of
# the table, the TIEREDUCE moving the rows' gradient (V/tp x d x 4 = 16 x 32 x 4 bytes)
sed 's/mesh pp=4 tp=2;/mesh pp=4 dp=2 tp=2;/; s/head;/head tied;/' "$dir/gpt.pipe" >"$dir/tiedpp.pipe"
t "tied head across pipeline ranks tp=2 dp=2 compiles" 0 "$BIN/pipecc" "$dir/tiedpp.pipe" \
	-o "$dir/tiedpp.plan"
has "its TIEREDUCE moves the rank's rows" "$dir/tiedpp.plan" "^TIEREDUCE s=0 with=[0-9]* bytes=2048 "
runs "tied head across pipeline ranks tp=2 dp=2" "$dir/tiedpp.plan"

# the example
t "gpt-tp compiles" 0 "$BIN/pipecc" examples/gpt-tp.pipe -o "$dir/gpt-tp.plan"
runs "examples/gpt-tp.pipe" "$dir/gpt-tp.plan"

# measured peak activation bytes == pipesim's, every rank
for b in 1f1b zbh2 tp4-1f1b skipdp llama tied tiedpp gpt-tp; do
	"$BIN/piperun" "$dir/$b.plan" --json --steps 1 >"$dir/run.json"
	"$BIN/pipesim" --expand --json "$dir/$b.plan" >"$dir/sim.json"
	got=$(grep -o '"peak_act_bytes": [0-9]*' "$dir/run.json" | sed 's/.*: //' | tr '\n' ' ')
	want=$(grep -o '"peak_activation_bytes": [0-9]*' "$dir/sim.json" | sed 's/.*: //' | tr '\n' ' ')
	check "peak activation bytes of $b equal pipesim's" \
		"$([ -n "$got" ] && [ "$got" = "$want" ]; echo $?)" "measured $got, predicted $want"
	for f in peak_total_bytes inflight_bytes_at_peak peak_op; do
		got=$(grep -o "\"$f\": -*[0-9]*" "$dir/run.json" | tr '\n' ' ')
		want=$(grep -o "\"$f\": -*[0-9]*" "$dir/sim.json" | tr '\n' ' ')
		[ -n "$got" ] && [ "$got" = "$want" ] || echo "$b $f: measured $got, predicted $want"
	done >"$dir/bad"
	check "the memory model's peak of $b (total, in flight, op) equals pipesim's" \
		"$([ ! -s "$dir/bad" ]; echo $?)" "$(cat "$dir/bad")"
done

# --calibrate adds up a microbatch's parts: a cost line per stage, none of them zero
t "--calibrate at tp=2" 0 "$BIN/piperun" "$dir/1f1b.plan" --calibrate --steps 2
got=$(grep -c '^cost s[0-9] f=[1-9][0-9]*ns b=[1-9][0-9]*ns w=[1-9][0-9]*ns;$' "$dir/out")
check "--calibrate gives every stage nonzero F, B and W costs" "$([ "$got" -eq 4 ]; echo $?)" \
	"$(grep '^cost' "$dir/out" | tr '\n' ' ')"

# a tp member that never arrives: the watchdog ends the run naming the waiting TPREDUCE
t "a stalled tp member is a deadlock" 1 env PIPERUN_FAULT=stall:rank=1:op=1 "$BIN/piperun" \
	"$dir/llama.plan" --steps 1 --timeout 2
has "the report names rank 0's TPREDUCE" "$dir/err" "note: rank 0 blocked in step 1 at 'TPREDUCE act s=0 m=0 part=0 "

# what piperun does not run at tp > 1, refused with the reason (selective: selective_tp.sh)
sed 's/^schedule 1f1b;$/recompute s1;\nschedule 1f1b;/' "$dir/gpt.pipe" >"$dir/re.pipe"
if "$BIN/pipecc" "$dir/re.pipe" -o "$dir/re.plan" 2>/dev/null; then
	t "recomputation at tp=2 is refused" 1 "$BIN/piperun" "$dir/re.plan" --steps 1
	has "the refusal says why" "$dir/err" "cannot run this tp=2 plan on the threads backend: full recomputation"
fi

[ "$fails" -eq 0 ]
