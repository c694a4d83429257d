# Sourced by the checks against ggml itself (tests/model/check_quantize_ggml.sh,
# tests/reference/check_iq_ggml.sh): installs the pinned llama.cpp build that the npm package
# @node-llama-cpp/linux-x64 ships (unmodified) and sets ggml_bins to its library folder.
# Exits 77 (skip) when the machine is not x86-64 Linux or npm cannot install it.
[[ $(uname -sm) == "Linux x86_64" ]] || { echo "SKIP: the pinned ggml build is for Linux x86-64"; exit 77; }
ggml_npm_dir="${FG_TEST_DATA:?run through ctest}/npm-ggml"
"$(dirname "${BASH_SOURCE[0]}")/npm_deps.sh" "$ggml_npm_dir" @node-llama-cpp/linux-x64@3.22.1 || exit $?
ggml_bins="$ggml_npm_dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
