#!/bin/sh
# Faults every tool must survive with a clear message: out of memory (an address-space
# limit with `ulimit -v`), interrupted writes (SIGINT during a compile), outputs that
# cannot be written.  ASan reserves terabytes of address space, so the ulimit tests are
# skipped under SAN=1 with a notice.
: "${BIN:=bin}"
TOOL=reliability
. tests/lib/cli.sh

# A program of pp stages on pp ranks with m microbatches.
program() {
	printf 'pipeline big;\nmesh pp=%d;\nmicrobatches %d;\ninput 2x4;\n' "$1" "$2"
	i=0
	while [ "$i" -lt "$1" ]; do
		if [ "$i" -eq $(($1 - 1)) ]; then
			printf 'stage s%d { linear 4; loss mse; }\n' "$i"
		else
			printf 'stage s%d { linear 4; }\n' "$i"
		fi
		i=$((i + 1))
	done
	printf 'schedule 1f1b;\ncost * f=1 b=1 w=1;\nlink ideal;\n'
}
program 8 20000 >"$dir/mid.pipe"
"$BIN/pipecc" "$dir/mid.pipe" -o "$dir/mid.plan" || fails=$((fails + 1))

# limited KB CMD...: CMD under an address-space limit of KB kilobytes.  OpenBLAS's
# own threads retry their buffers forever when mmap fails, so it gets one thread.
limited() {
	kb=$1
	shift
	(ulimit -v "$kb" && OPENBLAS_NUM_THREADS=1 exec "$@")
}

if ldd "$BIN/pipecc" 2>/dev/null | grep -q asan; then
	echo "testing $TOOL out of memory ... skipped (ASan and ulimit -v do not mix)"
else
	for tool in pipecc pipesim piperun; do
		case $tool in
		pipecc) set -- "$BIN/pipecc" "$dir/mid.pipe" -o "$dir/oom.plan" ;;
		pipesim) set -- "$BIN/pipesim" "$dir/mid.plan" ;;
		piperun) set -- "$BIN/piperun" "$dir/mid.plan" --check ;;
		esac
		# The smallest limit, in steps of 30 MB, under which the tool starts at all: piperun
		# maps OpenBLAS (and cuBLAS when built with CUDA) before main.
		kb=30000
		while :; do
			limited "$kb" "$@" >/dev/null 2>"$dir/err"
			grep -q "error while loading shared libraries" "$dir/err" || break
			[ "$kb" -lt 4000000 ] || break
			kb=$((kb + 30000))
		done
		t "$tool out of memory exits 1" 1 limited "$kb" "$@"
		has "$tool out of memory says what the plan needs" "$dir/err" \
			"out of memory: the plan needs [0-9.]* M ops (about [0-9.]* [kMG]B); allocating .* failed"
		if grep -q "internal error\|Aborted" "$dir/err"; then
			check "$tool out of memory is no crash" 1 "$(head -1 "$dir/err")"
		else
			check "$tool out of memory is no crash" 0 ""
		fi
	done
	[ ! -e "$dir/oom.plan" ] && ! ls "$dir"/oom.plan.tmp* >/dev/null 2>&1
	check "pipecc out of memory leaves no output" $? "oom.plan or its temporary file exists"
fi


# An interrupted compile: the signal removes the temporary file, the target is neither
# created nor changed, and the exit status says killed by that signal.  A background
# job of a script starts with SIGINT ignored, so env --default-signal gives it back.
program 64 40000 >"$dir/huge.pipe"
for sig in INT TERM; do
	rm -f "$dir/huge.plan"
	[ "$sig" = TERM ] && echo "old plan" >"$dir/huge.plan"
	env --default-signal=INT "$BIN/pipecc" "$dir/huge.pipe" -o "$dir/huge.plan" 2>"$dir/err" &
	pid=$!
	n=0
	while ! ls "$dir"/huge.plan.tmp* >/dev/null 2>&1 && [ "$n" -lt 600 ] && kill -0 "$pid" 2>/dev/null; do
		sleep 0.05
		n=$((n + 1))
	done
	kill -"$sig" "$pid" 2>/dev/null
	wait "$pid"
	rc=$?
	want=130
	[ "$sig" = TERM ] && want=143
	[ "$rc" -eq "$want" ]
	check "SIG$sig ends pipecc by the signal" $? "exit $rc, wanted $want (too fast a compile?)"
	! ls "$dir"/huge.plan.tmp* >/dev/null 2>&1
	check "SIG$sig leaves no temporary file" $? "$(ls "$dir"/huge.plan.tmp* 2>/dev/null)"
	if [ "$sig" = TERM ]; then
		[ "$(cat "$dir/huge.plan")" = "old plan" ]
		check "SIG$sig leaves the old target as it was" $? "huge.plan changed"
	else
		[ ! -e "$dir/huge.plan" ]
		check "SIG$sig creates no target" $? "huge.plan exists"
	fi
done

# Outputs that cannot be written are named with the real reason, before the work.
if [ -e /proc/version ]; then
	t "-o /proc/version is an error" 1 "$BIN/pipecc" examples/tiny.pipe -o /proc/version
	has "-o /proc/version gives the reason" "$dir/err" \
		"cannot write /proc/version: it is not a regular file we can replace: its folder takes no new files"
	t "-o /proc/new is an error" 1 "$BIN/pipecc" examples/tiny.pipe -o /proc/new.plan
	has "-o /proc/new gives the reason" "$dir/err" "cannot write /proc/new.plan: its folder takes no new files"
fi
mkdir "$dir/ro" && chmod 555 "$dir/ro"
if [ "$(id -u)" -ne 0 ]; then
	t "read-only folder is an error" 1 "$BIN/pipecc" examples/tiny.pipe -o "$dir/ro/x.plan"
	has "read-only folder gives the reason" "$dir/err" "Permission denied"
fi


# The plan checksum: a plan changed after pipecc wrote it is refused by both readers
# at line 1; a truncated plan gets a located error; hand-written version-1 plans (no
# checksum) still read.
"$BIN/pipecc" examples/tiny.pipe -o "$dir/tiny.plan"
sed 's/^F 0 1 /F 0 2 /' "$dir/tiny.plan" >"$dir/edited.plan"
! cmp -s "$dir/tiny.plan" "$dir/edited.plan"
check "the hand edit changed the plan" $? "sed changed nothing"
for tool in pipesim piperun; do
	extra=
	[ "$tool" = piperun ] && extra=--check
	t "$tool refuses an edited plan" 1 "$BIN/$tool" "$dir/edited.plan" $extra
	has "$tool names the checksum mismatch at line 1" "$dir/err" \
		"edited.plan:1: error: checksum mismatch: the plan was changed after pipecc wrote it"
	head -c 800 "$dir/tiny.plan" >"$dir/cut.plan"
	t "$tool refuses a truncated plan" 1 "$BIN/$tool" "$dir/cut.plan" $extra
	has "$tool locates the truncation" "$dir/err" "cut.plan:[0-9]*: error: .*truncated"
done
t "a version-1 plan without checksum still reads" 0 "$BIN/pipesim" tests/plans/good/tiny2.plan
# A plan pipecc wrote with the older FNV-1a checksum (before lanes4 and blocks) still reads, checked:
# the same run as the new plan, and a changed byte is refused at line 1 all the same.
t "an fnv1a plan still reads" 0 "$BIN/pipesim" tests/plans/good/tiny-fnv1a.plan
has "the fnv1a plan runs as the new one" "$dir/out" "makespan   15 us"
sed 's/^F 0 1 /F 0 2 /' tests/plans/good/tiny-fnv1a.plan >"$dir/edited-fnv.plan"
t "an edited fnv1a plan is refused" 1 "$BIN/pipesim" "$dir/edited-fnv.plan"
has "the fnv1a mismatch is named at line 1" "$dir/err" "edited-fnv.plan:1: error: checksum mismatch"


# A plan that cannot be read is said to be so, not reported as an empty or truncated one
# (a read error mid-file: tests/test_binary.c); an empty file names the first line wanted.
mkdir "$dir/adir"
for tool in pipesim piperun; do
	t "$tool on a directory exits 1" 1 "$BIN/$tool" "$dir/adir"
	has "$tool on a directory says it cannot read it" "$dir/err" \
		"adir: error: cannot read: Is a directory$"
	t "$tool on a directory as standard input exits 1" 1 sh -c "exec \"\$0\" - <\"\$1\"" \
		"$BIN/$tool" "$dir/adir"
	has "$tool on a directory as standard input says so" "$dir/err" \
		"^<stdin>: error: cannot read: Is a directory$"
done
: >"$dir/empty.plan"
t "pipesim on an empty file exits 1" 1 "$BIN/pipesim" "$dir/empty.plan"
has "the empty file's error names the first line of this format" "$dir/err" \
	"empty.plan:1: error: unexpected end of file: expected 'pipecc-plan 3'$"

# An output that names an input (however it is spelled, or through a link) or another
# output is a usage error before any work, and the files are left as they were.
cp examples/tiny.pipe "$dir/src.pipe"
cp "$dir/src.pipe" "$dir/src.orig"
ln -s src.pipe "$dir/link.pipe"
t "pipecc -o its own source exits 2" 2 "$BIN/pipecc" "$dir/src.pipe" -o "$dir/src.pipe"
has "pipecc -o its own source says so" "$dir/err" \
	"^pipecc: --output would write over the input .*/src.pipe$"
t "pipecc -o its source spelled another way exits 2" 2 "$BIN/pipecc" "$dir/src.pipe" \
	-o "$dir/./src.pipe"
t "pipecc -o the file its input links to exits 2" 2 "$BIN/pipecc" "$dir/link.pipe" \
	-o "$dir/src.pipe"
cmp -s "$dir/src.pipe" "$dir/src.orig"
check "the source is left as it was" $? "src.pipe changed"
"$BIN/pipecc" "$dir/src.pipe" --emit torch-csv -o "$dir/order.csv" || fails=$((fails + 1))
t "pipecc -o its --from-torch-csv file exits 2" 2 "$BIN/pipecc" "$dir/src.pipe" \
	--from-torch-csv "$dir/order.csv" -o "$dir/order.csv"
has "pipecc -o its --from-torch-csv file names the option" "$dir/err" \
	"would write over the input .*/order.csv of --from-torch-csv$"
"$BIN/pipecc" "$dir/src.pipe" -o "$dir/src.plan" || fails=$((fails + 1))
cp "$dir/src.plan" "$dir/src.plan.orig"
t "pipecc PLAN -o the same PLAN exits 2" 2 "$BIN/pipecc" "$dir/src.plan" -o "$dir/src.plan"
for o in --trace --svg; do
	t "pipesim $o over its plan exits 2" 2 "$BIN/pipesim" "$dir/src.plan" "$o" "$dir/src.plan"
	has "pipesim $o over its plan says so" "$dir/err" \
		"^pipesim: $o would write over the input .*/src.plan$"
done
t "piperun --trace over its plan exits 2" 2 "$BIN/piperun" "$dir/src.plan" --trace "$dir/src.plan"
cmp -s "$dir/src.plan" "$dir/src.plan.orig"
check "the plan is left as it was" $? "src.plan changed"
t "pipesim --trace and --svg naming one new file two ways exit 2" 2 "$BIN/pipesim" \
	"$dir/src.plan" --trace "$dir/pic" --svg "$dir/./pic"
has "pipesim's two outputs naming one file are named" "$dir/err" \
	"^pipesim: --trace and --svg both write .*/pic$"
[ ! -e "$dir/pic" ]
check "nothing was written for them" $? "$dir/pic exists"
t "pipesim --trace and --svg both to /dev/null still run" 0 "$BIN/pipesim" "$dir/src.plan" \
	--trace /dev/null --svg /dev/null
t "pipecc over the plan it wrote before still compiles" 0 "$BIN/pipecc" "$dir/src.pipe" \
	-o "$dir/src.plan"

# A run that cannot fit in memory is refused before any rank allocates, with what it
# needs and what the host has (runtime/hostmem.c): 65536 microbatches of a 1.1 TB
# output, 72 PB.  --no-memory-check runs it anyway, into a failed allocation.
printf 'pipeline vast;\nmesh pp=2;\nmicrobatches 65536;\ninput 4194304x4;\n%s\n%s\n%s\n' \
	'stage s0 { linear 65536; }' 'stage s1 { linear 4; loss mse; }' 'schedule gpipe;' \
	>"$dir/vast.pipe"
"$BIN/pipecc" "$dir/vast.pipe" -o "$dir/vast.plan" || fails=$((fails + 1))
t "piperun refuses a run bigger than the host" 1 "$BIN/piperun" "$dir/vast.plan"
has "the refusal says what the run needs and what the host has" "$dir/err" \
	"^piperun: error: the run needs at least 72.1 PB on host .* (its 2 ranks' peaks together, as pipesim's memory table gives them), more than the [0-9.]* [kMGT]*B "
has "the refusal names the way past it" "$dir/err" "or give --no-memory-check to try anyway$"
t "--no-memory-check runs it into a failed allocation" 1 \
	env ASAN_OPTIONS=allocator_may_return_null=1 "$BIN/piperun" "$dir/vast.plan" --no-memory-check
has "--no-memory-check skips the check" "$dir/err" "^piperun: error: rank [01]: out of memory$"
if ! ldd "$BIN/piperun" 2>/dev/null | grep -q asan; then
	# The process's own limit: ulimit -d below the 4 ranks' 684 MB, above what piperun
	# needs to start; and one above the ranks' but below --check's reference (1.01 GB).
	printf 'pipeline mid;\nmesh pp=4;\nmicrobatches 16;\ninput 512x2048;\n%s\n%s\n%s\n%s\n%s\n' \
		'stage s0 { linear 2048; relu; }' 'stage s1 { linear 2048; gelu; }' \
		'stage s2 { linear 2048; relu; }' 'stage s3 { linear 2048; loss mse; }' \
		'schedule gpipe;' >"$dir/mid4.pipe"
	"$BIN/pipecc" "$dir/mid4.pipe" -o "$dir/mid4.plan" || fails=$((fails + 1))
	t "ulimit -d below the ranks' peaks is refused" 1 sh -c \
		'ulimit -d 500000 && OPENBLAS_NUM_THREADS=1 exec "$0" "$1" --steps 1' "$BIN/piperun" "$dir/mid4.plan"
	has "the refusal names the data limit" "$dir/err" \
		"^piperun: error: the run needs at least 684 MB in this process (its ranks' peaks), more than the 512 MB allowed by the data limit (ulimit -d)"
	t "ulimit -d below --check's reference is refused" 1 sh -c \
		'ulimit -d 900000 && OPENBLAS_NUM_THREADS=1 exec "$0" "$1" --steps 1 --check' "$BIN/piperun" "$dir/mid4.plan"
	has "the refusal names the reference" "$dir/err" \
		"^piperun: error: the run needs at least 1.01 GB in this process (the --check reference), more than the 922 MB allowed by the data limit"

	# The plan tools under a data limit: pipecc refuses a program whose ops alone are
	# more before it schedules (64 stages x 2^20 microbatches, at least 398 M ops),
	# and --expand, pipesim --expand and piperun (which expand a line plan to every
	# rank) refuse an expansion beyond it (1024 lines of 82 K ops) at once.
	program 64 1048576 >"$dir/long.pipe"
	t "pipecc refuses a plan beyond ulimit -d" 1 sh -c \
		'ulimit -d 300000 && exec "$0" "$1" -o "$2"' "$BIN/pipecc" "$dir/long.pipe" "$dir/long.plan"
	has "pipecc names the plan's ops and the limit" "$dir/err" \
		"^pipecc: out of memory: the plan needs 398.5 M ops (about 9.56 GB): more than the 307 MB allowed by the data limit (ulimit -d)$"
	[ ! -e "$dir/long.plan" ]
	check "pipecc writes nothing then" $? "long.plan exists"
	sed 's/^schedule 1f1b;/schedule auto;/' "$dir/long.pipe" >"$dir/long-auto.pipe"
	t "schedule auto refuses it before weighing candidates" 1 sh -c \
		'ulimit -d 300000 && exec "$0" "$1" -o "$2"' "$BIN/pipecc" "$dir/long-auto.pipe" "$dir/long.plan"
	has "schedule auto names the plan's ops and the limit" "$dir/err" \
		"^pipecc: out of memory: the plan needs 398.5 M ops (about 9.56 GB): more than the 307 MB allowed by the data limit (ulimit -d)$"
	program 4 4096 | sed 's/^mesh pp=4;/mesh pp=4 dp=1024;/' >"$dir/lines.pipe"
	"$BIN/pipecc" "$dir/lines.pipe" -o "$dir/lines.plan" || fails=$((fails + 1))
	t "pipecc --expand refuses an expansion beyond ulimit -d" 1 sh -c \
		'ulimit -d 300000 && exec "$0" "$1" --expand -o "$2"' "$BIN/pipecc" "$dir/lines.pipe" "$dir/x.plan"
	has "pipecc --expand names the expanded ops and the limit" "$dir/err" \
		"^pipecc: out of memory: the plan needs 83.9 M ops (about 2.01 GB): more than the 307 MB allowed by the data limit (ulimit -d)$"
	for tool in pipesim piperun; do
		extra=--expand
		[ "$tool" = piperun ] && extra=--steps=1
		t "$tool $extra refuses an expansion beyond ulimit -d" 1 sh -c \
			'ulimit -d 600000 && OPENBLAS_NUM_THREADS=1 exec "$0" "$1" "$2"' "$BIN/$tool" \
			"$dir/lines.plan" $extra
		has "$tool names the expansion and the limit" "$dir/err" \
			"out of memory: allocating 2.01 GB failed: more than the 614 MB allowed by the data limit (ulimit -d)$"
	done
else
	echo "testing $TOOL ulimit -d below a run's need ... skipped (ASan and ulimit do not mix)"
fi

# A rank thread stuck in a kernel (PIPERUN_FAULT, runtime/fault.c: rank 1 sleeps for
# good in its first forward op and ignores aborts): the watchdog fires after --timeout,
# the threads launcher leaves the stuck thread behind after its grace, and piperun
# exits 1 naming the stuck op.  `timeout 60` only guards against a hang (exit 124).
op=$(awk '/^rank 1 /{on=1; i=-1; next} /^rank /{on=0} on && /^peer/{next}
	on {i++; if ($1 == "F") {print i; exit}}' "$dir/tiny.plan")
t "threads: a rank stuck in its compute op ends by the watchdog" 1 \
	env PIPERUN_FAULT="stall:rank=1:op=$op" timeout 30 "$BIN/piperun" "$dir/tiny.plan" \
	--backend threads --timeout 2
has "threads: the watchdog names the stall" "$dir/err" \
	"^piperun: error: no rank made progress for 2 s (deadlock?); blocked ops:"
has "threads: the stuck rank's forward op is named" "$dir/err" \
	"tiny.plan:[0-9]*: note: rank 1 blocked in step 1 at 'F 1 0'"
has "threads: the stuck thread is left behind" "$dir/err" \
	"^piperun: note: 1 rank thread did not return within 2 s of the abort (stuck in an op)"
# A rank whose op returns only after the abort (hold: it waits in its forward op until
# the watchdog aborts the world, then goes on, as an allocation that succeeds once the
# other ranks freed their memory) is reported in the op it waited in, not the next one.
t "threads: a rank held in its compute op ends by the watchdog" 1 \
	env PIPERUN_FAULT="hold:rank=1:op=$op" timeout 30 "$BIN/piperun" "$dir/tiny.plan" \
	--backend threads --timeout 2
has "threads: the held rank is reported in the op it waited in" "$dir/err" \
	"tiny.plan:[0-9]*: note: rank 1 blocked in step 1 at 'F 1 0'"
! grep -q "did not return" "$dir/err"
check "threads: the held rank's thread returned" $? "$(grep "did not return" "$dir/err")"
t "a bad PIPERUN_FAULT is an error" 1 env PIPERUN_FAULT=stall:rank=7:op=1 \
	"$BIN/piperun" "$dir/tiny.plan" --backend threads
has "a bad PIPERUN_FAULT is named" "$dir/err" \
	"PIPERUN_FAULT='stall:rank=7:op=1': expected stall:rank=R:op=N\[:step=S\], hold:rank=R:op=N\[:step=S\], stall-open:rank=R or stall-save:rank=R\[:step=S\], R a rank of the plan (0 to 1)"

# Inputs that never end: /dev/zero as a plan, a program or a CSV order, and a binary
# plan whose text part claims a terabyte over endless zeros.  Each tool read on, filling
# the machine's memory until the kernel ended it (exit 137 after 22-55 s); now each stops
# at what cannot be valid (a plan line of 1 MiB without a newline, a NUL byte outside a
# comment, a NUL in the text part) with a located error.
for tool in pipesim piperun; do
	t "$tool /dev/zero ends" 1 timeout 30 "$BIN/$tool" /dev/zero
	has "... at line 1, saying why" "$dir/err" \
		"/dev/zero:1: error: line longer than 1048576 bytes without a newline: not a plan"
done
t "pipecc /dev/zero ends" 1 timeout 30 "$BIN/pipecc" /dev/zero -o "$dir/zero.plan"
has "... at its first byte" "$dir/err" "/dev/zero:1:1: error: stray byte 0x00"
printf 'pipeline z; mesh pp=2; microbatches 2; input 2x4;\nstage a { linear 4; }\nstage b { linear 4; loss mse; }\nschedule csv "/dev/zero";\n' >"$dir/zero.pipe"
t "a CSV order from /dev/zero ends" 1 timeout 30 "$BIN/pipecc" "$dir/zero.pipe" -o "$dir/zero.plan"
has "... at its first cell" "$dir/err" "/dev/zero:1:1: error: cannot read cell"
{ printf 'pipecc-plan 1\npipeline '; head -c 2000000 /dev/zero | tr '\0' a; echo; } >"$dir/long.plan"
t "a plan line of 2 MB is refused" 1 "$BIN/pipesim" "$dir/long.plan"
has "... at its line" "$dir/err" "long.plan:2: error: line longer than 1048576 bytes"
"$BIN/pipecc" examples/tiny.pipe --plan-format=binary -o "$dir/tiny.bplan"
head -c 12 "$dir/tiny.bplan" >"$dir/head.bin"
printf '\000\000\000\000\000\001\000\000' >>"$dir/head.bin" # a text part of 2^40 bytes
t "a binary plan whose text part never ends is refused" 1 sh -c \
	"cat '$dir/head.bin' /dev/zero | timeout 30 '$BIN/pipesim' -"
has "... at the first NUL" "$dir/err" "<stdin>: byte 20: error: NUL byte in the text part"

[ "$fails" -eq 0 ]
