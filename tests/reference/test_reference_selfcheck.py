#!/usr/bin/python3
"""Self-test of the deepseek2 numpy reference; needs no engine.

Builds tiny random deepseek2 GGUFs with its own minimal writer and checks:
  * the GGUF reader (every metadata type, F32/F16/BF16/Q8_0 tensors, alignment);
  * causality: full-sequence logits == logits recomputed on every prefix;
  * the absorbed MLA form (q_nope absorbed through k_b into the latent space, attention
    over the latent, output expanded by v_b; written only here) == the reference's
    non-absorbed form to 1e-10, both as a full forward and as a token-by-token decode with
    a [latent | rope-key] cache;
  * legacy joined attn_kv_b == split attn_k_b/attn_v_b;
  * routing on hand-built cases (softmax, sigmoid + selection bias, group-limited);
  * vectorised MoE == a naive per-token loop;
  * RoPE / YaRN constants against the HF DeepSeek formulas;
  * the CLI (forward and compare, incl. the FGLG engine-logits format and its failures);
  * clear errors for tensor shapes that disagree with the metadata.
Prints `N passed, M failed` and exits non-zero when anything failed.
"""

import io
import math
import os
import shutil
import struct
import sys
import tempfile
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import gguf_read  # noqa: E402
import deepseek2_ref as ref  # noqa: E402


# ======================================================================================
# minimal GGUF writer (test only)
# ======================================================================================

T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
_PACK = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i",
         T_F32: "<f", T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}

G_F32, G_F16, G_Q8_0, G_BF16 = 0, 1, 8, 30


def _enc_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _enc_val(vtype, v):
    if vtype in _PACK:
        return struct.pack(_PACK[vtype], v)
    if vtype == T_STR:
        return _enc_str(v)
    if vtype == T_ARR:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        return out + b"".join(_enc_val(etype, x) for x in items)
    raise ValueError(vtype)


def bf16_round(a):
    """Truncating f32 -> bf16 conversion used by this writer, returned as float64."""
    bits = np.asarray(a, dtype="<f4").view("<u4") & np.uint32(0xFFFF0000)
    return bits.view("<f4").astype(np.float64)


def q8_0_encode(a):
    """Quantise a float array (last axis multiple of 32) to Q8_0 bytes + the exact dequant."""
    a = np.asarray(a, dtype=np.float64)
    blocks = a.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    d = (amax / 127.0).astype(np.float16)
    df = d.astype(np.float64)
    inv = np.where(df > 0, 1.0 / np.where(df > 0, df, 1.0), 0.0)
    q = np.clip(np.rint(blocks * inv[:, None]), -127, 127).astype(np.int8)
    rec = np.zeros(blocks.shape[0], dtype=gguf_read.Q8_0_BLOCK_DTYPE)
    rec["d"] = d
    rec["qs"] = q
    return rec.tobytes(), (df[:, None] * q.astype(np.float64)).reshape(a.shape)


def encode_tensor(a, gtype):
    """Returns (raw bytes, float64 values the reader must reproduce)."""
    a = np.asarray(a, dtype=np.float64)
    if gtype == G_F32:
        f = a.astype("<f4")
        return f.tobytes(), f.astype(np.float64)
    if gtype == G_F16:
        f = a.astype("<f2")
        return f.tobytes(), f.astype(np.float64)
    if gtype == G_BF16:
        bits = (a.astype("<f4").view("<u4") >> 16).astype("<u2")
        return bits.tobytes(), bf16_round(a)
    if gtype == G_Q8_0:
        return q8_0_encode(a)
    raise ValueError(gtype)


class GGUFWriter(object):
    def __init__(self, alignment=32):
        self.kv = []
        self.tensors = []
        self.alignment = alignment
        if alignment != 32:
            self.kv.append(("general.alignment", T_U32, alignment))

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))

    def add_tensor(self, name, array, gtype=G_F32):
        """array has the numpy (row-major) shape, i.e. ggml ne reversed. Returns stored values."""
        raw, stored = encode_tensor(array, gtype)
        ne = list(reversed(np.shape(array)))
        self.tensors.append((name, ne, gtype, raw))
        return stored

    def add_raw_tensor(self, name, ne, gtype, raw):
        self.tensors.append((name, list(ne), gtype, raw))

    def write(self, path):
        al = self.alignment
        head = io.BytesIO()
        head.write(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
        for key, vtype, value in self.kv:
            head.write(_enc_str(key) + struct.pack("<I", vtype) + _enc_val(vtype, value))
        off = 0
        offsets = []
        for name, ne, gtype, raw in self.tensors:
            offsets.append(off)
            head.write(_enc_str(name) + struct.pack("<I", len(ne)))
            head.write(b"".join(struct.pack("<Q", x) for x in ne))
            head.write(struct.pack("<IQ", gtype, off))
            off += (len(raw) + al - 1) // al * al
        h = head.getvalue()
        pad = (-len(h)) % al
        with open(path, "wb") as f:
            f.write(h + b"\0" * pad)
            for (name, ne, gtype, raw), o in zip(self.tensors, offsets):
                f.write(raw)
                f.write(b"\0" * ((-len(raw)) % al))


# ======================================================================================
# tiny random deepseek2 models
# ======================================================================================

BASE_CFG = dict(
    d=64, n_layer=3, n_dense=1, H=4, q_lora=32, kv_lora=32, nope=16, rope=8, v=16,
    vocab=97, n_ff=96, E=8, used=2, shared=1, f_exp=32, eps=1e-6, freq_base=10000.0,
    ctx=2048, gating=1, norm_w=False, w_scale=1.0, exp_bias=False, n_group=0, n_group_used=0,
    yarn=None, tied=False, legacy_kv_b=False, types={}, write_gating=True,
)


def build_model(path, seed=0, **over):
    """Writes a random deepseek2 GGUF; returns (cfg, dict name -> stored float64 numpy array)."""
    c = dict(BASE_CFG)
    c.update(over)
    rng = np.random.RandomState(seed)
    w = GGUFWriter()
    A = "deepseek2."
    w.add("general.architecture", T_STR, "deepseek2")
    w.add("general.name", T_STR, "tiny-selftest")
    w.add(A + "context_length", T_U32, c["ctx"])
    w.add(A + "embedding_length", T_U32, c["d"])
    w.add(A + "block_count", T_U32, c["n_layer"])
    w.add(A + "feed_forward_length", T_U32, c["n_ff"])
    w.add(A + "attention.head_count", T_U32, c["H"])
    w.add(A + "attention.head_count_kv", T_U32, c["H"] if c["legacy_kv_b"] else 1)
    w.add(A + "attention.layer_norm_rms_epsilon", T_F32, c["eps"])
    if c["q_lora"]:
        w.add(A + "attention.q_lora_rank", T_U32, c["q_lora"])
    w.add(A + "attention.kv_lora_rank", T_U32, c["kv_lora"])
    if c["legacy_kv_b"]:
        w.add(A + "attention.key_length", T_U32, c["nope"] + c["rope"])
        w.add(A + "attention.value_length", T_U32, c["v"])
    else:
        w.add(A + "attention.key_length", T_U32, c["kv_lora"] + c["rope"])
        w.add(A + "attention.value_length", T_U32, c["kv_lora"])
        w.add(A + "attention.key_length_mla", T_U32, c["nope"] + c["rope"])
        w.add(A + "attention.value_length_mla", T_U32, c["v"])
    w.add(A + "rope.dimension_count", T_U32, c["rope"])
    w.add(A + "rope.freq_base", T_F32, c["freq_base"])
    if c["yarn"]:
        y = c["yarn"]
        w.add(A + "rope.scaling.type", T_STR, "yarn")
        w.add(A + "rope.scaling.factor", T_F32, y["factor"])
        w.add(A + "rope.scaling.original_context_length", T_U32, y["orig_ctx"])
        if y.get("mscale_all_dim") is not None:
            w.add(A + "rope.scaling.yarn_log_multiplier", T_F32, 0.1 * y["mscale_all_dim"])
    w.add(A + "leading_dense_block_count", T_U32, c["n_dense"])
    w.add(A + "expert_count", T_U32, c["E"])
    w.add(A + "expert_used_count", T_U32, c["used"])
    w.add(A + "expert_shared_count", T_U32, c["shared"])
    w.add(A + "expert_feed_forward_length", T_U32, c["f_exp"])
    w.add(A + "expert_weights_scale", T_F32, c["w_scale"])
    w.add(A + "expert_weights_norm", T_BOOL, c["norm_w"])
    if c["write_gating"]:
        w.add(A + "expert_gating_func", T_U32, c["gating"])
    if c["n_group"]:
        w.add(A + "expert_group_count", T_U32, c["n_group"])
        w.add(A + "expert_group_used_count", T_U32, c["n_group_used"])
    w.add("tokenizer.ggml.model", T_STR, "gpt2")
    w.add("tokenizer.ggml.tokens", T_ARR, (T_STR, ["t%d" % i for i in range(c["vocab"])]))

    d, H, V = c["d"], c["H"], c["vocab"]
    W = {}

    def t(name, shape, scale=None, kind="mat"):
        if kind == "norm":
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif kind == "bias":
            a = 0.05 * rng.standard_normal(shape)
        else:
            fan_in = shape[-1]
            a = rng.standard_normal(shape) * (scale if scale is not None else 1.0 / math.sqrt(fan_in))
        W[name] = w.add_tensor(name, a, c["types"].get(name, G_F32))

    t("token_embd.weight", (V, d), 1.0)
    t("output_norm.weight", (d,), kind="norm")
    if not c["tied"]:
        t("output.weight", (V, d))
    kmla = c["nope"] + c["rope"]
    for il in range(c["n_layer"]):
        p = "blk.%d." % il
        t(p + "attn_norm.weight", (d,), kind="norm")
        if c["q_lora"]:
            t(p + "attn_q_a.weight", (c["q_lora"], d))
            t(p + "attn_q_a_norm.weight", (c["q_lora"],), kind="norm")
            t(p + "attn_q_b.weight", (H * kmla, c["q_lora"]))
        else:
            t(p + "attn_q.weight", (H * kmla, d))
        t(p + "attn_kv_a_mqa.weight", (c["kv_lora"] + c["rope"], d))
        t(p + "attn_kv_a_norm.weight", (c["kv_lora"],), kind="norm")
        # the original HF kv_b_proj: (H*(nope+v), kv_lora), rows per head [nope | v]
        kvb = rng.standard_normal((H * (c["nope"] + c["v"]), c["kv_lora"])) / math.sqrt(c["kv_lora"])
        if c["legacy_kv_b"]:
            W[p + "attn_kv_b.weight"] = w.add_tensor(p + "attn_kv_b.weight", kvb)
        else:
            # split as convert_hf_to_gguf does: k_b = kv_b[:, :nope] per head, transposed
            per = kvb.reshape(H, c["nope"] + c["v"], c["kv_lora"])
            k_b = np.ascontiguousarray(per[:, :c["nope"], :].transpose(0, 2, 1))   # (H, kv_lora, nope)
            v_b = np.ascontiguousarray(per[:, c["nope"]:, :])                        # (H, v, kv_lora)
            W[p + "attn_k_b.weight"] = w.add_tensor(p + "attn_k_b.weight", k_b)
            W[p + "attn_v_b.weight"] = w.add_tensor(p + "attn_v_b.weight", v_b)
        W["_kvb%d" % il] = kvb.astype(np.float32).astype(np.float64)   # values as stored (F32)
        t(p + "attn_output.weight", (d, H * c["v"]))
        t(p + "ffn_norm.weight", (d,), kind="norm")
        if il < c["n_dense"]:
            t(p + "ffn_gate.weight", (c["n_ff"], d))
            t(p + "ffn_up.weight", (c["n_ff"], d))
            t(p + "ffn_down.weight", (d, c["n_ff"]))
        else:
            E, f = c["E"], c["f_exp"]
            t(p + "ffn_gate_inp.weight", (E, d), 1.0 / math.sqrt(d) * 3.0)
            if c["exp_bias"]:
                t(p + "exp_probs_b.bias", (E,), kind="bias")
            t(p + "ffn_gate_exps.weight", (E, f, d))
            t(p + "ffn_up_exps.weight", (E, f, d))
            t(p + "ffn_down_exps.weight", (E, d, f))
            if c["shared"]:
                fs = f * c["shared"]
                t(p + "ffn_gate_shexp.weight", (fs, d))
                t(p + "ffn_up_shexp.weight", (fs, d))
                t(p + "ffn_down_shexp.weight", (d, fs))
    w.write(path)
    return c, W


# ======================================================================================
# the absorbed MLA form (test-only second implementation)
# ======================================================================================

def attention_absorbed(model, il, h, positions, capture=None):
    """MLA with q_nope absorbed through k_b: attention runs over the latent (MQA, one KV head)."""
    hp = model.hp
    q_nope, q_pe, c, k_pe = ref.attention_inputs(model, il, h, positions)
    wkb, wvb = ref.kv_b_weights(model, il)
    T = h.shape[0]
    q_lat = np.einsum("thn,hrn->thr", q_nope, wkb)              # (T, H, kv_lora)
    q_full = np.concatenate([q_lat, q_pe], axis=-1)             # (T, H, kv_lora + rope)
    k_full = np.concatenate([c, k_pe], axis=-1)                 # (T, kv_lora + rope)
    s = np.einsum("thk,sk->hts", q_full, k_full) * model.rope["kq_scale"]
    s = np.where(np.triu(np.ones((T, T), bool), 1)[None], -np.inf, s)
    p = ref.softmax(s, axis=-1)
    o_lat = np.einsum("hts,sr->thr", p, c)                      # (T, H, kv_lora)
    o = np.einsum("thr,hjr->thj", o_lat, wvb).reshape(T, hp.n_head * hp.v_mla)
    return o @ model.w("blk.%d.attn_output.weight" % il).T


class LatentCacheAttention(object):
    """Absorbed attention fed one token at a time from a per-layer [latent | k_pe] cache."""

    def __init__(self, model):
        self.cache = [np.zeros((0, model.hp.kv_lora + model.hp.n_rot)) for _ in range(model.hp.n_layer)]

    def __call__(self, model, il, h, positions, capture=None):
        hp = model.hp
        q_nope, q_pe, c, k_pe = ref.attention_inputs(model, il, h, positions)
        self.cache[il] = np.concatenate([self.cache[il], np.concatenate([c, k_pe], -1)], 0)
        kv = self.cache[il]
        n_kv = kv.shape[0]
        wkb, wvb = ref.kv_b_weights(model, il)
        q_lat = np.einsum("thn,hrn->thr", q_nope, wkb)
        q_full = np.concatenate([q_lat, q_pe], -1)
        s = np.einsum("thk,sk->hts", q_full, kv) * model.rope["kq_scale"]
        pos_k = np.arange(n_kv)
        s = np.where(pos_k[None, None, :] > np.asarray(positions)[None, :, None], -np.inf, s)
        p = ref.softmax(s, -1)
        o_lat = np.einsum("hts,sr->thr", p, kv[:, :hp.kv_lora])
        o = np.einsum("thr,hjr->thj", o_lat, wvb).reshape(h.shape[0], hp.n_head * hp.v_mla)
        return o @ model.w("blk.%d.attn_output.weight" % il).T


def forward_at(model, tokens, start_pos, attention):
    """The reference forward for a chunk of tokens at positions start_pos.. (for the cache test)."""
    hp = model.hp
    positions = np.arange(start_pos, start_pos + len(tokens))
    x = model.w("token_embd.weight")[np.asarray(tokens)]
    for il in range(hp.n_layer):
        p = "blk.%d." % il
        hN = ref.rms_norm(x, model.w(p + "attn_norm.weight"), hp.eps)
        x = x + attention(model, il, hN, positions)
        hN = ref.rms_norm(x, model.w(p + "ffn_norm.weight"), hp.eps)
        if hp.layer_kind[il] == "dense":
            x = x + ref.swiglu_ffn(hN, model.w(p + "ffn_gate.weight"), model.w(p + "ffn_up.weight"),
                                   model.w(p + "ffn_down.weight"))
        else:
            x = x + ref.moe_ffn(model, il, hN)
    x = ref.rms_norm(x, model.w("output_norm.weight"), hp.eps)
    head = model.w("token_embd.weight") if hp.tied_output else model.w("output.weight")
    return x @ head.T


# ======================================================================================
# tiny test harness
# ======================================================================================

RESULTS = []
TMP = None


def check(name, cond, detail=""):
    RESULTS.append((name, bool(cond), detail))
    sys.stdout.write("%s %s%s\n" % ("ok  " if cond else "FAIL", name, ("  (" + detail + ")") if detail else ""))


def run(fn):
    try:
        fn()
    except Exception:
        RESULTS.append((fn.__name__, False, "exception"))
        sys.stdout.write("FAIL %s raised:\n%s" % (fn.__name__, traceback.format_exc()))


def tmp(name):
    return os.path.join(TMP, name)


def maxabs(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


TOKENS = [3, 17, 42, 5, 96, 0, 11, 64, 42, 7, 23, 88]

VARIANTS = {
    # q_lora, split k_b/v_b, softmax gating, F16/BF16/Q8_0 weights mixed in
    "std": dict(types={"token_embd.weight": G_Q8_0, "blk.0.attn_q_a.weight": G_F16,
                       "blk.1.ffn_up_exps.weight": G_BF16, "blk.2.attn_kv_a_mqa.weight": G_Q8_0,
                       "output.weight": G_F16}),
    # lite (plain attn_q), sigmoid + selection bias + groups + norm + scale, YaRN V3-style, tied head
    "v3": dict(q_lora=0, gating=2, exp_bias=True, n_group=4, n_group_used=2, norm_w=True,
               w_scale=2.5, yarn=dict(factor=4.0, orig_ctx=512, mscale_all_dim=1.0), ctx=2048,
               tied=True, used=3),
    # legacy joined attn_kv_b, YaRN V2-style (mscale_all_dim 0.707), no gating key
    "legacy": dict(legacy_kv_b=True, yarn=dict(factor=40.0, orig_ctx=4096, mscale_all_dim=0.707),
                   ctx=163840, write_gating=False, n_dense=2, n_layer=3),
    # YaRN without yarn_log_multiplier; 2 shared experts
    "yarn_nolog": dict(yarn=dict(factor=8.0, orig_ctx=1024, mscale_all_dim=None), shared=2),
}


# ======================================================================================
# tests
# ======================================================================================

def test_gguf_reader():
    w = GGUFWriter(alignment=64)
    meta = [
        ("a.u8", T_U8, 200), ("a.i8", T_I8, -100), ("a.u16", T_U16, 60000), ("a.i16", T_I16, -30000),
        ("a.u32", T_U32, 4000000000), ("a.i32", T_I32, -2000000000), ("a.f32", T_F32, 0.5),
        ("a.bool", T_BOOL, True), ("a.str", T_STR, "h\u00e9llo"), ("a.u64", T_U64, 2 ** 40 + 3),
        ("a.i64", T_I64, -(2 ** 40)), ("a.f64", T_F64, 1.0 / 3.0),
        ("a.arr_i32", T_ARR, (T_I32, [1, -2, 3])), ("a.arr_str", T_ARR, (T_STR, ["x", "", "yz"])),
        ("a.arr_f32", T_ARR, (T_F32, [0.25, -1.5])), ("a.arr_bool", T_ARR, (T_BOOL, [True, False])),
        ("a.arr_arr", T_ARR, (T_ARR, [(T_U8, [1, 2]), (T_STR, ["q"])])),
        ("a.arr_empty", T_ARR, (T_U32, [])),
    ]
    for k, t, v in meta:
        w.add(k, t, v)
    rng = np.random.RandomState(5)
    arrays = {
        "t.f32_1d": (rng.standard_normal(7), G_F32),
        "t.f16_2d": (rng.standard_normal((3, 5)), G_F16),
        "t.bf16_3d": (rng.standard_normal((2, 3, 4)), G_BF16),
        "t.q8_2d": (rng.standard_normal((3, 64)) * 3.0, G_Q8_0),
        "t.q8_4d": (rng.standard_normal((2, 1, 2, 32)), G_Q8_0),
    }
    stored = {k: w.add_tensor(k, a, g) for k, (a, g) in arrays.items()}
    path = tmp("reader.gguf")
    w.write(path)
    g = gguf_read.GGUFFile(path)
    check("gguf: version/alignment", g.version == 3 and g.alignment == 64 and g.data_start % 64 == 0)
    ok = True
    for k, t, v in meta:
        got = g.metadata[k]
        if t == T_ARR:
            et, items = v
            if et == T_ARR:
                ok &= len(got) == 2 and list(got[0]) == [1, 2] and got[1] == ["q"]
            elif et == T_STR:
                ok &= got == items
            else:
                ok &= np.allclose(np.asarray(got, dtype=np.float64), np.asarray(items, dtype=np.float64)) \
                    and len(got) == len(items)
        elif t == T_F32:
            ok &= abs(got - v) < 1e-7
        else:
            ok &= got == v
    check("gguf: metadata of every type round-trips", ok)
    check("gguf: value types recorded", g.value_types["a.arr_str"] == (T_ARR, T_STR) and g.value_types["a.f64"] == T_F64)
    for k, (a, gt) in arrays.items():
        info = g.tensors[k]
        got = g.tensor_f64(k)
        check("gguf: tensor %s shape %s / ne %s" % (k, got.shape, list(info.ne)),
              got.shape == a.shape and list(info.ne) == list(reversed(a.shape)) and got.dtype == np.float64)
        check("gguf: tensor %s values exact" % k, maxabs(got, stored[k]) == 0.0)
    check("gguf: Q8_0 close to the source", maxabs(stored["t.q8_2d"], arrays["t.q8_2d"][0]) < 0.05)
    # bad magic
    with open(tmp("bad.gguf"), "wb") as f:
        f.write(b"GGUX" + b"\0" * 40)
    try:
        gguf_read.GGUFFile(tmp("bad.gguf"))
        check("gguf: bad magic rejected", False)
    except gguf_read.GGUFError:
        check("gguf: bad magic rejected", True)
    g.close()


def _model(variant, seed=1):
    path = tmp("m_%s.gguf" % variant)
    cfg, W = build_model(path, seed=seed, **VARIANTS[variant])
    return ref.DeepSeek2Model(path), cfg, W


def test_model_variants():
    for name in VARIANTS:
        m, cfg, W = _model(name)
        hp = m.hp
        check("%s: hparams" % name,
              hp.n_embd == cfg["d"] and hp.n_head == cfg["H"] and hp.nope == cfg["nope"]
              and hp.v_mla == cfg["v"] and hp.kv_lora == cfg["kv_lora"] and hp.n_vocab == cfg["vocab"]
              and hp.tied_output == cfg["tied"]
              and hp.layer_kv_b == ["joined" if cfg["legacy_kv_b"] else "split"] * cfg["n_layer"])
        full = ref.forward(m, TOKENS)
        check("%s: logits shape/finite" % name, full.shape == (len(TOKENS), cfg["vocab"]) and np.isfinite(full).all())
        # (a) causality: every prefix reproduces the corresponding rows
        worst = 0.0
        for k in range(1, len(TOKENS) + 1):
            pre = ref.forward(m, TOKENS[:k])
            worst = max(worst, maxabs(pre, full[:k]))
        check("%s: causality (prefix logits == full logits)" % name, worst < 1e-12, "max diff %.2e" % worst)
        # (b) absorbed form == non-absorbed form
        absd = ref.forward(m, TOKENS, attention=attention_absorbed)
        diff = maxabs(absd, full)
        check("%s: absorbed MLA == non-absorbed (full forward)" % name, diff < 1e-10, "max diff %.2e" % diff)
        h = np.random.RandomState(9).standard_normal((len(TOKENS), cfg["d"]))
        pos = np.arange(len(TOKENS))
        da = max(maxabs(ref.attention_mha(m, il, h, pos), attention_absorbed(m, il, h, pos))
                 for il in range(cfg["n_layer"]))
        check("%s: absorbed == non-absorbed (per-layer attention)" % name, da < 1e-10, "max diff %.2e" % da)
        # (a') incremental decode through a latent cache, one token at a time
        att = LatentCacheAttention(m)
        rows = [forward_at(m, [tk], i, att)[0] for i, tk in enumerate(TOKENS)]
        di = maxabs(np.array(rows), full)
        check("%s: token-by-token latent-cache decode == full forward" % name, di < 1e-10, "max diff %.2e" % di)
        # chunked prefill (5 + 7) through the cache
        att = LatentCacheAttention(m)
        a = forward_at(m, TOKENS[:5], 0, att)
        b = forward_at(m, TOKENS[5:], 5, att)
        dc = maxabs(np.concatenate([a, b]), full)
        check("%s: chunked prefill through the cache == full forward" % name, dc < 1e-10, "max diff %.2e" % dc)
        # weights seen by the model are the stored (dequantised) ones
        if cfg["types"]:
            okw = all(maxabs(m.w(k), W[k]) == 0.0 for k in cfg["types"])
            check("%s: quantised/half tensors dequantised exactly" % name, okw)
        m.close()


def test_split_vs_joined_kv_b():
    over = dict(VARIANTS["std"])
    over["types"] = {}
    build_model(tmp("split.gguf"), seed=7, **over)
    over["legacy_kv_b"] = True
    build_model(tmp("joined.gguf"), seed=7, **over)
    ms, mj = ref.DeepSeek2Model(tmp("split.gguf")), ref.DeepSeek2Model(tmp("joined.gguf"))
    d = maxabs(ref.forward(ms, TOKENS), ref.forward(mj, TOKENS))
    check("split attn_k_b/attn_v_b == legacy joined attn_kv_b", d < 1e-12, "max diff %.2e" % d)
    ms.close()
    mj.close()


def test_layouts_against_hf_kv_b():
    """K_nope / V from the reference's kv_b_weights equal the HF kv_b_proj applied to the latent."""
    m, cfg, W = _model("std")
    c = np.random.RandomState(3).standard_normal((5, cfg["kv_lora"]))
    H, nope, v = cfg["H"], cfg["nope"], cfg["v"]
    ok = True
    for il in range(cfg["n_layer"]):
        kv = (c @ W["_kvb%d" % il].T).reshape(5, H, nope + v)    # HF: kv_b_proj(c).view(.., H, nope+v)
        wkb, wvb = ref.kv_b_weights(m, il)
        k_nope = np.einsum("tr,hrn->thn", c, wkb)
        vv = np.einsum("tr,hjr->thj", c, wvb)
        ok &= maxabs(k_nope, kv[:, :, :nope]) < 1e-12 and maxabs(vv, kv[:, :, nope:]) < 1e-12
    check("attn_k_b {nope,kv_lora,H} / attn_v_b {kv_lora,v,H} decompress like HF kv_b_proj", ok)
    m.close()


def test_routing():
    sm = ref.GATING_SOFTMAX
    sg = ref.GATING_SIGMOID
    # softmax, plain top-k
    lg = np.array([[1.0, 3.0, 2.0, 0.5]])
    p = np.exp(lg) / np.exp(lg).sum()
    idx, w = ref.select_experts(lg, 2, sm)
    check("routing: softmax top-2 picks [1, 2]", list(idx[0]) == [1, 2])
    check("routing: softmax weights = unnormalised probs", maxabs(w[0], p[0, [1, 2]]) < 1e-15)
    idx, w = ref.select_experts(lg, 2, sm, norm_w=True, w_scale=2.0)
    pn = p[0, [1, 2]] / p[0, [1, 2]].sum() * 2.0
    check("routing: softmax norm + scale", maxabs(w[0], pn) < 1e-15 and abs(w[0].sum() - 2.0) < 1e-14)
    # sigmoid + selection bias: the bias changes the choice but not the weight
    lg = np.array([[2.0, 1.0, 0.0, -1.0]])
    bias = np.array([0.0, 0.0, 5.0, 0.0])
    sig = 1.0 / (1.0 + np.exp(-lg[0]))
    idx, w = ref.select_experts(lg, 2, sg)
    check("routing: sigmoid top-2 without bias picks [0, 1]", list(idx[0]) == [0, 1])
    idx, w = ref.select_experts(lg, 2, sg, bias=bias)
    check("routing: sigmoid + bias picks [2, 0]", list(idx[0]) == [2, 0])
    check("routing: bias does not enter the weights", maxabs(w[0], sig[[2, 0]]) < 1e-15)
    idx, w = ref.select_experts(lg, 2, sg, bias=bias, norm_w=True, w_scale=2.5)
    exp_w = sig[[2, 0]] / sig[[2, 0]].sum() * 2.5
    check("routing: sigmoid + bias + norm + scale", maxabs(w[0], exp_w) < 1e-15)
    # groups: 4 groups of 2; expert 0 is the single best but its group is weak
    lg = np.array([[3.0, -6.0, 1.0, 0.9, 0.5, 0.8, -1.0, -2.0]])
    idx, _ = ref.select_experts(lg, 2, sg)
    check("routing: ungrouped top-2 picks [0, 2]", list(idx[0]) == [0, 2])
    idx, w = ref.select_experts(lg, 2, sg, n_group=4, n_group_used=2)
    check("routing: groups keep {1,2}, top-2 picks [2, 3]", list(idx[0]) == [2, 3])
    idx, _ = ref.select_experts(lg, 4, sg, n_group=4, n_group_used=2)
    check("routing: groups, top-4 stays inside kept groups", sorted(idx[0]) == [2, 3, 4, 5])
    # group score = sum of the TOP-2 (not max, not full sum): 4 groups of 3
    s = np.array([[0.99, 0.01, 0.01,   0.60, 0.58, 0.00,   0.45, 0.44, 0.43,   0.1, 0.1, 0.1]])
    sc = np.clip(s, 1e-12, 1 - 1e-12)
    lg = np.log(sc / (1 - sc))                                 # sigmoid^-1 so the scores are s
    idx, _ = ref.select_experts(lg, 2, sg, n_group=4, n_group_used=1)
    check("routing: group score is the top-2 sum (group 1 wins over max-group 0 and sum-group 2)",
          list(idx[0]) == [3, 4])
    # bias participates in the group scores
    b = np.zeros(12)
    b[1] = 0.5
    idx, w = ref.select_experts(lg, 2, sg, bias=b, n_group=4, n_group_used=1)
    check("routing: biased scores decide the groups", list(idx[0]) == [0, 1] and abs(w[0, 1] - 0.01) < 1e-9)
    # several tokens at once
    lg = np.random.RandomState(0).standard_normal((6, 8))
    idx, w = ref.select_experts(lg, 3, sm)
    ok = all(list(idx[t]) == list(np.argsort(-lg[t])[:3]) for t in range(6))
    check("routing: batched softmax selection == per-token argsort", ok)


def test_moe_vs_naive():
    m, cfg, W = _model("v3", seed=4)
    hp = m.hp
    h = np.random.RandomState(2).standard_normal((9, cfg["d"]))
    il = cfg["n_dense"]
    p = "blk.%d." % il
    got = ref.moe_ffn(m, il, h)
    want = np.zeros_like(h)
    for t in range(h.shape[0]):
        lg = W[p + "ffn_gate_inp.weight"] @ h[t]
        sc = 1.0 / (1.0 + np.exp(-lg))
        sel = sc + W[p + "exp_probs_b.bias"]
        gs = sel.reshape(hp.n_group, -1)
        gscore = np.array([np.sort(g)[-2:].sum() for g in gs])
        keep = np.argsort(-gscore)[:hp.n_group_used]
        masked = np.full_like(sel, -np.inf)
        for g in keep:
            masked[g * gs.shape[1]:(g + 1) * gs.shape[1]] = sel[g * gs.shape[1]:(g + 1) * gs.shape[1]]
        chosen = np.argsort(-masked)[:hp.n_expert_used]
        wts = sc[chosen] / sc[chosen].sum() * cfg["w_scale"]
        for e, wt in zip(chosen, wts):
            g = W[p + "ffn_gate_exps.weight"][e] @ h[t]
            u = W[p + "ffn_up_exps.weight"][e] @ h[t]
            want[t] += wt * (W[p + "ffn_down_exps.weight"][e] @ (g / (1 + np.exp(-g)) * u))
        g = W[p + "ffn_gate_shexp.weight"] @ h[t]
        u = W[p + "ffn_up_shexp.weight"] @ h[t]
        want[t] += W[p + "ffn_down_shexp.weight"] @ (g / (1 + np.exp(-g)) * u)
    d = maxabs(got, want)
    check("MoE layer == naive per-token loop (sigmoid, bias, groups, norm, scale, shared)", d < 1e-12,
          "max diff %.2e" % d)
    m.close()


def _hf_deepseek_yarn(dim, base, factor, orig, mscale, mscale_all_dim, beta_fast=32, beta_slow=1):
    """HF modeling_deepseek DeepseekV2YarnRotaryEmbedding / attention softmax_scale, re-derived."""
    def corr_dim(nrot):
        return (dim * math.log(orig / (nrot * 2 * math.pi))) / (2 * math.log(base))
    low = max(math.floor(corr_dim(beta_fast)), 0)
    high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
    freq_extra = 1.0 / base ** (np.arange(0, dim, 2) / dim)
    freq_inter = 1.0 / (factor * base ** (np.arange(0, dim, 2) / dim))
    inv_freq_mask = 1.0 - ramp
    inv_freq = freq_inter * (1 - inv_freq_mask) + freq_extra * inv_freq_mask

    def get_mscale(s, m):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
    cos_scale = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    q_scale = get_mscale(factor, mscale_all_dim) ** 2
    return inv_freq, cos_scale, q_scale


def test_rope_yarn():
    # plain RoPE: theta = pos * base^(-2i/n), adjacent pairs, no magnitude change
    m, cfg, _ = _model("std")
    rp = m.rope
    pos = np.arange(6)
    th = ref.rope_theta(rp, pos)
    i = np.arange(cfg["rope"] // 2)
    check("rope: no scaling -> theta = pos*base^(-2i/n)",
          maxabs(th, pos[:, None] * cfg["freq_base"] ** (-2.0 * i / cfg["rope"])[None]) < 1e-12)
    check("rope: no scaling -> kq_scale = 1/sqrt(nope+rope), magnitude 1",
          abs(rp["kq_scale"] - 1 / math.sqrt(cfg["nope"] + cfg["rope"])) < 1e-15 and rp["rope_mag"] == 1.0)
    x = np.zeros((2, 1, cfg["rope"]))
    x[:, 0, 0] = 1.0
    x[:, 0, 3] = 1.0
    cos, sin = ref.rope_cos_sin(rp, np.array([0, 3]))
    y = ref.apply_rope(x, cos, sin)
    ok = (abs(y[1, 0, 0] - math.cos(th[3, 0])) < 1e-15 and abs(y[1, 0, 1] - math.sin(th[3, 0])) < 1e-15
          and abs(y[1, 0, 2] + math.sin(th[3, 1])) < 1e-15 and abs(y[1, 0, 3] - math.cos(th[3, 1])) < 1e-15
          and maxabs(y[0], x[0]) == 0.0)
    check("rope: GGML normal mode rotates adjacent pairs (x0,x1),(x2,x3)", ok)
    m.close()
    # YaRN with yarn_log_multiplier (DeepSeek V3 / V2 style) == HF DeepSeek
    for name, msc in (("v3", 1.0), ("legacy", 0.707)):
        m, cfg, _ = _model(name)
        y = cfg["yarn"]
        inv_freq, cos_scale, q_scale = _hf_deepseek_yarn(cfg["rope"], cfg["freq_base"], y["factor"],
                                                         y["orig_ctx"], msc, msc)
        pos = np.array([0, 1, 7, 100, 3000])
        th = ref.rope_theta(m.rope, pos)
        dth = maxabs(th, pos[:, None] * inv_freq[None])
        check("yarn(%s): theta == HF DeepSeek inv_freq (corr dims %s)" % (name, m.rope["corr_dims"]),
              dth < 1e-9 * 3000, "max diff %.2e" % dth)
        # relative: stored log multiplier is an f32 of 0.1*mscale_all_dim
        check("yarn(%s): rope magnitude == HF cos/sin scale (1)" % name,
              abs(m.rope["rope_mag"] - cos_scale) < 1e-6)
        want = q_scale / math.sqrt(cfg["nope"] + cfg["rope"])
        check("yarn(%s): kq_scale == HF softmax_scale (mscale_all_dim^2 rule)" % name,
              abs(m.rope["kq_scale"] / want - 1) < 1e-6, "%.9g vs %.9g" % (m.rope["kq_scale"], want))
        lo, hi = m.rope["corr_dims"]
        check("yarn(%s): the ramp is non-trivial for this config" % name, 0 <= lo < hi <= cfg["rope"] - 1)
        m.close()
    # YaRN without the log multiplier: llama.cpp scales the RoPE output by 1+0.1 ln(s) and
    # kq_scale by (1+0.1 ln(s))^2
    m, cfg, _ = _model("yarn_nolog")
    s = cfg["yarn"]["factor"]
    msc = 1 + 0.1 * math.log(s)
    check("yarn(no log_mul): rope magnitude = 1 + 0.1 ln(factor)", abs(m.rope["rope_mag"] - msc) < 1e-12)
    check("yarn(no log_mul): kq_scale = (1 + 0.1 ln(factor))^2 / sqrt(k)",
          abs(m.rope["kq_scale"] - msc * msc / math.sqrt(cfg["nope"] + cfg["rope"])) < 1e-12)
    m.close()


def _greedy_tokens(m, prompt, n_gen):
    toks = list(prompt)
    for _ in range(n_gen):
        toks.append(int(np.argmax(ref.forward(m, toks)[-1])))
    return toks


def _run_main(args):
    old = sys.stdout
    buf = io.StringIO()
    sys.stdout = buf
    try:
        rc = ref.main(args)
    finally:
        sys.stdout = old
    return rc, buf.getvalue()


def test_cli():
    path = tmp("cli.gguf")
    build_model(path, seed=11, **VARIANTS["v3"])
    m = ref.DeepSeek2Model(path)
    toks = _greedy_tokens(m, [5, 9, 33, 2], 6)
    P = 4
    tstr = ",".join(str(t) for t in toks)
    out = tmp("logits.npy")
    rc, _ = _run_main([path, "--tokens", tstr, "--out", out])
    full = ref.forward(m, toks)
    check("cli: forward writes [n_tokens, n_vocab] float64",
          rc == 0 and np.load(out).shape == full.shape and np.load(out).dtype == np.float64
          and maxabs(np.load(out), full) == 0.0)
    with open(tmp("toks.txt"), "w") as f:
        f.write(" ".join(str(t) for t in toks) + "\n")
    rc, _ = _run_main([path, "--tokens", "@" + tmp("toks.txt"), "--out", tmp("l2.npy")])
    check("cli: --tokens @FILE", rc == 0 and maxabs(np.load(tmp("l2.npy")), full) == 0.0)

    eng = tmp("eng.fglg")
    # engine evaluated every token but the last one
    ref.write_engine_logits(eng, toks[:-1], full[:-1].astype(np.float32))
    with open(eng, "rb") as f:
        raw = f.read()
    hdr_ok = raw[:4] == b"FGLG" and struct.unpack("<III", raw[4:16]) == (1, len(toks) - 1, full.shape[1]) \
        and len(raw) == 16 + (len(toks) - 1) * 4 * (1 + full.shape[1]) \
        and struct.unpack("<i", raw[16:20])[0] == toks[0] \
        and struct.unpack("<f", raw[20:24])[0] == np.float32(full[0, 0])
    check("cli: FGLG v1 layout (header, i32 token, f32 logits)", hdr_ok)
    rc, txt = _run_main(["compare", path, "--engine-logits", eng, "--tokens", tstr, "--n-prompt", str(P)])
    check("compare: f32 copy of the reference passes", rc == 0 and "PASS" in txt and "greedy agreement: 6/6" in txt,
          txt.strip().splitlines()[-1])
    rc, txt = _run_main(["compare", path, "--engine-logits", eng, "--tokens", tstr, "--n-prompt", str(P),
                         "--ref-logits", out])
    check("compare: --ref-logits", rc == 0)
    # all positions incl. the last
    ref.write_engine_logits(eng, toks, full.astype(np.float32))
    rc, _ = _run_main(["compare", path, "--engine-logits", eng, "--tokens", tstr, "--n-prompt", str(P)])
    check("compare: n_positions == n_tokens accepted", rc == 0)
    # perturbed logits
    bad = full.astype(np.float32).copy()
    bad[6, 10] += 1e-3
    ref.write_engine_logits(eng, toks, bad)
    rc, txt = _run_main(["compare", path, "--engine-logits", eng, "--tokens", tstr, "--n-prompt", str(P)])
    check("compare: logit error above tol fails", rc == 1 and "exceeds tol" in txt and "worst position 6" in txt)
    rc, txt = _run_main(["compare", path, "--engine-logits", eng, "--tokens", tstr, "--n-prompt", str(P),
                         "--tol", "2e-3"])
    check("compare: --tol loosens the check", rc == 0)
    # wrong record token
    wrong = list(toks)
    wrong[2] = (wrong[2] + 1) % full.shape[1]
    ref.write_engine_logits(eng, wrong, full.astype(np.float32))
    rc, txt = _run_main(["compare", path, "--engine-logits", eng, "--tokens", tstr, "--n-prompt", str(P)])
    check("compare: record token != tokens[i] fails", rc == 1 and "position 2" in txt)
    # a generated token that is not the reference argmax
    i = 6
    order = np.argsort(-full[i])
    # force the runner-up at position i+1, then continue greedily
    alt = _greedy_tokens(m, list(toks[:i + 1]) + [int(order[1])], len(toks) - i - 2)
    gap = full[i, order[0]] - full[i, order[1]]
    ref.write_engine_logits(eng, alt[:-1], ref.forward(m, alt)[:-1].astype(np.float32))
    rc, txt = _run_main(["compare", path, "--engine-logits", eng, "--tokens", ",".join(map(str, alt)),
                         "--n-prompt", str(P), "--tie-margin", "0"])
    check("compare: greedy mismatch fails (ref gap %.3g)" % gap, rc == 1 and "greedy mismatch at position 6" in txt)
    rc, txt = _run_main(["compare", path, "--engine-logits", eng, "--tokens", ",".join(map(str, alt)),
                         "--n-prompt", str(P), "--tie-margin", str(gap * 1.01)])
    check("compare: near-tie within --tie-margin is accepted with a NOTE", rc == 1 and "NOTE" in txt
          and "greedy mismatch" not in txt and "its own logits" in txt, txt.strip().splitlines()[-1])
    # NaN
    nan = full.astype(np.float32).copy()
    nan[3, 0] = np.nan
    ref.write_engine_logits(eng, toks, nan)
    rc, txt = _run_main(["compare", path, "--engine-logits", eng, "--tokens", tstr, "--n-prompt", str(P)])
    check("compare: NaN logits fail", rc == 1 and "NaN" in txt)
    # malformed files -> exit 2
    with open(eng, "wb") as f:
        f.write(b"FGLX" + struct.pack("<III", 1, 1, full.shape[1]) + b"\0" * (4 * (1 + full.shape[1])))
    old = sys.stderr
    sys.stderr = io.StringIO()
    try:
        rc_magic, _ = _run_main(["compare", path, "--engine-logits", eng, "--tokens", tstr, "--n-prompt", str(P)])
        with open(eng, "wb") as f:
            f.write(b"FGLG" + struct.pack("<III", 1, 2, full.shape[1]) + b"\0" * 12)
        rc_size, _ = _run_main(["compare", path, "--engine-logits", eng, "--tokens", tstr, "--n-prompt", str(P)])
    finally:
        sys.stderr = old
    check("compare: bad magic / truncated file -> exit 2", rc_magic == 2 and rc_size == 2)
    m.close()


def test_shape_errors():
    # attn_k_b written with the wrong dimension order
    path = tmp("badshape.gguf")
    cfg, _ = build_model(path, seed=3, **VARIANTS["std"])
    g = gguf_read.GGUFFile(path)
    good = g.tensors["blk.1.attn_k_b.weight"]
    g.close()
    # rebuild without quantised tensors, then transpose k_b's first two dims in the directory
    cfg2 = dict(VARIANTS["std"])
    cfg2["types"] = {}
    build_model(path, seed=3, **cfg2)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    # patch the directory entry of blk.1.attn_k_b: swap ne0 and ne1
    name = b"blk.1.attn_k_b.weight"
    pos = data.find(struct.pack("<Q", len(name)) + name)
    ne_pos = pos + 8 + len(name) + 4
    ne0, ne1 = struct.unpack_from("<QQ", data, ne_pos)
    struct.pack_into("<QQ", data, ne_pos, ne1, ne0)
    with open(path, "wb") as f:
        f.write(bytes(data))
    try:
        ref.DeepSeek2Model(path)
        check("shape error: transposed attn_k_b rejected", False)
    except ref.ModelError as e:
        msg = str(e)
        check("shape error: transposed attn_k_b rejected with a clear message",
              "blk.1.attn_k_b.weight" in msg and "expected" in msg and list(good.ne) == [ne0, ne1, cfg["H"]], msg)
    # metadata disagreeing with the tensors: wrong kv_lora_rank
    path = tmp("badmeta.gguf")
    build_model(path, seed=3, **cfg2)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    key = b"deepseek2.attention.kv_lora_rank"
    pos = data.find(struct.pack("<Q", len(key)) + key)
    vpos = pos + 8 + len(key) + 4
    struct.pack_into("<I", data, vpos, cfg["kv_lora"] + 1)
    with open(path, "wb") as f:
        f.write(bytes(data))
    try:
        ref.DeepSeek2Model(path)
        check("shape error: kv_lora_rank mismatch rejected", False)
    except ref.ModelError as e:
        check("shape error: kv_lora_rank mismatch rejected", "expected" in str(e), str(e))
    # wrong architecture
    w = GGUFWriter()
    w.add("general.architecture", T_STR, "llama")
    w.write(tmp("llama.gguf"))
    try:
        ref.DeepSeek2Model(tmp("llama.gguf"))
        check("arch error: non-deepseek2 rejected", False)
    except ref.ModelError:
        check("arch error: non-deepseek2 rejected", True)


def test_timing():
    """A model of the size the C tests use (d=128, 4 layers, vocab 400, 8 experts), 48 tokens."""
    import time
    path = tmp("timing.gguf")
    build_model(path, seed=21, d=128, n_layer=4, n_dense=1, H=8, q_lora=64, kv_lora=64, nope=32,
                rope=16, v=32, vocab=400, n_ff=256, E=8, used=2, f_exp=64)
    t0 = time.time()
    m = ref.DeepSeek2Model(path)
    lg = ref.forward(m, list(np.random.RandomState(0).randint(0, 400, 48)))
    dt = time.time() - t0
    check("timing: 48 tokens on a d=128/4-layer model", np.isfinite(lg).all() and dt < 10.0, "%.2f s" % dt)
    m.close()


def main():
    global TMP
    TMP = tempfile.mkdtemp(prefix="fg_refselftest_")
    try:
        for fn in (test_gguf_reader, test_model_variants, test_split_vs_joined_kv_b,
                   test_layouts_against_hf_kv_b, test_routing, test_moe_vs_naive, test_rope_yarn,
                   test_cli, test_shape_errors, test_timing):
            run(fn)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    n_pass = sum(1 for r in RESULTS if r[1])
    n_fail = len(RESULTS) - n_pass
    sys.stdout.write("%d passed, %d failed\n" % (n_pass, n_fail))
    return 0 if n_fail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
