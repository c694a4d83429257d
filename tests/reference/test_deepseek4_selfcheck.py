#!/usr/bin/python3
"""Self-check of the deepseek4 numpy reference; needs no engine.

Writes the tiny fixture (make_v4_fixture.py) into a temp dir and checks:
  * one pass over a 300-token prompt + 32 greedy decode steps == the same tokens appended one
    at a time to an explicit cache (logits and MTP drafts, <= 1e-9), with HCA emitting at
    least two rows and the indexer's top-k dropping rows; and that the comparison notices a
    wrong window or a missing CSA overlap (negative controls);
  * chunks of 7 (and an irregular chunk schedule) == one pass;
  * each named validation error on a mutated file;
  * hash layers route through tid2eid (not the learned top-k) and the table matters;
  * MXFP4 dequantisation of hand-built blocks == values written out from the format;
  * the math pieces that consistency cannot catch: Sinkhorn is doubly stochastic, inverse
    RoPE undoes RoPE, the YaRN ramp sits where the formula puts it, the top-k tie rule.
Prints `N passed, M failed` and exits non-zero when anything failed.

The checks that need only a model (cache, chunks, causality, hash routing) run on another
file after use_model(path): test_v4_generated.py runs them on flashgate-modelgen's v4-tiny.
"""

import os
import shutil
import struct
import sys
import tempfile
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import gguf_read  # noqa: E402
import deepseek4_ref as ref  # noqa: E402
import make_v4_fixture as fx  # noqa: E402

RESULTS = []
TMP = None
N_PROMPT = 300
N_DECODE = 32
TOL = 1e-9


def check(name, cond, detail=""):
    RESULTS.append((name, bool(cond)))
    sys.stdout.write("%s %s%s\n" % ("ok  " if cond else "FAIL", name, (" (%s)" % detail) if detail else ""))


def run(fn):
    try:
        fn()
    except Exception:
        check(fn.__name__ + " raised", False, traceback.format_exc())


def tmp(name):
    return os.path.join(TMP, name)


def maxabs(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


_MODEL = {}


def use_model(path):
    """Points the model checks at the file at path instead of the fixture."""
    _MODEL.clear()
    _MODEL["m"] = ref.Model(path)
    return _MODEL["m"]


def summary():
    """(passed, failed) over every check so far."""
    n_pass = sum(1 for r in RESULTS if r[1])
    return n_pass, len(RESULTS) - n_pass


def fixture():
    if "m" not in _MODEL:
        fx.make_fixture(tmp("v4.gguf"))
        _MODEL["m"] = ref.Model(tmp("v4.gguf"))
    return _MODEL["m"]


def prompt(m, n, seed=7):
    return [int(t) for t in np.random.default_rng(seed).integers(0, m.hp.V, n)]


def run_steps(m, tokens, schedule, trace=None):
    """Appends tokens in chunks of the given sizes (cycled); returns logits (n, V), MTP (n, V)."""
    cache = m.new_cache()
    logits, mtp, i, k = [], [], 0, 0
    while i < len(tokens):
        size = schedule[k % len(schedule)]
        lg, dr = m.step(cache, tokens[i:i + size], trace)
        logits.append(lg)
        mtp.append(dr)
        i += size
        k += 1
    return np.concatenate(logits), np.concatenate(mtp)


def test_cache_vs_one_pass():
    m = fixture()
    toks = prompt(m, N_PROMPT)
    cache = m.new_cache()
    trace_c = {}
    lg, dr = [], []
    for t in toks:                                    # the prompt, one token at a time
        a, b = m.step(cache, [t], trace_c)
        lg.append(a)
        dr.append(b)
    for _ in range(N_DECODE):                         # greedy decode from the cache
        nxt = int(np.argmax(lg[-1][-1]))
        toks.append(nxt)
        a, b = m.step(cache, [nxt], trace_c)
        lg.append(a)
        dr.append(b)
    lg, dr = np.concatenate(lg), np.concatenate(dr)
    trace_f = {}
    full, mtp = m.forward(toks, trace_f)
    _MODEL["tokens"], _MODEL["full"], _MODEL["mtp"] = toks, full, mtp
    check("cache: %d prompt + %d decode tokens, logits one pass == cached" % (N_PROMPT, N_DECODE),
          full.shape == lg.shape and maxabs(full, lg) <= TOL, "max |d| %.3g" % maxabs(full, lg))
    check("cache: MTP drafts one pass == cached", mtp.shape == dr.shape and maxabs(mtp, dr) <= TOL,
          "max |d| %.3g" % maxabs(mtp, dr))
    check("cache: logits finite and O(1)", np.isfinite(full).all() and 0.1 < full.std() < 10,
          "std %.3g" % full.std())
    hca = [il for il in range(m.hp.n_layer) if m.hp.ratios[il] == ref.HCA]
    csa = [il for il in range(m.hp.n_layer) if m.hp.ratios[il] == ref.CSA]
    emitted = trace_f.get("rows_emitted", {})
    check("cache: HCA emitted at least two rows in every HCA layer",
          hca and all(emitted.get(il, 0) >= 2 for il in hca), str(emitted))
    check("cache: both paths emitted the same rows", trace_c.get("rows_emitted_cached") == emitted,
          "%s vs %s" % (trace_c.get("rows_emitted_cached"), emitted))
    check("cache: the indexer's top-k dropped rows (both paths, same count)",
          csa and trace_f.get("rows_dropped", 0) > 0 and trace_f.get("rows_dropped") == trace_c.get("rows_dropped"),
          "%s / %s" % (trace_f.get("rows_dropped"), trace_c.get("rows_dropped")))


def test_causality():
    """Changing the last token moves only the last row of the logits and of the MTP drafts."""
    m = fixture()
    toks = prompt(m, 140, seed=13)
    other = toks[:-1] + [(toks[-1] + 1) % m.hp.V]
    a, am = m.forward(toks)
    b, bm = m.forward(other)
    check("causality: rows before the changed token are identical (trunk and MTP)",
          maxabs(a[:-1], b[:-1]) == 0.0 and maxabs(am[:-1], bm[:-1]) == 0.0)
    check("causality: the last row moves (trunk and MTP)", maxabs(a[-1], b[-1]) > 1e-6 and maxabs(am[-1], bm[-1]) > 1e-6)


def test_negative_controls():
    """The cache comparison must notice a wrong window and a missing CSA overlap."""
    m = fixture()
    toks = prompt(m, 140, seed=11)
    full, _ = m.forward(toks)
    saved = m.hp.window
    try:
        m.hp.window = saved + 1                       # only the cached path reads it per step
        cached, _ = run_steps(m, toks, [1])
    finally:
        m.hp.window = saved
    full2, _ = m.forward(toks)
    check("control: a window one row too long in the cache is detected", maxabs(full, cached) > 1e-6,
          "max |d| %.3g" % maxabs(full, cached))
    check("control: one pass is repeatable", maxabs(full, full2) == 0.0)
    orig = ref.Model.pool_row

    def no_overlap(self, il, j, cur, prev=None, indexer=False):
        return orig(self, il, j, cur, None, indexer)
    ref.Model.pool_row = no_overlap
    try:
        cached, _ = run_steps(m, toks, [1])
    finally:
        ref.Model.pool_row = orig
    check("control: CSA rows without the previous block's half are detected", maxabs(full, cached) > 1e-6,
          "max |d| %.3g" % maxabs(full, cached))


def test_chunked():
    m = fixture()
    if "tokens" not in _MODEL:
        check("chunked: needs the cache test's tokens", False)
        return
    toks, full, mtp = _MODEL["tokens"], _MODEL["full"], _MODEL["mtp"]
    for schedule in ([7], [1, 128, 3, 64, 5, 200]):
        lg, dr = run_steps(m, toks, schedule)
        check("chunked: chunks %s == one pass (logits and MTP)" % schedule,
              maxabs(full, lg) <= TOL and maxabs(mtp, dr) <= TOL,
              "max |d| %.3g / %.3g" % (maxabs(full, lg), maxabs(mtp, dr)))


def _expect_error(label, name, **mut):
    path = tmp("bad_%s.gguf" % name)
    fx.make_fixture(path, **mut)
    try:
        ref.Model(path)
        check("validation: %s -> %s" % (label, name), False, "accepted")
    except ref.V4Error as e:
        check("validation: %s -> %s" % (label, name), e.name == name and name in str(e), str(e))


def test_validation():
    a = "deepseek4."
    _expect_error("ratio 64 in the ratio array", "bad_compress_ratio", ratios=[0, 4, 64, 4])
    _expect_error("hyper_connection.count 3", "hc_count", hc=3)
    _expect_error("expert_gating_func 2", "gating_func", gating=2)
    _expect_error("4 heads in 3 output groups", "head_groups",
                  meta={a + "attention.output_group_count": (fx.T_U32, 3)})
    _expect_error("key_length 32, value_length 16", "key_value_length",
                  meta={a + "attention.value_length": (fx.T_U32, 16)})
    _expect_error("hash layer 0 without tid2eid", "tid2eid_missing",
                  omit_tensors=["blk.0.ffn_gate_tid2eid.weight"])

    def bad_id(ids):
        ids = np.array(ids)
        ids[5, 0] = fx.TINY["n_expert"]
        return ids
    _expect_error("tid2eid holding expert id 8 of 8", "tid2eid_range",
                  tensor_edits={"blk.0.ffn_gate_tid2eid.weight": bad_id})
    _expect_error("4 ratios for 5 blocks", "compress_ratios_short",
                  meta={a + "attention.compress_ratios": (fx.T_ARR, (fx.T_I32, [0, 4, 128, 4]))})
    path = tmp("ok_scalar_clamp.gguf")
    fx.make_fixture(path, clamp_scalar=True)
    m = ref.Model(path)
    check("validation: a scalar swiglu_clamp_exp is accepted for every layer",
          m.hp.clamp_exp == [10.0] * m.hp.n_layer_all and m.hp.clamp_shexp == m.hp.clamp_exp)


def test_hash_routing():
    """Hash layers take tid2eid[token]; the first other layer the top-k of p + bias."""
    m = fixture()
    toks = prompt(m, 48, seed=5)
    trace = {}
    m.forward(toks, trace)
    if m.hp.n_hash > 0:
        table = m.g.tensor_int("blk.0.ffn_gate_tid2eid.weight")                 # (V, K)
        routes = trace["routing"][0]
        check("hash: layer 0 takes tid2eid[token] for every token",
              all(sorted(c) == sorted(table[t].tolist()) for (c, _), t in zip(routes, toks)))
        differ = sum(1 for c, p in routes if sorted(c) != sorted(ref.top_indices(p, m.hp.K).tolist()))
        check("hash: for some tokens that differs from the learned top-k", differ > 0,
              "%d of %d" % (differ, len(toks)))
    il = m.hp.n_hash
    learned = trace["routing"][il]
    bias = m.w("blk.%d.exp_probs_b.bias" % il, [m.hp.X])
    check("hash: layer %d (not hashed) takes the top-k of p + exp_probs_b" % il,
          all(sorted(c) == sorted(ref.top_indices(p + bias, m.hp.K).tolist()) for c, p in learned))


def test_hash_table_matters():
    m = fixture()
    toks = prompt(m, 48, seed=5)
    base, _ = m.forward(toks)
    path = tmp("rolled.gguf")
    fx.make_fixture(path, tensor_edits={"blk.0.ffn_gate_tid2eid.weight": lambda ids: (np.array(ids) + 1) % 8})
    rolled, _ = ref.Model(path).forward(toks)
    check("hash: another tid2eid table changes the logits", maxabs(base, rolled) > 1e-3,
          "max |d| %.3g" % maxabs(base, rolled))


def test_mxfp4():
    # block 0: e = 128 (scale 2); byte j = code j (low nibble, value j) | code 15-j (high, value j+16)
    # block 1: e = 124 (scale 1/8); every byte 0x71: low code 1 (+0.5), high code 7 (+6)
    blk0 = bytes([128]) + bytes([j | ((15 - j) << 4) for j in range(16)])
    blk1 = bytes([124]) + bytes([0x71] * 16)
    e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    want0 = [2.0 * e2m1[j] for j in range(16)] + [2.0 * e2m1[15 - j] for j in range(16)]
    want0_literal = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                     -12, -8, -6, -4, -3, -2, -1, 0, 12, 8, 6, 4, 3, 2, 1, 0]
    want1 = [0.5 / 8] * 16 + [6.0 / 8] * 16
    got = gguf_read.dequantize(np.frombuffer(blk0 + blk1, dtype=np.uint8), gguf_read.GGML_TYPE_MXFP4, [64])
    check("mxfp4: the value table matches the E2M1 definition", want0 == [float(v) for v in want0_literal])
    check("mxfp4: hand-built blocks dequantise to the hand-written values",
          got.tolist() == want0 + want1, "" if got.tolist() == want0 + want1 else str(got.tolist()))
    # the same through a file: one {64, 2} MXFP4 tensor, rows = the two blocks swapped
    path = tmp("mxfp4.gguf")
    raw = blk0 + blk1 + blk1 + blk0
    head = struct.pack("<4sIQQ", b"GGUF", 3, 1, 1)
    head += fx._str("general.architecture") + struct.pack("<I", fx.T_STR) + fx._str("none")
    head += fx._str("t") + struct.pack("<I", 2) + struct.pack("<QQ", 64, 2) + struct.pack("<IQ", 39, 0)
    head += b"\0" * ((-len(head)) % 32)
    with open(path, "wb") as f:
        f.write(head + raw)
    g = gguf_read.GGUFFile(path)
    t = g.tensor_f64("t")
    check("mxfp4: a {64, 2} tensor reads as 2 rows of 2 blocks",
          t.shape == (2, 64) and t[0].tolist() == want0 + want1 and t[1].tolist() == want1 + want0)
    g.close()


def test_fixture_types():
    """The fixture exercises every type the reader decodes; --all-f32 writes F32 (and I32) only."""
    import subprocess
    fixture()
    g = gguf_read.GGUFFile(tmp("v4.gguf"))
    kinds = sorted({t.type_name for t in g.tensors.values()})
    experts = {g.tensors["blk.1.ffn_%s_exps.weight" % w].type_name for w in ("gate", "up", "down")}
    g.close()
    check("fixture: BF16, F32, I32, MXFP4 and Q8_0 tensors, MXFP4 experts",
          kinds == ["BF16", "F32", "I32", "MXFP4", "Q8_0"] and experts == {"MXFP4"}, str(kinds))
    r = subprocess.run([sys.executable, os.path.join(HERE, "make_v4_fixture.py"), tmp("f32.gguf"), "--all-f32"],
                       capture_output=True, text=True, timeout=120)
    ok = r.returncode == 0
    if ok:
        g = gguf_read.GGUFFile(tmp("f32.gguf"))
        kinds = sorted({t.type_name for t in g.tensors.values()})
        g.close()
        m = ref.Model(tmp("f32.gguf"))
        toks = prompt(m, 40, seed=2)
        full, mtp = m.forward(toks)
        lg, dr = run_steps(m, toks, [3])
        ok = kinds == ["F32", "I32"] and maxabs(full, lg) <= TOL and maxabs(mtp, dr) <= TOL
    check("fixture: --all-f32 writes F32/I32 only and runs (one pass == cached)", ok, r.stderr[-300:])


def test_math_pieces():
    m = fixture()
    x = np.random.default_rng(3).standard_normal((4, m.hp.E))
    _, post, comb = m.hc_pre(0, "attn", x)
    check("hc: comb is doubly stochastic after Sinkhorn",
          np.allclose(comb.sum(axis=0), 1, atol=1e-3) and np.allclose(comb.sum(axis=1), 1, atol=1e-3)
          and (comb > 0).all(), str(comb.sum(axis=0)))
    check("hc: post in (0, 2)", ((post > 0) & (post < 2)).all())
    v = np.random.default_rng(4).standard_normal((m.hp.H, m.hp.D))
    for rope in (m.rope_plain, m.rope_comp):
        back = rope.apply(rope.apply(v, 123), 123, inverse=True)
        check("rope: inverse undoes rope (base %g)" % rope.base, maxabs(back, v) < 1e-12)
    check("rope: only the last rd dims move", maxabs(m.rope_plain.apply(v, 9)[:, :m.hp.D - m.hp.rd],
                                                     v[:, :m.hp.D - m.hp.rd]) == 0.0)
    # corr_dim(b) = 16 ln(65536 / (2 pi b)) / (2 ln 160000): 3.86 for b = 32, 6.18 for b = 1,
    # so pairs 0..3 keep the extrapolated angle and pairs >= 7 take freq_scale * angle
    mix = m.rope_comp.mix
    check("yarn: ramp from pair 3 to pair 7", (mix[:4] == 1).all() and (mix[7:] == 0).all()
          and (mix[4:7] > 0).all() and (mix[4:7] < 1).all(), str(mix))
    check("yarn: no magnitude scaling", abs(m.rope_comp.mag - 1.0) < 1e-15 and m.rope_plain.mag == 1.0)
    th = m.rope_comp.angles(100)
    check("yarn: interpolated pairs turn freq_scale times slower",
          abs(th[-1] - 100 * m.rope_comp.inv_freq[-1] / 16) < 1e-12 and abs(th[0] - 100.0) < 1e-12)
    check("top-k: ties go to the lower index", ref.top_indices([1, 3, 3, 0, 3], 2).tolist() == [1, 2])


def test_cli():
    """forward and compare through the command line, with the FGLG engine-logits format."""
    import subprocess
    import deepseek2_ref
    m = fixture()
    toks = prompt(m, 24, seed=9)
    tok_arg = ",".join(str(t) for t in toks)
    script = os.path.join(HERE, "deepseek4_ref.py")
    r = subprocess.run([sys.executable, script, tmp("v4.gguf"), "--tokens", tok_arg, "--out", tmp("l.npy"),
                        "--mtp-out", tmp("m.npy")], capture_output=True, text=True, timeout=120)
    full, mtp = m.forward(toks)
    check("cli: forward writes the one-pass logits and MTP drafts",
          r.returncode == 0 and maxabs(np.load(tmp("l.npy")), full) == 0.0
          and maxabs(np.load(tmp("m.npy")), mtp) == 0.0, r.stderr[-300:])
    cache, seq = m.new_cache(), toks[:12]         # 12 prompt tokens + 12 greedy picks
    lg, _ = m.step(cache, seq)
    for _ in range(12):
        seq = seq + [int(np.argmax(lg[-1]))]
        lg, _ = m.step(cache, seq[-1:])
    ref_lg, _ = m.forward(seq)
    deepseek2_ref.write_engine_logits(tmp("eng.bin"), seq[:-1], ref_lg[:-1])
    args = [sys.executable, script, "compare", tmp("v4.gguf"), "--engine-logits", tmp("eng.bin"),
            "--tokens", ",".join(str(t) for t in seq), "--n-prompt", "12"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    check("cli: compare accepts the reference's own logits", r.returncode == 0, r.stdout[-300:])
    bad = ref_lg[:-1].copy()
    bad[5, 7] += 1e-3
    deepseek2_ref.write_engine_logits(tmp("eng.bin"), seq[:-1], bad)
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    check("cli: compare rejects a logit off by 1e-3", r.returncode == 1 and "MISMATCH" in r.stdout, r.stdout[-300:])
    with open(tmp("eng.bin"), "r+b") as f:
        f.write(b"XXXX")
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    check("cli: compare reports a bad logits file as a format error", r.returncode == 2, r.stderr[-300:])


def main():
    global TMP
    TMP = tempfile.mkdtemp(prefix="fg_v4refcheck_")
    try:
        for fn in (test_cache_vs_one_pass, test_chunked, test_causality, test_negative_controls, test_validation,
                   test_hash_routing, test_hash_table_matters, test_mxfp4, test_fixture_types, test_math_pieces,
                   test_cli):
            run(fn)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    n_pass, n_fail = summary()
    sys.stdout.write("%d passed, %d failed\n" % (n_pass, n_fail))
    return 0 if n_fail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
