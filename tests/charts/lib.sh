# shellcheck shell=bash
# Shared by the chart tests (sourced, from the checkout's root, with TEST_NAME set): the pinned
# tools the install script puts in place, a scratch directory, and failure counting.
K8S_VERSION=1.31
TOOLS_VENV=${SPOKE_TOOLS_VENV:-/usr/local/share/spoke-tools/venv}
HELM=${HELM:-$(command -v helm || echo /usr/local/bin/helm)}
KUBE_VALIDATE=${KUBE_VALIDATE:-$TOOLS_VENV/bin/kubernetes-validate}
PYTHON=${PYTHON:-$TOOLS_VENV/bin/python3}   # has PyYAML (a kubernetes-validate dependency)
CHART=charts/spoke

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

failures=0
fail() { echo "$TEST_NAME: FAIL: $*" >&2; failures=$((failures + 1)); }
step() { echo "$TEST_NAME: $*"; }

for tool in "$HELM" "$KUBE_VALIDATE" "$PYTHON"; do
  [ -x "$tool" ] || { echo "$TEST_NAME: FAIL: $tool not found: run scripts/install-deps.sh" >&2; exit 1; }
done

# Exits non-zero when any check failed.
finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$TEST_NAME: $failures check(s) failed" >&2
    exit 1
  fi
  step "all checks passed"
}
