#!/usr/bin/env bash
# A real `kill -9` of the SWARM trainer mid-run, then `--resume` from its checkpoint root: the
# spawned workers die with their trainer (PR_SET_PDEATHSIG), the resumed run starts new ones
# that fetch every stage's state from the checkpoint (served by the trainer), and the steps of
# both runs together are the uninterrupted run's: within 1e-6 relative of an uninterrupted
# SWARM run, and within 1e-5 of train_gpt's reference. Prints the time from the kill to the
# resumed run's first step.
# Without --spawn in the arguments, the test starts four workers of its own (--rendezvous,
# 2 stages x 2), which outlive the killed trainer and are welcomed back by the resumed one,
# restarted on the same --listen.
#   kill_trainer.sh SWARM_TRAIN REFERENCE_LOG OUT_DIR -- swarm_train arguments (with --init-from)...
set -euo pipefail
swarm_train=$1 reference=$2 out=$3
shift 4
rm -rf "$out"
mkdir -p "$out"
# The resumed run takes its weights from the checkpoint: --init-from is refused with --resume.
args=() init_from=()
while [[ $# -gt 0 ]]; do
    if [[ $1 == --init-from ]]; then init_from=(--init-from "$2"); shift 2; continue; fi
    args+=("$1")
    shift
done
set -- "${args[@]}"
spawn=false
for a in "$@"; do [[ $a == --spawn ]] && spawn=true; done
listen=() workers=()
if ! $spawn; then
    # Below the ephemeral range (tests/swarm/free_port.py): the resumed trainer binds it again.
    port=$(python3 "$(dirname "$0")/free_port.py")
    listen=(--listen "127.0.0.1:$port")
fi
start_workers() {
    for id in 0 1 2 3; do
        "$swarm_train" --role worker --rendezvous "127.0.0.1:$port" --id "$id" --stage $((id % 2)) \
            --connect-timeout-s 30 > "$out/worker$id.out" 2>&1 &
        workers+=($!)
    done
}
# The uninterrupted run, to compare with (its workers spawned).
whole_args=("$@")
$spawn || whole_args+=(--spawn)
"$swarm_train" "${whole_args[@]}" "${init_from[@]}" --log-json "$out/whole.jsonl" > "$out/whole.out" 2>&1 ||
    { cat "$out/whole.out"; echo "kill_trainer: the uninterrupted run failed"; exit 1; }
# The run to kill, its workers slowed so that it is killed while it trains.
$spawn || start_workers
"$swarm_train" "$@" "${listen[@]}" "${init_from[@]}" --checkpoint-dir "$out/ckpt" --checkpoint-every 3 \
    --slow 0:150 --slow 1:150 --slow 2:150 --slow 3:150 --log-json "$out/first.jsonl" > "$out/first.out" 2>&1 &
trainer=$!
cleanup() {
    kill -9 "$trainer" ${resumed:-} "${workers[@]}" 2>/dev/null || true
    pkill -9 -f -- "--parent-pid $trainer" 2>/dev/null || true
}
trap cleanup EXIT
# Up to 120 s: on a loaded 2-core machine (ctest -j3 on 2 cores in CI) the slowed steps
# take far longer than alone; the wait ends as soon as the checkpoint is there.
for _ in $(seq 1 2400); do
    grep -q "saved checkpoint .*step-00000006" "$out/first.out" && break
    kill -0 "$trainer" 2>/dev/null || break
    sleep 0.05
done
grep -q "saved checkpoint .*step-00000006" "$out/first.out" ||
    { cat "$out/first.out"; echo "kill_trainer: the checkpoint of step 6 never came"; exit 1; }
kill -9 "$trainer"
killed_at=$(date +%s.%N)
wait "$trainer" 2>/dev/null || true
grep -q '"step":9,' "$out/first.jsonl" && { echo "kill_trainer: the run ended before the kill; slow it down"; exit 1; }
# The spawned workers go with it; workers of their own stay, for the trainer to come back.
if ! $spawn; then
    for w in "${workers[@]}"; do
        kill -0 "$w" 2>/dev/null || { cat "$out"/worker*.out; echo "kill_trainer: a worker ended with its trainer"; exit 1; }
    done
fi
for _ in $(seq 1 100); do
    pgrep -f -- "--parent-pid $trainer" > /dev/null || break
    sleep 0.05
done
if pgrep -f -- "--parent-pid $trainer" > /dev/null; then
    echo "kill_trainer: worker processes outlived the killed trainer:"; pgrep -af -- "--parent-pid $trainer"; exit 1
fi
"$swarm_train" "$@" "${listen[@]}" --resume "$out/ckpt" --checkpoint-dir "$out/ckpt" --log-json "$out/resumed.jsonl" \
    > "$out/resumed.out" 2>&1 &
resumed=$!
# Training again: the resumed run's first step is logged.
for _ in $(seq 1 3000); do
    [[ -s "$out/resumed.jsonl" ]] && break
    kill -0 "$resumed" 2>/dev/null || break
    sleep 0.01
done
training_at=$(date +%s.%N)
status=0
wait "$resumed" || status=$?
cat "$out/resumed.out"
[[ $status -eq 0 ]] || { echo "kill_trainer: the resumed run exited with $status"; exit 1; }
python3 -c 'import sys; print(f"kill_trainer: training again {float(sys.argv[2]) - float(sys.argv[1]):.2f} s after the kill -9")' \
    "$killed_at" "$training_at"
grep -q "resumed at step 6 from $out/ckpt/step-00000006" "$out/resumed.out" ||
    { echo "kill_trainer: the run did not resume at step 6"; exit 1; }
if ! $spawn; then
    for w in "${workers[@]}"; do wait "$w" || { cat "$out"/worker*.out; echo "kill_trainer: a worker failed"; exit 1; }; done
    cat "$out"/worker*.out > "$out/workers.out"
    cat "$out/workers.out"
    [[ $(grep -c "welcomed back 1 time" "$out/workers.out") -eq 4 ]] ||
        { echo "kill_trainer: not every worker was welcomed back by the resumed trainer"; exit 1; }
fi
# A spawned worker's summary is in its trainer's output; a worker of the test's own, in its own.
grep -qs "state chunks from checkpoint:" "$out/resumed.out" "$out/workers.out" ||
    { echo "kill_trainer: no worker fetched its state from the checkpoint"; exit 1; }
# The steps of the killed run up to the checkpoint, then the resumed run's: the whole run.
python3 - "$out/first.jsonl" "$out/resumed.jsonl" "$out/joined.jsonl" <<'PY'
import json, sys
first = [json.loads(l) for l in open(sys.argv[1])]
resumed = [json.loads(l) for l in open(sys.argv[2])]
assert resumed and resumed[0]["step"] == 6, f"the resumed log starts at {resumed[0]['step'] if resumed else None}"
with open(sys.argv[3], "w") as f:
    for r in [r for r in first if r["step"] < 6] + resumed:
        f.write(json.dumps(r) + "\n")
PY
python3 "$(dirname "$0")/close_losses.py" "$out/whole.jsonl" "$out/joined.jsonl" --batch 8 --rtol 1e-6
python3 "$(dirname "$0")/close_losses.py" "$reference" "$out/joined.jsonl" --batch 8
