#!/usr/bin/env bash
# A SWARM stage that loses every worker: workers 1 and 3 (all of stage 1) kill themselves at
# step 5, after the checkpoint of step 4. The run goes back to that checkpoint, waits for a
# joiner, which this script starts once the rollback is printed and which fetches stage 1
# from the checkpoint the trainer serves, and goes on: the final log, each step's last
# record, has the reference's losses, and the steps lost are logged as a rollback.
#   lose_stage.sh SWARM_TRAIN REFERENCE_LOG OUT_DIR -- swarm_train arguments...
set -euo pipefail
swarm_train=$1 reference=$2 out=$3
shift 4
rm -rf "$out"
mkdir -p "$out"
port=$(python3 "$(dirname "$0")/free_port.py")
"$swarm_train" "$@" --spawn --stages 2 --workers-per-stage 2 --listen "127.0.0.1:$port" \
    --checkpoint-dir "$out/ckpt" --checkpoint-every 2 --fail 1@5 --fail 3@5 --wait-s 30 \
    --log-json "$out/run.jsonl" > "$out/run.out" 2>&1 &
trainer=$!
joiner=""
cleanup() { kill -9 "$trainer" $joiner 2>/dev/null || true; pkill -9 -f -- "--parent-pid $trainer" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 2400); do  # up to 120 s: a loaded CI machine is slow
    grep -q "^rollback |" "$out/run.out" && break
    kill -0 "$trainer" 2>/dev/null || break
    sleep 0.05
done
grep -q "^rollback |" "$out/run.out" || { cat "$out/run.out"; echo "lose_stage: no rollback"; exit 1; }
"$swarm_train" --role worker --rendezvous "127.0.0.1:$port" --stage 1 > "$out/joiner.out" 2>&1 &
joiner=$!
status=0
wait "$trainer" || status=$?
wait "$joiner" || true
cat "$out/run.out" "$out/joiner.out"
[[ $status -eq 0 ]] || { echo "lose_stage: the trainer exited with $status"; exit 1; }
grep -q "^rollback | stage 1 lost every worker at step 5 | the run goes back to step 4 from $out/ckpt/step-00000004, losing 1 step" \
    "$out/run.out" || { echo "lose_stage: the rollback line is not the one expected"; exit 1; }
grep -q "| stage 1 | .*state chunks from checkpoint:" "$out/joiner.out" ||
    { echo "lose_stage: the joiner did not fetch stage 1 from the checkpoint"; exit 1; }
python3 "$(dirname "$0")/close_losses.py" "$reference" "$out/run.jsonl" --batch 8
