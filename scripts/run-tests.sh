#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to the whole test suite: installs what
# is missing, builds everything with warnings as errors and runs every test but the host
# unit tests (the examples' and reference runs, benchmarks' smoke runs, header, package,
# compile-fail and CUDA tests), then builds and runs the unit tests under
# AddressSanitizer+UBSan and the threaded ones again under ThreadSanitizer. Each check
# thus runs once per build that can tell something new, not once per preset
# (docs/building.md, "Presets"). Last, the `ft` preset builds against Open MPI 5 with ULFM
# (.venv-ft) and runs the elastic tests, which survive a crash. Any failure stops it with a
# non-zero exit. WEFT_TEST_PRESETS picks the presets, e.g. WEFT_TEST_PRESETS="asan ft".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --tests --ft
source scripts/env.sh

run_preset() {
    local preset=$1
    echo "=== weft: ${preset} build and tests ==="
    cmake --preset "$preset"
    cmake --build --preset "$preset" -j "$jobs"
    # One test more than cores: MPI ranks and watchdogs spend part of their time waiting, and
    # the extra test fills it (the asan tests ran 12% faster on 2 cores; release and tsan the
    # same).
    ctest --preset "$preset" -j "$((jobs + 1))"
}

presets=(ci-release asan tsan ft)
if [[ -n "${WEFT_TEST_PRESETS:-}" ]]; then read -r -a presets <<<"$WEFT_TEST_PRESETS"; fi
for preset in "${presets[@]}"; do
    run_preset "$preset"
done
echo "=== weft: all test presets passed: ${presets[*]} ==="
