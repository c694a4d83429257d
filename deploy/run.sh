#!/usr/bin/env bash
# Builds flashgate (release), creates the default flash-mini model if it is
# missing, and generates text from it. Extra arguments go to flashgate-generate.
# Usage: deploy/run.sh [--prompt TEXT] [-n N] [...]
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
if (($# == 0)); then
  set -- --prompt "An agent session keeps its cache" -n 64
fi
exec build/release/bin/flashgate-generate --model "$model" "$@"
