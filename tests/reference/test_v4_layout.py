#!/usr/bin/python3
"""The generator's deepseek4 files against the table of what llama.cpp's loader reads.

The table is written here from llama.cpp's source, independently of modelgen_v4.c:
  * keys: llama_model_deepseek4::load_arch_hparams (src/models/deepseek4.cpp), the generic
    llama_model::load_hparams and the vocabulary loader, with the GGUF value types
    llama.cpp's typed getters accept (an integer key read as uint32 must be UINT32, a float
    FLOAT32, a flag BOOL; compress_ratios an integer array, INT32 as gguf-py writes a list
    of ints; swiglu_clamp_exp a FLOAT32 array or scalar);
  * tensors: llama_model_deepseek4::load_arch_tensors, every create_tensor call with its
    ggml shape ({ne0, ne1, ne2}), TENSOR_NOT_REQUIRED ones left out, so the file's tensor
    set must equal the table's exactly;
  * the checks the loader and graph make: compress_ratios at least block_count long and in
    {0, 4, 128}, the MTP block's ratio 0, gating 4 (sqrt-softplus), hc 4, heads divisible
    by output groups, key_length = value_length, tid2eid ids below expert_count;
  * types: as conversion/deepseek.py writes them (the converter layout: Q8_0 dense,
    BF16 embeddings/head/router/indexer.proj, MXFP4 experts, F32 norms, sinks, hc,
    compressors and biases, I32 tid2eid) or all F32.

Files: $FG_TEST_DATA/v4-tiny.gguf, -nohash, -mxfp4 (the models fixture), and v4-mini
written here by $FG_BIN/flashgate-modelgen twice (only its header and directory are read;
the two runs must be byte-identical). Prints `N passed, M failed`.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

from gguf_read import GGUFFile  # noqa: E402

A = "deepseek4."
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9
GGML = {"F32": 0, "F16": 1, "Q8_0": 8, "I32": 26, "BF16": 30, "MXFP4": 39}

# key -> (accepted value types, required by llama.cpp's loader)
KEYS = {
    "general.architecture": ([STR], True),
    "general.name": ([STR], False),
    "general.file_type": ([U32], False),
    "general.quantization_version": ([U32], False),
    A + "context_length": ([U32], True),
    A + "embedding_length": ([U32], True),
    A + "block_count": ([U32], True),
    A + "vocab_size": ([U32], False),
    A + "expert_count": ([U32], False),
    A + "expert_used_count": ([U32], False),
    A + "expert_shared_count": ([U32], True),
    A + "expert_feed_forward_length": ([U32], True),
    A + "expert_weights_scale": ([F32], True),
    A + "expert_weights_norm": ([BOOL], True),
    A + "expert_gating_func": ([U32], True),
    A + "swiglu_clamp_exp": ([F32, (ARR, F32)], True),
    A + "swiglu_clamp_shexp": ([F32, (ARR, F32)], False),
    A + "attention.head_count": ([U32, (ARR, U32), (ARR, I32)], True),
    A + "attention.head_count_kv": ([U32, (ARR, U32), (ARR, I32)], False),
    A + "attention.key_length": ([U32], False),
    A + "attention.value_length": ([U32], False),
    A + "attention.layer_norm_rms_epsilon": ([F32], True),
    A + "attention.q_lora_rank": ([U32], True),
    A + "attention.sliding_window": ([U32], True),
    A + "attention.indexer.head_count": ([U32], True),
    A + "attention.indexer.key_length": ([U32], True),
    A + "attention.indexer.top_k": ([U32], True),
    A + "attention.output_group_count": ([U32], True),
    A + "attention.output_lora_rank": ([U32], True),
    A + "attention.compress_rope_freq_base": ([F32], True),
    A + "attention.compress_ratios": ([(ARR, I32), (ARR, U32)], True),
    A + "rope.dimension_count": ([U32], False),
    A + "rope.freq_base": ([F32], False),
    A + "rope.scaling.type": ([STR], False),
    A + "rope.scaling.factor": ([F32], False),
    A + "rope.scaling.original_context_length": ([U32], False),
    A + "rope.scaling.yarn_beta_fast": ([F32], False),
    A + "rope.scaling.yarn_beta_slow": ([F32], False),
    A + "hyper_connection.count": ([U32], True),
    A + "hyper_connection.sinkhorn_iterations": ([U32], True),
    A + "hyper_connection.epsilon": ([F32], True),
    A + "hash_layer_count": ([U32], True),
    A + "nextn_predict_layers": ([U32], False),
    "tokenizer.ggml.model": ([STR], True),
    "tokenizer.ggml.pre": ([STR], False),
    "tokenizer.ggml.tokens": ([(ARR, STR)], True),
    "tokenizer.ggml.token_type": ([(ARR, I32)], False),
    "tokenizer.ggml.merges": ([(ARR, STR)], False),
    "tokenizer.ggml.bos_token_id": ([U32], False),
    "tokenizer.ggml.eos_token_id": ([U32], False),
    "tokenizer.ggml.add_bos_token": ([BOOL], False),
}

# llama.cpp's names for the pre-tokenizers it knows (src/llama-vocab.cpp), the ones a
# generated file could sensibly carry; "gpt2" (no dash) is not among them.
LLAMA_PRE = {"default", "gpt-2", "deepseek-llm", "deepseek-coder", "deepseek-v3"}

RESULTS = []


def check(name, cond, detail=""):
    RESULTS.append(bool(cond))
    sys.stdout.write("%s %s%s\n" % ("ok  " if cond else "FAIL", name, (" (%s)" % detail) if detail else ""))


def hp_of(g):
    m = g.metadata
    hp = dict(
        E=m[A + "embedding_length"], V=len(m["tokenizer.ggml.tokens"]), L_all=m[A + "block_count"],
        nextn=m.get(A + "nextn_predict_layers", 0), H=m[A + "attention.head_count"],
        D=m[A + "attention.key_length"], Q=m[A + "attention.q_lora_rank"],
        G=m[A + "attention.output_group_count"], R=m[A + "attention.output_lora_rank"],
        Hi=m[A + "attention.indexer.head_count"], Di=m[A + "attention.indexer.key_length"],
        X=m[A + "expert_count"], K=m[A + "expert_used_count"], F=m[A + "expert_feed_forward_length"],
        S=m[A + "expert_shared_count"], n_hash=m[A + "hash_layer_count"],
        ratios=[int(r) for r in m[A + "attention.compress_ratios"]],
    )
    hp["L"] = hp["L_all"] - hp["nextn"]
    return hp


def loader_tensors(hp):
    """name -> (ne, role): load_arch_tensors' required create_tensor calls."""
    E, V, H, D, Q, G, R = hp["E"], hp["V"], hp["H"], hp["D"], hp["Q"], hp["G"], hp["R"]
    Hi, Di, X, K, F, S = hp["Hi"], hp["Di"], hp["X"], hp["K"], hp["F"], hp["S"]
    hc, mix = 4, (2 + 4) * 4
    t = {
        "token_embd.weight": ((E, V), "embd"),
        "output_norm.weight": ((E,), "f32"),
        "output.weight": ((E, V), "embd"),
        "output_hc_fn.weight": ((hc * E, hc), "f32"),
        "output_hc_base.weight": ((hc,), "f32"),
        "output_hc_scale.weight": ((1,), "f32"),
    }
    for i in range(hp["L_all"]):
        b = "blk.%d." % i
        t[b + "attn_norm.weight"] = ((E,), "f32")
        t[b + "attn_sinks.weight"] = ((H,), "f32")
        t[b + "attn_q_a.weight"] = ((E, Q), "dense")
        t[b + "attn_q_a_norm.weight"] = ((Q,), "f32")
        t[b + "attn_q_b.weight"] = ((Q, H * D), "dense")
        t[b + "attn_kv.weight"] = ((E, D), "dense")
        t[b + "attn_kv_a_norm.weight"] = ((D,), "f32")
        t[b + "attn_output_a.weight"] = ((H * D // G, R * G), "dense")
        t[b + "attn_output_b.weight"] = ((G * R, E), "dense")
        for part in ("attn", "ffn"):
            t[b + "hc_%s_fn.weight" % part] = ((hc * E, mix), "f32")
            t[b + "hc_%s_base.weight" % part] = ((mix,), "f32")
            t[b + "hc_%s_scale.weight" % part] = ((3,), "f32")
        r = hp["ratios"][i]
        if r:
            c = 2 if r == 4 else 1
            t[b + "attn_compressor_kv.weight"] = ((E, c * D), "f32")
            t[b + "attn_compressor_gate.weight"] = ((E, c * D), "f32")
            t[b + "attn_compressor_ape.weight"] = ((c * D, r), "f32")
            t[b + "attn_compressor_norm.weight"] = ((D,), "f32")
            if r == 4:
                t[b + "indexer.proj.weight"] = ((E, Hi), "embd")
                t[b + "indexer.attn_q_b.weight"] = ((Q, Hi * Di), "dense")
                t[b + "indexer_compressor_kv.weight"] = ((E, 2 * Di), "f32")
                t[b + "indexer_compressor_gate.weight"] = ((E, 2 * Di), "f32")
                t[b + "indexer_compressor_ape.weight"] = ((2 * Di, 4), "f32")
                t[b + "indexer_compressor_norm.weight"] = ((Di,), "f32")
        t[b + "ffn_gate_inp.weight"] = ((E, X), "embd")
        if i < hp["n_hash"]:
            t[b + "ffn_gate_tid2eid.weight"] = ((K, V), "i32")
        else:
            t[b + "exp_probs_b.bias"] = ((X,), "f32")
        t[b + "ffn_norm.weight"] = ((E,), "f32")
        t[b + "ffn_gate_exps.weight"] = ((E, F, X), "experts")
        t[b + "ffn_down_exps.weight"] = ((F, E, X), "experts")
        t[b + "ffn_up_exps.weight"] = ((E, F, X), "experts")
        t[b + "ffn_gate_shexp.weight"] = ((E, F * S), "dense")
        t[b + "ffn_down_shexp.weight"] = ((F * S, E), "dense")
        t[b + "ffn_up_shexp.weight"] = ((E, F * S), "dense")
        if i >= hp["L"]:
            t[b + "nextn.eh_proj.weight"] = ((2 * E, E), "dense")
            t[b + "nextn.enorm.weight"] = ((E,), "f32")
            t[b + "nextn.hnorm.weight"] = ((E,), "f32")
    return t


CONVERTER = {"dense": "Q8_0", "embd": "BF16", "experts": "MXFP4", "f32": "F32", "i32": "I32"}
ALL_F32 = {"dense": "F32", "embd": "F32", "experts": "F32", "f32": "F32", "i32": "I32"}


def check_file(label, path, layout, want):
    g = GGUFFile(path)
    m = g.metadata
    unknown = [k for k in m if k not in KEYS]
    check("%s: every key is one llama.cpp reads" % label, not unknown, str(unknown))
    missing = [k for k, (_, req) in KEYS.items() if req and k not in m]
    check("%s: every key llama.cpp requires is there" % label, not missing, str(missing))
    badtype = [(k, g.value_types[k]) for k in m if k in KEYS and g.value_types[k] not in KEYS[k][0]]
    check("%s: every key has a value type llama.cpp's getters accept" % label, not badtype, str(badtype))
    check("%s: architecture deepseek4, tokenizer gpt2 with a pre-tokenizer llama.cpp knows" % label,
          m.get("general.architecture") == "deepseek4" and m.get("tokenizer.ggml.model") == "gpt2"
          and m.get("tokenizer.ggml.pre") in LLAMA_PRE, str(m.get("tokenizer.ggml.pre")))
    hp = hp_of(g)
    check("%s: vocab_size = token count = token_embd rows" % label,
          m.get(A + "vocab_size") == hp["V"] and g.tensors["token_embd.weight"].ne[1] == hp["V"])
    # the loader's and graph's own checks
    r = hp["ratios"]
    check("%s: compress_ratios: one per block (MTP's 0 last), each 0, 4 or 128" % label,
          len(r) >= hp["L_all"] and all(x in (0, 4, 128) for x in r[:hp["L_all"]])
          and all(x == 0 for x in r[hp["L"]:hp["L_all"]]), str(r))
    clamp = m.get(A + "swiglu_clamp_exp")
    check("%s: swiglu_clamp_exp: one per block" % label, len(np.atleast_1d(clamp)) == hp["L_all"], str(clamp))
    check("%s: gating 4, hc 4, H %% G == 0, key_length = value_length, head_count_kv 1" % label,
          m[A + "expert_gating_func"] == 4 and m[A + "hyper_connection.count"] == 4 and hp["H"] % hp["G"] == 0
          and m[A + "attention.key_length"] == m[A + "attention.value_length"]
          and m[A + "attention.head_count_kv"] == 1)
    # the tensor directory, exactly
    table = loader_tensors(hp)
    extra = sorted(set(g.tensors) - set(table))
    absent = sorted(set(table) - set(g.tensors))
    check("%s: the tensor set is load_arch_tensors' (%d tensors)" % (label, len(table)),
          not extra and not absent, "extra %s, missing %s" % (extra[:5], absent[:5]))
    bad_shape = [(n, g.tensors[n].ne, list(ne)) for n, (ne, _) in table.items()
                 if n in g.tensors and list(g.tensors[n].ne) != list(ne)]
    check("%s: every tensor has llama.cpp's ggml shape" % label, not bad_shape, str(bad_shape[:3]))
    bad_type = [(n, g.tensors[n].type_name, layout[role]) for n, (_, role) in table.items()
                if n in g.tensors and g.tensors[n].ggml_type != GGML[layout[role]]]
    check("%s: every tensor has the layout's type" % label, not bad_type, str(bad_type[:3]))
    for il in range(hp["n_hash"]):
        ids = g.tensor_int("blk.%d.ffn_gate_tid2eid.weight" % il)
        check("%s: tid2eid %d: ids in [0, %d)" % (label, il, hp["X"]), ids.min() >= 0 and ids.max() < hp["X"])
    # the preset's geometry
    got = {k: hp[k] for k in want if k in hp}
    got.update({k: m[A + k] for k in want if k not in hp})
    check("%s: preset geometry %s" % (label, want), got == want, str(got))
    g.close()


TINY = {"L": 4, "nextn": 1, "ratios": [0, 4, 128, 4, 0], "attention.sliding_window": 16,
        "attention.indexer.top_k": 16}


def run_modelgen(out):
    r = subprocess.run([os.path.join(os.environ["FG_BIN"], "flashgate-modelgen"), "--preset", "v4-mini",
                        "--out", out], capture_output=True, text=True, timeout=240)
    if r.returncode != 0:
        check("v4-mini: flashgate-modelgen", False, r.stderr[-300:])
        return None
    h = hashlib.sha256()
    with open(out, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def main():
    for v in ("FG_TEST_DATA", "FG_BIN"):
        if v not in os.environ:
            sys.stderr.write("test_v4_layout: %s is not set (run through ctest)\n" % v)
            return 2
    data = os.environ["FG_TEST_DATA"]
    check_file("v4-tiny", os.path.join(data, "v4-tiny.gguf"), ALL_F32, dict(TINY, n_hash=1))
    check_file("v4-tiny-nohash", os.path.join(data, "v4-tiny-nohash.gguf"), ALL_F32, dict(TINY, n_hash=0))
    check_file("v4-tiny-mxfp4", os.path.join(data, "v4-tiny-mxfp4.gguf"), CONVERTER, dict(TINY, n_hash=1))
    tmp = tempfile.mkdtemp(prefix="fg_v4layout_")
    try:
        path = os.path.join(tmp, "v4-mini.gguf")
        first = run_modelgen(path)
        if first:
            check_file("v4-mini", path, CONVERTER,
                       {"L": 9, "nextn": 1, "n_hash": 3, "ratios": [0, 0, 4, 128, 4, 128, 4, 128, 4, 0],
                        "attention.sliding_window": 128})
            second = run_modelgen(path)
            check("v4-mini: two runs write the same bytes", first == second, "%s / %s" % (first, second))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n_fail = RESULTS.count(False)
    sys.stdout.write("%d passed, %d failed\n" % (len(RESULTS) - n_fail, n_fail))
    return 0 if n_fail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
