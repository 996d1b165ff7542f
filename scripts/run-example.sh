#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a pipelined training run: installs what
# is missing, builds examples/train_gpt and make_dataset, makes the small real data set
# (byte tokens of Debian's GPL-3 text) and trains GPT-2 on 4 MPI ranks with ZB-H1.
# Extra arguments replace train_gpt's defaults here (e.g. --schedule 1f1b --steps 50).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source scripts/env.sh
# Without -Werror, as gpu-check.sh: this build is for running. A warning that only -O2's or
# -O3's inlining brings out must not stop it; CI's build (-O1, docs/building.md) and the release
# preset's are where warnings fail.
cmake --preset release -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCHMARKS=OFF -DWEFT_WARNINGS_AS_ERRORS=OFF
cmake --build --preset release --target train_gpt make_dataset -j "$jobs"
data=build/release/data
build/release/examples/make_dataset --out-dir "$data"
args=(--schedule zb-h1 --pp 4 --microbatches 8 --batch 8 --layers 4 --d-model 128 --heads 4 --seq-len 64 --steps 30)
if (($# > 0)); then args=("$@"); fi
mpirun -np 4 --oversubscribe build/release/examples/train_gpt --data "$data/train.bin" "${args[@]}"
