#!/bin/sh
# The memory model (docs/semantics.md "Memory"): piperun's measured peak total and its
# parts equal pipesim's prediction, rank by rank, over programs with skips, hand-offs,
# sends to self, dp, transformers, tp (gpt-tp), dropout (masks of one byte an element,
# attention's dropped probabilities, selective recomputation of both), flash attention
# (the rows' log-sum-exp kept, its S x S tensors scratch; with dropout and selective
# recomputation), AdamW and every schedule on mlp4.
TOOL=memory
. tests/lib/cli.sh

[ -x "$BIN/pipesim" ] || { echo "note: memory: pipesim not built: skipped"; exit 0; }

fields="peak_total_bytes param_bytes grad_bytes optim_state_bytes saved_bytes_at_peak inflight_bytes_at_peak peak_op"

sed 's/^schedule .*/optimizer adamw;\n&/' examples/mlp4.pipe >"$dir/mlp4-adamw.pipe"
sed 's/^schedule .*/optimizer momentum momentum=0.8;\n&/' examples/mlp4.pipe >"$dir/mlp4-momentum.pipe"
drop='s/embed 128 positions;/& dropout 0.1;/; s/mlp 512 bias;/& dropout 0.1;/
      s/attention heads=4 bias;/attention heads=4 bias dropout=0.1; dropout 0.1;/'
sed "$drop" examples/gpt-tiny.pipe >"$dir/gpt-dropout.pipe"
sed "$drop
     s/^schedule .*/recompute * selective;\n&/" examples/gpt-tiny.pipe >"$dir/gpt-dropout-sel.pipe"
sed "$drop" examples/gpt-tp.pipe >"$dir/gpt-tp-dropout.pipe"
flash='s/attention heads=4 bias/& flash/'
sed "$drop
     $flash" examples/gpt-tiny.pipe >"$dir/gpt-flash.pipe"
sed "$drop
     $flash
     s/^schedule .*/recompute * selective;\n&/" examples/gpt-tiny.pipe >"$dir/gpt-flash-sel.pipe"
sed "$drop
     $flash" examples/gpt-tp.pipe >"$dir/gpt-tp-flash.pipe"
for p in examples/tiny.pipe examples/mlp4.pipe examples/skips.pipe examples/gpt-tiny.pipe \
	examples/zbv.pipe examples/zbv-selfsend.pipe examples/interleaved.pipe examples/gpt-tp.pipe \
	"$dir/gpt-dropout.pipe" "$dir/gpt-dropout-sel.pipe" "$dir/gpt-tp-dropout.pipe" \
	"$dir/gpt-flash.pipe" "$dir/gpt-flash-sel.pipe" "$dir/gpt-tp-flash.pipe" \
	"$dir/mlp4-momentum.pipe" "$dir/mlp4-adamw.pipe"; do # AdamW last: its figures below
	b=$(basename "$p" .pipe)
	t "compiles $b" 0 "$BIN/pipecc" "$p" -o "$dir/$b.plan"
	mem_same "$b" "$dir/$b.plan" "$fields"
	[ "$b" = mlp4-momentum ] && cp "$dir/sim.json" "$dir/momentum.json"
done
has "AdamW's state is in the peak" "$dir/sim.json" '"optim_state_bytes": [1-9]'
# state per parameter: momentum one f32 buffer, AdamW two
ratio() { # JSON: each rank's optim_state_bytes / param_bytes, one a line
	grep -o '"param_bytes": [0-9]*, "grad_bytes": [0-9]*, "optim_state_bytes": [0-9]*' "$1" |
		awk -F'[:,]' '$2 > 0 { print $6 / $2 }' | sort -u
}
check "momentum's state is 1x the parameters" "$([ "$(ratio "$dir/momentum.json")" = 1 ]; echo $?)" \
	"$(ratio "$dir/momentum.json")"
check "AdamW's state is 2x the parameters" "$([ "$(ratio "$dir/sim.json")" = 2 ]; echo $?)" \
	"$(ratio "$dir/sim.json")"

schedules=$(sed -n 's/.*\.name = "\([A-Za-z0-9_]*\)".*/\1/p' compiler/sched_*.c | sort -u)
ran=0
for s in $schedules; do
	"$BIN/pipecc" examples/mlp4.pipe -s "$s" -o "$dir/m-$s.plan" >/dev/null 2>&1 || continue
	mem_same "mlp4 under $s" "$dir/m-$s.plan" "$fields"
	ran=$((ran + 1))
done
check "the schedule loop ran" "$([ $ran -gt 3 ]; echo $?)" "only $ran schedules"

# ---- the device's memory: golden diagnostics (PIPECC_UPDATE_GOLDEN=1 rewrites them) ----
n=0
for f in tests/golden/memory/*.pipe; do
	want=${f%.pipe}.err
	rm -f "$dir/x.plan"
	"$BIN/pipecc" "$f" -o "$dir/x.plan" >"$dir/out" 2>"$dir/err"
	rc=$?
	[ -n "$PIPECC_UPDATE_GOLDEN" ] && cp "$dir/err" "$want"
	check "$(basename "$f" .pipe) does not fit" "$([ "$rc" -eq 1 ] && [ ! -s "$dir/x.plan" ]; echo $?)" "exit $rc"
	cmp -s "$dir/err" "$want"
	check "$(basename "$f" .pipe) diagnostics match" $? "$(diff "$want" "$dir/err" | head -5)"
	n=$((n + 1))
done
check "golden memory cases ran" "$([ "$n" -ge 3 ]; echo $?)" "only $n cases"
# recomputing makes the preset case fit; the summary and the plan show the capacity
printf 'recompute *;\n' | cat tests/golden/memory/preset.pipe - >"$dir/fits.pipe"
t "recompute makes it fit" 0 "$BIN/pipecc" "$dir/fits.pipe" -o "$dir/fits.plan"
has "the plan carries the capacity" "$dir/fits.plan" "^memory cap=80000000000$"
t "summary" 0 "$BIN/pipecc" "$dir/fits.pipe" --emit summary
has "summary: rank 0 against the device" "$dir/out" "^  ranks* 0[-0-9]*: peak .* % of the device)$"
"$BIN/pipesim" --json "$dir/fits.plan" >"$dir/sim.json"
has "pipesim: the capacity" "$dir/sim.json" '"memory_cap_bytes": 80000000000'
has "pipesim: it fits" "$dir/sim.json" '"fits": true'
# a plan over its capacity (written by hand) is marked, not rejected, by pipesim
sed 's/^memory cap=.*/memory cap=1000000/' "$dir/fits.plan" | grep -v '^pipecc-plan' |
	sed '1i pipecc-plan 1' >"$dir/over.plan"
t "pipesim runs an over-capacity plan" 0 "$BIN/pipesim" "$dir/over.plan"
has "pipesim marks it" "$dir/out" "does not fit$"

# ---- recomputation: bit-exact, measured == predicted, and fewer saved bytes ----

# recomputes SUFFIX STATEMENT FILE SCHEDULE...: FILE with STATEMENT appended, under each
# schedule FILE itself compiles with, runs --check'ed with its memory measured ==
# predicted, and saves activations against FILE without it: every rank holds no more,
# and the ranks together less (a rank whose peak has every microbatch between B and W
# holds what W needs either way).  Counts the runs in $ran.
recomputes() {
	sfx=$1 stmt=$2 p=$3
	shift 3
	b=$(basename "$p" .pipe)
	printf '%s\n' "$stmt" | cat "$p" - >"$dir/$b-$sfx.pipe"
	for s in "$@"; do
		# auto may pick another order once recomputation changes the memory: not comparable
		[ "$s" = auto ] && continue
		"$BIN/pipecc" "$p" -s "$s" -o "$dir/$b-$s.plan" >/dev/null 2>&1 || continue
		t "$b under $s with $stmt compiles" 0 "$BIN/pipecc" "$dir/$b-$sfx.pipe" -s "$s" \
			-o "$dir/$b-$s-$sfx.plan"
		mem_same "$b under $s with $stmt" "$dir/$b-$s-$sfx.plan" "$fields" --check
		has "--check $b under $s with $stmt agrees" "$dir/run.json" '"check": {"ok": true'
		"$BIN/pipesim" --expand --json "$dir/$b-$s.plan" >"$dir/without.json"
		with=$(figs "$dir/run.json" peak_act_bytes) without=$(figs "$dir/without.json" peak_activation_bytes)
		less=$(echo "$with" "|" "$without" | awk '{n = (NF - 1) / 2; sw = 0; so = 0;
			for (i = 1; i <= n; i++) { w = $i; o = $(i + n + 1); if (w > o) { print 1; exit }
				sw += w; so += o }
			print (sw < so) ? 0 : 1 }')
		check "$b under $s: $stmt saves activations" "$less" \
			"measured with it $with, predicted without $without"
		ran=$((ran + 1))
	done
}

ran=0
for p in examples/mlp4.pipe examples/gpt-tiny.pipe examples/zbv.pipe examples/skips.pipe; do
	recomputes re 'recompute *;' "$p" $schedules
done
check "the recompute loop ran" "$([ $ran -gt 8 ]; echo $?)" "only $ran runs"
grep -q "^stage 0 .* recompute save_re=" "$dir/mlp4-1f1b-re.plan"
check "the plan records recomputation" $? "no 'recompute save_re=' on stage 0"
# Megatron's block method (`residuals=N`): gpt-tiny's stages re-run their first residual
# body (the attention) of two; bit-exact, measured == predicted, and between no and full
# recomputation in saved bytes and in B's cost
ran=0
recomputes blk 'recompute * full residuals=1;' examples/gpt-tiny.pipe 1f1b zbh1 gpipe
check "the block loop ran" "$([ $ran -eq 3 ]; echo $?)" "only $ran runs"
has "the plan records residuals=1" "$dir/gpt-tiny-1f1b-blk.plan" "^stage 1 .* recompute save_re=[0-9]* residuals=1 "
stage1() { sed -n "s/^stage 1 .* b=\([0-9]*\) .* save_fw=\([0-9]*\) .*/\1 \2/p" "$1"; }
between=$(echo "$(stage1 "$dir/gpt-tiny-1f1b.plan") $(stage1 "$dir/gpt-tiny-1f1b-blk.plan") $(stage1 "$dir/gpt-tiny-1f1b-re.plan")" |
	awk '{ print ($1 < $3 && $3 < $5 && $2 > $4 && $4 > $6) ? 0 : 1 }')
check "residuals=1 lies between no and full recomputation (B's cost, F's saved bytes)" "$between" \
	"$(stage1 "$dir/gpt-tiny-1f1b.plan") / $(stage1 "$dir/gpt-tiny-1f1b-blk.plan") / $(stage1 "$dir/gpt-tiny-1f1b-re.plan")"
# B's cost includes F's
fb=$(sed -n 's/^stage 0 .* f=\([0-9]*\) b=\([0-9]*\) .*/\1 \2/p' "$dir/mlp4-1f1b.plan")
fb2=$(sed -n 's/^stage 0 .* f=\([0-9]*\) b=\([0-9]*\) .*/\1 \2/p' "$dir/mlp4-1f1b-re.plan")
check "recompute adds F's cost to B's" \
	"$(echo "$fb" "$fb2" | awk '{print ($4 == $2 + $1 && $3 == $1) ? 0 : 1}')" "$fb -> $fb2"

# ---- selective recomputation: attention's probabilities only ----
# gpt-tiny as it is, and with rotary and grouped-query attention (a kv head per two
# query heads), whose rebuild maps heads as F does.
sed 's/attention heads=4 bias;/attention heads=4 kv_heads=2 rope;/' examples/gpt-tiny.pipe \
	>"$dir/gqa.pipe"
ran=0
for p in examples/gpt-tiny.pipe "$dir/gqa.pipe"; do
	recomputes sel 'recompute * selective;' "$p" 1f1b zbh1 zbh2 gpipe
done
check "the selective loop ran" "$([ $ran -ge 8 ]; echo $?)" "only $ran runs"
# the plan records it; F's saved bytes lose exactly the probabilities (4 sequences x 4
# heads x 64 x 64 floats), B's cost gains less than F's
line() { sed -n "s/^stage 0 .* f=\([0-9]*\) b=\([0-9]*\) .* save_fw=\([0-9]*\) .*/\1 \2 \3/p" "$1"; }
grep -q "^stage 0 .* recompute selective save_re=262144 " "$dir/gpt-tiny-1f1b-sel.plan"
check "the plan records selective recomputation" $? "$(grep '^stage 0' "$dir/gpt-tiny-1f1b-sel.plan")"
was=$(line "$dir/gpt-tiny-1f1b.plan") now=$(line "$dir/gpt-tiny-1f1b-sel.plan")
check "selective: F keeps the probabilities' bytes less, B costs more, less than F" \
	"$(echo "$was" "$now" | awk '{print ($6 == $3 - 262144 && $5 > $2 && $5 - $2 < $1) ? 0 : 1}')" \
	"$was -> $now"
# full recomputation keeps less still, over the ranks together
printf 'recompute *;\n' | cat examples/gpt-tiny.pipe - >"$dir/full.pipe"
"$BIN/pipecc" "$dir/full.pipe" -o "$dir/full.plan" && "$BIN/pipesim" --json "$dir/full.plan" >"$dir/full.json"
"$BIN/pipesim" --json "$dir/gpt-tiny-1f1b-sel.plan" >"$dir/sel.json"
sum() { figs "$1" peak_activation_bytes | awk '{for (i = 1; i <= NF; i++) s += $i; print s}'; }
check "full recomputation keeps less than selective" "$([ "$(sum "$dir/full.json")" -lt "$(sum "$dir/sel.json")" ]; echo $?)" \
	"full $(sum "$dir/full.json"), selective $(sum "$dir/sel.json")"

exit $((fails > 0))
