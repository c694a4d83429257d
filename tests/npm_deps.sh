#!/usr/bin/env bash
# npm_deps.sh DIR PKG@VERSION...: makes sure the pinned npm packages the
# compatibility tests run (real client libraries, unmodified) are installed
# under DIR/node_modules, installing them when any is absent or at another
# version. Exits 0 when they are there, 77 (ctest's skip) only when node/npm
# are missing or npm cannot install them (the log stays in DIR/install.log).
set -euo pipefail
dir=${1:?usage: npm_deps.sh DIR PKG@VERSION...}
shift
# One installer at a time per DIR: ctest -j runs tests that share a DIR together.
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
have_all() {
  local spec name
  for spec in "$@"; do
    name=${spec%@*} # a scoped name starts with '@': the version follows the last one
    grep -q "\"version\": \"${spec##*@}\"" "$dir/node_modules/$name/package.json" 2>/dev/null || return 1
  done
}
have_all "$@" && exit 0
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node/npm not installed (deploy/install-deps.sh test installs them)"; exit 77
fi
if ! timeout 300 npm install --prefix "$dir" --no-audit --no-fund --no-save "$@" >"$dir/install.log" 2>&1; then
  tail -5 "$dir/install.log"
  echo "SKIP: npm could not install $* (see $dir/install.log)"; exit 77
fi
