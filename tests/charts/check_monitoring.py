#!/usr/bin/env python3
"""Checks of the chart's Grafana dashboard and PrometheusRule against the agent's metrics.

Usage:
  check_monitoring.py metrics ROOT           # print the series the agent exports, one a line
  check_monitoring.py render ROOT FILE       # check a rendering with both monitoring.* on
Exits 1 with one line per failed check.

What the agent exports is read from its C++ source: every Registry::GetCounter, GetGauge and
GetHistogram call under cache-agent/ and common/ (a histogram adds _bucket, _sum, _count). A
scrape of a running agent would list only the series that exist at that moment: per-volume
series need a mounted volume, and spoke_hub_errors_total, spoke_fuse_op_errors_total and each
operation's spoke_hub_request_seconds appear only once such a request happened. A call whose
name this parser cannot read is an error, not a skipped metric.

The rendering check: the dashboard is valid JSON, every panel has a query, every spoke_
selector is filtered by the node variable, and every metric name in every dashboard query
and alert expression is one the agent exports or one of KUBE_STATE_METRICS; every alert has
`for`, a severity, and a summary and description naming the node (and the volume when the
alert is per volume).
"""
import json
import os
import re
import sys

import yaml

# Series that are not the agent's: kube-state-metrics, for agent restarts and pod -> node.
KUBE_STATE_METRICS = {"kube_pod_container_status_restarts_total", "kube_pod_info"}
# The agent's own binaries are cache-agent/ minus other programs' folders; common/ is linked
# into every binary. common/metrics.{h,cc} is the registry itself.
SOURCE_DIRS = ("cache-agent", "common")
NOT_AGENT = ("cache-agent/cli/", "cache-agent/keeper/", "common/metrics.h", "common/metrics.cc")
# Alerts the chart promises (README "Dashboard and alerts").
REQUIRED_ALERTS = {"SpokeHubUnreachable", "SpokeHubErrorsRising", "SpokeHitRatioDrop",
                   "SpokeCacheFillStalled", "SpokeCacheFullWastingPrefetch",
                   "SpokeAgentRestarting"}
SEVERITIES = {"critical", "warning", "info"}

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)
    return cond


# ------------------------------------------------------------------------ the agent's metrics

CPP_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/|\'(?:\\.|[^\'\\])\'', re.S)
GET_CALL = re.compile(r'(?:\.|->)\s*Get(Counter|Gauge|Histogram)\s*\(\s*("[^"]*"|[A-Za-z_]\w*)?')
NAME = re.compile(r"^spoke_[a-z0-9_]+$")


def strip_comments(text):
    """C++ text with comments blanked (newlines kept, so line numbers stay right)."""
    def repl(m):
        s = m.group(0)
        if s.startswith("//") or s.startswith("/*"):
            return re.sub(r"[^\n]", " ", s)
        return s
    return CPP_TOKEN.sub(repl, text)


def exported_metrics(root):
    """{series name: type} of every metric the agent's source registers."""
    families = {}

    def add(name, kind, where):
        if not check(NAME.match(name), f"{where}: metric name {name!r} is not spoke_[a-z0-9_]+"):
            return
        if name in families and families[name] != kind:
            check(False, f"{where}: {name} registered as {kind} and as {families[name]}")
        families[name] = kind

    files = []
    for d in SOURCE_DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            for n in names:
                if n.endswith((".cc", ".h")):
                    rel = os.path.relpath(os.path.join(dirpath, n), root)
                    if not rel.startswith(NOT_AGENT):
                        files.append(rel)
    for rel in sorted(files):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = strip_comments(f.read())
        for m in GET_CALL.finditer(text):
            kind = m.group(1).lower()
            where = f"{rel}:{text.count(chr(10), 0, m.start()) + 1}"
            arg = m.group(2)
            if arg is None:
                check(False, f"{where}: Get{m.group(1)} call whose name this parser cannot read")
            elif arg.startswith('"'):
                add(arg[1:-1], kind, where)
            else:
                # The name is a parameter of a helper lambda in the same file, e.g. peer_node.cc:
                #   auto counter = [&](const char* name, ...) { return &registry.GetCounter(name..
                # The names are the string literals that start the helper's calls.
                helper = re.search(r"auto\s+(\w+)\s*=\s*\[[^\]]*\]\s*\(\s*(?:const\s+)?[\w:]+"
                                   r"\s*[*&]?\s*" + re.escape(arg) + r"\b", text)
                if not check(helper, f"{where}: Get{m.group(1)}({arg}, ...): {arg} is not the "
                                     "first parameter of a helper lambda in this file"):
                    continue
                calls = re.findall(r"\b" + re.escape(helper.group(1)) + r'\s*\(\s*"([^"]*)"', text)
                check(calls, f"{where}: helper {helper.group(1)} is never called with a name")
                for name in calls:
                    add(name, kind, where)
    check(len(families) >= 40, f"found only {len(families)} metric families in the agent's "
                               "source: the parser misses registrations")
    series = {}
    for name, kind in families.items():
        if kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                series[name + suffix] = name
        else:
            series[name] = name
    return series


# ------------------------------------------------------------------------ PromQL

KEYWORDS = {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan"}


def promql_names(expr):
    """Metric names an expression reads (bare names and the selectors before { or [)."""
    s = expr
    # Grafana variable queries: label_values(SELECTOR, label) reads SELECTOR's metric.
    s = re.sub(r"\blabel_values\s*\(\s*([^,()]*(?:\{[^}]*\})?)\s*,\s*\w+\s*\)", r"(\1)", s)
    s = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', s)  # strings
    s = re.sub(r"\{[^{}]*\}", " ", s)                          # label matchers
    s = re.sub(r"\[[^\[\]]*\]", " ", s)                        # ranges, subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", s)
    s = re.sub(r"\$\{?\w+\}?", " ", s)                         # dashboard variables
    s = re.sub(r"\b\d+(\.\d+)?(ms|[smhdwy])\b", " ", s)        # durations (offset 15m)
    s = re.sub(r"(?<![\w.])\d+(\.\d+)?([eE][+-]?\d+)?", " ", s)  # numbers
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        word = m.group(0)
        if word.lower() in KEYWORDS or re.match(r"\s*\(", s[m.end():]):
            continue  # keyword or function
        names.add(word)
    return names


def check_names(where, expr, exported):
    names = promql_names(expr)
    check(names, f"{where}: expression reads no metric: {expr}")
    for n in sorted(names):
        check(n in exported or n in KUBE_STATE_METRICS,
              f"{where}: {n} is not a series the agent exports (nor kube-state-metrics' "
              f"{sorted(KUBE_STATE_METRICS)}): {expr}")


# ------------------------------------------------------------------------ the rendering


def check_dashboard(root, cm, exported):
    labels = cm["metadata"].get("labels", {})
    check(labels.get("grafana_dashboard") == "1", 'dashboard ConfigMap label grafana_dashboard "1"')
    data = cm.get("data", {})
    check(list(data) == ["spoke.json"], f"dashboard ConfigMap data keys {list(data)}")
    text = data.get("spoke.json", "")
    with open(os.path.join(root, "charts/spoke/dashboards/spoke.json")) as f:
        check(text.strip() == f.read().strip(),
              "dashboard ConfigMap holds charts/spoke/dashboards/spoke.json unchanged")
    try:
        dash = json.loads(text)
    except ValueError as e:
        check(False, f"dashboard is not valid JSON: {e}")
        return
    check(dash.get("uid") and dash.get("title"), "dashboard uid and title")
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    for v in ("datasource", "node", "volume"):
        check(v in variables, f"dashboard variable ${v}")
    for name, v in variables.items():
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query", "") if isinstance(q, dict) else q
            check_names(f"dashboard variable ${name}", q or "", exported)

    def all_panels(panels):
        for p in panels:
            yield p
            yield from all_panels(p.get("panels", []))

    panels = list(all_panels(dash.get("panels", [])))
    queried = [p for p in panels if p.get("type") != "row"]
    check(len(queried) >= 20, f"dashboard has {len(queried)} panels")
    ids = [p.get("id") for p in panels]
    check(len(ids) == len(set(ids)), "dashboard panel ids are unique")
    for p in queried:
        where = f"dashboard panel {p.get('title')!r}"
        check(p.get("title") and p.get("description"), f"{where}: title and description")
        targets = p.get("targets", [])
        check(targets, f"{where}: has no query")
        for t in targets:
            expr = t.get("expr", "")
            if not check(expr.strip(), f"{where}: target {t.get('refId')} has no expr"):
                continue
            check_names(where, expr, exported)
            # Every selector of an agent series keeps to the selected nodes.
            for m in re.finditer(r"\b(spoke_\w+)(\{[^}]*\})?", expr):
                check(m.group(2) and 'node=~"$node"' in m.group(2),
                      f"{where}: {m.group(1)} is not filtered by node=~\"$node\": {expr}")


def check_rules(rule, exported):
    spec = rule.get("spec", {})
    seen = set()
    for g in spec.get("groups", []):
        check(g.get("name") and g.get("rules"), f"PrometheusRule group {g.get('name')!r}")
        for r in g.get("rules", []):
            name = r.get("alert")
            where = f"alert {name}"
            if not check(name, f"group {g.get('name')}: a rule without alert: {r}"):
                continue
            check(name not in seen, f"{where}: defined twice")
            seen.add(name)
            expr = str(r.get("expr", ""))
            check_names(where, expr, exported)
            check(re.fullmatch(r"\d+[smh]", str(r.get("for", ""))), f"{where}: for: {r.get('for')!r}")
            check(r.get("labels", {}).get("severity") in SEVERITIES,
                  f"{where}: severity label in {sorted(SEVERITIES)}")
            ann = r.get("annotations", {})
            per_volume = re.search(r"\bby\s*\([^)]*\bvolume\b", expr)
            for key in ("summary", "description"):
                text = str(ann.get(key, ""))
                if not check(text.strip(), f"{where}: annotation {key}"):
                    continue
                check("{{ $labels.node }}" in text, f"{where}: {key} does not name the node")
                if per_volume:
                    check("{{ $labels.volume }}" in text, f"{where}: {key} does not name the volume")
    for name in sorted(REQUIRED_ALERTS - seen):
        check(False, f"alert {name} missing")


def check_render(root, path):
    exported = exported_metrics(root)
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    dashboards = [d for d in docs if d["kind"] == "ConfigMap"
                  and "grafana_dashboard" in d["metadata"].get("labels", {})]
    rules = [d for d in docs if d["kind"] == "PrometheusRule"]
    if check(len(dashboards) == 1, f"want one dashboard ConfigMap, found {len(dashboards)}"):
        check_dashboard(root, dashboards[0], exported)
    if check(len(rules) == 1, f"want one PrometheusRule, found {len(rules)}"):
        check(rules[0]["apiVersion"] == "monitoring.coreos.com/v1", "PrometheusRule apiVersion")
        check_rules(rules[0], exported)


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "metrics" and len(sys.argv) == 3:
        for name in sorted(exported_metrics(sys.argv[2])):
            print(name)
    elif cmd == "render" and len(sys.argv) == 4:
        check_render(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
    for e in errors:
        print(f"  {e}", file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
