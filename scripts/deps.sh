#!/bin/sh
# Checks the Debian packages the build and tests need and installs the missing ones
# when run as root; otherwise prints the exact command and fails.  Called by the
# Makefile on every run, so it must be quick when nothing is missing.
# Optional: Open MPI (the MPI backend); when it cannot be installed the build goes on
# without it.
need=""
command -v flex >/dev/null 2>&1 || need="$need flex"
command -v bison >/dev/null 2>&1 || need="$need bison"
[ -f /usr/include/cmocka.h ] || need="$need libcmocka-dev"
[ -f /usr/include/x86_64-linux-gnu/cblas.h ] || [ -f /usr/include/cblas.h ] ||
	[ -f /usr/include/openblas/cblas.h ] || need="$need libopenblas-dev"
opt=""
if [ -z "${PIPECC_NO_MPI:-}" ]; then
	command -v mpicc >/dev/null 2>&1 || opt="$opt libopenmpi-dev"
	command -v mpirun >/dev/null 2>&1 || opt="$opt openmpi-bin"
fi
[ -z "$need$opt" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "deps: installing$need$opt" >&2
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q $need $opt >/tmp/pipecc-deps.log 2>&1; then
		apt-get update -q >>/tmp/pipecc-deps.log 2>&1
		apt-get install -y -q $need $opt >>/tmp/pipecc-deps.log 2>&1 || {
			echo "deps: apt-get failed; see /tmp/pipecc-deps.log" >&2
			[ -n "$need" ] && exit 1
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
