#!/usr/bin/env bash
# The lattice IQ types' reference dequantization against ggml itself (check_iq_ggml.py): the
# libggml-base.so that the npm package @node-llama-cpp/linux-x64 ships (llama.cpp built
# unmodified; pinned version), loaded with ctypes. The package goes into $FG_TEST_DATA/npm-ggml;
# exit 77 (skip) only when npm cannot install it or the machine is not x86-64 Linux.
set -euo pipefail
: "${FG_TEST_DATA:?run through ctest}"
here=$(cd "$(dirname "$0")" && pwd)
[[ $(uname -sm) == "Linux x86_64" ]] || { echo "SKIP: the pinned ggml build is for Linux x86-64"; exit 77; }
npm_dir="$FG_TEST_DATA/npm-ggml"
pkg=@node-llama-cpp/linux-x64@3.22.1
"$here/../npm_deps.sh" "$npm_dir" "$pkg" || exit $?
exec /usr/bin/python3 "$here/check_iq_ggml.py" "$npm_dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
