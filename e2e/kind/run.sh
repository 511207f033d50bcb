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
# 5. a Job verifies every file through a ReadOnlyMany PVC (sha256sum -c), twice: cold, then
#    warm; the agent's /metrics must show misses after the first run and hits after the second;
# 6. a pod with a CSI inline volume verifies the dataset too;
# 7. cleanup (trap): diagnostics on failure, then the cluster is deleted.
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

# metric NAME POD: sum of a counter over all its label sets, from the agent's /metrics
# (through the API server's pod proxy: no port-forward process to manage).
metric() {
  kubectl get --raw "/api/v1/namespaces/$DRIVER_NS/pods/$2:9810/proxy/metrics" |
    awk -v name="$1" '$1 == name || index($1, name "{") == 1 { sum += $NF } END { printf "%d\n", sum }'
}

# run_verify_job: runs the verify Job to completion, prints the node it ran on.
run_verify_job() {
  kubectl -n "$NS" delete job spoke-verify --ignore-not-found --wait >/dev/null
  kubectl apply -f "$HERE/workload.yaml" >/dev/null
  kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Bound pvc/dataset --timeout="$TIMEOUT" >&2
  if ! kubectl -n "$NS" wait --for=condition=complete job/spoke-verify --timeout="$TIMEOUT" >&2; then
    kubectl -n "$NS" logs job/spoke-verify >&2 || true
    die "verify Job did not complete"
  fi
  kubectl -n "$NS" logs job/spoke-verify >&2
  kubectl -n "$NS" get pods -l app.kubernetes.io/name=spoke-verify \
    -o jsonpath='{.items[0].spec.nodeName}'
}

agent_on() { # node -> agent pod name
  kubectl -n "$DRIVER_NS" get pods \
    -l app.kubernetes.io/instance="$RELEASE",app.kubernetes.io/component=agent \
    --field-selector spec.nodeName="$1" -o jsonpath='{.items[0].metadata.name}'
}

log "cold read: PVC + Job (sha256sum -c over the dataset)"
node=$(run_verify_job)
agent=$(agent_on "$node")
[ -n "$agent" ] || die "no agent pod on node $node"
misses=$(metric spoke_cache_misses_total "$agent")
hits_cold=$(metric spoke_cache_hits_total "$agent")
log "after the cold run on $node: spoke_cache_misses_total=$misses spoke_cache_hits_total=$hits_cold"
[ "$misses" -gt 0 ] || die "spoke_cache_misses_total is $misses after a cold read: data did not come through the agent"

log "warm read: the same Job again"
node2=$(run_verify_job)
if [ "$node2" = "$node" ]; then
  hits=$(metric spoke_cache_hits_total "$agent")
  log "after the warm run: spoke_cache_hits_total=$hits"
  [ "$hits" -gt "$hits_cold" ] || die "spoke_cache_hits_total did not grow on a warm re-read ($hits_cold -> $hits)"
else
  log "warm run landed on $node2, not $node: hit check skipped"
fi

log "CSI inline volume"
kubectl apply -f "$HERE/inline-pod.yaml" >/dev/null
kubectl -n "$NS" wait --for=jsonpath='{.status.phase}'=Succeeded pod/spoke-inline-verify \
  --timeout="$TIMEOUT" || { kubectl -n "$NS" logs spoke-inline-verify >&2 || true; die "inline volume pod did not succeed"; }
kubectl -n "$NS" logs spoke-inline-verify >&2

log "unpublish/unstage: deleting the workloads leaves no Spoke mount on the nodes"
kubectl -n "$NS" delete pod spoke-inline-verify --wait >/dev/null
kubectl -n "$NS" delete job spoke-verify --wait >/dev/null
kubectl -n "$NS" wait --for=delete pod -l app.kubernetes.io/name=spoke-verify --timeout="$TIMEOUT" || true
kubectl -n "$NS" delete pvc dataset --wait >/dev/null
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
