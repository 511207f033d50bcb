#!/usr/bin/env bash
# csi-sanity against spoke-csi-controller and a real nfs-ganesha hub.
#   e2e/sanity/run-controller.sh CONTROLLER_BIN NODE_STUB_BIN [extra csi-sanity args...]
# Starts a hub (scripts/spoke-hub) and the controller on a temporary unix socket, runs
# csi-sanity with scratch-volume parameters, skips what e2e/sanity/skip-controller.txt lists,
# and stops everything on exit. Exits nonzero when csi-sanity fails.
#
# Two csi-sanity passes, because csi-sanity sends Identity calls to its node endpoint
# (-csi.endpoint) and its volume cleanup calls NodeGetCapabilities there:
#   1. Identity: -csi.endpoint = the controller.
#   2. Controller: -csi.controllerendpoint = the controller, -csi.endpoint = a Node stub
#      (tests/csi-controller/sanity_node_stub.cc) that answers the cleanup's Node calls.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-$root/build/csi-controller/spoke-csi-controller}
stub=${2:-$root/build/tests/csi-controller/spoke-sanity-node-stub}
shift 2 || shift $#
sanity=${CSI_SANITY:-$(command -v csi-sanity || echo /usr/local/bin/csi-sanity)}

[ -x "$bin" ] || { echo "run-controller.sh: no controller binary at $bin" >&2; exit 2; }
[ -x "$stub" ] || { echo "run-controller.sh: no node stub binary at $stub" >&2; exit 2; }
[ -x "$sanity" ] || { echo "run-controller.sh: csi-sanity not found" >&2; exit 2; }

work=$(mktemp -d /tmp/spoke-sanity-ctl-XXXXXX)
ctl_pid=""
stub_pid=""
cleanup() {
  local rc=$?
  for pid in $ctl_pid $stub_pid; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  "$root/scripts/spoke-hub" stop "$work/hub" >/dev/null 2>&1 || true
  if [ $rc -ne 0 ]; then
    echo "--- controller log (tail) ---" >&2
    tail -30 "$work/controller.log" >&2 2>/dev/null || true
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT INT TERM

# Hub.
hub_out=$("$root/scripts/spoke-hub" start "$work/hub")
eval "$hub_out"  # NFS_PORT MOUNT_PORT EXPORT PID
echo "hub: ganesha pid $PID, export $EXPORT, ports $NFS_PORT/$MOUNT_PORT"

# Controller.
sock="$work/csi.sock"
cat > "$work/controller.yaml" <<CONF
hubTimeoutSeconds: 5
archivePrefix: archived-
CONF
"$bin" --endpoint "unix://$sock" --config "$work/controller.yaml" --log-level info \
  >"$work/controller.log" 2>&1 &
ctl_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { echo "controller did not create $sock" >&2; exit 1; }
node_sock="$work/node-stub.sock"
"$stub" "unix://$node_sock" >"$work/node-stub.log" 2>&1 &
stub_pid=$!
for _ in $(seq 100); do [ -S "$node_sock" ] && break; sleep 0.1; done
[ -S "$node_sock" ] || { echo "node stub did not create $node_sock" >&2; exit 1; }

# Scratch volumes on the hub's export.
cat > "$work/params.yaml" <<PARAMS
server: 127.0.0.1
share: $EXPORT
nfsPort: "$NFS_PORT"
mountPort: "$MOUNT_PORT"
mode: scratch
onDelete: delete
PARAMS

# -ginkgo.skip: the regexes of skip-controller.txt joined with '|'.
skip=$(sed -e 's/[[:space:]]*#.*$//' -e '/^[[:space:]]*$/d' "$here/skip-controller.txt" | paste -sd'|')

common=(-csi.testvolumeparameters "$work/params.yaml" -csi.testvolumesize 1073741824
        -csi.mountdir "$work/mnt" -csi.stagingdir "$work/stage" -ginkgo.no-color)
rc=0
set +e
echo "=== pass 1: Identity Service on the controller endpoint ==="
"$sanity" -csi.endpoint "unix://$sock" "${common[@]}" \
  -ginkgo.focus "Identity Service" -ginkgo.skip "$skip" "$@" 2>&1 | tee "$work/sanity-identity.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
echo "=== pass 2: Controller Service (node endpoint = stub) ==="
"$sanity" -csi.endpoint "unix://$node_sock" -csi.controllerendpoint "unix://$sock" \
  "${common[@]}" -ginkgo.focus "Controller Service" -ginkgo.skip "$skip" "$@" 2>&1 |
  tee "$work/sanity-controller.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
set -e

for pass in identity controller; do
  line=$(sed 's/\x1b\[[0-9;]*m//g' "$work/sanity-$pass.log" | grep -aE "(SUCCESS|FAIL)! -- [0-9]+ Passed" || true)
  echo "csi-sanity $pass: $line"
done
# Volumes csi-sanity deleted must be gone from the export: only the .. entries remain.
left=$(find "$EXPORT" -mindepth 1 -maxdepth 1 | wc -l)
if [ "$left" -ne 0 ]; then
  echo "run-controller.sh: $left entries left on the export after csi-sanity:" >&2
  ls -la "$EXPORT" >&2
  [ $rc -ne 0 ] || rc=1
fi
exit $rc
