#!/usr/bin/env bash
# Expert parallelism over NCCL on a GPU machine: builds flashgate (with CUDA
# and NCCL), writes the tiny test models, and runs the dispatch/combine check
# (tests/model/test_ep_logits.c) with the ranks talking over NCCL, one GPU per
# rank, up to 4 ranks or the GPU count: every configuration must give the
# greedy tokens and logits (within 1e-4) of the plain single-rank pass.
# The compute stays on the CPU; what this checks is the NCCL transport
# (ncclCommInitRank from one thread per rank, grouped ncclSend/ncclRecv, the
# staging copies).
# Then the ranks on the cuda backend (test_ep_logits --cuda, in-process
# transport, rank i computing on GPU i: attention and its experts on the GPU,
# the exchange through the host; logits within 1e-3 of the largest, same
# greedy tokens), and test_backend, which with 2 GPUs compares an engine of
# 2 cuda ranks with one of 2 cpu ranks.
# Then, with 2 GPUs or more, the engine over several nodes: two processes, one
# per "node" (1 GPU each, 2 each with 4 GPUs or more; CUDA_VISIBLE_DEVICES
# splits the GPUs), bootstrapped through a local redis-server, each running
# tests/model/test_ep_nodes.c --nccl-node: every node serves its sessions with
# the per-step agreement round over NCCL, then node 0 serves alone while node
# 1 idles, then node 0 leaves and node 1 must learn it (greedy tokens equal
# the plain single-rank engine's throughout).
# Usage: deploy/ep-nccl-check.sh [build-dir]
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
cmake --build "$build" -j"$(nproc)" --target flashgate-modelgen test_ep_logits test_ep_nodes test_backend
grep -q 'FG_HAVE_NCCL' "$build/engine/CMakeFiles/fg_engine.dir/flags.make" ||
  { echo "ep-nccl-check: this build found no NCCL" >&2; exit 1; }
export FG_BIN=$build/bin FG_TEST_DATA=$build/testdata
"$root/tests/model/gen_models.sh" >/dev/null
echo "ep-nccl-check: $gpus GPU(s)"
timeout 300 "$build/tests/test_ep_logits" --nccl "$gpus"
echo "ep-nccl-check: ranks on the cuda backend, $gpus GPU(s)"
timeout 300 "$build/tests/test_ep_logits" --cuda "$gpus"
timeout 300 "$build/tests/test_backend"

if [[ "$gpus" -lt 2 ]]; then
  echo "ep-nccl-check: 1 GPU: the several-node check needs 2 (NCCL allows one rank per GPU)"
  exit 0
fi
per=1
((gpus >= 4)) && per=2
tmp=$(mktemp -d)
trap 'kill "$redis_pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
redis-server --port 0 --unixsocket "$tmp/redis.sock" --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 50); do [[ -S "$tmp/redis.sock" ]] && break; sleep 0.1; done
prefix="flashgate:ep:check:$$"
echo "ep-nccl-check: 2 nodes x $per rank(s) over NCCL, one process each"
pids=()
for node in 0 1; do
  devs=$(seq -s, $((node * per)) $((node * per + per - 1)))
  CUDA_VISIBLE_DEVICES=$devs timeout 300 "$build/tests/test_ep_nodes" --nccl-node "$node" 2 "$per" \
    "$tmp/redis.sock" "$prefix" >"$tmp/node$node.log" 2>&1 &
  pids+=($!)
done
rc=0
for node in 0 1; do
  wait "${pids[$node]}" || rc=1
  sed "s/^/node $node: /" "$tmp/node$node.log"
done
exit $rc
