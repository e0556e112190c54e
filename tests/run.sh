#!/bin/sh
# Runs every test: the cmocka binaries given as arguments, then the CLI scripts in
# tests/cli/ (each prints "testing X ... passed" lines and exits non-zero on failure).
# Ends with the failing lines again (a CI log's tail then shows what failed) and one
# summary line "N passed, N failed".  BIN names the tools' folder.
: "${BIN:=bin}"
export BIN
bad="/tmp/pipecc-failed.$$"
: >"$bad"
pass=0
fail=0
failed=""
for t in "$@"; do
	if "$t" >"/tmp/pipecc-test.$$" 2>&1; then
		pass=$((pass + 1))
		grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "/tmp/pipecc-test.$$" | sed "s|^|$(basename "$t"): |"
	else
		fail=$((fail + 1))
		failed="$failed $(basename "$t")"
		cat "/tmp/pipecc-test.$$"
		grep -E '^\[  FAILED  \]' "/tmp/pipecc-test.$$" | sed "s|^|$(basename "$t"): |" >>"$bad"
	fi
done
for s in tests/cli/*.sh; do
	[ -f "$s" ] || continue
	if sh "$s" >"/tmp/pipecc-test.$$" 2>&1; then
		pass=$((pass + 1))
		cat "/tmp/pipecc-test.$$"
	else
		fail=$((fail + 1))
		failed="$failed $(basename "$s")"
		cat "/tmp/pipecc-test.$$"
		grep -A20 -E ' \.\.\. FAILED' "/tmp/pipecc-test.$$" | grep -E ' \.\.\. FAILED|^  \| ' |
			sed "s|^|$(basename "$s"): |" >>"$bad"
	fi
done
rm -f "/tmp/pipecc-test.$$"
if [ -n "$failed" ]; then
	echo "what failed:"
	head -60 "$bad"
	echo "failed:$failed"
fi
rm -f "$bad"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
