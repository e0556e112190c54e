#!/bin/sh
# Mutation testing (make mutate): each mutation of bench/mutations.txt is put alone
# into a copy of the working tree, which is rebuilt and tested: the test binaries, then
# the CLI scripts, stopping at the first failure (the mutation is then killed).  One
# that passes every test survived: a fault the tests would let through.  Prints a line
# per mutation and a summary; exits 1 when a mutation of the verifier, the simulator or
# the memory model survives (or a line cannot be applied), so they stay at none.
#   MUTATIONS=FILE   another list (same format)
#   ONLY=AREA        only that area's mutations
# Slow: a survivor costs a whole test run (minutes); a kill, up to one.
: "${MUTATIONS:=bench/mutations.txt}"
list=$(cd "$(dirname "$MUTATIONS")" && pwd)/$(basename "$MUTATIONS")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 2' INT TERM HUP
# The working tree as it is: tracked and untracked files that git does not ignore.
git ls-files -co --exclude-standard | while read -r f; do [ -e "$f" ] && echo "$f"; done |
	tar -cf - -T - | tar -xf - -C "$work"
cd "$work" || exit 2
tests=$(ls tests/test_*.c | sed 's|^tests/\(.*\)\.c$|build/rel/tests/\1|')
build() {
	make -s -j2 all $tests build/rel/failalloc/pipecc build/rel/failalloc/pipesim \
		>build.log 2>&1 </dev/null
}
# The suite, cheapest first, until a test fails; 0 when all pass.  Its standard input is
# /dev/null: mpirun forwards its own to rank 0, which would eat the list being read.
suite() {
	suite_ </dev/null
}
suite_() {
	for t in $tests; do
		case $t in */test_sched | */test_cuda) continue ;; esac
		"$t" >test.log 2>&1 || { echo "$t"; return 1; }
	done
	for t in build/rel/tests/test_sched build/rel/tests/test_cuda; do
		"$t" >test.log 2>&1 || { echo "$t"; return 1; }
	done
	for s in tests/cli/*.sh; do
		BIN=bin sh "$s" >test.log 2>&1 || { echo "$s"; return 1; }
	done
	return 0
}
if ! build; then
	echo "mutate: the unmutated tree does not build:"
	tail -20 build.log
	exit 2
fi
if by=$(suite); then :; else
	echo "mutate: the unmutated tree fails $by:"
	tail -20 test.log
	exit 2
fi
tab=$(printf '\t')
n=0 killed=0 survived=0 bad=0 must=0
while IFS="$tab" read -r area file from to; do
	case $area in '' | '#'*) continue ;; esac
	[ -n "${ONLY:-}" ] && [ "$area" != "$ONLY" ] && continue
	n=$((n + 1))
	cp "$file" "$file.orig"
	if ! FROM=$from TO=$to perl -0pi -e '
		$c = () = /\Q$ENV{FROM}\E/g;
		die "occurs $c times\n" unless $c == 1;
		s/\Q$ENV{FROM}\E/$ENV{TO}/;' "$file" 2>perl.log; then
		echo "mutation $n ($area, $file): cannot apply: $(cat perl.log): $from"
		bad=$((bad + 1))
		mv "$file.orig" "$file"
		continue
	fi
	if ! build; then
		echo "mutation $n ($area, $file): does not build: $to"
		bad=$((bad + 1))
	elif by=$(suite); then
		echo "mutation $n ($area, $file): SURVIVED: '$from' -> '$to'"
		survived=$((survived + 1))
		case $area in verifier | simulator | memory) must=$((must + 1)) ;; esac
	else
		echo "mutation $n ($area, $file): killed by $by"
		killed=$((killed + 1))
	fi
	mv "$file.orig" "$file"
	touch "$file" # older than the objects built from the mutation: rebuild it
done <"$list"
echo "mutate: $n mutations, $killed killed, $survived survived ($must in verifier, simulator or memory), $bad not applied"
[ "$must" -eq 0 ] && [ "$bad" -eq 0 ]
