# Shared by the CLI test scripts (sourced, with TOOL set to the name they print):
# a scratch folder $dir, a failure count $fails, and three checks that print
# "testing TOOL NAME ... passed" or "... FAILED (why)".
: "${BIN:=bin}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0

# t NAME WANT COMMAND...: COMMAND exits with WANT ("nonzero": any failure); its output
# is left in $dir/out and $dir/err.
t() {
	name=$1 want=$2
	shift 2
	"$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	if { [ "$want" = nonzero ] && [ "$rc" -ne 0 ]; } || [ "$rc" = "$want" ]; then
		echo "testing $TOOL $name ... passed"
	else
		echo "testing $TOOL $name ... FAILED (exit $rc, wanted $want)"
		sed 's/^/  | /' "$dir/err" | head -20
		fails=$((fails + 1))
	fi
}

# has NAME FILE PATTERN: FILE has a line matching the grep PATTERN.
has() {
	if grep -q -- "$3" "$2"; then
		echo "testing $TOOL $1 ... passed"
	else
		echo "testing $TOOL $1 ... FAILED ('$3' not in output)"
		sed 's/^/  | /' "$2" | head -20
		fails=$((fails + 1))
	fi
}

# check NAME STATUS DETAIL: STATUS (0 or not) computed by the caller.
check() {
	if [ "$2" -eq 0 ]; then
		echo "testing $TOOL $1 ... passed"
	else
		echo "testing $TOOL $1 ... FAILED ($3)"
		fails=$((fails + 1))
	fi
}
