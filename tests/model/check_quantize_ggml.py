#!/usr/bin/python3
"""Usage: check_quantize_ggml.py LIBGGML_BASE_SO  (run by check_quantize_ggml.sh)

1. tiny-256.gguf with every quantizable tensor forced to each of the 13 types, and its Q4_K_M
   mix, written by flashgate-quantize: each block-typed tensor equals ggml_quantize_chunk of the
   F32 source in that type, every row.
2. tests/reference/quantize_ref.py (the numpy reference test_quantize's vectors come from) on
   the vectors' inputs equals ggml too, so the checked-in bytes are ggml's.
"""

import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import gguf_read  # noqa: E402
from quantize_ref import TYPES, quantize  # noqa: E402
from quantize_vectors import inputs  # noqa: E402

BIN = os.environ["FG_BIN"]
DATA = os.environ["FG_TEST_DATA"]

lib = ctypes.CDLL(sys.argv[1])
lib.ggml_quantize_chunk.restype = ctypes.c_size_t
lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                    ctypes.c_int64, ctypes.c_void_p]
NAMES = {gid: name for name, (gid, _, _, _) in TYPES.items()}
failures = []


def ggml(gid, x):
    """x (rows, n) float32 -> ggml's bytes for type gid."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    _, qk, nb, _ = TYPES[NAMES[gid]]
    out = np.zeros(x.size // qk * nb, dtype=np.uint8)
    lib.ggml_quantize_chunk(gid, x.ctypes.data, out.ctypes.data, 0, x.shape[0], x.shape[1], None)
    return out.tobytes()


def compare_file(src, out, label):
    a, b = gguf_read.GGUFFile(src), gguf_read.GGUFFile(out)
    n = blocks = 0
    for name, t in b.tensors.items():
        if t.ggml_type not in NAMES or t.ggml_type == a.tensors[name].ggml_type:
            continue
        x = np.frombuffer(bytes(a.raw_bytes(name)), dtype="<f4").reshape(-1, t.ne[0])
        want, got = ggml(t.ggml_type, x), bytes(b.raw_bytes(name))
        if got != want:
            k = next(i for i in range(len(want)) if got[i] != want[i])
            failures.append("%s: %s (%s) differs from ggml at byte %d" % (label, name, NAMES[t.ggml_type], k))
        n += 1
        blocks += len(want) // TYPES[NAMES[t.ggml_type]][2]
    a.close()
    b.close()
    return n, blocks


def main():
    src = os.path.join(DATA, "tiny-256.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(tn, ["--tensor-type", ".=" + tn], "q8_0") for tn in sorted(TYPES, key=lambda n: TYPES[n][0])]
        runs.append(("q4_k_m mix", [], "q4_k_m"))
        for label, extra, ftype in runs:
            out = os.path.join(tmp, "out.gguf")
            subprocess.run([os.path.join(BIN, "flashgate-quantize"), "--quiet"] + extra + [src, out, ftype],
                           check=True, capture_output=True)
            n, blocks = compare_file(src, out, label)
            print("%-10s %3d tensors, %7d blocks: %s" % (label, n, blocks, "identical to ggml" if not failures
                                                           else "see failures"))
    x = inputs()
    for tn, (gid, _, _, _) in sorted(TYPES.items(), key=lambda kv: kv[1][0]):
        if quantize(tn, x) != ggml(gid, x.reshape(-1, x.shape[-1])):
            failures.append("quantize_ref.py %s differs from ggml on the vectors' inputs" % tn)
    print("quantize_ref.py on the vectors' inputs: %s" % ("identical to ggml" if not failures else "see failures"))
    for f in failures:
        print("FAIL: " + f)
    print("check_quantize_ggml: %s (%d failures)" % ("FAIL" if failures else "ok", len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
