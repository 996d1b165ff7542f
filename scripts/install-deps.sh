#!/usr/bin/env bash
# Installs the Debian 12 packages weft needs, and only those that are missing.
# Debian packages only: nothing else is downloaded.
#   scripts/install-deps.sh           # build and run the examples
#   scripts/install-deps.sh --tests   # also the tests, benchmarks and the PyTorch reference
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config libeigen3-dev libopenmpi-dev openmpi-bin
          libcli11-dev nlohmann-json3-dev
          # ZeroMQ: the SWARM transport (swarm_train), which outlives a dead worker where MPI would not.
          libzmq3-dev cppzmq-dev)
if [[ "${1:-}" == "--tests" ]]; then
    # procps: pgrep, which the stalled-peer and preemption tests use to find rank processes.
    packages+=(catch2 libbenchmark-dev python3-torch python3-numpy procps)
elif [[ -n "${1:-}" ]]; then
    echo "install-deps: unknown option '$1' (valid: --tests)" >&2
    exit 2
fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
    echo "install-deps: all Debian packages present"
    exit 0
fi
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
