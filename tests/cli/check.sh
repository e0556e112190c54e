#!/bin/sh
# piperun --check's bound on the command line (docs/runtime.md "--check and its bound";
# what passes and fails is tests/test_check.c's): the check line and --json say which
# bound held the run and how it was set (the floor with no shadow run; the factor times
# the shadow's distance plus the floor; --tolerance), a run beyond its bound exits 1
# naming the error and the bound, and --tolerance is checked before the run: a value
# outside (0, 1], or --tolerance without --check, is a usage error (exit 2).
: "${BIN:=bin}"
TOOL=check
. tests/lib/cli.sh

# A small GPT under AdamW at tp=2 (its error exceeds the floor) and tp=1 (bit for bit).
small_gpt g "pp=2 tp=2" 2 "optimizer adamw;" >"$dir/g.pipe"
sed 's/^mesh pp=2 tp=2;/mesh pp=2;/' "$dir/g.pipe" >"$dir/g1.pipe"
"$BIN/pipecc" "$dir/g.pipe" -o "$dir/g.plan" || exit 1
"$BIN/pipecc" "$dir/g1.pipe" -o "$dir/g1.plan" || exit 1
run() { "$BIN/piperun" "$@" --check --steps 2 -q; }

t "tp=1: --check" 0 run "$dir/g1.plan"
has "tp=1: within the floor, no shadow" "$dir/out" \
	'^check: .*: ok (bound 9.54e-07, the floor: no error above it, no shadow run)$'
t "tp=1: --check --json" 0 run "$dir/g1.plan" --json
has "tp=1: --json names the bound" "$dir/out" \
	'"weights": [0-9]*, "tolerance": 9.53674e-07, "bound": "noise", "noise_factor": 8, "floor": 9.53674e-07, "shadow": false, "noise": null}'

t "tp=2: --check" 0 run "$dir/g.plan"
has "tp=2: the bound is 8 x the shadow's distance + the floor" "$dir/out" \
	"^check: .*: ok (bound [0-9.e+-]* = 8 x the shadow reference's distance [0-9.e+-]* + 9.54e-07)$"
t "tp=2: --check --json" 0 run "$dir/g.plan" --json
has "tp=2: --json names the bound and the noise" "$dir/out" \
	'"tolerance": [0-9.e+-]*, "bound": "noise", "noise_factor": 8, "floor": 9.53674e-07, "shadow": true, "noise": [0-9.e+-]*}'
# the bound is 8 x the noise + 2^-20 (to the digits printed)
grep -o '"tolerance": [0-9.e+-]*, .*"noise": [0-9.e+-]*' "$dir/out" |
	sed 's/"tolerance": \([^,]*\),.*"noise": \(.*\)/\1 \2/' >"$dir/tol"
awk '{ want = 8 * $2 + 2 ^ -20; d = ($1 - want) / want; exit !($2 > 0 && d < 1e-4 && d > -1e-4) }' "$dir/tol"
check "tp=2: tolerance = 8 x noise + 2^-20" $? "$(cat "$dir/tol")"

# --tolerance: the bound by hand, no shadow
t "--tolerance 0.5 passes" 0 run "$dir/g.plan" --tolerance 0.5
has "--tolerance on the check line" "$dir/out" '^check: .*: ok (bound 0.5, --tolerance)$'
t "--tolerance --json" 0 run "$dir/g.plan" --tolerance 0.5 --json
has "--json: bound tolerance" "$dir/out" \
	'"tolerance": 0.5, "bound": "tolerance", "noise_factor": null, "floor": null, "shadow": false, "noise": null}'
t "--tolerance below the error fails" 1 run "$dir/g.plan" --tolerance 1e-9
has "... the check line says FAILED" "$dir/out" '^check: .*: FAILED (bound 1e-09, --tolerance)$'
has "... the error names the measure and the bound" "$dir/err" \
	"^piperun: error: --check: the pipelined run differs from the sequential one beyond the bound (weights: [0-9.e+-]* relative, bound 1e-09)$"

# usage errors, before the plan is read
for v in abc 0 -1 2 nan inf 1e-3x; do
	t "--tolerance $v is a usage error" 2 "$BIN/piperun" "$dir/missing.plan" --check --tolerance "$v"
	has "... saying what it wants" "$dir/err" \
		"^piperun: --tolerance: wants a number above 0 and at most 1, not '$v'$"
done
t "--tolerance without --check is a usage error" 2 "$BIN/piperun" "$dir/g.plan" --tolerance 0.1
has "... saying so" "$dir/err" "^piperun: --tolerance sets --check's bound; give --check too$"

[ "$fails" -eq 0 ]
