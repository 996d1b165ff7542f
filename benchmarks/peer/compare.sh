#!/usr/bin/env bash
# weft against PyTorch's pipelining on the same GPT-2, the same schedule, pipeline size and
# threads per rank: ms per step (medians of the timed steps) and PyTorch's time over weft's.
# Not part of CI: it needs PyTorch 2.x from PyPI in a venv (pip install torch).
#   benchmarks/peer/compare.sh --python VENV/bin/python --train-gpt build/release/examples/train_gpt \
#       --data build/release/data/train.bin [--pp "2 4"] [--schedules "gpipe 1f1b ..."] [--threads 1] [--steps 10]
# Schedules (PyTorch's class / weft's): gpipe (ScheduleGPipe / gpipe), 1f1b (Schedule1F1B / 1f1b),
# interleaved (ScheduleInterleaved1F1B / interleaved, 2 chunks), interleaved-zb
# (ScheduleInterleavedZeroBubble / interleaved-zb, 2 chunks: the same order, action for action),
# zbv (ScheduleZBVZeroBubble / zbv). The GPT has 4 layers (8 where pp x chunks exceeds 4: every
# stage holds whole layers in PyTorch), d_model 256, 4 heads, vocab 256, seq 128, batch 16,
# 8 micro-batches.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../../scripts/env.sh"
python="" train_gpt="" data="" pps="2 4" threads=1 steps=10 warmup=2
schedules="gpipe 1f1b interleaved interleaved-zb zbv"
while (($#)); do
    case "$1" in
        --python) python="$2"; shift 2 ;;
        --train-gpt) train_gpt="$2"; shift 2 ;;
        --data) data="$2"; shift 2 ;;
        --pp) pps="$2"; shift 2 ;;
        --schedules) schedules="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --steps) steps="$2"; shift 2 ;;
        *) echo "compare.sh: unknown option '$1' (valid: --python, --train-gpt, --data, --pp, --schedules, --threads, --steps)" >&2; exit 2 ;;
    esac
done
[[ -x "$python" ]] || { echo "compare.sh: --python = '$python' is invalid: must be an executable Python with PyTorch 2.x" >&2; exit 2; }
[[ -x "$train_gpt" ]] || { echo "compare.sh: --train-gpt = '$train_gpt' is invalid: must be the built train_gpt" >&2; exit 2; }
[[ -r "$data" ]] || { echo "compare.sh: --data = '$data' is invalid: must be a readable token file (make_dataset)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

weft_name() {
    case "$1" in
        interleaved | interleaved-zb) echo "$1 --chunks 2" ;;
        *) echo "$1" ;;
    esac
}
chunks_of() { case "$1" in interleaved | interleaved-zb | zbv) echo 2 ;; *) echo 1 ;; esac; }

printf "%-15s %3s %6s %10s %10s %8s\n" schedule pp layers torch_ms weft_ms speedup
for pp in $pps; do
    for schedule in $schedules; do
        layers=4
        (( pp * $(chunks_of "$schedule") > 4 )) && layers=8
        sizes=(--layers "$layers" --d-model 256 --heads 4 --vocab 256 --seq-len 128 --batch 16 --microbatches 8)
        torch_ms=$("$python" "$here/torch_pipeline.py" --schedule "$schedule" --pp "$pp" "${sizes[@]}" \
                       --threads "$threads" --warmup "$warmup" --steps "$steps" 2>"$work/torch.err" |
                   "$python" -c 'import json,sys; print(json.loads(sys.stdin.readlines()[-1])["median_ms"])') ||
            { torch_ms="failed"; tail -3 "$work/torch.err" >&2; }
        log="$work/weft-$schedule-$pp.jsonl"
        # shellcheck disable=SC2046  # weft_name gives the schedule and its options
        if mpirun -np "$pp" --oversubscribe --bind-to none "$train_gpt" --data "$data" "${sizes[@]}" \
               --schedule $(weft_name "$schedule") --pp "$pp" --threads "$threads" --lr 3e-4 --weight-decay 0.1 \
               --steps $((warmup + steps)) --log-json "$log" >"$work/weft.out" 2>&1; then
            weft_ms=$("$python" -c '
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l and "event" not in l]
print(round(statistics.median(s["ms"] for s in steps[int(sys.argv[2]):]), 2))' "$log" "$warmup")
        else
            weft_ms="failed"; tail -3 "$work/weft.out" >&2
        fi
        speedup=$("$python" -c 'import sys
try: print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}x")
except ValueError: print("-")' "$torch_ms" "$weft_ms")
        printf "%-15s %3s %6s %10s %10s %8s\n" "$schedule" "$pp" "$layers" "$torch_ms" "$weft_ms" "$speedup"
    done
done
