#!/bin/sh
# The link model (docs/semantics.md "Links"): a pp=2 pipeline whose two ranks share a
# node of 8 takes a faster step than the same pipeline on two nodes when the network is
# slower, by a whole number of transfers' difference (each 1 MiB activation: 1 us +
# ceil(1048576 / 300) ns on the node link, 5 us + ceil(1048576 / 10) ns on the network);
# the plan records the nodes (`node` line) exactly when the program states them, and
# `collective=` only when it is not the default.
: "${BIN:=bin}"
TOOL=links
. tests/lib/cli.sh

cat >"$dir/one.pipe" <<'PIPE'
pipeline nodes;
mesh pp=2;
microbatches 4;
input 256x1024;
stage s0 { linear 1024; relu; }
stage s1 { linear 1024; loss mse; }
schedule 1f1b;
cost * f=100us b=100us w=100us;
link latency=5us bandwidth=10GB/s node_latency=1us node_bandwidth=300GB/s;
devices per_node=8;
PIPE
sed 's/per_node=8/per_node=1/' "$dir/one.pipe" >"$dir/two.pipe"
sed '/^devices/d; s/ node_latency.*;/;/' "$dir/one.pipe" >"$dir/none.pipe"
sed 's/node_bandwidth=300GB\/s/& collective=ring/' "$dir/one.pipe" >"$dir/ring.pipe"

for n in one two none ring; do
	t "pipecc $n.pipe" 0 "$BIN/pipecc" "$dir/$n.pipe" -o "$dir/$n.plan"
done
has "devices per_node=8 writes the node line" "$dir/one.plan" "^node per_node=8 latency_ns=1000 bandwidth=300000000000$"
has "devices per_node=1 writes the node line" "$dir/two.plan" "^node per_node=1 "
check "no devices, no node key: no node line" "$(grep -q '^node ' "$dir/none.plan"; [ $? -eq 1 ]; echo $?)" "$(grep '^node' "$dir/none.plan")"
has "collective=ring is recorded" "$dir/ring.plan" "^node per_node=8 .* collective=ring$"

# span PLAN [PIPESIM OPTIONS]: the makespan in ns
span() { "$BIN/pipesim" --json "$@" | sed -n 's/^  "makespan": \([0-9.]*\),$/\1/p' | awk '{printf "%.0f", $1 * 1000}'; }
one=$(span "$dir/one.plan") two=$(span "$dir/two.plan") none=$(span "$dir/none.plan")
node=$((1000 + (1048576 + 299) / 300)) net=$((5000 + (1048576 + 9) / 10))
d=$((two - one))
check "one node of 8 is faster than two nodes ($one < $two ns)" "$([ "$one" -lt "$two" ]; echo $?)" "one $one two $two"
check "by whole transfers: $d ns = $((d / (net - node))) x ($net - $node) ns" \
	"$([ "$d" -gt 0 ] && [ $((d % (net - node))) -eq 0 ]; echo $?)" "$d is no positive multiple of $((net - node))"
check "two nodes of 1 time as no nodes at all" "$([ -n "$two" ] && [ "$two" = "$none" ]; echo $?)" "$two vs $none"
# A plan's algorithm: an old node line (no collective=) reads as auto, a stated one
# round-trips, an unknown one is refused at its line.
node='^node per_node=8 latency_ns=1000 bandwidth=300000000000$'
sed "s/$node/& collective=tree/" tests/plans/good/tp2.plan >"$dir/tree.plan"
sed "s/$node/& collective=hierarchical/" tests/plans/good/tp2.plan >"$dir/hier.plan"
t "an old node line reads" 0 "$BIN/pipesim" tests/plans/good/tp2.plan
t "collective=hierarchical reads" 0 "$BIN/pipesim" "$dir/hier.plan"
t "collective=tree is refused" 1 "$BIN/pipesim" "$dir/tree.plan"
has "at its line" "$dir/err" "tree.plan:10: error: unknown collective algorithm 'tree' (auto, ring or hierarchical)"

# the threaded strict model (psim.c) times each pair by its own link too
for n in one two; do
	eval "want=\$$n"
	got=$(span "$dir/$n.plan" --threads 4)
	check "$n.plan on 4 threads: the same step ($got ns)" "$([ -n "$got" ] && [ "$got" = "$want" ]; echo $?)" "$got vs $want"
done
[ "$fails" -eq 0 ]
