#!/usr/bin/env bash
# Validates deploy/k8s/*.yaml against the Kubernetes API's schemas: the validators that the npm
# package kubernetes-models generates from the Kubernetes OpenAPI definitions (types, required
# fields, enums, formats), unknown fields against the package's declarations, and the promises
# the manifests make (probes on /healthz, the preStop drain, a sessions volume, resources, the
# scrape annotation). The npm packages go into
# $FG_TEST_DATA/npm-k8s (pinned versions); exit 77 (skip) only when npm cannot install them.
set -euo pipefail
: "${FG_TEST_DATA:?run through ctest}"
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
npm_dir="$FG_TEST_DATA/npm-k8s"
pkgs=(kubernetes-models@5.1.0 yaml@2.9.1)
"$src/tests/npm_deps.sh" "$npm_dir" "${pkgs[@]}" || exit $?
NODE_PATH="$npm_dir/node_modules" node "$here/check_k8s.mjs" "$npm_dir/node_modules" "$src/deploy/k8s"
