#!/usr/bin/python3
"""Writes tests/unit/data/quant_vectors.h: hand-built blocks of ggml's legacy, K-quant and
IQ types and their values, computed here from the formats' definitions (ggml-common.h's block
layouts, ggml-quants.c's dequantization), independently of the engine's C code.

Usage: quant_vectors.py OUT.h

Each type gets two blocks: one whose bytes count up (every field's low and high codes in
known places) and one from a fixed xorshift stream; the F16 fields are set to chosen finite
values (a power of two, a value with a full mantissa, a negative one), so the f32 arithmetic
of the definition is exercised.  Values are f32 as ggml computes them, each operation rounded
to f32 in the order the definition writes it; they are written as bit patterns.

The lattice IQ types index grids that are format data, not arithmetic: they are read from
kernels/cpu/iq_grids.h (the definition's tables, extracted from ggml-common.h by
iq_grids_extract.py); everything done with them here is written from ggml-quants.c.
"""

import os
import re
import struct
import sys

import numpy as np

f32 = np.float32


def f16_bytes(x):
    return np.array([x], dtype="<f2").tobytes()


def f16(b, off):
    return f32(np.frombuffer(b[off:off + 2], dtype="<f2")[0])


def u32(b, off):
    return struct.unpack_from("<I", b, off)[0]


def q4_0(b):
    d = f16(b, 0)
    qs = b[2:18]
    y = [None] * 32
    for j in range(16):
        y[j] = f32((qs[j] & 15) - 8) * d
        y[j + 16] = f32((qs[j] >> 4) - 8) * d
    return y


def q4_1(b):
    d, m = f16(b, 0), f16(b, 2)
    qs = b[4:20]
    y = [None] * 32
    for j in range(16):
        y[j] = f32(qs[j] & 15) * d + m
        y[j + 16] = f32(qs[j] >> 4) * d + m
    return y


def q5(b, has_min):
    d = f16(b, 0)
    m = f16(b, 2) if has_min else None
    off = 4 if has_min else 2
    qh = u32(b, off)
    qs = b[off + 4:off + 20]
    y = [None] * 32
    for j in range(16):
        lo = (qs[j] & 15) | (((qh >> j) & 1) << 4)
        hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)
        if has_min:
            y[j], y[j + 16] = f32(lo) * d + m, f32(hi) * d + m
        else:
            y[j], y[j + 16] = f32(lo - 16) * d, f32(hi - 16) * d
    return y


def q2_k(b):
    scales, qs = b[0:16], b[16:80]
    d, dmin = f16(b, 80), f16(b, 82)
    y = []
    is_ = 0
    for n in range(2):                      # ggml's loop: two halves of 128
        q = qs[32 * n:32 * n + 32]
        for shift in (0, 2, 4, 6):
            for half in range(2):
                sc = scales[is_]
                is_ += 1
                dl, ml = d * f32(sc & 15), dmin * f32(sc >> 4)
                for l in range(16):
                    y.append(dl * f32((q[16 * half + l] >> shift) & 3) - ml)
    return y


def q3_k(b):
    hm, qs, sb = b[0:32], b[32:96], b[96:108]
    d = f16(b, 108)
    # ggml's unpacking of the 12 scale bytes through four 32-bit words
    aux = list(struct.unpack("<3I", sb)) + [0]
    tmp = aux[2]
    k1, k2 = 0x03030303, 0x0F0F0F0F
    aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4)
    aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4)
    aux[0] = (aux[0] & k2) | (((tmp >> 0) & k1) << 4)
    aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4)
    scales = np.frombuffer(struct.pack("<4I", *aux), dtype=np.int8)
    y = []
    is_, m = 0, 1
    for n in range(2):
        q = qs[32 * n:32 * n + 32]
        for shift in (0, 2, 4, 6):
            for half in range(2):
                dl = d * f32(int(scales[is_]) - 32)
                is_ += 1
                for l in range(16):
                    i = 16 * half + l
                    y.append(dl * f32(((q[i] >> shift) & 3) - (0 if hm[i] & m else 4)))
            m <<= 1
    return y


def scale_min_k4(j, q):
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def q45_k(b, five):
    d, dmin = f16(b, 0), f16(b, 2)
    sc = b[4:16]
    qh = b[16:48] if five else None
    ql = b[48:176] if five else b[16:144]
    y = []
    u1, u2 = 1, 2
    for j in range(4):
        q = ql[32 * j:32 * j + 32]
        s1, m1 = scale_min_k4(2 * j, sc)
        s2, m2 = scale_min_k4(2 * j + 1, sc)
        d1, mm1, d2, mm2 = d * f32(s1), dmin * f32(m1), d * f32(s2), dmin * f32(m2)
        for l in range(32):
            v = (q[l] & 15) + (16 if five and qh[l] & u1 else 0)
            y.append(d1 * f32(v) - mm1)
        for l in range(32):
            v = (q[l] >> 4) + (16 if five and qh[l] & u2 else 0)
            y.append(d2 * f32(v) - mm2)
        u1 <<= 2
        u2 <<= 2
    return y


def q6_k(b):
    ql, qh = b[0:128], b[128:192]
    sc = np.frombuffer(b[192:208], dtype=np.int8)
    d = f16(b, 208)
    y = [None] * 256
    for n in range(2):
        L, H, S = ql[64 * n:], qh[32 * n:], sc[8 * n:]
        for l in range(32):
            is_ = l // 16
            q1 = ((L[l] & 15) | (((H[l] >> 0) & 3) << 4)) - 32
            q2 = ((L[l + 32] & 15) | (((H[l] >> 2) & 3) << 4)) - 32
            q3 = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32
            q4 = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32
            for k, q in enumerate((q1, q2, q3, q4)):
                y[128 * n + l + 32 * k] = d * f32(int(S[is_ + 2 * k])) * f32(q)
    return y


KVALUES_IQ4NL = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]


def iq4_nl(b):
    d = f16(b, 0)
    qs = b[2:18]
    y = [None] * 32
    for j in range(16):
        y[j] = d * f32(KVALUES_IQ4NL[qs[j] & 15])
        y[j + 16] = d * f32(KVALUES_IQ4NL[qs[j] >> 4])
    return y


def iq4_xs(b):
    d = f16(b, 0)
    scales_h = struct.unpack_from("<H", b, 2)[0]
    scales_l = b[4:8]
    qs = b[8:136]
    y = []
    for ib in range(8):
        ls = ((scales_l[ib // 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4)
        dl = d * f32(ls - 32)
        q = qs[16 * ib:16 * ib + 16]
        y += [dl * f32(KVALUES_IQ4NL[q[j] & 15]) for j in range(16)]
        y += [dl * f32(KVALUES_IQ4NL[q[j] >> 4]) for j in range(16)]
    return y


def load_grids():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels", "cpu", "iq_grids.h")
    text = open(path).read()
    grids = {}
    for ctype, name, body in re.findall(r"static const (\w+) (\w+)\[\d+\] = \{(.*?)\};", text, re.S):
        dt = {"uint8_t": np.uint8, "uint32_t": np.uint32, "uint64_t": np.uint64}[ctype]
        vals = [int(v.rstrip("uUlL"), 0) for v in re.findall(r"0x[0-9a-fA-F]+[uUlL]*|\d+", body)]
        grids[name] = np.array(vals, dtype=dt)
    return grids


GRIDS = load_grids()
KSIGNS = GRIDS["fg_iq_ksigns"]


def grid_bytes(table, idx, signed=False):
    """The bytes of grid entry idx (value j = byte j, little-endian)."""
    raw = np.array([table[idx]]).view(np.uint8)
    return raw.view(np.int8) if signed else raw


def sign_of(signs, j):
    return f32(-1.0) if signs & (1 << j) else f32(1.0)


def iq2_xxs(b):
    d = f16(b, 0)
    qs = np.frombuffer(b[2:66], dtype="<u2")
    y = []
    for ib32 in range(8):
        aux = np.frombuffer(qs[4 * ib32:4 * ib32 + 4].tobytes(), dtype="<u4")  # ggml's aux32[2]
        aux8 = aux[:1].view(np.uint8)
        db = d * (f32(0.5) + f32(int(aux[1]) >> 28)) * f32(0.25)
        for l in range(4):
            grid = grid_bytes(GRIDS["fg_iq2xxs_grid"], aux8[l])
            signs = int(KSIGNS[(int(aux[1]) >> (7 * l)) & 127])
            y += [db * f32(grid[j]) * sign_of(signs, j) for j in range(8)]
    return y


def iq2_xs(b):
    d = f16(b, 0)
    qs = np.frombuffer(b[2:66], dtype="<u2")
    scales = b[66:74]
    y = []
    for ib32 in range(8):
        db = [d * (f32(0.5) + f32(scales[ib32] & 0xF)) * f32(0.25),
              d * (f32(0.5) + f32(scales[ib32] >> 4)) * f32(0.25)]
        for l in range(4):
            q = int(qs[4 * ib32 + l])
            grid = grid_bytes(GRIDS["fg_iq2xs_grid"], q & 511)
            signs = int(KSIGNS[q >> 9])
            y += [db[l // 2] * f32(grid[j]) * sign_of(signs, j) for j in range(8)]
    return y


def iq2_s(b):
    d = f16(b, 0)
    qs, qh, scales = b[2:66], b[66:74], b[74:82]
    signs = qs[32:]                          # ggml: signs = qs + QK_K/8
    y = []
    for ib32 in range(8):
        db = [d * (f32(0.5) + f32(scales[ib32] & 0xF)) * f32(0.25),
              d * (f32(0.5) + f32(scales[ib32] >> 4)) * f32(0.25)]
        for l in range(4):
            idx = qs[4 * ib32 + l] | ((qh[ib32] << (8 - 2 * l)) & 0x300)
            grid = grid_bytes(GRIDS["fg_iq2s_grid"], idx)
            y += [db[l // 2] * f32(grid[j]) * sign_of(signs[4 * ib32 + l], j) for j in range(8)]
    return y


def iq3_xxs(b):
    d = f16(b, 0)
    qs = b[2:66]
    scales_and_signs = b[66:98]
    y = []
    for ib32 in range(8):
        aux32 = struct.unpack_from("<I", scales_and_signs, 4 * ib32)[0]
        db = d * (f32(0.5) + f32(aux32 >> 28)) * f32(0.5)
        q = qs[8 * ib32:8 * ib32 + 8]
        for l in range(4):
            signs = int(KSIGNS[(aux32 >> (7 * l)) & 127])
            grid1 = grid_bytes(GRIDS["fg_iq3xxs_grid"], q[2 * l])
            grid2 = grid_bytes(GRIDS["fg_iq3xxs_grid"], q[2 * l + 1])
            out = [None] * 8
            for j in range(4):
                out[j] = db * f32(grid1[j]) * sign_of(signs, j)
                out[j + 4] = db * f32(grid2[j]) * sign_of(signs, j + 4)
            y += out
    return y


def iq3_s(b):
    d = f16(b, 0)
    qs, qh, signs, scales = b[2:66], b[66:74], b[74:106], b[106:110]
    y = []
    for ib32 in range(0, 8, 2):              # ggml's loop: two sub-blocks per scale byte
        db1 = d * f32(1 + 2 * (scales[ib32 // 2] & 0xF))
        db2 = d * f32(1 + 2 * (scales[ib32 // 2] >> 4))
        for half, db in ((0, db1), (1, db2)):
            k = ib32 + half
            q, h, sg = qs[8 * k:8 * k + 8], qh[k], signs[4 * k:4 * k + 4]
            for l in range(4):
                grid1 = grid_bytes(GRIDS["fg_iq3s_grid"], q[2 * l] | ((h << (8 - 2 * l)) & 256))
                grid2 = grid_bytes(GRIDS["fg_iq3s_grid"], q[2 * l + 1] | ((h << (7 - 2 * l)) & 256))
                out = [None] * 8
                for j in range(4):
                    out[j] = db * f32(grid1[j]) * sign_of(sg[l], j)
                    out[j + 4] = db * f32(grid2[j]) * sign_of(sg[l], j + 4)
                y += out
    return y


IQ1S_DELTA = f32(0.125)


def iq1_s(b):
    d = f16(b, 0)
    qs = b[2:34]
    qh = np.frombuffer(b[34:50], dtype="<u2")
    y = []
    for ib in range(8):
        h = int(qh[ib])
        dl = d * f32(2 * ((h >> 12) & 7) + 1)
        delta = -IQ1S_DELTA if h & 0x8000 else IQ1S_DELTA
        for l in range(4):
            grid = grid_bytes(GRIDS["fg_iq1s_grid"], qs[4 * ib + l] | (((h >> (3 * l)) & 7) << 8), signed=True)
            y += [dl * (f32(grid[j]) + delta) for j in range(8)]
    return y


def iq1_m(b):
    qs, qh = b[0:32], b[32:48]
    sc = np.frombuffer(b[48:56], dtype="<u2").astype(np.int64)
    u16 = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)
    d = f32(np.array([u16], dtype="<u2").view("<f2")[0])
    y = []
    for ib in range(8):
        s16 = int(sc[ib // 2])
        dl1 = d * f32(2 * ((s16 >> (6 * (ib % 2) + 0)) & 0x7) + 1)
        dl2 = d * f32(2 * ((s16 >> (6 * (ib % 2) + 3)) & 0x7) + 1)
        q, h = qs[4 * ib:4 * ib + 4], qh[2 * ib:2 * ib + 2]
        idx = [q[0] | ((h[0] << 8) & 0x700), q[1] | ((h[0] << 4) & 0x700),
               q[2] | ((h[1] << 8) & 0x700), q[3] | ((h[1] << 4) & 0x700)]
        delta = [-IQ1S_DELTA if h[0] & 0x08 else IQ1S_DELTA, -IQ1S_DELTA if h[0] & 0x80 else IQ1S_DELTA,
                 -IQ1S_DELTA if h[1] & 0x08 else IQ1S_DELTA, -IQ1S_DELTA if h[1] & 0x80 else IQ1S_DELTA]
        for l in range(4):
            grid = grid_bytes(GRIDS["fg_iq1s_grid"], idx[l], signed=True)
            dl = dl1 if l < 2 else dl2
            y += [dl * (f32(grid[j]) + delta[l]) for j in range(8)]
    return y


def set_iq1_m_scale(b, x):
    """IQ1_M keeps its F16 scale in the top nibbles of its four u16 scale words."""
    h = struct.unpack("<H", f16_bytes(x))[0]
    for k in range(4):
        b[49 + 2 * k] = (b[49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 15) << 4)


# name, ggml id, values, bytes, dequantizer, offsets of the F16 fields
TYPES = [
    ("q4_0", 2, 32, 18, q4_0, [0]),
    ("q4_1", 3, 32, 20, q4_1, [0, 2]),
    ("q5_0", 6, 32, 22, lambda b: q5(b, False), [0]),
    ("q5_1", 7, 32, 24, lambda b: q5(b, True), [0, 2]),
    ("q2_K", 10, 256, 84, q2_k, [80, 82]),
    ("q3_K", 11, 256, 110, q3_k, [108]),
    ("q4_K", 12, 256, 144, lambda b: q45_k(b, False), [0, 2]),
    ("q5_K", 13, 256, 176, lambda b: q45_k(b, True), [0, 2]),
    ("q6_K", 14, 256, 210, q6_k, [208]),
    ("iq4_nl", 20, 32, 18, iq4_nl, [0]),
    ("iq4_xs", 23, 256, 136, iq4_xs, [0]),
    ("iq2_xxs", 16, 256, 66, iq2_xxs, [0]),
    ("iq2_xs", 17, 256, 74, iq2_xs, [0]),
    ("iq2_s", 22, 256, 82, iq2_s, [0]),
    ("iq3_xxs", 18, 256, 98, iq3_xxs, [0]),
    ("iq3_s", 21, 256, 110, iq3_s, [0]),
    ("iq1_s", 19, 256, 50, iq1_s, [0]),
    ("iq1_m", 29, 256, 56, iq1_m, [set_iq1_m_scale]),
]

F16_VALUES = [0.25, -1.3330078125, 0.0001233816146850586, 3.0]


def set_f16(b, field, x):
    """field: a byte offset, or a function that stores a scale spread over the block."""
    if callable(field):
        field(b, x)
    else:
        b[field:field + 2] = f16_bytes(x)


def blocks_for(nbytes, fields, seed):
    out = []
    b = bytearray((i * 7 + 3) & 0xFF for i in range(nbytes))          # counting bytes
    for k, off in enumerate(fields):
        set_f16(b, off, F16_VALUES[k % 2])
    out.append(bytes(b))
    s = seed
    b = bytearray()
    for _ in range(nbytes):                                           # xorshift32 bytes
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        b.append(s & 0xFF)
    for k, off in enumerate(fields):
        set_f16(b, off, F16_VALUES[2 + k % 2])
    out.append(bytes(b))
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    lines = ["/* Generated by tests/reference/quant_vectors.py from the formats' definitions; do not edit. */",
             "#include <stdint.h>", "",
             "typedef struct quant_vector {", "    const char *name;", "    int type, elems, bytes;",
             "    uint8_t block[2][210];", "    uint32_t values[2][256]; /* f32 bit patterns */",
             "} quant_vector;", "", "static const quant_vector quant_vectors[] = {"]
    for name, tid, elems, nbytes, deq, fields in TYPES:
        blks = blocks_for(nbytes, fields, 0x9E3779B9 ^ tid)
        lines.append('    {"%s", %d, %d, %d,' % (name, tid, elems, nbytes))
        lines.append("     {" + ",\n      ".join("{" + ", ".join(str(x) for x in b) + "}" for b in blks) + "},")
        vals = []
        for b in blks:
            y = deq(b)
            assert len(y) == elems
            bits = np.array(y, dtype=np.float32).view(np.uint32)
            vals.append("{" + ", ".join("0x%08xu" % v for v in bits) + "}")
        lines.append("     {" + ",\n      ".join(vals) + "}},")
    lines += ["};", ""]
    with open(argv[1], "w") as f:
        f.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
