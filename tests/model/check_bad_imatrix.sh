#!/usr/bin/env bash
# flashgate-quantize --imatrix on malformed and mismatched importance matrices (both of
# llama-imatrix's formats, written by tests/reference/imatrix_files.py) and the mixes that need
# one: each must exit non-zero with a message naming the problem, write no file, never crash
# (signals, or the sanitizers' exit codes 86/87 that the test environment sets).
set -uo pipefail
: "${FG_BIN:?run through ctest}" "${FG_TEST_DATA:?}" "${FG_SOURCE_DIR:?}"
q=$FG_BIN/flashgate-quantize
src=$FG_TEST_DATA/tiny-256.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 passes=0

# expect WANT_EXIT PATTERN -- command...
expect() {
  local want=$1 pattern=$2; shift 3
  rm -f "$tmp/out.gguf"
  "$@" > "$tmp/stdout" 2> "$tmp/err"
  local rc=$?
  if [[ $rc -ne $want ]] || ! grep -qiE -- "$pattern" "$tmp/err" || [[ -e $tmp/out.gguf ]]; then
    echo "FAIL (exit $rc, want $want, pattern '$pattern'): $*"; sed 's/^/    /' "$tmp/err" | head -5
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}

/usr/bin/python3 - "$src" "$tmp" <<'PY' || exit 1
import os, struct, sys
import numpy as np
sys.path.insert(0, os.path.join(os.environ["FG_SOURCE_DIR"], "tests", "reference"))
import gguf_read, imatrix_files as imf
src, tmp = sys.argv[1], sys.argv[2]
g = gguf_read.GGUFFile(src)
shapes = {n: (t.ne[0], t.ne[2] if len(t.ne) > 2 else 1) for n, t in g.tensors.items()
          if len(t.ne) >= 2 and n.endswith("weight") and "_norm" not in n and "ffn_gate_inp" not in n}
rng = np.random.default_rng(7)
good = imf.random_entries(shapes, rng)
p = lambda name: os.path.join(tmp, name)
imf.write_gguf(p("good.gguf"), good)
imf.write_legacy(p("good.dat"), {n: (3, s) for n, (s, _) in good.items()})
# a matrix of another model: one entry a column short
bad = dict(good); s, c = bad["blk.0.ffn_up.weight"]; bad["blk.0.ffn_up.weight"] = (s[:, 1:], c)
imf.write_gguf(p("wrong-size.gguf"), bad)
# an expert tensor's entry with too few experts
bad = dict(good); s, c = bad["blk.1.ffn_up_exps.weight"]; bad["blk.1.ffn_up_exps.weight"] = (s[:3], c[:3])
imf.write_gguf(p("few-experts.gguf"), bad)
# no entry for a Q2_K tensor of a q2_k_s file
bad = dict(good); del bad["blk.2.ffn_gate_exps.weight"]
imf.write_gguf(p("missing-entry.gguf"), bad)
neg = dict(good); s, c = neg["blk.0.ffn_up.weight"]; s = s.copy(); s[0, 5] = -1; neg["blk.0.ffn_up.weight"] = (s, c)
imf.write_gguf(p("negative.gguf"), neg)
nan = dict(good); s, c = nan["blk.0.ffn_up.weight"]; s = s.copy(); s[0, 9] = np.nan; nan["blk.0.ffn_up.weight"] = (s, c)
imf.write_legacy(p("nan.dat"), {n: (3, v) for n, (v, _) in nan.items()})
imf.write_gguf(p("no-meta.gguf"), good, keys=[("general.type", 8, struct.pack("<Q", 7) + b"imatrix")])
imf.write_gguf(p("f16-sums.gguf"), good, types={"blk.0.ffn_up.weight.in_sum2": 1})
counts = dict(good); s, c = counts["blk.1.ffn_up_exps.weight"]; counts["blk.1.ffn_up_exps.weight"] = (s, c[:2])
imf.write_gguf(p("counts-shape.gguf"), counts)
raw = open(p("good.dat"), "rb").read()
open(p("truncated.dat"), "wb").write(raw[:len(raw) // 2])
open(p("trailing.dat"), "wb").write(raw + b"xyz")
open(p("zero.dat"), "wb").write(struct.pack("<i", 0))
open(p("huge-name.dat"), "wb").write(struct.pack("<ii", 1, 1 << 30) + b"x" * 16)
imf.write_legacy(p("dup.dat"), {"a.weight": (1, np.ones(4, np.float32))}, trailer=None)
d = open(p("dup.dat"), "rb").read()
open(p("dup.dat"), "wb").write(struct.pack("<i", 2) + d[4:] + d[4:])
imf.write_legacy(p("neg-ncall.dat"), {"a.weight": (-2, np.ones(4, np.float32))})
open(p("truncated.gguf"), "wb").write(open(p("good.gguf"), "rb").read()[:300])
PY

out=$tmp/out.gguf
expect 2 "q2_k_s.*need an importance matrix.*--imatrix" -- "$q" "$src" "$out" q2_k_s
expect 2 "--imatrix wants a file" -- "$q" "$src" "$out" q4_k_m --imatrix
expect 1 "imatrix .*missing.dat: No such file" -- "$q" --imatrix "$tmp/missing.dat" "$src" "$out" q2_k_s
expect 1 "blk.0.ffn_up.weight: the importance matrix has 255 weights, the tensor wants 256" -- \
  "$q" --imatrix "$tmp/wrong-size.gguf" "$src" "$out" q4_k_m
expect 1 "blk.1.ffn_up_exps.weight: the importance matrix has 768 weights, the tensor wants 4096 \(256 columns x 16 experts\)" -- \
  "$q" --imatrix "$tmp/few-experts.gguf" "$src" "$out" q4_k_m
expect 1 "blk.2.ffn_gate_exps.weight: q2_K in a q2_k_s file needs importance weights and the importance matrix has no entry" -- \
  "$q" --imatrix "$tmp/missing-entry.gguf" "$src" "$out" q2_k_s
expect 1 "blk.0.ffn_up.weight: value 5 of matrix 0 is -1" -- "$q" --imatrix "$tmp/negative.gguf" "$src" "$out" q4_k_m
expect 1 "blk.0.ffn_up.weight: value 9 is nan" -- "$q" --imatrix "$tmp/nan.dat" "$src" "$out" q4_k_m
expect 1 "key imatrix.datasets is missing" -- "$q" --imatrix "$tmp/no-meta.gguf" "$src" "$out" q4_k_m
expect 1 "blk.0.ffn_up.weight.in_sum2 has type f16, not f32" -- "$q" --imatrix "$tmp/f16-sums.gguf" "$src" "$out" q4_k_m
expect 1 "blk.1.ffn_up_exps.weight: 2 counts for 16 matrices" -- "$q" --imatrix "$tmp/counts-shape.gguf" "$src" "$out" q4_k_m
expect 1 "the file ends inside" -- "$q" --imatrix "$tmp/truncated.dat" "$src" "$out" q4_k_m
expect 1 "not the end of a legacy imatrix" -- "$q" --imatrix "$tmp/trailing.dat" "$src" "$out" q4_k_m
expect 1 "entry count 0 \(no data" -- "$q" --imatrix "$tmp/zero.dat" "$src" "$out" q4_k_m
expect 1 "name length 1073741824 is not" -- "$q" --imatrix "$tmp/huge-name.dat" "$src" "$out" q4_k_m
expect 1 "entry 'a.weight' appears twice" -- "$q" --imatrix "$tmp/dup.dat" "$src" "$out" q4_k_m
expect 1 "a negative call count" -- "$q" --imatrix "$tmp/neg-ncall.dat" "$src" "$out" q4_k_m
expect 1 "imatrix \(GGUF\): .*(truncat|bounds)" -- "$q" --imatrix "$tmp/truncated.gguf" "$src" "$out" q4_k_m
expect 1 "key imatrix.datasets is missing \(is this llama-imatrix" -- "$q" --imatrix "$src" "$src" "$out" q4_k_m
# the good files are accepted (so the cases above fail for their own reason)
for f in good.gguf good.dat; do
  rm -f "$out"
  if "$q" --quiet --imatrix "$tmp/$f" "$src" "$out" q2_k_s > /dev/null 2> "$tmp/err" && [[ -s $out ]]; then
    passes=$((passes + 1))
  else
    echo "FAIL: $f refused:"; sed 's/^/    /' "$tmp/err" | head -5; fails=$((fails + 1))
  fi
done

echo "$passes passed, $fails failed"
((fails == 0))
