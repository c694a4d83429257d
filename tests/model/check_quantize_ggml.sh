#!/usr/bin/env bash
# flashgate-quantize against llama.cpp itself: the libggml-base.so and libllama.so that the npm
# package @node-llama-cpp/linux-x64 ships (llama.cpp built unmodified; pinned version) are loaded
# with ctypes: ggml_quantize_chunk (no importance matrix) must give every block of every type the
# same bytes, and llama_model_quantize (what llama-quantize runs) the same whole files for every
# mix (check_quantize_ggml.py).
# The package goes into $FG_TEST_DATA/npm-ggml; exit 77 (skip) only when npm cannot install it
# or the machine is not x86-64 Linux.
set -euo pipefail
: "${FG_BIN:?run through ctest}" "${FG_TEST_DATA:?run through ctest}"
here=$(cd "$(dirname "$0")" && pwd)
[[ $(uname -sm) == "Linux x86_64" ]] || { echo "SKIP: the pinned ggml build is for Linux x86-64"; exit 77; }
npm_dir="$FG_TEST_DATA/npm-ggml"
pkg=@node-llama-cpp/linux-x64@3.22.1
"$here/../npm_deps.sh" "$npm_dir" "$pkg" || exit $?
exec /usr/bin/python3 "$here/check_quantize_ggml.py" "$npm_dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
