#!/usr/bin/env bash
# The GPU self-check on a GPU machine (H200/H100: sm_90a; B200/GB200: sm_100a;
# B300/GB300: sm_103a): installs the build dependencies, builds flashgate
# (Release, CUDA on), generates the tiny and flash-mini models if missing, and
# runs flashgate-gpucheck: every CUDA op against the CPU reference (the matrix
# and grouped-expert products in F32, F16, BF16, Q8_0 and MXFP4, the type of
# V4's routed experts; and the V4 ops: compressor pooling, indexer scores and
# top-k, attention with sinks, hyper-connection mixing), the CUDA forward against the CPU backend on each model
# (tiny-mxfp4 too, tiny with MXFP4 experts, where python3 with numpy can
# write it), then the decode benchmark on flash-mini. Figures go to stdout and to a file (first argument, default
# docs/gpu-results/<gpu>-<date>.txt) so they can be committed.
# Exit status: that of flashgate-gpucheck (0 pass, 1 a check failed, 2 no GPU).
# Needs the CUDA toolkit (nvcc) in PATH or /usr/local/cuda; takes ~3-5 minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
deploy/install-deps.sh build
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null || { echo "gpu-selfcheck: nvcc not found (install the CUDA toolkit)" >&2; exit 2; }
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader || true
fi
jobs=$(nproc)
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DFG_CUDA=ON >/dev/null
cmake --build build/gpu -j"$jobs" --target flashgate-gpucheck flashgate-modelgen
mkdir -p models
[[ -f models/tiny.gguf ]] || build/gpu/bin/flashgate-modelgen --preset tiny --seed 1 --out models/tiny.gguf >/dev/null
[[ -f models/tiny-q8_0.gguf ]] ||
  build/gpu/bin/flashgate-modelgen --preset tiny --seed 1 --type q8_0 --out models/tiny-q8_0.gguf >/dev/null
# MXFP4 routed experts, as llama.cpp's converter writes V4's (needs numpy; skipped without it)
mxfp4=()
if [[ ! -f models/tiny-mxfp4.gguf ]] && python3 -c 'import numpy' 2>/dev/null; then
  python3 tests/reference/retype_tensors.py models/tiny.gguf models/tiny-mxfp4.gguf 'blk.*.ffn_*_exps.weight=mxfp4' \
    >/dev/null || rm -f models/tiny-mxfp4.gguf
fi
if [[ -f models/tiny-mxfp4.gguf ]]; then
  mxfp4=(--model models/tiny-mxfp4.gguf)
else
  echo "gpu-selfcheck: no python3 with numpy: the forward check skips tiny-mxfp4 (the MXFP4 op checks still run)"
fi
if [[ ! -f models/flash-mini.gguf ]]; then
  echo "creating models/flash-mini.gguf (random weights, deterministic)..."
  build/gpu/bin/flashgate-modelgen --preset flash-mini --out models/flash-mini.gguf >/dev/null
fi
gpu=$( (nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo gpu) | head -1 | tr ' /' '__')
out=${1:-docs/gpu-results/${gpu}-$(date -u +%Y%m%d-%H%M).txt}
mkdir -p "$(dirname "$out")"
set +e
timeout 600 build/gpu/bin/flashgate-gpucheck --model models/tiny.gguf --model models/tiny-q8_0.gguf ${mxfp4[@]+"${mxfp4[@]}"} \
  --model models/flash-mini.gguf --out "$out"
rc=$?
set -e
echo "gpu-selfcheck: exit $rc; figures in $out"
exit $rc
