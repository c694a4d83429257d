#!/usr/bin/env bash
# Builds flashgate (release), creates the default flash-mini model if it is
# missing, and starts the server with config/flashgate.json (override with
# FLASHGATE_CONFIG or FLASHGATE_<SECTION>_<KEY> variables). Extra arguments
# go to flashgate. Stop it with Ctrl-C (it drains, then exits).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
deploy/install-deps.sh build
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
model=models/flash-mini.gguf
if [[ ! -f $model ]]; then
  mkdir -p models
  echo "creating $model (random weights, deterministic; about 400 MB)..."
  build/release/bin/flashgate-modelgen --preset flash-mini --out "$model"
fi
echo "flashgate: ws://127.0.0.1:8080/v1/realtime (try: build/release/bin/flashgate-cli chat --key fg-dev-key-change-me-0001)"
echo "dashboard: http://127.0.0.1:8080/dashboard · metrics: http://127.0.0.1:8080/metrics (docs/metrics.md)"
exec build/release/bin/flashgate --config "${FLASHGATE_CONFIG:-config/flashgate.json}" "$@"
