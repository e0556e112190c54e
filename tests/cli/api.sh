#!/bin/sh
# libpipecc as a user gets it: `make install` into a scratch prefix, a small C program
# built against it with pkg-config alone (shared, then static), run on an example.  It
# compiles, simulates both models, writes the torch CSV, and prints what it got; its
# figures must be pipesim's and pipecc's for the same program, and a broken program must
# come back as located error objects, nothing printed by the library.
: "${BIN:=bin}"
TOOL=api
. tests/lib/cli.sh

san="" sanflags=""
# a sanitized library (SAN=1) needs its runtime linked into the program too
case $BIN in *san*) san="SAN=1" sanflags="-fsanitize=address,undefined" ;; esac
prefix="$dir/prefix"
t "make install PREFIX=<scratch>" 0 make -s --no-print-directory $san install PREFIX="$prefix"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
t "pkg-config knows pipecc" 0 pkg-config --exists pipecc
pkg-config --modversion pipecc >"$dir/ver"
has "... the VERSION file's" "$dir/ver" "^$(cat VERSION)\$"

cat >"$dir/use.c" <<'C'
#include <pipecc.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	PccDiags *ds;
	PccPlan *p = pcc_compile_file(argv[1], NULL, &ds);
	for (int i = 0; i < pcc_diags_count(ds); i++) {
		const PccDiag *d = pcc_diag(ds, i);
		printf("diag %s:%lld:%d: %s\n", d->file, (long long)d->line, d->col, d->message);
	}
	pcc_diags_free(ds);
	if (!p)
		return 1;
	for (int m = 0; m < 2; m++) {
		PccSimResult r;
		if (pcc_simulate(p, (PccModel)m, &r, NULL))
			return 1;
		printf("makespan %d %lld\n", m, (long long)r.makespan_ns);
		pcc_sim_free(&r);
	}
	char *csv;
	size_t len;
	if (pcc_emit_torch_csv(p, 0, &csv, &len, NULL))
		return 1;
	fwrite(csv, 1, len, stdout);
	pcc_free(csv);
	pcc_plan_free(p);
	printf("version %s\n", pcc_version());
	return 0;
}
C
cc=${CC:-cc}
# shellcheck disable=SC2046
t "a program builds against the shared library" 0 \
	$cc $sanflags -o "$dir/use" "$dir/use.c" $(pkg-config --cflags --libs pipecc)
t "... and runs from the prefix" 0 env LD_LIBRARY_PATH="$prefix/lib" "$dir/use" examples/mlp4.pipe
cp "$dir/out" "$dir/use.out"
has "... reporting the library's version" "$dir/use.out" "^version $(cat VERSION)\$"
[ ! -s "$dir/err" ]
check "... printing nothing to stderr" $? "$(head -3 "$dir/err")"
"$BIN/pipecc" examples/mlp4.pipe -o "$dir/mlp4.plan" || exit 1
for m in 0 1; do
	model=$([ $m -eq 0 ] && echo strict || echo overlap)
	want=$("$BIN/pipesim" "$dir/mlp4.plan" --model "$model" --json |
		sed -n 's/^  "makespan": \([0-9.]*\),/\1/p')
	got=$(sed -n "s/^makespan $m //p" "$dir/use.out")
	# pipesim's JSON gives microseconds to the nanosecond (plan_json_us)
	awk -v g="$got" -v w="$want" 'BEGIN { exit !(w != "" && g / 1000 == w + 0) }'
	check "the $model makespan is pipesim's ($want us)" $? "library $got ns"
done
"$BIN/pipecc" examples/mlp4.pipe --emit torch-csv -o "$dir/want.csv" || exit 1
sed -e '/^makespan /d' -e '/^version /d' "$dir/use.out" >"$dir/got.csv"
cmp -s "$dir/got.csv" "$dir/want.csv"
check "the CSV is pipecc --emit torch-csv's" $? "$(diff "$dir/got.csv" "$dir/want.csv" | head -3)"

printf 'pipeline two;\nmesh pp=2;\nmicrobatches 4;\ninput 4x8;\nstage s0 { lineer 8; }\n' \
	>"$dir/bad.pipe"
t "a broken program fails" 1 env LD_LIBRARY_PATH="$prefix/lib" "$dir/use" "$dir/bad.pipe"
has "... with a located error object" "$dir/out" "^diag $dir/bad.pipe:5:12: unknown layer 'lineer'"
[ ! -s "$dir/err" ]
check "... and nothing printed by the library" $? "$(head -3 "$dir/err")"

# shellcheck disable=SC2046
t "the program builds against the static library" 0 \
	$cc $sanflags -o "$dir/use_static" "$dir/use.c" "$prefix/lib/libpipecc.a" \
	$(pkg-config --cflags --libs-only-other --static pipecc) \
	$(pkg-config --libs-only-l --static pipecc | sed 's/-lpipecc//')
t "... and runs alike" 0 "$dir/use_static" examples/mlp4.pipe
cmp -s "$dir/out" "$dir/use.out"
check "... with the same output" $? "$(diff "$dir/out" "$dir/use.out" | head -3)"

t "make uninstall PREFIX=<scratch>" 0 make -s --no-print-directory $san uninstall PREFIX="$prefix"
[ ! -e "$prefix" ]
check "... leaves no file nor folder" $? "$(find "$prefix" 2>/dev/null | head -5)"

[ "$fails" -eq 0 ]
