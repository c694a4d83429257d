#!/usr/bin/env bash
# Compares the engine with the independent numpy reference on one test model:
# a 16-token prompt plus 32 greedy steps, F32 cache; every position's logits
# within 1e-4 and every greedy token identical (no near-tie allowance).
# Usage: check_reference.sh MODEL_FILE [TOL TIE_MARGIN MEDIAN_TOL]   (a file in
# $FG_TEST_DATA or an absolute path; TOL and TIE_MARGIN default to 1e-4 and 0, for the F32 models;
# MEDIAN_TOL bounds the median position's max |dlogit| as well)
set -euo pipefail
: "${FG_BIN:?run through ctest}" "${FG_TEST_DATA:?}" "${FG_SOURCE_DIR:?}"
model=$FG_TEST_DATA/$1
[[ $1 == /* ]] && model=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prompt=257,3,104,101,108,108,111,32,119,111,114,108,100,46,10,42
ids=$("$FG_BIN/flashgate-generate" --model "$model" --tokens "$prompt" -n 32 --kv-format f32 \
      --ignore-eos --print-ids --logits-out "$tmp/logits.bin" --threads 2)
tokens="$prompt,$(echo $ids | tr ' ' ',')"
exec /usr/bin/python3 "$FG_SOURCE_DIR/tests/reference/deepseek2_ref.py" compare "$model" \
  --engine-logits "$tmp/logits.bin" --tokens "$tokens" --n-prompt 16 --tol "${2:-1e-4}" --tie-margin "${3:-0}" ${4:+--median-tol "$4"}
