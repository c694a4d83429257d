#!/usr/bin/python3
"""Independent float64 reference forward pass for `deepseek4` GGUF models (DeepSeek V4).

Needs only /usr/bin/python3 and numpy; the GGUF parser is gguf_read.py next to this file.
Written from the math, no fused ops; the points settled from llama.cpp's source are listed in
docs/engine.md ("deepseek4 reference").  Shapes in comments are numpy shapes (ggml ne
reversed): E embedding, H heads, D head dim, rd RoPE dims (the LAST rd of a head), Q q-LoRA
rank, Hi x Di indexer heads, G x R output groups, X experts (K used), F expert width, V vocab.

Usage
    deepseek4_ref.py MODEL.gguf --tokens 1,2,3 --out logits.npy [--mtp-out mtp.npy]
        One pass over the tokens (positions 0..n-1).  Row i of the logits is the prediction
        after token i.  Row i of the MTP logits is the MTP block's draft at position i, from
        (h_{i-1}, token i) with h_{-1} = 0, i.e. its guess for token i + 1 (llama.cpp's
        common_speculative_impl_draft_mtp pairs (h_p, x_{p+1}) at MTP position p + 1 and
        starts from a zero h).
    deepseek4_ref.py compare MODEL.gguf --engine-logits FILE --tokens ... --n-prompt P
                     [--tol 1e-4] [--tie-margin M]
        Runs the reference over the tokens and checks an engine logits file (the FGLG format
        and the comparison rules of deepseek2_ref.py, shared, not repeated).  Exit 0 = agree,
        1 = mismatch, 2 = usage or format error.
    deepseek4_ref.py info MODEL.gguf
        Prints the hyper-parameters.

Two implementations of the sequence dimension, which the self-check compares:
  * Model.forward(tokens): one pass with explicit masks over the whole sequence;
  * Model.step(cache, tokens): any chunk of tokens appended to an explicit Cache (window
    ring, compressed rows, index keys, the open compressor blocks), as an engine keeps it.
"""

import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_read import GGUFFile  # noqa: E402

ARCH = "deepseek4"
GATING_SQRT_SOFTPLUS = 4
CSA, HCA = 4, 128


class V4Error(Exception):
    """The file is not a deepseek4 model this reference accepts; .name says which check."""

    def __init__(self, name, message):
        Exception.__init__(self, "%s: %s" % (name, message))
        self.name = name


# ======================================================================================
# small math helpers (float64 throughout)
# ======================================================================================

def rmsnorm(x, eps):
    """x / sqrt(mean(x^2) + eps) over the last axis (weightless)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def softplus(x):
    return np.logaddexp(0.0, x)


def top_indices(scores, k):
    """The k highest scores; ties go to the lower index (llama.cpp's ggml_top_k and
    ggml_argsort use std::partial_sort / std::sort, whose order among equal scores is
    unspecified, so we fix one).  Returned in descending score order."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return order[:k]


class Rope(object):
    """ggml rope, NORM mode (adjacent pairs (x[2i], x[2i+1])), optional YaRN.

    theta_extrap(i) = pos * base^(-2i/rd); theta_interp = freq_scale * theta_extrap;
    with YaRN (ext_factor != 0) the pairs between the correction dims ramp from extrap to
    interp and the magnitude is attn_factor * (1 + 0.1 ln(1/freq_scale)); deepseek4 passes
    attn_factor = 1 / (1 + 0.1 ln(1/freq_scale)) there, so the magnitude is 1."""

    def __init__(self, rd, base, freq_scale=1.0, ext_factor=0.0, n_ctx_orig=0,
                 beta_fast=32.0, beta_slow=1.0):
        self.rd = rd
        self.base = base
        i = np.arange(rd // 2, dtype=np.float64)
        self.inv_freq = base ** (-2.0 * i / rd)                      # (rd/2,)
        self.freq_scale = freq_scale
        self.ext_factor = ext_factor
        attn_factor = 1.0 if ext_factor == 0.0 else 1.0 / (1.0 + 0.1 * math.log(1.0 / freq_scale))
        if ext_factor != 0.0:
            def corr_dim(n_rot):
                return rd * math.log(n_ctx_orig / (n_rot * 2.0 * math.pi)) / (2.0 * math.log(base))
            lo = max(0.0, math.floor(corr_dim(beta_fast)))
            hi = min(rd - 1.0, math.ceil(corr_dim(beta_slow)))
            y = (i - lo) / max(0.001, hi - lo)                        # i = pair index = i0/2
            self.mix = (1.0 - np.clip(y, 0.0, 1.0)) * ext_factor      # (rd/2,)
            self.mag = attn_factor * (1.0 + 0.1 * math.log(1.0 / freq_scale))
        else:
            self.mix = np.zeros(rd // 2)
            self.mag = attn_factor

    def angles(self, pos):
        extrap = float(pos) * self.inv_freq
        interp = self.freq_scale * extrap
        return interp * (1.0 - self.mix) + extrap * self.mix          # (rd/2,)

    def apply(self, x, pos, inverse=False):
        """Rotates the LAST rd dims of x (..., n) at position pos; inverse: by -theta."""
        th = self.angles(pos)
        c = np.cos(th) * self.mag
        s = np.sin(th) * self.mag * (-1.0 if inverse else 1.0)
        y = np.array(x, dtype=np.float64, copy=True)
        tail = y[..., y.shape[-1] - self.rd:]
        x0 = tail[..., 0::2].copy()
        x1 = tail[..., 1::2].copy()
        tail[..., 0::2] = x0 * c - x1 * s
        tail[..., 1::2] = x0 * s + x1 * c
        return y


# ======================================================================================
# the model file
# ======================================================================================

class HParams(object):
    pass


class Model(object):
    def __init__(self, path):
        self.path = path
        self.g = GGUFFile(path)
        if self.g.get("general.architecture") != ARCH:
            raise V4Error("architecture", "%s is %r, not %r"
                          % (path, self.g.get("general.architecture"), ARCH))
        self._w = {}
        self.hp = self._read_hparams()
        self._validate()
        hp = self.hp
        self.rope_plain = Rope(hp.rd, hp.rope_base)
        self.rope_comp = Rope(hp.rd, hp.compress_rope_base, hp.freq_scale, hp.ext_factor,
                              hp.n_ctx_orig, hp.beta_fast, hp.beta_slow)

    # -- metadata ---------------------------------------------------------------------
    def _key(self, name, default=None, required=True):
        full = ARCH + "." + name
        if full in self.g.metadata:
            return self.g.metadata[full]
        if required and default is None:
            raise V4Error("missing_key", "required metadata key %r missing" % full)
        return default

    def _per_layer(self, name, n, default=None):
        """A scalar or an array; a shorter array repeats its last entry (llama.cpp's loader)."""
        v = self._key(name, default, required=default is None)
        if isinstance(v, (list, np.ndarray)):
            vals = [float(x) for x in v]
            if not vals:
                raise V4Error("per_layer_empty", "%s is an empty array" % name)
            return (vals + [vals[-1]] * n)[:n]
        return [float(v)] * n

    def _read_hparams(self):
        hp = HParams()
        k = self._key
        hp.n_layer_all = int(k("block_count"))
        hp.n_nextn = int(k("nextn_predict_layers", 0))
        if hp.n_nextn > 0 and ("blk.%d.nextn.eh_proj.weight" % (hp.n_layer_all - hp.n_nextn)) not in self.g.tensors:
            hp.n_nextn = 0                                  # llama.cpp: no MTP tensors, no MTP
        hp.n_layer = hp.n_layer_all - hp.n_nextn
        hp.E = int(k("embedding_length"))
        hp.H = int(k("attention.head_count"))
        hp.H_kv = int(k("attention.head_count_kv", 1))
        hp.D = int(k("attention.key_length"))
        hp.Dv = int(k("attention.value_length"))
        hp.rd = int(k("rope.dimension_count"))
        hp.Q = int(k("attention.q_lora_rank"))
        hp.window = int(k("attention.sliding_window"))
        hp.eps = float(k("attention.layer_norm_rms_epsilon"))
        hp.X = int(k("expert_count"))
        hp.K = int(k("expert_used_count"))
        hp.F = int(k("expert_feed_forward_length"))
        hp.n_shexp = int(k("expert_shared_count"))
        hp.w_scale = float(k("expert_weights_scale", 1.0))
        hp.w_norm = bool(k("expert_weights_norm", False))
        hp.gating = int(k("expert_gating_func"))
        hp.clamp_exp = self._per_layer("swiglu_clamp_exp", hp.n_layer_all, 0.0)
        if (ARCH + ".swiglu_clamp_shexp") in self.g.metadata:
            hp.clamp_shexp = self._per_layer("swiglu_clamp_shexp", hp.n_layer_all)
        else:
            hp.clamp_shexp = list(hp.clamp_exp)
        hp.Hi = int(k("attention.indexer.head_count"))
        hp.Di = int(k("attention.indexer.key_length"))
        hp.top_k = int(k("attention.indexer.top_k"))
        hp.G = int(k("attention.output_group_count"))
        hp.R = int(k("attention.output_lora_rank"))
        hp.compress_rope_base = float(k("attention.compress_rope_freq_base"))
        hp.ratios = [int(x) for x in k("attention.compress_ratios")]
        hp.hc = int(k("hyper_connection.count"))
        hp.sinkhorn_iters = int(k("hyper_connection.sinkhorn_iterations"))
        hp.hc_eps = float(k("hyper_connection.epsilon"))
        hp.n_hash = int(k("hash_layer_count", 0))
        hp.rope_base = float(k("rope.freq_base", 10000.0))
        scaling = k("rope.scaling.type", "none")
        factor = float(k("rope.scaling.factor", 0.0))
        hp.freq_scale = 1.0 if (scaling == "none" or factor == 0.0) else 1.0 / factor
        hp.ext_factor = 1.0 if scaling == "yarn" else 0.0
        hp.n_ctx_orig = int(k("rope.scaling.original_context_length", 0) or k("context_length", 0))
        hp.beta_fast = float(k("rope.scaling.yarn_beta_fast", 32.0))
        hp.beta_slow = float(k("rope.scaling.yarn_beta_slow", 1.0))
        emb = self.g.tensors.get("token_embd.weight")
        hp.V = int(emb.ne[1]) if emb is not None else int(k("vocab_size"))
        return hp

    def _validate(self):
        hp = self.hp
        if len(hp.ratios) < hp.n_layer_all:
            raise V4Error("compress_ratios_short", "compress_ratios has %d entries, block_count is %d"
                          % (len(hp.ratios), hp.n_layer_all))
        for il, r in enumerate(hp.ratios[:hp.n_layer_all]):
            if r not in (0, CSA, HCA):
                raise V4Error("bad_compress_ratio", "layer %d has ratio %d (allowed: 0, 4, 128)" % (il, r))
        if hp.hc != 4:
            raise V4Error("hc_count", "hyper_connection.count is %d, must be 4" % hp.hc)
        if hp.gating != GATING_SQRT_SOFTPLUS:
            raise V4Error("gating_func", "expert_gating_func is %d, must be 4 (sqrt-softplus)" % hp.gating)
        if hp.G <= 0 or hp.H % hp.G != 0:
            raise V4Error("head_groups", "head_count %d is not divisible by output_group_count %d" % (hp.H, hp.G))
        if hp.D != hp.Dv:
            raise V4Error("key_value_length", "key_length %d != value_length %d" % (hp.D, hp.Dv))
        if hp.H_kv != 1:
            raise V4Error("head_count_kv", "head_count_kv is %d, must be 1" % hp.H_kv)
        if hp.rd % 2 or hp.rd > hp.D or hp.rd > hp.Di:
            raise V4Error("rope_dims", "rope.dimension_count %d does not fit D %d / Di %d" % (hp.rd, hp.D, hp.Di))
        for il in range(hp.n_layer, hp.n_layer_all):
            if hp.ratios[il] != 0:
                raise V4Error("mtp_ratio", "MTP block %d has ratio %d; its attention is window-only"
                              % (il, hp.ratios[il]))
            if il < hp.n_hash:
                raise V4Error("mtp_hash", "MTP block %d would be hash-routed" % il)
        for il in range(min(hp.n_hash, hp.n_layer_all)):
            name = "blk.%d.ffn_gate_tid2eid.weight" % il
            if name not in self.g.tensors:
                raise V4Error("tid2eid_missing", "hash layer %d has no %s" % (il, name))
            t = self.g.tensors[name]
            if tuple(t.ne) != (hp.K, hp.V):
                raise V4Error("tensor_shape", "%s has ne %s, expected [%d, %d]" % (name, list(t.ne), hp.K, hp.V))
            ids = self.g.tensor_int(name)
            if ids.min() < 0 or ids.max() >= hp.X:
                raise V4Error("tid2eid_range", "%s holds expert id %d, expert_count is %d"
                              % (name, int(ids.max() if ids.max() >= hp.X else ids.min()), hp.X))
            self._w[name] = ids

    # -- tensors ------------------------------------------------------------------------
    def w(self, name, ne):
        """Tensor `name` as float64 (numpy shape reversed(ne)); ne is checked."""
        if name not in self._w:
            t = self.g.tensors.get(name)
            if t is None:
                raise V4Error("tensor_missing", "tensor %s missing" % name)
            got = list(t.ne)
            while len(got) > len(ne) and got[-1] == 1:
                got.pop()
            if got != list(ne):
                raise V4Error("tensor_shape", "%s has ne %s, expected %s" % (name, list(t.ne), list(ne)))
            self._w[name] = self.g.tensor_f64(name).reshape(tuple(reversed(ne)))
        return self._w[name]

    def layer_rope(self, il):
        """r = 0 layers: rope.freq_base, no YaRN; compressed layers: compress base + YaRN."""
        return self.rope_comp if self.hp.ratios[il] != 0 else self.rope_plain

    # ==================================================================================
    # pieces of one layer, per token or per row (shared by both sequence paths)
    # ==================================================================================

    def hc_pre(self, il, part, x):
        """x (4, E) -> y (E,) the sublayer input, post (4,), comb (4, 4) indexed [dst, src]."""
        hp = self.hp
        b = "blk.%d.hc_%s_" % (il, part)
        fn = self.w(b + "fn.weight", [4 * hp.E, 24])                  # (24, 4E)
        base = self.w(b + "base.weight", [24])                        # (24,)
        scale = self.w(b + "scale.weight", [3])                       # (3,)
        m = fn @ rmsnorm(x.reshape(4 * hp.E), hp.eps)                 # (24,), stream-major flat
        pre = sigmoid(m[0:4] * scale[0] + base[0:4]) + hp.hc_eps      # (4,)
        post = 2.0 * sigmoid(m[4:8] * scale[1] + base[4:8])           # (4,)
        raw = m[8:24] * scale[2] + base[8:24]                         # raw[d + 4 s]
        comb = raw.reshape(4, 4).T                                    # comb[d, s]
        comb = np.exp(comb - comb.max(axis=0, keepdims=True))
        comb = comb / comb.sum(axis=0, keepdims=True)                 # softmax over dst
        comb = comb + hp.hc_eps
        comb = comb / (comb.sum(axis=1, keepdims=True) + hp.hc_eps)   # divide by sum over src
        for _ in range(1, hp.sinkhorn_iters):
            comb = comb / (comb.sum(axis=0, keepdims=True) + hp.hc_eps)   # sum over dst
            comb = comb / (comb.sum(axis=1, keepdims=True) + hp.hc_eps)   # sum over src
        y = pre @ x                                                   # (E,) = sum_h pre[h] x[h]
        return y, post, comb

    @staticmethod
    def hc_post(f, x, post, comb):
        """x'[d] = post[d] f + sum_s comb[d, s] x[s]; f (E,), x (4, E) -> (4, E)."""
        return post[:, None] * f[None, :] + comb @ x

    def hc_head(self, x):
        """The output head's stream mix (pre weights only): x (4, E) -> (E,)."""
        hp = self.hp
        fn = self.w("output_hc_fn.weight", [4 * hp.E, 4])             # (4, 4E)
        base = self.w("output_hc_base.weight", [4])
        scale = self.w("output_hc_scale.weight", [1])
        m = fn @ rmsnorm(x.reshape(4 * hp.E), hp.eps)                 # (4,)
        pre = sigmoid(m * scale[0] + base) + hp.hc_eps
        return pre @ x

    def logits_of(self, x, mtp=False):
        """x (4, E) -> (V,): hc head, output_norm, output (the MTP block's own norm and head
        when the file has nextn.shared_head_norm / shared_head_head)."""
        hp = self.hp
        norm, head = "output_norm.weight", "output.weight"
        if mtp:
            b = "blk.%d.nextn." % hp.n_layer
            if (b + "shared_head_norm.weight") in self.g.tensors:
                norm = b + "shared_head_norm.weight"
            if (b + "shared_head_head.weight") in self.g.tensors:
                head = b + "shared_head_head.weight"
        y = rmsnorm(self.hc_head(x), hp.eps) * self.w(norm, [hp.E])
        return self.w(head, [hp.E, hp.V]) @ y

    def attn_inputs(self, il, y, pos):
        """y (E,) after attn_norm -> q (H, D) roped, kv (D,) roped, qr (Q,)."""
        hp = self.hp
        b = "blk.%d." % il
        rope = self.layer_rope(il)
        qr = self.w(b + "attn_q_a.weight", [hp.E, hp.Q]) @ y                      # (Q,)
        qr = rmsnorm(qr, hp.eps) * self.w(b + "attn_q_a_norm.weight", [hp.Q])
        q = (self.w(b + "attn_q_b.weight", [hp.Q, hp.H * hp.D]) @ qr).reshape(hp.H, hp.D)
        q = rope.apply(rmsnorm(q, hp.eps), pos)                                   # (H, D)
        kv = self.w(b + "attn_kv.weight", [hp.E, hp.D]) @ y                       # (D,)
        kv = rmsnorm(kv, hp.eps) * self.w(b + "attn_kv_a_norm.weight", [hp.D])
        kv = rope.apply(kv, pos)                                                  # (D,)
        return q, kv, qr

    def comp_entry(self, il, y, pos, indexer=False):
        """One token's compressor entry: (k, score), each (c * width,); score has APE[pos % r]."""
        hp = self.hp
        r = hp.ratios[il]
        c = 2 if r == CSA else 1
        if indexer:
            pre, width = "blk.%d.indexer_compressor_" % il, hp.Di
        else:
            pre, width = "blk.%d.attn_compressor_" % il, hp.D
        k = self.w(pre + "kv.weight", [hp.E, c * width]) @ y
        s = self.w(pre + "gate.weight", [hp.E, c * width]) @ y
        s = s + self.w(pre + "ape.weight", [c * width, r])[pos % r]
        return k, s

    def pool_row(self, il, j, cur, prev=None, indexer=False):
        """Compressed row j from its block's entries (and, for CSA, the previous block's).

        cur / prev: lists of r (k, score) entries in position order; prev None = block 0.
        HCA: per channel a softmax over the r tokens weights their k.  CSA (c = 2): per
        channel a softmax over 2r entries, the previous block's first-half channels and the
        current block's second-half channels; a missing previous block counts as -inf.
        Then RMSNorm * compressor norm and RoPE (compress base, YaRN) at position j * r, the
        block's first position."""
        hp = self.hp
        r = hp.ratios[il]
        width = hp.Di if indexer else hp.D
        kc = np.array([e[0] for e in cur])                            # (r, c*width)
        sc = np.array([e[1] for e in cur])
        if r == CSA:
            if prev is None:
                kp = np.zeros((r, width))
                sp = np.full((r, width), -np.inf)
            else:
                kp = np.array([e[0] for e in prev])[:, :width]
                sp = np.array([e[1] for e in prev])[:, :width]
            vals = np.concatenate([kp, kc[:, width:]], axis=0)        # (2r, width)
            scores = np.concatenate([sp, sc[:, width:]], axis=0)
        else:
            vals, scores = kc, sc                                     # (r, width)
        wts = np.exp(scores - scores.max(axis=0, keepdims=True))
        wts = wts / wts.sum(axis=0, keepdims=True)                    # softmax over entries
        row = (wts * vals).sum(axis=0)                                # (width,)
        nw = ("blk.%d.indexer_compressor_norm.weight" if indexer else "blk.%d.attn_compressor_norm.weight") % il
        row = rmsnorm(row, hp.eps) * self.w(nw, [width])
        return self.rope_comp.apply(row, j * r)

    def indexer_query(self, il, y, qr, pos):
        """Index queries iq (Hi, Di) roped at pos (compress rope) and head weights (Hi,)."""
        hp = self.hp
        b = "blk.%d.indexer." % il
        iq = (self.w(b + "attn_q_b.weight", [hp.Q, hp.Hi * hp.Di]) @ qr).reshape(hp.Hi, hp.Di)
        iq = self.rope_comp.apply(iq, pos)
        wh = (self.w(b + "proj.weight", [hp.E, hp.Hi]) @ y) / math.sqrt(hp.Di * hp.Hi)
        return iq, wh

    def select_rows(self, il, iq, wh, index_keys, trace):
        """Top min(top_k, n) compressed rows by sum_h relu(iq_h . k_j) w_h."""
        if len(index_keys) == 0:
            return []
        keys = np.array(index_keys)                                   # (n, Di)
        scores = (np.maximum(iq @ keys.T, 0.0) * wh[:, None]).sum(axis=0)   # (n,)
        n_keep = min(self.hp.top_k, len(index_keys))
        if n_keep < len(index_keys):
            trace["rows_dropped"] = trace.get("rows_dropped", 0) + len(index_keys) - n_keep
        return sorted(int(j) for j in top_indices(scores, n_keep))

    def attend(self, il, q, keys, pos):
        """One softmax per head over keys (n, D) with the head's sink; K = V.  -> (E,)"""
        hp = self.hp
        sinks = self.w("blk.%d.attn_sinks.weight" % il, [hp.H])       # (H,)
        logits = (q @ keys.T) / math.sqrt(hp.D)                       # (H, n)
        mx = np.maximum(logits.max(axis=1), sinks)                    # (H,)
        p = np.exp(logits - mx[:, None])
        p = p / (p.sum(axis=1) + np.exp(sinks - mx))[:, None]         # sink in the denominator
        return self.attn_output(il, p @ keys, pos)

    def attn_output(self, il, out, pos):
        """Heads' outputs (H, D): inverse RoPE at pos, grouped output LoRA -> (E,)."""
        hp = self.hp
        b = "blk.%d." % il
        out = self.layer_rope(il).apply(out, pos, inverse=True)       # (H, D)
        g_dim = hp.H * hp.D // hp.G
        wo_a = self.w(b + "attn_output_a.weight", [g_dim, hp.R * hp.G]).reshape(hp.G, hp.R, g_dim)
        grouped = out.reshape(hp.G, g_dim)                            # heads of a group adjacent
        oa = np.concatenate([wo_a[g] @ grouped[g] for g in range(hp.G)])   # (G*R,) group-major
        return self.w(b + "attn_output_b.weight", [hp.G * hp.R, hp.E]) @ oa

    def ffn(self, il, y, token, trace=None):
        """MoE (sqrt-softplus routing, bias or hash selection) + shared expert; y (E,)."""
        hp = self.hp
        b = "blk.%d." % il
        p = np.sqrt(softplus(self.w(b + "ffn_gate_inp.weight", [hp.E, hp.X]) @ y))   # (X,)
        if il < hp.n_hash:
            chosen = [int(e) for e in self._w[b + "ffn_gate_tid2eid.weight"][token]]  # (K,)
        else:
            bias = self.w(b + "exp_probs_b.bias", [hp.X])
            chosen = [int(e) for e in top_indices(p + bias, hp.K)]
        if trace is not None:
            trace.setdefault("routing", {}).setdefault(il, []).append((chosen, p.copy()))
        wts = p[chosen]
        if hp.w_norm:
            wts = wts / max(wts.sum(), 6.103515625e-5)
        if hp.w_scale != 0.0 and hp.w_scale != 1.0:              # 0 means unscaled, as in llama.cpp
            wts = wts * hp.w_scale
        gate_e = self.w(b + "ffn_gate_exps.weight", [hp.E, hp.F, hp.X])        # (X, F, E)
        up_e = self.w(b + "ffn_up_exps.weight", [hp.E, hp.F, hp.X])
        down_e = self.w(b + "ffn_down_exps.weight", [hp.F, hp.E, hp.X])        # (X, E, F)
        out = np.zeros(hp.E)
        for e, wt in zip(chosen, wts):
            out += wt * (down_e[e] @ self.swiglu(gate_e[e] @ y, up_e[e] @ y, hp.clamp_exp[il]))
        Fs = hp.F * hp.n_shexp
        g = self.w(b + "ffn_gate_shexp.weight", [hp.E, Fs]) @ y
        u = self.w(b + "ffn_up_shexp.weight", [hp.E, Fs]) @ y
        return out + self.w(b + "ffn_down_shexp.weight", [Fs, hp.E]) @ self.swiglu(g, u, hp.clamp_shexp[il])

    @staticmethod
    def swiglu(gate, up, limit):
        """silu(min(gate, c)) * clamp(up, -c, c) when c > 1e-6 (llama.cpp's deepseek4 order)."""
        if limit > 1e-6:
            gate = np.minimum(gate, limit)
            up = np.clip(up, -limit, limit)
        return silu(gate) * up

    def mtp_input(self, h, token):
        """eh_proj([enorm(embed(token)); hnorm(h_s)]) per stream: h (4, E) -> (4, E).
        h is the trunk's streams at the previous position (zeros before position 0)."""
        hp = self.hp
        b = "blk.%d.nextn." % hp.n_layer
        table = b + "embed_tokens.weight" if (b + "embed_tokens.weight") in self.g.tensors else "token_embd.weight"
        e = self.w(table, [hp.E, hp.V])[token]                              # (E,)
        e = rmsnorm(e, hp.eps) * self.w(b + "enorm.weight", [hp.E])
        hn = rmsnorm(h, hp.eps) * self.w(b + "hnorm.weight", [hp.E])          # (4, E)
        cat = np.concatenate([np.repeat(e[None, :], 4, axis=0), hn], axis=1)  # (4, 2E)
        return cat @ self.w(b + "eh_proj.weight", [2 * hp.E, hp.E]).T

    def embed(self, token):
        return self.w("token_embd.weight", [self.hp.E, self.hp.V])[token]

    # ==================================================================================
    # path 1: the whole sequence in one pass, with explicit masks
    # ==================================================================================

    def forward(self, tokens, trace=None):
        """tokens (n,) -> logits (n, V) and MTP logits (n, V) (None without MTP)."""
        hp = self.hp
        trace = {} if trace is None else trace
        tokens = [int(t) for t in tokens]
        n = len(tokens)
        x = np.repeat(np.array([self.embed(t) for t in tokens])[:, None, :], 4, axis=1)  # (n, 4, E)
        for il in range(hp.n_layer):
            x = self._layer_full(il, x, tokens, trace)
        logits = np.array([self.logits_of(x[i]) for i in range(n)])
        mtp = None
        if hp.n_nextn > 0:
            h_prev = np.concatenate([np.zeros((1, 4, hp.E)), x[:-1]], axis=0)        # h_{p-1}
            xm = np.array([self.mtp_input(h_prev[i], tokens[i]) for i in range(n)])
            xm = self._layer_full(hp.n_layer, xm, tokens, trace)
            mtp = np.array([self.logits_of(xm[i], mtp=True) for i in range(n)])
        return logits, mtp

    def _layer_full(self, il, x, tokens, trace):
        """One layer over the whole sequence: compressed rows pooled for every closed block
        at once, then attention as a masked softmax over [all positions | all rows]."""
        hp = self.hp
        n = x.shape[0]
        b = "blk.%d." % il
        r = hp.ratios[il]
        pre = [self.hc_pre(il, "attn", x[i]) for i in range(n)]
        y = np.array([rmsnorm(v[0], hp.eps) for v in pre]) * self.w(b + "attn_norm.weight", [hp.E])  # (n, E)
        qkv = [self.attn_inputs(il, y[i], i) for i in range(n)]
        q_all = np.array([v[0] for v in qkv])                                    # (n, H, D)
        kv_all = np.array([v[1] for v in qkv])                                   # (n, D)
        rows = self._pool_all(il, y) if r else np.zeros((0, hp.D))               # (nb, D)
        nb = rows.shape[0]
        if r:
            trace.setdefault("rows_emitted", {})[il] = nb
        pos = np.arange(n)
        s = np.arange(n)
        mask = np.zeros((n, n + nb), dtype=bool)                                 # query x key
        mask[:, :n] = (s[None, :] <= pos[:, None]) & (pos[:, None] - s[None, :] < hp.window)
        if r:
            visible = np.arange(nb)[None, :] < ((pos + 1) // r)[:, None]          # (n, nb)
            if r == CSA:
                visible &= self._selected_all(il, y, [v[2] for v in qkv], visible, trace)
            mask[:, n:] = visible
        keys = np.concatenate([kv_all, rows], axis=0)                            # (n + nb, D)
        sinks = self.w(b + "attn_sinks.weight", [hp.H])
        logits = np.einsum("phd,kd->hpk", q_all, keys) / math.sqrt(hp.D)         # (H, n, n + nb)
        logits = np.where(mask[None, :, :], logits, -np.inf)
        mx = np.maximum(logits.max(axis=2), sinks[:, None])                      # (H, n)
        pr = np.exp(logits - mx[:, :, None])
        pr = pr / (pr.sum(axis=2) + np.exp(sinks[:, None] - mx))[:, :, None]
        heads = np.einsum("hpk,kd->phd", pr, keys)                               # (n, H, D)
        out = np.zeros((n, 4, hp.E))
        for p in range(n):
            a = self.attn_output(il, heads[p], p)
            x1 = self.hc_post(a, x[p], pre[p][1], pre[p][2])
            yf, post, comb = self.hc_pre(il, "ffn", x1)
            yf = rmsnorm(yf, hp.eps) * self.w(b + "ffn_norm.weight", [hp.E])
            out[p] = self.hc_post(self.ffn(il, yf, tokens[p], trace), x1, post, comb)
        return out

    def _pool_all(self, il, y, indexer=False):
        """Every closed block's compressed row from the layer inputs y (n, E) -> (n // r, width)."""
        hp = self.hp
        r = hp.ratios[il]
        n = y.shape[0]
        nb = n // r
        if indexer:
            pre, width = "blk.%d.indexer_compressor_" % il, hp.Di
        else:
            pre, width = "blk.%d.attn_compressor_" % il, hp.D
        c = 2 if r == CSA else 1
        kc = y @ self.w(pre + "kv.weight", [hp.E, c * width]).T                 # (n, c*width)
        sc = y @ self.w(pre + "gate.weight", [hp.E, c * width]).T
        sc = sc + self.w(pre + "ape.weight", [c * width, r])[np.arange(n) % r]
        kc = kc[:nb * r].reshape(nb, r, c * width)
        sc = sc[:nb * r].reshape(nb, r, c * width)
        if r == CSA:                 # previous block's first half | this block's second half
            kprev = np.concatenate([np.zeros((1, r, width)), kc[:-1, :, :width]], axis=0)
            sprev = np.concatenate([np.full((1, r, width), -np.inf), sc[:-1, :, :width]], axis=0)
            vals = np.concatenate([kprev, kc[:, :, width:]], axis=1)             # (nb, 2r, width)
            scores = np.concatenate([sprev, sc[:, :, width:]], axis=1)
        else:
            vals, scores = kc, sc                                                # (nb, r, width)
        wts = np.exp(scores - scores.max(axis=1, keepdims=True))
        wts = wts / wts.sum(axis=1, keepdims=True)
        rows = (wts * vals).sum(axis=1)                                          # (nb, width)
        rows = rmsnorm(rows, hp.eps) * self.w(pre + "norm.weight", [width])
        return np.array([self.rope_comp.apply(rows[j], j * r) for j in range(nb)]).reshape(nb, width)

    def _selected_all(self, il, y, qrs, visible, trace):
        """(n, nb) bool: the rows each query's indexer keeps (top min(top_k, visible))."""
        hp = self.hp
        n, nb = visible.shape
        keep = np.zeros((n, nb), dtype=bool)
        if nb == 0:
            return keep
        ikeys = self._pool_all(il, y, indexer=True)                              # (nb, Di)
        for p in range(n):
            iq, wh = self.indexer_query(il, y[p], qrs[p], p)                     # (Hi, Di), (Hi,)
            scores = (np.maximum(iq @ ikeys.T, 0.0) * wh[:, None]).sum(axis=0)   # (nb,)
            n_vis = int(visible[p].sum())
            n_keep = min(hp.top_k, n_vis)
            if n_keep < n_vis:
                trace["rows_dropped"] = trace.get("rows_dropped", 0) + n_vis - n_keep
            keep[p, top_indices(scores[:n_vis], n_keep)] = True
        return keep

    # ==================================================================================
    # path 2: chunks appended to an explicit cache
    # ==================================================================================

    def new_cache(self):
        return Cache(self.hp)

    def step(self, cache, tokens, trace=None):
        """Appends tokens to the cache; returns their logits (m, V) and MTP drafts (m, V)
        (None without MTP)."""
        hp = self.hp
        trace = {} if trace is None else trace
        tokens = [int(t) for t in tokens]
        p0 = cache.pos
        x = np.repeat(np.array([self.embed(t) for t in tokens])[:, None, :], 4, axis=1)  # (m, 4, E)
        for il in range(hp.n_layer):
            x = self._layer_cached(il, x, p0, tokens, cache.layers[il], trace)
        logits = np.array([self.logits_of(v) for v in x])
        mtp = None
        if hp.n_nextn > 0:
            h_prev = np.concatenate([cache.last_h[None], x[:-1]], axis=0)           # h_{p-1}
            xm = np.array([self.mtp_input(h_prev[i], tokens[i]) for i in range(len(tokens))])
            xm = self._layer_cached(hp.n_layer, xm, p0, tokens, cache.layers[hp.n_layer], trace)
            mtp = np.array([self.logits_of(v, mtp=True) for v in xm])
        cache.last_h = x[-1]
        cache.pos += len(tokens)
        return logits, mtp

    def _layer_cached(self, il, x, p0, tokens, lc, trace):
        hp = self.hp
        b = "blk.%d." % il
        r = hp.ratios[il]
        out = np.zeros_like(x)
        for i in range(x.shape[0]):
            p = p0 + i
            y, post, comb = self.hc_pre(il, "attn", x[i])
            y = rmsnorm(y, hp.eps) * self.w(b + "attn_norm.weight", [hp.E])
            q, kv, qr = self.attn_inputs(il, y, p)
            lc.window.append(kv)
            if len(lc.window) > hp.window:
                lc.window.pop(0)                                  # the ring keeps the last W rows
            if r != 0:
                lc.open.append(self.comp_entry(il, y, p))
                if r == CSA:
                    lc.idx_open.append(self.comp_entry(il, y, p, indexer=True))
                if (p + 1) % r == 0:                              # this token closes block p // r
                    j = p // r
                    lc.rows.append(self.pool_row(il, j, lc.open, lc.prev))
                    trace.setdefault("rows_emitted_cached", {})
                    trace["rows_emitted_cached"][il] = trace["rows_emitted_cached"].get(il, 0) + 1
                    if r == CSA:
                        lc.idx_keys.append(self.pool_row(il, j, lc.idx_open, lc.idx_prev, indexer=True))
                        lc.prev, lc.idx_prev = lc.open, lc.idx_open
                    lc.open, lc.idx_open = [], []
            keys = list(lc.window)
            if r == HCA:
                keys += lc.rows
            elif r == CSA:
                iq, wh = self.indexer_query(il, y, qr, p)
                keys += [lc.rows[j] for j in self.select_rows(il, iq, wh, lc.idx_keys, trace)]
            a = self.attend(il, q, np.array(keys), p)
            x1 = self.hc_post(a, x[i], post, comb)
            yf, post, comb = self.hc_pre(il, "ffn", x1)
            yf = rmsnorm(yf, hp.eps) * self.w(b + "ffn_norm.weight", [hp.E])
            out[i] = self.hc_post(self.ffn(il, yf, tokens[i]), x1, post, comb)
        return out


def drafts(model, cache, tokens):
    """Chained MTP drafts after the cache, which stays as it was (the engine's forward_draft):
    the first from (the trunk's last h, tokens[0]) at position cache.pos, each next from (the
    MTP block's own streams of the one before, tokens[i]) one position further, the MTP block's
    window (its only cache: ratio 0) on a copy.  -> (len(tokens), V)"""
    hp = model.hp
    lc = LayerCache()
    lc.window = list(cache.layers[hp.n_layer].window)
    h, out = cache.last_h, []
    for i, t in enumerate(tokens):
        xm = model.mtp_input(h, int(t))[None]
        xm = model._layer_cached(hp.n_layer, xm, cache.pos + i, [int(t)], lc, {})
        out.append(model.logits_of(xm[0], mtp=True))
        h = xm[0]
    return np.array(out)


class LayerCache(object):
    """One layer's part of a sequence's cache."""

    def __init__(self):
        self.window = []      # last `window` kv rows (D,), oldest first
        self.rows = []        # compressed rows (D,), one per closed block (r != 0)
        self.idx_keys = []    # index keys (Di,), one per closed block (r = 4)
        self.open = []        # the open block's compressor entries (k, score), < r of them
        self.idx_open = []    # the same for the indexer's compressor
        self.prev = None      # CSA: the last closed block's entries (its overlap half)
        self.idx_prev = None


class Cache(object):
    def __init__(self, hp):
        self.pos = 0
        self.layers = [LayerCache() for _ in range(hp.n_layer_all)]
        self.last_h = np.zeros((4, hp.E))   # trunk streams of the last position (MTP input)


def _parse_tokens(s):
    if s.startswith("@"):
        with open(s[1:]) as f:
            s = f.read()
    return [int(t) for t in s.replace(",", " ").split()]


def _cmd_compare(argv):
    import argparse
    from deepseek2_ref import compare_logits, read_engine_logits
    ap = argparse.ArgumentParser(prog="deepseek4_ref.py compare")
    ap.add_argument("model")
    ap.add_argument("--engine-logits", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--n-prompt", type=int, required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--tie-margin", type=float, default=None)
    a = ap.parse_args(argv)
    try:
        eng_tokens, eng_logits = read_engine_logits(a.engine_logits)
    except (OSError, ValueError) as e:
        sys.stderr.write("deepseek4_ref: %s\n" % e)
        return 2
    tokens = _parse_tokens(a.tokens)
    logits, _ = Model(a.model).forward(tokens)
    ok, fails = compare_logits(logits, tokens, a.n_prompt, eng_tokens, eng_logits, a.tol, a.tie_margin)
    for f in fails:
        sys.stdout.write("FAIL: %s\n" % f)
    sys.stdout.write("%s\n" % ("PASS" if ok else "MISMATCH"))
    return 0 if ok else 1


def main(argv):
    import argparse
    if len(argv) > 2 and argv[1] == "info":
        m = Model(argv[2])
        for k, v in sorted(vars(m.hp).items()):
            print("%-20s %s" % (k, v))
        return 0
    if len(argv) > 1 and argv[1] == "compare":
        return _cmd_compare(argv[2:])
    ap = argparse.ArgumentParser(description="deepseek4 float64 reference")
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mtp-out")
    a = ap.parse_args(argv[1:])
    m = Model(a.model)
    logits, mtp = m.forward(_parse_tokens(a.tokens))
    np.save(a.out, logits)
    if a.mtp_out and mtp is not None:
        np.save(a.mtp_out, mtp)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except V4Error as e:
        sys.stderr.write("deepseek4_ref: %s\n" % e)
        sys.exit(1)
