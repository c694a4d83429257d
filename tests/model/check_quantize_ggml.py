#!/usr/bin/python3
"""Usage: check_quantize_ggml.py BINS_DIR  (run by check_quantize_ggml.sh; the package's bins/linux-x64)

1. tiny-256.gguf with every quantizable tensor forced to each of the 13 types and the lattice
   type IQ3_S (rows of 256 columns; the others fall back to IQ4_NL), its Q4_K_M mix, and IQ2_S
   on token_embd and output (ggml's IQ2_S without weights: llama-quantize requires an imatrix for
   IQ2_S but on those two), written by flashgate-quantize: each block-typed tensor equals
   ggml_quantize_chunk of the F32 source in that type, every row.
2. tests/reference/quantize_ref.py (the numpy reference test_quantize's vectors come from) on
   the vectors' inputs equals ggml too, so the checked-in bytes are ggml's.
4. With an importance matrix (--imatrix; random llama-imatrix data written in both of its formats
   by tests/reference/imatrix_files.py, one expert of one tensor with no input): every type
   forced on every tensor of tiny-256, and the q2_k_s and IQ2 mixes (llama-quantize's choices,
   checked here by its rules), the iq3_xxs and iq3_xs mixes on tiny-256, an 8-layer model and the
   English model (not iq2_xs, iq2_m on the 8-layer one; and iq3_xxs, iq2_xxs, iq2_s on one with
   tied embeddings and a plain attn_q, which iq3_xxs puts in IQ2_S), and every type forced (IQ3_XXS and IQ2_* too: llama-quantize writes them
   only with an imatrix, and flashgate-quantize refuses them without one, checked here for the mixes
   against llama_model_quantize's refusal) on tiny-256: each tensor equals
   ggml_quantize_chunk of its F32 source with that tensor's imatrix, expert by expert (the weights
   of expert e start at e * ne[0]); a tensor without an entry, or token_embd with an entry of the
   wrong size, equals ggml without one. llama_model_quantize takes the imatrix as a C++
   std::unordered_map, which ctypes cannot build, so these files are not compared whole with it.
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
import imatrix_files  # noqa: E402

BIN = os.environ["FG_BIN"]
DATA = os.environ["FG_TEST_DATA"]
SRC = os.environ["FG_SOURCE_DIR"]
# flashgate-quantize's mixes and llama.cpp's LLAMA_FTYPE numbers for them
FTYPES = {"f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k_s": 11,
          "q3_k_m": 12, "q3_k_l": 13, "q4_k_s": 14, "q4_k_m": 15, "q5_k_s": 16, "q5_k_m": 17, "q6_k": 18,
          "iq4_nl": 25, "iq4_xs": 30, "mxfp4_moe": 38, "iq3_s": 26, "iq3_m": 27}
# mixes that need an importance matrix (IQ3_XXS tensors): compared tensor by tensor with one
IMATRIX_MIXES = ("q2_k_s", "iq3_xxs", "iq3_xs", "iq2_xxs", "iq2_xs", "iq2_s", "iq2_m")
IQ2_FTYPES = {"iq2_xxs": 19, "iq2_xs": 20, "iq2_s": 28, "iq2_m": 29}
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
# The lattice types (no numpy reference in quantize_ref.py): ggml id, values and bytes per block.
LATTICE = {"iq3_xxs": (18, 256, 98), "iq3_s": (21, 256, 110), "iq2_xxs": (16, 256, 66), "iq2_xs": (17, 256, 74),
           "iq2_s": (22, 256, 82)}
NAMES = {gid: name for name, (gid, _, _, _) in TYPES.items()}
NAMES.update({gid: name for name, (gid, _, _) in LATTICE.items()})
BLOCKS = {gid: (qk, nb) for gid, qk, nb, _ in TYPES.values()}
BLOCKS.update({gid: (qk, nb) for gid, qk, nb in LATTICE.values()})
FORCED = sorted(TYPES, key=lambda n: TYPES[n][0]) + list(LATTICE)  # every type --tensor-type forces
# llama-quantize writes these only with an imatrix (tensor_requires_imatrix)
PLAIN = [tn for tn in FORCED if tn not in ("iq3_xxs", "iq2_xxs", "iq2_xs", "iq2_s")]
failures = []


def ggml(gid, x, imatrix=None):
    """x (rows, n) float32 -> ggml's bytes for type gid, with importance weights imatrix (n,)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    qk, nb = BLOCKS[gid]
    out = np.zeros(x.size // qk * nb, dtype=np.uint8)
    w = None if imatrix is None else np.ascontiguousarray(imatrix, dtype=np.float32)
    lib.ggml_quantize_chunk(gid, x.ctypes.data, out.ctypes.data, 0, x.shape[0], x.shape[1],
                            None if w is None else w.ctypes.data)
    return out.tobytes()


def ggml_tensor(gid, x, ne, imatrix):
    """A tensor's bytes as llama-quantize writes them: per expert (ne[2]) with its slice of the
    imatrix."""
    experts = ne[2] if len(ne) > 2 else 1
    x = x.reshape(experts, -1, ne[0])
    return b"".join(ggml(gid, x[e], None if imatrix is None else imatrix[e * ne[0]:(e + 1) * ne[0]])
                    for e in range(experts))


def compare_file(src, out, label, weights=None, want_types=None):
    """weights: {tensor: imatrix} the file was written with; want_types: {tensor: type id} the mix
    must have chosen."""
    a, b = gguf_read.GGUFFile(src), gguf_read.GGUFFile(out)
    n = blocks = 0
    for name, want_type in (want_types or {}).items():
        if b.tensors[name].ggml_type != want_type:
            failures.append("%s: %s is %s, llama-quantize's rules choose %s" % (
                label, name, NAMES.get(b.tensors[name].ggml_type, b.tensors[name].ggml_type),
                NAMES.get(want_type, want_type)))
    for name, t in b.tensors.items():
        if t.ggml_type not in NAMES or t.ggml_type == a.tensors[name].ggml_type:
            continue
        x = np.frombuffer(bytes(a.raw_bytes(name)), dtype="<f4")
        w = (weights or {}).get(name)
        want, got = ggml_tensor(t.ggml_type, x, t.ne, w), bytes(b.raw_bytes(name))
        if got != want:
            k = next(i for i in range(len(want)) if got[i] != want[i])
            failures.append("%s: %s (%s) differs from ggml at byte %d" % (label, name, NAMES[t.ggml_type], k))
        n += 1
        blocks += len(want) // BLOCKS[t.ggml_type][1]
    a.close()
    b.close()
    return n, blocks


def quantizable(name, t):
    """The tensors llama-quantize quantizes in these models (tensor_allows_quantization)."""
    return (len([n for n in t.ne[1:] if n > 1]) >= 1 and name.endswith("weight") and "_norm.weight" not in name
            and "ffn_gate_inp" not in name)


def q2_k_s_types(g):
    """llama-quantize's Q2_K_S choices (llama_tensor_get_type_impl) for a deepseek2 model without
    attn_v-like tensors: output.weight Q6_K, ffn_down* of the first eighth of the blocks Q4_K,
    the rest Q2_K; then the row fallbacks (Q2_K -> Q4_0, Q4_K -> Q5_0, F16)."""
    n_layer = g.get("deepseek2.block_count")
    want = {}
    for name, t in g.tensors.items():
        if not quantizable(name, t):
            continue
        layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
        ty = 14 if is_output(g, name) else 12 if "ffn_down" in name and layer < n_layer // 8 else 10
        if t.ne[0] % 256:
            ty = {10: 2, 12: 6, 14: 8}[ty]
            if t.ne[0] % 32:
                ty = 1
        want[name] = ty
    return want


def is_output(g, name):
    """output.weight, or token_embd where it is tied to the output (no output.weight)."""
    return name == "output.weight" or (name == "token_embd.weight" and "output.weight" not in g.tensors)


def low_bit_types(g, mix):
    """llama-quantize's choices for the IQ2 mixes (llama_tensor_get_type_impl's low-bit branch) in
    these deepseek2 models (no attn_v-like or attn_k tensors): output.weight (or a tied token_embd)
    Q5_K; token_embd Q2_K (IQ2_XXS, IQ2_XS) or IQ3_S (IQ2_S, IQ2_M); the first n_layer/8 ffn_down* tensors in
    llama-quantize's order (layer, then name) Q2_K or IQ3_S; attn_output Q5_K with 8 experts, else
    IQ3_S for IQ2_S/IQ2_M; the rest the mix's type (IQ2_S's is IQ2_XS, IQ2_M's IQ2_S); then the
    row fallbacks (IQ* -> IQ4_NL, Q2_K -> Q4_0, Q5_K -> Q5_1, Q8_0, F16)."""
    more_bits = mix in ("iq2_s", "iq2_m")
    default = {"iq2_xxs": 16, "iq2_xs": 17, "iq2_s": 17, "iq2_m": 22}[mix]
    more = 21 if more_bits else 10
    n_layer, n_expert = g.get("deepseek2.block_count"), g.get("deepseek2.expert_count", 0)
    want, i_ffn_down = {}, 0
    order = sorted(g.tensors, key=lambda n: (int(n.split(".")[1]) if n.startswith("blk.") else -1, n))
    for name in order:
        t = g.tensors[name]
        if not quantizable(name, t):
            continue
        ty = default
        if is_output(g, name):
            ty = 13 if t.ne[0] % 256 == 0 else 8
        elif name == "token_embd.weight":
            ty = more
        elif "ffn_down" in name:
            ty = more if i_ffn_down < n_layer // 8 else default
            i_ffn_down += 1
        elif "attn_output.weight" in name:
            ty = 13 if n_expert == 8 else 21 if more_bits else default
        if t.ne[0] % BLOCKS[ty][0]:
            ty = {16: 20, 17: 20, 22: 20, 21: 20, 10: 2, 13: 7}[ty]
            if t.ne[0] % 32:
                ty = 1
        want[name] = ty
    return want


def run_quantize(args):
    p = subprocess.run([os.path.join(BIN, "flashgate-quantize"), "--quiet"] + args, capture_output=True, text=True)
    if p.returncode:
        failures.append("flashgate-quantize %s failed: %s" % (" ".join(args), p.stderr[-400:]))
    return p.returncode == 0


def imatrix_checks(tmp, src):
    rng = np.random.default_rng(18)
    models = [src, os.path.join(tmp, "tiny8-256.gguf"), os.path.join(SRC, "models", "flash-english.gguf"),
              os.path.join(tmp, "tiny-lite-256.gguf")]
    subprocess.run([os.path.join(BIN, "flashgate-modelgen"), "--preset", "tiny", "--seed", "2", "--embd", "256",
                    "--layers", "8", "--out", models[1]], check=True, capture_output=True)
    # tied embeddings (token_embd takes the output's rule) and a plain attn_q (IQ3_XXS puts it in IQ2_S)
    subprocess.run([os.path.join(BIN, "flashgate-modelgen"), "--preset", "tiny", "--seed", "3", "--embd", "256",
                    "--tied", "--no-q-lora", "--out", models[3]], check=True, capture_output=True)
    for mi, model in enumerate(models):
        g = gguf_read.GGUFFile(model)
        shapes = {name: (t.ne[0], t.ne[2] if len(t.ne) > 2 else 1) for name, t in g.tensors.items()
                  if quantizable(name, t) and name != "token_embd.weight"}
        expert = next(n for n in shapes if shapes[n][1] > 1)
        entries = imatrix_files.random_entries(shapes, rng, partial={expert: 1})
        weights = imatrix_files.gguf_weights(entries)
        # token_embd's entry of the wrong size: llama-quantize quantizes it without one
        emb = g.tensors["token_embd.weight"].ne[0] + 1
        entries["token_embd.weight"] = (np.ones((1, emb), np.float32), np.ones(1, np.float32))
        gfile, dfile = os.path.join(tmp, "imatrix.gguf"), os.path.join(tmp, "imatrix.dat")
        imatrix_files.write_gguf(gfile, entries)
        legacy = {n: (int(rng.integers(1, 100)), s) for n, (s, _) in entries.items()}
        imatrix_files.write_legacy(dfile, legacy)
        lweights = imatrix_files.legacy_weights(legacy)
        del lweights["token_embd.weight"]
        out = os.path.join(tmp, "im-out.gguf")
        label = os.path.basename(model)
        runs = []
        if mi == 0:
            # token_embd's entry does not fit: without weights ggml's IQ2_XXS and IQ2_XS quantizers
            # abort (flashgate-quantize refuses, check_quantize.py), so it stays Q8_0 for those
            runs += [("%s imatrix %s" % (label, tn), (["--tensor-type", "token_embd=q8_0"] if tn in
                      ("iq2_xxs", "iq2_xs") else []) + ["--tensor-type", ".=" + tn], "q8_0", gfile, weights, None)
                     for tn in FORCED]
            runs += [("%s imatrix.dat %s" % (label, tn), ["--tensor-type", ".=" + tn], "q8_0", dfile, lweights, None)
                     for tn in ("q2_K", "q4_K", "iq4_xs", "q5_1")]
        runs.append(("%s q2_k_s mix" % label, [], "q2_k_s", gfile, weights, q2_k_s_types(g)))
        runs.append(("%s q2_k_s mix (.dat)" % label, [], "q2_k_s", dfile, lweights, q2_k_s_types(g)))
        attn_q = {n: 22 for n in g.tensors if n.endswith("attn_q.weight")}  # IQ3_XXS's attn_q: IQ2_S
        runs += [("%s %s mix" % (label, mix), [], mix, gfile, weights, low_bit_types(g, mix) if mix in IQ2_FTYPES
                  else attn_q if mix == "iq3_xxs" else None) for mix in IMATRIX_MIXES[1:]]
        g.close()
        if mi == 1:  # the 8-layer model adds the first ffn_down's rule: iq2_xs, iq2_m choose as xxs, s
            runs = [r for r in runs if r[2] not in ("iq2_xs", "iq2_m")]
        if mi == 3:  # the tied model: the rules it adds, at a third of the cost
            runs = [r for r in runs if r[2] in ("iq3_xxs", "iq2_xxs", "iq2_s")]
        for label, extra, ftype, imfile, w, want_types in runs:
            before = len(failures)
            if os.path.exists(out):
                os.remove(out)
            if not run_quantize(["--imatrix", imfile] + extra + [model, out, ftype]):
                continue
            n, blocks = compare_file(model, out, label, w, want_types)
            print("%-44s %3d tensors, %7d blocks: %s" % (label, n, blocks, "identical to ggml with the imatrix"
                                                         if len(failures) == before else "see failures"))


def main():
    src = os.path.join(DATA, "tiny-256.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(tn, ["--tensor-type", ".=" + tn], "q8_0") for tn in PLAIN]
        runs.append(("q4_k_m mix", [], "q4_k_m"))
        runs.append(("iq2_s on token_embd, output", ["--tensor-type", "token_embd=iq2_s", "--tensor-type",
                                                     "output=iq2_s"], "q8_0"))
        for label, extra, ftype in runs:
            out = os.path.join(tmp, "out.gguf")
            subprocess.run([os.path.join(BIN, "flashgate-quantize"), "--quiet"] + extra + [src, out, ftype],
                           check=True, capture_output=True)
            n, blocks = compare_file(src, out, label)
            print("%-28s %3d tensors, %7d blocks: %s" % (label, n, blocks, "identical to ggml" if not failures
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
        p = subprocess.run([os.path.join(BIN, "flashgate-quantize"), "--quiet", src, os.path.join(tmp, "x.gguf"),
                            "iq3_xxs"], capture_output=True, text=True)
        if p.returncode == 0 or "needs importance weights" not in p.stderr:
            failures.append("flashgate-quantize iq3_xxs without --imatrix: rc %d, %s (llama-quantize refuses it)"
                            % (p.returncode, p.stderr[-200:]))
        # the IQ2 mixes without an imatrix: both refuse, naming the same tensor (the English model's
        # rows of 128 fall back to IQ4_NL, but nextn.eh_proj's 256 stay IQ2)
        english = os.path.join(SRC, "models", "flash-english.gguf")
        for mix, ftype in IQ2_FTYPES.items():
            p = subprocess.run([os.path.join(BIN, "flashgate-quantize"), "--quiet", english,
                                os.path.join(tmp, "x.gguf"), mix], capture_output=True, text=True)
            r = subprocess.run([sys.executable, "-c", LLAMA_QUANTIZE, os.path.join(sys.argv[1], "libllama.v0.5.0.so"),
                                english, os.path.join(tmp, "y.gguf"), str(ftype)], capture_output=True, text=True)
            named = [ln.split(":")[1].strip() for ln in r.stderr.splitlines() if "offending tensor:" in ln]
            if p.returncode == 0 or r.returncode == 0 or not named or "tensor %s:" % named[0] not in p.stderr:
                failures.append("%s without --imatrix: flashgate-quantize rc %d (%s), llama_model_quantize rc %d "
                                "naming %s: both must refuse the same tensor" % (mix, p.returncode, p.stderr[-200:],
                                                                                 r.returncode, named))
        imatrix_checks(tmp, src)
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
