#!/usr/bin/python3
"""Writes kernels/cpu/iq_grids.h: the lattice IQ types' grid and sign tables, read out of
ggml's format definition (ggml/src/ggml-common.h of a llama.cpp checkout), values unchanged.

Usage: iq_grids_extract.py PATH/TO/ggml-common.h OUT.h

The tables are format data: a block stores indices into them, so they must be the
definition's, entry for entry.  Each table's length is checked against its declared size.
"""

import re
import sys

# ggml's name, element type, entries, our name
TABLES = [
    ("ksigns_iq2xs", "uint8_t", 128, "fg_iq_ksigns"),
    ("iq2xxs_grid", "uint64_t", 256, "fg_iq2xxs_grid"),
    ("iq2xs_grid", "uint64_t", 512, "fg_iq2xs_grid"),
    ("iq2s_grid", "uint64_t", 1024, "fg_iq2s_grid"),
    ("iq3xxs_grid", "uint32_t", 256, "fg_iq3xxs_grid"),
    ("iq3s_grid", "uint32_t", 512, "fg_iq3s_grid"),
    ("iq1s_grid", "uint64_t", 2048, "fg_iq1s_grid"),
]


def table(text, name):
    m = re.search(r"GGML_TABLE_BEGIN\(\s*\w+\s*,\s*%s\s*,[^)]*\)(.*?)GGML_TABLE_END\(\)" % name, text, re.S)
    if not m:
        raise SystemExit("%s: not found" % name)
    return [int(v, 0) for v in re.findall(r"0x[0-9a-fA-F]+|\d+", m.group(1))]


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    text = open(argv[1]).read()
    delta = re.search(r"#define\s+IQ1S_DELTA\s+([0-9.]+)f", text).group(1)
    out = ["/* iq_grids.h: the grid and sign tables of ggml's lattice IQ weight types (IQ2_XXS,",
           " * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), internal to kernels/cpu/quants.c",
           " * and kernels/cpu/matmul_quant_decode_iq.h.",
           " *",
           " * Format data, not code: a block stores indices into these tables, so they are the",
           " * format definition's own, entry for entry, from ggml/src/ggml-common.h (llama.cpp,",
           " * ggml-org; MIT licence) as its tables ksigns_iq2xs, iq2xxs_grid, iq2xs_grid, iq2s_grid,",
           " * iq3xxs_grid, iq3s_grid, iq1s_grid and its IQ1S_DELTA. Written by",
           " * tests/reference/iq_grids_extract.py; do not edit.",
           " *",
           " * A uint64_t grid entry is 8 values, a uint32_t one 4, value j in byte j (little-endian):",
           " * unsigned magnitudes for the IQ2 and IQ3 grids, int8 in {-1, 0, 1} for iq1s_grid.",
           " * fg_iq_ksigns[k] is the 7 sign bits k with an eighth making their count even. */",
           "#ifndef FG_IQ_GRIDS_H", "#define FG_IQ_GRIDS_H", "", "#include <stdint.h>", "",
           "#define FG_IQ1S_DELTA %sf" % delta, ""]
    for gname, ctype, n, ours in TABLES:
        vals = table(text, gname)
        if len(vals) != n:
            raise SystemExit("%s: %d entries, want %d" % (gname, len(vals), n))
        digits = {"uint8_t": 0, "uint32_t": 8, "uint64_t": 16}[ctype]
        per_line = {"uint8_t": 16, "uint32_t": 8, "uint64_t": 4}[ctype]
        fmt = "%d" if digits == 0 else "0x%%0%dx" % digits
        suffix = "ull" if ctype == "uint64_t" else ("u" if ctype == "uint32_t" else "")
        out.append("static const %s %s[%d] = {" % (ctype, ours, n))
        for i in range(0, n, per_line):
            out.append("    " + ", ".join((fmt % v) + suffix for v in vals[i:i + per_line]) + ",")
        out += ["};", ""]
    out += ["#endif", ""]
    with open(argv[2], "w") as f:
        f.write("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
