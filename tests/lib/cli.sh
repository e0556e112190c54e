# Shared by the CLI test scripts (sourced, with TOOL set to the name they print):
# a scratch folder $dir, a failure count $fails, three checks that print
# "testing TOOL NAME ... passed" or "... FAILED (why)", piperun's --check run on
# threads (runs) and under mpirun (mpi_check), readers of the tools' JSON (figs,
# mem_same, step_losses, json_steps), and programs and plans for tests (compile,
# small_gpt, small_llama).
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

# figs FILE FIELD: the JSON field's values, one per rank, on one line.
figs() {
	grep -o "\"$2\": -*[0-9]*" "$1" | sed 's/.*: //' | tr '\n' ' '
}

# mem_same NAME PLAN FIELDS [PIPERUN OPTIONS]: piperun's measured memory (2 steps, --json)
# equals pipesim --expand's prediction for every rank, in each of FIELDS (a field
# named the same in both, or RUN=SIM where the names differ).  piperun runs every world
# rank, so pipesim predicts each (--expand; a line plan's run lists only line 0's).
mem_same() {
	name=$1 plan=$2 fl=$3
	shift 3
	"$BIN/piperun" "$plan" --json --steps 2 "$@" >"$dir/run.json" 2>"$dir/err"
	"$BIN/pipesim" --expand --json "$plan" >"$dir/sim.json" 2>>"$dir/err"
	bad=""
	for f in $fl; do
		got=$(figs "$dir/run.json" "${f%%=*}") want=$(figs "$dir/sim.json" "${f#*=}")
		[ -n "$got" ] && [ "$got" = "$want" ] || bad="$bad ${f%%=*}: measured $got, predicted $want;"
	done
	check "memory of $name: measured == predicted" "$([ -z "$bad" ]; echo $?)" "$bad"
}

# step_losses FILE: "step loss" per line of a --json output.
step_losses() {
	sed 's/}, {/\n/g' "$1" | sed -n 's/.*"step": \([0-9]*\), "loss": \([0-9.e+-]*\).*/\1 \2/p'
}

# json_steps: the "steps" array of the --json output in $dir/out without its times, for
# comparing runs.
json_steps() {
	sed -n 's/.*"steps": \[\(.*\)\],$/\1/p' "$dir/out" | sed 's/"time_us": [0-9.]*//g'
}

# compile NAME...: pipecc $dir/NAME.pipe -o $dir/NAME.plan for each, saying which failed
# (the checks that use the plans then fail on their own).
compile() {
	for m; do
		"$BIN/pipecc" "$dir/$m.pipe" -o "$dir/$m.plan" || echo "pipecc $m failed"
	done
}

# small_gpt NAME MESH STAGES [STATEMENT]: a small GPT's program (d=32, 4 heads, MLP 64,
# 32 words, 2 sequences of 8 tokens, 4 microbatches, 1F1B) on `mesh MESH`, one block
# per stage, the embedding on the first and the head on the last; STATEMENT last.
small_gpt() {
	printf 'pipeline %s;\nmesh %s;\nmicrobatches 4;\ninput tokens 2x8 vocab=32;\n' "$1" "$2"
	printf 'block gpt {\n\tresidual { layernorm; attention heads=4 bias; }\n'
	printf '\tresidual { layernorm; mlp 64 bias; }\n}\nstage s0 { embed 32 positions; gpt; }\n'
	_s=1
	while [ "$_s" -lt $(($3 - 1)) ]; do
		echo "stage s$_s { gpt; }"
		_s=$((_s + 1))
	done
	printf 'stage s%d { gpt; layernorm; head; loss xent; }\nschedule 1f1b;\n' "$_s"
	[ -z "${4:-}" ] || echo "$4"
}

# small_llama NAME MESH ROPE: a small Llama's program (d=32, 4 heads over 2 key/value
# heads, SwiGLU 48, 64 words, 2 sequences of 16 tokens, 4 microbatches, ZB-H1, AdamW) on
# `mesh MESH` in two stages; ROPE is the attention's rotary option ("rope" or "rope flash").
small_llama() {
	printf 'pipeline %s;\nmesh %s;\nmicrobatches 4;\ninput tokens 2x16 vocab=64;\n' "$1" "$2"
	printf 'block layer {\n\tresidual { rmsnorm; attention heads=4 kv_heads=2 %s; }\n' "$3"
	printf '\tresidual { rmsnorm; swiglu 48; }\n}\nstage s0 { embed 32; layer; }\n'
	printf 'stage s1 { layer; rmsnorm; head; loss xent; }\nschedule zbh1;\noptimizer adamw lr=0.01;\n'
}
