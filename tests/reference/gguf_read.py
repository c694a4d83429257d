#!/usr/bin/python3
"""Minimal, self-contained GGUF (v2/v3) reader for the flashgate numpy reference.

Depends only on the Python standard library and numpy (Debian's python3-numpy 1.24).

File layout handled here (all little-endian):

    u32 magic "GGUF" | u32 version (2 or 3) | u64 n_tensors | u64 n_kv
    n_kv   x { string key | u32 value_type | value }
    n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
    padding up to `general.alignment` (default 32)
    tensor data; each tensor at data_start + offset (offset a multiple of the alignment)

    string = u64 byte length + UTF-8 bytes (no terminator)
    array  = u32 element value_type + u64 count + elements

Shape convention: ggml lists dimensions ne0 first, ne0 being the contiguous one.  A
row-major numpy array therefore has the REVERSED shape: ggml {ne0, ne1, ne2} -> numpy
(ne2, ne1, ne0), so that a[i2, i1, i0] is ggml element (i0, i1, i2).

Dequantisation to float64 is supported for F32, F16, BF16, Q8_0, MXFP4, the legacy
Q4_0/Q4_1/Q5_0/Q5_1, K-quant Q2_K..Q6_K and IQ4_NL/IQ4_XS (through quant_vectors.py's dequantizers,
written from ggml's definitions; values as ggml's f32 arithmetic gives them), and the plain
F64 / I8 / I16 / I32 / I64 types.  Other block formats raise NotImplementedError.
"""

import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32

# --- metadata value types -------------------------------------------------------------
GGUF_TYPE_UINT8 = 0
GGUF_TYPE_INT8 = 1
GGUF_TYPE_UINT16 = 2
GGUF_TYPE_INT16 = 3
GGUF_TYPE_UINT32 = 4
GGUF_TYPE_INT32 = 5
GGUF_TYPE_FLOAT32 = 6
GGUF_TYPE_BOOL = 7
GGUF_TYPE_STRING = 8
GGUF_TYPE_ARRAY = 9
GGUF_TYPE_UINT64 = 10
GGUF_TYPE_INT64 = 11
GGUF_TYPE_FLOAT64 = 12

# scalar value type -> numpy dtype (little-endian)
_SCALAR_DTYPES = {
    GGUF_TYPE_UINT8: np.dtype("<u1"),
    GGUF_TYPE_INT8: np.dtype("<i1"),
    GGUF_TYPE_UINT16: np.dtype("<u2"),
    GGUF_TYPE_INT16: np.dtype("<i2"),
    GGUF_TYPE_UINT32: np.dtype("<u4"),
    GGUF_TYPE_INT32: np.dtype("<i4"),
    GGUF_TYPE_FLOAT32: np.dtype("<f4"),
    GGUF_TYPE_BOOL: np.dtype("<u1"),
    GGUF_TYPE_UINT64: np.dtype("<u8"),
    GGUF_TYPE_INT64: np.dtype("<i8"),
    GGUF_TYPE_FLOAT64: np.dtype("<f8"),
}

# --- ggml tensor types ----------------------------------------------------------------
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
GGML_TYPE_Q4_0 = 2
GGML_TYPE_Q4_1 = 3
GGML_TYPE_Q5_0 = 6
GGML_TYPE_Q5_1 = 7
GGML_TYPE_Q8_0 = 8
GGML_TYPE_Q8_1 = 9
GGML_TYPE_Q2_K = 10
GGML_TYPE_Q3_K = 11
GGML_TYPE_Q4_K = 12
GGML_TYPE_Q5_K = 13
GGML_TYPE_Q6_K = 14
GGML_TYPE_Q8_K = 15
GGML_TYPE_I8 = 24
GGML_TYPE_I16 = 25
GGML_TYPE_I32 = 26
GGML_TYPE_I64 = 27
GGML_TYPE_F64 = 28
GGML_TYPE_BF16 = 30
GGML_TYPE_MXFP4 = 39

GGML_TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K",
    16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S",
    22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64",
    29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}

# (block size in elements, bytes per block) for the types whose size we know.
GGML_BLOCK_INFO = {
    GGML_TYPE_F32: (1, 4), GGML_TYPE_F16: (1, 2), GGML_TYPE_BF16: (1, 2),
    GGML_TYPE_F64: (1, 8), GGML_TYPE_I8: (1, 1), GGML_TYPE_I16: (1, 2),
    GGML_TYPE_I32: (1, 4), GGML_TYPE_I64: (1, 8),
    GGML_TYPE_Q4_0: (32, 18), GGML_TYPE_Q4_1: (32, 20), GGML_TYPE_Q5_0: (32, 22),
    GGML_TYPE_Q5_1: (32, 24), GGML_TYPE_Q8_0: (32, 34), GGML_TYPE_Q8_1: (32, 36),
    GGML_TYPE_Q2_K: (256, 84), GGML_TYPE_Q3_K: (256, 110), GGML_TYPE_Q4_K: (256, 144),
    GGML_TYPE_Q5_K: (256, 176), GGML_TYPE_Q6_K: (256, 210), GGML_TYPE_Q8_K: (256, 292),
    GGML_TYPE_MXFP4: (32, 17),
    # the legacy and K-quant types (dequantized by quant_vectors.py, from their definitions)
    2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    20: (32, 18), 23: (256, 136),
    # the lattice types (raw bytes only; flashgate-quantize writes them)
    16: (256, 66), 17: (256, 74), 18: (256, 98), 21: (256, 110), 22: (256, 82),
}

_PLAIN_DTYPES = {
    GGML_TYPE_F32: np.dtype("<f4"), GGML_TYPE_F16: np.dtype("<f2"),
    GGML_TYPE_F64: np.dtype("<f8"), GGML_TYPE_I8: np.dtype("<i1"),
    GGML_TYPE_I16: np.dtype("<i2"), GGML_TYPE_I32: np.dtype("<i4"),
    GGML_TYPE_I64: np.dtype("<i8"),
}

# Q8_0: per 32 values, one f16 scale d followed by 32 int8 quants; value = d * q.
Q8_0_BLOCK_DTYPE = np.dtype([("d", "<f2"), ("qs", "i1", (32,))])
assert Q8_0_BLOCK_DTYPE.itemsize == 34

# MXFP4 (OCP microscaling FP4): per 32 values one E8M0 scale byte e, then 16 bytes of
# E2M1 nibbles; byte j holds value j in its low nibble and value j + 16 in its high one.
# value = e2m1(nibble) * 2^(e - 127).
MXFP4_BLOCK_DTYPE = np.dtype([("e", "u1"), ("qs", "u1", (16,))])
assert MXFP4_BLOCK_DTYPE.itemsize == 17


def e2m1_value(nibble):
    """FP4 E2M1 from its bits: sign (bit 3), 2 exponent bits (bias 1), 1 mantissa bit."""
    nibble = int(nibble)
    sign = -1.0 if nibble & 8 else 1.0
    exp = (nibble >> 1) & 3
    man = nibble & 1
    if exp == 0:
        return sign * 0.5 * man                      # subnormal: 0 or 0.5
    return sign * 2.0 ** (exp - 1) * (1.0 + 0.5 * man)


E2M1_VALUES = np.array([e2m1_value(n) for n in range(16)], dtype=np.float64)


class GGUFError(Exception):
    """Malformed or unsupported GGUF file."""


class TensorInfo(object):
    """One entry of the tensor directory."""

    __slots__ = ("name", "ne", "ggml_type", "offset", "data_offset", "nbytes")

    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = tuple(int(x) for x in ne)      # ggml order, ne0 first
        self.ggml_type = int(ggml_type)
        self.offset = int(offset)                # relative to the data section
        self.data_offset = None                  # absolute file offset (set later)
        self.nbytes = None

    @property
    def shape(self):
        """numpy (row-major) shape: the reverse of ne."""
        return tuple(reversed(self.ne))

    @property
    def n_elements(self):
        n = 1
        for x in self.ne:
            n *= x
        return n

    @property
    def type_name(self):
        return GGML_TYPE_NAMES.get(self.ggml_type, "type%d" % self.ggml_type)

    def __repr__(self):
        return "TensorInfo(%s, ne=%s, %s, off=%d)" % (self.name, list(self.ne), self.type_name,
                                                       self.offset)


def ggml_nbytes(ggml_type, ne):
    if ggml_type not in GGML_BLOCK_INFO:
        raise GGUFError("unknown size for ggml type %s" % GGML_TYPE_NAMES.get(ggml_type, ggml_type))
    blk, bsz = GGML_BLOCK_INFO[ggml_type]
    if len(ne) == 0:
        raise GGUFError("tensor with zero dimensions")
    if ne[0] % blk != 0:
        raise GGUFError("ne0=%d is not a multiple of the block size %d of %s"
                        % (ne[0], blk, GGML_TYPE_NAMES.get(ggml_type)))
    rows = 1
    for x in ne[1:]:
        rows *= x
    return rows * (ne[0] // blk) * bsz


class _Cursor(object):
    """Sequential little-endian reader over a bytes-like buffer."""

    def __init__(self, buf, pos=0):
        self.buf = buf
        self.pos = pos
        self.size = len(buf)

    def need(self, n):
        if n < 0 or self.pos + n > self.size:
            raise GGUFError("unexpected end of file at offset %d (need %d bytes)" % (self.pos, n))

    def unpack(self, fmt):
        n = struct.calcsize(fmt)
        self.need(n)
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def u32(self):
        return self.unpack("<I")[0]

    def u64(self):
        return self.unpack("<Q")[0]

    def string(self):
        n = self.u64()
        self.need(n)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            # Tokenizer pieces can in principle be invalid UTF-8; keep them lossless.
            return raw.decode("utf-8", errors="surrogateescape")

    def array_of(self, vtype, count):
        dt = _SCALAR_DTYPES[vtype]
        n = dt.itemsize * count
        self.need(n)
        arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.pos).copy()
        self.pos += n
        if vtype == GGUF_TYPE_BOOL:
            arr = arr.astype(bool)
        return arr

    def value(self, vtype, depth=0):
        if vtype in _SCALAR_DTYPES:
            dt = _SCALAR_DTYPES[vtype]
            self.need(dt.itemsize)
            v = np.frombuffer(self.buf, dtype=dt, count=1, offset=self.pos)[0]
            self.pos += dt.itemsize
            if vtype == GGUF_TYPE_BOOL:
                return bool(v)
            if vtype in (GGUF_TYPE_FLOAT32, GGUF_TYPE_FLOAT64):
                return float(v)
            return int(v)
        if vtype == GGUF_TYPE_STRING:
            return self.string()
        if vtype == GGUF_TYPE_ARRAY:
            if depth > 8:
                raise GGUFError("array nesting too deep")
            etype = self.u32()
            count = self.u64()
            if etype in _SCALAR_DTYPES:
                # numeric arrays stay numpy arrays (fast for token_type etc.)
                return self.array_of(etype, count)
            if count > self.size:
                raise GGUFError("implausible array length %d" % count)
            return [self.value(etype, depth + 1) for _ in range(count)]
        raise GGUFError("unknown metadata value type %d at offset %d" % (vtype, self.pos))


class GGUFFile(object):
    """A parsed GGUF file.

    Attributes:
        path, version, alignment, data_start
        metadata:    dict key -> python value (int/float/bool/str, list, or numpy array for
                     numeric arrays)
        value_types: dict key -> GGUF value type of the entry (arrays: (9, element type))
        tensors:     dict name -> TensorInfo (in file order; dicts keep insertion order)
    """

    def __init__(self, path):
        self.path = path
        self._mm = np.memmap(path, dtype=np.uint8, mode="r")
        buf = self._mm
        if len(buf) < 24:
            raise GGUFError("%s: file too small to be GGUF" % path)
        cur = _Cursor(buf)
        magic = bytes(buf[0:4])
        if magic != GGUF_MAGIC:
            raise GGUFError("%s: bad magic %r (expected b'GGUF')" % (path, magic))
        cur.pos = 4
        self.version = cur.u32()
        if self.version not in (2, 3):
            raise GGUFError("%s: unsupported GGUF version %d" % (path, self.version))
        n_tensors = cur.u64()
        n_kv = cur.u64()
        if n_tensors > len(buf) or n_kv > len(buf):
            raise GGUFError("%s: implausible counts (tensors=%d kv=%d)" % (path, n_tensors, n_kv))

        self.metadata = {}
        self.value_types = {}
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.u32()
            if vtype == GGUF_TYPE_ARRAY:
                save = cur.pos
                etype = cur.u32()
                cur.pos = save
                self.value_types[key] = (vtype, etype)
            else:
                self.value_types[key] = vtype
            if key in self.metadata:
                raise GGUFError("%s: duplicate metadata key %r" % (path, key))
            self.metadata[key] = cur.value(vtype)

        self.tensors = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.u32()
            if n_dims < 1 or n_dims > 4:
                raise GGUFError("%s: tensor %r has %d dims" % (path, name, n_dims))
            ne = [cur.u64() for _ in range(n_dims)]
            ttype = cur.u32()
            off = cur.u64()
            if name in self.tensors:
                raise GGUFError("%s: duplicate tensor %r" % (path, name))
            self.tensors[name] = TensorInfo(name, ne, ttype, off)

        align = self.metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or (align & (align - 1)) != 0:
            raise GGUFError("%s: bad general.alignment %r" % (path, align))
        self.alignment = align
        self.data_start = (cur.pos + align - 1) // align * align

        for t in self.tensors.values():
            if t.offset % align != 0:
                raise GGUFError("%s: tensor %s offset %d not aligned to %d"
                                % (path, t.name, t.offset, align))
            t.data_offset = self.data_start + t.offset
            if t.ggml_type in GGML_BLOCK_INFO:
                t.nbytes = ggml_nbytes(t.ggml_type, t.ne)
                if t.data_offset + t.nbytes > len(buf):
                    raise GGUFError("%s: tensor %s data [%d, %d) beyond end of file (%d)"
                                    % (path, t.name, t.data_offset, t.data_offset + t.nbytes,
                                       len(buf)))

    # ------------------------------------------------------------------------------
    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def has_tensor(self, name):
        return name in self.tensors

    def raw_bytes(self, name):
        t = self.tensors[name]
        if t.nbytes is None:
            raise NotImplementedError("size of ggml type %s unknown" % t.type_name)
        return self._mm[t.data_offset:t.data_offset + t.nbytes]

    def tensor_f64(self, name):
        """Dequantise tensor `name` to a float64 numpy array of shape reversed(ne)."""
        if name not in self.tensors:
            raise KeyError("tensor %r not in %s" % (name, self.path))
        t = self.tensors[name]
        return dequantize(self.raw_bytes(name), t.ggml_type, t.ne)

    def tensor_int(self, name):
        """An integer tensor (I8/I16/I32/I64) as int64, numpy shape reversed(ne)."""
        t = self.tensors[name]
        if t.ggml_type not in (GGML_TYPE_I8, GGML_TYPE_I16, GGML_TYPE_I32, GGML_TYPE_I64):
            raise GGUFError("%s: tensor %s is %s, not an integer type" % (self.path, name, t.type_name))
        a = np.frombuffer(self.raw_bytes(name), dtype=_PLAIN_DTYPES[t.ggml_type], count=t.n_elements)
        return a.astype(np.int64).reshape(t.shape)

    def close(self):
        mm = getattr(self, "_mm", None)
        if mm is not None and getattr(mm, "_mmap", None) is not None:
            mm._mmap.close()
        self._mm = None


def _block_dequantizers():
    import quant_vectors
    return {tid: deq for _, tid, _, _, deq, _ in quant_vectors.TYPES}


_BLOCK_DEQUANT = _block_dequantizers()


def dequantize(raw, ggml_type, ne):
    """Convert the raw bytes of a tensor with ggml dims `ne` to float64, numpy shape reversed(ne)."""
    shape = tuple(reversed([int(x) for x in ne]))
    n = 1
    for x in ne:
        n *= int(x)
    raw = np.asarray(raw, dtype=np.uint8)
    if ggml_type in _PLAIN_DTYPES:
        a = np.frombuffer(raw, dtype=_PLAIN_DTYPES[ggml_type], count=n)
        return a.astype(np.float64).reshape(shape)
    if ggml_type == GGML_TYPE_BF16:
        u = np.frombuffer(raw, dtype="<u2", count=n).astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64).reshape(shape)
    if ggml_type == GGML_TYPE_Q8_0:
        if int(ne[0]) % 32 != 0:
            raise GGUFError("Q8_0 tensor with ne0=%d not a multiple of 32" % ne[0])
        blocks = np.frombuffer(raw, dtype=Q8_0_BLOCK_DTYPE, count=n // 32)
        d = blocks["d"].astype(np.float64)[:, None]
        q = blocks["qs"].astype(np.float64)
        return (d * q).reshape(shape)
    if ggml_type == GGML_TYPE_MXFP4:
        if int(ne[0]) % 32 != 0:
            raise GGUFError("MXFP4 tensor with ne0=%d not a multiple of 32" % ne[0])
        blocks = np.frombuffer(raw, dtype=MXFP4_BLOCK_DTYPE, count=n // 32)
        scale = np.ldexp(1.0, blocks["e"].astype(np.int64) - 127)[:, None]
        qs = blocks["qs"]
        nib = np.concatenate([qs & 0x0F, qs >> 4], axis=1)    # values 0..15, then 16..31
        return (E2M1_VALUES[nib] * scale).reshape(shape)
    if ggml_type in _BLOCK_DEQUANT:
        elems, nbytes = GGML_BLOCK_INFO[ggml_type]
        if int(ne[0]) % elems != 0:
            raise GGUFError("%s tensor with ne0=%d not a multiple of %d" % (GGML_TYPE_NAMES.get(ggml_type), ne[0], elems))
        raw = bytes(raw)
        deq = _BLOCK_DEQUANT[ggml_type]
        vals = [deq(raw[i:i + nbytes]) for i in range(0, n // elems * nbytes, nbytes)]
        return np.array(vals, dtype=np.float32).astype(np.float64).reshape(shape)
    raise NotImplementedError("dequantisation of ggml type %s is not implemented in the reference"
                              % GGML_TYPE_NAMES.get(ggml_type, ggml_type))


def _fmt_value(v, limit=8):
    if isinstance(v, np.ndarray):
        head = ", ".join(str(x) for x in v[:limit].tolist())
        return "[%s%s] (%d)" % (head, ", ..." if len(v) > limit else "", len(v))
    if isinstance(v, list):
        head = ", ".join(repr(x) for x in v[:limit])
        return "[%s%s] (%d)" % (head, ", ..." if len(v) > limit else "", len(v))
    return repr(v)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: gguf_read.py FILE.gguf   (dumps metadata and tensor directory)\n")
        return 2
    g = GGUFFile(argv[1])
    print("GGUF v%d, alignment %d, data at %d, %d kv, %d tensors"
          % (g.version, g.alignment, g.data_start, len(g.metadata), len(g.tensors)))
    for k, v in g.metadata.items():
        print("  %-50s %s" % (k, _fmt_value(v)))
    for t in g.tensors.values():
        print("  %-40s %-6s ne=%s" % (t.name, t.type_name, list(t.ne)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
