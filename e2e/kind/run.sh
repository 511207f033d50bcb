#!/usr/bin/env bash
# End-to-end test of Spoke in a kind cluster (needs Docker, kind, kubectl, helm).
#
#   e2e/kind/run.sh                 # build, deploy, verify, delete the cluster
#   KEEP_CLUSTER=1 e2e/kind/run.sh  # leave the cluster up (e.g. for the external e2e suite)
#
# 1. kind cluster (kind-config.yaml: /dev/fuse in every node);
# 2. builds the Spoke image (Dockerfile) and the hub image (hub.Dockerfile), loads both;
# 3. runs the nfs-ganesha hub (hub.yaml) exporting a generated dataset + SHA256SUMS;
# 4. helm installs charts/spoke with values-kind.yaml (dataset StorageClass -> the hub);
# 5. the shared workloads of e2e/workloads (as e2e/k8s runs them): dataset PVC read cold then
#    warm (bytes from the hub, per the agent's /metrics), scratch PVC written then read by
#    another pod, a CSI inline volume, the agent pod deleted under a reader (reported), a node
#    plugin restart, kubelet's volume metrics; then no FUSE mount may be left on the nodes;
# 6. cleanup (trap): diagnostics on failure, then the cluster is deleted.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/e2e/kind
CLUSTER=${CLUSTER:-spoke-e2e}
# Pinned node image (Kubernetes 1.31, as the chart tests validate against); needs kind >= 0.24.
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.31.2}
IMAGE=spoke:e2e
HUB_IMAGE=spoke-hub:e2e
NS=spoke-e2e
DRIVER_NS=kube-system
RELEASE=spoke
TIMEOUT=${TIMEOUT:-300s}

log() { echo "e2e-kind: $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done
docker info >/dev/null 2>&1 || die "no Docker engine reachable (docker info failed)"

KUBECONFIG_FILE=$(mktemp)
export KUBECONFIG=$KUBECONFIG_FILE

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    log "failed (rc=$rc); diagnostics:"
    kubectl get pods -A -o wide || true
    kubectl -n "$NS" describe pvc,job,pods || true
    kubectl -n "$DRIVER_NS" logs -l app.kubernetes.io/instance="$RELEASE" --all-containers \
      --prefix --tail=100 || true
    kubectl -n "$NS" logs -l app.kubernetes.io/name=spoke-hub --tail=100 || true
    kubectl get events -A --sort-by=.lastTimestamp | tail -n 50 || true
  fi
  if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
    log "KEEP_CLUSTER=1: cluster $CLUSTER kept; KUBECONFIG=$KUBECONFIG_FILE"
  else
    kind delete cluster --name "$CLUSTER" || true
    rm -f "$KUBECONFIG_FILE"
  fi
  exit "$rc"
}
trap cleanup EXIT

log "creating kind cluster $CLUSTER ($KIND_NODE_IMAGE)"
kind create cluster --name "$CLUSTER" --image "$KIND_NODE_IMAGE" \
  --config "$HERE/kind-config.yaml" --kubeconfig "$KUBECONFIG_FILE" --wait 180s

log "building $IMAGE and $HUB_IMAGE"
docker build -t "$IMAGE" "$ROOT"
docker build -t "$HUB_IMAGE" -f "$HERE/hub.Dockerfile" "$HERE"
kind load docker-image --name "$CLUSTER" "$IMAGE" "$HUB_IMAGE"

log "starting the hub"
kubectl apply -f "$HERE/hub.yaml"
kubectl -n "$NS" rollout status deployment/spoke-hub --timeout="$TIMEOUT"

log "installing the chart"
helm install "$RELEASE" "$ROOT/charts/spoke" --namespace "$DRIVER_NS" \
  -f "$HERE/values-kind.yaml" --wait --timeout "$TIMEOUT"
kubectl get csidriver spoke.csi.dev

# The workloads and checks e2e/k8s runs too (e2e/workloads/lib.sh).
export SPOKE_IMAGE=$IMAGE HUB_SERVER=spoke-hub.spoke-e2e.svc.cluster.local HUB_SHARE=/srv/export \
  NFS_PORT=2049 MOUNT_PORT=20048 DATASET_SUBDIR=dataset NS DRIVER_NS RELEASE TIMEOUT
. "$ROOT/e2e/workloads/lib.sh"

log "dataset PVC: cold read, then warm read from another pod"
wl_check_dataset_cold_warm
log "scratch PVC: written by one pod, read by the next"
wl_check_scratch
log "CSI inline volume"
wl_check_inline
log "agent pod deleted under a reader"
wl_delete_agent_under_reader
log "node plugin pod restart"
wl_restart_node_plugin
log "kubelet volume metrics (kind's kubelet refreshes them every minute)"
wl_start_reader 150
wl_check_volume_stats "$(kubectl -n "$NS" get pod spoke-reader -o jsonpath='{.spec.nodeName}')" 120 0
kubectl -n "$NS" delete pod spoke-reader --wait --timeout="$TIMEOUT" >/dev/null

log "unpublish/unstage: deleting the workloads leaves no Spoke mount on the nodes"
wl_delete_workloads
# Unmounts happen asynchronously after the pods are gone: give kubelet a little time.
for n in $(kind get nodes --name "$CLUSTER"); do
  left=1
  for _ in $(seq 30); do
    # mountinfo field 5 is the mount point; the file system type follows " - ".
    left=$(docker exec "$n" awk '$5 ~ "^/var/lib/kubelet/" && / - fuse/' /proc/self/mountinfo | wc -l)
    [ "$left" -eq 0 ] && break
    sleep 2
  done
  [ "$left" -eq 0 ] || die "$left FUSE mount(s) left under /var/lib/kubelet on $n after all pods were deleted"
done

if [ -n "${E2E_TEST:-}" ]; then
  log "Kubernetes external storage suite ($E2E_TEST)"
  (cd "$ROOT" && "$E2E_TEST" -kubeconfig "$KUBECONFIG" \
    -storage.testdriver="$HERE/testdriver.yaml" -repo-root="$HERE" \
    -ginkgo.focus='External.Storage.*spoke.csi.dev' -ginkgo.skip='Disruptive|Serial|\[Slow\]')
fi

log "PASS"
