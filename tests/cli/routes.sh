#!/bin/sh
# `route` statements: each tests/golden/route/NAME.pipe fails to compile with exactly
# the diagnostics of NAME.err (errors found against the placement, past the front end:
# a conflicting forward/backward pair, an edge that does not exist, ranks that do not
# hold the stages, an edge stated twice in one direction, devices that disagree, a
# local edge; PIPECC_UPDATE_GOLDEN=1 rewrites them); and a program that states routes
# compiles into a plan whose stated routes carry their statement's place, whose other
# direction is the inverse, whose ranks use the devices the routes pick, and which
# pipesim and piperun --check accept.
: "${BIN:=bin}"
TOOL=routes
. tests/lib/cli.sh

n=0
for f in tests/golden/route/*.pipe; do
	want=${f%.pipe}.err
	"$BIN/pipecc" "$f" -o "$dir/x.plan" >"$dir/out" 2>"$dir/err"
	rc=$?
	[ -n "$PIPECC_UPDATE_GOLDEN" ] && cp "$dir/err" "$want"
	check "$(basename "$f" .pipe) fails" "$([ "$rc" -eq 1 ]; echo $?)" "exit $rc"
	cmp -s "$dir/err" "$want"
	check "$(basename "$f" .pipe) diagnostics match" $? "$(diff "$want" "$dir/err" | head -5)"
	n=$((n + 1))
done
check "golden route cases ran" "$([ "$n" -ge 8 ]; echo $?)" "only $n cases"

cat >"$dir/r.pipe" <<'PIPE'
pipeline r;
mesh pp=4;
microbatches 4;
input 8x16;
stage a { linear 16; relu; }
stage b { linear 16; gelu; }
stage c { linear 16; relu; }
stage d { linear 16; loss mse; }
skip a -> c;
schedule gpipe;
route a -> b forward 0:d0 -> 1:d1;
route a -> b backward 1:d1 -> 0:d0;
route a -> c backward 2:d5 -> 0:d0;
PIPE
t "a program with routes compiles" 0 "$BIN/pipecc" "$dir/r.pipe" -o "$dir/r.plan"
has "a stated forward route carries its place" "$dir/r.plan" "^route 0 e=0 act 0.d0->1.d1 @11:1$"
has "a stated backward route carries its place" "$dir/r.plan" \
	"^route 1 e=0 grad 1.d1->0.d0 inverse=0 @12:1$"
has "a backward route alone: the forward is its inverse" "$dir/r.plan" \
	"^route [0-9]* e=3 act 0.d0->2.d5$"
has "... and the backward is as stated" "$dir/r.plan" "^route [0-9]* e=3 grad 2.d5->0.d0 inverse=[0-9]* @13:1$"
has "a route picks the rank's device" "$dir/r.plan" "^rank 2 pp=2 .* device=5 "
has "routes of edges not stated use the picked device" "$dir/r.plan" "^route [0-9]* e=1 act 1.d1->2.d5$"
t "pipesim accepts the plan with stated routes" 0 "$BIN/pipesim" -q "$dir/r.plan"
t "piperun --check on the plan with stated routes" 0 timeout 120 "$BIN/piperun" "$dir/r.plan" \
	--check -q -n 2
has "... agrees" "$dir/out" "^check: .*: ok"
t "examples/skips.pipe states routes" 0 "$BIN/pipecc" examples/skips.pipe -o "$dir/s.plan"
has "... which the plan marks" "$dir/s.plan" "^route .* @[0-9]*:1$"

# With `peers self_send;` a same-rank edge has a route, which may be stated.
sed 's/^route b -> c forward 1:d1 -> 1:d1;$/peers self_send;\n&/' tests/golden/route/local_edge.pipe \
	>"$dir/self.pipe"
t "a route of a same-rank edge sent to self" 0 "$BIN/pipecc" "$dir/self.pipe" -o "$dir/self.plan"
has "... is in the plan" "$dir/self.plan" "^route [0-9]* e=1 act 1.d1->1.d1 @[0-9]*:1$"
t "... and the plan runs" 0 timeout 120 "$BIN/piperun" "$dir/self.plan" --check -q -n 2

[ "$fails" -eq 0 ]
