#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a pipelined training run:
# installs what is missing, builds examples/train_mlp and runs it on 4 MPI ranks.
# Extra arguments go to train_mlp (e.g. --schedule gpipe --steps 20).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source scripts/env.sh
cmake --preset release -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCHMARKS=OFF
cmake --build --preset release --target train_mlp -j "$jobs"
args=(--schedule 1f1b --pp 4 --microbatches 8 --steps 50)
if (($# > 0)); then args=("$@"); fi
mpirun -np 4 --oversubscribe build/release/examples/train_mlp "${args[@]}"
