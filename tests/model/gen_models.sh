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
gen tiny-chat.gguf --chat-markers              # DeepSeek-V3's chat and tool markers in the vocabulary
gen tiny-mtp.gguf --nextn 1                    # DeepSeek-V3's MTP block (nextn) after the 4 trunk layers
gen tiny-mtp-q8_0.gguf --nextn 1 --type q8_0   # the same in Q8_0 (test_spec: rollback bits)
# flash-mini's 8 heads at width 128, 2 layers, Q8_0 (test_batch_invariant)
"$FG_BIN/flashgate-modelgen" --preset flash-mini --seed 1 --embd 128 --layers 2 --type q8_0 \
  --out "$FG_TEST_DATA/mini8-q8_0.gguf" >/dev/null
# mixed types: tiny.gguf with its routed experts in MXFP4 (as llama.cpp's converter writes V4's)
/usr/bin/python3 "$(dirname "$0")/../reference/retype_tensors.py" "$FG_TEST_DATA/tiny.gguf" \
  "$FG_TEST_DATA/tiny-mxfp4.gguf" 'blk.*.ffn_*_exps.weight=mxfp4'
# mixed types as a Q4_K_M-like file has them: tiny at width 256 (rows of 256 for the
# K-quants), every legacy and K type on some tensor, legacy where rows are 32 .. 128
gen tiny-256.gguf --embd 256
/usr/bin/python3 "$(dirname "$0")/../reference/retype_tensors.py" "$FG_TEST_DATA/tiny-256.gguf" \
  "$FG_TEST_DATA/tiny-mixed.gguf" 'token_embd.weight=iq4_xs' 'output.weight=q6_K' \
  'blk.*.attn_q_a.weight=q2_K' 'blk.*.attn_kv_a_mqa.weight=q3_K' 'blk.*.attn_q_b.weight=q4_0' \
  'blk.*.attn_k_b.weight=q4_1' 'blk.*.attn_v_b.weight=q5_0' 'blk.*.attn_output.weight=q5_1' \
  'blk.*.ffn_gate.weight=q6_K' 'blk.*.ffn_up.weight=q5_K' 'blk.*.ffn_down.weight=iq4_nl' \
  'blk.*.ffn_gate_exps.weight=q4_K' 'blk.*.ffn_up_exps.weight=q5_K' 'blk.*.ffn_down_exps.weight=q5_0' \
  'blk.*.ffn_gate_shexp.weight=q6_K' 'blk.*.ffn_up_shexp.weight=q2_K' 'blk.*.ffn_down_shexp.weight=q4_1'
# tiny-256 as llama-quantize's Q4_K_M mix (flashgate-quantize, ggml's quantizers): K types where
# rows are 256, the legacy fallbacks where they are 32 .. 128, Q6_K output and ffn_down layers
"$FG_BIN/flashgate-quantize" --quiet "$FG_TEST_DATA/tiny-256.gguf" "$FG_TEST_DATA/tiny-q4_k_m.gguf" q4_k_m \
  2> /dev/null > /dev/null
# deepseek4: F32 (the reference comparisons), no hash layers, and the types
# llama.cpp's converter writes (Q8_0 dense, BF16 embeddings/head/router, MXFP4 experts)
gen4() { local out=$1; shift; "$FG_BIN/flashgate-modelgen" --preset v4-tiny --seed 1 --out "$FG_TEST_DATA/$out" "$@" >/dev/null; }
gen4 v4-tiny.gguf
gen4 v4-tiny-nohash.gguf --hash-layers 0
gen4 v4-tiny-mxfp4.gguf --type q8_0 --embd-type bf16 --expert-type mxfp4
gen4 v4-tiny-mxexp.gguf --expert-type mxfp4    # F32 dense, MXFP4 experts (expert parallelism's bounds)
gen4 v4-tiny-chat.gguf --v4-chat-markers       # DeepSeek-V4's chat markers and ｜DSML｜ (the V4 tool tests)
ls -l "$FG_TEST_DATA"/*.gguf
