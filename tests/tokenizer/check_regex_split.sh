#!/usr/bin/env bash
# Every pre-tokenizer against its regexes run by a real regex engine
# (JavaScript's, in node): 3000 seeded random strings per kind must split at
# the same byte offsets (tests/tokenizer/regex_split.mjs). Needs only node;
# exit 77 (skip) without it.
set -euo pipefail
: "${FG_BIN:?run through ctest}"
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null || { echo "SKIP: node not installed (deploy/install-deps.sh test installs it)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
node "$here/regex_split.mjs" "$work/pieces.tsv"
"$FG_BIN/hf_tokcheck" pieces "$work/pieces.tsv"
