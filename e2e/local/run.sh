#!/usr/bin/env bash
# The whole Spoke flow on one machine, without Kubernetes:
#   nfs-ganesha hub -> spoke-wan-proxy (30 ms each way) -> spoke-cache-agent (FUSE + cache)
#   spoke-csi-controller + spoke-csi-node, driven by e2e/local/spoke-csi-client exactly as
#   csi-provisioner and kubelet would (CreateVolume, NodeStage, NodePublish into pod dirs under
#   a shared "kubelet" mount, stats, unpublish, unstage, DeleteVolume).
#
#   e2e/local/run.sh [BUILD_DIR]        (root; default BUILD_DIR: <repo>/build)
#
# Env: SPOKE_E2E_SMALL_FILES (300), SPOKE_E2E_LARGE_MB ("16 24 40"), SPOKE_E2E_DELAY_MS (30),
#      KEEP_WORKDIR=1 keeps the logs. Exit 77 (ctest: skipped) when a binary is not built.
# Everything it starts is stopped, everything it mounts is unmounted, even on failure.
set -euo pipefail

t0=$(date +%s.%N)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/e2e/lib/common.sh"
build=$(cd "${1:-$root/build}" && pwd)
small_files=${SPOKE_E2E_SMALL_FILES:-300}
large_mb=${SPOKE_E2E_LARGE_MB:-"16 24 40"}
delay_ms=${SPOKE_E2E_DELAY_MS:-30}

# SPOKE_AGENT_BIN: another agent binary with the same API (tests/csi-node's spoke-bind-agent:
# bind mounts instead of FUSE, to test the CSI side apart from the data path).
agent_bin=${SPOKE_AGENT_BIN:-$build/cache-agent/agent/spoke-cache-agent}
controller_bin=$build/csi-controller/spoke-csi-controller
node_bin=$build/csi-node/spoke-csi-node
client_bin=$build/e2e/local/spoke-csi-client
proxy_bin=$build/e2e/wan-proxy/spoke-wan-proxy
for b in "$agent_bin" "$controller_bin" "$node_bin" "$client_bin" "$proxy_bin"; do
  if [ ! -x "$b" ]; then
    echo "e2e/local: SKIP: $b is not built" >&2
    exit 77
  fi
done
[ "$(id -u)" = 0 ] || { echo "e2e/local: SKIP: needs root (FUSE, bind mounts)" >&2; exit 77; }

work=$(mktemp -d /tmp/spoke-e2e-local-XXXXXX)
declare -A pids=()    # name -> pid of every process this script started
watcher_pid=""
step_name="setup"

elapsed() { awk -v a="$(date +%s.%N)" -v b="${1:-$t0}" 'BEGIN { printf "%.1f", a - b }'; }
log() { printf '[%6ss] %s\n' "$(elapsed)" "$*"; }
step() { step_name=$1; log "== $1"; }
fail() { echo "e2e/local: FAIL in step '$step_name': $*" >&2; exit 1; }
mounts_under() { spoke_mounts_under "$work"; }
stop_pid() { # name
  spoke_stop_pid "${pids[$1]:-}" "e2e/local: $1"
  unset "pids[$1]"
}

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if [ $rc -ne 0 ]; then
    for f in node controller agent proxy; do
      [ -f "$work/$f.log" ] && { echo "--- $f.log (tail) ---" >&2; tail -25 "$work/$f.log" >&2; }
    done
  fi
  [ -n "$watcher_pid" ] && { kill -KILL "$watcher_pid" 2>/dev/null; wait "$watcher_pid" 2>/dev/null; }
  # Pods' and staging mounts first (lazily: a dead agent leaves stale FUSE mounts), then the
  # processes, then whatever the agent left, then the kubelet dir itself.
  for m in $(mounts_under | grep -v "^$work/kubelet\$"); do umount -l "$m" 2>/dev/null; done
  for name in node controller agent proxy; do stop_pid "$name"; done
  for m in $(mounts_under); do umount -l "$m" 2>/dev/null; done
  "$root/scripts/spoke-hub" stop "$work/hub" >/dev/null 2>&1
  if [ "${KEEP_WORKDIR:-0}" = 1 ]; then echo "work dir kept: $work"; else rm -rf "$work"; fi
  log "e2e/local: $([ $rc -eq 0 ] && echo PASS || echo "FAIL (rc=$rc)") in $(elapsed) s"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------
step "hub: nfs-ganesha + a generated dataset"
eval "$("$root/scripts/spoke-hub" start "$work/hub")"  # NFS_PORT MOUNT_PORT EXPORT PID
ds="$EXPORT/datasets/e2e"
mkdir -p "$ds"
python3 - "$ds" "$small_files" "$large_mb" <<'PY'
import os, random, sys
root, n, large = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split()]
rng = random.Random(4)
for i in range(n):
    d = os.path.join(root, "shard-%02d" % (i % 10))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "sample-%04d.bin" % i), "wb") as f:
        f.write(rng.randbytes(rng.randint(1, 64 * 1024)))
os.makedirs(os.path.join(root, "big files"), exist_ok=True)   # a space in the path
for j, mb in enumerate(large):
    with open(os.path.join(root, "big files", "part-%d.tar" % j), "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))
PY
(cd "$ds" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$work/hub.sha256"
log "dataset: $(wc -l < "$work/hub.sha256") files, $(du -sm "$ds" | cut -f1) MiB; ganesha pid $PID ports $NFS_PORT/$MOUNT_PORT"

step "WAN: spoke-wan-proxy, ${delay_ms} ms each way"
wan_nfs=$(spoke_free_port); wan_mnt=$(spoke_free_port)
"$proxy_bin" --delay-ms "$delay_ms" --route "127.0.0.1:$wan_nfs=127.0.0.1:$NFS_PORT" \
  --route "127.0.0.1:$wan_mnt=127.0.0.1:$MOUNT_PORT" >"$work/proxy.log" 2>&1 &
pids[proxy]=$!
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$wan_nfs) 2>/dev/null && break; sleep 0.1; done

step "kubelet dir: a shared mount, as on a node"
kubelet="$work/kubelet"
mkdir -p "$kubelet"
mount --bind "$kubelet" "$kubelet"
mount --make-shared "$kubelet"
# Another mount namespace whose copy of the kubelet dir is a peer: what a container with
# mountPropagation (or kubelet itself in its own namespace) sees.
unshare --mount --propagation unchanged sleep 3600 &
watcher_pid=$!

step "agent, controller, node plugin"
# The node plugin holds the agent's FUSE connections (as in the chart): mounts outlive the agent.
spoke_agent_config "$work" 1Gi \
  "hub: {connections: 4, inflightPerConnection: 16, requestTimeoutSeconds: 10}" \
  "fuseKeeperSocket: $work/keeper.sock" "fuseKeeperStart: false" >"$work/agent.yaml"
# The node plugin starts after the agent listens (it works either way: calls fail with
# UNAVAILABLE until the agent answers, as on a node where the agent restarts).
spoke_start_agent "$agent_bin" "$work/agent.yaml" "$work/agent.log" 20 ||
  { pids[agent]=$SPOKE_PID; fail "the agent did not start"; }
pids[agent]=$SPOKE_PID
cat > "$work/controller.yaml" <<CONF
hubTimeoutSeconds: 10
CONF
"$controller_bin" --endpoint "unix://$work/controller.sock" --config "$work/controller.yaml" \
  >"$work/controller.log" 2>&1 &
pids[controller]=$!
cat > "$work/node.yaml" <<CONF
kubeletDir: $kubelet
topology: {region: e2e-region, zone: e2e-zone-a}
inlineVolumes: {servers: [127.0.0.1], sharePrefixes: [$EXPORT], modes: [dataset]}
agentTimeoutSeconds: 30
fuseKeeperSocket: $work/keeper.sock
CONF
"$node_bin" --endpoint "unix://$work/node.sock" --node-id e2e-node --agent-socket "$work/agent.sock" \
  --config "$work/node.yaml" --log-level debug >"$work/node.log" 2>&1 &
pids[node]=$!
for s in agent.sock controller.sock node.sock; do
  for _ in $(seq 100); do [ -S "$work/$s" ] && break; sleep 0.1; done
  [ -S "$work/$s" ] || fail "$s did not appear"
done
for name in agent controller node; do kill -0 "${pids[$name]}" 2>/dev/null || fail "$name exited"; done

ctl() { "$client_bin" --endpoint "unix://$work/controller.sock" "$@"; }
nd() { "$client_bin" --endpoint "unix://$work/node.sock" "$@"; }
info=$(nd info) || fail "info: $info"
[ "$(jq -r .name <<<"$info")" = spoke.csi.dev ] || fail "plugin name: $info"
[ "$(jq -r '.topology["topology.spoke.csi.dev/zone"]' <<<"$info")" = e2e-zone-a ] || fail "topology: $info"

hub_params=(--param server=127.0.0.1 --param "share=$EXPORT" --param "nfsPort=$wan_nfs"
            --param "mountPort=$wan_mnt")

step "CreateVolume: dataset (datasets/e2e) and scratch"
ctl create-volume --name pvc-dataset "${hub_params[@]}" --param mode=dataset \
  --param subDir=datasets/e2e --param consistency=immutable \
  --access-mode multi-node-reader-only >"$work/ds.json" || fail "create dataset: $(cat "$work/ds.json")"
ctl create-volume --name pvc-scratch "${hub_params[@]}" --param mode=scratch \
  --param 'subDir=scratch/${pvc.metadata.namespace}/${pvc.metadata.name}' --param onDelete=delete \
  --param csi.storage.k8s.io/pvc/name=train-0 --param csi.storage.k8s.io/pvc/namespace=ml \
  --param csi.storage.k8s.io/pv/name=pvc-scratch \
  --access-mode multi-node-multi-writer >"$work/scratch.json" || fail "create scratch: $(cat "$work/scratch.json")"
ds_id=$(jq -r .volume_id "$work/ds.json")
sc_id=$(jq -r .volume_id "$work/scratch.json")
log "dataset volume: $ds_id"
log "scratch volume: $sc_id"
[ -d "$EXPORT/scratch/ml/train-0" ] || fail "scratch dir not created on the hub"

csi_dir="$kubelet/plugins/kubernetes.io/csi/spoke.csi.dev"
ds_staging="$csi_dir/dataset/globalmount"
sc_staging="$csi_dir/scratch/globalmount"
pod_target() { # pod pv
  mkdir -p "$kubelet/pods/$1/volumes/kubernetes.io~csi/$2"
  echo "$kubelet/pods/$1/volumes/kubernetes.io~csi/$2/mount"
}
ds_a=$(pod_target pod-a pvc-dataset); ds_b=$(pod_target pod-b pvc-dataset)
sc_a=$(pod_target pod-a pvc-scratch); sc_b=$(pod_target pod-b pvc-scratch)
mkdir -p "$ds_staging" "$sc_staging"

step "NodeStageVolume + NodePublishVolume (dataset into two pods, read-only)"
out=$(nd stage --volume-id "$ds_id" --staging "$ds_staging" --context "$work/ds.json" \
  --access-mode multi-node-reader-only) || fail "stage dataset: $out"
out=$(nd stage --volume-id "$ds_id" --staging "$ds_staging" --context "$work/ds.json" \
  --access-mode multi-node-reader-only) || fail "stage dataset (idempotent): $out"
for t in "$ds_a" "$ds_b"; do
  out=$(nd publish --volume-id "$ds_id" --staging "$ds_staging" --target "$t" --readonly \
    --context "$work/ds.json" --access-mode multi-node-reader-only) || fail "publish $t: $out"
done
out=$(nd publish --volume-id "$ds_id" --staging "$ds_staging" --target "$ds_a" --readonly \
  --context "$work/ds.json" --access-mode multi-node-reader-only) || fail "publish (idempotent): $out"
awk -v p="$ds_a" '$5 == p && $6 ~ /^ro(,|$)/ { found = 1 } END { exit !found }' /proc/self/mountinfo ||
  fail "$ds_a is not a read-only mount"

step "read the dataset through both pods and compare sha256 with the hub"
t_read=$(date +%s.%N)
grep -F './big files/' "$work/hub.sha256" > "$work/hub-large.sha256"
grep -vF './big files/' "$work/hub.sha256" > "$work/hub-small.sha256"
(cd "$ds_a" && sha256sum --quiet --strict -c "$work/hub-large.sha256") || fail "pod-a: checksum mismatch"
log "pod-a read, large files (cold, through the WAN): $(elapsed "$t_read") s"
t_read=$(date +%s.%N)
(cd "$ds_a" && sha256sum --quiet --strict -c "$work/hub-small.sha256") || fail "pod-a: checksum mismatch"
log "pod-a read, $(wc -l < "$work/hub-small.sha256") small files (cold, through the WAN): $(elapsed "$t_read") s"
t_read=$(date +%s.%N)
(cd "$ds_b" && sha256sum --quiet --strict -c "$work/hub.sha256") || fail "pod-b: checksum mismatch"
log "pod-b read (warm, from the cache): $(elapsed "$t_read") s"
if touch "$ds_a/should-fail" 2>/dev/null; then fail "dataset target is writable"; fi
# The hint control file is the one writable name of a read-only volume, and never on the hub.
printf '%s\n' "$(head -1 "$work/hub-small.sha256" | cut -c67-)" > "$ds_a/.spoke-hints" ||
  fail "the hint file is not writable in a read-only pod target"
[ ! -e "$ds/.spoke-hints" ] || fail "the hint file reached the hub"
ls -A "$ds_a" | grep -qx '.spoke-hints' && fail "the hint file is listed in the directory"
# The bind mounts propagated to a peer mount namespace (kubelet / the pod's runtime).
first=$(head -1 "$work/hub.sha256" | cut -c67-)
if ! nsenter --mount="/proc/$watcher_pid/ns/mnt" cmp "$ds_b/$first" "$ds/$first"; then
  grep -F "$kubelet" "/proc/$watcher_pid/mountinfo" >&2 || true
  fail "the publish mount did not propagate to another mount namespace"
fi

step "scratch: stage, publish into two pods, write through one, verify on the hub and the other"
out=$(nd stage --volume-id "$sc_id" --staging "$sc_staging" --context "$work/scratch.json" \
  --access-mode multi-node-multi-writer) || fail "stage scratch: $out"
for t in "$sc_a" "$sc_b"; do
  out=$(nd publish --volume-id "$sc_id" --staging "$sc_staging" --target "$t" \
    --context "$work/scratch.json" --access-mode multi-node-multi-writer) || fail "publish $t: $out"
done
head -c $((3 * 1024 * 1024 + 123)) /dev/urandom > "$work/w1.bin"
head -c 4000 /dev/urandom > "$work/w2.bin"
mkdir -p "$sc_a/out/ckpt"
cp "$work/w1.bin" "$sc_a/out/ckpt/model.bin"
cp "$work/w2.bin" "$sc_a/out/log.txt"
sync
cmp "$work/w1.bin" "$EXPORT/scratch/ml/train-0/out/ckpt/model.bin" || fail "model.bin differs on the hub"
cmp "$work/w2.bin" "$EXPORT/scratch/ml/train-0/out/log.txt" || fail "log.txt differs on the hub"
cmp "$work/w1.bin" "$sc_b/out/ckpt/model.bin" || fail "pod-b does not see pod-a's write"

step "ephemeral inline volume (no stage) into pod-c"
eph_target=$(pod_target pod-c inline-dataset)
out=$(nd publish --volume-id csi-e2e0123456789 --target "$eph_target" --readonly \
  --ctx csi.storage.k8s.io/ephemeral=true --ctx server=127.0.0.1 --ctx "share=$EXPORT" \
  --ctx "nfsPort=$wan_nfs" --ctx "mountPort=$wan_mnt" --ctx subDir=datasets/e2e --ctx mode=dataset \
  --ctx csi.storage.k8s.io/pod.name=pod-c --access-mode single-node-reader-only) ||
  fail "publish ephemeral: $out"
cmp "$eph_target/$first" "$ds/$first" || fail "ephemeral volume content differs"
[ -d "$kubelet/plugins/spoke.csi.dev/ephemeral/csi-e2e0123456789" ] || fail "no private ephemeral mount"

step "NodeGetVolumeStats"
for pair in "$ds_id@@$ds_a" "$sc_id@@$sc_b"; do
  st=$(nd stats --volume-id "${pair%%@@*}" --path "${pair#*@@}") || fail "stats: $st"
  log "stats ${pair#*@@}: $(jq -c . <<<"$st")"
  [ "$(jq -r '.usage[0].unit' <<<"$st")" = BYTES ] || fail "no byte usage: $st"
  [ "$(jq -r '.usage[0].total' <<<"$st")" -gt 0 ] || fail "hub capacity unknown: $st"
  [ "$(jq -r '.condition.abnormal' <<<"$st")" = false ] || fail "abnormal condition: $st"
done
st=$(nd stats --volume-id "$ds_id" --path "$work/not-mounted") && fail "stats on a missing path succeeded"
[ "$(jq -r .error.code <<<"$st")" = NOT_FOUND ] || fail "stats on a missing path: $st"

ds_fstype=$(awk -v p="$ds_staging" '$5 == p { for (i = 7; $i != "-"; i++); t = $(i + 1) } END { print t }' /proc/self/mountinfo)
if [[ "$ds_fstype" == fuse* ]]; then
  step "agent crash: the published target keeps serving (the node plugin holds the connection)"
  crash_and_read() {
    kill -KILL "${pids[agent]}"; wait "${pids[agent]}" 2>/dev/null || true; unset "pids[agent]"
    # A reader while the agent is down waits in the kernel, then gets the right bytes.
    cmp "$ds_a/$first" "$ds/$first" 2>"$work/crash-read.err" & local reader=$!
    sleep 1
    rm -f "$work/agent.sock"  # left by the killed agent
    spoke_start_agent "$agent_bin" "$work/agent.yaml" "$work/agent.log" 30 ||
      { pids[agent]=$SPOKE_PID; fail "the agent did not come back"; }
    pids[agent]=$SPOKE_PID
    wait "$reader" || fail "a read across the agent crash failed: $(cat "$work/crash-read.err")"
    cmp "$ds_a/$first" "$ds/$first" || fail "reading after the agent restart"
    ls "$ds_a" >/dev/null || fail "listing after the agent restart"
    grep -q "mount taken over from the previous agent" "$work/agent.log" ||
      fail "the new agent did not take the connection over"
  }
  crash_and_read
  step "node plugin restart while the agent runs, then an agent crash: still no error"
  kill -TERM "${pids[node]}"; wait "${pids[node]}" 2>/dev/null || true
  cmp "$ds_a/$first" "$ds/$first" || fail "reading with the node plugin down"
  "$node_bin" --endpoint "unix://$work/node.sock" --node-id e2e-node --agent-socket "$work/agent.sock" \
    --config "$work/node.yaml" --log-level debug >>"$work/node.log" 2>&1 &
  pids[node]=$!
  for _ in $(seq 100); do [ -S "$work/keeper.sock" ] && [ -S "$work/node.sock" ] && break; sleep 0.1; done
  sleep 5  # the agent checks its keeper every 2 s and gives it the connections again
  crash_and_read
else
  log "(agent mounts are $ds_fstype, not FUSE: agent-crash step skipped)"
fi

step "NodeUnpublishVolume, NodeUnstageVolume"
for pair in "$ds_id@@$ds_a" "$ds_id@@$ds_b" "$sc_id@@$sc_a" "$sc_id@@$sc_b" \
            "csi-e2e0123456789@@$eph_target"; do
  out=$(nd unpublish --volume-id "${pair%%@@*}" --target "${pair#*@@}") || fail "unpublish ${pair#*@@}: $out"
  [ ! -e "${pair#*@@}" ] || fail "target ${pair#*@@} not removed"
done
out=$(nd unpublish --volume-id "$ds_id" --target "$ds_a") || fail "unpublish (idempotent): $out"
[ ! -e "$kubelet/plugins/spoke.csi.dev/ephemeral/csi-e2e0123456789" ] || fail "ephemeral private mount left"
for pair in "$ds_id@@$ds_staging" "$sc_id@@$sc_staging"; do
  out=$(nd unstage --volume-id "${pair%%@@*}" --staging "${pair#*@@}") || fail "unstage: $out"
  out=$(nd unstage --volume-id "${pair%%@@*}" --staging "${pair#*@@}") || fail "unstage (idempotent): $out"
done
left=$(mounts_under | grep -v "^$kubelet\$" || true)
[ -z "$left" ] || fail "mounts left after unstage: $left"

step "DeleteVolume"
out=$(ctl delete-volume --volume-id "$sc_id") || fail "delete scratch: $out"
out=$(ctl delete-volume --volume-id "$ds_id") || fail "delete dataset: $out"
[ ! -e "$EXPORT/scratch/ml/train-0" ] || fail "scratch dir still on the hub after DeleteVolume"
[ -f "$ds/$first" ] || fail "DeleteVolume of a dataset removed the dataset"

step "stop everything; nothing may be left"
kill -KILL "$watcher_pid" 2>/dev/null; wait "$watcher_pid" 2>/dev/null || true; watcher_pid=""
started=("${pids[@]}")
for name in node controller agent proxy; do stop_pid "$name"; done
umount "$kubelet" || fail "cannot unmount the kubelet dir"
left=$(mounts_under || true)
[ -z "$left" ] || fail "mounts left: $left"
grep -F "$work" /proc/self/mountinfo && fail "a mount under $work is left"
for pid in "${started[@]}"; do
  kill -0 "$pid" 2>/dev/null && fail "process $pid is still running"
done
log "all steps passed"
