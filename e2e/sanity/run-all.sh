#!/usr/bin/env bash
# csi-sanity, whole suite (Identity, Controller, Node), against the real binaries:
# nfs-ganesha hub (scripts/spoke-hub), spoke-cache-agent, spoke-csi-controller and
# spoke-csi-node, each on its own unix socket.
#   e2e/sanity/run-all.sh [BUILD_DIR] [extra csi-sanity args...]     (root: FUSE, bind mounts)
# Volumes are scratch directories on the hub (-csi.testvolumeparameters); mount and staging
# dirs live in a temporary directory. Skips what e2e/sanity/skip-all.txt lists. Exit status:
# csi-sanity's; 77 (ctest: skipped) when a binary is not built. Everything started is stopped
# and everything mounted is unmounted on exit, also on failure.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
shift || true
sanity=${CSI_SANITY:-$(command -v csi-sanity || echo /usr/local/bin/csi-sanity)}

# SPOKE_AGENT_BIN: another agent binary (tests/csi-node's spoke-bind-agent serves the same
# API with plain bind mounts, to test the node plugin apart from the FUSE data path).
agent_bin=${SPOKE_AGENT_BIN:-$build/cache-agent/agent/spoke-cache-agent}
controller_bin=$build/csi-controller/spoke-csi-controller
node_bin=$build/csi-node/spoke-csi-node
for b in "$agent_bin" "$controller_bin" "$node_bin" "$sanity"; do
  [ -x "$b" ] || { echo "run-all.sh: SKIP: $b is not built/installed" >&2; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "run-all.sh: SKIP: needs root" >&2; exit 77; }
echo "agent: $agent_bin"

work=$(mktemp -d /tmp/spoke-sanity-all-XXXXXX)
declare -A pids=()
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mounts_under() {
  awk -v w="$work" '{ p=$5; gsub(/\\040/, " ", p); if (index(p, w "/") == 1) print p }' \
    /proc/self/mountinfo | sort -r | uniq
}
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  for m in $(mounts_under); do umount -l "$m" 2>/dev/null; done
  for name in node controller agent; do
    pid=${pids[$name]:-}
    [ -n "$pid" ] || continue
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  for m in $(mounts_under); do umount -l "$m" 2>/dev/null; done
  "$root/scripts/spoke-hub" stop "$work/hub" >/dev/null 2>&1
  if [ $rc -ne 0 ]; then
    for f in node controller agent; do
      echo "--- $f.log (tail) ---" >&2
      tail -30 "$work/$f.log" >&2 2>/dev/null
    done
  fi
  if [ "${KEEP_WORKDIR:-0}" = 1 ]; then echo "work dir kept: $work"; else rm -rf "$work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

eval "$("$root/scripts/spoke-hub" start "$work/hub")"  # NFS_PORT MOUNT_PORT EXPORT PID
echo "hub: ganesha pid $PID, export $EXPORT, ports $NFS_PORT/$MOUNT_PORT"

cat > "$work/agent.yaml" <<CONF
socket: $work/agent.sock
cacheDir: $work/cache
cacheSizeBytes: 256Mi
blockSizeBytes: 1Mi
metricsAddress: 127.0.0.1:$(free_port)
stateDir: $work/agent-state
mountRoots: [$work]
logLevel: info
hub: {connections: 2, inflightPerConnection: 16, requestTimeoutSeconds: 5}
CONF
"$agent_bin" --config "$work/agent.yaml" >"$work/agent.log" 2>&1 &
pids[agent]=$!
# The node plugin starts after the agent listens (it works either way: calls fail with
# UNAVAILABLE until the agent answers, as on a node where the agent restarts).
for _ in $(seq 100); do [ -S "$work/agent.sock" ] && break; sleep 0.1; done
cat > "$work/controller.yaml" <<CONF
hubTimeoutSeconds: 5
CONF
"$controller_bin" --endpoint "unix://$work/controller.sock" --config "$work/controller.yaml" \
  --log-level info >"$work/controller.log" 2>&1 &
pids[controller]=$!
# kubeletDir is left unset: csi-sanity's mount and staging dirs are not under a kubelet dir.
cat > "$work/node.yaml" <<CONF
stateDir: $work/node-state
agentTimeoutSeconds: 20
CONF
"$node_bin" --endpoint "unix://$work/node.sock" --node-id sanity-node \
  --agent-socket "$work/agent.sock" --config "$work/node.yaml" --log-level info \
  >"$work/node.log" 2>&1 &
pids[node]=$!
for s in agent.sock controller.sock node.sock; do
  for _ in $(seq 100); do [ -S "$work/$s" ] && break; sleep 0.1; done
  [ -S "$work/$s" ] || { echo "run-all.sh: $s did not appear" >&2; exit 1; }
done

cat > "$work/params.yaml" <<PARAMS
server: 127.0.0.1
share: $EXPORT
nfsPort: "$NFS_PORT"
mountPort: "$MOUNT_PORT"
mode: scratch
onDelete: delete
PARAMS

skip=$(sed -e 's/[[:space:]]*#.*$//' -e '/^[[:space:]]*$/d' "$here/skip-all.txt" | paste -sd'|' || true)
skip_args=()
[ -n "$skip" ] && skip_args=(-ginkgo.skip "$skip")

set +e
"$sanity" \
  -csi.endpoint "unix://$work/node.sock" \
  -csi.controllerendpoint "unix://$work/controller.sock" \
  -csi.testvolumeparameters "$work/params.yaml" \
  -csi.testvolumesize 1073741824 \
  -csi.mountdir "$work/mnt" -csi.stagingdir "$work/stage" \
  -ginkgo.no-color \
  "${skip_args[@]}" "$@" 2>&1 | tee "$work/sanity.log"
rc=${PIPESTATUS[0]}
set -e

summary=$(grep -E "^(Ran [0-9]+ of [0-9]+ Specs|(SUCCESS|FAIL)! -- [0-9]+ Passed)" "$work/sanity.log" || true)
echo "csi-sanity summary: $summary"
left=$(mounts_under)
if [ -n "$left" ]; then
  echo "run-all.sh: mounts left after csi-sanity:" >&2
  echo "$left" >&2
  [ $rc -ne 0 ] || rc=1
fi
exit $rc
