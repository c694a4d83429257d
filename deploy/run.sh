#!/usr/bin/env bash
# Builds flashgate (release) and starts the server with config/flashgate.json,
# which serves the committed default model models/flash-english.gguf (trained
# on English text, docs/english-model.md; the random flash-mini model for
# benchmarks is made with flashgate-modelgen --preset flash-mini). Override with
# FLASHGATE_CONFIG or FLASHGATE_<SECTION>_<KEY> variables; extra arguments
# go to flashgate. Stop it with Ctrl-C (it drains, then exits).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
deploy/install-deps.sh build
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
echo "flashgate: ws://127.0.0.1:8080/v1/realtime (try: build/release/bin/flashgate-cli chat --key fg-dev-key-change-me-0001)"
echo "dashboard: http://127.0.0.1:8080/dashboard · metrics: http://127.0.0.1:8080/metrics (docs/metrics.md)"
exec build/release/bin/flashgate --config "${FLASHGATE_CONFIG:-config/flashgate.json}" "$@"
