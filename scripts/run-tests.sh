#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to the whole test suite: installs what
# is missing, builds everything with warnings as errors and runs every test but the host
# unit tests (the examples' and reference runs, benchmarks' smoke runs, header, package,
# compile-fail and CUDA tests), then builds and runs the unit tests under
# AddressSanitizer+UBSan and the threaded ones again under ThreadSanitizer. Each check
# thus runs once per build that can tell something new, not once per preset
# (docs/building.md, "Presets"). Last, the `ft` preset builds against Open MPI 5 with ULFM
# (.venv-ft) and runs the elastic tests, which survive a crash. Each build after the first runs
# beside the tests before it, at the lowest CPU priority. Any failure stops it with a non-zero
# exit. WEFT_TEST_PRESETS picks the presets, e.g. WEFT_TEST_PRESETS="asan ft".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --tests --ft
source scripts/env.sh

build_preset() {
    echo "=== weft: ${1} build ==="
    cmake --preset "$1"
    cmake --build --preset "$1" -j "$jobs"
}
test_preset() {
    echo "=== weft: ${1} tests ==="
    # One test more than cores: MPI ranks and watchdogs spend part of their time waiting, and
    # the extra test fills it (the asan tests ran 12% faster on 2 cores; release and tsan the
    # same).
    ctest --preset "$1" -j "$((jobs + 1))"
}

presets=(ci-release asan tsan ft)
if [[ -n "${WEFT_TEST_PRESETS:-}" ]]; then read -r -a presets <<<"$WEFT_TEST_PRESETS"; fi

# Each preset's build runs beside the tests of the one before it, at the lowest CPU priority
# (nice 19): the tests spend much of their time waiting on MPI ranks, sockets, timeouts and
# child processes, and the build takes the CPU they leave, while the tests still get the CPU
# whenever they want it (a nice-19 process gets about 1.5 % of a contended core). Its output
# is kept aside and printed after the tests, so the log reads in order. A failed build or
# test stops the run, and a build still going is stopped with it.
background=""
trap '[[ -n $background ]] && kill -- -"$background" 2>/dev/null || true' EXIT
build_preset "${presets[0]}"
for i in "${!presets[@]}"; do
    next=${presets[$((i + 1))]:-}
    if [[ -n $next ]]; then
        next_log=$(mktemp)
        set -m  # its own process group, so that the trap stops the whole build
        (renice -n 19 -p "$BASHPID" >/dev/null; build_preset "$next") >"$next_log" 2>&1 &
        background=$!
        set +m
    fi
    test_preset "${presets[$i]}"
    if [[ -n $next ]]; then
        build_status=0
        wait "$background" || build_status=$?
        background=""
        cat "$next_log"
        rm -f "$next_log"
        if [[ $build_status -ne 0 ]]; then
            echo "=== weft: the ${next} build failed (exit ${build_status}) ==="
            exit "$build_status"
        fi
    fi
done
echo "=== weft: all test presets passed: ${presets[*]} ==="
