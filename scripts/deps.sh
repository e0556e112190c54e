#!/bin/sh
# The Debian packages pipecc's build and tests need, decided by asking the package
# database (dpkg-query), never by looking for a file that another package may also
# provide (Debian's reference BLAS ships a cblas.h of its own, for one).
#   sh scripts/deps.sh          install what is missing (as root), else print the command
#   sh scripts/deps.sh --fuzz   also the packages of `make fuzz` (clang's libFuzzer)
#   sh scripts/deps.sh --list   print every package, required, optional or fuzz, and its state
# Called by the Makefile on every run, so it must be quick when nothing is missing.
# Optional packages (Open MPI) build the MPI backend; without them the build goes on.

# package:why, one per word.  tests/cli/deps.sh checks that every -l library in the
# link lines comes from one of these packages (or from what they depend on).
REQUIRED="gcc:compiler make:build libc6-dev:libc,-lm,-lpthread flex:lexer bison:parser
libcmocka-dev:unit-tests libopenblas-dev:piperun-GEMMs groff-base:man-page-lint
pkgconf:pkg-config(OpenBLAS-flags,tests/cli/api.sh)"
OPTIONAL="libopenmpi-dev:MPI-backend openmpi-bin:mpirun"
FUZZ="clang:make-fuzz libclang-rt-dev:libFuzzer,ASan-runtime"

installed() {
	[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" = "ii " ]
}

list=0
kinds="required optional"
case "${1:-}" in
--list) list=1; kinds="required optional fuzz" ;;
--fuzz) kinds="required optional fuzz" ;;
"") ;;
*) echo "usage: sh scripts/deps.sh [--list | --fuzz]" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1; then
	[ $list = 1 ] && { echo "deps: dpkg-query not found: not a Debian system" >&2; exit 1; }
	echo "deps: notice: dpkg-query not found: not a Debian system, packages not checked" >&2
	exit 0
fi

need=""
opt=""
for kind in $kinds; do
	case $kind in
	required) set -- $REQUIRED ;;
	optional) set -- $OPTIONAL ;;
	fuzz) set -- $FUZZ ;;
	esac
	for entry; do
		pkg=${entry%%:*}
		if installed "$pkg"; then state=installed; else state=missing; fi
		[ $list = 1 ] && printf '%-16s %-9s %-9s %s\n' "$pkg" "$kind" "$state" "${entry#*:}"
		[ $state = installed ] && continue
		case $kind in
		optional) [ -n "${PIPECC_NO_MPI:-}" ] || opt="$opt $pkg" ;;
		*) need="$need $pkg" ;;
		esac
	done
done
[ $list = 1 ] && exit 0
[ -z "$need$opt" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "deps: installing$need$opt" >&2
	export DEBIAN_FRONTEND=noninteractive
	log=/tmp/pipecc-deps.log
	if ! apt-get install -y -q $need $opt >$log 2>&1; then
		apt-get update -q >>$log 2>&1
		apt-get install -y -q $need $opt >>$log 2>&1 || {
			echo "deps: apt-get failed; see $log" >&2
			for p in $need; do installed "$p" || exit 1; done
			echo "deps: going on without MPI" >&2
		}
	fi
	exit 0
fi
if [ -n "$need" ]; then
	echo "deps: missing packages; run as root:" >&2
	echo "  apt-get install -y$need$opt" >&2
	exit 1
fi
echo "deps: notice: Open MPI not found; the MPI backend is left out (apt-get install -y$opt)" >&2
exit 0
