#!/usr/bin/env bash
# The lattice IQ types' reference dequantization against ggml itself (check_iq_ggml.py): the
# libggml-base.so that the npm package @node-llama-cpp/linux-x64 ships (llama.cpp built
# unmodified; pinned version), loaded with ctypes. The package goes into $FG_TEST_DATA/npm-ggml;
# exit 77 (skip) only when npm cannot install it or the machine is not x86-64 Linux.
set -euo pipefail
: "${FG_TEST_DATA:?run through ctest}"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../ggml_npm.sh"
exec /usr/bin/python3 "$here/check_iq_ggml.py" "$ggml_bins"
