#!/usr/bin/python3
"""Checks that the engine computes what torch trained: runs the checkpoint of a
train_english.py run (WORK/final.pt, or WORK/checkpoint.fgw) in torch and the exported GGUF
in flashgate-generate over the same tokens (the first window of the held-out ids), and
prints the largest logit difference and the greedy agreement.

Usage: check_export.py --work DIR --model GGUF [--bin DIR] [--tokens N]
Exit status 0 when every logit is within --tol (default 1e-3; F32 weights expected).
"""

import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_english as T  # noqa: E402


def load_fgw(path):
    out = {}
    with open(path, "rb") as f:
        assert f.read(4) == b"FGW1"
        (n,) = struct.unpack("<I", f.read(4))
        for _ in range(n):
            (ln,) = struct.unpack("<I", f.read(4))
            name = f.read(ln).decode()
            (cnt,) = struct.unpack("<Q", f.read(8))
            out[name] = np.frombuffer(f.read(4 * cnt), dtype="<f4").copy()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", default=os.path.join(T.ROOT, "build", "release", "bin"))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--fgw", default=None, help="weights file (default WORK/weights.fgw)")
    a = ap.parse_args()
    torch.set_num_threads(2)

    g = T.GGUFFile(a.model)
    hp = T.HP(g)
    shapes = {n: tuple(t.shape) for n, t in g.tensors.items()}
    g.close()
    model = T.Model(hp, shapes, 0)
    weights = load_fgw(a.fgw or os.path.join(a.work, "weights.fgw"))
    with torch.no_grad():
        for name, shape in shapes.items():
            v = torch.from_numpy(weights[name].reshape(shape))
            if name in model.bias:
                model.bias[name] = v
            else:
                model.w(name).copy_(v)
    ids = T.load_ids(os.path.join(a.work, "heldout.ids"))[:a.tokens]
    model.eval()
    with torch.no_grad():
        ref = model(ids[None, :])[0].double().numpy()

    with tempfile.TemporaryDirectory() as tmp:
        lf = os.path.join(tmp, "logits.bin")
        subprocess.run([os.path.join(a.bin, "flashgate-generate"), "--model", a.model, "--tokens",
                        ",".join(str(int(t)) for t in ids), "-n", "0", "--kv-format", "f32", "--logits-out", lf,
                        "--threads", "2"], check=True, stdout=subprocess.DEVNULL)
        raw = open(lf, "rb").read()
    magic, ver, n_pos, n_vocab = struct.unpack("<4sIII", raw[:16])
    assert magic == b"FGLG" and n_vocab == hp.V
    rec = np.frombuffer(raw[16:], dtype="<f4").reshape(n_pos, 1 + n_vocab)[:, 1:].astype(np.float64)
    n = min(n_pos, len(ref))
    diff = np.abs(rec[:n] - ref[:n]).max()
    agree = int((rec[:n].argmax(-1) == ref[:n].argmax(-1)).sum())
    print("torch vs engine over %d positions: max |dlogit| = %.3g (max |logit| %.1f), argmax agreement %d/%d"
          % (n, diff, np.abs(ref[:n]).max(), agree, n))
    return 0 if diff <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
