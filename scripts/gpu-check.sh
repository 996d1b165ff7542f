#!/usr/bin/env bash
# The one prepared GPU check (under 8 minutes on one H200). Builds weft's CUDA tests,
# benchmarks and train_gpt (Release, sm_90), then runs, and prints one table of:
#   - the CUDA tests (ctest -L cuda);
#   - 20 steps of train_gpt --device cuda (pp=1) against the same run on the CPU, loss by loss;
#   - 20 steps of a 2-stage zb-h1 pipeline on the one GPU (two rank threads over
#     comm::host_staged) against the pp=1 GPU run;
#   - 20 steps with --cuda-graphs (pp=1, pp=2 zb-h1) against the eager runs, bit for bit, with
#     step 19's time and the device memory each held;
#   - 20 steps of tp=2 on the one GPU (two rank threads) against the pp=1 GPU run;
#   - 20 steps with --attention-kernel mma (the mma.sync attention kernels) against pp=1;
#   - MFU of GPT-2 124M at seq 1024, batch 16 (llm.c's 6N + 6LCT flops per token against
#     the GPU's dense bf16 peak), with its step time and bubble, eager, with the mma.sync
#     attention kernels and with --cuda-graphs, and the device memory each held;
#   - where GPT-2 124M's step time goes, by kernel and GEMM (train_gpt --kernel-profile);
#   - the flash attention kernels' TFLOP/s (forward, backward) against the best GEMM TFLOP/s of
#     bench_cuda_gemm, the mma.sync attention kernels' against them, and the embedding
#     gradient's, the cross-entropy's, the column sums' and the GELU epilogues' times at
#     GPT-2's shapes;
#   - in what is left of its time, test_cuda_backend under compute-sanitizer's memcheck and the
#     mma.sync attention kernels' test under its racecheck.
#
#   scripts/gpu-check.sh --prepare   # here: copy header-only Debian deps (Eigen, Catch2,
#                                    # nlohmann/json, CLI11) and the GPL-3 text the runs train
#                                    # on into .gpu-deps/ (git-ignored) to carry to the GPU machine
#   scripts/gpu-check.sh             # on the GPU machine (no network there)
#
# With the device tool: run(command="bash scripts/gpu-check.sh", carry=[".gpu-deps"], timeout_s=540).
#
# The whole check keeps to a budget, WEFT_GPU_CHECK_SECONDS (default 450, under the 8 minutes
# it is given): every step's own time limit is cut to what is left of it, so a step that
# hangs costs its own result, not the table, and the table and the logs always come out
# before the device tool's limit (set that above the budget) would stop the check unseen.
set -uo pipefail
cd "$(dirname "$0")/.."

deps=.gpu-deps
if [[ "${1:-}" == "--prepare" ]]; then
    set -e
    rm -rf "$deps"
    mkdir -p "$deps/include" "$deps/share/eigen3" "$deps/lib/cmake" "$deps/share/cmake"
    cp -r /usr/include/eigen3 "$deps/include/"
    cp -r /usr/share/eigen3/cmake "$deps/share/eigen3/"
    cp -r /usr/include/catch2 "$deps/include/"
    cp -r /usr/lib/cmake/Catch2 "$deps/lib/cmake/"
    # train_gpt's command line and the checkpoints' JSON headers.
    cp -r /usr/include/nlohmann /usr/include/CLI "$deps/include/"
    cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$deps/share/cmake/"
    # Catch2Targets.cmake checks that the library it names exists, even though weft uses
    # its own main and never links it.
    if [[ -f /usr/lib/libCatch2WithMain.a ]]; then cp /usr/lib/libCatch2WithMain.a "$deps/lib/"; fi
    # The text the examples' tests and the runs below train on, for a machine without it.
    cp /usr/share/common-licenses/GPL-3 "$deps/"
    du -sh "$deps"
    exit 0
fi

budget=${WEFT_GPU_CHECK_SECONDS:-450}
# (No leading zero: bash would read 0450 as octal.)
if ! [[ $budget =~ ^[1-9][0-9]*$ ]] || (( budget < 60 || budget > 3600 )); then
    echo "weft: WEFT_GPU_CHECK_SECONDS is '$budget': the check's budget must be whole seconds from 60 to 3600" >&2
    exit 2
fi
# The build folder, and beside it the logs ("$build"-configure.log, ...): build/gpu unless
# WEFT_GPU_CHECK_BUILD_DIR names another, relative to the checkout (the test of the budget
# builds outside it).
build=${WEFT_GPU_CHECK_BUILD_DIR:-build/gpu}
start=$(date +%s)
deadline=$(( start + budget ))
elapsed() { echo "$(( $(date +%s) - start )) s"; }
# Seconds of the budget left for steps: the last 15 print the table and pack the logs.
seconds_left() { echo $(( deadline - 15 - $(date +%s) )); }
# within LIMIT COMMAND...: COMMAND under a time limit of LIMIT seconds, cut to what is left of
# the budget. Exits 124 when it ran out (as timeout does) and 125 when too little was left to
# start it; either way a line on stderr says so, which lands in the step's log and so in its row.
within() {
    local limit=$1 left
    shift
    left=$(seconds_left)
    if (( left < 5 )); then
        echo "gpu-check: not started, the check's ${budget} s budget is spent ($(elapsed))" >&2
        return 125
    fi
    if (( left < limit )); then limit=$left; fi
    local began code
    began=$(date +%s)
    # KILL 5 s after TERM: the reserve above covers it. In the background and waited for, so
    # that a signal to the check runs its trap at once (bash holds a trap until a foreground
    # command ends, and timeout's own process group does not get the signal the check got).
    timeout --kill-after=5 "$limit" "$@" &
    step_pid=$!
    wait "$step_pid"
    code=$?
    step_pid=""
    # 137: killed, by timeout when TERM was not enough (or by the kernel, sooner: not ours).
    if (( code == 124 || (code == 137 && $(date +%s) - began >= limit) )); then
        echo "gpu-check: stopped after ${limit} s (its limit within the budget)" >&2
    fi
    return "$code"
}
declare -a table=()
row() { table+=("$(printf '| %-44s | %-6s | %s |' "$1" "$2" "$3")"); }
print_table() {
    echo
    echo "=== gpu-check: summary ($(elapsed))"
    printf '| %-44s | %-6s | %s |\n' "check" "result" "figures"
    printf '|%s|%s|%s|\n' "----------------------------------------------" "--------" "--------"
    for line in "${table[@]}"; do echo "$line"; done
}
status=0
fail() { status=1; }
# The table, and with the device tool the logs too (its reply holds only the output's end:
# a failed build or test needs the rest), then the exit status $1.
finish() {
    print_table
    if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
        tar czf "$OUT/gpu-check-logs.tar.gz" "$build"-*.log "$build"/check_runs/*.log \
            "$build"/check_runs/*.jsonl "$build"/Testing/Temporary/LastTest*.log 2>/dev/null
    fi
    exit "$1"
}
# Killed from outside (a time limit), the table so far and the logs still come out; the step
# running then (within, above) is stopped first. The table goes to the check's own output
# (fd 3, 4), not to the log the interrupted step's output was going to.
exec 3>&1 4>&2
step_pid=""
trap 'if [[ -n $step_pid ]]; then kill -TERM "$step_pid" 2>/dev/null; fi
      { row "gpu-check" "FAIL" "stopped by a signal after $(elapsed)"; finish 124; } >&3 2>&4' TERM INT

mkdir -p "$(dirname "$build")"  # a fresh checkout has no build/, and the logs go there
echo "=== gpu-check: $(within 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
prefix=()
if [[ -d "$deps" ]]; then prefix=(-DCMAKE_PREFIX_PATH="$PWD/$deps"); fi
text=/usr/share/common-licenses/GPL-3
if [[ ! -f "$text" && -f "$deps/GPL-3" ]]; then text="$PWD/$deps/GPL-3"; fi
nvcc=()
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    nvcc=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
# NCCL: the system's where it has one, else the one in Python's NCCL wheel (nvidia-nccl-cu*),
# as on a machine whose CUDA libraries came with PyTorch. Without either, everything but
# test_comm_nccl still builds and runs (host staging needs no NCCL).
nccl=()
system_nccl=no
for header in /usr/include/nccl.h /usr/local/include/nccl.h /usr/local/cuda/include/nccl.h \
        /usr/local/cuda/targets/*/include/nccl.h; do
    if [[ -f "$header" ]]; then system_nccl=yes; fi
done
if [[ $system_nccl == no ]]; then
    sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' \
        2>/dev/null)
    for site in $sites; do
        header=$(find -L "$site/nvidia" -name nccl.h 2>/dev/null | head -1)
        library=$(find -L "$site/nvidia" -name 'libnccl.so*' 2>/dev/null | head -1)
        if [[ -n "$header" && -n "$library" ]]; then
            nccl=(-DWEFT_NCCL_INCLUDE_DIR="$(dirname "$header")" -DWEFT_NCCL_LIBRARY="$library")
            echo "=== gpu-check: NCCL from Python's wheel: $library"
            break
        fi
    done
fi
# Warnings are not errors here: this machine's host compiler may be newer than CI's, and a
# warning new to it must not cost the one GPU run its results. They are counted in the table.
within 180 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" "${nvcc[@]}" "${nccl[@]}" \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DWEFT_ENABLE_MPI=OFF -DWEFT_BUILD_EXAMPLES=ON \
    -DWEFT_BUILD_BENCHMARKS=ON -DWEFT_BUILD_UNIT_TESTS=OFF -DWEFT_WARNINGS_AS_ERRORS=OFF \
    -DWEFT_DATASET_TEXT="$text" >"$build"-configure.log 2>&1
configure_status=$?
if (( configure_status != 0 )) || ! grep -q "^-- weft: MPI .*, CUDA ON" "$build"-configure.log; then
    cat "$build"-configure.log
    row "configure" "FAIL" "exit $configure_status; $(grep -m 1 "^gpu-check:" "$build"-configure.log ||
        echo "see the log above (weft needs the CUDA toolkit found: 'CUDA ON')")"
    finish 1
fi
grep -E "^-- weft:" "$build"-configure.log

# Only what this check runs (the CPU tests are CI's job).
targets=(test_cuda_runtime test_cuda_interval_clock test_comm_host_staged test_comm_device_direct test_cuda_kernels test_cuda_backend
         test_cuda_engine
         bench_cuda_gemm bench_cuda_kernels train_gpt make_dataset)
if grep -q "^-- weft: MPI .*, NCCL ON" "$build"-configure.log; then
    targets+=(test_comm_nccl)
else
    row "NCCL" "skip" "not found (system or Python wheel): test_comm_nccl not built"
fi
within 360 cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$build"-build.log 2>&1
build_status=$?
if (( build_status != 0 )); then
    grep -E "error|Error|^gpu-check:" "$build"-build.log | head -40
    row "build (${targets[*]})" "FAIL" \
        "exit $build_status; $(grep -m 1 "^gpu-check:" "$build"-build.log || echo "see the errors above")"
    finish 1
fi
warnings=$(grep -c "warning" "$build"-build.log)
if [[ $warnings -gt 0 ]]; then
    grep -m 10 "warning" "$build"-build.log
    row "build warnings (errors in CI)" "report" "$warnings lines with 'warning': the first 10 are above"
fi
echo "=== gpu-check: built in $(elapsed)"

echo "=== gpu-check: CUDA tests"
within 300 ctest --test-dir "$build" -L cuda --output-on-failure --no-tests=error --timeout 240 >"$build"-ctest.log 2>&1
ctest_status=$?
cat "$build"-ctest.log | tail -40
summary="$(grep -E "tests passed|tests failed" "$build"-ctest.log | tail -1)"
summary="${summary:-no summary: $(tail -1 "$build"-ctest.log)}"  # stopped by its time limit
summary+="; $(grep -c '(Skipped)' "$build"-ctest.log) skipped"
if [[ $ctest_status -eq 0 ]]; then row "CUDA tests (ctest -L cuda)" "pass" "$summary"; else
    row "CUDA tests (ctest -L cuda)" "FAIL" "$summary; failed: $(grep -E '^\s+[0-9]+ - ' "$build"-ctest.log | grep -v Skipped | awk '{print $3}' | tr '\n' ' ')"
    fail
fi
echo "=== gpu-check: tests done in $(elapsed)"

# Without a GPU (test_cuda_runtime's exit 77) the build and the skipped tests are all there is
# to see: the runs below would each fail for want of a device, so stop here with 77 too.
within 60 "$build"/tests/exec/cuda/test_cuda_runtime >/dev/null 2>&1
if [[ $? -eq 77 ]]; then
    row "GPU" "skip" "no CUDA device: built, and the CUDA tests skip; the runs and benchmarks need one"
    finish $(( status != 0 ? 1 : 77 ))  # a test that failed without a GPU is a failure still
fi

run="$build"/check_runs
mkdir -p "$run"
input=(--input "$text")
if [[ ! -f "$text" ]]; then input=(--input README.md); fi
within 60 "$build"/examples/make_dataset "${input[@]}" --out-dir "$run/data" >/dev/null
train=("$build"/examples/train_gpt --data "$run/data/train.bin")

# The losses of two step logs (--log-json) $1 and $2: tolerance $3 on every step, $4 on
# step 0 (the forward of identical weights). Prints the figures; fails outside tolerance.
compare_losses() {
    python3 - "$1" "$2" "$3" "$4" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in sys.argv[1:3])
tol, tol0 = float(sys.argv[3]), float(sys.argv[4])
if len(a) != len(b) or not a:
    print(f"{len(a)} and {len(b)} steps logged"); sys.exit(1)
d = [abs(x - y) for x, y in zip(a, b)]
print(f"step 0 {a[0]:.4f} vs {b[0]:.4f}, step {len(a)-1} {a[-1]:.4f} vs {b[-1]:.4f}, "
      f"largest difference {max(d):.2e} at step {d.index(max(d))} (tolerance {tol:g})")
sys.exit(0 if d[0] <= tol0 and max(d) <= tol else 1)
PY
}

# A table row for a run that exited with status $2 (its output in $3), comparing its step
# log $4 with $5 (tolerances $6 on every step, $7 on step 0): row "$1".
loss_row() {
    local figures=""
    if [[ $2 -eq 0 ]] && figures=$(compare_losses "$4" "$5" "$6" "$7"); then
        row "$1" "pass" "$figures"
    else
        row "$1" "FAIL" "exit $2; ${figures:-$(tail -1 "$3")}"
        fail
    fi
}

echo "=== gpu-check: train_gpt --device cuda, 20 steps, against the CPU"
# train_gpt's default model (4 layers, d 128, 4 heads, seq 64, batch 8): the same seeded
# weights and data order on both, so the losses agree within bf16 rounding of the GEMMs.
within 150 "${train[@]}" --device cuda --steps 20 --log-json "$run/gpu_pp1.jsonl" >"$run/gpu_pp1.log" 2>&1
gpu_status=$?
within 150 "${train[@]}" --steps 20 --peak-tflops 1 --log-json "$run/cpu_pp1.jsonl" >"$run/cpu_pp1.log" 2>&1
tail -3 "$run/gpu_pp1.log"
loss_row "pp=1, 20 steps: GPU vs CPU losses" "$gpu_status" "$run/gpu_pp1.log" \
    "$run/gpu_pp1.jsonl" "$run/cpu_pp1.jsonl" 5e-2 1e-2

echo "=== gpu-check: pp=2 zb-h1 on one GPU (two rank threads, comm::host_staged) against pp=1"
within 150 "${train[@]}" --device cuda --steps 20 --ranks 2 --pp 2 --schedule zb-h1 \
    --log-json "$run/gpu_pp2.jsonl" >"$run/gpu_pp2.log" 2>&1
pp2_status=$?
tail -3 "$run/gpu_pp2.log"
loss_row "pp=2 zb-h1 (1 GPU) vs pp=1 GPU losses" "$pp2_status" "$run/gpu_pp2.log" \
    "$run/gpu_pp2.jsonl" "$run/gpu_pp1.jsonl" 1e-2 1e-3

echo "=== gpu-check: --cuda-graphs (each F, B, I and W replayed from a graph) against the eager runs"
# The graphs hold the eager runs' kernels in the same order on the same addresses' data, and
# the kernels reduce in a fixed order: the losses must be the eager runs' bit for bit.
within 150 "${train[@]}" --device cuda --cuda-graphs --steps 20 --log-json "$run/gpu_graphs.jsonl" \
    >"$run/gpu_graphs.log" 2>&1
graphs_status=$?
tail -3 "$run/gpu_graphs.log"
loss_row "pp=1 --cuda-graphs vs eager pp=1 losses" "$graphs_status" "$run/gpu_graphs.log" \
    "$run/gpu_graphs.jsonl" "$run/gpu_pp1.jsonl" 0 0
within 150 "${train[@]}" --device cuda --cuda-graphs --steps 20 --ranks 2 --pp 2 --schedule zb-h1 \
    --log-json "$run/gpu_graphs_pp2.jsonl" >"$run/gpu_graphs_pp2.log" 2>&1
graphs_pp2_status=$?
tail -3 "$run/gpu_graphs_pp2.log"
loss_row "pp=2 zb-h1 --cuda-graphs vs eager pp=2 losses" "$graphs_pp2_status" "$run/gpu_graphs_pp2.log" \
    "$run/gpu_graphs_pp2.jsonl" "$run/gpu_pp2.jsonl" 0 0
step_ms() { grep -E "^step 19 " "$1" | grep -oE '[0-9.]+ ms' | head -1; }
row "step 19 time, eager vs --cuda-graphs" "report" \
    "pp=1 $(step_ms "$run/gpu_pp1.log") vs $(step_ms "$run/gpu_graphs.log"); pp=2 $(step_ms "$run/gpu_pp2.log") vs $(step_ms "$run/gpu_graphs_pp2.log")"
# train_gpt's "device memory" line: the most the stream-ordered pool and the graphs' pool held.
# (Two peaks, each in its own pool and at its own time: they do not add up.)
device_mib() { grep -oE 'stream pool [0-9.]+ MiB \| action graphs [0-9.]+ MiB' "$1" | sed 's/ | /, /'; }
row "device memory high-water, eager vs graphs" "report" \
    "pp=1 $(device_mib "$run/gpu_pp1.log") vs $(device_mib "$run/gpu_graphs.log"); pp=2 $(device_mib "$run/gpu_pp2.log") vs $(device_mib "$run/gpu_graphs_pp2.log")"

echo "=== gpu-check: tp=2 on one GPU (two rank threads, comm::host_staged) against pp=1"
# The tensor-parallel steps between kernels run on host copies (nn/tensor_parallel.hpp): the
# partial products are summed in fp32 and rounded once, so bf16 rounds at other points.
within 150 "${train[@]}" --device cuda --steps 20 --ranks 2 --tp 2 \
    --log-json "$run/gpu_tp2.jsonl" >"$run/gpu_tp2.log" 2>&1
tp2_status=$?
tail -3 "$run/gpu_tp2.log"
loss_row "tp=2 (1 GPU) vs pp=1 GPU losses" "$tp2_status" "$run/gpu_tp2.log" \
    "$run/gpu_tp2.jsonl" "$run/gpu_pp1.jsonl" 3e-2 1e-2

echo "=== gpu-check: --attention-kernel mma (scores in registers) against the WMMA kernels' pp=1 run"
# Both round the probabilities to bf16 at the same points and differ in the order of fp32
# sums only, so the losses agree as closely as pp=2's with pp=1's.
within 150 "${train[@]}" --device cuda --attention-kernel mma --steps 20 --log-json "$run/gpu_mma.jsonl" \
    >"$run/gpu_mma.log" 2>&1
mma_status=$?
tail -3 "$run/gpu_mma.log"
loss_row "pp=1 --attention-kernel mma vs wmma losses" "$mma_status" "$run/gpu_mma.log" \
    "$run/gpu_mma.jsonl" "$run/gpu_pp1.jsonl" 1e-2 1e-3

echo "=== gpu-check: GPT-2 124M, seq 1024, batch 16: MFU"
# The vocabulary padded to 50304 (a multiple of 64), as llm.c measures GPT-2 124M: 50257
# gives the LM head's GEMMs rows that start off 16-byte alignment, which tensor cores want
# (test_cuda_backend checks such an odd width for correctness).
gpt2_124m=(--device cuda --layers 12 --d-model 768 --heads 12 --vocab 50304 --seq-len 1024 --batch 16
           --microbatches 1 --steps 4 --lr 6e-4)
# Trains that GPT-2 for 4 steps with the further flags $4..., its output in $3, within $2 s,
# and adds row "$1": the last step's time, bubble and MFU, and the device memory it held.
mfu_row() {
    local name=$1 limit=$2 log=$3 code last_step
    shift 3
    within "$limit" "${train[@]}" "${gpt2_124m[@]}" "$@" >"$log" 2>&1
    code=$?
    grep -E "^step|device cuda|MFU is" "$log" | tail -6
    last_step=$(grep -E "^step" "$log" | tail -1)
    if [[ $code -eq 0 && -n "$last_step" ]]; then
        row "$name" "report" \
            "$(echo "$last_step" | grep -oE '[0-9.]+ ms|bubble [0-9.]+%|MFU [0-9.]+%' | tr '\n' ' ')(last of 4 steps); $(device_mib "$log")"
    else
        row "$name" "FAIL" "exit $code; $(tail -1 "$log")"
        fail
    fi
}
mfu_row "GPT-2 124M seq 1024 batch 16: MFU (goal 50%)" 240 "$run/gpt2_124m.log"
# The same with the mma.sync attention kernels: what they would make of the MFU.
mfu_row "GPT-2 124M as above, mma attention: MFU" 150 "$run/gpt2_124m_mma.log" --attention-kernel mma
# The same with --cuda-graphs, unless less than 90 s of the budget are left: the benchmarks
# still have to fit in it.
if (( $(seconds_left) < 90 )); then
    row "GPT-2 124M as above, --cuda-graphs: MFU" "skip" "at $(elapsed) of $budget s: the rest is the benchmarks'"
else
    mfu_row "GPT-2 124M as above, --cuda-graphs: MFU" 150 "$run/gpt2_124m_graphs.log" --cuda-graphs
fi
# Where a GPT-2 124M step's GPU time goes, by kernel and GEMM (train_gpt --kernel-profile):
# the four longest and what is left outside them; the whole table is in the log.
profile_summary() {
    sed -n 's/^kernel profile | //p' "$1" | awk '
        /^operation \(per step\)/ { table = 1; next }
        !table || /^all of the above/ { next }
        /^the rest of the step/ { printf "rest of the step %s ms (%s)", $(NF - 1), $NF; next }
        shown < 4 {
            name = $1
            for (i = 2; i <= NF - 3; ++i) name = name " " $i
            printf "%s %s ms (%s); ", name, $(NF - 1), $NF
            ++shown
        }'
}
if (( $(seconds_left) < 90 )); then
    row "GPT-2 124M: step time by operation" "skip" "at $(elapsed) of $budget s: the rest is the benchmarks'"
else
    within 150 "${train[@]}" "${gpt2_124m[@]}" --kernel-profile >"$run/gpt2_124m_profile.log" 2>&1
    code=$?
    grep -E "^kernel profile" "$run/gpt2_124m_profile.log" | head -30
    if [[ $code -eq 0 ]] && grep -q "^kernel profile | the rest of the step" "$run/gpt2_124m_profile.log"; then
        row "GPT-2 124M: step time by operation" "report" "$(profile_summary "$run/gpt2_124m_profile.log")"
    else
        row "GPT-2 124M: step time by operation" "FAIL" "exit $code; $(tail -1 "$run/gpt2_124m_profile.log")"
        fail
    fi
fi
echo "=== gpu-check: training runs done in $(elapsed)"

echo "=== gpu-check: GPU benchmarks"
within 90 "$build"/benchmarks/cuda/bench_cuda_gemm >"$run/bench_gemm.log" 2>&1
within 90 "$build"/benchmarks/cuda/bench_cuda_kernels >"$run/bench_kernels.log" 2>&1
cat "$run/bench_gemm.log" "$run/bench_kernels.log" | tail -40
gemm_best=$(grep -oE '^best GEMM: [0-9.]+' "$run/bench_gemm.log" | grep -oE '[0-9.]+$')
for pass in forward backward; do
    attention=$(grep -E "^flash_attention_$pass" "$run/bench_kernels.log" | grep -oE '[0-9.]+ TFLOP/s' | head -1)
    exact=$(grep -E "^exact attention_$pass" "$run/bench_kernels.log" | grep -oE '[0-9.]+ TFLOP/s' | head -1)
    if [[ -n "$attention" && -n "$gemm_best" ]]; then
        # awk, not a Python f-string: quotes nested in one need Python 3.12 (Debian 12 has 3.11).
        ratio=$(awk -v a="${attention% TFLOP/s}" -v b="$gemm_best" 'BEGIN { printf "%.1f", 100 * a / b }')
        row "flash attention $pass TFLOP/s vs best GEMM" "report" \
            "$attention vs $gemm_best TFLOP/s (${ratio}%); exact kernel ${exact:-?}"
    else
        row "flash attention $pass TFLOP/s vs best GEMM" "FAIL" "no figure (see the benchmark output above)"
        fail
    fi
done
# The mma.sync kernels (flash_attention_mma.cuh), not yet the default: their speed beside
# the WMMA kernels above; whether they are right is test_cuda_attention_mma's row in the tests.
for pass in forward backward; do
    mma=$(grep -E "^flash_attention_mma_$pass" "$run/bench_kernels.log" | grep -oE '[0-9.]+ TFLOP/s' | head -1)
    wmma=$(grep -E "^flash_attention_$pass" "$run/bench_kernels.log" | grep -oE '[0-9.]+ TFLOP/s' | head -1)
    if [[ -n "$mma" && -n "$wmma" ]]; then
        speedup=$(awk -v a="${mma% TFLOP/s}" -v b="${wmma% TFLOP/s}" 'BEGIN { printf "%.2f", a / b }')
        row "attention (mma.sync) $pass TFLOP/s" "report" "$mma, ${speedup}x the WMMA kernel's $wmma"
    else
        row "attention (mma.sync) $pass TFLOP/s" "FAIL" "no figure (see the benchmark output above)"
        fail
    fi
done
embedding=$(grep -E "^embedding_backward" "$run/bench_kernels.log" | grep -oE '[0-9.]+ ms' | head -1)
grouping=$(grep -E "^group_rows_by_token" "$run/bench_kernels.log" | grep -oE '[0-9.]+ ms' | head -1)
skewed=$(grep -E "^embedding_backward, skewed" "$run/bench_kernels.log" | grep -oE '[0-9.]+ ms' | head -1)
row "embedding weight gradient, GPT-2 shapes" "report" \
    "device ${embedding:-?} (ids spread), ${skewed:-?} (ids skewed); host grouping ${grouping:-?}"
loss_kernel=$(grep -E "^cross_entropy fwd\+bwd" "$run/bench_kernels.log" | grep -oE '[0-9.]+ ms +[0-9.]+ GB/s' | head -1)
row "cross-entropy forward+backward, N x V" "report" "${loss_kernel:-?} (bench_cuda_kernels)"
# LayerNorm's weight gradient and the bias gradients, column sums in row chunks
# (kernels/column_sums.cuh). Before the chunks, on the H200: 0.114 ms (443 GB/s) and, for
# N x C, 0.025 ms (999 GB/s).
column_sum() {
    local figure
    figure=$(grep -E "^$1" "$run/bench_kernels.log" | grep -oE '[0-9.]+ ms +[0-9.]+ GB/s' | head -1 | tr -s ' ')
    echo "${figure:-?}"
}
row "column sums: LN weight, bias N x C, N x 4C" "report" "$(column_sum layer_norm_backward_weight);\
 $(column_sum 'bias_grad \(N x C\)'); $(column_sum 'bias_grad \(N x 4C\)')"

# GELU in the MLP's GEMM epilogues, as a step runs it (GPT-2 124M's rows come first); the
# plain GEMMs' rows of the same layers are in bench_gemm.log.
gelu_gemms=$(grep -E "^ +mlp\.c_(fc|proj) +(fwd\+GELU|dX\*GELU')" "$run/bench_gemm.log" | head -2 |
    awk '{ if ($3 == "no") printf "%s %s: no cuBLASLt algorithm; ", $1, $2; else printf "%s %s %s ms; ", $1, $2, $6 }')
row "GELU in GEMM epilogues, GPT-2 124M" "report" "${gelu_gemms:-?}"

# The kernels' tests once more under compute-sanitizer, last, in what is left of the budget
# (the issue's figures above come first, and the tools slow the tests many times over):
# memcheck over the backend's kernels (a write past a partial tile can land in memory that
# belongs to no check: the next sequence's rows, pool memory), then racecheck over the
# mma.sync attention kernels (shared tiles refilled one tile ahead while other warps read;
# the test runs the WMMA kernels too, as its reference, so a hazard there shows in this row).
#   sanitizer_row ROW TOOL LOG LIMIT COMMAND...
sanitizer_row() {
    local name=$1 tool=$2 log=$3 limit=$4 code cut
    shift 4
    within "$limit" "$sanitizer" --tool "$tool" --error-exitcode 3 "$@" >"$log" 2>&1
    code=$?
    tail -5 "$log"
    case $code in
        0) row "$name" "pass" "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)" ;;
        124 | 125 | 137) # out of time, unless a 137 came from elsewhere (the kernel's OOM killer)
            if cut=$(grep -m 1 "^gpu-check:" "$log"); then
                row "$name" "skip" "$cut"
            else
                row "$name" "FAIL" "exit $code; $(tail -1 "$log")"
                fail
            fi ;;
        *) row "$name" "FAIL" "exit $code; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
           fail ;;
    esac
}
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [[ -n "$sanitizer" ]]; then
    sanitizer_row "memcheck (test_cuda_backend)" memcheck "$build"-memcheck.log 120 \
        "$build"/tests/exec/cuda/test_cuda_backend
    sanitizer_row "racecheck (test_cuda_kernels attention_mma)" racecheck "$build"-racecheck.log 90 \
        "$build"/tests/exec/cuda/test_cuda_kernels attention_mma
else
    row "memcheck, racecheck" "skip" "no compute-sanitizer on this machine"
fi

finish "$status"
