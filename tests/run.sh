#!/usr/bin/env bash
# Builds flashgate with ASan/UBSan and warnings as errors, runs every ctest
# test, then builds the libFuzzer targets with clang and runs each for a
# bounded time. Installs the Debian packages it needs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
deploy/install-deps.sh test
jobs=$(nproc)

cmake -S . -B build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFG_WERROR=ON -DFG_SANITIZE=address,undefined
cmake --build build/test -j"$jobs"
(cd build/test && ctest --output-on-failure -j"$jobs" -LE fuzz)

CC=clang cmake -S . -B build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFG_WERROR=ON -DFG_FUZZ=ON \
  -DFG_SANITIZE=address,undefined -DFG_CUDA=OFF
cmake --build build/fuzz -j"$jobs"
(cd build/fuzz && ctest --output-on-failure -L fuzz)
