#!/bin/sh
# The runtime's shape (docs/runtime.md, "Architecture"): no cycle among its files,
# neither through #include nor through the symbols their objects define and use
# ($BUILD/runtime/*.o, as `make` builds them).  Sizes are tests/cli/layout.sh's.
: "${BIN:=bin}"
: "${BUILD:=build/rel}"
TOOL=runtime
. tests/lib/cli.sh

# Includes: "x.h" edges between runtime files; tsort fails on a cycle.
for f in runtime/*.c runtime/*.cu runtime/*.h; do
	sed -n 's/^#include "\([a-z_]*\.h\)".*/\1/p' "$f" | while read -r h; do
		echo "$(basename "$f") $h"
	done
done >"$dir/includes"
tsort "$dir/includes" >/dev/null 2>"$dir/err"
check "no #include cycle in runtime/" "$?" "$(cat "$dir/err")"

# Symbols: file A uses a symbol file B defines -> edge A B (the tool, piperun.c and
# piperun_main.c, sits above the world and may call anything public).
if ls "$BUILD"/runtime/*.o >/dev/null 2>&1 && command -v nm >/dev/null 2>&1; then
	for o in "$BUILD"/runtime/*.o; do
		f=$(basename "$o" .o)
		[ -f "runtime/$f.c" ] || [ -f "runtime/$f.cu" ] || continue # a stale object
		nm --defined-only "$o" | awk -v f="$f" '$2 ~ /^[TDRBW]$/ { print $3, f }' >>"$dir/defs"
		nm -u "$o" | awk -v f="$f" '{ print $2, f }' >>"$dir/uses"
	done
	sort -o "$dir/defs" "$dir/defs"
	sort -o "$dir/uses" "$dir/uses"
	join "$dir/uses" "$dir/defs" | awk '$2 != $3 && $2 !~ /_main$/ && $2 != "piperun" { print $2, $3 }' |
		sort -u >"$dir/calls"
	check "the file graph has edges (the objects were read)" \
		"$([ "$(wc -l <"$dir/calls")" -gt 10 ]; echo $?)" "$(wc -l <"$dir/calls") edges"
	tsort "$dir/calls" >/dev/null 2>"$dir/err"
	check "no cycle among runtime files' symbols" "$?" "$(cat "$dir/err")"
	has "the interpreter calls the model, not back" "$dir/calls" "^interp model$"
	check "nothing below the world calls run.c" "$(grep -c " run$" "$dir/calls")" \
		"$(grep " run$" "$dir/calls" | tr '\n' ' ')"
else
	echo "testing $TOOL file graph by symbols ... skipped: no objects under $BUILD/runtime"
fi

[ "$fails" -eq 0 ]
