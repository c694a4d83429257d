#!/usr/bin/python3
"""The generator's deepseek4 files through the independent numpy reference.

Runs on the "models" fixture ($FG_TEST_DATA, tests/model/gen_models.sh):
  * v4-tiny.gguf and v4-tiny-nohash.gguf: the reference self-check's model checks
    (test_deepseek4_selfcheck.py, imported, not copied): a 300-token prompt + 32 greedy
    steps with logits finite and O(1), one pass == token-by-token cache and chunked steps
    (logits and MTP drafts), HCA emitting >= 2 rows in every HCA layer, the indexer's
    top-k dropping rows, causality, and the routing of hash and learned layers;
  * v4-tiny-mxfp4.gguf (Q8_0 / BF16 / MXFP4, the converter's types): loads, finite logits,
    one pass == cached;
  * greedy margins: the top logit leads the second by more than 1e-3 at most positions,
    so an engine's 1e-4 agreement decides every greedy token.
Prints `N passed, M failed`; exits non-zero when anything failed.
"""

import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import test_deepseek4_selfcheck as sc  # noqa: E402


def data(name):
    return os.path.join(os.environ["FG_TEST_DATA"], name)


def check_margins(label):
    full = sc._MODEL.get("full")
    if full is None:
        sc.check("%s: margins need the cache check's logits" % label, False)
        return
    top2 = np.sort(full, axis=1)[:, -2:]
    gap = top2[:, 1] - top2[:, 0]
    sc.check("%s: top-1 leads top-2 by > 1e-3 at >= 95%% of %d positions" % (label, len(gap)),
             np.mean(gap > 1e-3) >= 0.95, "median %.3g, min %.3g" % (np.median(gap), gap.min()))


def model_checks(name, hashed):
    m = sc.use_model(data(name))
    sc.check("%s: %s hash layers" % (name, "has" if hashed else "has no"),
             (m.hp.n_hash > 0) == hashed and m.hp.n_nextn == 1, "n_hash %d" % m.hp.n_hash)
    for fn in (sc.test_cache_vs_one_pass, sc.test_chunked, sc.test_causality, sc.test_hash_routing):
        sc.run(fn)
    check_margins(name)


def converter_types():
    name = "v4-tiny-mxfp4.gguf"
    m = sc.use_model(data(name))
    kinds = sorted({t.type_name for t in m.g.tensors.values()})
    sc.check("%s: BF16, F32, I32, MXFP4 and Q8_0 tensors" % name,
             kinds == ["BF16", "F32", "I32", "MXFP4", "Q8_0"], str(kinds))
    toks = sc.prompt(m, 40, seed=2)
    full, mtp = m.forward(toks)
    lg, dr = sc.run_steps(m, toks, [3])
    sc.check("%s: finite logits, one pass == cached" % name,
             np.isfinite(full).all() and sc.maxabs(full, lg) <= sc.TOL and sc.maxabs(mtp, dr) <= sc.TOL,
             "max |d| %.3g" % sc.maxabs(full, lg))


def main():
    if "FG_TEST_DATA" not in os.environ:
        sys.stderr.write("test_v4_generated: FG_TEST_DATA is not set (run through ctest)\n")
        return 2
    sc.TMP = tempfile.mkdtemp(prefix="fg_v4gen_")
    try:
        model_checks("v4-tiny.gguf", True)
        model_checks("v4-tiny-nohash.gguf", False)
        sc.run(converter_types)
    finally:
        shutil.rmtree(sc.TMP, ignore_errors=True)
    n_pass, n_fail = sc.summary()
    sys.stdout.write("%d passed, %d failed\n" % (n_pass, n_fail))
    return 0 if n_fail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
