#!/usr/bin/env bash
# flashgate-generate on bad files and bad requests: each must exit non-zero with
# an "error:" line naming the problem, never crash (signals, or the sanitizers'
# exit codes 86/87 that the test environment sets).
set -uo pipefail
: "${FG_BIN:?run through ctest}" "${FG_TEST_DATA:?}"
gen=$FG_BIN/flashgate-generate
tiny=$FG_TEST_DATA/tiny.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 passes=0

# expect WANT_EXIT PATTERN -- command...
expect() {
  local want=$1 pattern=$2; shift 3
  "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [[ $rc -ne $want ]] || ! grep -qiE "$pattern" "$tmp/err"; then
    echo "FAIL (exit $rc, want $want, pattern '$pattern'): $*"; sed 's/^/    /' "$tmp/err" | head -5
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}

head -c 100000 "$tiny" > "$tmp/truncated.gguf"
head -c 20 "$tiny" > "$tmp/header-only.gguf"
{ printf 'GGUX'; tail -c +5 "$tiny"; } > "$tmp/bad-magic.gguf"
{ head -c 4 "$tiny"; printf '\x07\x00\x00\x00'; tail -c +9 "$tiny"; } > "$tmp/bad-version.gguf"
echo "just some text" > "$tmp/text.gguf"
: > "$tmp/empty.gguf"

expect 1 "cannot load.*No such file" -- "$gen" -m "$tmp/missing.gguf" -p hi
expect 1 "out_of_bounds|truncated" -- "$gen" -m "$tmp/truncated.gguf" -p hi
expect 1 "truncated" -- "$gen" -m "$tmp/header-only.gguf" -p hi
expect 1 "magic" -- "$gen" -m "$tmp/bad-magic.gguf" -p hi
expect 1 "version" -- "$gen" -m "$tmp/bad-version.gguf" -p hi
expect 1 "magic" -- "$gen" -m "$tmp/text.gguf" -p hi
expect 1 "truncated|empty" -- "$gen" -m "$tmp/empty.gguf" -p hi
expect 1 "exceeds the context" -- "$gen" -m "$tiny" --ctx 8 -p "a prompt that is certainly longer than eight tokens"
expect 1 "token id" -- "$gen" -m "$tiny" --tokens 1,2,99999
expect 2 "expects a number" -- "$gen" -m "$tiny" --temp abc
expect 2 "temperature" -- "$gen" -m "$tiny" --temp -1 -p hi
expect 2 "kv-format" -- "$gen" -m "$tiny" --kv-format fp3 -p hi
expect 2 "unexpected argument" -- "$gen" -m "$tiny" stray

echo "$passes passed, $fails failed"
((fails == 0))
