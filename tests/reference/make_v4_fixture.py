#!/usr/bin/python3
"""Writes a tiny deterministic random-weight `deepseek4` GGUF for the reference's self-check.

Usage: make_v4_fixture.py OUT.gguf [--seed N] [--all-f32]

Names, ggml types and shapes follow llama.cpp (src/models/deepseek4.cpp load_arch_tensors,
gguf-py constants.py), so llama.cpp would load the file: block_count counts the MTP block,
compress_ratios has one entry per block (the MTP block's is 0), hash layers carry
ffn_gate_tid2eid instead of exp_probs_b.  Types as llama.cpp's converter writes them: BF16
embeddings / head / router, Q8_0 for the dense matrices, MXFP4 routed experts, F32 for norms,
compressors, hyper-connections and sinks, I32 tid2eid (--all-f32: every float tensor F32).

The geometry is small enough that a 300-token prompt makes HCA (ratio 128) emit two rows and
the indexer's top-k (16) drop CSA rows.  Weights are scaled by 1/sqrt(fan-in) so activations
stay O(1).  make_fixture() takes overrides so the self-check can write broken variants.
Its own minimal GGUF v3 writer; needs only numpy.
"""

import struct
import sys

import numpy as np

# GGUF metadata value types
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
# ggml tensor types
G_F32, G_Q8_0, G_I32, G_BF16, G_MXFP4 = 0, 8, 26, 30, 39

TINY = dict(
    n_embd=64, n_head=4, head_dim=32, rope_dim=16, q_lora=32, window=16,
    idx_head=2, idx_dim=32, idx_top_k=16, o_groups=2, o_lora=16,
    n_expert=8, n_expert_used=2, n_expert_shared=1, n_ff_exp=32,
    ratios=[0, 4, 128, 4], hash_layers=1, nextn=1, n_merges=40,
    hc=4, sinkhorn_iters=20, hc_eps=1e-6, rms_eps=1e-6, gating=4,
    rope_base=10000.0, compress_rope_base=160000.0, yarn_factor=16.0, yarn_orig_ctx=65536,
    weights_scale=1.5, clamp=10.0, clamp_scalar=False, ctx=4096,
)


# --------------------------------------------------------------------------------------
# encoders: each returns the bytes of a tensor given its numpy (row-major) values
# --------------------------------------------------------------------------------------

def _f32(a):
    return np.ascontiguousarray(a, dtype="<f4").tobytes()


def _bf16(a):
    bits = np.ascontiguousarray(a, dtype="<f4").view("<u4")
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16   # nearest-even
    return rounded.astype("<u2").tobytes()


def _q8_0(a):
    blocks = np.asarray(a, dtype=np.float64).reshape(-1, 32)
    d = (np.abs(blocks).max(axis=1) / 127.0).astype(np.float16)
    df = d.astype(np.float64)
    inv = np.where(df > 0, 1.0 / np.where(df > 0, df, 1.0), 0.0)
    q = np.clip(np.rint(blocks * inv[:, None]), -127, 127).astype(np.int8)
    out = np.zeros(blocks.shape[0], dtype=[("d", "<f2"), ("qs", "i1", (32,))])
    out["d"] = d
    out["qs"] = q
    return out.tobytes()


_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                  -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def _mxfp4(a):
    blocks = np.asarray(a, dtype=np.float64).reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    e = np.where(amax > 0, np.ceil(np.log2(np.where(amax > 0, amax, 1.0) / 6.0)) + 127, 0)
    e = np.clip(e, 0, 254).astype(np.int64)
    scaled = blocks / np.ldexp(1.0, e - 127)[:, None]
    nib = np.abs(scaled[:, :, None] - _E2M1[None, None, :]).argmin(axis=2).astype(np.uint8)
    qs = nib[:, :16] | (nib[:, 16:] << 4)
    out = np.zeros(blocks.shape[0], dtype=[("e", "u1"), ("qs", "u1", (16,))])
    out["e"] = e.astype(np.uint8)
    out["qs"] = qs
    return out.tobytes()


_ENCODERS = {G_F32: _f32, G_BF16: _bf16, G_Q8_0: _q8_0, G_MXFP4: _mxfp4,
             G_I32: lambda a: np.ascontiguousarray(a, dtype="<i4").tobytes()}


# --------------------------------------------------------------------------------------
# minimal GGUF v3 writer
# --------------------------------------------------------------------------------------

def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


_PACK = {T_U32: "<I", T_I32: "<i", T_F32: "<f", T_BOOL: "<?"}


def _value(vtype, v):
    if vtype in _PACK:
        return struct.pack(_PACK[vtype], v)
    if vtype == T_STR:
        return _str(v)
    etype, items = v
    return struct.pack("<IQ", etype, len(items)) + b"".join(_value(etype, x) for x in items)


def write_gguf(path, kv, tensors, alignment=32):
    """kv: [(key, type, value)]; tensors: [(name, numpy values, ggml type)]."""
    head = struct.pack("<4sIQQ", b"GGUF", 3, len(tensors), len(kv))
    head += b"".join(_str(k) + struct.pack("<I", t) + _value(t, v) for k, t, v in kv)
    blobs = []
    offset = 0
    for name, values, gtype in tensors:
        ne = list(reversed(np.shape(values)))
        head += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        head += struct.pack("<IQ", gtype, offset)
        raw = _ENCODERS[gtype](values)
        pad = (-len(raw)) % alignment
        blobs.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    head += b"\0" * ((-len(head)) % alignment)
    with open(path, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)


# --------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------

def _byte_tokens():
    """GPT-2's byte -> printable-unicode map, so the 256 byte tokens are valid pieces."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = [b for b in range(256) if b not in keep]
    table = {b: chr(b) for b in keep}
    table.update({b: chr(256 + i) for i, b in enumerate(extra)})
    return [table[b] for b in range(256)]


def vocabulary(n_merges):
    pieces = _byte_tokens()
    merges = []
    letters = "etaoinshrdlucmfwyp"
    for i in range(n_merges):
        a, b = letters[i % len(letters)], letters[(i * 7 + 3) % len(letters)]
        if a + b in pieces:
            continue
        merges.append(a + " " + b)
        pieces.append(a + b)
    pieces += ["<|begin_of_sentence|>", "<|end_of_sentence|>"]
    types = [1] * (len(pieces) - 2) + [3, 3]
    return pieces, types, merges


def make_fixture(path, seed=1234, all_f32=False, omit_tensors=(), tensor_edits=None, **over):
    """Writes the fixture; `over` overrides TINY or metadata (key 'meta': {full key: (type, v)})."""
    p = dict(TINY)
    meta_over = over.pop("meta", {})
    p.update(over)
    rng = np.random.default_rng(seed)
    E, H, D, rd, Q = p["n_embd"], p["n_head"], p["head_dim"], p["rope_dim"], p["q_lora"]
    Hi, Di, G, R = p["idx_head"], p["idx_dim"], p["o_groups"], p["o_lora"]
    X, K, F, S = p["n_expert"], p["n_expert_used"], p["n_ff_exp"], p["n_expert_shared"]
    hc = 4
    mix = (2 + hc) * hc
    ratios = list(p["ratios"]) + [0] * p["nextn"]
    n_main = len(p["ratios"])
    L = n_main + p["nextn"]
    pieces, types, merges = vocabulary(p["n_merges"])
    V = len(pieces)

    def mat(rows, cols):                      # numpy (rows, cols) = ggml {cols, rows}
        return rng.standard_normal((rows, cols)) / np.sqrt(cols)

    def norm_w(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    dense = G_F32 if all_f32 else G_Q8_0
    half = G_F32 if all_f32 else G_BF16
    fp4 = G_F32 if all_f32 else G_MXFP4
    t = []
    t.append(("token_embd.weight", rng.standard_normal((V, E)), half))
    t.append(("output_norm.weight", norm_w(E), G_F32))
    t.append(("output.weight", mat(V, E), half))
    t.append(("output_hc_fn.weight", 0.5 * mat(hc, hc * E), G_F32))
    t.append(("output_hc_base.weight", 0.5 * rng.standard_normal(hc), G_F32))
    t.append(("output_hc_scale.weight", np.array([0.7]), G_F32))
    for i in range(L):
        b = "blk.%d." % i
        t.append((b + "attn_norm.weight", norm_w(E), G_F32))
        t.append((b + "attn_sinks.weight", rng.standard_normal(H), G_F32))
        t.append((b + "attn_q_a.weight", mat(Q, E), dense))
        t.append((b + "attn_q_a_norm.weight", norm_w(Q), G_F32))
        t.append((b + "attn_q_b.weight", mat(H * D, Q), dense))
        t.append((b + "attn_kv.weight", mat(D, E), dense))
        t.append((b + "attn_kv_a_norm.weight", norm_w(D), G_F32))
        t.append((b + "attn_output_a.weight", mat(R * G, H * D // G), dense))
        t.append((b + "attn_output_b.weight", mat(E, G * R), dense))
        for part in ("attn", "ffn"):
            t.append((b + "hc_%s_fn.weight" % part, 0.5 * mat(mix, hc * E), G_F32))
            t.append((b + "hc_%s_base.weight" % part, 0.5 * rng.standard_normal(mix), G_F32))
            t.append((b + "hc_%s_scale.weight" % part, 0.5 + 0.5 * rng.random(3), G_F32))
        r = ratios[i]
        if r != 0:
            c = 2 if r == 4 else 1
            t.append((b + "attn_compressor_kv.weight", mat(c * D, E), G_F32))
            t.append((b + "attn_compressor_gate.weight", mat(c * D, E), G_F32))
            t.append((b + "attn_compressor_ape.weight", 0.5 * rng.standard_normal((r, c * D)), G_F32))
            t.append((b + "attn_compressor_norm.weight", norm_w(D), G_F32))
            if r == 4:
                t.append((b + "indexer.proj.weight", mat(Hi, E), half))
                t.append((b + "indexer.attn_q_b.weight", mat(Hi * Di, Q), dense))
                t.append((b + "indexer_compressor_kv.weight", mat(2 * Di, E), G_F32))
                t.append((b + "indexer_compressor_gate.weight", mat(2 * Di, E), G_F32))
                t.append((b + "indexer_compressor_ape.weight", 0.5 * rng.standard_normal((4, 2 * Di)), G_F32))
                t.append((b + "indexer_compressor_norm.weight", norm_w(Di), G_F32))
        t.append((b + "ffn_norm.weight", norm_w(E), G_F32))
        t.append((b + "ffn_gate_inp.weight", mat(X, E), half))
        if i < p["hash_layers"]:
            ids = np.stack([rng.permutation(X)[:K] for _ in range(V)])
            t.append((b + "ffn_gate_tid2eid.weight", ids, G_I32))
        else:
            t.append((b + "exp_probs_b.bias", 0.1 * rng.standard_normal(X), G_F32))
        t.append((b + "ffn_gate_exps.weight", rng.standard_normal((X, F, E)) / np.sqrt(E), fp4))
        t.append((b + "ffn_up_exps.weight", rng.standard_normal((X, F, E)) / np.sqrt(E), fp4))
        t.append((b + "ffn_down_exps.weight", rng.standard_normal((X, E, F)) / np.sqrt(F), fp4))
        t.append((b + "ffn_gate_shexp.weight", mat(F * S, E), dense))
        t.append((b + "ffn_up_shexp.weight", mat(F * S, E), dense))
        t.append((b + "ffn_down_shexp.weight", mat(E, F * S), dense))
        if i >= n_main:
            t.append((b + "nextn.eh_proj.weight", mat(E, 2 * E), dense))
            t.append((b + "nextn.enorm.weight", norm_w(E), G_F32))
            t.append((b + "nextn.hnorm.weight", norm_w(E), G_F32))
    if tensor_edits:
        t = [(n, tensor_edits[n](v) if n in tensor_edits else v, g) for n, v, g in t]
    t = [x for x in t if x[0] not in omit_tensors]

    a = "deepseek4."
    clamp = (T_F32, p["clamp"]) if p["clamp_scalar"] else (T_ARR, (T_F32, [p["clamp"]] * L))
    kv = [
        ("general.architecture", T_STR, "deepseek4"),
        ("general.name", T_STR, "v4-fixture"),
        (a + "context_length", T_U32, p["ctx"]),
        (a + "embedding_length", T_U32, E),
        (a + "block_count", T_U32, L),
        (a + "vocab_size", T_U32, V),
        (a + "expert_count", T_U32, X),
        (a + "expert_used_count", T_U32, K),
        (a + "expert_shared_count", T_U32, S),
        (a + "expert_feed_forward_length", T_U32, F),
        (a + "expert_weights_scale", T_F32, p["weights_scale"]),
        (a + "expert_weights_norm", T_BOOL, True),
        (a + "expert_gating_func", T_U32, p["gating"]),
        (a + "swiglu_clamp_exp", clamp[0], clamp[1]),
        (a + "attention.head_count", T_U32, H),
        (a + "attention.head_count_kv", T_U32, 1),
        (a + "attention.key_length", T_U32, D),
        (a + "attention.value_length", T_U32, D),
        (a + "attention.layer_norm_rms_epsilon", T_F32, p["rms_eps"]),
        (a + "attention.q_lora_rank", T_U32, Q),
        (a + "attention.sliding_window", T_U32, p["window"]),
        (a + "attention.indexer.head_count", T_U32, Hi),
        (a + "attention.indexer.key_length", T_U32, Di),
        (a + "attention.indexer.top_k", T_U32, p["idx_top_k"]),
        (a + "attention.output_group_count", T_U32, G),
        (a + "attention.output_lora_rank", T_U32, R),
        (a + "attention.compress_rope_freq_base", T_F32, p["compress_rope_base"]),
        (a + "attention.compress_ratios", T_ARR, (T_I32, ratios)),
        (a + "rope.dimension_count", T_U32, rd),
        (a + "rope.freq_base", T_F32, p["rope_base"]),
        (a + "rope.scaling.type", T_STR, "yarn"),
        (a + "rope.scaling.factor", T_F32, p["yarn_factor"]),
        (a + "rope.scaling.original_context_length", T_U32, p["yarn_orig_ctx"]),
        (a + "rope.scaling.yarn_beta_fast", T_F32, 32.0),
        (a + "rope.scaling.yarn_beta_slow", T_F32, 1.0),
        (a + "hyper_connection.count", T_U32, p["hc"]),
        (a + "hyper_connection.sinkhorn_iterations", T_U32, p["sinkhorn_iters"]),
        (a + "hyper_connection.epsilon", T_F32, p["hc_eps"]),
        (a + "hash_layer_count", T_U32, p["hash_layers"]),
        (a + "nextn_predict_layers", T_U32, p["nextn"]),
        ("tokenizer.ggml.model", T_STR, "gpt2"),
        ("tokenizer.ggml.pre", T_STR, "gpt-2"),
        ("tokenizer.ggml.tokens", T_ARR, (T_STR, pieces)),
        ("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
        ("tokenizer.ggml.merges", T_ARR, (T_STR, merges)),
        ("tokenizer.ggml.bos_token_id", T_U32, V - 2),
        ("tokenizer.ggml.eos_token_id", T_U32, V - 1),
    ]
    kv = [(k, meta_over[k][0], meta_over[k][1]) if k in meta_over else (k, ty, v) for k, ty, v in kv]
    kv += [(k, ty, v) for k, (ty, v) in meta_over.items() if k not in {x[0] for x in kv}]
    kv = [x for x in kv if x[1] is not None]
    write_gguf(path, kv, t)
    return V


def main(argv):
    args = list(argv[1:])
    if not args or args[0].startswith("-"):
        sys.stderr.write("usage: make_v4_fixture.py OUT.gguf [--seed N] [--all-f32]\n")
        return 2
    out = args.pop(0)
    seed, all_f32 = 1234, False
    while args:
        a = args.pop(0)
        if a == "--seed" and args:
            seed = int(args.pop(0))
        elif a == "--all-f32":
            all_f32 = True
        else:
            sys.stderr.write("unknown argument %r\n" % a)
            return 2
    make_fixture(out, seed=seed, all_f32=all_f32)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
