#!/usr/bin/env bash
# A model's greedy continuation of a fixed prompt, byte-exact against the
# checked-in golden files, on every instruction set this CPU runs (scalar
# reference, AVX2, AVX-512), F32 cache. Models: tiny (generated, F32 weights)
# and english (the committed trained default model, models/flash-english.gguf).
# Usage: check_golden.sh [tiny|english] [--update]
set -euo pipefail
: "${FG_BIN:?run through ctest}" "${FG_TEST_DATA:?}" "${FG_SOURCE_DIR:?}"
golden=$FG_SOURCE_DIR/tests/golden
name=tiny
if [[ ${1:-} == tiny || ${1:-} == english ]]; then name=$1; shift; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ $name == tiny ]]; then
  args=(--model "$FG_TEST_DATA/tiny.gguf" --prompt "The agent opened a session and asked for" -n 48)
else
  args=(--model "$FG_SOURCE_DIR/models/flash-english.gguf" --prompt "The trouble with computers is" -n 64)
fi
args+=(--kv-format f32 --ignore-eos --threads 2)
if [[ ${1:-} == --update ]]; then
  "$FG_BIN/flashgate-generate" "${args[@]}" > "$golden/${name}_greedy.txt" 2>/dev/null
  "$FG_BIN/flashgate-generate" "${args[@]}" --print-ids > "$golden/${name}_greedy_ids.txt" 2>/dev/null
  echo "updated"; exit 0
fi
checked=0
for isa in scalar avx2 avx512; do
  if ! "$FG_BIN/flashgate-generate" "${args[@]}" --isa $isa > "$tmp/text" 2> "$tmp/err"; then
    grep -q "not available on this CPU" "$tmp/err" && { echo "skip $isa (not on this CPU)"; continue; }
    cat "$tmp/err"; exit 1
  fi
  "$FG_BIN/flashgate-generate" "${args[@]}" --isa $isa --print-ids > "$tmp/ids" 2>/dev/null
  cmp "$tmp/text" "$golden/${name}_greedy.txt" || { echo "FAIL: $isa text differs from golden"; exit 1; }
  cmp "$tmp/ids" "$golden/${name}_greedy_ids.txt" || { echo "FAIL: $isa ids differ from golden"; exit 1; }
  echo "ok $isa"; checked=$((checked + 1))
done
((checked >= 1))
