#!/bin/sh
# scripts/deps.sh: --list names every package with its state, and every -l library on
# the build's link lines (tools and tests, MPI and CUDA parts included) comes from a
# package it lists or from one of their dependencies, asked of dpkg, never guessed from
# a header.  Libraries under CUDA_HOME come from the CUDA toolkit, and NCCL from it or
# from NVIDIA's packages, not from Debian.
TOOL=deps
. tests/lib/cli.sh
: "${CUDA_HOME:=/usr/local/cuda}"

# Where the Makefile finds CUDA and NCCL (make -n: nothing is built, nvcc never runs), on
# a stand-in toolkit: nccl.h beside it needs no flags of NCCL's own; NCCL_HOME's tree
# adds its -I, -L and rpath; without nccl.h anywhere a notice says what is missing.
fake=$dir/cuda nccl=$dir/nccl
mkdir -p "$fake/bin" "$fake/include" "$fake/lib64" "$nccl/include" "$nccl/lib"
printf '#!/bin/sh\nexit 1\n' >"$fake/bin/nvcc"
chmod +x "$fake/bin/nvcc"
: >"$nccl/include/nccl.h"
cuda_make() { env -u NCCL_HOME make -s -n -B all CUDA_HOME="$fake" NVCC="$fake/bin/nvcc" "$@" >"$dir/make" 2>&1; }
cuda_make NCCL_HOME="$nccl"
grep "^$fake/bin/nvcc .*comm_nccl" "$dir/make" | grep -q -- "-I$nccl/include"
check "NCCL_HOME's headers reach nvcc" $? "no nvcc line with -I$nccl/include"
grep -- "-o [^ ]*/piperun " "$dir/make" | grep -q -- "-L$nccl/lib -Wl,-rpath,$nccl/lib"
check "NCCL_HOME's library is linked with its rpath" $? "piperun's link line lacks -L/rpath $nccl/lib"
cp "$nccl/include/nccl.h" "$fake/include/"
cuda_make
grep -q "^$fake/bin/nvcc .*comm_nccl" "$dir/make" && ! grep -q -- "-I$nccl\|-L$nccl" "$dir/make"
check "nccl.h beside CUDA builds the backend without NCCL paths" $? "no nvcc line, or NCCL paths"
rm "$fake/include/nccl.h"
if [ ! -f /usr/include/nccl.h ]; then
	cuda_make
	grep -q 'the CUDA backend is left out: it needs .*nccl.h' "$dir/make" &&
		! grep -q "^$fake/bin/nvcc" "$dir/make"
	check "no nccl.h anywhere: a notice, no CUDA part" $? "no notice, or $(grep -c "^$fake/bin/nvcc" "$dir/make") nvcc commands"
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "testing deps skipped: not a Debian system"
	exit 0
fi

t "--list succeeds" 0 sh scripts/deps.sh --list
cp "$dir/out" "$dir/list"
has "--list names OpenBLAS" "$dir/list" '^libopenblas-dev  *required  *installed'
has "--list names cmocka" "$dir/list" '^libcmocka-dev  *required'
awk '$3 != "installed" && $3 != "missing" { bad = 1 } END { exit bad }' "$dir/list"
check "--list gives every package a state" $? "a row without installed/missing"
t "an unknown option is a usage error" 2 sh scripts/deps.sh --frobnicate

# The listed packages and what they depend on, two levels deep.
closure=$(awk '{ print $1 }' "$dir/list")
for level in 1 2; do
	more=$(for p in $closure; do
		dpkg-query -W -f='${Depends}, ${Pre-Depends}\n' "$p" 2>/dev/null
	done | tr ',|' '\n\n' | sed 's/([^)]*)//; s/:any//; s/ //g' | grep -v '^$')
	closure=$(printf '%s\n%s\n' "$closure" "$more" | sort -u)
done

# Every link line make would run, with -B so nothing is up to date.
make -s -n -B all $(ls "${BUILD:-build/rel}"/tests/test_* 2>/dev/null | grep -v '\.[od]$') 2>/dev/null |
	grep -E -- ' -o [^ ]*(bin|tests)/[^ .]+ ' >"$dir/links"
test -s "$dir/links"
check "link lines found" $? "make -n printed no link line"
grep -q -- '-lopenblas' "$dir/links"
check "some link line uses OpenBLAS" $? "no -lopenblas in the link lines"
for tool in pipecc pipesim; do
	! grep -E -- "-o [^ ]*/$tool " "$dir/links" | grep -q -- '-lopenblas'
	check "$tool does not link BLAS" $? "$tool links -lopenblas"
done

libs=$(tr ' ' '\n' <"$dir/links" | sed -n 's/^-l//p' | sort -u)
ldirs=$(tr ' ' '\n' <"$dir/links" | sed -n 's/^-L//p' | sort -u)
for l in $libs; do
	path=""
	for lib in "lib$l.so" "lib$l.a"; do
		for d in $ldirs; do
			[ -e "$d/$lib" ] && { path="$d/$lib"; break 2; }
		done
		f=$(cc -print-file-name="$lib")
		[ "$f" != "$lib" ] && { path=$(realpath -s "$f"); break; }
	done
	case "$path" in
	"") check "lib$l is found" 1 "the linker's search path has no lib$l.so or lib$l.a"; continue ;;
	"$CUDA_HOME"/* | "$(realpath "$CUDA_HOME")"/*) continue ;;
	esac
	# NCCL is CUDA's side too, wherever the Makefile found it (NCCL_HOME, libnccl-dev).
	[ "$l" = nccl ] && continue
	owners=$( (dpkg -S "$path"; dpkg -S "$(realpath "$path")"; dpkg -S "$(realpath "$path" | sed 's|^/usr||')") 2>/dev/null |
		sed 's/:.*//; s/, /\n/g' | sort -u)
	ok=1
	for o in $owners; do
		echo "$closure" | grep -qx "$o" && ok=0
	done
	check "-l$l comes from a listed package ($(echo $owners))" $ok "owned by '$(echo $owners)', not listed by scripts/deps.sh nor a dependency of one"
done

exit $((fails > 0))
