#!/usr/bin/python3
"""The lattice IQ types' reference dequantization (quant_vectors.py, which test_quants holds
the engine's C to bit for bit) against ggml itself: the dequantize_row_iq* of the
libggml-base.so in DIR (llama.cpp's own build, from a pinned npm package), bit for bit, on
the vectors' blocks and on random blocks with finite scales.  This also checks the grid
tables of kernels/cpu/iq_grids.h, which both readings share, against the definition's.

Usage: check_iq_ggml.py DIR
"""

import ctypes
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant_vectors as qv  # noqa: E402

LATTICE = ["iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"]
N_RANDOM = 48


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    lib = ctypes.CDLL(os.path.join(argv[1], "libggml-base.so"))
    rng = np.random.default_rng(20261202)
    fails = 0
    for name, tid, elems, nbytes, deq, fields in qv.TYPES:
        if name not in LATTICE:
            continue
        fn = getattr(lib, "dequantize_row_" + name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None
        blocks = qv.blocks_for(nbytes, fields, 0x9E3779B9 ^ tid)
        for _ in range(N_RANDOM):
            b = bytearray(rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes())
            while True:  # a random finite F16 scale of any magnitude, subnormals included
                h = int(rng.integers(0, 65536))
                if h & 0x7C00 != 0x7C00:
                    break
            x = np.array([h], dtype="<u2").view("<f2")[0]
            for f in fields:
                qv.set_f16(b, f, x)
            blocks.append(bytes(b))
        bad = 0
        for b in blocks:
            want = np.array(deq(b), dtype=np.float32).view(np.uint32)
            buf = ctypes.create_string_buffer(b, len(b))
            out = np.zeros(elems, dtype=np.float32)
            fn(buf, out.ctypes.data, elems)
            bad += int(np.count_nonzero(out.view(np.uint32) != want))
        print("%-8s %d blocks: %d values differ from ggml's dequantize_row_%s" % (name, len(blocks), bad, name))
        fails += bad != 0
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
