#!/bin/sh
# Same-rank edges sent to self (`peers self_send;`, pipecc --same-rank): the plan's peer
# entries say `self` and its SEND/RECV pairs to self share a group; the verifier accepts
# them and reports a send to self whose receive is elsewhere; pipesim proves such plans
# under the strict model (no deadlock) and piperun --check agrees on threads; the
# option and the statement give the same plan, and the option wins over the statement.
: "${BIN:=bin}"
TOOL=samerank
. tests/lib/cli.sh

self_plan() { # FILE: the number of peer entries and transfers to self
	awk '/^rank /{r=$2} /^peer .* self$/{n++} /^SEND /{for(i=1;i<=NF;i++) if($i=="to="r) n++}
		END{print n+0}' "$1"
}

for s in zbv dualpipev; do
	t "$s --same-rank=self-send compiles" 0 "$BIN/pipecc" examples/zbv.pipe -s "$s" \
		--same-rank=self-send -o "$dir/$s-self.plan"
	has "$s self-send plan has self peer entries" "$dir/$s-self.plan" "^peer .* self$"
	has "$s self-send plan routes a rank to itself" "$dir/$s-self.plan" \
		"^route [0-9]* e=[0-9]* act \([0-9]*\)\.d[0-9]*->\1\.d"
	check "$s self-send plan sends to self" "$([ "$(self_plan "$dir/$s-self.plan")" -gt 0 ]; echo $?)" \
		"no transfer to self"
	t "$s local plan compiles" 0 "$BIN/pipecc" examples/zbv.pipe -s "$s" -o "$dir/$s-local.plan"
	check "$s local plan (the default) has no self entries" \
		"$(self_plan "$dir/$s-local.plan")" "self entries in the default plan"
	t "pipesim proves the $s self-send plan (strict)" 0 "$BIN/pipesim" "$dir/$s-self.plan"
	has "pipesim runs the $s self-send plan to the end" "$dir/out" "^ok: "
	t "pipesim overlap model on the $s self-send plan" 0 "$BIN/pipesim" --model overlap \
		"$dir/$s-self.plan"
	t "piperun --check on the $s self-send plan (threads)" 0 timeout 120 "$BIN/piperun" \
		"$dir/$s-self.plan" --check --steps 2 -q
	has "piperun --check agrees on the $s self-send plan" "$dir/out" "^check: .*: ok"
done

# Every SEND to self has its RECV from self right after it, in its group.
awk '/^rank /{r=$2} /^SEND /{for(i=1;i<=NF;i++) if($i=="to="r) {want=1; g=$NF}; next}
	want {if ($1!="RECV") bad++; want=0} END{exit bad+0}' "$dir/zbv-self.plan"
check "each send to self is followed by its receive" $? "a send to self without its receive"
awk '/^rank /{r=$2} /^SEND /{for(i=1;i<=NF;i++) if($i=="to="r) {split($0,a," g="); split(a[2],b," "); g=b[1]; want=1}; next}
	want {split($0,a," g="); split(a[2],b," "); if (b[1]!=g) bad++; want=0} END{exit bad+0}' \
	"$dir/zbv-self.plan"
check "a send to self and its receive share a group" $? "different groups"

t "peers self_send; in the file" 0 "$BIN/pipecc" examples/zbv-selfsend.pipe -o "$dir/f.plan"
t "--same-rank=self-send gives the same plan" 0 "$BIN/pipecc" examples/zbv-selfsend.pipe \
	--same-rank=self-send -o "$dir/o.plan"
cmp -s "$dir/f.plan" "$dir/o.plan"
check "the statement and the option agree" $? "plans differ"
t "--same-rank=local wins over the statement" 0 "$BIN/pipecc" examples/zbv-selfsend.pipe \
	--same-rank=local -o "$dir/l.plan"
check "... and registers local peers" "$(self_plan "$dir/l.plan")" "self entries left"
has "... local entries" "$dir/l.plan" "^peer .* local$"
t "--same-rank takes local or self-send only" 2 "$BIN/pipecc" examples/zbv.pipe --same-rank=self
has "... and names them" "$dir/err" "local.*self-send"

# A send to self whose receive is not in its group never completes: the verifier says so.
awk '/^rank /{r=$2} !done && /^RECV / && $0 ~ ("from=" r " ") {done=1; next} {print}' \
	"$dir/zbv-self.plan" >"$dir/cut.plan"
# The cut rank lists one op fewer.
r=$(awk '/^rank /{r=$2} /^RECV / && $0 ~ ("from=" r " ") {print r; exit}' "$dir/zbv-self.plan")
awk -v r="$r" '$1=="rank" && $2==r {for(i=1;i<=NF;i++) if($i ~ /^ops=/){split($i,a,"="); $i="ops=" a[2]-1}} {print}' \
	"$dir/cut.plan" >"$dir/bad.plan"
sed -i "1s/^pipecc-plan [23] .*/pipecc-plan 1/" "$dir/bad.plan" # hand-edited: no checksum
t "pipesim rejects a send to self without its receive" 1 "$BIN/pipesim" "$dir/bad.plan"
has "... naming the send" "$dir/err" "SEND act.*: a send to self .*never completes"
t "piperun rejects it too" 1 "$BIN/piperun" "$dir/bad.plan"
has "... with the same words" "$dir/err" "a send to self .*never completes"

# An order that cannot run, lowered naively with --allow-deadlock: the sends to self
# still share a group with their receives, so the plan verifies and pipesim shows the
# cross-rank cycle, not a send to self that never completes.
cat >"$dir/dl.pipe" <<'PIPE'
pipeline t;
mesh pp=2;
microbatches 2;
input 2x8;
stage s0 { linear 8; relu; }
stage s1 { linear 8; relu; }
stage s2 { linear 8; relu; }
stage s3 { linear 8; loss mse; }
skip s0 -> s3;
placement v;
peers self_send;
schedule custom {
  rank 0: 0F0 3F0 0F1 3F1 3B0 3B1 0B0 0B1;
  rank 1: 1F1 1F0 2F0 2F1 2B0 2B1 1B0 1B1;
}
PIPE
t "a stalled self-send order with --allow-deadlock" 0 "$BIN/pipecc" "$dir/dl.pipe" \
	--allow-deadlock -o "$dir/dl.plan"
t "pipesim finds its deadlock" 1 "$BIN/pipesim" "$dir/dl.plan"
has "... a cross-rank wait-for cycle" "$dir/err" "^wait-for cycle (2 edges)"

[ "$fails" -eq 0 ]
