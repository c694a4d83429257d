#!/usr/bin/env bash
# Expert parallelism over NCCL on a GPU machine: builds flashgate (with CUDA
# and NCCL), writes the tiny test models, and runs the dispatch/combine check
# (tests/model/test_ep_logits.c) with the ranks talking over NCCL, one GPU per
# rank, up to 4 ranks or the GPU count: every configuration must give the
# greedy tokens and logits (within 1e-4) of the plain single-rank pass.
# The compute stays on the CPU; what this checks is the NCCL transport
# (ncclCommInitRank from one thread per rank, grouped ncclSend/ncclRecv, the
# staging copies). Usage: deploy/ep-nccl-check.sh [build-dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/ep-nccl}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [[ "$gpus" -lt 1 ]]; then
  echo "ep-nccl-check: no GPU found (nvidia-smi -L)" >&2
  exit 1
fi
((gpus > 4)) && gpus=4
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFG_CUDA=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target flashgate-modelgen test_ep_logits
grep -q 'FG_HAVE_NCCL' "$build/engine/CMakeFiles/fg_engine.dir/flags.make" ||
  { echo "ep-nccl-check: this build found no NCCL" >&2; exit 1; }
export FG_BIN=$build/bin FG_TEST_DATA=$build/testdata
"$root/tests/model/gen_models.sh" >/dev/null
echo "ep-nccl-check: $gpus GPU(s)"
timeout 300 "$build/tests/test_ep_logits" --nccl "$gpus"
