#!/usr/bin/python3
"""The compact deepseek4 cache formats against f32 on one model, for the record (a
measurement, not a test: docs/engine.md, "The deepseek4 cache", has the figures).

    kv_format_drift.py MODEL [--prompt 300] [--gen 32] [--bin build/rel/bin]

Greedy-generates --gen tokens after a random --prompt with the f32 cache
(flashgate-generate), then runs the whole sequence through ds4_probe once per format
(f32, f16, fp8, and f32 on the AVX2 kernels: the floor that f32 rounding alone gives)
and prints, against f32 on the best kernels, the argmax agreement over
every position and the max and median over positions of max |dlogit|, with the
logits' spread (the median per-position std) to read them against. Uses
check_deepseek4.py's generate and probe (imported)."""

import argparse
import os
import sys
import tempfile
import shutil

import numpy as np

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_deepseek4 as cd  # noqa: E402
from gguf_read import GGUFFile  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--prompt", type=int, default=300)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--bin", default=cd.BIN)
    a = ap.parse_args()
    cd.BIN = a.bin
    g = GGUFFile(a.model)
    V = int(g.get("deepseek4.vocab_size"))
    g.close()
    cd.N_PROMPT = a.prompt
    prompt = cd.prompt_tokens(V)
    tmp = tempfile.mkdtemp(prefix="kv_drift_")
    try:
        gen = cd.generate(a.model, prompt, a.gen, "f32", os.path.join(tmp, "g.bin"))
        seq = prompt + gen
        base, _ = cd.probe(a.model, seq, len(seq), "f32", tmp, V)
        print("%s: %d prompt + %d greedy tokens, logits' spread (median std) %.3g, max |logit| %.3g"
              % (a.model, a.prompt, len(gen), float(np.median(base.std(axis=1))), float(np.abs(base).max())))
        # the floor: the same f32 cache through the AVX2 kernels (other f32 rounding only)
        for fmt, isa in (("f32", "avx2"), ("f16", None), ("fp8", None)):
            lg, _ = cd.probe(a.model, seq, len(seq), fmt, tmp, V, isa)
            fmt = fmt + (" (" + isa + ")" if isa else "")
            pos = np.abs(lg - base).max(axis=1)
            agree = float(np.mean(np.argmax(lg, axis=1) == np.argmax(base, axis=1)))
            print("kv %s vs f32: argmax agrees at %.4f of %d positions, max |dlogit| %.3g, median %.3g, p90 %.3g, "
                  "median of the first 32 positions %.3g" % (fmt, agree, len(seq), float(pos.max()),
                                                            float(np.median(pos)), float(np.percentile(pos, 90)),
                                                            float(np.median(pos[:32]))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
