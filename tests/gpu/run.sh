#!/bin/sh
# GPU checks and figures for piperun's cuda backend (docs/gpu.md).  Not part of
# `make check`: run it by hand, or from a job, on a machine with NVIDIA GPUs:
#
#   sh tests/gpu/run.sh            # builds, checks, prints figures; < 5 min on one H200
#   sh tests/gpu/run.sh --dry-run  # the same steps on the threads backend, without a
#                                  # GPU, to test this script itself
#
# Checks (each prints "testing X ... passed|FAILED"; any failure makes the exit status 1):
#   - the build has the cuda backend;
#   - the cmocka tests of the backend pass without skipping what one GPU can run
#     (kernels against cpu.c, a one-rank NCCL communicator's grouped self send/receive
#     and all-reduce through the backend, an abort ending a hung receive, plans);
#   - one GPU holds every stage: pp=1 plans of 4 stages (gpipe, interleaved,
#     loopedbfs), every example with `mesh pp=1` and `placement [0, 0, ...]` that pipecc
#     takes, and V schedules (zbv, dualpipev) with both stages on one rank (a linear
#     V and examples/gpt-tiny.pipe merged into two stages), gpt-tiny recomputing (full
#     and selective), all --check'ed against the CPU reference, f32 and bf16; a
#     checkpoint of the gpt-tiny V saved and resumed on the GPU, and on cpu threads;
#   - with 2 or more GPUs: the examples at their own mesh when it fits (one process, a
#     thread per GPU), under mpirun when there is one, and a deadlock ended by the
#     watchdog with every rank's blocked op.
# Figures (name, value, unit): host overhead per op, GEMM TFLOP/s of the stage layers
# against cuBLAS alone for the same shapes (a bench program built here with nvcc), and
# the measured step against `pipesim --model overlap` with `--calibrate`d costs.
#
# Without a GPU it prints "skipped: no GPU" and exits 0, so CI can run it as a smoke test.
set -u
cd "$(dirname "$0")/../.." || exit 1
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
BIN=bin
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}

ngpu=0
if command -v nvidia-smi >/dev/null 2>&1; then
	ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
if [ "$ngpu" -eq 0 ] && [ "$dry" -eq 0 ]; then
	echo "skipped: no GPU (nvidia-smi -L lists none)"
	exit 0
fi
if [ "$dry" -eq 1 ]; then
	be=threads
	echo "dry run: the threads backend stands in for cuda; GPU-only steps are skipped"
else
	be=cuda
	nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader |
		sed 's/^/gpu: /'
fi

dir=$(mktemp -d /tmp/pipecc-gpu.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fails=0
start=$(date +%s)

check() { # name status(0 = ok) [detail file]
	if [ "$2" -eq 0 ]; then
		echo "testing $1 ... passed"
	else
		echo "testing $1 ... FAILED"
		[ -n "${3:-}" ] && [ -f "$3" ] && sed 's/^/  | /' "$3" | tail -20
		fails=$((fails + 1))
	fi
}
figure() { # name value unit
	printf 'figure: %-52s %12s %s\n' "$1" "$2" "$3"
}
# run NAME TIMEOUT command...: runs it with stdout in $dir/out, stderr in $dir/err.
run() {
	name=$1 limit=$2
	shift 2
	timeout "$limit" "$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	check "$name" "$rc" "$dir/err"
	return "$rc"
}
json_num() { # key file: the first number after "key":
	sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" "$2" | head -n 1
}
# checked NAME PLAN [args]: a --check run on the backend; passes when it says "ok".
checked() {
	name=$1 plan=$2
	shift 2
	timeout 240 "$BIN/piperun" "$plan" --backend "$be" --check --steps 3 --blas-threads 8 "$@" \
		>"$dir/out" 2>"$dir/err"
	rc=$?
	[ "$rc" -eq 0 ] && ! grep -q '^check: .*: ok' "$dir/out" && rc=1
	cat "$dir/out" >>"$dir/err"
	check "$name" "$rc" "$dir/err"
	grep '^check:' "$dir/out" | sed 's/^/  /'
}

# ---- build ----
jobs=$(nproc 2>/dev/null || echo 4)
make -j"$jobs" all build/rel/tests/test_cuda >"$dir/build" 2>&1
check "make builds the tools and test_cuda" $? "$dir/build"
if [ "$dry" -eq 0 ]; then
	"$BIN/piperun" --version >"$dir/out" 2>&1
	grep -q 'backends:.*cuda' "$dir/out"
	check "piperun has the cuda backend" $? "$dir/build"
	if [ "$fails" -ne 0 ]; then
		echo "no cuda backend: nothing more to do"
		exit 1
	fi
	warnings=$(grep -c -i 'warning' "$dir/build")
	check "the build prints no warnings ($warnings)" "$warnings" "$dir/build"
fi

# ---- the backend's own tests ----
if [ "$dry" -eq 0 ]; then
	BIN=$BIN timeout 240 build/rel/tests/test_cuda >"$dir/unit" 2>&1
	check "test_cuda passes" $? "$dir/unit"
	sed -n 's/^\(dtype .*\)/  \1/p' "$dir/unit"
	# With one GPU only the two-GPU test may skip (and the no-GPU ones, which a GPU skips).
	skipped=$(grep '^\[  SKIPPED \] cuda__' "$dir/unit" | grep -v -c \
		-e two_gpus -e no_device -e cli_no_device)
	[ "$ngpu" -ge 2 ] && skipped=$(grep -c '^\[  SKIPPED \] cuda__.*two_gpus' "$dir/unit" |
		awk -v s="$skipped" '{print s + $1}')
	check "test_cuda ran its GPU tests (kernels, bad tokens, NCCL self send/recv + all-reduce, abort, plans)" \
		"$skipped" "$dir/unit"
fi

# ---- one GPU, every stage on it ----
w=1024
rows=256
[ "$dry" -eq 1 ] && w=64 && rows=16
cat >"$dir/one4.pipe" <<EOF
pipeline one4;
mesh pp=1;
microbatches 8;
input ${rows}x$w;
stage s0 { linear $w; relu; }
stage s1 { linear $w; gelu; }
stage s2 { linear $w; relu; }
stage s3 { linear $w; loss mse; }
skip s0 -> s2;
schedule gpipe;
cost * f=1 b=1 w=1;
link ideal;
EOF
for s in gpipe interleaved loopedbfs; do
	if "$BIN/pipecc" "$dir/one4.pipe" -s "$s" -o "$dir/one4-$s.plan" 2>"$dir/err"; then
		checked "one GPU, 4 stages, $s, f32" "$dir/one4-$s.plan"
		[ "$dry" -eq 0 ] && checked "one GPU, 4 stages, $s, bf16" "$dir/one4-$s.plan" --dtype bf16
	else
		echo "note: pipecc does not take one4 with schedule $s: $(head -n 1 "$dir/err")"
	fi
done
# V schedules hold two stages per rank: both on the one GPU.
cat >"$dir/v1.pipe" <<EOF
pipeline v1;
mesh pp=1;
microbatches 8;
input ${rows}x$w;
stage s0 { linear $w; gelu; }
stage s1 { linear $w; loss mse; }
schedule zbv;
cost * f=1 b=1 w=1;
link ideal;
EOF
for s in zbv dualpipev; do
	if "$BIN/pipecc" "$dir/v1.pipe" -s "$s" -o "$dir/v1-$s.plan" 2>"$dir/err"; then
		checked "one GPU, V of 2 stages, $s, f32" "$dir/v1-$s.plan"
		[ "$dry" -eq 0 ] && checked "one GPU, V of 2 stages, $s, bf16" "$dir/v1-$s.plan" --dtype bf16
	else
		echo "note: pipecc does not take the V variant with $s: $(head -n 1 "$dir/err")"
	fi
done
# The examples squeezed onto one rank (a CSV schedule is read beside its .pipe; stated
# routes name the example's own ranks and devices, so they go).
cp examples/*.csv "$dir/" 2>/dev/null
for p in examples/*.pipe; do
	b=$(basename "$p" .pipe)
	n=$(grep -c '^stage ' "$p")
	place=$(awk -v n="$n" 'BEGIN { s = "["; for (i = 0; i < n; i++) s = s (i ? ", " : "") "0"; print s "]" }')
	sed -e 's/^mesh .*/mesh pp=1;/' -e '/^placement/d' -e '/^route /d' "$p" >"$dir/$b-1.pipe"
	echo "placement $place;" >>"$dir/$b-1.pipe"
	if "$BIN/pipecc" "$dir/$b-1.pipe" -o "$dir/$b-1.plan" 2>"$dir/err"; then
		checked "one GPU, example $b on one rank" "$dir/$b-1.plan"
	else
		echo "note: example $b does not fit one rank: $(head -n 1 "$dir/err")"
	fi
done

# The GPT example (every transformer kind but rmsnorm and swiglu, which the kernel
# tests cover) under the V schedules on one GPU: its four stages merged pairwise into
# the two a V schedule holds per rank, placed on rank 0.
for s in zbv dualpipev; do
	awk -v s="$s" '
		/^stage / { body = $0; sub(/^stage [^{]*\{ */, "", body); sub(/ *\}[^}]*$/, "", body)
		            b[n++] = body; next }
		/^mesh / { print "mesh pp=1;"; next }
		/^schedule |^placement/ { next }
		{ print }
		END { for (i = 0; i < n; i += 2)
		          printf "stage v%d { %s %s }\n", i / 2, b[i], (i + 1 < n ? b[i + 1] : "")
		      print "placement [0, 0];"; print "schedule " s ";" }' \
		examples/gpt-tiny.pipe >"$dir/gpt-v-$s.pipe"
	if "$BIN/pipecc" "$dir/gpt-v-$s.pipe" -o "$dir/gpt-v-$s.plan" 2>"$dir/err"; then
		checked "one GPU, gpt-tiny as a V of 2 stages, $s, f32" "$dir/gpt-v-$s.plan"
		[ "$dry" -eq 0 ] && checked "one GPU, gpt-tiny as a V of 2 stages, $s, bf16" \
			"$dir/gpt-v-$s.plan" --dtype bf16
	else
		check "pipecc takes gpt-tiny as a V of 2 stages with $s" 1 "$dir/err"
	fi
done

# Recomputation on one GPU: gpt-tiny as the V of 2 stages (zbv) above, every stage
# full, then selective (attention's probabilities rebuilt by the device's rebuild
# kernel before B, freed before W).
if [ -f "$dir/gpt-v-zbv.pipe" ]; then
	for mode in "" " selective"; do
		printf 'recompute *%s;\n' "$mode" | cat "$dir/gpt-v-zbv.pipe" - >"$dir/re.pipe"
		if "$BIN/pipecc" "$dir/re.pipe" -o "$dir/re.plan" 2>"$dir/err"; then
			checked "one GPU, gpt-tiny V under zbv, recompute *$mode" "$dir/re.plan"
		else
			check "pipecc takes the gpt-tiny V with recompute *$mode" 1 "$dir/err"
		fi
	done
fi

# Checkpoints on one GPU (docs/runtime.md "Checkpoints"): the gpt-tiny V saved after
# step 2 of 4 and resumed for 2 gives steps 3-4's losses of the whole run (within 1e-5:
# the device's sums need not repeat bit for bit), and the same checkpoint resumed on
# the cpu threads backend within 1e-4 (the device's parameters and AdamW state, through
# its download and upload).
# losses_near NAME A B TOL: the "step loss" lines of files A and B agree within TOL.
losses_near() {
	paste "$2" "$3" | awk -v tol="$4" '
		{ n++; d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > tol * $2) bad = 1 }
		END { exit bad || n != 2 }'
	check "$1 ($(tr '\n' ' ' <"$3"))" $? "$3"
}
steps_of() { # json file -> "step loss" lines
	sed 's/}, {/\n/g' "$1" | sed -n 's/.*"step": \([0-9]*\), "loss": \([0-9.e+-]*\).*/\1 \2/p'
}
if [ -f "$dir/gpt-v-zbv.plan" ]; then
	ck="--optimizer adamw --lr 1e-3 --json --blas-threads 8"
	# shellcheck disable=SC2086
	if run "one GPU, gpt-tiny V: 4 steps saved every 2" 240 "$BIN/piperun" \
		"$dir/gpt-v-zbv.plan" --backend "$be" --steps 4 --save "$dir/ck" --save-every 2 $ck; then
		steps_of "$dir/out" | sed -n '3,4p' >"$dir/ck-full"
		# shellcheck disable=SC2086
		run "one GPU, gpt-tiny V: resumed after step 2" 240 "$BIN/piperun" "$dir/gpt-v-zbv.plan" \
			--backend "$be" --steps 2 --resume "$dir/ck/step-2" $ck &&
			steps_of "$dir/out" >"$dir/ck-gpu" &&
			losses_near "one GPU, gpt-tiny V: resumed, steps 3-4 as the whole run's" \
				"$dir/ck-full" "$dir/ck-gpu" 1e-5
		# shellcheck disable=SC2086
		run "gpt-tiny V: the GPU's checkpoint resumed on cpu threads" 240 "$BIN/piperun" \
			"$dir/gpt-v-zbv.plan" --backend threads --steps 2 --resume "$dir/ck/step-2" $ck &&
			steps_of "$dir/out" >"$dir/ck-cpu" &&
			losses_near "gpt-tiny V: on cpu threads, steps 3-4 as the GPU's" \
				"$dir/ck-full" "$dir/ck-cpu" 1e-4
	fi
fi

# ---- several GPUs ----
if [ "$ngpu" -ge 2 ] && [ "$dry" -eq 0 ]; then
	for p in examples/*.pipe; do
		b=$(basename "$p" .pipe)
		"$BIN/pipecc" "$p" -o "$dir/$b.plan" 2>/dev/null || continue
		world=$(sed -n 's/^world //p' "$dir/$b.plan")
		if [ "$world" -le "$ngpu" ]; then
			checked "$world GPUs, one process, example $b" "$dir/$b.plan"
			if command -v mpirun >/dev/null 2>&1; then
				# Open MPI wants these as root and with few cores; other MPIs take none.
				mflags=""
				mpirun --version 2>&1 | grep -q 'Open MPI' && mflags="--allow-run-as-root --oversubscribe"
				# shellcheck disable=SC2086
				timeout 240 mpirun $mflags -np "$world" \
					"$BIN/piperun" "$dir/$b.plan" --backend cuda --check --steps 3 \
					>"$dir/out" 2>"$dir/err"
				rc=$?
				[ "$rc" -eq 0 ] && ! grep -q '^check: .*: ok' "$dir/out" && rc=1
				check "$world GPUs, mpirun -np $world, example $b" "$rc" "$dir/err"
			fi
		else
			echo "note: example $b needs $world GPUs, this machine has $ngpu"
		fi
	done
else
	echo "note: one GPU: multi-GPU runs skipped (NCCL before 2.30 refuses two ranks on"
	echo "      one GPU); on a bigger machine: piperun PLAN --backend cuda, or"
	echo "      mpirun -np WORLD piperun PLAN --backend cuda"
fi

# ---- a deadlock ends: watchdog, ncclCommAbort, every rank's blocked op, exit 1 ----
# Head to head: rank 0 sends microbatch 1's activation before it receives microbatch
# 0's gradient, and rank 1 sends that gradient before it receives microbatch 1.  The
# messages are 32 MiB, more than NCCL buffers, so neither send can complete: the comm
# streams of both GPUs stall, which only the watchdog and ncclCommAbort end.
if [ "$ngpu" -ge 2 ] || [ "$dry" -eq 1 ]; then
	dl_in=2048x4096 dl_w=4096
	[ "$dry" -eq 1 ] && dl_in=4x8 dl_w=8
	cat >"$dir/dl.pipe" <<EOF
pipeline dl;
mesh pp=2;
microbatches 2;
input $dl_in;
stage s0 { linear $dl_w; relu; }
stage s1 { linear $dl_w; loss mse; }
schedule custom {
  rank 0: 0F0 0F1 0B0 0B1;
  rank 1: 1F0 1B0 1F1 1B1;
}
cost * f=1 b=1 w=1;
link ideal;
EOF
	"$BIN/pipecc" "$dir/dl.pipe" -o "$dir/dl-ok.plan"
	# Move rank 1's RECV of microbatch 1 after its SEND of microbatch 0's gradient, and
	# renumber rank 1's groups in list order; a hand edit, so format 1 (no checksum).
	awk 'NR == 1 { sub(/^pipecc-plan [23] [a-z0-9]*=[0-9a-f]*$/, "pipecc-plan 1") }
	/^rank 1 /{ r1 = 1 }
	r1 && /^RECV act e=0 m=1 /{ held = $0; next }
	{ if (r1 && /^(SEND|RECV|ALLREDUCE) /) sub(/ g=[0-9]+/, " g=" g1++)
	  print
	  if (r1 && held != "" && /^SEND grad e=0 m=0 /) {
	    h = held; sub(/ g=[0-9]+/, " g=" g1++, h); print h; held = "" } }' \
		"$dir/dl-ok.plan" >"$dir/dl.plan"
	l0=$(grep -n "^SEND act e=0 m=1 " "$dir/dl.plan" | cut -d: -f1)
	l1=$(grep -n "^SEND grad e=0 m=0 " "$dir/dl.plan" | cut -d: -f1)
	t0=$(date +%s)
	timeout 120 "$BIN/piperun" "$dir/dl.plan" --backend "$be" --timeout 5 >"$dir/out" 2>"$dir/err"
	rc=$?
	check "deadlock on 2 ranks ends with exit 1 (not a hang, not a crash)" \
		"$([ "$rc" -eq 1 ]; echo $?)" "$dir/err"
	grep -q 'no rank made progress for 5 s' "$dir/err"
	check "deadlock: the watchdog says why" $? "$dir/err"
	grep -q "dl.plan:$l0: note: rank 0 blocked in step 1 at 'SEND act e=0 m=1" "$dir/err"
	check "deadlock: rank 0's blocked send is named with its plan line" $? "$dir/err"
	grep -q "dl.plan:$l1: note: rank 1 blocked in step 1 at 'SEND grad e=0 m=0" "$dir/err"
	check "deadlock: rank 1's blocked send is named with its plan line" $? "$dir/err"
	figure "deadlock ended after (--timeout 5)" "$(($(date +%s) - t0))" "s"
fi

# ---- figures ----
# Host overhead: a plan of tiny shapes, so the time per op is what the host adds.
cat >"$dir/tiny.pipe" <<'EOF'
pipeline tinyops;
mesh pp=1;
microbatches 16;
input 4x8;
stage s0 { linear 8; relu; }
stage s1 { linear 8; relu; }
stage s2 { linear 8; relu; }
stage s3 { linear 8; loss mse; }
schedule gpipe;
cost * f=1 b=1 w=1;
link ideal;
EOF
"$BIN/pipecc" "$dir/tiny.pipe" -o "$dir/tiny.plan"
ops=$(sed -n '/^rank 0 /,/^rank 1 \|^end/p' "$dir/tiny.plan" |
	grep -c -E '^(F|B|W|BW|SEND|RECV|ALLREDUCE|OPTIM) ')
backends=$be
[ "$dry" -eq 0 ] && backends="cuda threads"
for b2 in $backends; do
	if run "host overhead run on $b2" 120 "$BIN/piperun" "$dir/tiny.plan" --backend "$b2" --json \
		--steps 20; then
		us=$(json_num mean_step_us "$dir/out")
		figure "host overhead per op, $b2 ($ops ops/step)" \
			"$(awk -v t="$us" -v n="$ops" 'BEGIN { printf "%.2f", t / n }')" "us/op"
	fi
done

# GEMM throughput of the stage layers against cuBLAS alone.
pw=4096
prows=2048
[ "$dry" -eq 1 ] && pw=128 && prows=64
cat >"$dir/perf.pipe" <<EOF
pipeline perf;
mesh pp=1;
microbatches 4;
input ${prows}x$pw;
stage s0 { linear $pw; relu; }
stage s1 { linear $pw; relu; }
stage s2 { linear $pw; relu; }
stage s3 { linear $pw; loss mse; }
schedule gpipe;
cost * f=1 b=1 w=1;
link ideal;
EOF
"$BIN/pipecc" "$dir/perf.pipe" -o "$dir/perf.plan"
gflop=$(awk -v m="$prows" -v n="$pw" 'BEGIN { printf "%.6f", 2 * m * n * n / 1e9 }')
dtypes=f32
[ "$dry" -eq 0 ] && dtypes="f32 bf16"
for dt in $dtypes; do
	dtarg=""
	[ "$dt" = bf16 ] && dtarg="--dtype bf16"
	# shellcheck disable=SC2086
	if run "--calibrate the perf plan ($dt)" 180 "$BIN/piperun" "$dir/perf.plan" --backend "$be" \
		--calibrate --steps 4 $dtarg; then
		grep '^cost' "$dir/out" >"$dir/cost-$dt.txt"
		while read -r _ st f b wt; do
			f=${f#f=} b=${b#b=} wt=${wt#w=}
			f=${f%ns} b=${b%ns} wt=${wt%ns;}
			# stage 0's B has no input-gradient GEMM (nothing wants it)
			bfl=$gflop
			[ "$st" = s0 ] && bfl=0
			figure "stage $st $dt F / B / W" \
				"$(awk -v g="$gflop" -v gb="$bfl" -v f="$f" -v b="$b" -v w="$wt" 'BEGIN {
					# GFLOP per ns = 1e6 TFLOP/s
					printf "%.2f/%.2f/%.2f", g / (f > 0 ? f : 1) * 1e6,
						gb / (b > 0 ? b : 1) * 1e6, g / (w > 0 ? w : 1) * 1e6 }')" \
				"TFLOP/s"
		done <"$dir/cost-$dt.txt"
	fi
done
if [ "$dry" -eq 0 ]; then
	cat >"$dir/gemm.cu" <<'EOF'
// cuBLAS alone for the stage layers' GEMMs, issued as cuda_kernels.cu issues them:
// fwd y^T = W^T x^T (NN), input gradient (TN), weight gradient (NT).  bf16: operands
// already bf16 (no conversion), f32 output and accumulation.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
	int m = atoi(argv[1]), n = atoi(argv[2]), k = atoi(argv[3]), bf = argc > 4 && atoi(argv[4]);
	size_t d = (size_t)(m > n ? m : n) > (size_t)k ? (size_t)(m > n ? m : n) : (size_t)k;
	size_t sz = d * d; // fits every operand of the three GEMMs
	void *a, *b, *c;
	if (cudaMalloc(&a, sz * 4) || cudaMalloc(&b, sz * 4) || cudaMalloc(&c, sz * 4))
		return 1;
	cudaMemset(a, 0x3c, sz * 4); // 0.0115 in f32 and in bf16: finite, not zero
	cudaMemset(b, 0x3c, sz * 4);
	cublasHandle_t h;
	cublasCreate(&h);
	cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
	const float one = 1, zero = 0;
	cudaDataType_t t = bf ? CUDA_R_16BF : CUDA_R_32F;
	struct { cublasOperation_t ta, tb; int M, N, K, lda, ldb, ldc; const char *name; } g[3] = {
		{CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, n, k, n, "fwd"},
		{CUBLAS_OP_T, CUBLAS_OP_N, k, m, n, n, n, k, "bwd_in"},
		{CUBLAS_OP_N, CUBLAS_OP_T, n, k, m, n, k, n, "bwd_w"},
	};
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	for (int i = 0; i < 3; i++) {
		int reps = 20;
		for (int r = -3; r < reps; r++) {
			if (r == 0)
				cudaEventRecord(e0);
			if (cublasGemmEx(h, g[i].ta, g[i].tb, g[i].M, g[i].N, g[i].K, &one, a, t, g[i].lda, b,
			                 t, g[i].ldb, &zero, c, CUDA_R_32F, g[i].ldc, CUBLAS_COMPUTE_32F,
			                 CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
				return 2;
		}
		cudaEventRecord(e1);
		cudaEventSynchronize(e1);
		float ms;
		cudaEventElapsedTime(&ms, e0, e1);
		printf("%s %.1f\n", g[i].name, 2.0 * m * n * k * reps / (ms / 1e3) / 1e12);
	}
	return cudaDeviceSynchronize() != cudaSuccess;
}
EOF
	if "$NVCC" -O2 -o "$dir/gemm" "$dir/gemm.cu" -lcublas >"$dir/err" 2>&1; then
		for dt in f32 bf16; do
			bf=0
			[ "$dt" = bf16 ] && bf=1
			if run "cuBLAS bench $dt ${prows}x${pw}x${pw}" 60 "$dir/gemm" "$prows" "$pw" "$pw" "$bf"; then
				figure "cuBLAS alone $dt fwd / bwd_in / bwd_w" \
					"$(awk '{ printf "%s%s", (NR > 1 ? "/" : ""), $2 }' "$dir/out")" "TFLOP/s"
			fi
		done
	else
		check "nvcc builds the GEMM bench" 1 "$dir/err"
	fi
fi

# Measured step against pipesim's overlap model with the measured costs.
if [ -f "$dir/cost-f32.txt" ]; then
	{ cat "$dir/perf.pipe"; cat "$dir/cost-f32.txt"; } >"$dir/cal.pipe"
	if "$BIN/pipecc" "$dir/cal.pipe" -o "$dir/cal.plan" 2>"$dir/err" &&
		"$BIN/pipesim" --model overlap --json "$dir/cal.plan" >"$dir/sim.json" 2>>"$dir/err"; then
		sim=$(json_num makespan "$dir/sim.json")
		if run "measured perf step" 180 "$BIN/piperun" "$dir/perf.plan" --backend "$be" --json \
			--steps 6; then
			meas=$(json_num mean_step_us "$dir/out")
			figure "step, measured (mean of steps 2-6)" "$meas" "us"
			figure "step, pipesim --model overlap, calibrated" "$sim" "us"
			figure "measured / predicted" \
				"$(awk -v a="$meas" -v b="$sim" 'BEGIN { printf "%.3f", a / b }')" ""
		fi
	else
		check "pipecc and pipesim take the calibrated costs" 1 "$dir/err"
	fi
fi

echo "took $(($(date +%s) - start)) s"
if [ "$fails" -ne 0 ]; then
	echo "$fails check(s) FAILED"
	exit 1
fi
echo "all checks passed"
