#!/usr/bin/env bash
# Installs the Debian 12 packages weft's build, examples and tests need, and only
# those that are missing. Debian packages only: nothing else is downloaded.
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config libeigen3-dev libopenmpi-dev openmpi-bin
          catch2 libcli11-dev libbenchmark-dev)
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
