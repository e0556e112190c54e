#!/bin/sh
# Docs that agree with the code.  Every long option of each tool's --help is in its man
# page and, for piperun, a row of docs/runtime.md's options table.  Every figure an
# example states on a `# => TOOL [OPTIONS]: TEXT` comment line is what the tool prints:
# pipecc runs on the example (its -o output, stdout and stderr together), pipesim on the
# example's plan; TEXT must appear in that output, runs of spaces counting as one.
: "${BIN:=bin}"
TOOL=docs
. tests/lib/cli.sh

# long options of TOOL's --help, one a line
longs() { "$BIN/$1" --help | grep -o -- '--[a-z][a-z0-9-]*' | sort -u; }

# Options: the man page (roff's \- and fonts undone) and, for piperun, the table's rows.
sed -n '/^| option | default |/,/^$/p' docs/runtime.md | grep '^| `' >"$dir/table"
[ -s "$dir/table" ]
check "docs/runtime.md has its options table" $? "no '| option | default |' table"
for tool in pipecc pipesim piperun; do
	n=0 missing=""
	for opt in $(longs $tool); do
		n=$((n + 1))
		sed 's/\\-/-/g; s/\\f[BIRP]//g' "man/$tool.1" | grep -q -- "$opt\b" ||
			missing="$missing $opt"
	done
	[ "$n" -gt 5 ] && [ -z "$missing" ]
	check "every --help option of $tool ($n) is in man/$tool.1" $? "missing:$missing"
done
n=0 missing=""
for opt in $(longs piperun); do
	n=$((n + 1))
	grep -q -- "\`[^\`]*$opt\b[^\`]*\`" "$dir/table" || missing="$missing $opt"
done
[ "$n" -gt 5 ] && [ -z "$missing" ]
check "every --help option of piperun ($n) is in docs/runtime.md's table" $? "missing:$missing"

# Figures: each `# =>` line of each example.
squeeze() { tr -s ' ' <"$1"; }
lines=0
for ex in examples/*.pipe; do
	grep -q '^# => ' "$ex" || continue
	name=$(basename "$ex" .pipe)
	"$BIN/pipecc" "$ex" -o "$dir/$name.plan" 2>"$dir/cc.err"
	check "$name compiles" $? "$(head -3 "$dir/cc.err")"
	grep '^# => ' "$ex" | sed 's/^# => //' >"$dir/claims"
	while IFS= read -r claim; do
		lines=$((lines + 1))
		cmd=${claim%%: *} want=${claim#*: }
		tool=${cmd%% *}
		opts=$(echo "$cmd" | sed 's/^[a-z]*//')
		case $tool in
		pipecc) "$BIN/pipecc" $opts "$ex" -o "$dir/got" >"$dir/got.1" 2>"$dir/got.2" ;;
		pipesim) "$BIN/pipesim" $opts "$dir/$name.plan" >"$dir/got.1" 2>"$dir/got.2" ;;
		*) echo "unknown tool '$tool'" >"$dir/got.2" ;;
		esac
		cat "$dir/got" "$dir/got.1" "$dir/got.2" 2>/dev/null >"$dir/all"
		squeeze "$dir/all" | grep -qF -- "$(echo "$want" | tr -s ' ')"
		check "$name: $claim" $? "$tool printed: $(head -5 "$dir/all")"
		rm -f "$dir/got"
	done <"$dir/claims"
done
check "the examples state figures to check" "$([ $lines -ge 6 ]; echo $?)" "only $lines"

[ "$fails" -eq 0 ]
