#!/usr/bin/env python3
"""Checks of the SpokeWarmup CRD and of the warm-up objects the chart renders.

    check_warmup.py CRD DEFAULT_RENDERING NO_WARMUP_RENDERING DEPLOY_MANIFEST

The CRD: group, version, printer columns, required fields, and every CEL rule's message naming
the field it guards. The default rendering: the controller container's flags agree with the
agent (socket dir) and the image, the webhook's Service, Secret and caBundle fit together, the
webhook is called only for annotated pods, the RBAC holds what the controller calls. With
warmup.enabled=false none of it is rendered; the plain manifest has no webhook.
"""
import re
import sys

import yaml

errors = []


def check(cond, what):
    if not cond:
        errors.append(what)


def load(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]


def find(docs, kind, name_part=""):
    return [d for d in docs if d["kind"] == kind and name_part in d["metadata"]["name"]]


def rules(node, path, out):
    """(path, rule, message) of every x-kubernetes-validations under node."""
    for r in node.get("x-kubernetes-validations", []):
        out.append((path, r["rule"], r.get("message", "")))
    for k, child in node.get("properties", {}).items():
        rules(child, f"{path}.{k}" if path else k, out)
    if "items" in node:
        rules(node["items"], path, out)
    return out


def check_crd(crd):
    check(crd["spec"]["group"] == "spoke.csi.dev", "CRD group")
    v = crd["spec"]["versions"][0]
    check(v["name"] == "v1alpha1" and v["served"] and v["storage"], "CRD version v1alpha1")
    check("status" in v.get("subresources", {}), "CRD status subresource")
    cols = [c["name"] for c in v["additionalPrinterColumns"]]
    for want in ("Phase", "Nodes Ready", "Percent", "Age"):
        check(want in cols, f"printer column {want}")
    schema = v["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    check(set(spec["required"]) == {"source", "nodes"}, "spec requires source and nodes")
    check(spec["properties"]["schedule"]["properties"]["mode"]["enum"] == ["Once", "Cron"], "schedule.mode enum")
    pct = spec["properties"]["readyPercent"]
    check(pct["minimum"] == 1 and pct["maximum"] == 100, "readyPercent 1..100")
    # spec.rateLimit: the quantities spokectl's --rate takes (ParseByteRate), nothing else.
    rate = spec["properties"]["rateLimit"]
    m = re.fullmatch(r"self\.matches\('(.*)'\)", rate["x-kubernetes-validations"][0]["rule"])
    check(m is not None, "spec.rateLimit is checked by a matches() rule")
    if m:
        for ok in ("50Mi", "200M", "1", "1Ti", "64Ki"):
            check(re.search(m.group(1), ok) is not None, f"spec.rateLimit accepts {ok}")
        for bad in ("0", "050Mi", "50MB", "1.5Gi", "-1Mi", "50mi", "fast", ""):
            check(re.search(m.group(1), bad) is None, f"spec.rateLimit refuses {bad!r}")
    check(spec["properties"]["verify"]["type"] == "boolean", "spec.verify is a boolean")
    for path, rule, msg in rules(schema, "", []):
        field = path.split(".")[-1] if path else "metadata"
        check(field in msg.split(":")[0], f"CEL rule {rule!r} at {path}: message {msg!r} does not name {field}")


def check_controller(docs):
    dep = find(docs, "Deployment", "controller")[0]
    pod = dep["spec"]["template"]["spec"]
    c = [c for c in pod["containers"] if c["name"] == "spoke-warmup-controller"]
    check(len(c) == 1, "controller Deployment has a spoke-warmup-controller container")
    if not c:
        return
    c = c[0]
    args = dict(a[2:].split("=", 1) for a in c["args"])
    check(args.get("worker-image") == c["image"], "worker pods run the controller's image")
    agent = find(docs, "DaemonSet", "agent")[0]["spec"]["template"]["spec"]
    socket = [v["hostPath"]["path"] for v in agent["volumes"] if v["name"] == "agent-socket-dir"]
    check(args.get("agent-socket-dir") == socket[0], "worker pods mount the agent's socket dir")
    check(args.get("leader-elect") == "true", "leader election on")
    drivers = [d["metadata"]["name"] for d in find(docs, "CSIDriver")]
    check(args.get("driver-name") in drivers, f"--driver-name {args.get('driver-name')} is the chart's CSIDriver {drivers}")
    check(c["securityContext"].get("runAsNonRoot") is True, "controller runs as non-root")
    check(args.get("webhook-port") != "0", "webhook port set")
    check(any(m["mountPath"] == args.get("webhook-cert-dir") for m in c.get("volumeMounts", [])),
          "webhook certificate mounted at --webhook-cert-dir")


def check_webhook(docs):
    mwc = find(docs, "MutatingWebhookConfiguration")
    check(len(mwc) == 1, "one MutatingWebhookConfiguration")
    if not mwc:
        return
    hook = mwc[0]["webhooks"][0]
    svc = hook["clientConfig"]["service"]
    check(svc["path"] == "/mutate-pods-wait-for", "webhook path (internal/webhook.Path)")
    services = [s for s in find(docs, "Service") if s["metadata"]["name"] == svc["name"]]
    check(len(services) == 1 and services[0]["spec"]["ports"][0]["targetPort"] == "warmup-webhook",
          "webhook Service targets the controller's warmup-webhook port")
    secret = find(docs, "Secret", "warmup-webhook-tls")
    check(len(secret) == 1 and secret[0]["data"]["ca.crt"] == hook["clientConfig"]["caBundle"],
          "caBundle is the Secret's ca.crt")
    check(hook["rules"][0]["resources"] == ["pods"] and hook["rules"][0]["operations"] == ["CREATE"],
          "webhook on pod CREATE")
    check("spoke.csi.dev/wait-for" in hook["matchConditions"][0]["expression"],
          "webhook called only for pods annotated spoke.csi.dev/wait-for")


def check_rbac(docs):
    role = find(docs, "ClusterRole", "warmup-controller")
    check(len(role) == 1, "warm-up ClusterRole")
    if not role:
        return
    granted = {(r, v) for rule in role[0]["rules"] for r in rule["resources"] for v in rule["verbs"]}
    for need in [("spokewarmups", "watch"), ("spokewarmups/status", "update"), ("spokewarmups/finalizers", "update"),
                 ("pods", "create"), ("pods", "delete"), ("pods", "update"), ("pods/log", "get"),
                 ("nodes", "patch"), ("persistentvolumes", "get"), ("events", "create"),
                 ("persistentvolumeclaims", "create"), ("persistentvolumeclaims", "delete"),
                 ("storageclasses", "get")]:
        check(need in granted, f"ClusterRole grants {need[1]} on {need[0]}")
    check(("secrets", "get") not in granted, "the warm-up controller reads no Secrets")


def main():
    crd, default, nowarmup, deploy = (load(p) for p in sys.argv[1:5])
    check_crd(crd[0])
    check_controller(default)
    check_webhook(default)
    check_rbac(default)
    names = [d["metadata"]["name"] for d in nowarmup]
    check(not any("warmup" in n for n in names), f"warmup.enabled=false still renders {names}")
    check(not find(deploy, "MutatingWebhookConfiguration"), "manifests/deploy has no webhook")
    for e in errors:
        print("check_warmup:", e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
