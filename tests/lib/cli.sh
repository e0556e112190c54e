# Shared by the CLI test scripts (sourced, with TOOL set to the name they print):
# a scratch folder $dir, a failure count $fails, three checks that print
# "testing TOOL NAME ... passed" or "... FAILED (why)", and piperun's --check run on
# threads (runs) and under mpirun (mpi_check).
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

# runs NAME PLAN [OPTIONS]: `piperun PLAN --check --steps 2 OPTIONS` exits 0 and its
# check line says ok.
runs() {
	what=$1 plan=$2
	shift 2
	t "--check $what" 0 "$BIN/piperun" "$plan" --check --steps 2 "$@"
	has "--check $what agrees" "$dir/out" "^check: .*: ok"
}

# mpi_check NAME NP PLAN [OPTIONS]: the same under `mpirun -np NP`.  Skipped under sanitizers
# (those builds test the threads backend) and without mpirun or piperun's MPI backend.
mpi_check() {
	what=$1 np=$2 plan=$3
	shift 3
	case $BIN in
	*san*)
		echo "testing $TOOL $what ... skipped: sanitizer builds test the threads backend"
		return 0
		;;
	esac
	if ! command -v mpirun >/dev/null 2>&1 || ! "$BIN/piperun" --version | grep -q mpi; then
		echo "testing $TOOL $what ... skipped: no mpirun or no MPI backend"
		return 0
	fi
	export OMPI_MCA_rmaps_base_oversubscribe=1
	t "$what" 0 timeout 300 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader \
		-np "$np" "$BIN/piperun" "$plan" --check --steps 2 "$@"
	has "$what: the check agrees" "$dir/out" "^check: .*: ok"
}
