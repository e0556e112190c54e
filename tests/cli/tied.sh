#!/bin/sh
# A head tied to the embedding on another pipeline rank (docs/semantics.md, "Tied
# table"): gpt-tiny at pp=4 on 1f1b, zbh1 and interleaved (two stages a rank), dp=1 and
# dp=2, compiles with a TIEREDUCE on the two ranks holding the table's copies, after the
# stage's last W and every send of the rank, before its all-reduce and step; pipesim
# proves every plan; piperun --check agrees (threads, and under mpirun); the summary
# counts the copy on the head's stage and the table once in the model; a hand-edited
# plan whose TIEREDUCE comes before a send the other side waits for is a deadlock with
# the wait-for cycle through both TIEREDUCEs; a malformed TIEREDUCE is a located error.
: "${BIN:=bin}"
TOOL=tied
. tests/lib/cli.sh

sed 's/head;/head tied;/' examples/gpt-tiny.pipe >"$dir/t.pipe"
sed 's/mesh pp=4;/mesh pp=4 dp=2;/' "$dir/t.pipe" >"$dir/dp.pipe"
cat >"$dir/i.pipe" <<'EOF'
pipeline tied_interleaved;
mesh pp=2;
microbatches 4;
input tokens 2x16 vocab=64;
block gpt {
	residual { layernorm; attention heads=2 bias; }
	residual { layernorm; mlp 64 bias; }
}
stage s0 { embed 32 positions; gpt; }
stage s1 { gpt; }
stage s2 { gpt; }
stage s3 { gpt; layernorm; head tied; loss xent; }
schedule interleaved;
EOF
sed 's/mesh pp=2;/mesh pp=2 dp=2;/' "$dir/i.pipe" >"$dir/idp.pipe"

# $1 plan, $2 rank, $3 stage: 0 when the rank's TIEREDUCE of the stage follows the
# stage's last W and the rank's last SEND, and precedes the stage's ALLREDUCE and OPTIM
tie_placed() {
	awk -v r="$2" -v s="$3" '
		/^rank / { on = ($2 == r) }
		!on { next }
		{ n++ }
		($1 == "W" || $1 == "BW") && $2 == s { w = n }
		$1 == "SEND" { snd = n }
		$1 == "TIEREDUCE" && $2 == "s=" s { t = n }
		$1 == "ALLREDUCE" && $2 == "s=" s { a = n }
		$1 == "OPTIM" && $2 == "s=" s { o = n }
		END { exit !(t && t > w && t > snd && o > t && (!a || a > t)) }' "$1"
}

for case in "t 1f1b" "t zbh1" "dp 1f1b" "dp zbh1" "i interleaved" "idp interleaved"; do
	set -- $case
	p=$dir/$1-$2.plan
	t "$1 $2 compiles" 0 "$BIN/pipecc" "$dir/$1.pipe" -s "$2" -o "$p"
	has "$1 $2: the head keeps a copy" "$p" "^layer head [0-9]* [0-9]* tied copy$"
	last=$(sed -n 's/^stage \([0-9]*\) .*/\1/p' "$p" | tail -1)
	hp=$(sed -n "s/^stage $last .* pp=\([0-9]*\) .*/\1/p" "$p")
	for d in 0 1; do
		er=$(sed -n "s/^rank \([0-9]*\) pp=0 dp=$d .*/\1/p" "$p")
		hr=$(sed -n "s/^rank \([0-9]*\) pp=$hp dp=$d .*/\1/p" "$p")
		[ -n "$er" ] || continue
		check "$1 $2: TIEREDUCE of the embedding on rank $er in its place" \
			"$(tie_placed "$p" "$er" 0; echo $?)" "see $p"
		check "$1 $2: TIEREDUCE of the head on rank $hr in its place" \
			"$(tie_placed "$p" "$hr" "$last"; echo $?)" "see $p"
		has "$1 $2: rank $er sums with rank $hr" "$p" "^TIEREDUCE s=0 with=$hr "
	done
	t "pipesim proves $1 $2" 0 "$BIN/pipesim" "$p"
	t "pipesim proves $1 $2 (overlap model)" 0 "$BIN/pipesim" --model overlap "$p"
	t "--check $1 $2" 0 "$BIN/piperun" "$p" --check --steps 2
	has "--check $1 $2 agrees" "$dir/out" "^check: .*: ok"
done

# the summary: the head's stage counts its copy, the model the table once
sed 's/head tied;/head;/' "$dir/t.pipe" >"$dir/u.pipe"
t "summary tied across ranks" 0 "$BIN/pipecc" "$dir/t.pipe" --emit summary
cp "$dir/out" "$dir/tied.sum"
t "summary untied" 0 "$BIN/pipecc" "$dir/u.pipe" --emit summary
cp "$dir/out" "$dir/untied.sum"
s3t=$(sed -n 's/^s3  *3  *\([0-9]*\) .*/\1/p' "$dir/tied.sum")
s3u=$(sed -n 's/^s3  *3  *\([0-9]*\) .*/\1/p' "$dir/untied.sum")
check "the head's stage holds the table ($s3t parameters, as untied)" \
	"$([ -n "$s3t" ] && [ "$s3t" = "$s3u" ]; echo $?)" "tied $s3t, untied $s3u"
nt=$(sed -n 's/^parameters \([0-9]*\);.*/\1/p' "$dir/tied.sum")
nu=$(sed -n 's/^parameters \([0-9]*\);.*/\1/p' "$dir/untied.sum")
check "the model counts the table once ($nt = $nu - 512 x 128)" \
	"$([ -n "$nt" ] && [ "$nt" -eq $((nu - 65536)) ]; echo $?)" "tied $nt, untied $nu"
has "the summary names the copy" "$dir/tied.sum" "^tied table: 65536 parameters held twice"

# a TIEREDUCE before a send the other side waits for: the wait-for cycle runs through
# both TIEREDUCEs (a hand edit, as a version-1 plan without a checksum)
awk -v r=3 '
	NR == 1 { print "pipecc-plan 1"; next }
	/^rank / { on = ($2 == r) }
	{ line[NR] = $0 }
	on && $1 == "TIEREDUCE" { t = NR }
	END {
		s = t - 1 # the last SEND, just before
		a = line[s]; b = line[t]
		ga = a; sub(/.* g=/, "", ga); sub(/ .*/, "", ga)
		gb = b; sub(/.* g=/, "", gb); sub(/ .*/, "", gb)
		sub(/ g=[0-9]+/, " g=" gb, a); sub(/ g=[0-9]+/, " g=" ga, b)
		line[s] = b; line[t] = a
		for (i = 2; i <= NR; i++) print line[i]
	}' "$dir/t-1f1b.plan" >"$dir/dl.plan"
has "the edit moves rank 3's TIEREDUCE before its last SEND" "$dir/dl.plan" "^TIEREDUCE s=3 with=0 .* g=9"
for m in strict overlap; do
	t "pipesim finds the deadlock ($m)" 1 "$BIN/pipesim" --model "$m" "$dir/dl.plan"
	has "it is a deadlock ($m)" "$dir/err" "error: deadlock: 4 of 4 ranks can never finish"
	has "the cycle goes from the head's TIEREDUCE to the embedding's ($m)" "$dir/err" \
		"rank 3 .*TIEREDUCE s=3 with=0 .* waits for rank 0 .*TIEREDUCE s=0 with=3"
	has "and through the send it holds back ($m)" "$dir/err" \
		"waits for rank 3 .*SEND grad e=2 m=7 .* which waits behind rank 3 .*TIEREDUCE"
done

# a malformed TIEREDUCE is a located error
sed '1s/.*/pipecc-plan 1/; s/^TIEREDUCE s=0 with=3/TIEREDUCE s=0 to=3/' "$dir/t-1f1b.plan" >"$dir/bad.plan"
n=$(grep -n '^TIEREDUCE s=0' "$dir/bad.plan" | cut -d: -f1)
t "pipesim refuses a TIEREDUCE without with=" 1 "$BIN/pipesim" "$dir/bad.plan"
has "the error names the line" "$dir/err" "bad.plan:$n: error: expected 'with='"
t "piperun refuses it too" 1 "$BIN/piperun" "$dir/bad.plan" --steps 1
has "piperun names the line" "$dir/err" "bad.plan:$n: error: expected 'with='"
sed '1s/.*/pipecc-plan 1/; s/^TIEREDUCE s=0 with=3/TIEREDUCE s=0 with=1/' "$dir/t-1f1b.plan" >"$dir/bad2.plan"
t "pipesim refuses a TIEREDUCE with the wrong rank" 1 "$BIN/pipesim" "$dir/bad2.plan"
has "the verifier says which rank" "$dir/err" "bad2.plan:$n: error: .*the tied table.s other copy is on rank 3 (want with=3)"

# the language keeps `copy` to the compiler
sed 's/head;/head tied copy;/' examples/gpt-tiny.pipe >"$dir/c.pipe"
t "'head tied copy' is refused" 1 "$BIN/pipecc" "$dir/c.pipe" -o "$dir/c.plan"
has "the error is at 'copy'" "$dir/err" "c.pipe:18:[0-9]*: error: 'head' takes no 'copy'"

# under mpirun, one process a rank: the embedding group's sum over MPI
case $BIN in
*san*) echo "testing $TOOL under mpirun ... skipped: sanitizer builds test the threads backend" ;;
*)
	if command -v mpirun >/dev/null 2>&1 && "$BIN/piperun" --version | grep -q mpi; then
		export OMPI_MCA_rmaps_base_oversubscribe=1
		t "--check tied 1f1b under mpirun -np 4" 0 timeout 300 mpirun --allow-run-as-root \
			--oversubscribe --mca btl self,vader -np 4 "$BIN/piperun" "$dir/t-1f1b.plan" \
			--check --steps 2
		has "--check under mpirun agrees" "$dir/out" "^check: .*: ok"
	else
		echo "testing $TOOL under mpirun ... skipped: no mpirun or no MPI backend"
	fi
	;;
esac

[ "$fails" -eq 0 ]
