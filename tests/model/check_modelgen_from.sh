#!/usr/bin/env bash
# flashgate-modelgen --from converts a trained model to another weight type
# with the source's MTP block (deepseek2 nextn) unless --nextn says otherwise:
# the Q8_0 copy of tiny-mtp keeps its nextn tensors and key, --nextn 0 drops
# them, and tiny (no block) gets none.
set -euo pipefail
: "${FG_BIN:?run through ctest}" "${FG_TEST_DATA:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
conv() { "$FG_BIN/flashgate-modelgen" --preset tiny --from "$FG_TEST_DATA/$1" --type q8_0 --out "$tmp/$2" "${@:3}" > /dev/null; }
count() { grep -ac 'nextn' "$tmp/$1" || true; }
conv tiny-mtp.gguf mtp.gguf
conv tiny-mtp.gguf nomtp.gguf --nextn 0
conv tiny.gguf plain.gguf
fail=0
[[ $(count mtp.gguf) -gt 0 ]] || { echo "FAIL: --from tiny-mtp.gguf lost the MTP block"; fail=1; }
[[ $(count nomtp.gguf) -eq 0 ]] || { echo "FAIL: --nextn 0 kept the MTP block"; fail=1; }
[[ $(count plain.gguf) -eq 0 ]] || { echo "FAIL: --from tiny.gguf grew an MTP block"; fail=1; }
# the converted file loads and runs
"$FG_BIN/flashgate-generate" --model "$tmp/mtp.gguf" --prompt "hello" -n 4 --ignore-eos --print-ids > /dev/null \
  || { echo "FAIL: the converted model does not run"; fail=1; }
((fail == 0)) && echo "ok: --from keeps the source's MTP block, --nextn 0 drops it"
exit $fail
