#!/usr/bin/python3
"""Copies a GGUF file with some tensors re-encoded in another ggml type.

Usage: retype_tensors.py IN.gguf OUT.gguf PATTERN=TYPE [PATTERN=TYPE ...]

PATTERN is an fnmatch pattern over tensor names (e.g. 'blk.*.ffn_*_exps.weight'), TYPE a
ggml type name the encoders know (mxfp4; quant_encode.py's
legacy and K-quant types).  The first matching rule wins; tensors no rule
matches, the metadata and the alignment are copied byte for byte.  This makes the mixed-type
test models (routed experts in MXFP4, as llama.cpp's converter writes DeepSeek V4) from the
generated F32 ones without a quantizing tool; the encoders need only produce valid blocks,
since the engine and the reference both read whatever bytes the file holds.
"""

import fnmatch
import struct
import sys

import numpy as np

import gguf_read
import make_v4_fixture
import quant_encode

ENCODERS = {
    "mxfp4": (gguf_read.GGML_TYPE_MXFP4, make_v4_fixture._mxfp4),
}
ENCODERS.update({name: (tid, quant_encode.ENCODERS[tid]) for name, tid in quant_encode.NAMES.items()})


def retype(src, dst, rules):
    g = gguf_read.GGUFFile(src)
    buf = g._mm
    n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
    cur = gguf_read._Cursor(buf, 24)
    for _ in range(n_kv):
        cur.string()
        cur.value(cur.u32())
    kv_bytes = bytes(buf[24:cur.pos])
    align = g.alignment
    head = struct.pack("<4sIQQ", b"GGUF", 3, n_tensors, n_kv) + kv_bytes
    blobs, offset = [], 0
    for name, t in g.tensors.items():
        gtype, raw = t.ggml_type, bytes(g.raw_bytes(name))
        for pattern, tname in rules:
            if fnmatch.fnmatchcase(name, pattern):
                gtype, enc = ENCODERS[tname]
                raw = enc(g.tensor_f64(name))
                break
        head += struct.pack("<Q", len(name.encode())) + name.encode() + struct.pack("<I", len(t.ne))
        head += b"".join(struct.pack("<Q", n) for n in t.ne) + struct.pack("<IQ", gtype, offset)
        pad = (-len(raw)) % align
        blobs.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    head += b"\0" * ((-len(head)) % align)
    g.close()
    with open(dst, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    rules = []
    for r in argv[3:]:
        pattern, _, tname = r.rpartition("=")
        if not pattern or tname not in ENCODERS:
            sys.stderr.write("bad rule %r (known types: %s)\n" % (r, ", ".join(sorted(ENCODERS))))
            return 2
        rules.append((pattern, tname))
    retype(argv[1], argv[2], rules)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
