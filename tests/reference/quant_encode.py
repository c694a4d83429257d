#!/usr/bin/python3
"""Simple encoders for ggml's legacy, K-quant and IQ4 blocks, for test models only.

Each returns the bytes of a tensor (numpy values, row-major, rows a whole number of blocks)
in the layout of ggml-common.h.  They pick scales the plain way (block range / code range,
sub-block scales quantized against one super-block scale), not ggml's searching quantizers:
the test models need valid, reasonable blocks, and the engine and the reference then read
the same bytes.  Not byte-compatible with llama-quantize (that is flashgate-quantize's job).
"""

import numpy as np


def _f16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16)


def _safe_div(a, b):
    b = np.asarray(b, dtype=np.float64)
    return np.where(b != 0, a / np.where(b != 0, b, 1.0), 0.0)


def _nibbles(q):
    """q (..., 32) codes 0..15 -> (..., 16) bytes: value j low nibble, j + 16 high."""
    return (q[..., :16] | (q[..., 16:] << 4)).astype(np.uint8)


def _qh(q):
    """fifth bits of q (..., 32) -> (..., 4) bytes of a little-endian u32."""
    bits = ((q >> 4) & 1).astype(np.uint64)
    word = (bits << np.arange(32, dtype=np.uint64)).sum(axis=-1)
    return np.stack([(word >> (8 * k)) & 0xFF for k in range(4)], axis=-1).astype(np.uint8)


def q4_0(a):
    x = np.asarray(a, dtype=np.float64).reshape(-1, 32)
    idx = np.abs(x).argmax(axis=1)
    mx = x[np.arange(len(x)), idx]
    d = _f16(mx / -8)
    q = np.clip(np.floor(_safe_div(x, d.astype(np.float64)[:, None]) + 8.5), 0, 15).astype(np.int64)
    return np.concatenate([d[:, None].view(np.uint8), _nibbles(q)], axis=1).tobytes()


def _affine(a, levels):
    x = np.asarray(a, dtype=np.float64).reshape(-1, 32)
    mn, mx = x.min(axis=1), x.max(axis=1)
    d, m = _f16((mx - mn) / levels), _f16(mn)
    q = np.clip(np.rint(_safe_div(x - m.astype(np.float64)[:, None], d.astype(np.float64)[:, None])), 0, levels)
    return x, d, m, q.astype(np.int64)


def q4_1(a):
    x, d, m, q = _affine(a, 15)
    return np.concatenate([d[:, None].view(np.uint8), m[:, None].view(np.uint8), _nibbles(q)], axis=1).tobytes()


def q5_0(a):
    x = np.asarray(a, dtype=np.float64).reshape(-1, 32)
    idx = np.abs(x).argmax(axis=1)
    mx = x[np.arange(len(x)), idx]
    d = _f16(mx / -16)
    q = np.clip(np.floor(_safe_div(x, d.astype(np.float64)[:, None]) + 16.5), 0, 31).astype(np.int64)
    return np.concatenate([d[:, None].view(np.uint8), _qh(q), _nibbles(q & 15)], axis=1).tobytes()


def q5_1(a):
    x, d, m, q = _affine(a, 31)
    return np.concatenate([d[:, None].view(np.uint8), m[:, None].view(np.uint8), _qh(q), _nibbles(q & 15)],
                          axis=1).tobytes()


def _k_blocks(a):
    return np.asarray(a, dtype=np.float64).reshape(-1, 256)


def q2_k(a):
    out = []
    for x in _k_blocks(a):
        s = x.reshape(16, 16)
        mn = -np.minimum(s.min(axis=1), 0)
        sc = (s.max(axis=1) + mn) / 3
        d, dmin = _f16(sc.max() / 15), _f16(mn.max() / 15)
        isc = np.clip(np.rint(_safe_div(sc, float(d))), 0, 15).astype(np.int64)
        imn = np.clip(np.rint(_safe_div(mn, float(dmin))), 0, 15).astype(np.int64)
        dl, ml = float(d) * isc, float(dmin) * imn
        q = np.clip(np.rint(_safe_div(s + ml[:, None], dl[:, None])), 0, 3).astype(np.int64).reshape(256)
        qs = np.zeros(64, dtype=np.int64)
        for h in range(2):
            for j in range(4):
                qs[32 * h:32 * h + 32] |= q[128 * h + 32 * j:128 * h + 32 * j + 32] << (2 * j)
        out.append(np.concatenate([(isc | imn << 4).astype(np.uint8), qs.astype(np.uint8),
                                   np.array([d, dmin]).view(np.uint8)]))
    return b"".join(o.tobytes() for o in out)


def q3_k(a):
    out = []
    for x in _k_blocks(a):
        s = x.reshape(16, 16)
        idx = np.abs(s).argmax(axis=1)
        sc = s[np.arange(16), idx] / -4
        d = _f16(np.abs(sc).max() / 31)
        isc = np.clip(np.rint(_safe_div(sc, float(d))), -32, 31).astype(np.int64)
        dl = float(d) * isc
        q = np.clip(np.rint(_safe_div(s, dl[:, None])), -4, 3).astype(np.int64).reshape(256)
        low = np.where(q >= 0, q, q + 4)
        hbit = (q >= 0).astype(np.int64)
        qs = np.zeros(64, dtype=np.int64)
        hm = np.zeros(32, dtype=np.int64)
        for h in range(2):
            for j in range(4):
                seg = slice(128 * h + 32 * j, 128 * h + 32 * j + 32)
                qs[32 * h:32 * h + 32] |= low[seg] << (2 * j)
                hm |= hbit[seg] << (4 * h + j)
        u = isc + 32
        sb = np.zeros(12, dtype=np.int64)
        for k in range(16):
            sb[k if k < 8 else k - 8] |= (u[k] & 15) << (0 if k < 8 else 4)
            sb[8 + k % 4] |= (u[k] >> 4) << (2 * (k // 4))
        out.append(np.concatenate([hm.astype(np.uint8), qs.astype(np.uint8), sb.astype(np.uint8),
                                   np.array([d]).view(np.uint8)]))
    return b"".join(o.tobytes() for o in out)


def _pack_k4(isc, imn):
    sb = np.zeros(12, dtype=np.int64)
    for s in range(8):
        if s < 4:
            sb[s] |= isc[s]
            sb[s + 4] |= imn[s]
        else:
            sb[s + 4] |= (isc[s] & 15) | (imn[s] & 15) << 4
            sb[s - 4] |= (isc[s] >> 4) << 6
            sb[s] |= (imn[s] >> 4) << 6
    return sb.astype(np.uint8)


def _q45_k(a, five):
    levels = 31 if five else 15
    out = []
    for x in _k_blocks(a):
        s = x.reshape(8, 32)
        mn = -np.minimum(s.min(axis=1), 0)
        sc = (s.max(axis=1) + mn) / levels
        d, dmin = _f16(sc.max() / 63), _f16(mn.max() / 63)
        isc = np.clip(np.rint(_safe_div(sc, float(d))), 0, 63).astype(np.int64)
        imn = np.clip(np.rint(_safe_div(mn, float(dmin))), 0, 63).astype(np.int64)
        dl, ml = float(d) * isc, float(dmin) * imn
        q = np.clip(np.rint(_safe_div(s + ml[:, None], dl[:, None])), 0, levels).astype(np.int64).reshape(256)
        qs = np.zeros(128, dtype=np.int64)
        qh = np.zeros(32, dtype=np.int64)
        for p in range(4):
            for k in range(2):
                seg = q[64 * p + 32 * k:64 * p + 32 * k + 32]
                qs[32 * p:32 * p + 32] |= (seg & 15) << (4 * k)
                qh |= ((seg >> 4) & 1) << (2 * p + k)
        parts = [np.array([d, dmin]).view(np.uint8), _pack_k4(isc, imn)]
        if five:
            parts.append(qh.astype(np.uint8))
        parts.append(qs.astype(np.uint8))
        out.append(np.concatenate(parts))
    return b"".join(o.tobytes() for o in out)


def q4_k(a):
    return _q45_k(a, False)


def q5_k(a):
    return _q45_k(a, True)


def q6_k(a):
    out = []
    for x in _k_blocks(a):
        s = x.reshape(16, 16)
        idx = np.abs(s).argmax(axis=1)
        sc = s[np.arange(16), idx] / -32
        d = _f16(np.abs(sc).max() / 127)
        isc = np.clip(np.rint(_safe_div(sc, float(d))), -127, 127).astype(np.int64)
        dl = float(d) * isc
        q = (np.clip(np.rint(_safe_div(s, dl[:, None])), -32, 31).astype(np.int64) + 32).reshape(256)
        ql = np.zeros(128, dtype=np.int64)
        qh = np.zeros(64, dtype=np.int64)
        for h in range(2):
            for c in range(4):
                seg = q[128 * h + 32 * c:128 * h + 32 * c + 32]
                lo = 64 * h + 32 * (c & 1)
                ql[lo:lo + 32] |= (seg & 15) << (0 if c < 2 else 4)
                qh[32 * h:32 * h + 32] |= (seg >> 4) << (2 * c)
        out.append(np.concatenate([ql.astype(np.uint8), qh.astype(np.uint8), isc.astype(np.int8).view(np.uint8),
                                   np.array([d]).view(np.uint8)]))
    return b"".join(o.tobytes() for o in out)


_IQ4 = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float64)


def _iq4_codes(x, scale):
    """nearest of the 16 levels to x / scale, per value (scale 0: code of level 1)."""
    t = _safe_div(x, scale)
    return np.abs(t[..., None] - _IQ4).argmin(axis=-1).astype(np.int64)


def iq4_nl(a):
    x = np.asarray(a, dtype=np.float64).reshape(-1, 32)
    idx = np.abs(x).argmax(axis=1)
    mx = x[np.arange(len(x)), idx]
    d = _f16(mx / -127)
    q = _iq4_codes(x, d.astype(np.float64)[:, None])
    return np.concatenate([d[:, None].view(np.uint8), _nibbles(q)], axis=1).tobytes()


def iq4_xs(a):
    out = []
    for x in _k_blocks(a):
        s = x.reshape(8, 32)
        idx = np.abs(s).argmax(axis=1)
        sc = s[np.arange(8), idx] / -127
        d = _f16(np.abs(sc).max() / 31)
        ls = np.clip(np.rint(_safe_div(sc, float(d))), -32, 31).astype(np.int64) + 32
        q = _iq4_codes(s, (float(d) * (ls - 32))[:, None])
        sh = int(sum(((int(ls[b]) >> 4) & 3) << (2 * b) for b in range(8)))
        sl = [(ls[2 * k] & 15) | (ls[2 * k + 1] & 15) << 4 for k in range(4)]
        qs = np.concatenate([_nibbles(q[b]) for b in range(8)])
        out.append(np.concatenate([np.array([d]).view(np.uint8), np.array([sh], dtype="<u2").view(np.uint8),
                                   np.array(sl, dtype=np.uint8), qs]))
    return b"".join(o.tobytes() for o in out)


# ggml type id -> encoder
ENCODERS = {2: q4_0, 3: q4_1, 6: q5_0, 7: q5_1, 10: q2_k, 11: q3_k, 12: q4_k, 13: q5_k, 14: q6_k, 20: iq4_nl,
            23: iq4_xs}
NAMES = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q2_K": 10, "q3_K": 11, "q4_K": 12, "q5_K": 13, "q6_K": 14,
         "iq4_nl": 20, "iq4_xs": 23}
