#!/usr/bin/env bash
# Writes the tiny test models into $FG_TEST_DATA (the ctest fixture "models").
# Same seed for every variant, so the weight-type variants hold the same
# underlying random values, quantized differently.
set -euo pipefail
: "${FG_BIN:?run through ctest}" "${FG_TEST_DATA:?run through ctest}"
mkdir -p "$FG_TEST_DATA"
gen() { local out=$1; shift; "$FG_BIN/flashgate-modelgen" --preset tiny --seed 1 --out "$FG_TEST_DATA/$out" "$@" >/dev/null; }
gen tiny.gguf                                  # sigmoid routing with exp_probs_b, F32
gen tiny-softmax.gguf --gating softmax
gen tiny-groups.gguf --groups 4:2              # group-limited routing
gen tiny-lite.gguf --no-q-lora --tied          # plain attn_q, tied embeddings
gen tiny-yarn.gguf --yarn 4                    # YaRN rope scaling
gen tiny-f16.gguf --type f16
gen tiny-bf16.gguf --type bf16
gen tiny-q8_0.gguf --type q8_0
# mixed types: tiny.gguf with its routed experts in MXFP4 (as llama.cpp's converter writes V4's)
/usr/bin/python3 "$(dirname "$0")/../reference/retype_tensors.py" "$FG_TEST_DATA/tiny.gguf" \
  "$FG_TEST_DATA/tiny-mxfp4.gguf" 'blk.*.ffn_*_exps.weight=mxfp4'
ls -l "$FG_TEST_DATA"/*.gguf
