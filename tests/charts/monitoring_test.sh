#!/usr/bin/env bash
# Tests of the chart's Grafana dashboard and PrometheusRule (ctest label "charts").
#
#   tests/charts/monitoring_test.sh              # from anywhere in the checkout
#
# Checks, offline:
#  1. helm lint --strict with tests/charts/values-monitoring.yaml (both monitoring.* on);
#  2. the default rendering has neither the dashboard ConfigMap nor the PrometheusRule;
#  3. the rendering validates against the Kubernetes 1.31 schemas (the PrometheusRule and
#     ServiceMonitor, CRDs with no built-in schema, are skipped);
#  4. check_monitoring.py: the dashboard is valid JSON and every panel has a query, and every
#     metric name in every dashboard query and alert expression is one the agent exports (read
#     from the agent's metric registrations in cache-agent/ and common/) or one of a short list
#     of kube-state-metrics names; every alert has for, severity, summary and description
#     naming the node (and the volume);
#  5. promtool check rules on the alert groups, when promtool is installed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

TEST_NAME=monitoring_test
. tests/charts/lib.sh
VALUES=tests/charts/values-monitoring.yaml

step "helm lint"
if ! "$HELM" lint --strict "$CHART" -f "$VALUES" >"$WORK/lint" 2>&1; then
  cat "$WORK/lint" >&2
  fail "helm lint ($VALUES)"
fi

step "off by default"
if "$HELM" template spoke "$CHART" --namespace kube-system >"$WORK/default.yaml" 2>"$WORK/err"; then
  if grep -qE '^kind: PrometheusRule$|^    grafana_dashboard: ' "$WORK/default.yaml"; then
    fail "the default rendering has a PrometheusRule or a dashboard ConfigMap"
  fi
else
  cat "$WORK/err" >&2
  fail "helm template (default values)"
fi

step "render, schema and metric checks"
if ! "$HELM" template spoke "$CHART" --namespace kube-system -f "$VALUES" >"$WORK/monitoring.yaml" 2>"$WORK/err"; then
  cat "$WORK/err" >&2
  fail "helm template ($VALUES)"
else
  rc=0
  out=$("$KUBE_VALIDATE" --strict --kubernetes-version "$K8S_VERSION" --quiet "$WORK/monitoring.yaml" 2>&1) || rc=$?
  # Unknown kinds are only warnings to kubernetes-validate: fail on any but the two CRDs.
  unknown=$(grep "Couldn't find schema" <<<"$out" |
    grep -Ev 'kind (PrometheusRule|ServiceMonitor) with api version monitoring.coreos.com/v1' || true)
  if [ "$rc" -ne 0 ] || [ -n "$unknown" ]; then
    echo "$out" >&2
    fail "schema validation against Kubernetes $K8S_VERSION"
  fi
  if ! "$PYTHON" tests/charts/check_monitoring.py render . "$WORK/monitoring.yaml"; then
    fail "dashboard and alert checks (check_monitoring.py)"
  fi
  if command -v promtool >/dev/null; then
    # promtool reads a rule file: the PrometheusRule's spec (its groups).
    if ! "$PYTHON" -c 'import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "PrometheusRule"]
yaml.safe_dump(docs[0]["spec"], sys.stdout)' "$WORK/monitoring.yaml" >"$WORK/rules.yaml" ||
      ! promtool check rules "$WORK/rules.yaml" >&2; then
      fail "promtool check rules"
    fi
  else
    step "promtool not installed: PromQL syntax not checked"
  fi
fi

finish
