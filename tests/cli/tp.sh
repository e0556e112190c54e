#!/bin/sh
# Tensor parallelism from the command line: the tp examples compile and simulate, the
# summary divides per-rank figures by tp, the node link times the tp all-reduces, tp
# groups and nodes (error, opt-in, warning), malformed tp ops in a plan (reader and
# verifier, located), both timing models, and piperun training gpt-tp (the rest of the
# runtime's tp checks: tests/cli/tp_run.sh).
: "${BIN:=bin}"
TOOL=tp
. tests/lib/cli.sh

t "gpt-tp compiles" 0 "$BIN/pipecc" examples/gpt-tp.pipe -o "$dir/g.plan"
has "gpt-tp plan has TPREDUCE ops" "$dir/g.plan" "^TPREDUCE act s=0 m=0 part=0 bytes=131072 g=0"
has "gpt-tp plan has parts" "$dir/g.plan" "^F 0 0 part=1 "
has "gpt-tp plan carries the node link" "$dir/g.plan" \
	"^node per_node=8 latency_ns=1000 bandwidth=300000000000$"
t "pipesim proves gpt-tp" 0 "$BIN/pipesim" "$dir/g.plan"
has "gpt-tp runs to the end" "$dir/out" "^ok: "
has "pipesim reports the tp all-reduces" "$dir/out" "^  group of rank 0 (2 ranks): .* in 36 all-reduces"
t "overlap model proves gpt-tp" 0 "$BIN/pipesim" --model overlap "$dir/g.plan"
has "overlap: the same tp all-reduces" "$dir/out" "^  group of rank 0 (2 ranks): .* in 36 all-reduces"
t "piperun trains gpt-tp with --check" 0 "$BIN/piperun" "$dir/g.plan" --steps 2 --check
has "gpt-tp agrees with the whole sequential reference" "$dir/out" "^check: .*: ok"

# PyTorch's schedule CSV names each action once, not once per part
t "gpt-tp as torch-csv" 0 "$BIN/pipecc" examples/gpt-tp.pipe --emit torch-csv
has "the first rank runs 1F1B, one cell an action" "$dir/out" "^0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3$"
check "each action once: 4 F and 4 B per rank" \
	"$([ "$(head -1 "$dir/out" | tr , '\n' | sort -u | wc -l)" -eq 8 ] && [ "$(head -1 "$dir/out" | tr , '\n' | wc -l)" -eq 8 ]; echo $?)" "$(head -1 "$dir/out")"

# Llama-2-7B at pp=4 dp=4 tp=8: per-rank parameters are the split weights / 8 plus the
# 65 RMSNorm gains (4096 each) whole on every rank
t "llama2-7b-tp compiles" 0 "$BIN/pipecc" examples/llama2-7b-tp.pipe -o "$dir/l.plan"
t "pipesim proves llama2-7b-tp" 0 "$BIN/pipesim" "$dir/l.plan"
has "llama2-7b-tp runs to the end" "$dir/out" "^ok: 128 ranks"
t "llama2-7b-tp summary" 0 "$BIN/pipecc" examples/llama2-7b-tp.pipe --emit summary
cp "$dir/out" "$dir/s8"
has "summary says the figures are per tp rank" "$dir/s8" "^per rank of a tp group of 8"
sed 's/^mesh pp=4 dp=4 tp=8 sp;/mesh pp=4 dp=4;/' examples/llama2-7b-tp.pipe >"$dir/l1.pipe"
t "llama2-7b at tp=1 fits an h100 in bf16 with flash" 0 "$BIN/pipecc" "$dir/l1.pipe" -o "$dir/l1.plan"
sed 's/^precision bf16;/precision f32;/; s/ flash;/;/' "$dir/l1.pipe" >"$dir/l1f.pipe"
t "llama2-7b at tp=1 does not fit an h100 in f32" 1 "$BIN/pipecc" "$dir/l1f.pipe" -o "$dir/l1.plan"
has "the rank that does not fit is named" "$dir/err" "error: the plan does not fit: rank 0 (pp 0, dp 0)"
sed -i 's/^device h100;/device h100 memory=1TB;/' "$dir/l1.pipe"
t "llama2-7b at tp=1 summary" 0 "$BIN/pipecc" "$dir/l1.pipe" --emit summary
p1=$(sed -n 's/^parameters \([0-9]*\);.*/\1/p' "$dir/out")
p8=$(sed -n 's/^parameters \([0-9]*\);.*/\1/p' "$dir/s8")
norms=$((65 * 4096))
check "parameters per rank = (all - norms) / 8 + norms" \
	"$([ "$p8" -eq $(((p1 - norms) / 8 + norms)) ]; echo $?)" "tp=1 $p1, tp=8 $p8"
check "Llama-2-7B has 6,738,415,616 parameters at tp=1" "$([ "$p1" -eq 6738415616 ]; echo $?)" "$p1"
a1=$(awk '/^s1 /{print $7}' "$dir/out")
a8=$(awk '/^s1 /{print $7}' "$dir/s8")
f1=$(awk '/^s1 /{print $4}' "$dir/out")
f8=$(awk '/^s1 /{print $4}' "$dir/s8")
check "stage FLOPs divide by 8" "$(awk -v a="$f1" -v b="$f8" 'BEGIN { print (a / b > 7.99 && a / b < 8.01) ? 0 : 1 }')" "$f1 / $f8"
check "activation bytes shrink with tp" "$([ "$a8" -lt "$a1" ]; echo $?)" "$a1 -> $a8"

# the node link: slower NVLink, slower step; a group split over nodes takes the network
span() { sed -n 's/^  "makespan": \([0-9.]*\),$/\1/p' "$dir/out"; } # us, from --json
"$BIN/pipesim" --json "$dir/g.plan" >"$dir/out"
fast=$(span)
sed 's/^device h100;/device h100;\nlink node_bandwidth=1GB\/s;/' examples/gpt-tp.pipe >"$dir/slow.pipe"
t "node_bandwidth is a link property" 0 "$BIN/pipecc" "$dir/slow.pipe" -o "$dir/slow.plan"
has "the plan carries it" "$dir/slow.plan" "^node per_node=8 latency_ns=1000 bandwidth=1000000000$"
"$BIN/pipesim" --json "$dir/slow.plan" >"$dir/out"
slow=$(span)
check "a slower node link makes a slower step" \
	"$(awk -v a="$slow" -v b="$fast" 'BEGIN { print (b > 0 && a > b) ? 0 : 1 }')" "$fast -> $slow us"
sed 's/^mesh pp=2 dp=2 tp=2;/mesh pp=2 dp=2 tp=2 tp_spans_nodes;\ndevices per_node=1;/' \
	examples/gpt-tp.pipe >"$dir/spread.pipe"
t "tp_spans_nodes allows tp > devices per node" 0 "$BIN/pipecc" "$dir/spread.pipe" -o "$dir/sp.plan"
"$BIN/pipesim" --json "$dir/sp.plan" >"$dir/out"
spread=$(span)
check "a tp group across nodes takes the slower network" \
	"$(awk -v a="$spread" -v b="$fast" 'BEGIN { print (b > 0 && a > b) ? 0 : 1 }')" "$fast -> $spread us"
sed 's/^mesh pp=2 dp=2 tp=2;/mesh pp=2 dp=2 tp=2;\ndevices per_node=1;/' \
	examples/gpt-tp.pipe >"$dir/node.pipe"
t "tp > devices per node without the opt-in" 1 "$BIN/pipecc" "$dir/node.pipe" -o "$dir/x.plan"
has "the error is at tp=" "$dir/err" "node.pipe:5:16: error: tp=2 is larger than a node (1 devices)"
sed 's/^mesh pp=2 dp=2 tp=2;/mesh tp=2 pp=2 dp=2;\ndevices per_node=4;/' examples/gpt-tp.pipe >"$dir/order.pipe"
t "tp outermost still compiles" 0 "$BIN/pipecc" "$dir/order.pipe" -o "$dir/x.plan"
has "with a warning that its groups span nodes" "$dir/err" \
	"order.pipe:5:6: warning: the tp group of rank 0 (2 ranks, 4 apart) spans nodes 0 to 1"
t "'tp_spans_nodes' takes no value" 1 "$BIN/pipecc" /dev/stdin -o "$dir/x.plan" <<'PIPE'
pipeline g;
mesh tp=2 tp_spans_nodes=1;
microbatches 1;
input 2x8;
stage s { linear 8; loss mse; }
schedule gpipe;
PIPE
has "and says so" "$dir/err" "'tp_spans_nodes' takes no value"

# malformed tp ops: the reader and the verifier name the line
good=tests/plans/good/tp2.plan
bad() { # NAME SED-SCRIPT NEEDLE: the edited plan is refused with NEEDLE
	sed "$2" "$good" >"$dir/bad.plan"
	t "refuses $1" 1 "$BIN/pipesim" "$dir/bad.plan"
	has "$1: located" "$dir/err" "$3"
}
bad "TPREDUCE without bytes" '34s/ bytes=64//' "bad.plan:34: error: expected 'bytes='"
bad "TPREDUCE without a direction" '34s/ act / /' "bad.plan:34: error: expected 'act' or 'grad' after TPREDUCE"
bad "a part out of order" '35s/part=1/part=2/' "bad.plan:35: error: .*the stage has no such part"
bad "parts swapped" '33s/^F 0 0 @5/F 0 0 part=1 @5/;35s/^F 0 0 part=1 @5/F 0 0 @5/' \
	"bad.plan:33: error: .*a part out of order"
bad "a TPREDUCE of the wrong size" '34s/bytes=64/bytes=60/' \
	"bad.plan:34: error: .*its size differs from the part's all-reduce (64 bytes)"
bad "a TPREDUCE in a tp=1 plan" 's/^mesh pp=2 tp=2 dp=1/mesh pp=2 tp=1 dp=2/' \
	"bad.plan:34: error: a TPREDUCE in a plan with tp=1"
sed -n '1,/^rank 0/p' tests/plans/good/tiny2.plan | sed '$d' >"$dir/bad.plan"
printf 'rank 0 pp=0 dp=0 tp=0 device=0 peers=1 ops=1\npeer s=0 out e=0 s=1 rank=1 remote\nF 0 0 part=1 @7\n' >>"$dir/bad.plan"
t "refuses part= in a tp=1 plan" 1 "$BIN/pipesim" "$dir/bad.plan"
has "part= in tp=1: located" "$dir/err" "error: part= in a plan with tp=1"

# the memory model counts a part's own layers: at the peak, the saved bytes are within
# the peak activation bytes and nothing in flight is negative (every rank, two plans)
for ex in examples/gpt-tp.pipe examples/llama2-7b-tp.pipe; do
	b=$(basename "$ex" .pipe)
	"$BIN/pipecc" "$ex" -o "$dir/$b-mem.plan"
	"$BIN/pipesim" --json "$dir/$b-mem.plan" >"$dir/mem.json"
	act=$(grep -o '"peak_activation_bytes": [0-9-]*' "$dir/mem.json" | sed 's/.*: //' | tr '\n' ' ')
	saved=$(grep -o '"saved_bytes_at_peak": [0-9-]*' "$dir/mem.json" | sed 's/.*: //' | tr '\n' ' ')
	fly=$(grep -o '"peak_inflight_bytes": [0-9-]*' "$dir/mem.json" | sed 's/.*: //' | tr '\n' ' ')
	ok=$(awk -v a="$act" -v s="$saved" -v f="$fly" 'BEGIN { n = split(a, x, " "); split(s, y, " ");
		split(f, z, " "); bad = n == 0; for (i = 1; i <= n; i++) bad += y[i] > x[i] || z[i] < 0;
		print bad ? 1 : 0 }')
	check "$b: memory model per part (saved $saved <= act $act, in flight $fly >= 0)" "$ok" ""
done

exit $((fails > 0))
