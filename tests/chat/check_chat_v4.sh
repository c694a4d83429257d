#!/usr/bin/env bash
# Renders the conversations of tests/chat/v4_vectors.json with flashgate's
# DeepSeek-V4 renderer and requires the bytes DeepSeek's own encoder
# (encoding_dsv4.py, via tests/chat/make_v4_vectors.py) wrote for each; then
# tokenizes each prompt with a generated V4 vocabulary that has V4's markers
# (flashgate-modelgen --v4-chat-markers) and requires each marker the encoder
# wrote to be one id, marker text in messages to stay text.
set -euo pipefail
: "${FG_BIN:?run through ctest}"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$FG_BIN/flashgate-modelgen" --preset v4-tiny --v4-chat-markers --out "$work/v4.gguf" >/dev/null
"$FG_BIN/chat_check" --v4 "$work/v4.gguf" "$here/v4_vectors.json"
# again with V4's own pre-tokenizer and tokens that join across items (">\n\n", ">\n")
"$FG_BIN/chat_check" --v4-split "$work/v4.gguf" "$work/v4-split.gguf" "$here/v4_vectors.json"
