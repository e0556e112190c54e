#!/bin/sh
# pipesim from the command line: options and exit codes, the plan corpus in
# tests/plans (good, bad, malformed), every example under every schedule, unit-cost
# makespans through the compiler, and the JSON / trace / SVG outputs.
# BIN names the tools' folder (bin, or bin/san under SAN=1).
: "${BIN:=bin}"
SIM="$BIN/pipesim"
CC_="$BIN/pipecc"
T=$(mktemp -d /tmp/pipesim-cli.XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0

check() { # name, then a command that must succeed
	name=$1
	shift
	if "$@" >"$T/log" 2>&1; then
		echo "testing $name ... passed"
	else
		echo "testing $name ... FAILED"
		sed 's/^/    /' "$T/log" | head -40
		failures=$((failures + 1))
	fi
}

# expect CODE CMD...: runs CMD, its stdout in $T/out and stderr in $T/err; fails unless
# the exit status is CODE.
expect() {
	want=$1
	shift
	"$@" >"$T/out" 2>"$T/err"
	got=$?
	if [ "$got" -ne "$want" ]; then
		echo "exit $got, wanted $want: $*"
		cat "$T/err"
		return 1
	fi
}

has() { # FILE TEXT: the file contains the text (fixed string)
	grep -qF -- "$2" "$1" || { echo "no '$2' in $1:"; head -30 "$1"; return 1; }
}

json_ok() { # FILE: valid JSON (when python3 is here)
	command -v python3 >/dev/null 2>&1 || return 0
	python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$1" || { echo "bad JSON: $1"; return 1; }
}

options() {
	expect 0 "$SIM" --help && has "$T/out" "usage: pipesim" &&
		expect 0 "$SIM" --version && has "$T/out" "pipesim " &&
		expect 2 "$SIM" && has "$T/err" "no plan file given" &&
		expect 2 "$SIM" --model fast tests/plans/good/tiny2.plan && has "$T/err" "unknown model 'fast'" &&
		expect 2 "$SIM" --bogus tests/plans/good/tiny2.plan && has "$T/err" "unknown option '--bogus'" &&
		expect 2 "$SIM" --json --grid tests/plans/good/tiny2.plan && has "$T/err" "both write to standard output" &&
		expect 2 "$SIM" --no-record --svg x.svg tests/plans/good/tiny2.plan && has "$T/err" "--no-record" &&
		expect 2 "$SIM" --trace "$T/a" --svg "$T/a" tests/plans/good/tiny2.plan &&
		expect 2 "$SIM" --width 0 --grid tests/plans/good/tiny2.plan &&
		expect 2 "$SIM" --width 10 tests/plans/good/tiny2.plan &&
		expect 2 "$SIM" tests/plans/good/tiny2.plan tests/plans/good/skip3.plan &&
		expect 2 "$SIM" --trace && has "$T/err" "needs an argument" &&
		expect 1 "$SIM" "$T/nonexistent.plan" && has "$T/err" "cannot open"
}
check "pipesim options and usage errors" options

malformed() {
	for f in tests/plans/malformed/*.plan; do
		expect 1 "$SIM" "$f" || return 1
		grep -qE "^$f:[0-9]+: error: " "$T/err" || { echo "unlocated: $(cat "$T/err")"; return 1; }
	done
	expect 1 "$SIM" --json tests/plans/malformed/truncated.plan && has "$T/out" '"ok": false' &&
		json_ok "$T/out" &&
		expect 1 "$SIM" tests/plans/malformed/wrong_size.plan &&
		has "$T/err" "tests/plans/malformed/wrong_size.plan:35: error: bytes=64, but edge 0 carries 128 bytes" &&
		expect 1 "$SIM" tests/plans/malformed/no_routes.plan &&
		has "$T/err" "tests/plans/malformed/no_routes.plan:23: error: r= 0, but the plan declares none of these" &&
		expect 1 "$SIM" tests/plans/malformed/no_edges.plan &&
		has "$T/err" "tests/plans/malformed/no_edges.plan:20: error: e= 0, but the plan declares none of these"
}
check "pipesim malformed plans: located error, exit 1" malformed

verify_errors() {
	expect 1 "$SIM" tests/plans/bad/crossed_fifo.plan &&
		has "$T/err" "tests/plans/bad/crossed_fifo.plan:35: error: rank 0 op 1 (line 25) \`SEND act e=0 m=0" &&
		has "$T/err" "\`RECV act e=0 m=1 from=0 bytes=128 g=0 r=0\`: the microbatches differ" &&
		expect 1 "$SIM" tests/plans/bad/missing_send.plan && has "$T/err" ":38: error: rank 1 op 4 (line 38) \`RECV act e=0 m=1" &&
		has "$T/err" "has no matching SEND" &&
		expect 1 "$SIM" tests/plans/bad/missing_recv.plan && has "$T/err" "has no matching RECV on rank 1" &&
		expect 1 "$SIM" tests/plans/bad/compute_before_input.plan && has "$T/err" "\`F 1 0\`: runs before its input" &&
		expect 1 "$SIM" tests/plans/bad/w_before_b.plan && has "$T/err" "\`W 1 0\`: W before its B" &&
		expect 1 "$SIM" tests/plans/bad/allreduce_subset.plan && has "$T/err" "only part of its dp group" &&
		expect 1 "$SIM" --json tests/plans/bad/crossed_fifo.plan && has "$T/out" '"verdict": "invalid"' &&
		has "$T/out" '"error_line": 35' && json_ok "$T/out"
}
check "pipesim mismatches and dependency errors name both ops" verify_errors

deadlocks() {
	f=tests/plans/bad/head_to_head.plan
	expect 1 "$SIM" "$f" && has "$T/err" "$f: error: deadlock: 2 of 2 ranks can never finish" &&
		has "$T/err" "$f:27: note: blocked: rank 0 SEND act e=0 m=1 to=1 bytes=128 g=1 r=0 (line 27)" &&
		has "$T/err" "rank 0 SEND act e=0 m=1 to=1 bytes=128 g=1 r=0 (line 27) waits for rank 1 RECV act e=0 m=1 from=0 bytes=128 g=2 r=0 (line 39) which waits behind rank 1 SEND grad e=0 m=0 to=0 bytes=128 g=1 r=1 (line 38)" &&
		has "$T/err" "last steps before the stall" &&
		expect 0 "$SIM" --eager "$f" && has "$T/out" "eager sends" &&
		expect 1 "$SIM" --model overlap "$f" && has "$T/err" "deadlock" &&
		expect 0 "$SIM" --model overlap --eager "$f" &&
		expect 1 "$SIM" tests/plans/bad/cycle3.plan && has "$T/err" "wait-for cycle (3 edges)" &&
		expect 1 "$SIM" --eager tests/plans/bad/cycle3.plan &&
		expect 1 "$SIM" tests/plans/bad/dp_order.plan && has "$T/err" "wait-for cycle (4 edges)" &&
		has "$T/err" "rank 3 ALLREDUCE s=3 bytes=80 g=3 (line 104) waits for rank 2 ALLREDUCE s=3 bytes=80 g=5 (line 88) which waits behind rank 2 RECV grad e=1 m=0 from=0" &&
		expect 1 "$SIM" --json "$f" && has "$T/out" '"deadlock": true' && has "$T/out" '"cycle": [' &&
		json_ok "$T/out" &&
		expect 1 "$SIM" --trace "$T/d.json" --svg "$T/d.svg" "$f" && has "$T/d.json" "STUCK" &&
		json_ok "$T/d.json" && has "$T/d.svg" "stuck: SEND"
}
check "pipesim deadlocks: blocked ops, the cycle, eager-only verdicts" deadlocks

# A quiet run keeps no per-op times while it runs (nothing it prints reads them) and
# simulates a failing plan again with them: its failure report, grid included, is the
# one a run with the report prints.
quiet_failures() {
	for f in tests/plans/bad/head_to_head.plan tests/plans/bad/cycle3.plan \
		tests/plans/bad/dp_order.plan tests/plans/bad/tp_pp_cycle.plan; do
		expect 1 "$SIM" "$f" && mv "$T/err" "$T/loud" && expect 1 "$SIM" -q "$f" &&
			[ ! -s "$T/out" ] && has "$T/err" "last steps before the stall" &&
			cmp "$T/loud" "$T/err" || return 1
	done
}
check "pipesim -q: a failing plan's report is the full one" quiet_failures

good() {
	for f in tests/plans/good/*.plan; do
		for m in strict overlap; do
			expect 0 "$SIM" --model "$m" "$f" && has "$T/out" "ok:" || return 1
		done
	done
	expect 0 "$SIM" --json tests/plans/good/tiny2.plan && json_ok "$T/out" &&
		has "$T/out" '"ok": true' && has "$T/out" '"makespan": 9.000' &&
		has "$T/out" '"peak_activation_units": 2' &&
		expect 0 "$SIM" --grid tests/plans/good/tiny2.plan && has "$T/out" "rank 0 | F0 F1 .  .  B0 B0 .  B1 B1 |" &&
		expect 0 "$SIM" --quiet tests/plans/good/tiny2.plan && [ ! -s "$T/out" ] &&
		expect 0 "$SIM" --trace "$T/t.json" --svg "$T/t.svg" tests/plans/good/dp2x2.plan &&
		json_ok "$T/t.json" && has "$T/t.json" '"traceEvents"' && has "$T/t.svg" "</svg>" &&
		expect 0 "$SIM" --trace - tests/plans/good/tiny2.plan && has "$T/out" '"traceEvents"' &&
		expect 0 "$SIM" - <tests/plans/good/tiny2.plan && has "$T/out" "makespan"
}
check "pipesim good plans, JSON, grid, trace, SVG" good

examples() {
	[ -x "$CC_" ] || { echo "no $CC_"; return 1; }
	n=0
	# the example's own schedule, then every registered schedule by name (unknown
	# names and placements a schedule rejects are the compiler's business: skipped);
	# every registered schedule must have run on some example
	scheds=$("$CC_" --list-schedules) || return 1
	ran=" "
	for src in examples/*.pipe; do
		for sched in "" $scheds; do
			if ! "$CC_" "$src" ${sched:+-s "$sched"} -o "$T/x.plan" 2>"$T/cc"; then
				grep -q "error:" "$T/cc" && continue
				cat "$T/cc"
				return 1
			fi
			for m in strict overlap; do
				expect 0 "$SIM" --model "$m" --json "$T/x.plan" || { echo "$src ${sched:-default} $m"; return 1; }
				json_ok "$T/out" && has "$T/out" '"ok": true' || return 1
			done
			ran="$ran$(sed -n 's/^schedule \([^/]*\).*/\1/p' "$T/x.plan") "
			n=$((n + 1))
		done
	done
	for sched in $scheds; do
		case $ran in *" $sched "*) ;; *) echo "schedule $sched ran on no example"; return 1 ;; esac
	done
	[ "$n" -ge 2 ]
}
check "pipesim runs the compiler's plan for every example and schedule" examples

unit_costs() {
	for sched in gpipe 1f1b; do
		for p in 1 2 3 5 8; do
			for m in 1 4 9 16; do
				{
					printf 'pipeline u;\nmesh pp=%d;\nmicrobatches %d;\ninput 2x4;\n' "$p" "$m"
					i=0
					while [ $i -lt "$p" ]; do
						if [ $i -eq $((p - 1)) ]; then l="loss mse;"; else l="relu;"; fi
						printf 'stage s%d { linear 4; %s }\n' $i "$l"
						i=$((i + 1))
					done
					printf 'schedule %s;\ncost * f=1 b=1 w=1;\nlink ideal;\n' "$sched"
				} >"$T/u.pipe"
				"$CC_" "$T/u.pipe" -o "$T/u.plan" || return 1
				expect 0 "$SIM" --json "$T/u.plan" || return 1
				want="\"makespan\": $((3 * (m + p - 1))).000,"
				has "$T/out" "$want" || { echo "$sched p=$p m=$m"; return 1; }
			done
		done
	done
}
check "pipesim unit-cost makespan 3(m+p-1) for gpipe and 1f1b" unit_costs

# --threads 3 parses a regular file's op lines on workers (plan/read_par.c): every plan,
# good or refused, prints what one thread prints and exits alike; so do a compiled plan
# (with its checksum, and plain: format 1), the same with an op line far into it broken
# (a located error from the one-thread reader the workers fall back to), and a pipe.
same_threads() { # FILE: the run with --threads 3 is the run without
	"$SIM" "$1" >"$T/o1" 2>"$T/e1"
	r1=$?
	"$SIM" --threads 3 "$1" >"$T/o3" 2>"$T/e3"
	r3=$?
	[ "$r1" = "$r3" ] && cmp -s "$T/o1" "$T/o3" && cmp -s "$T/e1" "$T/e3" ||
		{ echo "$1: --threads 3 differs (exit $r1, $r3)"; diff "$T/e1" "$T/e3" | head; return 1; }
}
threads() {
	"$CC_" examples/interleaved.pipe -o "$T/il.plan" || return 1
	sed '1s/.*/pipecc-plan 1/' "$T/il.plan" >"$T/il1.plan"
	n=$(grep -n '^SEND' "$T/il1.plan" | tail -1 | cut -d: -f1)
	sed "${n}s/ g=/ g=x/" "$T/il1.plan" >"$T/ilbad.plan"
	sed "${n}s/ g=/ g=x/" "$T/il.plan" >"$T/ilsum.plan"
	for f in tests/plans/*/*.plan examples/tiny.pipe "$T/il.plan" "$T/il1.plan" "$T/ilbad.plan" \
		"$T/ilsum.plan"; do
		same_threads "$f" || return 1
	done
	expect 1 "$SIM" --threads 3 "$T/ilbad.plan" &&
		has "$T/err" "$T/ilbad.plan:$n: error: expected a number for g=" &&
		expect 1 "$SIM" --threads 3 "$T/ilsum.plan" && has "$T/err" "$T/ilsum.plan:$n: error: " &&
		expect 0 "$SIM" --threads 3 "$T/il.plan" && mv "$T/out" "$T/o1" &&
		expect 0 "$SIM" --threads 3 - <"$T/il.plan" && cmp "$T/o1" "$T/out" &&
		cat "$T/il.plan" | "$SIM" --threads 3 - >"$T/out" && cmp "$T/o1" "$T/out"
}
check "pipesim --threads 3: the same output and errors as one thread" threads

[ "$failures" -eq 0 ]
