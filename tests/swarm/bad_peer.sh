#!/usr/bin/env bash
# A live SWARM run while strangers send its trainer, and one worker's state server, malformed
# messages from the start to past the middle (tests/swarm/bad_peer.cpp): the run ends on its
# own, with the reference's losses, every bad message dropped and counted, and the repeating
# peers banned, by the trainer and by the worker.
#   bad_peer.sh SWARM_TRAIN BAD_PEER REFERENCE_LOG OUT_DIR -- swarm_train arguments...
set -euo pipefail
swarm_train=$1 bad_peer=$2 reference=$3 out=$4
shift 5
mkdir -p "$out"
log="$out/swarm_bad_peer.jsonl"
rm -f "$log"
# A free port (the trainer must listen where the stranger can find it).
port=$(python3 "$(dirname "$0")/free_port.py")
"$swarm_train" "$@" --listen "127.0.0.1:$port" --log-json "$log" > "$out/swarm_bad_peer.out" 2>&1 &
trainer=$!
cleanup() { kill -9 "$trainer" 2>/dev/null || true; pkill -9 -f -- "--parent-pid $trainer" 2>/dev/null || true; }
trap cleanup EXIT
# Bursts from before the first step (the stranger connects while the trainer starts) on.
"$bad_peer" "127.0.0.1:$port" 12 150 &
stranger=$!
# A second stranger at the state server of the first worker that says it is ready (where
# newcomers may say hello), found in the run's output within 30 s.
worker_address=""
for _ in $(seq 300); do
    worker_address=$(sed -n 's/.*ready; new workers may join through it: --rendezvous \([0-9.:]*\).*/\1/p' \
                         "$out/swarm_bad_peer.out" | head -n 1)
    [[ -n $worker_address ]] && break
    sleep 0.1
done
[[ -n $worker_address ]] || { cat "$out/swarm_bad_peer.out"; echo "bad_peer: no worker said it was ready"; exit 1; }
"$bad_peer" "$worker_address" 6 150
wait "$stranger"
status=0
wait "$trainer" || status=$?
cat "$out/swarm_bad_peer.out"
[[ $status -eq 0 ]] || { echo "bad_peer: the trainer exited with $status"; exit 1; }
grep -q "swarm: dropped a message" "$out/swarm_bad_peer.out" || { echo "bad_peer: no message was dropped"; exit 1; }
grep -q "^swarm: peer .* banned after" "$out/swarm_bad_peer.out" ||
    { echo "bad_peer: the trainer banned no repeating peer"; exit 1; }
grep -q "^swarm worker: peer .* banned after" "$out/swarm_bad_peer.out" ||
    { echo "bad_peer: the worker banned no repeating peer"; exit 1; }
grep -Eq "dropped [1-9][0-9]* malformed messages, banned [1-9][0-9]* peers for them" "$out/swarm_bad_peer.out" ||
    { echo "bad_peer: no worker's summary counts the messages it dropped"; exit 1; }
dropped=$(python3 -c 'import json, sys; print(sum(json.loads(l).get("dropped_messages", 0) for l in open(sys.argv[1])))' "$log")
echo "bad_peer: the trainer's log counts $dropped dropped messages"
[[ $dropped -gt 0 ]] || { echo "bad_peer: the log counts no dropped message"; exit 1; }
python3 "$(dirname "$0")/close_losses.py" "$reference" "$log" --batch 8
