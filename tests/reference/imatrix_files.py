"""llama-imatrix's two output formats, written from their definitions (llama.cpp
tools/imatrix/imatrix.cpp; read back by tools/quantize/quantize.cpp), for the tests of
flashgate-quantize --imatrix; and the per-column weights llama-quantize derives from them.

entries: {name: (sums, counts)}, sums float32 (n_mat, ne0) of summed squared activations,
counts float32 (n_mat,) of how many activations each row of sums holds (n_mat: the experts of
a 3-D expert tensor, else 1).
"""

import struct

import numpy as np

ALIGN = 32


def _str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, entries, datasets=("calibration.txt",), chunk_count=10, chunk_size=512, keys=None,
               types=None):
    """The GGUF imatrix: keys general.type, imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size
    (keys: replace that list of (key, vtype, packed value) for bad-input tests); per entry tensors
    NAME.in_sum2 (F32 [ne0, n_mat]) and NAME.counts (F32 [1, n_mat]); types: {tensor name: ggml
    type id} to write another type id into the directory (bad-input tests)."""
    if keys is None:
        arr = struct.pack("<IQ", 8, len(datasets)) + b"".join(_str(d) for d in datasets)
        keys = [("general.type", 8, _str("imatrix")), ("imatrix.datasets", 9, arr),
                ("imatrix.chunk_count", 4, struct.pack("<I", chunk_count)),
                ("imatrix.chunk_size", 4, struct.pack("<I", chunk_size))]
    tensors = []
    for name in sorted(entries):
        sums, counts = entries[name]
        sums = np.ascontiguousarray(sums, dtype=np.float32)
        counts = np.ascontiguousarray(counts, dtype=np.float32).reshape(1, -1)
        tensors.append((name + ".in_sum2", sums))
        tensors.append((name + ".counts", counts))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(keys))
    for k, vt, v in keys:
        head += _str(k) + struct.pack("<I", vt) + v
    data, off = b"", 0
    for name, a in tensors:
        ne = list(reversed(a.shape))
        gtype = (types or {}).get(name, 0)
        head += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        head += struct.pack("<IQ", gtype, off)
        raw = a.tobytes()
        pad = (-len(raw)) % ALIGN
        data += raw + b"\0" * pad
        off += len(raw) + pad
    head += b"\0" * ((-len(head)) % ALIGN)
    with open(path, "wb") as f:
        f.write(head + data)


def write_legacy(path, entries, trailer=(10, "calibration.txt")):
    """The legacy .dat: i32 count; per entry i32 name length, name, i32 ncall, i32 n, n f32 sums;
    then (trailer not None) i32 chunk count, i32 dataset length, dataset. entries: {name: (ncall,
    sums flat float32)}."""
    out = struct.pack("<i", len(entries))
    for name, (ncall, sums) in entries.items():
        b = name.encode()
        sums = np.ascontiguousarray(sums, dtype=np.float32).ravel()
        out += struct.pack("<i", len(b)) + b + struct.pack("<ii", ncall, sums.size) + sums.tobytes()
    if trailer is not None:
        d = trailer[1].encode()
        out += struct.pack("<ii", trailer[0], len(d)) + d
    with open(path, "wb") as f:
        f.write(out)


def gguf_weights(entries):
    """{name: float32 (n_mat * ne0,)}: sums / count per matrix, 1 where the count is 0, in
    float32 as llama-quantize divides."""
    out = {}
    for name, (sums, counts) in entries.items():
        sums = np.asarray(sums, dtype=np.float32)
        counts = np.asarray(counts, dtype=np.float32).ravel()
        w = np.ones_like(sums)
        for j in range(sums.shape[0]):
            if counts[j] > 0:
                w[j] = sums[j] / counts[j]
        out[name] = w.ravel()
    return out


def legacy_weights(entries):
    return {name: (np.asarray(s, dtype=np.float32).ravel() / np.float32(ncall) if ncall > 0
                   else np.asarray(s, dtype=np.float32).ravel()) for name, (ncall, s) in entries.items()}


def random_entries(tensors, rng, partial=None):
    """Random llama-imatrix-like data for {name: (ne0, n_mat)}: sums of squares of activations
    over a heavy-tailed spread of columns, counts per expert; the experts named in partial
    ({name: expert}) saw no input (count 0)."""
    entries = {}
    for name, (ne0, n_mat) in tensors.items():
        counts = rng.integers(1, 5000, size=n_mat).astype(np.float32)
        scale = (rng.standard_normal((n_mat, ne0)) ** 2 * rng.uniform(0.01, 4.0, size=(n_mat, 1)))
        sums = (scale * counts[:, None]).astype(np.float32)
        if partial and name in partial:
            counts[partial[name]] = 0
            sums[partial[name]] = 0
        entries[name] = (sums, counts)
    return entries
