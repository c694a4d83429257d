#!/usr/bin/python3
"""Independent float64 reference forward pass for `deepseek2` GGUF models (DeepSeek-V2/V3 MLA + MoE).

Needs only /usr/bin/python3 and numpy (Debian python3-numpy 1.24); the GGUF parser is
gguf_read.py next to this file.

Usage
-----
    deepseek2_ref.py MODEL.gguf --tokens 1,2,3,... --out logits.npy [--dump acts.npz]
        Full causal forward over all tokens (positions 0..n-1).  Writes float64 logits of
        shape [n_tokens, n_vocab] with np.save.  Row i = logits after consuming token i,
        i.e. the prediction for position i+1.

    deepseek2_ref.py compare MODEL.gguf --engine-logits FILE --tokens ... --n-prompt P
                     [--tol 1e-4] [--tie-margin M] [--ref-logits REF.npy] [--median-tol M]
        Runs the reference over the token list and compares with an engine logits file
        (format below).  Prints max |delta logit| per position and overall, and checks
        greedy agreement.  Exit status 0 = success, 1 = mismatch, 2 = usage/format error.

    deepseek2_ref.py info MODEL.gguf
        Prints the hyper-parameters and the derived RoPE/YaRN/attention-scale constants.

    --tokens takes a comma/space separated list, or @FILE to read such a list from FILE.

Engine logits file (written by the C engine; little-endian, no padding anywhere)
--------------------------------------------------------------------------------
    offset 0   4 bytes  magic  b"FGLG"
    offset 4   u32      version = 1
    offset 8   u32      n_positions (number of records, >= 1)
    offset 12  u32      n_vocab
    offset 16  n_positions records, record i (i = 0 .. n_positions-1) being
                   i32             token id at position i (the token that was consumed)
                   f32[n_vocab]    logits computed after consuming that token, i.e. the
                                   distribution for position i+1
    Total size = 16 + n_positions * 4 * (1 + n_vocab) bytes; anything else is an error.
    Records must be for consecutive positions starting at 0 (the prompt included), and
    record i's token id must equal tokens[i] of --tokens.  n_positions may be
    len(tokens) or less (typically len(tokens) - 1 when the engine does not evaluate the
    final generated token).

Compare semantics
-----------------
  * logits: for every record i, max_v |engine[i, v] - ref[i, v]| must be <= --tol
    (absolute, default 1e-4); non-finite engine logits fail.
  * greedy: tokens[P:] are the engine's generated tokens.  For every generated token
    tokens[j] (j >= P; it was chosen from the logits of position i = j - 1 >= P - 1)
    the reference argmax at position i must equal tokens[j].  A disagreement is accepted
    (reported as a NOTE) only when it is a near-tie in the reference:
    ref[i].max() - ref[i, tokens[j]] <= --tie-margin (default 2 * tol; with logits
    within tol, a flip is only possible inside that margin).  Where record i exists the
    engine's own argmax must also equal tokens[j] (exact ties accepted).

Model semantics (what is computed; ggml dimension order ne0-first, numpy shapes reversed)
-----------------------------------------------------------------------------------------
  x = token_embd[tok]                                       token_embd {d, V} -> (V, d)
  per layer:
    h  = RMSNorm(x) * attn_norm
    q  = q_b(RMSNorm(q_a h) * q_a_norm)    or attn_q h   -> per head [nope | rope]
    kv = kv_a_mqa h ;  c = RMSNorm(kv[:kv_lora]) * kv_a_norm ; k_pe = RoPE(kv[kv_lora:])
    q_pe = RoPE(q[.., nope:])                               (k_pe shared by all heads)
    K_nope[t, h, :] = sum_r c[t, r] * k_b[h, r, :]          attn_k_b {nope, kv_lora, H}
    V[t, h, :]      = sum_r v_b[h, :, r] * c[t, r]          attn_v_b {kv_lora, v, H}
      (legacy attn_kv_b {kv_lora, H*(nope+v)}: per head rows [nope | v])
    score[h, t, s] = kq_scale * (q_nope[t,h].K_nope[s,h] + q_pe[t,h].k_pe[s]), causal s <= t
    o[t] = attn_output . concat_h(softmax_s(score) V)       (head-major, h*v + j)
    x += o
    h  = RMSNorm(x) * ffn_norm
    dense layers (il < leading_dense_block_count): down(silu(gate h) * up h)
    MoE layers: routed experts (see select_experts) + shared expert (weight 1)
    x += ffn
  logits = output . (RMSNorm(x) * output_norm)      (output absent -> tied token_embd)

  MTP block (nextn_predict_layers = 1; blk.N, N = block_count - 1; the trunk is blocks 0..N-1),
  see forward_mtp():
    h[p]   = RMSNorm(x_trunk[p]) * output_norm              (what the head reads)
    m      = nextn.eh_proj . [RMSNorm(E[t_p]) * nextn.enorm ; RMSNorm(h[p-1]) * nextn.hnorm]
             (h[-1] = 0; E = nextn.embed_tokens or token_embd; eh_proj {2d, d})
    m      = layer N on m (its own causal attention over the MTP rows, its FFN)
    mtp_logits[p] = head . (RMSNorm(m) * head_norm)         (a draft of t_{p+1}; head_norm =
             nextn.shared_head_norm or output_norm, head = nextn.shared_head_head or output)

  RMSNorm(x) = x / sqrt(mean(x^2) + eps), eps = attention.layer_norm_rms_epsilon.
  RoPE: GGML "normal" mode, rotating adjacent pairs (x[2i], x[2i+1]) by theta_i, i < n_rot/2.

RoPE / YaRN / attention scale -- exactly the llama.cpp chain (see yarn_params()):
  1. loader (src/llama-model.cpp, generic + deepseek2):
       scaling type  = rope.scaling.type, default "linear"
       freq_scale    = 1 / rope.scaling.factor (factor absent or 0 -> 1)
       rope_attn_factor = rope.scaling.attn_factor (default 1)
       n_ctx_orig    = rope.scaling.original_context_length, else context_length
       log_mul       = rope.scaling.yarn_log_multiplier / 0.1 (absent -> 0)
                       (convert_hf_to_gguf writes 0.1 * mscale_all_dim; llama.cpp cancels
                        the 0.1: [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX])
  2. context (src/llama-context.cpp):
       type "none" -> freq_scale = 1
       ext_factor = 1 if type == "yarn" else 0
       attn_factor = 1 (hparams.yarn_attn_factor default)
       if ext_factor != 0:
           factor = 1/freq_scale ; get_mscale(s, m) = 1 if s <= 1 else 1 + 0.1*m*ln(s)
           if log_mul != 0:
               m = log_mul if log_mul != 1 else 1        (deepseek2 special case)
               attn_factor = get_mscale(factor, m) / get_mscale(factor, log_mul)   (== 1)
           else:
               attn_factor = get_mscale(factor, 1)
           attn_factor /= 1 + 0.1*ln(factor)
       attn_factor *= rope_attn_factor
  3. graph (src/models/deepseek2.cpp):
       attn_factor_org = attn_factor * (1 + 0.1*ln(1/freq_scale))
       mscale   = attn_factor_org * (1 + 0.1*log_mul*ln(1/freq_scale))
       kq_scale = mscale^2 / sqrt(nope + rope)
       ggml_rope_ext(..., n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor,
                     beta_fast=32, beta_slow=1)
  4. ggml rope (ggml-cpu/ops.cpp rope_yarn, ggml.c ggml_rope_yarn_corr_dims):
       theta_extrap = pos * freq_base^(-2i/n_rot) ; theta_interp = freq_scale * theta_extrap
       if ext_factor != 0:
           corr_dim(b) = n_rot * ln(n_ctx_orig / (2*pi*b)) / (2 * ln(freq_base))
           lo = max(0, floor(corr_dim(beta_fast))) ; hi = min(n_rot-1, ceil(corr_dim(beta_slow)))
           ramp = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1) ; mix = ramp * ext_factor
           theta = theta_interp * (1 - mix) + theta_extrap * mix
           mag   = attn_factor * (1 + 0.1*ln(1/freq_scale))
       else: theta = theta_interp ; mag = attn_factor
       cos/sin used in the rotation are cos(theta)*mag, sin(theta)*mag.
  Net effect for DeepSeek YaRN GGUFs (log_mul = mscale_all_dim != 0): the RoPE output is
  not magnitude-scaled (mag = rope_attn_factor = 1) and
  kq_scale = (1 + 0.1*mscale_all_dim*ln(factor))^2 / sqrt(nope + rope), which is the HF
  DeepSeek softmax_scale.  Without scaling every factor is 1 and kq_scale = 1/sqrt(nope+rope).
"""

import argparse
import math
import os
import struct
import sys

import numpy as np

sys.dont_write_bytecode = True   # keep the source tree free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_read import GGUFError, GGUFFile  # noqa: E402

ARCH = "deepseek2"

GATING_SOFTMAX = 1
GATING_SIGMOID = 2

LOGITS_MAGIC = b"FGLG"
LOGITS_VERSION = 1
LOGITS_HEADER = struct.Struct("<4sIII")

YARN_BETA_FAST = 32.0   # llama_hparams defaults; deepseek2 reads no key for these
YARN_BETA_SLOW = 1.0


class ModelError(Exception):
    """The GGUF does not describe a deepseek2 model this reference understands."""


# ======================================================================================
# model loading and validation
# ======================================================================================

def _strip1(ne):
    ne = list(ne)
    while len(ne) > 1 and ne[-1] == 1:
        ne.pop()
    return tuple(ne)


class HParams(object):
    pass


class DeepSeek2Model(object):
    """Hyper-parameters + lazily dequantised (float64) tensors of a deepseek2 GGUF."""

    def __init__(self, path):
        self.path = path
        self.gguf = GGUFFile(path)
        self._cache = {}
        arch = self.gguf.get("general.architecture")
        if arch != ARCH:
            raise ModelError("%s: general.architecture is %r, expected %r" % (path, arch, ARCH))
        self.hp = self._read_hparams()
        self._validate_tensors()
        self.rope = yarn_params(self.hp)

    # -- metadata ----------------------------------------------------------------------
    def _key(self, name, default=None, required=False):
        full = ARCH + "." + name
        if full in self.gguf.metadata:
            return self.gguf.metadata[full]
        if required:
            raise ModelError("%s: required metadata key %r missing" % (self.path, full))
        return default

    def _per_layer(self, name, n_layer, required=True, default=None):
        v = self._key(name, default, required)
        if v is None:
            return None
        if isinstance(v, (list, np.ndarray)):
            vals = [int(x) for x in v]
            if len(vals) != n_layer:
                raise ModelError("%s: %s.%s has %d entries, expected %d (block_count)"
                                 % (self.path, ARCH, name, len(vals), n_layer))
            return vals
        return [int(v)] * n_layer

    def _read_hparams(self):
        hp = HParams()
        k = self._key
        hp.n_embd = int(k("embedding_length", required=True))
        hp.n_layer = int(k("block_count", required=True))
        hp.n_ctx_train = int(k("context_length", required=True))
        heads = self._per_layer("attention.head_count", hp.n_layer)
        if len(set(heads)) != 1:
            raise ModelError("per-layer varying head_count %s is not supported" % heads)
        hp.n_head = heads[0]
        hp.n_head_kv = self._key("attention.head_count_kv")
        hp.eps = float(k("attention.layer_norm_rms_epsilon", required=True))
        hp.q_lora = int(k("attention.q_lora_rank", 0) or 0)
        hp.kv_lora = int(k("attention.kv_lora_rank", required=True))
        key_length = k("attention.key_length")
        value_length = k("attention.value_length")
        key_mla = k("attention.key_length_mla")
        value_mla = k("attention.value_length_mla")
        # llama_hparams::n_embd_head_k_mla(): the *_mla key when present, else the plain key
        hp.k_mla = int(key_mla) if key_mla else (int(key_length) if key_length else None)
        hp.v_mla = int(value_mla) if value_mla else (int(value_length) if value_length else None)
        if hp.k_mla is None or hp.v_mla is None:
            raise ModelError("%s: need attention.key_length(_mla) and attention.value_length(_mla)"
                             % self.path)
        hp.is_mla_meta = bool(key_mla) and bool(value_mla)
        hp.n_rot = int(k("rope.dimension_count", required=True))
        if hp.n_rot <= 0 or hp.n_rot % 2 != 0:
            raise ModelError("rope.dimension_count must be even and > 0, got %d" % hp.n_rot)
        hp.nope = hp.k_mla - hp.n_rot
        if hp.nope <= 0:
            raise ModelError("key_length(_mla)=%d must exceed rope.dimension_count=%d"
                             % (hp.k_mla, hp.n_rot))
        hp.freq_base = float(k("rope.freq_base", 10000.0))
        hp.rope_scaling_type = k("rope.scaling.type", "linear")
        hp.rope_scaling_factor = float(k("rope.scaling.factor", 0.0) or 0.0)
        if hp.rope_scaling_factor == 0.0:
            hp.rope_scaling_factor = float(k("rope.scale_linear", 0.0) or 0.0)
        hp.rope_attn_factor = float(k("rope.scaling.attn_factor", 1.0))
        hp.n_ctx_orig = int(k("rope.scaling.original_context_length", 0) or 0) or hp.n_ctx_train
        stored_log_mul = k("rope.scaling.yarn_log_multiplier")
        # llama.cpp divides in float32: rope_yarn_log_mul /= 0.1f
        hp.yarn_log_mul = (float(np.float32(stored_log_mul) / np.float32(0.1))
                           if stored_log_mul is not None else 0.0)
        temp = k("attention.temperature_scale")
        if temp:
            raise ModelError("attention.temperature_scale (Llama-4 style temperature tuning) is not "
                             "implemented in the reference")

        # the MTP block: the last nextn_predict_layers blocks; the trunk runs the ones before
        hp.n_blocks = hp.n_layer
        hp.n_nextn = int(k("nextn_predict_layers", 0) or 0)
        if hp.n_nextn >= hp.n_blocks or hp.n_nextn > 1:
            raise ModelError("nextn_predict_layers %d: the reference takes 0 or 1 with a trunk left "
                             "(block_count %d)" % (hp.n_nextn, hp.n_blocks))
        hp.n_layer = hp.n_blocks - hp.n_nextn
        hp.n_dense_lead = int(k("leading_dense_block_count", 0))
        hp.n_ff = self._per_layer("feed_forward_length", hp.n_blocks,
                                  required=hp.n_dense_lead > 0, default=0)
        hp.n_expert = int(k("expert_count", 0) or 0)
        hp.n_expert_used = int(k("expert_used_count", 0) or 0)
        hp.n_expert_shared = int(k("expert_shared_count", 0) or 0)
        hp.n_ff_exp = int(k("expert_feed_forward_length", 0) or 0)
        hp.expert_weights_scale = float(k("expert_weights_scale", 0.0) or 0.0)
        hp.expert_weights_norm = bool(k("expert_weights_norm", False))
        gating = int(k("expert_gating_func", 0) or 0)
        hp.expert_gating_func = GATING_SOFTMAX if gating == 0 else gating
        if hp.expert_gating_func not in (GATING_SOFTMAX, GATING_SIGMOID):
            raise ModelError("expert_gating_func %d not supported (1=softmax, 2=sigmoid)" % gating)
        hp.n_group = int(k("expert_group_count", 0) or 0)
        hp.n_group_used = int(k("expert_group_used_count", 0) or 0)
        if hp.n_dense_lead < hp.n_layer:
            if hp.n_expert <= 0 or not (0 < hp.n_expert_used <= hp.n_expert):
                raise ModelError("MoE layers present but expert_count=%d expert_used_count=%d"
                                 % (hp.n_expert, hp.n_expert_used))
            if hp.n_ff_exp <= 0:
                raise ModelError("expert_feed_forward_length missing")
            if hp.n_group > 1:
                if hp.n_expert % hp.n_group != 0:
                    raise ModelError("expert_count %d not divisible by expert_group_count %d"
                                     % (hp.n_expert, hp.n_group))
                if not (0 < hp.n_group_used <= hp.n_group):
                    raise ModelError("expert_group_used_count %d invalid for %d groups"
                                     % (hp.n_group_used, hp.n_group))
        te = self.gguf.tensors.get("token_embd.weight")
        if te is None:
            raise ModelError("token_embd.weight missing")
        hp.n_vocab = te.ne[1] if len(te.ne) > 1 else 1
        return hp

    # -- tensors -----------------------------------------------------------------------
    def has(self, name):
        return name in self.gguf.tensors

    def w(self, name):
        a = self._cache.get(name)
        if a is None:
            a = self.gguf.tensor_f64(name)
            self._cache[name] = a
        return a

    def _expect(self, name, ne, optional=False):
        t = self.gguf.tensors.get(name)
        if t is None:
            if optional:
                return False
            raise ModelError("%s: tensor %s missing (expected ggml ne=%s)" % (self.path, name, list(ne)))
        if _strip1(t.ne) != _strip1(ne):
            raise ModelError("%s: tensor %s has ggml ne=%s, expected %s from the metadata "
                             "(ggml order, ne0 first)" % (self.path, name, list(t.ne), list(ne)))
        return True

    def _validate_tensors(self):
        hp = self.hp
        d, H, V = hp.n_embd, hp.n_head, hp.n_vocab
        self._expect("token_embd.weight", (d, V))
        self._expect("output_norm.weight", (d,))
        hp.tied_output = not self._expect("output.weight", (d, V), optional=True)
        hp.layer_kind = []
        hp.layer_kv_b = []
        mtp = "blk.%d." % hp.n_layer
        if hp.n_nextn and not (self.has(mtp + "attn_norm.weight") or self.has(mtp + "nextn.eh_proj.weight")):
            hp.n_nextn = 0                                  # a trunk-only export (llama.cpp loads it so)
        for il in range(hp.n_layer + hp.n_nextn):
            p = "blk.%d." % il
            self._expect(p + "attn_norm.weight", (d,))
            has_qa = self.has(p + "attn_q_a.weight")
            if hp.q_lora > 0:
                if not has_qa:
                    raise ModelError("q_lora_rank=%d but %sattn_q_a.weight missing" % (hp.q_lora, p))
                self._expect(p + "attn_q_a.weight", (d, hp.q_lora))
                self._expect(p + "attn_q_a_norm.weight", (hp.q_lora,))
                self._expect(p + "attn_q_b.weight", (hp.q_lora, H * hp.k_mla))
            else:
                if has_qa:
                    raise ModelError("%sattn_q_a.weight present but attention.q_lora_rank absent/0" % p)
                self._expect(p + "attn_q.weight", (d, H * hp.k_mla))
            self._expect(p + "attn_kv_a_mqa.weight", (d, hp.kv_lora + hp.n_rot))
            self._expect(p + "attn_kv_a_norm.weight", (hp.kv_lora,))
            if self.has(p + "attn_k_b.weight") or self.has(p + "attn_v_b.weight"):
                self._expect(p + "attn_k_b.weight", (hp.nope, hp.kv_lora, H))
                self._expect(p + "attn_v_b.weight", (hp.kv_lora, hp.v_mla, H))
                hp.layer_kv_b.append("split")
            elif self.has(p + "attn_kv_b.weight"):
                self._expect(p + "attn_kv_b.weight", (hp.kv_lora, H * (hp.nope + hp.v_mla)))
                hp.layer_kv_b.append("joined")
            else:
                raise ModelError("%s: layer %d has neither attn_k_b/attn_v_b nor attn_kv_b"
                                 % (self.path, il))
            self._expect(p + "attn_output.weight", (H * hp.v_mla, d))
            self._expect(p + "ffn_norm.weight", (d,))
            if il < hp.n_dense_lead:
                ff = hp.n_ff[il]
                self._expect(p + "ffn_gate.weight", (d, ff))
                self._expect(p + "ffn_up.weight", (d, ff))
                self._expect(p + "ffn_down.weight", (ff, d))
                hp.layer_kind.append("dense")
            else:
                E, f = hp.n_expert, hp.n_ff_exp
                if self.has(p + "ffn_gate_up_exps.weight"):
                    raise ModelError("merged ffn_gate_up_exps is not supported by the reference")
                self._expect(p + "ffn_gate_inp.weight", (d, E))
                self._expect(p + "exp_probs_b.bias", (E,), optional=True)
                self._expect(p + "ffn_gate_exps.weight", (d, f, E))
                self._expect(p + "ffn_up_exps.weight", (d, f, E))
                self._expect(p + "ffn_down_exps.weight", (f, d, E))
                if hp.n_expert_shared > 0:
                    fs = f * hp.n_expert_shared
                    self._expect(p + "ffn_gate_shexp.weight", (d, fs))
                    self._expect(p + "ffn_up_shexp.weight", (d, fs))
                    self._expect(p + "ffn_down_shexp.weight", (fs, d))
                elif self.has(p + "ffn_gate_shexp.weight"):
                    raise ModelError("%sffn_*_shexp present but expert_shared_count is 0" % p)
                hp.layer_kind.append("moe")
        if hp.n_nextn:
            self._expect(mtp + "nextn.eh_proj.weight", (2 * d, d))
            self._expect(mtp + "nextn.enorm.weight", (d,))
            self._expect(mtp + "nextn.hnorm.weight", (d,))
            hp.mtp_head_norm = mtp + "nextn.shared_head_norm.weight"
            if not self._expect(hp.mtp_head_norm, (d,), optional=True):
                hp.mtp_head_norm = "output_norm.weight"
            hp.mtp_head = mtp + "nextn.shared_head_head.weight"
            if not self._expect(hp.mtp_head, (d, V), optional=True):
                hp.mtp_head = "token_embd.weight" if hp.tied_output else "output.weight"
            hp.mtp_embd = mtp + "nextn.embed_tokens.weight"
            if not self._expect(hp.mtp_embd, (d, V), optional=True):
                hp.mtp_embd = "token_embd.weight"

    def close(self):
        self._cache.clear()
        self.gguf.close()


# ======================================================================================
# RoPE / YaRN
# ======================================================================================

def _get_mscale(scale, m):
    return 1.0 if scale <= 1.0 else 0.1 * m * math.log(scale) + 1.0


def yarn_corr_dims(n_rot, n_ctx_orig, freq_base, beta_fast, beta_slow):
    """ggml_rope_yarn_corr_dims, evaluated in float32 like ggml so floor/ceil agree."""
    f32 = np.float32
    two_pi = f32(2.0) * f32(math.pi)

    def corr_dim(beta):
        num = f32(n_rot) * f32(math.log(f32(n_ctx_orig) / (f32(beta) * two_pi)))
        return num / (f32(2.0) * f32(math.log(f32(freq_base))))

    start = math.floor(float(corr_dim(beta_fast)))
    end = math.ceil(float(corr_dim(beta_slow)))
    return float(max(0.0, start)), float(min(float(n_rot - 1), end))


def yarn_params(hp):
    """The RoPE/attention constants exactly as llama.cpp derives them for deepseek2.

    See the module docstring (steps 1-4) for the source of every line.
    """
    stype = hp.rope_scaling_type
    if stype not in ("none", "linear", "yarn"):
        raise ModelError("rope.scaling.type %r not supported by the reference" % stype)
    freq_scale = 1.0 / hp.rope_scaling_factor if hp.rope_scaling_factor != 0.0 else 1.0
    if stype == "none":
        freq_scale = 1.0
    ext_factor = 1.0 if stype == "yarn" else 0.0
    log_mul = hp.yarn_log_mul

    attn_factor = 1.0
    if ext_factor != 0.0:
        factor = 1.0 / freq_scale
        if log_mul != 0.0:
            # llama.cpp: mscale = 1, but for deepseek2 with log_mul != 1 mscale = log_mul;
            # either way m == log_mul, so attn_factor becomes exactly 1 here
            m = log_mul
            attn_factor = _get_mscale(factor, m) / _get_mscale(factor, log_mul)
        else:
            attn_factor = _get_mscale(factor, 1.0)
        attn_factor *= 1.0 / (1.0 + 0.1 * math.log(factor))
    attn_factor *= hp.rope_attn_factor

    inv_ln = math.log(1.0 / freq_scale)
    attn_factor_org = attn_factor * (1.0 + 0.1 * inv_ln)
    mscale = attn_factor_org * (1.0 + 0.1 * log_mul * inv_ln)
    kq_scale = mscale * mscale / math.sqrt(float(hp.k_mla))

    rope_mag = attn_factor * (1.0 + 0.1 * inv_ln) if ext_factor != 0.0 else attn_factor
    if ext_factor != 0.0:
        corr = yarn_corr_dims(hp.n_rot, hp.n_ctx_orig, hp.freq_base, YARN_BETA_FAST, YARN_BETA_SLOW)
    else:
        corr = (0.0, 0.0)
    return {
        "scaling_type": stype, "freq_base": hp.freq_base, "freq_scale": freq_scale,
        "ext_factor": ext_factor, "attn_factor": attn_factor, "rope_mag": rope_mag,
        "log_mul": log_mul, "mscale": mscale, "kq_scale": kq_scale, "corr_dims": corr,
        "n_ctx_orig": hp.n_ctx_orig, "beta_fast": YARN_BETA_FAST, "beta_slow": YARN_BETA_SLOW,
        "n_rot": hp.n_rot,
    }


def rope_theta(rp, positions):
    """Rotation angles theta[t, i] (i < n_rot/2) incl. YaRN frequency correction."""
    n_rot = rp["n_rot"]
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv_freq = rp["freq_base"] ** (-2.0 * i / n_rot)
    pos = np.asarray(positions, dtype=np.float64)[:, None]
    theta_extrap = pos * inv_freq[None, :]
    theta_interp = rp["freq_scale"] * theta_extrap
    if rp["ext_factor"] != 0.0:
        lo, hi = rp["corr_dims"]
        y = (i - lo) / max(0.001, hi - lo)
        ramp = 1.0 - np.clip(y, 0.0, 1.0)
        mix = ramp * rp["ext_factor"]
        return theta_interp * (1.0 - mix)[None, :] + theta_extrap * mix[None, :]
    return theta_interp


def rope_cos_sin(rp, positions):
    th = rope_theta(rp, positions)
    return np.cos(th) * rp["rope_mag"], np.sin(th) * rp["rope_mag"]


def apply_rope(x, cos, sin):
    """x: (T, ..., n_rot); cos/sin: (T, n_rot/2).  GGML normal mode: adjacent pairs."""
    extra = x.ndim - 2
    c = cos.reshape(cos.shape[:1] + (1,) * extra + cos.shape[1:])
    s = sin.reshape(sin.shape[:1] + (1,) * extra + sin.shape[1:])
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


# ======================================================================================
# building blocks
# ======================================================================================

def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))       # == 1/(1+exp(-x)), without overflow warnings


def silu(x):
    return x * sigmoid(x)


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def kv_b_weights(model, il):
    """(W_kb, W_vb) of layer il as numpy arrays W_kb (H, kv_lora, nope), W_vb (H, v, kv_lora).

    K_nope[t, h, n] = sum_r c[t, r] W_kb[h, r, n];  V[t, h, j] = sum_r W_vb[h, j, r] c[t, r].
    """
    hp = model.hp
    p = "blk.%d." % il
    if hp.layer_kv_b[il] == "split":
        return model.w(p + "attn_k_b.weight"), model.w(p + "attn_v_b.weight")
    # legacy joined kv_b {kv_lora, H*(nope+v)} -> numpy (H*(nope+v), kv_lora), per head [nope | v]
    kvb = model.w(p + "attn_kv_b.weight").reshape(hp.n_head, hp.nope + hp.v_mla, hp.kv_lora)
    wkb = np.ascontiguousarray(kvb[:, :hp.nope, :].transpose(0, 2, 1))
    wvb = np.ascontiguousarray(kvb[:, hp.nope:, :])
    return wkb, wvb


def attention_inputs(model, il, h, positions):
    """Projections shared by every attention formulation.

    Returns q_nope (T,H,nope), q_pe (T,H,rope) [rotated], c (T,kv_lora) [normalised],
    k_pe (T,rope) [rotated].
    """
    hp = model.hp
    p = "blk.%d." % il
    T = h.shape[0]
    if hp.q_lora > 0:
        qa = h @ model.w(p + "attn_q_a.weight").T
        qa = rms_norm(qa, model.w(p + "attn_q_a_norm.weight"), hp.eps)
        q = qa @ model.w(p + "attn_q_b.weight").T
    else:
        q = h @ model.w(p + "attn_q.weight").T
    q = q.reshape(T, hp.n_head, hp.k_mla)
    q_nope = q[:, :, :hp.nope]
    cos, sin = rope_cos_sin(model.rope, positions)
    q_pe = apply_rope(q[:, :, hp.nope:], cos, sin)

    kv = h @ model.w(p + "attn_kv_a_mqa.weight").T            # (T, kv_lora + rope)
    c = rms_norm(kv[:, :hp.kv_lora], model.w(p + "attn_kv_a_norm.weight"), hp.eps)
    k_pe = apply_rope(kv[:, hp.kv_lora:], cos, sin)
    return q_nope, q_pe, c, k_pe


def causal_mask(T):
    return np.triu(np.ones((T, T), dtype=bool), k=1)          # True where s > t


def attention_mha(model, il, h, positions, capture=None):
    """Non-absorbed MLA: decompress K_nope and V per head, standard causal softmax attention."""
    hp = model.hp
    p = "blk.%d." % il
    T = h.shape[0]
    q_nope, q_pe, c, k_pe = attention_inputs(model, il, h, positions)
    wkb, wvb = kv_b_weights(model, il)
    k_nope = np.einsum("tr,hrn->thn", c, wkb)                   # (T, H, nope)
    v = np.einsum("tr,hjr->thj", c, wvb)                        # (T, H, v)
    scores = np.einsum("thn,shn->hts", q_nope, k_nope) + np.einsum("thr,sr->hts", q_pe, k_pe)
    scores = scores * model.rope["kq_scale"]
    scores = np.where(causal_mask(T)[None, :, :], -np.inf, scores)
    probs = softmax(scores, axis=-1)
    o = np.einsum("hts,shj->thj", probs, v).reshape(T, hp.n_head * hp.v_mla)
    out = o @ model.w(p + "attn_output.weight").T
    if capture is not None:
        capture["l%d.latent" % il] = c
        capture["l%d.k_pe" % il] = k_pe
        capture["l%d.q_pe" % il] = q_pe
        capture["l%d.attn_probs" % il] = probs
    return out


def select_experts(logits, n_used, gating=GATING_SOFTMAX, bias=None, n_group=0, n_group_used=0,
                   norm_w=False, w_scale=0.0):
    """Router -> (expert indices (T, n_used), weights (T, n_used)), as llama.cpp build_moe_ffn.

    scores = softmax(logits) or sigmoid(logits) (over experts).  Selection uses
    scores + bias (bias only for choosing); with n_group > 1 a group's score is the sum of
    its two best selection scores and only the best n_group_used groups stay eligible (the
    rest are set to -inf).  Top n_used by selection score (ties -> lower index).  Weights are
    the UNBIASED scores of the chosen experts, divided by their sum if norm_w, then multiplied
    by w_scale if w_scale != 0 (llama.cpp passes expert_weights_scale as both the flag and the
    factor).
    """
    logits = np.atleast_2d(np.asarray(logits, dtype=np.float64))
    T, E = logits.shape
    if not (0 < n_used <= E):
        raise ValueError("n_used=%d out of range for %d experts" % (n_used, E))
    if gating == GATING_SOFTMAX:
        scores = softmax(logits, axis=-1)
    elif gating == GATING_SIGMOID:
        scores = sigmoid(logits)
    else:
        raise ValueError("unknown gating function %r" % gating)
    sel = scores if bias is None else scores + np.asarray(bias, dtype=np.float64)[None, :]
    if n_group > 1:
        if E % n_group != 0:
            raise ValueError("%d experts not divisible into %d groups" % (E, n_group))
        gsize = E // n_group
        if gsize < 2:
            raise ValueError("group-limited routing needs >= 2 experts per group")
        g = sel.reshape(T, n_group, gsize)
        top2 = -np.sort(-g, axis=-1)[:, :, :2]
        gscore = top2.sum(axis=-1)                                   # (T, n_group)
        gorder = np.argsort(-gscore, axis=-1, kind="stable")[:, :n_group_used]
        keep = np.zeros((T, n_group), dtype=bool)
        np.put_along_axis(keep, gorder, True, axis=-1)
        sel = np.where(np.repeat(keep, gsize, axis=-1), sel, -np.inf)
    idx = np.argsort(-sel, axis=-1, kind="stable")[:, :n_used]
    wts = np.take_along_axis(scores, idx, axis=-1)
    if norm_w:
        wts = wts / wts.sum(axis=-1, keepdims=True)
    if w_scale != 0.0:
        wts = wts * w_scale
    return idx, wts


def swiglu_ffn(h, w_gate, w_up, w_down):
    """w_gate/w_up numpy (..., ff, d); w_down (..., d, ff)."""
    return (silu(h @ w_gate.T) * (h @ w_up.T)) @ w_down.T


def moe_ffn(model, il, h, capture=None):
    hp = model.hp
    p = "blk.%d." % il
    logits = h @ model.w(p + "ffn_gate_inp.weight").T              # (T, E)
    bias = model.w(p + "exp_probs_b.bias") if model.has(p + "exp_probs_b.bias") else None
    idx, wts = select_experts(logits, hp.n_expert_used, hp.expert_gating_func, bias,
                              hp.n_group, hp.n_group_used, hp.expert_weights_norm,
                              hp.expert_weights_scale)
    wg = model.w(p + "ffn_gate_exps.weight")                        # (E, f, d)
    wu = model.w(p + "ffn_up_exps.weight")                          # (E, f, d)
    wd = model.w(p + "ffn_down_exps.weight")                        # (E, d, f)
    out = np.zeros_like(h)
    for e in np.unique(idx):
        rows, slot = np.nonzero(idx == e)
        y = swiglu_ffn(h[rows], wg[e], wu[e], wd[e])
        out[rows] += y * wts[rows, slot][:, None]
    if capture is not None:
        capture["l%d.router_logits" % il] = logits
        capture["l%d.moe_idx" % il] = idx
        capture["l%d.moe_w" % il] = wts
        capture["l%d.moe_routed" % il] = out.copy()
    if hp.n_expert_shared > 0:
        sh = swiglu_ffn(h, model.w(p + "ffn_gate_shexp.weight"), model.w(p + "ffn_up_shexp.weight"),
                        model.w(p + "ffn_down_shexp.weight"))
        if capture is not None:
            capture["l%d.shexp" % il] = sh
        out = out + sh
    return out


def _layer(model, il, x, positions, attention, capture):
    """Block il on the residual stream x (T, d): x + attention, then + FFN."""
    hp = model.hp
    p = "blk.%d." % il
    h = rms_norm(x, model.w(p + "attn_norm.weight"), hp.eps)
    a = attention(model, il, h, positions, capture) if capture is not None else \
        attention(model, il, h, positions)
    x = x + a
    h = rms_norm(x, model.w(p + "ffn_norm.weight"), hp.eps)
    if hp.layer_kind[il] == "dense":
        f = swiglu_ffn(h, model.w(p + "ffn_gate.weight"), model.w(p + "ffn_up.weight"),
                       model.w(p + "ffn_down.weight"))
    else:
        f = moe_ffn(model, il, h, capture)
    x = x + f
    if capture is not None:
        capture["l%d.attn_out" % il] = a
        capture["l%d.ffn_out" % il] = f
        capture["l%d.out" % il] = x.copy()
    return x


def _check_tokens(hp, tokens):
    tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
    if tokens.size == 0:
        raise ValueError("no tokens")
    if tokens.min() < 0 or tokens.max() >= hp.n_vocab:
        raise ValueError("token id out of range [0, %d)" % hp.n_vocab)
    return tokens


def forward(model, tokens, attention=None, capture=None):
    """Full causal forward over `tokens` at positions 0..n-1; returns float64 logits (n, V)."""
    hp = model.hp
    attention = attention or attention_mha
    tokens = _check_tokens(hp, tokens)
    positions = np.arange(tokens.size)
    x = model.w("token_embd.weight")[tokens]                        # (T, d)
    for il in range(hp.n_layer):
        x = _layer(model, il, x, positions, attention, capture)
    x = rms_norm(x, model.w("output_norm.weight"), hp.eps)
    if capture is not None:
        capture["result_norm"] = x
    head = model.w("token_embd.weight") if hp.tied_output else model.w("output.weight")
    return x @ head.T


def forward_mtp(model, tokens, attention=None, hidden="normed", order="eh"):
    """The trunk's logits and the MTP block's (n, V) each, positions 0..n-1.

    Row p of the MTP logits is the block's draft of t_{p+1} from t_p and the trunk's hidden
    at p-1 (zero at p = 0).  hidden / order exist for the negative controls only: "raw" feeds
    the trunk's residual before output_norm, order "he" swaps the concatenation.
    """
    hp = model.hp
    if not hp.n_nextn:
        raise ModelError("%s has no MTP block (nextn_predict_layers)" % model.path)
    attention = attention or attention_mha
    tokens = _check_tokens(hp, tokens)
    cap = {}
    logits = forward(model, tokens, attention, cap)
    h = cap["result_norm"] if hidden == "normed" else cap["l%d.out" % (hp.n_layer - 1)]
    h_prev = np.vstack([np.zeros((1, hp.n_embd)), h[:-1]])
    mtp = "blk.%d.nextn." % hp.n_layer
    e = rms_norm(model.w(hp.mtp_embd)[tokens], model.w(mtp + "enorm.weight"), hp.eps)
    hn = rms_norm(h_prev, model.w(mtp + "hnorm.weight"), hp.eps)
    cat = np.hstack([e, hn] if order == "eh" else [hn, e])
    x = cat @ model.w(mtp + "eh_proj.weight").T                    # eh_proj {2d, d} -> (d, 2d)
    x = _layer(model, hp.n_layer, x, np.arange(tokens.size), attention, None)
    x = rms_norm(x, model.w(hp.mtp_head_norm), hp.eps)
    return logits, x @ model.w(hp.mtp_head).T


# ======================================================================================
# engine logits file
# ======================================================================================

def read_engine_logits(path):
    """Returns (token ids int64 (N,), logits float32 (N, V)).  Raises ValueError on bad files."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < LOGITS_HEADER.size:
        raise ValueError("%s: too short for the FGLG header" % path)
    magic, version, n_pos, n_vocab = LOGITS_HEADER.unpack_from(data, 0)
    if magic != LOGITS_MAGIC:
        raise ValueError("%s: bad magic %r (expected %r)" % (path, magic, LOGITS_MAGIC))
    if version != LOGITS_VERSION:
        raise ValueError("%s: unsupported version %d (expected %d)" % (path, version, LOGITS_VERSION))
    if n_pos < 1 or n_vocab < 1:
        raise ValueError("%s: n_positions=%d n_vocab=%d" % (path, n_pos, n_vocab))
    expect = LOGITS_HEADER.size + n_pos * 4 * (1 + n_vocab)
    if len(data) != expect:
        raise ValueError("%s: size %d bytes, expected %d for %d positions x %d vocab"
                         % (path, len(data), expect, n_pos, n_vocab))
    rec = np.dtype([("tok", "<i4"), ("logits", "<f4", (n_vocab,))])
    assert rec.itemsize == 4 * (1 + n_vocab)
    recs = np.frombuffer(data, dtype=rec, count=n_pos, offset=LOGITS_HEADER.size)
    return recs["tok"].astype(np.int64), np.array(recs["logits"], dtype=np.float32)


def write_engine_logits(path, tokens, logits):
    """Writes the FGLG v1 format (used by the self-test; the C engine has its own writer)."""
    logits = np.asarray(logits, dtype="<f4")
    tokens = np.asarray(tokens, dtype="<i4").reshape(-1)
    n_pos, n_vocab = logits.shape
    if tokens.size != n_pos:
        raise ValueError("tokens/logits length mismatch")
    rec = np.dtype([("tok", "<i4"), ("logits", "<f4", (n_vocab,))])
    recs = np.zeros(n_pos, dtype=rec)
    recs["tok"] = tokens
    recs["logits"] = logits
    with open(path, "wb") as f:
        f.write(LOGITS_HEADER.pack(LOGITS_MAGIC, LOGITS_VERSION, n_pos, n_vocab))
        f.write(recs.tobytes())


def compare_logits(ref, tokens, n_prompt, eng_tokens, eng_logits, tol=1e-4, tie_margin=None,
                   out=None, median_tol=None):
    """Core of the `compare` subcommand.  Returns (ok, list of failure messages)."""
    if out is None:
        out = sys.stdout
    if tie_margin is None:
        tie_margin = 2.0 * tol
    tokens = np.asarray(tokens, dtype=np.int64)
    n_tok = tokens.size
    fails = []
    n_pos, n_vocab = eng_logits.shape
    if ref.ndim != 2 or ref.shape[0] != n_tok:
        return False, ["reference logits have shape %s for %d tokens" % (ref.shape, n_tok)]
    if n_vocab != ref.shape[1]:
        return False, ["engine n_vocab=%d but model vocab=%d" % (n_vocab, ref.shape[1])]
    if n_pos > n_tok:
        return False, ["engine file has %d positions but only %d tokens were given" % (n_pos, n_tok)]
    if not (1 <= n_prompt <= n_tok):
        return False, ["--n-prompt %d out of range [1, %d]" % (n_prompt, n_tok)]
    bad_tok = np.nonzero(eng_tokens != tokens[:n_pos])[0]
    for i in bad_tok[:10]:
        fails.append("position %d: engine record token %d != tokens[%d] = %d"
                     % (i, eng_tokens[i], i, tokens[i]))
    finite = np.isfinite(eng_logits).all(axis=1)
    for i in np.nonzero(~finite)[0][:10]:
        fails.append("position %d: engine logits contain NaN/Inf" % i)

    eng = eng_logits.astype(np.float64)
    delta = np.abs(eng - ref[:n_pos]).max(axis=1)
    delta = np.where(finite, delta, np.inf)
    ref_arg = ref.argmax(axis=1)
    eng_arg = eng.argmax(axis=1)
    out.write("pos  token  max|dlogit|   ref_argmax eng_argmax  %s\n" % ("(P=%d, tol=%g)" % (n_prompt, tol)))
    for i in range(n_pos):
        flag = "" if delta[i] <= tol else "  <-- exceeds tol"
        kind = "prompt" if i + 1 < n_prompt else "gen"
        out.write("%4d %6d  %.3e   %8d %8d   %s%s\n" % (i, tokens[i], delta[i], ref_arg[i], eng_arg[i],
                                                         kind, flag))
    overall = float(delta.max())
    out.write("overall max |dlogit| = %.3e over %d positions (max |ref logit| = %.3g)\n"
              % (overall, n_pos, float(np.abs(ref[:n_pos]).max())))
    if overall > tol:
        worst = int(np.argmax(delta))
        fails.append("max |dlogit| %.3e > tol %g (worst position %d)" % (overall, tol, worst))
    median = float(np.median(delta))
    out.write("median over positions of max |dlogit| = %.3e\n" % median)
    if median_tol is not None and not median <= median_tol:
        fails.append("median max |dlogit| %.3e > median tol %g" % (median, median_tol))

    n_gen = n_tok - n_prompt
    n_greedy_ok = 0
    for j in range(n_prompt, n_tok):
        i = j - 1
        chosen = int(tokens[j])
        if ref_arg[i] != chosen:
            gap = float(ref[i].max() - ref[i, chosen])
            if gap <= tie_margin:
                out.write("NOTE: position %d: engine chose %d, reference argmax %d, but it is a near-tie "
                          "(ref gap %.3e <= tie margin %.3e); accepted\n" % (i, chosen, ref_arg[i], gap,
                                                                            tie_margin))
            else:
                fails.append("greedy mismatch at position %d: engine generated token %d but the "
                             "reference argmax is %d (ref logit gap %.4g)" % (i, chosen, ref_arg[i], gap))
                continue
        if i < n_pos and eng_arg[i] != chosen and eng[i, eng_arg[i]] != eng[i, chosen]:
            fails.append("position %d: engine generated token %d but its own logits' argmax is %d"
                         % (i, chosen, eng_arg[i]))
            continue
        n_greedy_ok += 1
    out.write("greedy agreement: %d/%d generated tokens\n" % (n_greedy_ok, n_gen))
    return len(fails) == 0, fails


# ======================================================================================
# CLI
# ======================================================================================

def parse_tokens(s):
    if s.startswith("@"):
        with open(s[1:], "r") as f:
            s = f.read()
    parts = s.replace(",", " ").split()
    if not parts:
        raise ValueError("empty token list")
    return [int(x) for x in parts]


def _cmd_forward(argv):
    ap = argparse.ArgumentParser(prog="deepseek2_ref.py",
                                 description="float64 reference forward for deepseek2 GGUFs")
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="comma separated ids, or @FILE")
    ap.add_argument("--out", required=True, help="output .npy, float64 [n_tokens, n_vocab]")
    ap.add_argument("--dump", help="optional .npz with intermediate activations")
    a = ap.parse_args(argv)
    model = DeepSeek2Model(a.model)
    toks = parse_tokens(a.tokens)
    cap = {} if a.dump else None
    logits = forward(model, toks, capture=cap)
    np.save(a.out, logits)
    if a.dump:
        np.savez(a.dump, **cap)
    sys.stdout.write("wrote %s: logits %s, argmax of last row %d\n"
                     % (a.out, list(logits.shape), int(np.argmax(logits[-1]))))
    return 0


def _cmd_compare(argv):
    ap = argparse.ArgumentParser(prog="deepseek2_ref.py compare",
                                 description="compare engine logits against the reference")
    ap.add_argument("model")
    ap.add_argument("--engine-logits", required=True)
    ap.add_argument("--tokens", required=True, help="prompt + generated ids, or @FILE")
    ap.add_argument("--n-prompt", type=int, required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--tie-margin", type=float, default=None,
                    help="reference logit gap below which a greedy flip is accepted (default 2*tol)")
    ap.add_argument("--ref-logits", help="use this .npy instead of running the reference")
    ap.add_argument("--median-tol", type=float, default=None,
                    help="also require the median over positions of max |dlogit| <= this (models whose "
                         "activations the engine quantizes: robust to the few positions where an expert "
                         "choice flips)")
    a = ap.parse_args(argv)
    try:
        toks = parse_tokens(a.tokens)
        eng_tokens, eng_logits = read_engine_logits(a.engine_logits)
    except (ValueError, OSError) as e:
        sys.stderr.write("compare: %s\n" % e)
        return 2
    if a.ref_logits:
        ref = np.load(a.ref_logits)
    else:
        model = DeepSeek2Model(a.model)
        ref = forward(model, toks)
    ok, fails = compare_logits(ref, toks, a.n_prompt, eng_tokens, eng_logits, a.tol, a.tie_margin,
                               median_tol=a.median_tol)
    if ok:
        sys.stdout.write("PASS: engine matches the reference (tol %g)\n" % a.tol)
        return 0
    for m in fails:
        sys.stdout.write("FAIL: %s\n" % m)
    sys.stdout.write("FAIL: %d problem(s)\n" % len(fails))
    return 1


def _cmd_info(argv):
    ap = argparse.ArgumentParser(prog="deepseek2_ref.py info")
    ap.add_argument("model")
    a = ap.parse_args(argv)
    model = DeepSeek2Model(a.model)
    for k in sorted(vars(model.hp)):
        sys.stdout.write("%-22s %r\n" % (k, getattr(model.hp, k)))
    for k in sorted(model.rope):
        sys.stdout.write("rope.%-17s %r\n" % (k, model.rope[k]))
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "compare":
            return _cmd_compare(argv[1:])
        if argv and argv[0] == "info":
            return _cmd_info(argv[1:])
        return _cmd_forward(argv)
    except (ModelError, GGUFError, OSError) as e:
        sys.stderr.write("deepseek2_ref: error: %s\n" % e)
        return 2


if __name__ == "__main__":
    sys.exit(main())
