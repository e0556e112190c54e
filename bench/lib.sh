# Sourced by the bench scripts that build a bench program outside the Makefile.
#
# bench_build NAME [DIR...]: builds build/rel/bench/NAME from bench/NAME.c and the
# release objects of plan/ and of each DIR (without its *_main.c), with $BIN/pipecc and
# $BIN/pipesim made first; exits the script when anything fails to build.
B=build/rel
bench_build() {
	name=$1
	shift
	objs=$(for d in "$@" plan; do ls "$d"/*.c | grep -v '_main\.c$'; done |
		sed "s|^|$B/|; s|\.c\$|.o|")
	# shellcheck disable=SC2086 # one word per object
	make -s $objs "$BIN/pipecc" "$BIN/pipesim" || exit 1
	mkdir -p "$B/bench"
	# shellcheck disable=SC2086
	${CC:-cc} -std=c11 -Wall -Wextra -Wpedantic -O2 -g -D_GNU_SOURCE -o "$B/bench/$name" \
		"bench/$name.c" $objs -lm || exit 1
}
