#!/usr/bin/env bash
# flashgate-gpucheck where there is no usable GPU (CI) must exit 2 with a
# message saying why (no GPU, or a build without CUDA), and write no figures.
# On a GPU machine the op checks run instead (--no-bench keeps it short),
# and must pass.
set -uo pipefail
: "${FG_BIN:?run through ctest}" "${FG_TEST_DATA:?run through ctest}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$FG_BIN/flashgate-gpucheck" --no-bench --model "$FG_TEST_DATA/tiny.gguf" --out "$out/figures.txt" \
  >"$out/stdout" 2>"$out/stderr"
rc=$?
case $rc in
  2)
    if ! grep -Eq "no usable CUDA GPU|has no CUDA|kernels for sm_90a" "$out/stderr"; then
      echo "exit 2 without a clear reason:"; cat "$out/stderr"; exit 1
    fi
    [ ! -s "$out/figures.txt" ] || { echo "figures written without a GPU"; exit 1; }
    echo "no GPU here, as expected: $(cat "$out/stderr")" ;;
  0) echo "GPU present: self-check passed"; cat "$out/stdout" ;;
  *) echo "flashgate-gpucheck exited $rc"; cat "$out/stdout" "$out/stderr"; exit 1 ;;
esac
