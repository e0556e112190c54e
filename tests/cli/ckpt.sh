#!/bin/sh
# piperun --save / --resume (docs/runtime.md "Checkpoints"): a run of 4 steps equals, bit
# for bit (losses and the final weights' checksums), a run of 2 steps saved and resumed
# for 2, under sgd, momentum and adamw, with dropout and a token file, on threads and
# under mpirun; a checkpoint loads under another stage split and schedule (pp 4 -> 2,
# bit for bit), another dp (2 -> 1; dp 2 resumes bit for bit) and tp (1 -> 2 -> 1; tp 2
# resumes bit for bit) and under a distributed optimizer (its shards gathered: the
# all-reduce run's checkpoint, loading onto either optimizer at dp 2 and 1, threads and
# mpirun); an interrupted save leaves the previous checkpoint to resume
# from (on threads, and under mpirun with one rank or the whole job killed); and damaged or mismatched checkpoints are refused naming the file and the tensor.
: "${BIN:=bin}"
TOOL=ckpt
. tests/lib/cli.sh

LC_ALL=C tr -cd '\11\12\40-\176' <docs/runtime.md >"$dir/text.u8"
# model: 4 stages of one layer, with dropout (its masks keyed by the step and the
# layer's position in the model, so any stage split draws the same)
cat >"$dir/model.pipe" <<'PIPE'
pipeline ck;
mesh pp=4;
microbatches 4;
input tokens 2x16 vocab=128;
block layer {
	residual { layernorm; attention heads=2 dropout=0.1; }
	residual { layernorm; mlp 64; }
}
stage a { embed 32 positions; layer; }
stage b { layer; }
stage c { layer; }
stage d { layer; layernorm; head; loss xent; }
schedule 1f1b;
PIPE
# the same layers in two stages, another schedule; with dp=2; with tp=2
cat >"$dir/two.pipe" <<'PIPE'
pipeline ck2;
mesh pp=2;
microbatches 4;
input tokens 2x16 vocab=128;
block layer {
	residual { layernorm; attention heads=2 dropout=0.1; }
	residual { layernorm; mlp 64; }
}
stage a { embed 32 positions; layer; layer; }
stage b { layer; layer; layernorm; head; loss xent; }
schedule gpipe;
PIPE
sed -e 's/mesh pp=2;/mesh pp=2 dp=2;/' -e 's/microbatches 4;/microbatches 2;/' "$dir/two.pipe" >"$dir/dp2.pipe"
sed 's/^schedule .*/optimizer adamw distributed;\n&/' "$dir/dp2.pipe" >"$dir/zero.pipe"
sed 's/mesh pp=2;/mesh pp=2 tp=2;/' "$dir/two.pipe" >"$dir/tp2.pipe"
sed 's/mlp 64;/mlp 96;/' "$dir/model.pipe" >"$dir/wider.pipe"
compile model two dp2 zero tp2 wider

# sums DIR: the tensors' names and checksums, sorted (the same weights, any mesh)
sums() {
	awk '$1 == "tensor" { print $2, $NF }' "$1/MANIFEST" | sort
}
# same NAME A B: files A and B are equal and not empty
same() {
	check "$1" "$(cmp -s "$2" "$3" && [ -s "$2" ]; echo $?)" "$(diff "$2" "$3" | head -4)"
}

# resume PREFIX PLAN OPTIONS...: 4 steps saving every 2 into $dir/PREFIX-full; 2 steps
# into $dir/PREFIX-ck and 2 more from it; the losses of steps 3-4 and the weights after
# step 4 must be the same.  RUN prefixes piperun (mpirun).
resume() {
	p=$1 plan=$2
	shift 2
	rm -rf "$dir/$p-full" "$dir/$p-ck"
	t "$p: 4 steps, saved every 2" 0 $RUN "$BIN/piperun" "$plan" --steps 4 --json \
		--save "$dir/$p-full" --save-every 2 "$@"
	step_losses "$dir/out" | sed -n '3,4p' >"$dir/$p-full.loss"
	t "$p: 2 steps, saved" 0 $RUN "$BIN/piperun" "$plan" --steps 2 --save "$dir/$p-ck" "$@"
	t "$p: resumed for 2 steps" 0 $RUN "$BIN/piperun" "$plan" --steps 2 --json \
		--resume "$dir/$p-ck" --save "$dir/$p-ck" "$@"
	step_losses "$dir/out" >"$dir/$p-ck.loss"
	same "$p: steps 3-4 lose the same ($(tr '\n' ' ' <"$dir/$p-ck.loss"))" \
		"$dir/$p-full.loss" "$dir/$p-ck.loss"
	same "$p: the same weights and state after step 4" "$dir/$p-full/step-4/MANIFEST" \
		"$dir/$p-ck/step-4/MANIFEST"
}

RUN=
resume sgd "$dir/model.plan" --optimizer sgd --lr 0.1
resume momentum "$dir/model.plan" --optimizer momentum --lr 0.05
resume adamw "$dir/model.plan" --optimizer adamw --lr 1e-2 --data "$dir/text.u8"
check "--save-every 2 kept step-2 and step-4, latest step-4" \
	"$([ -f "$dir/adamw-full/step-2/MANIFEST" ] && [ "$(cat "$dir/adamw-full/latest")" = step-4 ]; echo $?)" \
	"$(ls -a "$dir/adamw-full")"
has "the manifest names stage, layer, part, shape and shard" "$dir/adamw-full/step-4/MANIFEST" \
	"^tensor layer3.attention.0.m rank0.safetensors stage=a layer=3 part=0 shape=32x96 shard=0/1 axis=none blocks=[0-9a-f]*$"
resume dp2 "$dir/dp2.plan" --optimizer adamw --lr 1e-2
check "dp=2: replica 0 alone writes (rank0, rank2)" \
	"$(cd "$dir/dp2-full/step-4" && [ "$(ls | tr '\n' ' ')" = "MANIFEST rank0.safetensors rank2.safetensors " ]; echo $?)" \
	"$(ls "$dir/dp2-full/step-4")"

# the distributed optimizer: each dp rank holds a shard of the state, gathered to the
# whole on save, so the checkpoint is the all-reduce run's (which loses the same to the
# bit, tests/cli/distopt.sh), and it loads onto either optimizer, at any dp
resume zero "$dir/zero.plan" --optimizer adamw --lr 1e-2
same "distributed: the same checkpoint as the all-reduce run's" \
	"$dir/dp2-full/step-2/MANIFEST" "$dir/zero-full/step-2/MANIFEST"
t "distributed -> all-reduce, dp=2: resumed" 0 "$BIN/piperun" "$dir/dp2.plan" --steps 2 \
	--json --optimizer adamw --lr 1e-2 --resume "$dir/zero-ck/step-2" --save "$dir/z2d"
step_losses "$dir/out" >"$dir/z2d.loss"
same "distributed -> all-reduce, dp=2: steps 3-4 lose the same" "$dir/zero-full.loss" \
	"$dir/z2d.loss"
same "distributed -> all-reduce, dp=2: the same state after step 4" \
	"$dir/zero-full/step-4/MANIFEST" "$dir/z2d/step-4/MANIFEST"
t "all-reduce -> distributed, dp=2: resumed" 0 "$BIN/piperun" "$dir/zero.plan" --steps 2 \
	--json --optimizer adamw --lr 1e-2 --resume "$dir/dp2-ck/step-2"
step_losses "$dir/out" >"$dir/d2z.loss"
same "all-reduce -> distributed, dp=2: steps 3-4 lose the same" "$dir/dp2-full.loss" \
	"$dir/d2z.loss"
for from in zero dp2; do
	t "$from dp=2 -> dp=1: resumed" 0 "$BIN/piperun" "$dir/two.plan" --steps 2 --json \
		--optimizer adamw --lr 1e-2 --resume "$dir/$from-ck/step-2" --save "$dir/$from-1"
	step_losses "$dir/out" >"$dir/$from-1.loss"
done
same "distributed dp=2 -> dp=1: steps 3-4 lose as from the all-reduce run's checkpoint" \
	"$dir/dp2-1.loss" "$dir/zero-1.loss"
same "distributed dp=2 -> dp=1: the same state after step 4" "$dir/dp2-1/step-4/MANIFEST" \
	"$dir/zero-1/step-4/MANIFEST"
# shards of uneven length (dp=3: the last one shorter), bf16's f32 master weights, tp=2
sed 's/mesh pp=2 dp=2;/mesh pp=2 dp=3;/' "$dir/dp2.pipe" >"$dir/dp3.pipe"
sed 's/mesh pp=2 dp=2;/mesh pp=2 dp=3;/' "$dir/zero.pipe" >"$dir/zero3.pipe"
sed 's/^schedule .*/precision bf16;\n&/' "$dir/dp2.pipe" >"$dir/bf.pipe"
sed 's/^schedule .*/precision bf16;\n&/' "$dir/zero.pipe" >"$dir/zerobf.pipe"
sed 's/mesh pp=2;/mesh pp=2 dp=2 tp=2;/; s/microbatches 4;/microbatches 2;/' "$dir/two.pipe" >"$dir/tpdp.pipe"
sed 's/^schedule .*/optimizer adamw distributed;\n&/' "$dir/tpdp.pipe" >"$dir/zerotp.pipe"
compile dp3 zero3 bf zerobf tpdp zerotp
for pair in "dp=3:dp3:zero3" "bf16:bf:zerobf" "tp=2 dp=2:tpdp:zerotp"; do
	what=${pair%%:*} ar=${pair#*:} ar=${ar%%:*} zr=${pair##*:}
	for m in $ar $zr; do
		t "$what, $m: 2 steps, saved" 0 "$BIN/piperun" "$dir/$m.plan" --steps 2 \
			--optimizer adamw --lr 1e-2 --save "$dir/$m-ck"
	done
	same "$what distributed: the same checkpoint as the all-reduce run's" \
		"$dir/$ar-ck/step-2/MANIFEST" "$dir/$zr-ck/step-2/MANIFEST"
done
resume zero3 "$dir/zero3.plan" --optimizer adamw --lr 1e-2
resume zerobf "$dir/zerobf.plan" --optimizer adamw --lr 1e-2

if command -v mpirun >/dev/null 2>&1 && "$BIN/piperun" --version | grep -q mpi &&
	! echo "$BIN" | grep -q san; then
	export OMPI_MCA_rmaps_base_oversubscribe=1
	RUN="timeout 300 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 4"
	resume mpi "$dir/model.plan" --optimizer adamw --lr 1e-2
	resume mpizero "$dir/zero.plan" --optimizer adamw --lr 1e-2
	same "distributed: mpirun and threads save the same checkpoint" \
		"$dir/zero-full/step-4/MANIFEST" "$dir/mpizero-full/step-4/MANIFEST"
	t "distributed under mpirun -> all-reduce on threads: resumed" 0 "$BIN/piperun" \
		"$dir/dp2.plan" --steps 2 --json --optimizer adamw --lr 1e-2 \
		--resume "$dir/mpizero-ck/step-2"
	step_losses "$dir/out" >"$dir/mz2d.loss"
	same "distributed under mpirun -> all-reduce on threads: steps 3-4 lose the same" \
		"$dir/zero-full.loss" "$dir/mz2d.loss"
	t "distributed on threads -> all-reduce under mpirun: resumed" 0 $RUN "$BIN/piperun" \
		"$dir/dp2.plan" --steps 2 --json --optimizer adamw --lr 1e-2 \
		--resume "$dir/zero-ck/step-2"
	step_losses "$dir/out" >"$dir/z2md.loss"
	same "distributed on threads -> all-reduce under mpirun: steps 3-4 lose the same" \
		"$dir/zero-full.loss" "$dir/z2md.loss"
	# an interrupted save under mpirun: rank 1 stalls after writing its files of step 4;
	# then kill -9 of that rank's process alone (mpirun ends the job), or of every process
	# of the job (a lost machine).  Either way step-2 stays the latest and resumes.
	for target in rank job; do
		rm -rf "$dir/mcrash"
		PIPERUN_FAULT=stall-save:rank=1:step=4 $RUN -x PIPERUN_FAULT "$BIN/piperun" \
			"$dir/model.plan" --steps 4 --save-every 2 --save "$dir/mcrash" --optimizer adamw \
			--lr 1e-2 --timeout 120 >"$dir/mcrash.out" 2>&1 &
		pid=$!
		n=0
		while [ ! -f "$dir/mcrash/.tmp-4/rank1.list" ] && [ $n -lt 1200 ]; do
			sleep 0.1
			n=$((n + 1))
		done
		for p in $(pgrep -f "piperun $dir/model.plan --steps 4 --save-every 2 --save $dir/mcrash"); do
			[ "$target" = job ] || tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
				grep -qx 'OMPI_COMM_WORLD_RANK=1' && kill -9 "$p"
		done
		[ "$target" = job ] && kill -9 "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		check "mpirun crash ($target killed): step 4 never completed" \
			"$([ -d "$dir/mcrash/.tmp-4" ] && [ ! -d "$dir/mcrash/step-4" ]; echo $?)" \
			"$(ls -a "$dir/mcrash")"
		check "mpirun crash ($target killed): latest is still step-2" \
			"$([ "$(cat "$dir/mcrash/latest")" = step-2 ]; echo $?)" "$(cat "$dir/mcrash/latest")"
		t "mpirun crash ($target killed): resumes from step 2 under mpirun" 0 $RUN "$BIN/piperun" \
			"$dir/model.plan" --steps 2 --json --optimizer adamw --lr 1e-2 --resume "$dir/mcrash" \
			--save "$dir/mcrash"
		step_losses "$dir/out" >"$dir/mcrash.loss"
		same "mpirun crash ($target killed): steps 3-4 lose as without the crash" \
			"$dir/mpi-full.loss" "$dir/mcrash.loss"
	done
	RUN=
	t "threads, adamw without data" 0 "$BIN/piperun" "$dir/model.plan" --steps 4 \
		--optimizer adamw --lr 1e-2 --save "$dir/thr"
	same "mpirun and threads save the same checkpoint" "$dir/mpi-full/step-4/MANIFEST" \
		"$dir/thr/step-4/MANIFEST"
else
	echo "testing $TOOL under mpirun ... skipped: no mpirun or no MPI backend"
fi
RUN=

# resharding: the model's checkpoint after step 2 under other meshes
resume base "$dir/model.plan" --optimizer adamw --lr 1e-2
sums "$dir/base-full/step-4" >"$dir/base.sums"
t "pp 4 -> 2 (other stages, gpipe): resumed" 0 "$BIN/piperun" "$dir/two.plan" --steps 2 \
	--json --optimizer adamw --lr 1e-2 --resume "$dir/base-ck/step-2" --save "$dir/two"
step_losses "$dir/out" >"$dir/two.loss"
same "pp 4 -> 2: steps 3-4 lose the same" "$dir/base-full.loss" "$dir/two.loss"
sums "$dir/two/step-4" >"$dir/two.sums"
same "pp 4 -> 2: the same weights after step 4" "$dir/base.sums" "$dir/two.sums"
t "pp 2 -> 4: resumed" 0 "$BIN/piperun" "$dir/model.plan" --steps 1 --json --optimizer adamw \
	--lr 1e-2 --resume "$dir/two" --save "$dir/back"
has "pp 2 -> 4: continues at step 5" "$dir/out" '"step": 5, "loss"'

t "dp 2 -> 1: resumed" 0 "$BIN/piperun" "$dir/model.plan" --steps 1 --json --optimizer adamw \
	--lr 1e-2 --resume "$dir/dp2-ck/step-2"
step_losses "$dir/out" >"$dir/dp1.loss"
t "dp 1 from scratch" 0 "$BIN/piperun" "$dir/model.plan" --steps 3 --json --optimizer adamw \
	--lr 1e-2
step_losses "$dir/out" | sed -n 3p >"$dir/scratch.loss"
check "dp 2 -> 1: step 3 starts from the dp=2 weights ($(cat "$dir/dp1.loss"), from scratch $(cat "$dir/scratch.loss"))" \
	"$(grep -q '^3 ' "$dir/dp1.loss" && ! cmp -s "$dir/dp1.loss" "$dir/scratch.loss"; echo $?)" "same as scratch"

t "tp 1 -> 2: resumed" 0 "$BIN/piperun" "$dir/tp2.plan" --steps 2 --json --optimizer adamw \
	--lr 1e-2 --resume "$dir/base-ck/step-2"
step_losses "$dir/out" >"$dir/tp2.loss"
check "tp 1 -> 2: steps 3-4 within 1e-5 of tp=1's ($(tr '\n' ' ' <"$dir/tp2.loss"))" \
	"$(paste "$dir/base-full.loss" "$dir/tp2.loss" | awk '
		{ n++; d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * $2) bad = 1 }
		END { exit bad || n != 2 }'; echo $?)" "$(paste "$dir/base-full.loss" "$dir/tp2.loss")"
resume tp2 "$dir/tp2.plan" --optimizer adamw --lr 1e-2
has "tp=2: a cut tensor's pieces, one per tp rank" "$dir/tp2-ck/step-2/MANIFEST" \
	"^tensor layer3.attention.0 rank1.safetensors stage=a layer=3 part=0 shape=32x48 shard=1/2 axis=cols "
has "tp=2: a whole one, from tp rank 0" "$dir/tp2-ck/step-2/MANIFEST" \
	"^tensor layer2.layernorm.0 rank0.safetensors stage=a layer=2 part=0 shape=1x32 shard=0/1 axis=none "
t "tp 2 -> 1: resumed" 0 "$BIN/piperun" "$dir/two.plan" --steps 2 --json --optimizer adamw \
	--lr 1e-2 --resume "$dir/tp2-ck/step-2"
step_losses "$dir/out" >"$dir/tp1.loss"
check "tp 2 -> 1: steps 3-4 within 1e-5 of tp=2's ($(tr '\n' ' ' <"$dir/tp1.loss"))" \
	"$(paste "$dir/tp2-full.loss" "$dir/tp1.loss" | awk '
		{ n++; d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * $2) bad = 1 }
		END { exit bad || n != 2 }'; echo $?)" "$(paste "$dir/tp2-full.loss" "$dir/tp1.loss")"

# an interrupted save: rank 1 stops after writing its files of step 4; killed there, the
# directory keeps step-2 as latest, resumes from it, and the next save clears .tmp-4
rm -rf "$dir/crash"
PIPERUN_FAULT=stall-save:rank=1:step=4 "$BIN/piperun" "$dir/model.plan" --steps 4 \
	--save-every 2 --save "$dir/crash" --optimizer adamw --lr 1e-2 --timeout 120 \
	>"$dir/crash.out" 2>&1 &
pid=$!
n=0
while [ ! -f "$dir/crash/.tmp-4/rank1.list" ] && [ $n -lt 600 ]; do
	sleep 0.1
	n=$((n + 1))
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
check "crash: killed during the save of step 4" \
	"$([ -d "$dir/crash/.tmp-4" ] && [ ! -d "$dir/crash/step-4" ]; echo $?)" "$(ls -a "$dir/crash")"
check "crash: latest is still step-2" "$([ "$(cat "$dir/crash/latest")" = step-2 ]; echo $?)" \
	"$(cat "$dir/crash/latest")"
t "crash: resumes from step 2" 0 "$BIN/piperun" "$dir/model.plan" --steps 2 --json \
	--optimizer adamw --lr 1e-2 --resume "$dir/crash" --save "$dir/crash"
step_losses "$dir/out" >"$dir/crash.loss"
same "crash: and steps 3-4 lose as without the crash" "$dir/base-full.loss" "$dir/crash.loss"
check "crash: the next save removed .tmp-4" "$([ ! -e "$dir/crash/.tmp-4" ]; echo $?)" \
	"$(ls -a "$dir/crash")"

# damaged and mismatched checkpoints: a located error, exit 1
bad() {
	rm -rf "$dir/bad"
	cp -r "$dir/base-ck/step-2" "$dir/bad"
}
bad
size=$(wc -c <"$dir/bad/rank1.safetensors")
head -c $((size - 4)) "$dir/base-ck/step-2/rank1.safetensors" >"$dir/bad/rank1.safetensors"
t "a truncated file is refused" 1 "$BIN/piperun" "$dir/model.plan" --resume "$dir/bad"
has "a truncated file is named" "$dir/err" "bad/rank1.safetensors: error: $((size - 4)) bytes, the manifest says $size (truncated)"
bad
# flip one bit of the last tensor's last element
byte=$(od -An -tu1 -j $((size - 2)) -N1 "$dir/bad/rank1.safetensors" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 16)))" |
	dd of="$dir/bad/rank1.safetensors" bs=1 seek=$((size - 2)) conv=notrunc 2>/dev/null
t "a flipped bit is refused" 1 "$BIN/piperun" "$dir/model.plan" --resume "$dir/bad"
has "a flipped bit names the file and the tensor" "$dir/err" \
	"bad/rank1.safetensors: error: tensor 'layer[0-9]*\.[a-z]*\.[0-9]\.v' (data bytes [0-9]* to [0-9]*): checksum mismatch"
bad
printf '{' | dd of="$dir/bad/rank2.safetensors" bs=1 seek=8 conv=notrunc 2>/dev/null
printf 'X' | dd of="$dir/bad/rank2.safetensors" bs=1 seek=9 conv=notrunc 2>/dev/null
t "a damaged header is refused" 1 "$BIN/piperun" "$dir/model.plan" --resume "$dir/bad"
has "a damaged header is named with its byte" "$dir/err" \
	"bad/rank2.safetensors: error: checksum mismatch; header byte 1: expected '\"'"
bad
sed -i 's/^step 2$/step two/' "$dir/bad/MANIFEST"
t "a bad manifest line is refused" 1 "$BIN/piperun" "$dir/model.plan" --resume "$dir/bad"
has "a bad manifest line is located" "$dir/err" "bad/MANIFEST:2: error: expected 'step N'"
t "no checkpoint there" 1 "$BIN/piperun" "$dir/model.plan" --resume "$dir/nothing"
has "no checkpoint: says so" "$dir/err" "nothing/MANIFEST: error: No such file or directory (no checkpoint"
t "another model is refused" 1 "$BIN/piperun" "$dir/wider.plan" --optimizer adamw \
	--resume "$dir/base-ck"
has "another model: the first tensor that differs" "$dir/err" \
	"error: checkpoint .*/base-ck/step-4/rank0.safetensors: tensor 'layer6.mlp.0' is 32x64, and the plan's (stage a, its layer 6) is 32x96"
t "another optimizer is refused" 1 "$BIN/piperun" "$dir/model.plan" --optimizer sgd \
	--resume "$dir/base-ck"
has "another optimizer: says which" "$dir/err" "saved with the adamw optimizer, and this run's is sgd"
t "--save-every needs --save" 2 "$BIN/piperun" "$dir/model.plan" --save-every 2
t "--resume takes no --check" 2 "$BIN/piperun" "$dir/model.plan" --check --resume "$dir/base-ck"
t "--resume takes no --seed" 2 "$BIN/piperun" "$dir/model.plan" --seed 3 --resume "$dir/base-ck"

exit $((fails > 0))
