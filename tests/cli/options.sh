#!/bin/sh
# Short options: one letter, one meaning across pipecc, pipesim and piperun (the table
# in plan/cli.c).  The three --help texts are read: no letter names two long options and
# no long option has two letters; each man page lists exactly its tool's short options;
# docs/architecture.md's table has a row, with the tools that have it, for every
# lettered option and every long option two tools share.  Each letter a tool gave up
# (tests/golden/options/TOOL-X.err) exits 2 with exactly that message, which names a
# long option the tool has and what the letter means now, as the owner's --help says.
: "${BIN:=bin}"
TOOL=options
. tests/lib/cli.sh

tools="pipecc pipesim piperun"
plan=tests/plans/good/tiny2.plan

# "X NAME TOOL" for each option of each tool's --help (X is - without a letter).
for tool in $tools; do
	"$BIN/$tool" --help | sed -n "s/^  -\([a-zA-Z]\), --\([a-z0-9-]*\).*/\1 \2 $tool/p;
		s/^      --\([a-z0-9-]*\).*/- \1 $tool/p"
done >"$dir/all"
grep -v '^- ' "$dir/all" >"$dir/short"
n=$(wc -l <"$dir/short")
check "the --help texts list short options ($n)" "$([ "$n" -ge 15 ]; echo $?)" "only $n"

# clashes FIELD OTHER: values of FIELD (1 letter, 2 long name) paired with two OTHERs.
clashes() {
	awk '{ print $1, $2 }' "$dir/short" | sort -u |
		awk -v f="$1" -v o="$2" '{ n[$f]++; l[$f] = l[$f] " " $o }
			END { for (k in n) if (n[k] > 1) print k ":" l[k] }'
}
c=$(clashes 1 2)
check "no letter means two long options" "$([ -z "$c" ]; echo $?)" "$c"
c=$(clashes 2 1)
check "no long option has two letters" "$([ -z "$c" ]; echo $?)" "$c"
c=$(grep '^j ' "$dir/short")
check "-j is no tool's" "$([ -z "$c" ]; echo $?)" "$c"

# Each man page: its `.BR \-X ", " \-\-NAME` lines are the tool's --help pairs.
for tool in $tools; do
	sed -n 's/^\.BR \\-\([a-zA-Z]\) ", " \\-\\-\([a-z\\-]*\).*/\1 \2/p' "man/$tool.1" |
		sed 's/\\-/-/g' | sort >"$dir/man"
	grep " $tool\$" "$dir/short" | cut -d' ' -f1-2 | sort >"$dir/help"
	check "man/$tool.1 lists exactly --help's short options" \
		"$([ -s "$dir/help" ] && cmp -s "$dir/man" "$dir/help"; echo $?)" \
		"$(diff "$dir/help" "$dir/man" | grep '^[<>]' | tr '\n' ' ')"
done

# docs/architecture.md: `| LETTER | --NAME | TOOLS |` (LETTER `-X` or none; TOOLS in the
# order pipecc, pipesim, piperun) for lettered options and long options two tools share.
rows=0 missing=""
for name in $(cut -d' ' -f2 "$dir/all" | sort -u); do
	have=$(awk -v o="$name" '$2 == o { print $3 }' "$dir/all")
	l=$(awk -v o="$name" '$2 == o && $1 != "-" { print $1; exit }' "$dir/all")
	[ -n "$l" ] || [ "$(echo "$have" | wc -l)" -ge 2 ] || continue
	rows=$((rows + 1))
	cell=none
	[ -z "$l" ] || cell="\`-$l\`"
	row="| $cell | \`--$name\` | $(echo $have | sed 's/ /, /g') |"
	grep -qF -- "$row" docs/architecture.md || missing="$missing $row"
done
check "docs/architecture.md's table has the common options ($rows rows)" \
	"$([ "$rows" -ge 15 ] && [ -z "$missing" ]; echo $?)" "missing:$missing"

# The letters given up: exact message, exit 2, and what it says agrees with --help.
ran=0
for g in tests/golden/options/*.err; do
	ran=$((ran + 1))
	name=$(basename "$g" .err)
	tool=${name%-*} l=${name#*-}
	t "$tool -$l is a usage error" 2 "$BIN/$tool" "-$l" "$plan"
	check "$tool -$l says which long option to write" \
		"$(cmp -s "$g" "$dir/err" && [ ! -s "$dir/out" ]; echo $?)" \
		"$(diff "$g" "$dir/err" | head -4 | tr '\n' ' ')"
	long=$(sed -n 's/.* write --\([a-z-]*\).*/\1/p' "$g")
	check "$tool still has --$long" "$(grep -q "^. $long $tool\$" "$dir/all"; echo $?)" \
		"not in $tool --help"
	now=$(sed -n "s/.*(-$l is \([a-z]*\)'s --\([a-z-]*\);.*/$l \2 \1/p" "$g")
	[ -n "$now" ] || [ "$l" = j ]
	check "$tool -$l: what it means now is stated" $? "$(head -1 "$g")"
	[ -z "$now" ] || grep -qx -- "$now" "$dir/short"
	check "$tool -$l: ${now:-nothing} agrees with --help" $? "no '$now' in the --help texts"
done
check "the retired letters ran ($ran)" "$([ "$ran" -ge 7 ]; echo $?)" "only $ran"

[ "$fails" -eq 0 ]
