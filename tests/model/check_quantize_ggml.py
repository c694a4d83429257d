#!/usr/bin/python3
"""Usage: check_quantize_ggml.py BINS_DIR  (run by check_quantize_ggml.sh; the package's bins/linux-x64)

1. tiny-256.gguf with every quantizable tensor forced to each of the 13 types, and its Q4_K_M
   mix, written by flashgate-quantize: each block-typed tensor equals ggml_quantize_chunk of the
   F32 source in that type, every row.
2. tests/reference/quantize_ref.py (the numpy reference test_quantize's vectors come from) on
   the vectors' inputs equals ggml too, so the checked-in bytes are ggml's.
3. Whole files: llama.cpp's llama_model_quantize (libllama, the function llama-quantize calls)
   and flashgate-quantize write byte-identical files for every mix flashgate-quantize accepts,
   from tiny-256.gguf and from the trained models/flash-english.gguf: the same per-tensor types,
   fallbacks, keys, key order, tensor order and blocks.
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
SRC = os.environ["FG_SOURCE_DIR"]
# flashgate-quantize's mixes and llama.cpp's LLAMA_FTYPE numbers for them
FTYPES = {"f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k_s": 11,
          "q3_k_m": 12, "q3_k_l": 13, "q4_k_s": 14, "q4_k_m": 15, "q5_k_s": 16, "q5_k_m": 17, "q6_k": 18,
          "iq4_nl": 25, "iq4_xs": 30, "mxfp4_moe": 38}
LLAMA_QUANTIZE = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
class Params(ctypes.Structure):  # llama_model_quantize_params, larger than the real one: filled by the callee
    _fields_ = [("raw", ctypes.c_uint8 * 512)]
lib.llama_model_quantize_default_params.restype = Params
lib.llama_backend_init()
p = lib.llama_model_quantize_default_params()
ctypes.memmove(ctypes.addressof(p), (ctypes.c_int32 * 2)(1, int(sys.argv[4])), 8)  # nthread, ftype: its first fields
lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
sys.exit(lib.llama_model_quantize(sys.argv[2].encode(), sys.argv[3].encode(), ctypes.byref(p)))
"""

lib = ctypes.CDLL(os.path.join(sys.argv[1], "libggml-base.so"))
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
        for model in (src, os.path.join(SRC, "models", "flash-english.gguf")):
            same = []
            for mix, ftype in FTYPES.items():
                ours, theirs = os.path.join(tmp, "ours.gguf"), os.path.join(tmp, "llama.gguf")
                for f in (ours, theirs):
                    if os.path.exists(f):
                        os.remove(f)
                subprocess.run([os.path.join(BIN, "flashgate-quantize"), "--quiet", model, ours, mix], check=True,
                               capture_output=True)
                r = subprocess.run([sys.executable, "-c", LLAMA_QUANTIZE,
                                    os.path.join(sys.argv[1], "libllama.v0.5.0.so"), model, theirs, str(ftype)],
                                   capture_output=True, text=True)
                if r.returncode:
                    failures.append("llama_model_quantize %s %s failed: %s" % (model, mix, r.stderr[-300:]))
                    continue
                with open(ours, "rb") as a, open(theirs, "rb") as b:
                    if a.read() != b.read():
                        failures.append("%s %s: flashgate-quantize's file differs from llama-quantize's"
                                        % (os.path.basename(model), mix))
                    else:
                        same.append(mix)
            print("%s: files byte-identical to llama_model_quantize's for %d of %d mixes (%s)"
                  % (os.path.basename(model), len(same), len(FTYPES), " ".join(same)))
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
