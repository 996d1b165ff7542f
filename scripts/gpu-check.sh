#!/usr/bin/env bash
# The one prepared GPU check (under 8 minutes on one H200): builds weft's CUDA tests and
# benchmarks (Release, sm_90), runs the CUDA tests, then the GPU benchmarks, and prints their figures.
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
    # Catch2Targets.cmake checks that the library it names exists, even though weft uses
    # its own main and never links it.
    if [[ -f /usr/lib/libCatch2WithMain.a ]]; then cp /usr/lib/libCatch2WithMain.a "$deps/lib/"; fi
    # The CMake configs locate headers relative to themselves; check they still do.
    du -sh "$deps"
    exit 0
fi

start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start )) s"; }
echo "=== gpu-check: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
prefix=()
if [[ -d "$deps" ]]; then prefix=(-DCMAKE_PREFIX_PATH="$PWD/$deps"); fi
nvcc=()
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    nvcc=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" "${nvcc[@]}" \
      -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DWEFT_ENABLE_MPI=OFF -DWEFT_BUILD_EXAMPLES=OFF -DWEFT_BUILD_BENCHMARKS=ON

# Build only what this check runs (the CPU tests and benchmarks are CI's job).
targets=(test_cuda_runtime)
benches=()
if ninja -C build/gpu -t query test_cuda_kernels >/dev/null 2>&1; then
    targets+=(test_cuda_kernels test_cuda_gpt_model bench_cuda_gemm bench_cuda_kernels bench_cuda_gpt)
    benches=(bench_cuda_gemm bench_cuda_kernels bench_cuda_gpt)
else
    echo "=== gpu-check: WARNING: no CUDA compiler found; only the runtime smoke test is built"
fi
cmake --build build/gpu -j "$(nproc)" --target "${targets[@]}"
echo "=== gpu-check: built in $(elapsed)"

echo "=== gpu-check: CUDA tests"
status=0
ctest --test-dir build/gpu -L cuda --output-on-failure --no-tests=error --timeout 180 || status=$?
echo "=== gpu-check: tests done in $(elapsed) (ctest exit $status)"

echo "=== gpu-check: GPU benchmarks"
# Per-bench limits keep the whole check under 8 minutes even if one of them hangs.
declare -A bench_timeout=([bench_cuda_gemm]=90 [bench_cuda_kernels]=90 [bench_cuda_gpt]=150)
for bench in "${benches[@]}"; do
    echo "--- $bench"
    timeout "${bench_timeout[$bench]:-120}" "build/gpu/benchmarks/cuda/$bench" || echo "--- $bench exited $?"
done
echo "=== gpu-check: done in $(elapsed)"
exit "$status"
