#!/usr/bin/env bash
# A real `kill -9` of a SWARM worker process mid-run: the run finishes with the reference's
# losses, and no worker process is left behind once the trainer exits.
#   kill_worker.sh SWARM_TRAIN REFERENCE_LOG OUT_DIR -- swarm_train arguments...
set -euo pipefail
swarm_train=$1 reference=$2 out=$3
shift 4
mkdir -p "$out"
log="$out/swarm_kill.jsonl"
rm -f "$log"
"$swarm_train" "$@" --log-json "$log" > "$out/swarm_kill.out" 2>&1 &
trainer=$!
cleanup() { kill -9 "$trainer" 2>/dev/null || true; pkill -9 -f -- "--parent-pid $trainer" 2>/dev/null || true; }
trap cleanup EXIT
# Wait for step 2, then kill worker 1 (stage 1) as an operator or the OOM killer would.
for _ in $(seq 1 1200); do  # up to 120 s: a loaded CI machine is slow
    [[ -f "$log" ]] && grep -q '"step":2,' "$log" && break
    sleep 0.1
done
grep -q '"step":2,' "$log" || { cat "$out/swarm_kill.out"; echo "kill_worker: step 2 never came"; exit 1; }
victim=$(pgrep -f -- "--id 1 .*--parent-pid $trainer" | head -n 1)
[[ -n "$victim" ]] || { echo "kill_worker: worker 1 of trainer $trainer not found"; exit 1; }
# Spawned workers are named for ps: their program and stage, not "exe" (/proc/self/exe).
name=$(ps -o comm= -p "$victim")
[[ "$name" == "swarm_train s1" ]] || { echo "kill_worker: worker 1 shows in ps as '$name', not 'swarm_train s1'"; exit 1; }
args=$(ps -o args= -p "$victim")
[[ "$args" == "swarm_train --role worker"* ]] || { echo "kill_worker: worker 1's command line reads '$args'"; exit 1; }
kill -9 "$victim"
echo "kill_worker: killed worker 1 (pid $victim) after step 2"
status=0
wait "$trainer" || status=$?
cat "$out/swarm_kill.out"
[[ $status -eq 0 ]] || { echo "kill_worker: the trainer exited with $status"; exit 1; }
grep -q "worker 1 of stage 1 banned" "$out/swarm_kill.out" || { echo "kill_worker: worker 1 was never banned"; exit 1; }
if pgrep -f -- "--parent-pid $trainer" > /dev/null; then
    echo "kill_worker: worker processes outlived the trainer:"; pgrep -af -- "--parent-pid $trainer"; exit 1
fi
python3 "$(dirname "$0")/close_losses.py" "$reference" "$log" --batch 8
