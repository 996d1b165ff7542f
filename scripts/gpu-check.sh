#!/usr/bin/env bash
# The one prepared GPU check (under 8 minutes on one H200): builds weft's CUDA tests,
# benchmarks and examples/cuda/train_gpt_cuda (Release, sm_90), runs the CUDA tests, trains
# 20 steps with train_gpt_cuda against the CPU's train_gpt, then the GPU benchmarks.
#
#   scripts/gpu-check.sh --prepare   # here: copy header-only Debian deps (Eigen, Catch2,
#                                    # nlohmann/json, CLI11)
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
    # The examples' (train_gpt_cuda's) command lines and the checkpoints' JSON headers.
    mkdir -p "$deps/share/cmake"
    cp -r /usr/include/nlohmann /usr/include/CLI "$deps/include/"
    cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$deps/share/cmake/"
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
      -DWEFT_ENABLE_MPI=OFF -DWEFT_BUILD_EXAMPLES=ON -DWEFT_BUILD_BENCHMARKS=ON

# Build only what this check runs (the CPU tests and benchmarks are CI's job).
targets=(test_cuda_runtime)
benches=()
# The NCCL communicator's test (1 GPU, a 1-rank communicator; this check has no MPI).
if ninja -C build/gpu -t query test_comm_nccl >/dev/null 2>&1; then targets+=(test_comm_nccl); fi
if ninja -C build/gpu -t query test_cuda_kernels >/dev/null 2>&1; then
    targets+=(test_cuda_kernels test_cuda_gpt_trainer bench_cuda_gemm bench_cuda_kernels bench_cuda_gpt
              train_gpt_cuda train_gpt make_dataset)
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

if [[ -x build/gpu/examples/cuda/train_gpt_cuda ]]; then
    # 20 steps of train_gpt's default model (4 layers, d 128, seq 64, batch 8) on one GPU,
    # and the same run on the CPU: same data order and seeded weights, so the losses agree
    # within bf16 tolerance (step 0 is the forward alone: 1e-2; the rest 5e-2). Then the
    # CPU trainer loads the GPU's checkpoint.
    echo "=== gpu-check: train_gpt_cuda, 20 steps"
    run=build/gpu/train_gpt_cuda_check
    mkdir -p "$run"
    input=()
    if [[ ! -f /usr/share/common-licenses/GPL-3 ]]; then input=(--input README.md); fi
    example_status=0
    build/gpu/examples/make_dataset "${input[@]}" --out-dir "$run/data" >/dev/null || example_status=$?
    timeout 120 build/gpu/examples/cuda/train_gpt_cuda --data "$run/data/train.bin" --steps 20 \
        --log-json "$run/gpu.jsonl" --save "$run/gpu.safetensors" || example_status=$?
    timeout 120 build/gpu/examples/train_gpt --data "$run/data/train.bin" --steps 20 --peak-tflops 1 \
        --log-json "$run/cpu.jsonl" >/dev/null || example_status=$?
    timeout 60 build/gpu/examples/train_gpt --data "$run/data/train.bin" --steps 1 --peak-tflops 1 \
        --init-from "$run/gpu.safetensors" || example_status=$?
    python3 - "$run/gpu.jsonl" "$run/cpu.jsonl" <<'PY' || example_status=$?
import json, sys
gpu, cpu = ([json.loads(line)["loss"] for line in open(path)] for path in sys.argv[1:3])
assert len(gpu) == len(cpu) == 20, f"{len(gpu)} GPU and {len(cpu)} CPU steps logged, 20 expected"
diffs = [abs(g - c) for g, c in zip(gpu, cpu)]
print(f"train_gpt_cuda vs train_gpt: step 0 loss {gpu[0]:.4f} vs {cpu[0]:.4f}, step 19 {gpu[-1]:.4f} vs "
      f"{cpu[-1]:.4f}, largest difference {max(diffs):.2e} (step {diffs.index(max(diffs))})")
sys.exit(0 if diffs[0] <= 1e-2 and max(diffs) <= 5e-2 else 1)
PY
    echo "=== gpu-check: train_gpt_cuda done in $(elapsed) (exit $example_status)"
    if [[ $example_status -ne 0 && $status -eq 0 ]]; then status=$example_status; fi
fi

echo "=== gpu-check: GPU benchmarks"
# Per-bench limits keep the whole check under 8 minutes even if one of them hangs.
declare -A bench_timeout=([bench_cuda_gemm]=90 [bench_cuda_kernels]=90 [bench_cuda_gpt]=150)
for bench in "${benches[@]}"; do
    echo "--- $bench"
    timeout "${bench_timeout[$bench]:-120}" "build/gpu/benchmarks/cuda/$bench" || echo "--- $bench exited $?"
done
echo "=== gpu-check: done in $(elapsed)"
exit "$status"
