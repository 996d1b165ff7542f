#!/usr/bin/env bash
# Preemption end to end: a long train_gpt run gets SIGTERM (as Slurm sends before it kills a
# job) after a few steps. Passes when it finishes the step it is in, saves a checkpoint,
# exits with code 4 and says so, and a run resumed from the checkpoint root goes on at the
# next step. With MPIEXEC, the run is 2 MPI ranks and only one of them gets the signal: the
# ranks must agree to stop together.
#   preempt_run.sh TRAIN_GPT DATA OUT_DIR [MPIEXEC]
set -u
train_gpt=$1
data=$2
out=$3
mpiexec=${4:-}
dir=$out/preempt${mpiexec:+_mpi}
rm -rf "$dir"
mkdir -p "$dir"
log=$dir/run.log
sizes=(--layers 2 --d-model 32 --heads 2 --vocab 256 --seq-len 16 --batch 4 --microbatches 2 --data "$data")

fail() {
    echo "FAIL: $*"
    echo "---- run log ----"
    cat "$log"
    exit 1
}

if [ -n "$mpiexec" ]; then
    "$mpiexec" -np 2 --oversubscribe "$train_gpt" "${sizes[@]}" --pp 2 --steps 1000000 \
        --checkpoint-dir "$dir/ckpt" >"$log" 2>&1 &
else
    "$train_gpt" "${sizes[@]}" --ranks 2 --pp 2 --steps 1000000 --checkpoint-dir "$dir/ckpt" >"$log" 2>&1 &
fi
pid=$!
# Whatever happens, leave nothing running.
trap 'pkill -KILL -P $pid 2>/dev/null; kill -KILL $pid 2>/dev/null' EXIT

for _ in $(seq 600); do
    grep -q "^step 3 |" "$log" && break
    kill -0 "$pid" 2>/dev/null || fail "the run ended before step 3"
    sleep 0.1
done
grep -q "^step 3 |" "$log" || fail "no step 3 within 60 s"

target=$pid
if [ -n "$mpiexec" ]; then
    # One rank only: a process of train_gpt under mpirun.
    target=$(pgrep -P "$pid" -f train_gpt | tail -n 1)
    [ -n "$target" ] || fail "no rank process found under mpirun ($pid)"
fi
echo "sending SIGTERM to $target"
kill -TERM "$target"

for _ in $(seq 600); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$pid" 2>/dev/null && fail "still running 60 s after SIGTERM"
wait "$pid"
rc=$?
cat "$log"
[ "$rc" -eq 4 ] || fail "exit code $rc, expected 4 (stopped by a signal)"
grep -q "stopped by SIGTERM after step [0-9]*; checkpoint saved: continue with --resume" "$log" ||
    fail "no message naming the signal and the checkpoint"
[ -f "$dir/ckpt/latest" ] || fail "no checkpoint root with latest"
name=$(head -n 1 "$dir/ckpt/latest")
[ -f "$dir/ckpt/$name/manifest.json" ] || fail "latest names $name, which has no manifest"
steps=$((10#${name#step-}))
grep -q "^step $((steps - 1)) |" "$log" || fail "the checkpoint $name is not after the last step logged"
grep -q "^step $steps |" "$log" && fail "a step ran after the checkpoint $name"

# Resumed from the root: it goes on at the next step.
resumed=$("$train_gpt" "${sizes[@]}" --steps $((steps + 2)) --resume "$dir/ckpt" 2>&1)
rc=$?
echo "$resumed"
[ "$rc" -eq 0 ] || fail "the resumed run exited $rc"
echo "$resumed" | grep -q "^resumed at step $steps " || fail "the resumed run did not start at step $steps"
echo "$resumed" | grep -q "^step $steps |" || fail "the resumed run did not train step $steps"

# A run killed outright (kill -9) keeps the JSON log of every step it printed: each line
# is flushed as its step ends.
if [ -z "$mpiexec" ]; then
    "$train_gpt" "${sizes[@]}" --steps 1000000 --log-json "$dir/killed.jsonl" >"$dir/killed.log" 2>&1 &
    killed=$!
    for _ in $(seq 600); do
        grep -q "^step 5 |" "$dir/killed.log" && break
        sleep 0.1
    done
    kill -KILL "$killed"
    wait "$killed" 2>/dev/null
    lines=$(wc -l <"$dir/killed.jsonl")
    [ "$lines" -ge 5 ] || fail "the JSON log of a killed run holds $lines lines; steps 0-4 were printed"
    echo "PASS: a killed run's JSON log holds $lines steps"
fi
echo "PASS: stopped after step $((steps - 1)) with exit 4, resumed at step $steps"
