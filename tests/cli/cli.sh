#!/bin/sh
# The command-line convention the three tools share (plan/cli.c), checked on each of
# them in one loop: one version string, the exit statuses in --help, usage errors exit
# 2, bad or missing input exits 1 naming the file, '-' reads standard input and every
# output option writes standard output with '-', outputs are checked before the work,
# failed writes say why and leave no file, the progress line shows only on a terminal,
# every --help option is in the man page, man pages render without warnings, and
# `make install` / `make uninstall` put and remove exactly 3 tools, the library
# (docs/api.md) and 6 man pages (and the record of the folders install made, which
# uninstall removes once empty, no other).
: "${BIN:=bin}"
TOOL=cli
. tests/lib/cli.sh

version=$(cat VERSION)
"$BIN/pipecc" examples/tiny.pipe -o "$dir/tiny.plan" || exit 1
printf 'garbage\n' >"$dir/bad.plan"
printf 'pipeline ;\n' >"$dir/bad.pipe"

# A command under a file-size limit of one block: writing a regular file beyond it
# fails (EFBIG) instead of killing the tool; its standard output goes to /dev/null.
limited() {
	sh -c 'trap "" XFSZ; ulimit -f 1; exec "$@" >/dev/null' sh "$@"
}

ran=""
for tool in pipecc pipesim piperun; do
	TOOL=$tool
	T="$BIN/$tool"
	case $tool in
	pipecc) in=examples/tiny.pipe bad=$dir/bad.pipe outs="--output" extra="--stats"
		work="ops in" ;; # what --stats prints after the work
	pipesim) in=$dir/tiny.plan bad=$dir/bad.plan outs="--trace --svg" extra=""
		work="makespan" ;;
	piperun) in=$dir/tiny.plan bad=$dir/bad.plan outs="--trace" extra="--steps 1"
		work="step 1" ;;
	esac
	ran="$ran $tool"

	t "--version" 0 "$T" --version
	[ "$(head -n 1 "$dir/out")" = "$tool $version" ]
	check "--version prints '$tool $version' from VERSION" $? "got '$(head -n 1 "$dir/out")'"
	t "--help" 0 "$T" --help
	has "--help has the usage shape" "$dir/out" "^usage: $tool [A-Z]* \[options\]"
	has "--help lists exit status 0" "$dir/out" "^  0  ok"
	has "--help lists exit status 1" "$dir/out" "^  1  .*"
	has "--help lists exit status 2" "$dir/out" "^  2  a usage error"
	cp "$dir/out" "$dir/help.$tool"
	t "an unknown option exits 2" 2 "$T" "$in" --frobnicate
	has "an unknown option is named" "$dir/err" "unknown option '--frobnicate'"
	t "no input exits 2" 2 "$T"
	t "two inputs exit 2" 2 "$T" "$in" "$in"
	t "a missing input exits 1" 1 "$T" "$dir/nosuch.in"
	has "a missing input is named" "$dir/err" "$dir/nosuch.in"
	t "an invalid input exits 1" 1 "$T" "$bad"
	if [ "$tool" != pipecc ]; then # a .pipe source where a plan is expected
		t "a .pipe source exits 1" 1 "$T" examples/tiny.pipe
		has "a .pipe source is named as one" "$dir/err" \
			"examples/tiny.pipe:1: error: this is a pipecc source file, not a plan: compile it first with \`pipecc examples/tiny.pipe -o PLAN\`"
		t "a .pipe source on stdin exits 1" 1 sh -c "'$T' - <examples/mlp4.pipe"
		has "a .pipe source on stdin is named as one" "$dir/err" "<stdin>:1: error: this is a pipecc source file"
	fi
	t "--quiet is accepted" 0 "$T" "$in" $extra --quiet
	t "-q is accepted" 0 "$T" "$in" $extra -q
	t "'-' reads standard input" 0 sh -c "'$T' - $extra <'$in'"
	[ -s "$dir/out" ]
	check "'-' as input gives output" $? "nothing on stdout"
	if [ "$tool" = pipecc ]; then # the one input-file option
		t "--from-torch-csv - reads standard input" 0 sh -c \
			"'$T' examples/fromcsv.pipe --from-torch-csv - --emit summary <examples/custom.csv"
		has "--from-torch-csv - took the schedule" "$dir/out" "schedule csv"
	fi
	t "standard output to /dev/full exits 1" 1 sh -c "'$T' '$in' $extra >/dev/full"
	has "standard output to /dev/full says why" "$dir/err" "cannot write standard output: No space left"

	for o in $outs; do
		t "$o - writes standard output" 0 "$T" "$in" $extra "$o" -
		[ -s "$dir/out" ] && [ ! -e ./- ]
		check "$o - wrote standard output, not a file '-'" $? "empty stdout or a file '-'"
		t "$o into a missing folder exits 1" 1 "$T" "$in" $extra "$o" "$dir/no/such/x"
		has "$o into a missing folder names it" "$dir/err" "$dir/no/such/x: No such file"
		! grep -q "$work" "$dir/out" "$dir/err"
		check "$o into a missing folder fails before the work" $? "'$work' was printed"
		t "$o to a folder exits 1" 1 "$T" "$in" $extra "$o" "$dir"
		has "$o to a folder says so" "$dir/err" "Is a directory"
		t "$o to /dev/full exits 1" 1 "$T" "$in" $extra "$o" /dev/full
		has "$o to /dev/full says why" "$dir/err" "cannot write /dev/full: No space left on device"
		printf 'old\n' >"$dir/keep"
		t "$o failing mid-write exits 1" 1 limited "$T" "$in" $extra "$o" "$dir/keep"
		has "$o failing mid-write says why" "$dir/err" "cannot write $dir/keep: File too large"
		[ "$(cat "$dir/keep")" = old ] && [ -z "$(ls "$dir" | grep '^keep\.')" ]
		check "$o failing mid-write leaves the old file and no temporary" $? "$(ls "$dir")"
		rm -f "$dir/new"
		t "$o failing mid-write, new file" 1 limited "$T" "$in" $extra "$o" "$dir/new"
		[ ! -e "$dir/new" ] && [ -z "$(ls "$dir" | grep '^new')" ]
		check "$o failing mid-write leaves no file" $? "$(ls "$dir")"
	done
	# Two outputs, the second into a missing folder: the first is not written either.
	set -- $outs
	if [ $# -ge 2 ]; then
		t "$1 and a bad $2 exit 1" 1 "$T" "$in" "$1" "$dir/first" "$2" "$dir/no/x"
		[ ! -e "$dir/first" ]
		check "$1 is not written when $2 cannot be" $? "$dir/first exists"
	fi

	# The progress line: never when stderr is not a terminal; on a terminal (script(1))
	# drawn and cleared, and not with --quiet.  PIPECC_PROGRESS_AFTER_MS=0 draws it at
	# once instead of after 2 s.
	t "progress off when not a terminal" 0 env PIPECC_PROGRESS_AFTER_MS=0 "$T" "$in" $extra
	! grep -q "$(printf '\033')\[K" "$dir/err"
	check "no progress line when stderr is not a terminal" $? "escape sequence in stderr"
	if command -v script >/dev/null 2>&1 && script -qec true /dev/null >/dev/null 2>&1; then
		t "progress on a terminal" 0 script -qec \
			"env PIPECC_PROGRESS_AFTER_MS=0 '$T' '$in' $extra >/dev/null" /dev/null
		has "progress line drawn on a terminal" "$dir/out" "$tool: [a-z]"
		has "progress line cleared" "$dir/out" "$(printf '\033')\[K"
		t "progress with --quiet" 0 script -qec \
			"env PIPECC_PROGRESS_AFTER_MS=0 '$T' '$in' $extra --quiet >/dev/null" /dev/null
		! grep -q "$(printf '\033')\[K" "$dir/out"
		check "no progress line with --quiet" $? "escape sequence with --quiet"
	fi

	# The man page: every long option of --help, and no groff warnings.
	page=man/$tool.1
	missing=""
	for opt in $(grep -o -- '--[a-z][a-z-]*' "$dir/help.$tool" | sort -u); do
		sed 's/\\-/-/g; s/\\f[BIRP]//g' "$page" | grep -q -- "$opt" || missing="$missing $opt"
	done
	[ -z "$missing" ]
	check "every --help option is in $page" $? "missing:$missing"
done
# Defaults in --help come from the named constants, not from literals in help texts.
TOOL=help
defaults() { # TOOL OPTION HEADER CONSTANT
	want=$(sed -n "s/^#define $4 \([^ ]*\).*/\1/p" "$3" | sed 's/\.0$//')
	grep -q -- "$2 .*(default: $want)" "$dir/help.$1"
	check "$1 $2 shows $4 ($want) as its default" $? "$(grep -- "$2" "$dir/help.$1")"
}
defaults pipecc --max-errors compiler/diag.h DIAG_MAX_ERRORS
defaults pipesim --width sim/pipesim.h PIPESIM_GRID_WIDTH
defaults piperun --steps runtime/rt.h RT_DEFAULT_STEPS
defaults piperun --lr runtime/rt.h RT_DEFAULT_LR
defaults piperun --blas-threads runtime/piperun.h PIPERUN_BLAS_THREADS

[ "$ran" = " pipecc pipesim piperun" ]
check "the loop ran over the three tools" $? "ran:$ran"

TOOL=man
pages="man/pipecc.1 man/pipesim.1 man/piperun.1 man/pipecc.3 man/pipe.5 man/pipecc-plan.5"
n=0
for page in $pages; do
	n=$((n + 1))
	groff -man -ww -z "$page" >"$dir/groff" 2>&1
	[ $? -eq 0 ] && [ ! -s "$dir/groff" ]
	check "$page renders without warnings" $? "$(head -5 "$dir/groff")"
	if command -v man >/dev/null 2>&1; then
		MANWIDTH=80 man -l "$page" >"$dir/man" 2>"$dir/manerr"
		[ -s "$dir/man" ] && [ ! -s "$dir/manerr" ]
		check "man -l $page shows it" $? "$(head -5 "$dir/manerr")"
	fi
done
[ "$n" -eq 6 ] && [ "$(ls man | wc -l)" -eq 6 ]
check "six man pages, all checked" $? "$(ls man)"

TOOL=install
san=""
case $BIN in *san*) san="SAN=1" ;; esac
root="$dir/root"
t "make install" 0 make -s --no-print-directory $san install DESTDIR="$root" PREFIX=/usr
found=$(cd "$root" && find . -type f | sort | tr '\n' ' ')
want="./usr/bin/pipecc ./usr/bin/piperun ./usr/bin/pipesim ./usr/include/pipecc.h \
./usr/lib/libpipecc.a ./usr/lib/libpipecc.so.$version ./usr/lib/pkgconfig/pipecc.pc \
./usr/share/man/man1/pipecc.1 ./usr/share/man/man1/piperun.1 ./usr/share/man/man1/pipesim.1 \
./usr/share/man/man3/pipecc.3 ./usr/share/man/man5/pipe.5 ./usr/share/man/man5/pipecc-plan.5 \
./usr/share/pipecc/installed-folders "
[ "$found" = "$want" ]
check "installs exactly 3 tools, the library, 6 man pages and the folders' record" $? "found: $found"
"$root/usr/bin/pipesim" --version >"$dir/out" 2>&1
has "the installed pipesim runs" "$dir/out" "pipesim $version"
t "make uninstall" 0 make -s --no-print-directory $san uninstall DESTDIR="$root" PREFIX=/usr
[ -z "$(cd "$root" && find . -type f)" ]
check "uninstall leaves no file" $? "$(cd "$root" && find . -type f)"
[ -z "$(cd "$root" && find . -mindepth 1)" ]
check "... and no folder it made" $? "$(cd "$root" && find . -mindepth 1)"
# folders there before install stay, empty or not
mkdir -p "$root/usr/bin" "$root/usr/share/man/man1"
t "make install over folders that exist" 0 make -s --no-print-directory $san install \
	DESTDIR="$root" PREFIX=/usr
t "make uninstall again" 0 make -s --no-print-directory $san uninstall DESTDIR="$root" PREFIX=/usr
left=$(cd "$root" && find . -mindepth 1 | sort | tr '\n' ' ')
[ "$left" = "./usr ./usr/bin ./usr/share ./usr/share/man ./usr/share/man/man1 " ]
check "... keeps those, removes man3, man5, include, lib and share/pipecc" $? "left: $left"

[ "$fails" -eq 0 ]
