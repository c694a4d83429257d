#!/usr/bin/python3
"""flashgate-quantize end to end (docs/engine.md, "Weight types: making them").

1. bytes: tiny-256.gguf (F32, width 256) with every quantizable tensor forced to each type
   (--tensor-type '.=TYPE'); every tensor written in a block type equals, on its first rows,
   what tests/reference/quantize_ref.py (numpy, ggml's algorithms) writes for the F32 values;
   every row fallback is reported on stderr.
2. round trip through files: TYPE -> f32 (--allow-requantize) -> TYPE gives the same bytes
   for the types whose requantization is a fixed point (test_quantize says why).
3. mixes: Q4_K_M and Q5_K_M of tiny-256 and of the trained models/flash-english.gguf follow
   llama-quantize's rules (output Q6_K, the use_more_bits ffn_down layers one step up, the
   8-expert attn_output rule, legacy fallbacks for short rows), load in the engine and generate;
   their logits against the F32 model's stay under the bounds below.
4. bad input: unknown and unwritable types, bad overrides, a file that is not GGUF, a missing
   file, requantizing without --allow-requantize: clear errors, exit 1 or 2, no output file.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import gguf_read  # noqa: E402
from deepseek2_ref import read_engine_logits  # noqa: E402
from quantize_ref import TYPES, quantize  # noqa: E402

BIN = os.environ["FG_BIN"]
DATA = os.environ["FG_TEST_DATA"]
SRC = os.environ["FG_SOURCE_DIR"]
ROWS = 8  # rows per tensor compared with the numpy reference (it is slow for Q3_K)
EXACT = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "mxfp4"]

# Logit bounds against the F32 model: (median over positions of max |logit - F32 logit|, max over
# positions, floor of top-1 agreement), 32-34 prompt positions, F32 KV cache. Measured 2026-12-02
# (x86-64, AVX-512), with q8_0 / q6_k / q4_0 for scale:
#   english (trained, 475 steps): q5_k_m 0.168 (max 0.64, top-1 1.00), q4_k_m 0.186
#     (max 2.61, top-1 0.97); the earlier 157-step model: q8_0 0.046, q5_k_m 0.133 (max 0.55),
#     q4_k_m 0.184 (max 1.29), q4_0 0.344. Its rows are 128 wide, so most K-type
#     tensors fall back to Q5_0/Q5_1/Q8_0 as llama-quantize's do.
#   tiny-256 (random weights; logit std 3.0): q8_0 0.28, q6_k 0.82, q5_k_m 2.7 (max 12.8),
#     q4_k_m 3.6 (max 15.5), q4_0 4.6. A random network amplifies weight error and flips expert
#     choices, so the shift grows with each type's rms weight error (test_quantize: 0.0024,
#     0.0081, 0.017, 0.033, 0.039) to the logits' own spread; these bounds only catch a file
#     that does not compute. Whether the engine reads these blocks right is reference_tiny-q4_k_m
#     (the float64 reference on the same file).
# Bounds: about 1.6-2x the measured values.
BOUNDS = {
    ("tiny-256", "q4_k_m"): (6.0, 25.0, 0.25), ("tiny-256", "q5_k_m"): (4.5, 22.0, 0.35),
    ("english", "q4_k_m"): (0.35, 4.5, 0.70), ("english", "q5_k_m"): (0.30, 1.1, 0.85),
}

failures = []


def fail(msg):
    print("FAIL: " + msg)
    failures.append(msg)


def quant(*args, rc=0):
    p = subprocess.run([os.path.join(BIN, "flashgate-quantize")] + list(args), capture_output=True, text=True)
    if p.returncode != rc:
        fail("flashgate-quantize %s: exit %d (expected %d)\n%s%s" % (" ".join(args), p.returncode, rc, p.stdout,
                                                                      p.stderr))
    return p


def type_name(t):
    return gguf_read.GGML_TYPE_NAMES[t].lower()


def check_bytes(src, out, label):
    """Every block-typed tensor of out against quantize_ref on src's F32 rows."""
    a, b = gguf_read.GGUFFile(src), gguf_read.GGUFFile(out)
    seen = set()
    for name, t in b.tensors.items():
        s = a.tensors[name]
        tn = type_name(t.ggml_type)
        if t.ggml_type == s.ggml_type or tn not in TYPES:
            continue
        assert s.ggml_type == 0, name
        ne0 = t.ne[0]
        rows = min(ROWS, int(np.prod(t.ne[1:])))
        x = np.frombuffer(a.raw_bytes(name), dtype="<f4")[:rows * ne0]
        row_bytes = t.nbytes // int(np.prod(t.ne[1:]))
        want = quantize(tn, x)
        got = bytes(b.raw_bytes(name)[:rows * row_bytes])
        if got != want:
            k = next(i for i in range(len(want)) if got[i] != want[i])
            fail("%s: %s (%s) differs from the numpy reference at byte %d" % (label, name, tn, k))
        seen.add(tn)
    a.close()
    b.close()
    return seen


def types_of(path):
    g = gguf_read.GGUFFile(path)
    r = {n: type_name(t.ggml_type) for n, t in g.tensors.items()}
    g.close()
    return r


def test_bytes(tmp, src):
    covered = set()
    for tn in sorted(TYPES, key=lambda n: TYPES[n][0]):
        out = os.path.join(tmp, "all-%s.gguf" % tn)
        p = quant("--quiet", "--tensor-type", ".=" + tn, src, out, "q8_0")
        if p.returncode:
            continue
        seen = check_bytes(src, out, "tiny-256 ." + "=" + tn)
        covered |= seen
        # every tensor whose rows the type's blocks do not divide is reported
        qk = TYPES[tn][1]
        g = gguf_read.GGUFFile(src)
        short = [n for n, t in g.tensors.items() if t.ne[0] % qk and len([d for d in t.ne if d > 1]) >= 2
                 and n.endswith("weight") and "_norm" not in n and "ffn_gate_inp" not in n]
        g.close()
        for n in short:
            if "fallback: %s:" % n not in p.stderr:
                fail("%s: no fallback reported for %s (rows of %s)" % (tn, n, tn))
        print("ok bytes %-7s: block tensors equal the numpy reference (%d fallbacks reported)"
              % (tn, p.stderr.count("fallback:")))
    missing = set(TYPES) - covered
    if missing:
        fail("types never written: %s" % sorted(missing))


def test_round_trip(tmp, src):
    for tn in EXACT:
        first = os.path.join(tmp, "all-%s.gguf" % tn)
        if not os.path.exists(first):
            continue
        f32 = os.path.join(tmp, "rt-%s-f32.gguf" % tn)
        again = os.path.join(tmp, "rt-%s.gguf" % tn)
        quant("--quiet", "--allow-requantize", first, f32, "f32")
        quant("--quiet", "--allow-requantize", "--tensor-type", ".=" + tn, f32, again, "q8_0")
        a, b = gguf_read.GGUFFile(first), gguf_read.GGUFFile(again)
        n = 0
        for name, t in a.tensors.items():
            if type_name(t.ggml_type) == tn:
                n += 1
                if bytes(a.raw_bytes(name)) != bytes(b.raw_bytes(name)):
                    fail("round trip %s: %s changed" % (tn, name))
        a.close()
        b.close()
        print("ok round trip %-5s: %d tensors identical after -> f32 -> %s" % (tn, n, tn))


def logits_of(model, prompt, tmp, tag):
    path = os.path.join(tmp, tag + ".fglg")
    cmd = [os.path.join(BIN, "flashgate-generate"), "--model", model, "-n", "1", "--kv-format", "f32",
           "--threads", "2", "--logits-out", path] + prompt
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        fail("%s does not generate: %s" % (model, p.stderr.strip()[-400:]))
        return None
    return read_engine_logits(path)[1]


def check_mix(tmp, model, label, mix, prompt, base):
    out = os.path.join(tmp, "%s-%s.gguf" % (label, mix))
    p = quant(model, out, mix)
    if p.returncode:
        return
    types = types_of(out)
    a, b = gguf_read.GGUFFile(model), gguf_read.GGUFFile(out)
    moved = {"general.file_type", "general.quantization_version"}
    ka = [(k, repr(v)) for k, v in a.metadata.items() if k not in moved]
    kb = [(k, repr(v)) for k, v in b.metadata.items() if k not in moved]
    if ka != kb or b.metadata.get("general.file_type") != {"q4_k_m": 15, "q5_k_m": 17}[mix] \
            or b.metadata.get("general.quantization_version") != 2:
        fail("%s %s: keys not copied unchanged (or file_type/quantization_version wrong)" % (label, mix))
    def llama_order(n):  # llama-quantize's: the block number of "blk.N." (others first), then the name
        parts = n.split(".")
        layer = int(parts[1]) if parts[0] == "blk" and len(parts) > 2 and parts[1].isdigit() else -1
        return (layer, n.encode())
    if list(b.tensors) != sorted(a.tensors, key=llama_order):
        fail("%s %s: tensors not in llama-quantize's order" % (label, mix))
    a.close()
    b.close()
    g = gguf_read.GGUFFile(model)
    n_layer = g.get("deepseek2.block_count")
    n_expert = g.get("deepseek2.expert_count", 0)
    shapes = {n: t.ne for n, t in g.tensors.items()}
    g.close()
    top = {"q4_k_m": "q6_k", "q5_k_m": "q6_k"}[mix]
    base_t = {"q4_k_m": "q4_k", "q5_k_m": "q5_k"}[mix]
    legacy = {"q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}

    def expect(want, ne0):
        return want if ne0 % 256 == 0 else legacy[want]

    def use_more_bits(i, n):
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

    checks = {"output.weight": "q6_k" if shapes["output.weight"][0] % 256 == 0 else "q8_0"}
    for n, ne in shapes.items():
        if "ffn_down" in n and n.endswith("weight"):
            layer = int(n.split(".")[1])
            checks[n] = expect(top if use_more_bits(layer, n_layer) else base_t, ne[0])
        if n.endswith("attn_q_a.weight") or n.endswith("ffn_gate_exps.weight"):
            checks[n] = expect(base_t, ne[0])
        if n.endswith("attn_output.weight") and n_expert == 8 and mix == "q4_k_m":
            checks[n] = expect("q5_k", ne[0])
        if n.endswith("_norm.weight") or n.endswith("ffn_gate_inp.weight"):
            checks[n] = "f32"
    bad = [(n, types[n], w) for n, w in checks.items() if types[n] != w]
    for n, got, want in bad:
        fail("%s %s: %s is %s, llama-quantize's rule gives %s" % (label, mix, n, got, want))
    ql = logits_of(out, prompt, tmp, "%s-%s" % (label, mix))
    if ql is None or base is None:
        return
    d = np.abs(ql.astype(np.float64) - base.astype(np.float64)).max(axis=1)
    top1 = float(np.mean(ql.argmax(axis=1) == base.argmax(axis=1)))
    med, mx = float(np.median(d)), float(d.max())
    bmed, bmax, btop = BOUNDS[(label, mix)]
    ok = med <= bmed and mx <= bmax and top1 >= btop
    (print if ok else fail)("%s %s %s: %d tensor types as llama-quantize chooses; logits vs F32 over %d positions: "
                            "median max|d| %.3f (bound %.2f), max %.3f (bound %.2f), top-1 agreement %.3f (floor %.2f); "
                            "%d fallbacks" % ("ok" if ok else "", label, mix, len(checks), len(d), med, bmed, mx,
                                              bmax, top1, btop, p.stderr.count("fallback:")))


def test_bad_input(tmp, src):
    out = os.path.join(tmp, "never.gguf")
    cases = [
        (["x.gguf", out, "q4_k_z"], 2, "unknown type 'q4_k_z'; flashgate-quantize writes: f32 f16 bf16 q8_0"),
        (["x.gguf", out, "iq1_s"], 2, "type 'iq1_s' cannot be written: the IQ1 lattice types"),
        # IQ2 tensors need an importance matrix (llama-quantize's tensor_requires_imatrix) ...
        ([src, out, "iq2_xxs"], 1, "iq2_xxs in a iq2_xxs file needs importance weights and no --imatrix"),
        ([src, out, "iq2_s"], 1, "iq2_xs in a iq2_s file needs importance weights and no --imatrix"),
        (["--tensor-type", ".=iq2_s", src, out, "q8_0"], 1, "iq2_s in a q8_0 file needs importance weights"),
        # ... and ggml's IQ2_XXS and IQ2_XS quantizers even on token_embd and output, where
        # llama-quantize lets them through and ggml aborts
        (["--tensor-type", "output=iq2_xxs", src, out, "q8_0"], 1,
         "tensor output.weight: iq2_xxs cannot be written without importance weights"),
        (["--tensor-type", "token_embd=iq2_xs", src, out, "q8_0"], 1,
         "tensor token_embd.weight: iq2_xs cannot be written without importance weights"),
        (["x.gguf", out, "q2_k_s"], 2, "need an importance matrix"),
        (["--tensor-type", "ffn_down_exps", src, out, "q4_k_m"], 2, "is not PATTERN=TYPE"),
        (["--tensor-type", "=q6_k", src, out, "q4_k_m"], 2, "has an empty pattern"),
        (["--tensor-type", "ffn_(down=q6_k", src, out, "q4_k_m"], 2, "is not a regular expression"),
        (["--tensor-type", "ffn_down=q7_k", src, out, "q4_k_m"], 2, "unknown type 'q7_k'; types written:"),
        (["--tensor-type", "(.?){255}{255}=q6_k", src, out, "q4_k_m"], 2, "repeats too much"),
        (["--tensor-type", ".{255}{255}{255}=q6_k", src, out, "q4_k_m"], 2, "repeats too much"),
        (["--tensor-type", "(" * 40 + "a" + ")" * 40 + "=q6_k", src, out, "q4_k_m"], 2, "nests groups more than 32"),
        (["--tensor-type", "ffn_down=tq1_0", src, out, "q4_k_m"], 2, "is not written by this build"),
        (["--threads", "0", src, out, "q4_k_m"], 2, "--threads wants a number"),
        ([src, out], 2, "usage:"),
        ([os.path.join(SRC, "README.md"), out, "q4_k_m"], 1, "not a GGUF file"),
        ([os.path.join(tmp, "missing.gguf"), out, "q4_k_m"], 1, "missing.gguf"),
        ([os.path.join(tmp, "all-q8_0.gguf"), out, "q4_0"], 1, "pass --allow-requantize"),
    ]
    for args, rc, text in cases:
        p = quant(*args, rc=rc)
        if text not in p.stderr + p.stdout:
            fail("flashgate-quantize %s: message lacks %r:\n%s" % (" ".join(args), text, p.stderr))
        if os.path.exists(out):
            fail("flashgate-quantize %s left %s behind" % (" ".join(args), out))
    print("ok bad input: %d cases give clear errors" % len(cases))


def main():
    src = os.path.join(DATA, "tiny-256.gguf")
    english = os.path.join(SRC, "models", "flash-english.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        test_bytes(tmp, src)
        test_round_trip(tmp, src)
        tiny_prompt = ["--tokens", ",".join(str((i * 37 + 11) % 500) for i in range(32))]
        en_prompt = ["-p", "The old man said that he would never go back to the sea, for the sea had taken "
                     "everything he loved and given him nothing but"]
        for label, model, prompt in (("tiny-256", src, tiny_prompt), ("english", english, en_prompt)):
            base = logits_of(model, prompt, tmp, label + "-f32")
            for mix in ("q4_k_m", "q5_k_m"):
                check_mix(tmp, model, label, mix, prompt, base)
        test_bad_input(tmp, src)
    print("check_quantize: %s (%d failures)" % ("FAIL" if failures else "ok", len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
