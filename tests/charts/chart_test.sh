#!/usr/bin/env bash
# Tests of the Helm chart and the plain manifests (ctest label "charts").
#
#   tests/charts/chart_test.sh                   # from anywhere in the checkout
#   UPDATE_GOLDEN=1 tests/charts/chart_test.sh   # rewrite golden files and manifests/deploy
#
# Checks, offline:
#  1. helm lint --strict with default, HyperPod and all-features values;
#  2. helm template output equals tests/charts/golden/{default,hyperpod,full}.yaml;
#  3. every rendered object and every file under manifests/ validates against the Kubernetes
#     1.31 OpenAPI schemas (kubernetes-validate --strict); only the ServiceMonitor (a CRD with
#     no built-in schema) is skipped, and only in the all-features rendering that enables it;
#  4. the renderings mean what the binaries need (check_rendered.py: flags, config keys, host
#     paths, Bidirectional propagation, RBAC, HyperPod placement);
#  5. bad values (missing hub, unknown mode, ...) make helm template fail, naming the value;
#  6. manifests/deploy/spoke.yaml equals `helm template spoke charts/spoke -n kube-system`;
#  7. manifests/examples and e2e/kind/testdriver.yaml are consistent with the driver;
#  8. e2e/kind: its manifests (placeholders filled) and the chart with values-kind.yaml
#     validate; its shell scripts pass bash -n (and shellcheck when it is installed).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

TEST_NAME=chart_test
. tests/charts/lib.sh
GOLDEN=tests/charts/golden
DEPLOY=manifests/deploy/spoke.yaml
RELEASE=spoke
NAMESPACE=kube-system

# variant -> extra helm arguments
declare -A VALUES=(
  [default]=""
  [hyperpod]="-f $CHART/values-hyperpod.yaml"
  [full]="-f tests/charts/values-full.yaml"
)
VARIANTS=(default hyperpod full)

render() { # variant output
  # The peer CA and certificate that genCA/genSignedCert make differ on every rendering: their
  # base64 is replaced by one fixed (valid base64) value, so that the rest can be compared.
  # shellcheck disable=SC2086 # VALUES entries are word lists on purpose
  "$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" ${VALUES[$1]} |
    sed -E -e 's#^(  (tls\.crt|tls\.key|ca\.crt|ca\.key): )[A-Za-z0-9+/=]{200,}$#\1R0VORVJBVEVE#' \
      -e 's#^(      caBundle: )[A-Za-z0-9+/=]{200,}$#\1R0VORVJBVEVE#' >"$2"
}

# compare_or_update expected actual what
compare_or_update() {
  if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
    mkdir -p "$(dirname "$1")"
    cp "$2" "$1"
    step "updated $1"
  elif [ ! -f "$1" ]; then
    fail "$3: $1 does not exist (run with UPDATE_GOLDEN=1)"
  elif ! diff -u "$1" "$2" >"$WORK/diff"; then
    head -n 200 "$WORK/diff" >&2
    fail "$3: rendering differs from $1 (diff above; UPDATE_GOLDEN=1 rewrites it if intended)"
  fi
}

# validate file allowed-missing-schema-regex what
validate() {
  local out rc=0
  out=$("$KUBE_VALIDATE" --strict --kubernetes-version "$K8S_VERSION" --quiet "$1" 2>&1) || rc=$?
  # A kind without a schema is only a warning to kubernetes-validate: fail on it unless it is
  # the one kind this rendering is allowed to contain.
  local unknown
  unknown=$(grep "Couldn't find schema" <<<"$out" | grep -Ev "$2" || true)
  if [ "$rc" -ne 0 ] || [ -n "$unknown" ]; then
    echo "$out" >&2
    fail "$3: schema validation against Kubernetes $K8S_VERSION"
  fi
}

step "helm lint"
for v in "${VARIANTS[@]}"; do
  # shellcheck disable=SC2086
  if ! "$HELM" lint --strict "$CHART" ${VALUES[$v]} >"$WORK/lint" 2>&1; then
    cat "$WORK/lint" >&2
    fail "helm lint ($v values)"
  fi
done

step "render, golden, schema and semantic checks"
NO_SCHEMA_OK='^$'   # matches nothing: no unknown kinds allowed
for v in "${VARIANTS[@]}"; do
  if ! render "$v" "$WORK/$v.yaml" 2>"$WORK/err"; then
    cat "$WORK/err" >&2
    fail "helm template ($v values)"
    continue
  fi
  compare_or_update "$GOLDEN/$v.yaml" "$WORK/$v.yaml" "golden $v"
  allowed=$NO_SCHEMA_OK
  # ServiceMonitor is a Prometheus Operator CRD: kubernetes-validate has no schema for it.
  # check_rendered.py checks its selector and port instead.
  # So is cert-manager's Certificate (peers.tls.source certManager).
  [ "$v" = full ] && allowed='kind (ServiceMonitor with api version monitoring.coreos.com/v1|Certificate with api version cert-manager.io/v1)'
  validate "$WORK/$v.yaml" "$allowed" "rendering ($v values)"
  if ! "$PYTHON" tests/charts/check_rendered.py render "$v" "$WORK/$v.yaml"; then
    fail "semantic checks ($v values)"
  fi
done

step "bad values are refused"
# expect_fail "message fragment" helm-args...
expect_fail() {
  local want=$1
  shift
  if "$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" "$@" >/dev/null 2>"$WORK/err"; then
    fail "helm template $* succeeded; want an error about '$want'"
  elif ! grep -qF -- "$want" "$WORK/err"; then
    cat "$WORK/err" >&2
    fail "helm template $*: error does not mention '$want'"
  fi
}
SC=(-f tests/charts/values-full.yaml)
expect_fail "parameters.server" "${SC[@]}" --set 'storageClasses[0].parameters.server='
expect_fail "parameters.share" "${SC[@]}" --set 'storageClasses[0].parameters.share=export'
expect_fail "parameters.mode" "${SC[@]}" --set 'storageClasses[1].parameters.mode=bogus'
expect_fail "parameters.onDelete" "${SC[@]}" --set 'storageClasses[0].parameters.onDelete=delete'
expect_fail "parameters.onDelete" "${SC[@]}" --set 'storageClasses[1].parameters.onDelete=shred'
expect_fail "parameters.consistency" "${SC[@]}" --set 'storageClasses[1].parameters.consistency=eventual'
expect_fail "parameters.prefetch" "${SC[@]}" --set 'storageClasses[1].parameters.prefetch=always'
expect_fail "reclaimPolicy Retain" "${SC[@]}" --set 'storageClasses[0].reclaimPolicy=Delete'
expect_fail "inlineVolumes.servers" --set inlineVolumes.enabled=true
expect_fail "inlineVolumes.modes" "${SC[@]}" --set 'inlineVolumes.modes[0]=any'
expect_fail "cache.sizeBytes" --set 'cache.sizeBytes=lots'
expect_fail "cache.hostPath" --set 'cache.hostPath=relative/dir'
expect_fail "kubeletDir" --set 'kubeletDir=var/lib/kubelet'
expect_fail "node.terminationGracePeriodSeconds" --set node.terminationGracePeriodSeconds=40
expect_fail "agent.terminationGracePeriodSeconds" --set agent.keeperWaitSeconds=25
expect_fail "agent.writeBackBytesPerVolume" --set agent.writeBackBytesPerVolume=2Gi
expect_fail "agent.writeBackBytesPerVolume" --set agent.writeBackBytesPerVolume=4096
expect_fail "agent.writeBackBytesPerVolume" --set agent.writeBackBytesPerVolume=lots
expect_fail "peers.tokenSecret" --set peers.enabled=true
expect_fail "peers.port" "${SC[@]}" --set peers.port=9810
expect_fail "peers.timeoutMs" "${SC[@]}" --set peers.timeoutMs=0
expect_fail "peers.tls.source" "${SC[@]}" --set peers.tls.source=none
expect_fail "peers.tls.secretName" "${SC[@]}" --set peers.tls.source=secret
expect_fail "peers.tls.certManager.issuerRef.name" "${SC[@]}" --set peers.tls.certManager.issuerRef.name=
expect_fail "peers.tls.serverName" "${SC[@]}" --set peers.tls.serverName=
expect_fail "peers.tls.identity \"ip\"" "${SC[@]}" --set peers.tls.identity=ip
# A shared Secret cannot name each agent's address; a minted certificate names no shared name.
expect_fail "peers.tls.identity address needs peers.tls.source generate" "${SC[@]}" \
  --set peers.tls.identity=address
expect_fail "peers.tls.identity name needs a shared certificate" "${SC[@]}" \
  --set peers.tls.source=generate --set peers.tls.identity=name
expect_fail "peers.tls.agentValidityDays" "${SC[@]}" --set peers.tls.source=generate \
  --set peers.tls.agentValidityDays=0
expect_fail "logLevel" --set 'logLevel=verbose'
expect_fail "agent.memoryBudgetBytes" --set 'agent.memoryBudgetBytes=lots'
expect_fail "must be below agent.resources.limits.memory" --set 'agent.memoryBudgetBytes=2Gi'
expect_fail "agent.resources.limits.memory" --set 'agent.resources.limits.memory=big'

step "manifests/"
# The plain manifest has no warm-up webhook: its TLS is made by helm at install time, and a
# fixed certificate in a file everybody can read would be no certificate at all.
if "$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" --set warmup.webhook.enabled=false \
    >"$WORK/deploy.yaml" 2>"$WORK/err"; then
  compare_or_update "$DEPLOY" "$WORK/deploy.yaml" "$DEPLOY (helm template $RELEASE $CHART -n $NAMESPACE --set warmup.webhook.enabled=false)"
else
  cat "$WORK/err" >&2
  fail "helm template for $DEPLOY"
fi

step "SpokeWarmup CRD and the warm-up objects"
"$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" --set warmup.enabled=false >"$WORK/nowarmup.yaml"
if ! "$PYTHON" tests/charts/check_warmup.py "$CHART/crds/spoke.csi.dev_spokewarmups.yaml" \
    "$WORK/default.yaml" "$WORK/nowarmup.yaml" "$WORK/deploy.yaml"; then
  fail "warm-up checks"
fi
mapfile -t manifest_files < <(find manifests -name '*.yaml' | sort)
if [ "${#manifest_files[@]}" -lt 6 ]; then
  fail "manifests/: want deploy/spoke.yaml and 5 examples, found ${manifest_files[*]:-nothing}"
fi
for f in "${manifest_files[@]}"; do
  validate "$f" "$NO_SCHEMA_OK" "$f"
done
if ! "$PYTHON" tests/charts/check_rendered.py examples manifests/examples; then
  fail "manifests/examples semantic checks"
fi

step "e2e/kind"
for f in e2e/kind/kind-config.yaml e2e/kind/testdriver.yaml e2e/kind/storageclass.yaml \
  e2e/kind/values-kind.yaml e2e/kind/run.sh e2e/kind/lib.sh e2e/kind/runc-capfilter; do
  [ -f "$f" ] || fail "$f missing"
done
# The ${...} placeholders of these files are filled per run (run.sh's wl_render: the hub's
# address and ports); here with example values of the same kinds.
. e2e/workloads/lib.sh
kind_render() {
  wl_render "$PWD/$1" NS=spoke-e2e NODE=spoke-e2e-worker CLAIM=dataset-wan \
    SPOKE_IMAGE=localhost/spoke:e2e HUB_SERVER=10.250.0.1 HUB_SHARE=/srv/export NFS_PORT=2049 \
    MOUNT_PORT=20048 WAN_NFS_PORT=20491 WAN_MOUNT_PORT=20492 DATASET_SUBDIR=datasets/e2e \
    WAN_DATASET_SUBDIR=datasets/wan
}
mkdir -p "$WORK/testdriver"
kind_render e2e/kind/testdriver.yaml >"$WORK/testdriver/testdriver.yaml" &&
  kind_render e2e/kind/storageclass.yaml >"$WORK/testdriver/storageclass.yaml" &&
  "$PYTHON" tests/charts/check_rendered.py testdriver "$WORK/testdriver/testdriver.yaml" ||
  fail "e2e/kind/testdriver.yaml checks"
for f in e2e/kind/*.yaml; do
  # kind-config.yaml, testdriver.yaml and values-kind.yaml are not Kubernetes objects.
  case $(basename "$f") in kind-config.yaml | testdriver.yaml | values-kind.yaml) continue ;; esac
  kind_render "$f" >"$WORK/kind-$(basename "$f")" || fail "rendering $f"
  validate "$WORK/kind-$(basename "$f")" "$NO_SCHEMA_OK" "$f"
done
# The chart as run.sh installs it.
kind_render e2e/kind/values-kind.yaml >"$WORK/values-kind.yaml" || fail "rendering values-kind.yaml"
if "$HELM" lint --strict "$CHART" -f "$WORK/values-kind.yaml" >"$WORK/lint" 2>&1 &&
  "$HELM" template "$RELEASE" "$CHART" --namespace "$NAMESPACE" \
    -f "$WORK/values-kind.yaml" >"$WORK/kind.yaml" 2>"$WORK/err"; then
  validate "$WORK/kind.yaml" "$NO_SCHEMA_OK" "rendering (e2e/kind/values-kind.yaml)"
else
  cat "$WORK/lint" "$WORK/err" >&2 2>/dev/null || true
  fail "chart with e2e/kind/values-kind.yaml"
fi
for f in e2e/kind/*.sh tests/charts/*.sh; do
  bash -n "$f" || fail "bash -n $f"
done
if command -v shellcheck >/dev/null; then
  shellcheck e2e/kind/*.sh tests/charts/*.sh || fail "shellcheck"
else
  step "shellcheck not installed: skipped"
fi

finish
