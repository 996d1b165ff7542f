#!/usr/bin/env bash
# SWARM over links shaped to its setting: every byte between the trainer and its workers
# goes through a relay of the test's own (tests/swarm/relay.py) that delays it 50 ms each
# way, and, where a network namespace can be made (unshare -n, as root), the loopback is
# limited to 100 Mbit/s with tc's token bucket (tbf). This kernel has no netem: the delay and
# the faults are the relay's. Three runs of 2 stages x 2 workers (started by this script,
# --rendezvous through the relay):
#   plain       the losses match train_gpt's within 1e-5 relative;
#   compressed  8-bit activations (--compress-block 64): fewer bytes on the wire, the losses
#               within 2 %, and the tok/s of both printed (a figure, not a check);
#   faults      the relay also stalls a connection for 0.5 s every 2 s and drops one every
#               4 s, on average: the run completes with the plain losses, and no worker is
#               banned (a dropped connection makes a worker unreachable until it reconnects,
#               not dead).
# Only the namespace part skips, saying why, where it is refused.
#   shaped_link.sh SWARM_TRAIN TRAIN_GPT OUT_DIR -- model and data arguments...
set -euo pipefail
swarm_train=$1 train_gpt=$2 out=$3
shift 4
here=$(dirname "$(readlink -f "$0")")
if [[ -z ${WEFT_SHAPED_INSIDE:-} ]]; then
    rm -rf "$out"
    mkdir -p "$out"
    if why=$(unshare -n true 2>&1); then
        exec env WEFT_SHAPED_INSIDE=namespace unshare -n "$0" "$swarm_train" "$train_gpt" "$out" -- "$@"
    fi
    echo "shaped_link: SKIPPED the rate limit: no network namespace here (unshare -n: $why); the relay's delay" \
         "and faults still run"
    export WEFT_SHAPED_INSIDE=none
fi
shaping="no rate limit"
if [[ $WEFT_SHAPED_INSIDE == namespace ]]; then
    ip link set lo up
    if why=$(tc qdisc add dev lo root tbf rate 100mbit burst 256kb latency 200ms 2>&1); then
        shaping="100 Mbit/s (tc tbf on the namespace's loopback)"
    else
        echo "shaped_link: SKIPPED the rate limit: tc refused tbf ($why)"
    fi
fi
echo "shaped_link: links of 50 ms each way, $shaping"

batch=""
previous=""
for a in "$@"; do
    [[ $previous == --batch ]] && batch=$a
    previous=$a
done
[[ -n $batch ]] || { echo "shaped_link: the arguments must give --batch"; exit 2; }

free_port() { python3 "$here/free_port.py"; }

pids=()
cleanup() { kill -9 "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT

# run_case NAME "RELAY ARGS" SWARM_TRAIN ARGS...
run_case() {
    local name=$1 relay_args=$2
    shift 2
    local trainer_port relay_port
    trainer_port=$(free_port)
    relay_port=$(free_port)
    # shellcheck disable=SC2086
    python3 "$here/relay.py" "$relay_port" "$trainer_port" --delay-ms 50 $relay_args \
        --ready-file "$out/$name.relay_ready" 2> "$out/$name.relay.out" &
    local relay=$!
    pids+=("$relay")
    for _ in $(seq 1 100); do [[ -f "$out/$name.relay_ready" ]] && break; sleep 0.05; done
    "$swarm_train" "$@" --stages 2 --workers-per-stage 2 --listen "127.0.0.1:$trainer_port" \
        --log-json "$out/$name.jsonl" > "$out/$name.out" 2>&1 &
    local trainer=$!
    pids+=("$trainer")
    local workers=()
    for id in 0 1 2 3; do
        "$swarm_train" --role worker --rendezvous "127.0.0.1:$relay_port" --id "$id" --stage $((id % 2)) \
            --connect-timeout-s 30 >> "$out/$name.workers.out" 2>&1 &
        workers+=($!)
        pids+=($!)
    done
    local status=0
    wait "$trainer" || status=$?
    for w in "${workers[@]}"; do wait "$w" || true; done
    kill -TERM "$relay"
    wait "$relay" || true
    cat "$out/$name.out" "$out/$name.relay.out"
    [[ $status -eq 0 ]] || { cat "$out/$name.workers.out"; echo "shaped_link: the $name run exited with $status"; exit 1; }
    python3 - "$name" "$out/$name.jsonl" <<'PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[2]) if "event" not in json.loads(l)]
rates = [s["tokens_per_s"] for s in steps[1:]]  # past the first step's warm-up
print(f"shaped_link: {sys.argv[1]}: median {statistics.median(rates):.0f} tok/s, "
      f"{statistics.median(s['wire_bytes_per_microbatch'] for s in steps):.0f} bytes a micro-batch on the wire, "
      f"{sum(s['retried_calls'] for s in steps)} calls sent again")
PY
}

"$train_gpt" "$@" --log-json "$out/reference.jsonl" > "$out/reference.out" 2>&1 ||
    { cat "$out/reference.out"; echo "shaped_link: the reference run failed"; exit 1; }
run_case plain "" "$@"
python3 "$here/close_losses.py" "$out/reference.jsonl" "$out/plain.jsonl" --batch "$batch"
run_case compressed "" "$@" --compress-block 64
python3 "$here/close_losses.py" "$out/reference.jsonl" "$out/compressed.jsonl" --batch "$batch" --rtol 2e-2 --compressed
run_case faults "--stall-every-s 2 --stall-ms 500 --drop-every-s 4 --seed 7" "$@"
python3 "$here/close_losses.py" "$out/reference.jsonl" "$out/faults.jsonl" --batch "$batch"
if grep -q "banned" "$out/faults.out"; then
    grep "banned" "$out/faults.out"
    echo "shaped_link: a worker was banned on a link that only stalls and drops connections"
    exit 1
fi
grep -q "drops [1-9]" "$out/faults.relay.out" || { echo "shaped_link: the relay dropped no connection"; exit 1; }
python3 - "$out/plain.jsonl" "$out/compressed.jsonl" <<'PY'
import json, statistics, sys
def median_rate(path):
    steps = [json.loads(l) for l in open(path)]
    return statistics.median(s["tokens_per_s"] for s in steps[1:] if "event" not in s)
plain, compressed = median_rate(sys.argv[1]), median_rate(sys.argv[2])
print(f"shaped_link: 8-bit compression: {compressed:.0f} tok/s against {plain:.0f} plain ({compressed / plain:.2f}x)")
PY
