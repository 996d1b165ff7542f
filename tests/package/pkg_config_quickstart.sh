#!/usr/bin/env bash
# A user's own build of examples/quickstart.cpp without CMake, as docs/building.md shows it:
# mpicxx with the flags pkg-config gives for the weft.pc that package_header_only_install put in
# PREFIX, and the user's warnings as errors. weft's headers must compile clean under them:
# Open MPI's C++ bindings (-Wcast-function-type) are left out, and no -Wrestrict at -O3.
#   pkg_config_quickstart.sh PREFIX SOURCE_DIR BUILD_DIR run
#       -O2 -Wall -Wextra -Werror, linked with pkg-config --libs and run on one rank
#   pkg_config_quickstart.sh PREFIX SOURCE_DIR BUILD_DIR native
#       -O3 -march=native -Wall -Wextra -Werror, compiled only; with GCC also the two flags
#       docs/building.md names for GCC's warnings inside its own AVX-512 intrinsics, which Eigen's
#       GEMM reaches and weft cannot avoid (GCC 12, a CPU with AVX-512)
set -euo pipefail
prefix=$1
source_dir=$2
build_dir=$3
mode=$4
mpicxx=${MPICXX:-mpicxx}  # the MPI compiler wrapper CMake found
export PKG_CONFIG_PATH="$prefix/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
rm -rf "$build_dir"
mkdir -p "$build_dir"
cflags=$(pkg-config --cflags weft)
libs=$(pkg-config --libs weft)
echo "pkg-config --cflags weft: $cflags"
[[ $cflags == *"-I$prefix/share/pkgconfig/../../include"* || $cflags == *"-I$prefix/include"* ]] ||
    { echo "FAIL: weft.pc does not name the installed headers under $prefix"; exit 1; }
case $mode in
run)
    # shellcheck disable=SC2086  # the flags are words
    "$mpicxx" $cflags -O2 -Wall -Wextra -Werror "$source_dir/examples/quickstart.cpp" -o "$build_dir/quickstart" $libs
    output=$("$build_dir/quickstart")
    echo "$output" | tail -n 2
    grep -q "^step 19 |" <<<"$output" || { echo "FAIL: quickstart built with weft.pc did not train 20 steps"; exit 1; }
    ;;
native)
    extra=()
    if "$mpicxx" --version | grep -q "Free Software Foundation"; then
        extra=(-Wno-maybe-uninitialized -Wno-uninitialized)
    fi
    # shellcheck disable=SC2086
    "$mpicxx" $cflags -O3 -march=native -Wall -Wextra -Werror "${extra[@]}" \
        -c "$source_dir/examples/quickstart.cpp" -o "$build_dir/quickstart.o"
    echo "compiled clean at -O3 -march=native ${extra[*]}"
    ;;
*)
    echo "pkg_config_quickstart.sh: mode '$mode' is invalid: use run or native" >&2
    exit 2
    ;;
esac
