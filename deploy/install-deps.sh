#!/usr/bin/env bash
# Installs the Debian 12 packages flashgate builds and tests with, only when missing.
# Usage: deploy/install-deps.sh [build|test]
set -euo pipefail
# redis-server also runs the quota tests' Redis Cluster nodes and sentinels (--cluster-enabled, --sentinel)
want=(build-essential cmake pkg-config libwebsockets-dev libhiredis-dev libjansson-dev redis-server)
if [[ "${1:-build}" == test ]]; then
  # chromium (+ its driver) for the dashboard test, python3-prometheus-client to parse /metrics
  want+=(clang libclang-rt-14-dev python3-numpy python3-websockets python3-prometheus-client chromium chromium-driver)
  # the deploy tests: haproxy before three instances, systemd-analyze on the unit
  want+=(haproxy systemd)
  # redis-cli --cluster create for gateway_redis_cluster (redis-server pulls it in; named for clarity)
  want+=(redis-tools)
  # node + npm for the DeepSeek-V3 tokenizer check (its script installs the npm
  # packages); only when absent, since a NodeSource nodejs ships its own npm.
  command -v node >/dev/null && command -v npm >/dev/null || want+=(nodejs npm)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
