#!/usr/bin/env bash
# The one prepared GPU check (under 8 minutes on one H200): builds weft with CUDA,
# runs the CUDA tests, then the GPU benchmarks, and prints their figures.
#
#   scripts/gpu-check.sh --prepare   # here: copy header-only Debian deps (Eigen, Catch2)
#                                    # into .gpu-deps/ (git-ignored) to carry to the GPU machine
#   scripts/gpu-check.sh             # on the GPU machine (no network there)
#
# With the device tool: run(command="bash scripts/gpu-check.sh", carry=[".gpu-deps"]).
set -euo pipefail
cd "$(dirname "$0")/.."

deps=.gpu-deps
if [[ "${1:-}" == "--prepare" ]]; then
    rm -rf "$deps"
    mkdir -p "$deps/include" "$deps/share/eigen3" "$deps/lib/cmake"
    cp -r /usr/include/eigen3 "$deps/include/"
    cp -r /usr/share/eigen3/cmake "$deps/share/eigen3/"
    cp -r /usr/include/catch2 "$deps/include/"
    cp -r /usr/lib/cmake/Catch2 "$deps/lib/cmake/"
    # The CMake configs locate headers relative to themselves; check they still do.
    du -sh "$deps"
    exit 0
fi

start=$(date +%s)
echo "=== gpu-check: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
prefix=()
if [[ -d "$deps" ]]; then prefix=(-DCMAKE_PREFIX_PATH="$PWD/$deps"); fi
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" \
      -DWEFT_ENABLE_MPI=OFF -DWEFT_BUILD_EXAMPLES=OFF -DWEFT_BUILD_BENCHMARKS=OFF
cmake --build build/gpu -j "$(nproc)" --target test_cuda_runtime
echo "=== gpu-check: CUDA tests"
ctest --test-dir build/gpu -L cuda --output-on-failure --no-tests=error
echo "=== gpu-check: GPU benchmarks"
echo "(none yet: the CUDA compute backend and its benchmarks arrive with the GPT issue)"
echo "=== gpu-check: done in $(( $(date +%s) - start )) s"
