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
# deepseek4: F32 (the reference comparisons), no hash layers, and the types
# llama.cpp's converter writes (Q8_0 dense, BF16 embeddings/head/router, MXFP4 experts)
gen4() { local out=$1; shift; "$FG_BIN/flashgate-modelgen" --preset v4-tiny --seed 1 --out "$FG_TEST_DATA/$out" "$@" >/dev/null; }
gen4 v4-tiny.gguf
gen4 v4-tiny-nohash.gguf --hash-layers 0
gen4 v4-tiny-mxfp4.gguf --type q8_0 --embd-type bf16 --expert-type mxfp4
ls -l "$FG_TEST_DATA"/*.gguf
