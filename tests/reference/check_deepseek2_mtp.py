#!/usr/bin/python3
"""The deepseek2 MTP block (nextn) of the engine against the numpy reference (deepseek2_ref.py).

On tiny-mtp.gguf (the generator's tiny preset with the block): 48 random tokens through
ds2_mtp_probe in chunks of 1 (absorbed attention) and 16 (decompressed), F32 cache; every
position's trunk logits and MTP logits within 1e-4 of the reference's forward_mtp().  An F16
cache stays within 0.05 (its rounding).  Negative controls: the reference fed the trunk's hidden
before output_norm, or the concatenation [hnorm(h); enorm(e)], is far from the engine (> 0.1),
so the check can tell those choices apart.  And the reference's trunk of tiny-mtp.gguf is that of
tiny.gguf (the same seed: the same trunk tensors).

Environment (ctest sets it): FG_BIN (ds2_mtp_probe), FG_TEST_DATA.
Exit 0 when every check passes, 1 otherwise.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deepseek2_ref as ref  # noqa: E402

BIN = os.environ.get("FG_BIN", "")
DATA = os.environ.get("FG_TEST_DATA", "")
N = 48
FAILS = []


def check(cond, what):
    print("%s: %s" % ("ok" if cond else "FAIL", what))
    if not cond:
        FAILS.append(what)


def probe(model, tokens, chunk, fmt, tmp, V):
    lo, mo = os.path.join(tmp, "l.bin"), os.path.join(tmp, "m.bin")
    r = subprocess.run([os.path.join(BIN, "ds2_mtp_probe"), model, ",".join(map(str, tokens)), lo, mo, str(chunk),
                        fmt], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("ds2_mtp_probe failed (%d): %s" % (r.returncode, r.stderr))
    return np.fromfile(lo, dtype="<f4").reshape(-1, V), np.fromfile(mo, dtype="<f4").reshape(-1, V)


def main():
    if not BIN or not DATA:
        sys.stderr.write("FG_BIN and FG_TEST_DATA must be set (run through ctest)\n")
        return 2
    path = os.path.join(DATA, "tiny-mtp.gguf")
    model = ref.DeepSeek2Model(path)
    hp = model.hp
    check(hp.n_nextn == 1 and hp.n_layer == 4, "the reference reads 4 trunk layers and the MTP block")
    V = hp.n_vocab
    rng = np.random.default_rng(5)
    tokens = [int(t) for t in rng.integers(0, V - 2, N)]
    ref_logits, ref_mtp = ref.forward_mtp(model, tokens)
    with tempfile.TemporaryDirectory() as tmp:
        for chunk in (1, 16):
            lg, mt = probe(path, tokens, chunk, "f32", tmp, V)
            dl = float(np.abs(lg - ref_logits).max())
            dm = float(np.abs(mt - ref_mtp).max())
            check(dl <= 1e-4, "chunks of %d: trunk logits max |d| = %.3g (<= 1e-4)" % (chunk, dl))
            check(dm <= 1e-4, "chunks of %d: MTP logits max |d| = %.3g (<= 1e-4; max |logit| %.3g)"
                  % (chunk, dm, float(np.abs(ref_mtp).max())))
        lg, mt = probe(path, tokens, 16, "f16", tmp, V)
        dm = float(np.abs(mt - ref_mtp).max())
        check(dm <= 0.05, "f16 cache: MTP logits max |d| = %.3g (<= 0.05)" % dm)
        _, mt = probe(path, tokens, 1, "f32", tmp, V)
        for hidden, order, what in (("raw", "eh", "the hidden before output_norm"),
                                    ("normed", "he", "[hnorm(h); enorm(e)]")):
            _, alt = ref.forward_mtp(model, tokens, hidden=hidden, order=order)
            d = float(np.abs(mt - alt).max())
            check(d > 0.1, "negative control, %s: max |d| = %.3g (> 0.1)" % (what, d))
    trunk = ref.forward(ref.DeepSeek2Model(os.path.join(DATA, "tiny.gguf")), tokens)
    d = float(np.abs(trunk - ref_logits).max())
    check(d == 0.0, "the reference's trunk of tiny-mtp is tiny's (max |d| = %.3g)" % d)
    print("PASS" if not FAILS else "FAIL: %d check(s): %s" % (len(FAILS), "; ".join(FAILS)))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
