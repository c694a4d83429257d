#!/usr/bin/python3
"""ggml's quantizers (llama-quantize without an importance matrix) in numpy, for checking
flashgate-quantize's bytes.  Written from ggml-quants.c's algorithms (quantize_row_*_ref;
quantize_iq4_nl / quantize_iq4_xs with 7 scale tries), not from the engine's C.

Every block type works on a batch of blocks at once: array operations are exact per element
in float32, and every sum that ggml accumulates in a loop is accumulated here in the same
order (np.add.accumulate, sequential, in float32).  numpy 1.x promotes float32 scalars mixed
with Python numbers to float64, so every value here is a float32 *array* and every constant
goes through F().

quantize(type_name, x) -> bytes, x a float32 array whose length is a multiple of the block.
"""

import numpy as np

F32 = np.float32
EPS = F32(1e-15)
IQ4 = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int32)


def F(v):
    return np.asarray(v, dtype=F32)


def chk(a):
    assert a.dtype == F32, a.dtype
    return a


def seqsum(t, start=None):
    """sum over the last axis in order, float32: start (default +0) + t0 + t1 + ..."""
    t = chk(F(t))
    s = np.zeros(t.shape[:-1] + (1,), dtype=F32) if start is None else chk(F(start))[..., None]
    return np.add.accumulate(np.concatenate([s, t], axis=-1), axis=-1, dtype=F32)[..., -1]


def nearest_int(f):
    """ggml's nearest_int: add 1.5 * 2^23 in float32, read the low mantissa bits."""
    v = chk(F(f)) + F(12582912.0)
    return (chk(v).view(np.int32) & 0x7FFFFF) - 0x400000


def f16_bits(v):
    return chk(F(v)).astype(np.float16).view(np.uint16)


def f16_round(v):
    return chk(F(v)).astype(np.float16).astype(F32)


def le16(bits):
    bits = np.asarray(bits, dtype=np.uint16)
    return np.stack([bits & 0xFF, bits >> 8], axis=-1).astype(np.uint8)


def signed_max(x):
    """ggml's scan `if (|x_i| > amax) { amax = |x_i|; max = x_i; }` from amax = max = 0."""
    ax = np.abs(x)
    idx = np.argmax(ax, axis=-1)  # first occurrence, as the strict > keeps
    amax = np.take_along_axis(ax, idx[..., None], -1)[..., 0]
    mx = np.take_along_axis(x, idx[..., None], -1)[..., 0]
    mx = np.where(amax > 0, mx, F(0))
    return chk(F(amax)), chk(F(mx))


def safe_inv(d):
    return np.where(d != 0, F(1) / np.where(d != 0, d, F(1)), F(0)).astype(F32)


def trunc_int(v):
    return np.trunc(chk(v)).astype(np.int64)


# ---------------------------------------------------------------- legacy, 32 values

def nibbles(lo, hi):
    return (np.asarray(lo, np.int64) | (np.asarray(hi, np.int64) << 4)).astype(np.uint8)


def fifth_bits(q):
    """q (B, 32) codes -> qh u32 LE bytes: bit j of value j's bit 4."""
    b = ((q >> 4) & 1).astype(np.uint64)
    word = np.zeros(q.shape[0], dtype=np.uint64)
    for j in range(32):
        word |= b[:, j] << np.uint64(j)
    return np.stack([(word >> np.uint64(8 * k)) & np.uint64(0xFF) for k in range(4)], axis=-1).astype(np.uint8)


def q4_0(x):
    amax, mx = signed_max(x)
    d = mx / F(-8)
    idv = safe_inv(d)
    q = np.minimum(15, trunc_int(x * idv[:, None] + F(8.5)))
    return np.concatenate([le16(f16_bits(d)), nibbles(q[:, :16], q[:, 16:])], axis=1)


def q5_0(x):
    amax, mx = signed_max(x)
    d = mx / F(-16)
    idv = safe_inv(d)
    q = np.minimum(31, trunc_int(x * idv[:, None] + F(16.5)))
    return np.concatenate([le16(f16_bits(d)), fifth_bits(q), nibbles(q[:, :16] & 15, q[:, 16:] & 15)], axis=1)


def affine(x, levels):
    mn = x.min(axis=1)
    mx = x.max(axis=1)
    d = (mx - mn) / F(levels)
    idv = safe_inv(d)
    v = (x - mn[:, None]) * idv[:, None] + F(0.5)
    return mn, d, v


def q4_1(x):
    mn, d, v = affine(x, 15)
    q = np.minimum(15, trunc_int(v))
    return np.concatenate([le16(f16_bits(d)), le16(f16_bits(mn)), nibbles(q[:, :16], q[:, 16:])], axis=1)


def q5_1(x):
    mn, d, v = affine(x, 31)
    q = trunc_int(v) & 0xFF
    return np.concatenate([le16(f16_bits(d)), le16(f16_bits(mn)), fifth_bits(q),
                           nibbles(q[:, :16] & 15, q[:, 16:] & 15)], axis=1)


def q8_0(x):
    amax = np.abs(x).max(axis=1)
    d = amax / F(127)
    idv = safe_inv(d)
    v = x * idv[:, None]
    r = np.trunc(v)  # roundf: half away from zero (v - trunc(v) is exact here)
    q = r + np.where(np.abs(v - r) >= F(0.5), np.sign(v), F(0))
    return np.concatenate([le16(f16_bits(d)), q.astype(np.int8).view(np.uint8)], axis=1)


# ---------------------------------------------------------------- the searches

def make_qx(x, nmax):
    """rmse type 1 (weights x^2), no importance weights: (scale (B,), codes (B, n) in [0, 2 nmax))."""
    amax, mx = signed_max(x)
    zero = amax < EPS
    mx_s = np.where(zero, F(1), mx)
    w = x * x

    def codes(iscale):
        return np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1)

    def fit(l):
        lf = F(l)
        return seqsum(w * x * lf), seqsum(w * lf * lf)

    iscale = F(-nmax) / mx_s
    L = codes(iscale)
    sumlx, suml2 = fit(L)
    scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, F(1)), F(0)).astype(F32)
    best = scale * sumlx
    for i in range(-9, 10):
        if i == 0:
            continue
        iscale = -(F(nmax) + F(0.1) * F(i)) / mx_s
        l = codes(iscale)
        slx, sl2 = fit(l)
        take = (sl2 > 0) & (slx * slx > best * sl2)
        L = np.where(take[:, None], l, L)
        sc = slx / np.where(take, sl2, F(1))
        scale = np.where(take, sc, scale).astype(F32)
        best = np.where(take, sc * slx, best).astype(F32)
    scale = np.where(zero, F(0), scale).astype(F32)
    L = np.where(zero[:, None], 0, L + nmax)
    return scale, L


def make_q3(x, nmax):
    """Q3_K's sub-block search with its 5 passes of single-code moves (per block, in order)."""
    amax, mx = signed_max(x)
    B, n = x.shape
    scales = np.zeros(B, dtype=F32)
    Ls = np.zeros((B, n), dtype=np.int64)
    for b in range(B):
        if amax[b] < EPS:
            continue
        xb = x[b:b + 1]
        iscale = F(-nmax) / mx[b:b + 1]
        L = np.clip(nearest_int(iscale[:, None] * xb), -nmax, nmax - 1)[0].copy()
        w = (xb * xb)[0]
        xv = xb[0]
        sumlx = seqsum((w * xv * F(L))[None])
        suml2 = seqsum((w * F(L) * F(L))[None])
        for _ in range(5):
            changed = 0
            for i in range(n):
                wi, xi, li = w[i:i + 1], xv[i:i + 1], F(L[i:i + 1])
                slx = sumlx - wi * xi * li
                if slx[0] > 0:
                    sl2 = suml2 - wi * li * li
                    new_l = int(np.clip(nearest_int(xi * sl2 / slx), -nmax, nmax - 1)[0])
                    if new_l != L[i]:
                        nl = F([new_l])
                        slx = slx + wi * xi * nl
                        sl2 = sl2 + wi * nl * nl
                        if sl2[0] > 0 and (slx * slx * suml2)[0] > (sumlx * sumlx * sl2)[0]:
                            L[i] = new_l
                            sumlx, suml2 = slx, sl2
                            changed += 1
            if not changed:
                break
        Ls[b] = L + nmax
        scales[b] = (sumlx / suml2)[0] if suml2[0] > 0 else F(0)
    return scales, Ls


def make_qkx2(x, weights, nmax, rmin, rdelta, nstep, use_mad):
    """Affine codes in [0, nmax] with min <= 0: (scale, -min, codes), vectorized over sub-blocks."""
    B, n = x.shape
    mn = np.minimum(x.min(axis=1), F(0))
    mx = x.max(axis=1)
    sum_w = seqsum(weights[:, 1:], weights[:, 0])
    sum_x = seqsum(weights[:, 1:] * x[:, 1:], weights[:, 0] * x[:, 0])
    flat = mx == mn
    rng = np.where(flat, F(1), mx - mn)

    def err(scale, minv, l):
        diff = scale[:, None] * F(l) + minv[:, None] - x
        diff = np.abs(diff) if use_mad else diff * diff
        return seqsum(weights * diff)

    iscale = F(nmax) / rng
    scale = F(1) / iscale
    L = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax)
    best = err(scale, mn, L)
    minv = mn.copy()
    for i in range(nstep + 1):
        # ggml's loop reads the best minimum so far, in the range and in the codes
        rng = np.where(flat, F(1), mx - minv)
        iscale = (F(rmin) + F(rdelta) * F(i) + F(nmax)) / rng
        l = np.clip(nearest_int(iscale[:, None] * (x - minv[:, None])), 0, nmax)
        lf = F(l)
        sum_l = seqsum(weights * lf)
        sum_l2 = seqsum(weights * lf * lf)
        sum_xl = seqsum(weights * lf * x)
        D = sum_w * sum_l2 - sum_l * sum_l
        ok = D > 0
        Ds = np.where(ok, D, F(1))
        ts = (sum_w * sum_xl - sum_x * sum_l) / Ds
        tm = (sum_l2 * sum_x - sum_l * sum_xl) / Ds
        pos = tm > 0
        tm = np.where(pos, F(0), tm).astype(F32)
        ts = np.where(pos, sum_xl / np.where(pos, sum_l2, F(1)), ts).astype(F32)
        cur = err(ts, tm, l)
        take = ok & (cur < best)
        L = np.where(take[:, None], l, L)
        best = np.where(take, cur, best).astype(F32)
        scale = np.where(take, ts, scale).astype(F32)
        minv = np.where(take, tm, minv).astype(F32)
    scale = np.where(flat, F(0), scale).astype(F32)
    L = np.where(flat[:, None], 0, L)
    minv = np.where(flat, mn, minv).astype(F32)
    return scale, -minv, L


def pack2(L):
    """(B, 256) 2-bit codes -> (B, 64): byte 32h + l holds values 128h + l + 32k at bits 2k."""
    out = np.zeros((L.shape[0], 64), dtype=np.int64)
    for h in range(2):
        for k in range(4):
            out[:, 32 * h:32 * h + 32] |= L[:, 128 * h + 32 * k:128 * h + 32 * k + 32] << (2 * k)
    return out.astype(np.uint8)


def recode(x, d, offset, lo, hi):
    """codes nearest_int((x + offset) / d) clamped, where d != 0 (else None)."""
    ok = d != 0
    q = np.clip(nearest_int((x + offset[..., None]) / np.where(ok, d, F(1))[..., None]), lo, hi)
    return ok, q


# ---------------------------------------------------------------- K types, 256 values

def q2_k(x):
    B = x.shape[0]
    xs = x.reshape(B * 16, 16)
    scales, mins, L = make_qkx2(xs, np.abs(xs), 3, -0.5, 0.1, 15, True)
    scales, mins, L = scales.reshape(B, 16), mins.reshape(B, 16), L.reshape(B, 16, 16)
    max_scale = np.maximum(scales.max(axis=1), F(0))
    max_min = np.maximum(mins.max(axis=1), F(0))
    has_s, has_m = max_scale > 0, max_min > 0
    ls = np.where(has_s[:, None], nearest_int((F(15) / np.where(has_s, max_scale, F(1)))[:, None] * scales), 0)
    lm = np.where(has_m[:, None], nearest_int((F(15) / np.where(has_m, max_min, F(1)))[:, None] * mins), 0)
    sc = ((ls & 0xFF) | ((lm << 4) & 0xFF)) & 0xFF
    d = np.where(has_s, max_scale / F(15), F(0)).astype(F32)
    dmin = np.where(has_m, max_min / F(15), F(0)).astype(F32)
    dl = f16_round(d)[:, None] * F(sc & 15)
    ml = f16_round(dmin)[:, None] * F(sc >> 4)
    ok, q = recode(x.reshape(B, 16, 16), dl, ml, 0, 3)
    L = np.where(ok[..., None], q, L).reshape(B, 256)
    return np.concatenate([sc.astype(np.uint8), pack2(L), le16(f16_bits(d)), le16(f16_bits(dmin))], axis=1)


def q3_k(x):
    B = x.shape[0]
    scales, L = make_q3(x.reshape(B * 16, 16), 4)
    scales, L = scales.reshape(B, 16), L.reshape(B, 16, 16)
    amax, max_scale = signed_max(scales)
    has = max_scale != 0
    iscale = F(-32) / np.where(has, max_scale, F(1))
    l = nearest_int(iscale[:, None] * scales)
    l = ((l + 128) & 0xFF) - 128  # ggml keeps it in an int8
    l = np.where(has[:, None], np.clip(l, -32, 31) + 32, 0)
    s12 = np.zeros((B, 12), dtype=np.int64)
    for j in range(16):
        if j < 8:
            s12[:, j] = np.where(has, l[:, j] & 15, 0)
        else:
            s12[:, j - 8] |= np.where(has, (l[:, j] & 15) << 4, 0)
        s12[:, j % 4 + 8] |= np.where(has, (l[:, j] >> 4) << (2 * (j // 4)), 0)
    d = np.where(has, F(1) / iscale, F(0)).astype(F32)
    sc6 = np.zeros((B, 16), dtype=np.int64)
    for j in range(16):
        low = s12[:, j] & 15 if j < 8 else s12[:, j - 8] >> 4
        sc6[:, j] = (low | (((s12[:, 8 + j % 4] >> (2 * (j // 4))) & 3) << 4)) - 32
    dl = f16_round(d)[:, None] * F(sc6)
    ok, q = recode(x.reshape(B, 16, 16), dl, np.zeros((B, 16), F32), -4, 3)
    L = np.where(ok[..., None], q + 4, L).reshape(B, 256)
    hmask = np.zeros((B, 32), dtype=np.int64)
    for j in range(256):
        hi = L[:, j] > 3
        hmask[:, j % 32] |= np.where(hi, 1 << (j // 32), 0)
        L[:, j] = np.where(hi, L[:, j] - 4, L[:, j])
    return np.concatenate([hmask.astype(np.uint8), pack2(L), s12.astype(np.uint8), le16(f16_bits(d))], axis=1)


def k4_scales(x, nmax, rmin, nstep):
    """Q4_K / Q5_K: the d, dmin, 12 scale bytes and the codes (B, 256)."""
    B = x.shape[0]
    xs = x.reshape(B * 8, 32)
    av = np.sqrt(seqsum(xs * xs) / F(32))
    scales, mins, L = make_qkx2(xs, av[:, None] + np.abs(xs), nmax, rmin, 0.1, nstep, False)
    scales, mins, L = scales.reshape(B, 8), mins.reshape(B, 8), L.reshape(B, 8, 32)
    max_scale = np.maximum(scales.max(axis=1), F(0))
    max_min = np.maximum(mins.max(axis=1), F(0))
    inv_s = np.where(max_scale > 0, F(63) / np.where(max_scale > 0, max_scale, F(1)), F(0)).astype(F32)
    inv_m = np.where(max_min > 0, F(63) / np.where(max_min > 0, max_min, F(1)), F(0)).astype(F32)
    ls = np.minimum(63, nearest_int(inv_s[:, None] * scales) & 0xFF)
    lm = np.minimum(63, nearest_int(inv_m[:, None] * mins) & 0xFF)
    s12 = np.zeros((B, 12), dtype=np.int64)
    for j in range(8):
        if j < 4:
            s12[:, j] = ls[:, j]
            s12[:, j + 4] = lm[:, j]
        else:
            s12[:, j + 4] = (ls[:, j] & 15) | ((lm[:, j] & 15) << 4)
            s12[:, j - 4] |= (ls[:, j] >> 4) << 6
            s12[:, j] |= (lm[:, j] >> 4) << 6
    d, dmin = max_scale / F(63), max_min / F(63)
    sc = np.zeros((B, 8), np.int64)
    mn = np.zeros((B, 8), np.int64)
    for j in range(8):
        if j < 4:
            sc[:, j], mn[:, j] = s12[:, j] & 63, s12[:, j + 4] & 63
        else:
            sc[:, j] = (s12[:, j + 4] & 15) | ((s12[:, j - 4] >> 6) << 4)
            mn[:, j] = (s12[:, j + 4] >> 4) | ((s12[:, j] >> 6) << 4)
    dl = f16_round(d)[:, None] * F(sc)
    ml = f16_round(dmin)[:, None] * F(mn)
    ok, q = recode(x.reshape(B, 8, 32), dl, ml, 0, nmax)
    L = np.where(ok[..., None], q, L).reshape(B, 256)
    return np.concatenate([le16(f16_bits(d)), le16(f16_bits(dmin)), s12.astype(np.uint8)], axis=1), L


def q4_k(x):
    head, L = k4_scales(x, 15, -1.0, 20)
    qs = np.concatenate([L[:, 64 * p:64 * p + 32] | (L[:, 64 * p + 32:64 * p + 64] << 4) for p in range(4)], axis=1)
    return np.concatenate([head, qs.astype(np.uint8)], axis=1)


def q5_k(x):
    head, L = k4_scales(x, 31, -0.5, 15)
    qh = np.zeros((x.shape[0], 32), dtype=np.int64)
    ql = []
    for p in range(4):
        a, b = L[:, 64 * p:64 * p + 32], L[:, 64 * p + 32:64 * p + 64]
        qh |= ((a >> 4) & 1) << (2 * p)
        qh |= ((b >> 4) & 1) << (2 * p + 1)
        ql.append((a & 15) | ((b & 15) << 4))
    return np.concatenate([head, qh.astype(np.uint8), np.concatenate(ql, axis=1).astype(np.uint8)], axis=1)


def q6_k(x):
    B = x.shape[0]
    scales, L = make_qx(x.reshape(B * 16, 16), 32)
    scales, L = scales.reshape(B, 16), L.reshape(B, 16, 16)
    amax, max_scale = signed_max(scales)
    zero = amax < EPS
    iscale = F(-128) / np.where(zero, F(1), max_scale)
    d = F(1) / iscale
    sc = np.minimum(127, nearest_int(iscale[:, None] * scales))
    dl = f16_round(d)[:, None] * F(sc)
    ok, q = recode(x.reshape(B, 16, 16), dl, np.zeros((B, 16), F32), -32, 31)
    L = np.where(ok[..., None], q + 32, L).reshape(B, 256)
    ql = np.zeros((B, 128), np.int64)
    qh = np.zeros((B, 64), np.int64)
    for h in range(2):
        c = [L[:, 128 * h + 32 * k:128 * h + 32 * k + 32] for k in range(4)]
        ql[:, 64 * h:64 * h + 32] = (c[0] & 15) | ((c[2] & 15) << 4)
        ql[:, 64 * h + 32:64 * h + 64] = (c[1] & 15) | ((c[3] & 15) << 4)
        qh[:, 32 * h:32 * h + 32] = (c[0] >> 4) | ((c[1] >> 4) << 2) | ((c[2] >> 4) << 4) | ((c[3] >> 4) << 6)
    out = np.concatenate([ql.astype(np.uint8), qh.astype(np.uint8), sc.astype(np.int8).view(np.uint8),
                          le16(f16_bits(d))], axis=1)
    out[zero] = 0
    return out


# ---------------------------------------------------------------- IQ4 (non-linear levels)

def iq4_index(v):
    """the level whose neighbours' midpoints bracket v, ties upward (2v against level sums)."""
    v2 = chk(F(v)) + chk(F(v))
    mids = F(IQ4[:-1] + IQ4[1:])  # 2 x midpoints, exact
    return (v2[..., None] >= mids).sum(axis=-1)


def iq4_sub(xb):
    """(B, 32) -> the sub-blocks' scales (7 tries each side), weights x^2."""
    amax, mx = signed_max(xb)
    zero = amax < EPS
    mxs = np.where(zero, F(1), mx)
    w = xb * xb
    lv = F(IQ4)

    def fit(idv):
        q = lv[iq4_index(idv[:, None] * xb)]
        return seqsum(w * q * xb), seqsum(w * q * q)

    d = -mxs / F(IQ4[0])
    sumqx, sumq2 = fit(F(1) / d)
    d = np.where(sumq2 > 0, sumqx / np.where(sumq2 > 0, sumq2, F(1)), F(0)).astype(F32)
    best = d * sumqx
    for t in range(-7, 8):
        sx, s2 = fit(F(t + IQ4[0]) / mxs)
        take = (s2 > 0) & (sx * sx > best * s2)
        dn = sx / np.where(take, s2, F(1))
        d = np.where(take, dn, d).astype(F32)
        best = np.where(take, dn * sx, best).astype(F32)
    return np.where(zero, F(0), d).astype(F32)


def iq4_pack(L):
    B, n = L.shape
    g = L.reshape(B, n // 32, 32)
    return (g[:, :, :16] | (g[:, :, 16:] << 4)).reshape(B, n // 2).astype(np.uint8)


def iq4_nl(x):
    s = iq4_sub(x)
    L = iq4_index(safe_inv(s)[:, None] * x)
    return np.concatenate([le16(f16_bits(s)), iq4_pack(L)], axis=1)


def iq4_xs(x):
    B = x.shape[0]
    scales = iq4_sub(x.reshape(B * 8, 32)).reshape(B, 8)
    amax, max_scale = signed_max(scales)
    d = -max_scale / F(32)
    idv = safe_inv(d)
    l = np.clip(nearest_int(idv[:, None] * scales), -32, 31)
    dl = d[:, None] * F(l)
    L = iq4_index(safe_inv(dl)[..., None] * x.reshape(B, 8, 32)).reshape(B, 256)
    l = l + 32
    sl = np.stack([(l[:, 2 * k] & 15) | ((l[:, 2 * k + 1] & 15) << 4) for k in range(4)], axis=1)
    sh = np.zeros(B, dtype=np.int64)
    for ib in range(8):
        sh |= (l[:, ib] >> 4) << (2 * ib)
    return np.concatenate([le16(f16_bits(d)), le16(sh), sl.astype(np.uint8), iq4_pack(L)], axis=1)


TYPES = {  # name: (ggml id, block values, block bytes, function)
    "q4_0": (2, 32, 18, q4_0), "q4_1": (3, 32, 20, q4_1), "q5_0": (6, 32, 22, q5_0),
    "q5_1": (7, 32, 24, q5_1), "q8_0": (8, 32, 34, q8_0), "q2_k": (10, 256, 84, q2_k),
    "q3_k": (11, 256, 110, q3_k), "q4_k": (12, 256, 144, q4_k), "q5_k": (13, 256, 176, q5_k),
    "q6_k": (14, 256, 210, q6_k), "iq4_nl": (20, 32, 18, iq4_nl), "iq4_xs": (23, 256, 136, iq4_xs),
}


def quantize(name, x):
    gid, qk, nbytes, fn = TYPES[name]
    x = chk(F(x)).reshape(-1, qk)
    out = fn(x)
    assert out.shape == (x.shape[0], nbytes), (name, out.shape)
    return out.astype(np.uint8).tobytes()


MXFP4_LEVELS = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int32)


def mxfp4(x):
    """e = floor(log2 amax) - 2 + 127 (0 for an all-zero block); each value to the first of
    the 16 levels (times 2^(e - 128)) at the least distance."""
    amax = np.abs(x).max(axis=1)
    pos = amax > 0
    e = np.where(pos, np.floor(np.log2(np.where(pos, amax, F(1)))) - 2 + 127, 0).astype(np.int64)
    d = np.ldexp(F(1), e - 128).astype(F32)
    err = np.abs(F(MXFP4_LEVELS)[None, None, :] * d[:, None, None] - x[..., None])
    q = np.argmin(err, axis=-1)  # first minimum, as ggml's strict < keeps
    return np.concatenate([e.astype(np.uint8)[:, None], nibbles(q[:, :16], q[:, 16:])], axis=1)


TYPES["mxfp4"] = (39, 32, 17, mxfp4)
