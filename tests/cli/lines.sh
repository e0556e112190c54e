#!/bin/sh
# Line plans (docs/plan-format.md "Lines", docs/pipesim.md "Line plans"): pipecc writes
# one pipeline line, and pipesim's verdict, makespan, bubble and per-rank figures on it
# equal those of `pipesim --expand` (every world rank) on every example and on random
# meshes; `pipecc --expand` writes the same world; a line plan's size does not grow with
# dp; the reader refuses a rank that is not on the line, at its line.
: "${BIN:=bin}"
TOOL=lines
. tests/lib/cli.sh

# same NAME PLAN [PIPESIM OPTIONS]: pipesim on PLAN and with --expand agree.
same() {
	name=$1 plan=$2
	shift 2
	"$BIN/pipesim" "$@" "$plan" >"$dir/a" 2>"$dir/ae"
	ra=$?
	"$BIN/pipesim" --expand "$@" "$plan" >"$dir/b" 2>"$dir/be"
	rb=$?
	why=""
	[ "$ra" = "$rb" ] || why="exit $ra, --expand $rb"
	for k in "^[a-z0-9_]*: .* schedule, mesh" "^makespan" "^bubble" "^busy" "^error" "^deadlock"; do
		[ "$(grep -- "$k" "$dir/a")" = "$(grep -- "$k" "$dir/b")" ] || why="$why; '$k' differs"
	done
	[ "$(sed -n 's/^\(ok: .* to the end\).*/\1/p' "$dir/a")" = "$(sed -n 's/^\(ok: .* to the end\).*/\1/p' "$dir/b")" ] ||
		why="$why; the ok lines differ"
	[ "$(grep -o 'error: deadlock: .*' "$dir/ae")" = "$(grep -o 'error: deadlock: .*' "$dir/be")" ] ||
		why="$why; the deadlock verdicts differ"
	# every rank row of the line (busy, memory) has the figures of an expanded run's row
	# (the label, ranks of a run alike said once, is the first 10 columns)
	awk '/^ rank/{t=1; next} /^$/{t=0} t' "$dir/a" | cut -c11- >"$dir/rows"
	cut -c11- "$dir/b" >"$dir/bfig"
	[ "$ra" != 0 ] || [ -s "$dir/rows" ] || why="$why; no rank rows"
	while IFS= read -r row; do
		grep -qxF -- "$row" "$dir/bfig" || why="$why; row '$row' not in --expand's"
	done <"$dir/rows"
	check "$name" "$([ -z "$why" ]; echo $?)" "$why"
}

# texts NAME PLAN [PIPESIM OPTIONS]: every op pipesim names "TEXT (line N)" on stdout and
# stderr is the text of line N of PLAN (its `@` location aside), and the rank named
# before it is the rank whose list holds line N: a line plan holds pipeline indices in
# memory, the file and every message world ranks.
texts() {
	name=$1 plan=$2
	shift 2
	"$BIN/pipesim" "$@" "$plan" >"$dir/t" 2>&1
	grep -o 'rank [0-9]* [A-Z][A-Z]* [^()]* (line [0-9]*)\|\.\. [A-Z][A-Z]* [^()]* (line [0-9]*)' \
		"$dir/t" >"$dir/named"
	why=$(awk -v plan="$plan" '
		BEGIN { while ((getline l < plan) > 0) { n++; if (l ~ /^rank /) { split(l, w, " "); r = w[2] } text[n] = l; owner[n] = r } }
		{ ln = $NF; sub(/\)$/, "", ln); t = $0; sub(/ \(line [0-9]*\)$/, "", t)
		  if ($1 == "rank") { want = owner[ln]; if ($2 != want) { print "rank " $2 " names line " ln " of rank " want; exit }
		                      sub(/^rank [0-9]* /, "", t) } else sub(/^\.\. /, "", t)
		  f = text[ln]; sub(/ @[0-9:]*$/, "", f)
		  if (t != f) { print "\"" t "\" is not line " ln ": \"" f "\""; exit }
		  seen++ }
		END { if (!seen && why == "") print "no op named" }' "$dir/named")
	check "$name" "$([ -z "$why" ]; echo $?)" "$why"
}

for f in examples/*.pipe; do
	b=$(basename "$f" .pipe)
	case $b in custom | fromcsv) continue ;; esac # they name a CSV relative to examples/
	"$BIN/pipecc" "$f" -o "$dir/$b.plan" 2>/dev/null || continue
	same "$b: line and --expand agree" "$dir/$b.plan"
	same "$b: overlap model agrees" "$dir/$b.plan" --model overlap
	texts "$b: the ops pipesim names are the file's lines" "$dir/$b.plan"
done

# pipecc --expand writes the world that pipesim --expand simulates
t "mlp4 compiles expanded" 0 "$BIN/pipecc" --expand examples/mlp4.pipe -o "$dir/e.plan"
has "the expanded plan is format 2" "$dir/e.plan" "^pipecc-plan 2 "
t "mlp4 compiles as a line" 0 "$BIN/pipecc" examples/mlp4.pipe -o "$dir/l.plan"
has "the line plan is format 3" "$dir/l.plan" "^pipecc-plan 3 "
has "the line plan says its lines and devices" "$dir/l.plan" "^lines 2 devices_per_node=8$"
check "the line plan lists one line's ranks" \
	"$([ "$(grep -c '^rank ' "$dir/l.plan")" = 4 ] && [ "$(grep -c '^rank ' "$dir/e.plan")" = 8 ]; echo $?)" \
	"$(grep '^rank ' "$dir/l.plan")"
# (ops are named by plan-file line in the one, by index in the other)
"$BIN/pipesim" "$dir/e.plan" 2>&1 | sed 's/ (line [0-9]*)//g; s/ (op [0-9]*)//g' >"$dir/x"
"$BIN/pipesim" --expand "$dir/l.plan" 2>&1 | sed 's/ (line [0-9]*)//g; s/ (op [0-9]*)//g' >"$dir/y"
check "pipesim on --expand's plan is pipesim --expand on the line" \
	"$(cmp -s "$dir/x" "$dir/y"; echo $?)" "$(diff "$dir/x" "$dir/y" | head -5)"
t "--expand goes with --emit plan" 2 "$BIN/pipecc" --expand --emit summary examples/mlp4.pipe

# size: the line plan of dp=64 has as many lines as dp=2's (the expanded one 32 times)
sed 's/^mesh pp=4 dp=2;/mesh pp=4 dp=64;/' examples/mlp4.pipe >"$dir/d64.pipe"
t "dp=64 compiles" 0 "$BIN/pipecc" "$dir/d64.pipe" -o "$dir/d64.plan"
check "dp=64's line plan has dp=2's number of lines" \
	"$([ "$(grep -c '' "$dir/d64.plan")" = "$(grep -c '' "$dir/l.plan")" ]; echo $?)" \
	"$(wc -l "$dir/d64.plan" "$dir/l.plan")"
same "dp=64 line and --expand agree" "$dir/d64.plan"

# random meshes: pp, dp, tp and the order of the dims drawn per run (the seed is printed)
seed=${LINES_SEED:-$(date +%s)}
echo "testing $TOOL random meshes with seed $seed"
awk -v seed="$seed" 'BEGIN { srand(seed); for (i = 0; i < 6; i++) {
	split("pp dp tp", d, " "); n = 3
	for (j = n; j > 1; j--) { k = int(rand() * j) + 1; x = d[j]; d[j] = d[k]; d[k] = x }
	v["pp"] = 2; v["dp"] = int(rand() * 5) + 1; v["tp"] = int(rand() * 2) + 1
	print d[1] "=" v[d[1]], d[2] "=" v[d[2]], d[3] "=" v[d[3]], (rand() < 0.5 ? "1f1b" : "gpipe") } }' |
while read -r a b c sched; do
	sed "s/^mesh .*;/mesh $a $b $c;/; s/^schedule .*;/schedule $sched;/" examples/gpt-tp.pipe >"$dir/r.pipe"
	if "$BIN/pipecc" "$dir/r.pipe" -o "$dir/r.plan" 2>"$dir/rerr"; then
		same "mesh $a $b $c $sched: line and --expand agree" "$dir/r.plan"
	else
		check "mesh $a $b $c compiles" 1 "$(head -2 "$dir/rerr")"
	fi
	[ "$fails" = 0 ] || exit 1
done || fails=$((fails + 1))

# a deadlock (an order lowered with --allow-deadlock) on dp=3: the same verdict, and
# every line's ranks counted stuck
cat >"$dir/dl.pipe" <<END
pipeline dl;
mesh pp=2 dp=3;
microbatches 2;
input 4x8;
stage s0 { linear 8; relu; }
stage s1 { linear 8; relu; }
stage s2 { linear 8; relu; }
stage s3 { linear 8; loss mse; }
skip s1 -> s3;
placement [0, 1, 1, 0];
schedule custom {
	rank 0: 3F0 0F0 0F1 3F1 3B0 3B1 0B0 0B1;
	rank 1: 1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1;
}
END
t "a deadlocking order compiles with --allow-deadlock" 0 "$BIN/pipecc" --allow-deadlock \
	"$dir/dl.pipe" -o "$dir/dl.plan"
t "pipesim finds the deadlock on the line" 1 "$BIN/pipesim" "$dir/dl.plan"
has "it counts every line's ranks" "$dir/err" "error: deadlock: 6 of 6 ranks can never finish"
same "deadlock: line and --expand agree" "$dir/dl.plan"
texts "deadlock: the blocked ops and the cycle are the file's lines" "$dir/dl.plan"
same "deadlock, overlap model: line and --expand agree" "$dir/dl.plan" --model overlap

# tp groups that sit in one node on some lines and span nodes on others: pipesim says so
# and runs the world, so the figures still agree
sed 's/^mesh .*;/mesh tp=2 pp=2 dp=3;/' examples/gpt-tp.pipe >"$dir/n.pipe"
t "a mesh whose tp groups straddle nodes compiles" 0 "$BIN/pipecc" "$dir/n.pipe" -o "$dir/n.plan"
t "pipesim runs it" 0 "$BIN/pipesim" "$dir/n.plan"
has "pipesim says it simulates the world" "$dir/err" "simulating every world rank"
same "straddling tp groups: line and --expand agree" "$dir/n.plan"

# the reader (a parse error is reported at its line before the checksum): a rank off
# the line, a wrong line count, a missing lines line
sed 's/^\(SEND act e=0 m=0 to=\)2 /\11 /' "$dir/l.plan" >"$dir/bad.plan"
t "a peer off the line is refused" 1 "$BIN/pipesim" "$dir/bad.plan"
has "located, with the reason" "$dir/err" "bad.plan:[0-9]*: error: rank 1 is not on the plan's pipeline line"
sed 's/^lines 2 /lines 3 /' "$dir/l.plan" >"$dir/bad2.plan"
t "a wrong line count is refused" 1 "$BIN/pipesim" "$dir/bad2.plan"
has "located at the lines line" "$dir/err" "bad2.plan:7: error: lines 3 is not the world over pp (2)"
grep -v '^lines ' "$dir/l.plan" >"$dir/bad3.plan"
t "a format 3 plan without its lines line is refused" 1 "$BIN/pipesim" "$dir/bad3.plan"
has "located at the line after world" "$dir/err" "bad3.plan:7: error: expected 'lines'"

exit $((fails > 0))
