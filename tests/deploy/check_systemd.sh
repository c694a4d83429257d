#!/usr/bin/env bash
# Checks deploy/systemd/flashgate.service with systemd-analyze verify, in a scratch root that
# holds the unit, the build installed as the unit expects it (cmake --install, prefix
# /usr/local) and this machine's own system units (the targets it orders itself after).
# A unit that names a missing program, an unknown option or a bad value fails here. Also
# checks that the unit keeps its promises: the drain on stop and the hardening options.
# Usage: check_systemd.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
unit=$src/deploy/systemd/flashgate.service
command -v systemd-analyze >/dev/null || { echo "systemd-analyze missing (Debian package systemd)"; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cmake --install "$build" --prefix "$root/usr/local" >/dev/null
mkdir -p "$root/etc/systemd/system" "$root/lib/systemd"
cp -r /lib/systemd/system "$root/lib/systemd/"
cp "$unit" "$root/etc/systemd/system/flashgate.service"
out=$(systemd-analyze verify --root="$root" flashgate.service 2>&1) || { echo "$out"; echo "systemd-analyze verify failed"; exit 1; }
[[ -z $out ]] || { echo "$out"; echo "systemd-analyze verify warned"; exit 1; }
echo "systemd-analyze verify: clean"
exposure=$(systemd-analyze security --offline=yes --root="$root" flashgate.service 2>/dev/null | sed -n 's/.*Overall exposure level for flashgate.service: \([0-9.]*\).*/\1/p') || true
echo "systemd-analyze security: exposure ${exposure:-unknown}"
# a verify that cannot fail is no check: a unit naming a missing program must fail
sed 's|^ExecStart=/usr/local/bin/flashgate |ExecStart=/usr/local/bin/flashgate-missing |' "$unit" \
  > "$root/etc/systemd/system/flashgate.service"
if systemd-analyze verify --root="$root" flashgate.service >/dev/null 2>&1; then
  echo "systemd-analyze verify accepted a unit whose program does not exist"; exit 1
fi
for want in KillMode=mixed KillSignal=SIGTERM TimeoutStopSec= StateDirectory=flashgate ProtectSystem=strict \
            PrivateTmp=yes NoNewPrivileges=yes FLASHGATE_PERSISTENCE_DIR=/var/lib/flashgate/sessions; do
  grep -v '^#' "$unit" | grep -q "$want" || { echo "the unit lacks $want"; exit 1; }
done
stop=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p' "$unit")
drain=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["server"]["drain_timeout_s"])' "$src/config/flashgate.json")
((stop > drain)) || { echo "TimeoutStopSec=$stop does not leave room for server.drain_timeout_s=$drain"; exit 1; }
echo "1 passed, 0 failed"
