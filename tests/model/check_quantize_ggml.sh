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
source "$here/../ggml_npm.sh"
exec /usr/bin/python3 "$here/check_quantize_ggml.py" "$ggml_bins"
