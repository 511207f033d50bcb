#!/usr/bin/env python3
"""Semantic checks on the Spoke chart's rendered output and on manifests/examples.

The golden files pin the rendering byte for byte; these checks pin what the rendering must
*mean* (mount propagation, host paths, the flags and config keys the binaries read), so that
regenerating a golden file cannot silently bless a broken driver.

Usage:
  check_rendered.py render default|hyperpod|full FILE
  check_rendered.py examples DIR
  check_rendered.py testdriver FILE
Exits 1 with one line per failed check.
"""
import sys

import yaml

DRIVER = "spoke.csi.dev"
SC_PARAMS = {"server", "share", "nfsPort", "mountPort", "mode", "subDir", "onDelete",
             "consistency", "ttlSeconds", "prefetch", "hubTimeoutSeconds"}
SC_ENUMS = {"mode": {"dataset", "scratch"}, "onDelete": {"delete", "retain", "archive"},
            "consistency": {"immutable", "ttl", "strict"},
            "prefetch": {"off", "readahead", "auto"}}
AGENT_KEYS = {"socket", "cacheDir", "cacheSizeBytes", "blockSizeBytes", "metricsAddress",
              "mountRoots", "stateDir", "hub", "logLevel", "fuseKeeperSocket",
              "fuseKeeperStart", "handoverTimeoutSeconds", "keeperWaitSeconds",
              "memoryBudgetBytes"}
# Written only when set in the values.
OPTIONAL_AGENT_KEYS = {"writeBackBytesPerVolume"}
HUB_KEYS = {"connections", "inflightPerConnection", "requestTimeoutSeconds"}
# Written only when peers.enabled (cache sharing, docs/peers.md).
PEER_KEYS = {"peerListenAddress", "peerService", "peerTokenFile", "peerTimeoutMs",
             "peerKeepLocalCopy", "peerTlsCertFile", "peerTlsKeyFile", "peerTlsCaFile",
             "peerTlsIdentity"}
# Only with one certificate shared by every agent (peerTlsIdentity: name).
PEER_NAME_KEYS = {"peerTlsServerName"}

errors = []


def quantity_bytes(q):
    """A Kubernetes memory quantity (2Gi, 1500M, 1073741824) in bytes."""
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
             "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    q = str(q)
    for suffix in sorted(units, key=len, reverse=True):
        if q.endswith(suffix):
            return int(q[:-len(suffix)]) * units[suffix]
    return int(q)


def check(cond, msg):
    if not cond:
        errors.append(msg)
    return cond


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def one(docs, kind, name_suffix=""):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
    check(len(found) == 1, f"want exactly one {kind} *{name_suffix}, found {len(found)}")
    return found[0] if found else None


def container(pod_spec, name):
    for c in pod_spec["containers"]:
        if c["name"] == name:
            return c
    check(False, f"no container {name}")
    return {"args": [], "volumeMounts": []}


def volume(pod_spec, name):
    for v in pod_spec.get("volumes", []):
        if v["name"] == name:
            return v
    check(False, f"no volume {name}")
    return {}


def mount(c, name):
    for m in c.get("volumeMounts", []):
        if m["name"] == name:
            return m
    check(False, f"container {c.get('name')} does not mount {name}")
    return {}


def check_peer_tls(docs, agent_cfg, variant):
    """Mutual TLS between agents: where each agent's certificate comes from, and who sees the
    CA key."""
    agent_ds = one(docs, "DaemonSet", "-agent")
    if not agent_ds:
        return
    spec = agent_ds["spec"]["template"]["spec"]
    agent_c = container(spec, "spoke-cache-agent")
    tls_dir = str(agent_cfg["peerTlsCertFile"]).rsplit("/", 1)[0]
    tls_mount = mount(agent_c, "peer-tls")
    check(tls_mount.get("mountPath") == tls_dir and tls_mount.get("readOnly") is True,
          "the agent mounts peer-tls read-only where agent.yaml's peerTls* files are")
    tls_vol = volume(spec, "peer-tls")
    identity = agent_cfg.get("peerTlsIdentity")
    # HyperPod keeps the default (generate); the all-features values use cert-manager.
    want_identity = "name" if variant == "full" else "address"
    check(identity == want_identity, f"agent.yaml peerTlsIdentity {identity!r} != {want_identity!r}")
    if identity == "name":
        # One certificate for every agent, from the Secret cert-manager writes.
        secret = tls_vol.get("secret", {}).get("secretName")
        made = [d for d in docs if d["kind"] == "Certificate" and d["spec"].get("secretName") == secret]
        check(secret is not None and len(made) == 1,
              f"one Certificate makes the peer-tls Secret {secret}")
        check(not spec.get("initContainers"), "no certificate is minted with a shared one")
        return
    # A certificate per agent: minted at pod start into memory, from the chart's CA.
    check(tls_vol.get("emptyDir", {}).get("medium") == "Memory",
          "peer-tls is an in-memory emptyDir (the minted key is never stored)")
    inits = spec.get("initContainers", [])
    check([c["name"] for c in inits] == ["mint-peer-cert"], "one init container, mint-peer-cert")
    mint = inits[0] if inits else {"args": [], "env": [], "volumeMounts": []}
    check(mint.get("command") == ["/usr/local/bin/spoke-cache-agent"] and
          mint["args"][:1] == ["mint-peer-cert"], "the init container runs mint-peer-cert")
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in mint.get("env", [])}
    check(env == {"NODE_NAME": "spec.nodeName", "POD_IP": "status.podIP"},
          "mint-peer-cert takes the node name and pod IP from the downward API")
    args = mint["args"]
    for want in ["--dns=$(NODE_NAME)", "--ip=$(POD_IP)", "--out-dir=" + tls_dir,
                 "--validity-days=365"]:
        check(want in args, f"mint-peer-cert args have {want}")
    out = mount(mint, "peer-tls")
    check(out.get("mountPath") == tls_dir and not out.get("readOnly"),
          "mint-peer-cert writes peer-tls")
    ca_vol = volume(spec, "peer-ca")
    ca_secret = ca_vol.get("secret", {}).get("secretName")
    made = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == ca_secret]
    check(len(made) == 1 and set(made[0].get("data", {})) == {"ca.crt", "ca.key"},
          f"the chart renders the peer CA Secret {ca_secret} (ca.crt, ca.key)")
    ca_mount = mount(mint, "peer-ca")
    check("--ca-key=" + ca_mount.get("mountPath", "?") + "/ca.key" in args and
          ca_mount.get("readOnly") is True, "mint-peer-cert reads the CA key from peer-ca")
    # The CA key: only the init container of the agent pods mounts it, in every workload.
    for d in docs:
        pod = d.get("spec", {}).get("template", {}).get("spec")
        if not pod:
            continue
        ca_vols = {v["name"] for v in pod.get("volumes", [])
                   if v.get("secret", {}).get("secretName") == ca_secret}
        for c in pod.get("initContainers", []) + pod.get("containers", []):
            mounts = {m["name"] for m in c.get("volumeMounts", [])} & ca_vols
            allowed = d is agent_ds and c is mint
            check(not mounts or allowed,
                  f"{d['kind']} {d['metadata']['name']} container {c['name']} mounts the CA key")
            check(not any(e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == ca_secret
                          for e in c.get("env", [])),
                  f"{c['name']} takes nothing from the CA Secret as environment")
    # The agent itself reads only what was minted: its key, its certificate and the CA's.
    check(all(v.get("secret", {}).get("secretName") != ca_secret
              for v in spec.get("volumes", []) if v["name"] in
              {m["name"] for m in agent_c.get("volumeMounts", [])}),
          "the agent container mounts no volume of the CA Secret")


def check_storage_class_params(where, params, is_inline=False):
    for k, v in params.items():
        check(k in SC_PARAMS, f"{where}: unknown parameter {k!r}")
        check(isinstance(v, str), f"{where}: parameter {k} must be a string, got {v!r}")
        if k in SC_ENUMS:
            check(v in SC_ENUMS[k], f"{where}: {k}={v!r} not in {sorted(SC_ENUMS[k])}")
    for k in ("server", "share", "mode"):
        check(k in params, f"{where}: parameter {k} is required")
    check(str(params.get("share", "")).startswith("/"), f"{where}: share must be absolute")
    if params.get("mode") == "dataset":
        check("onDelete" not in params, f"{where}: onDelete is for scratch volumes only")


def check_render(variant, path):
    docs = load(path)
    kubelet_dir = "/var/lib/kubelet"
    kubelet_host = "/opt/sagemaker/kubelet" if variant == "hyperpod" else kubelet_dir

    drv = one(docs, "CSIDriver")
    if drv:
        s = drv["spec"]
        check(drv["metadata"]["name"] == DRIVER, "CSIDriver name")
        check(s.get("attachRequired") is False, "CSIDriver attachRequired must be false")
        check(s.get("podInfoOnMount") is True, "CSIDriver podInfoOnMount must be true")
        # Inline volumes are an admin's choice: only the all-features values enable them.
        want_modes = {"Persistent", "Ephemeral"} if variant == "full" else {"Persistent"}
        check(set(s.get("volumeLifecycleModes", [])) == want_modes,
              f"CSIDriver volumeLifecycleModes must be {sorted(want_modes)}")
        check(s.get("fsGroupPolicy") == "File", "CSIDriver fsGroupPolicy must be File")

    cm = one(docs, "ConfigMap", "-config")
    agent_cfg = {}
    if cm:
        agent_cfg = yaml.safe_load(cm["data"]["agent.yaml"])
        node_cfg = yaml.safe_load(cm["data"]["node.yaml"])
        ctl_cfg = yaml.safe_load(cm["data"]["controller.yaml"])
        peers_on = "peerListenAddress" in agent_cfg
        want_agent = AGENT_KEYS
        if peers_on:
            want_agent = want_agent | PEER_KEYS
            if agent_cfg.get("peerTlsIdentity") == "name":
                want_agent = want_agent | PEER_NAME_KEYS
        check(want_agent <= set(agent_cfg) <= want_agent | OPTIONAL_AGENT_KEYS,
              f"agent.yaml keys {sorted(agent_cfg)}")
        if "writeBackBytesPerVolume" in agent_cfg:
            wb = agent_cfg["writeBackBytesPerVolume"]
            check(isinstance(wb, int) and wb >= 1 << 20 and
                  wb < agent_cfg.get("memoryBudgetBytes", wb + 1),
                  f"agent.yaml writeBackBytesPerVolume {wb!r}: bytes, at least 1 MiB, "
                  "below memoryBudgetBytes")
        if peers_on:
            check(str(agent_cfg["peerListenAddress"]).startswith("${POD_IP}:"),
                  "agent.yaml peerListenAddress on the pod IP")
            port = str(agent_cfg["peerListenAddress"]).rsplit(":", 1)[1]
            check(str(agent_cfg["peerService"]).endswith(".svc:" + port),
                  "agent.yaml peerService names the headless Service on the peer port")
            svc = one(docs, "Service", "-agent-peers")
            check(svc and svc["spec"].get("clusterIP") == "None", "peer Service is headless")
            check(svc and str(agent_cfg["peerService"]).startswith(svc["metadata"]["name"] + "."),
                  "agent.yaml peerService is the rendered peer Service")
            check(one(docs, "NetworkPolicy", "-agent-peers") is not None,
                  "a NetworkPolicy guards the peer port")
            check_peer_tls(docs, agent_cfg, variant)
        check(set(agent_cfg.get("hub", {})) == HUB_KEYS, "agent.yaml hub keys")
        check(agent_cfg.get("socket") == "/run/spoke/agent.sock", "agent.yaml socket")
        check(agent_cfg.get("metricsAddress") == "${POD_IP}:9810", "agent.yaml metricsAddress")
        check(agent_cfg.get("mountRoots") == [kubelet_dir], "agent.yaml mountRoots")
        want_size = {"default": "100Gi", "hyperpod": "1Ti", "full": 53687091200}[variant]
        check(agent_cfg.get("cacheSizeBytes") == want_size,
              f"agent.yaml cacheSizeBytes {agent_cfg.get('cacheSizeBytes')!r} != {want_size!r}")
        check(agent_cfg.get("blockSizeBytes") == "1Mi", "agent.yaml blockSizeBytes")
        want_node = {"kubeletDir", "topology", "fuseKeeperSocket",
                     "fuseKeeperOrphanTimeoutSeconds", "fuseKeeperHandOverSeconds"} | (
            {"inlineVolumes"} if variant == "full" else set())
        check(set(node_cfg) == want_node, f"node.yaml keys {sorted(node_cfg)}")
        if variant == "full":
            check(node_cfg["inlineVolumes"] == {"servers": ["hub.spoke-e2e.svc.cluster.local"],
                                                "sharePrefixes": ["/srv/export"],
                                                "modes": ["dataset"]}, "node.yaml inlineVolumes")
        # Mounts outlive the agent only if both pods use the same keeper socket (both mount the
        # socket host directory at /run/spoke).
        check(node_cfg.get("fuseKeeperSocket") == agent_cfg.get("fuseKeeperSocket") and
              str(agent_cfg.get("fuseKeeperSocket", "")).startswith("/run/spoke/"),
              "node.yaml and agent.yaml share the fd keeper socket under /run/spoke")
        check(agent_cfg.get("fuseKeeperStart") is False,
              "agent.yaml fuseKeeperStart: false (the node plugin is the keeper)")
        check(node_cfg.get("kubeletDir") == kubelet_dir, "node.yaml kubeletDir")
        # The kubelet must not kill a pod while it hands FUSE connections over: each grace
        # period covers the waits its binary is configured with.
        node_ds, agent_ds = one(docs, "DaemonSet", "-node"), one(docs, "DaemonSet", "-agent")
        if node_ds and agent_ds:
            node_grace = node_ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            agent_grace = agent_ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            check(node_grace > node_cfg.get("fuseKeeperHandOverSeconds", 0),
                  f"node grace {node_grace}s above fuseKeeperHandOverSeconds")
            agent_waits = (agent_cfg.get("handoverTimeoutSeconds", 0) +
                           agent_cfg.get("keeperWaitSeconds", 0))
            check(agent_grace > agent_waits,
                  f"agent grace {agent_grace}s above handover + keeper waits ({agent_waits}s)")
        check(set(node_cfg.get("topology", {})) == {"region", "zone"}, "node.yaml topology keys")
        check(set(ctl_cfg) == {"hubTimeoutSeconds", "archivePrefix"},
              f"controller.yaml keys {sorted(ctl_cfg)}")

    # Controller: driver + provisioner with the metadata subDir templates need.
    dep = one(docs, "Deployment", "-controller")
    if dep:
        ps = dep["spec"]["template"]["spec"]
        check(dep["spec"]["replicas"] == 1, "controller replicas")
        c = container(ps, "spoke-csi-controller")
        check(c.get("command") == ["/usr/local/bin/spoke-csi-controller"], "controller command")
        for a in ("--endpoint=unix:///csi/csi.sock", "--config=/etc/spoke/controller.yaml"):
            check(a in c["args"], f"controller arg {a}")
        check(any(a.startswith("--log-level=") for a in c["args"]), "controller --log-level")
        p = container(ps, "csi-provisioner")
        for a in ("--csi-address=/csi/csi.sock", "--extra-create-metadata=true",
                  "--leader-election=true"):
            check(a in p["args"], f"csi-provisioner arg {a}")
        check(":" in p["image"] and not p["image"].endswith(":latest"), "provisioner pinned")
        container(ps, "liveness-probe")
        sa = ps["serviceAccountName"]
        # The provisioner's binding (the warm-up controller's own is checked by check_warmup.py).
        bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"
                    and any(s["name"] == sa for s in d["subjects"])
                    and not d["roleRef"]["name"].endswith("-warmup-controller")]
        check(len(bindings) == 1, "controller service account has one provisioner ClusterRoleBinding")
        if bindings:
            role = one(docs, "ClusterRole", bindings[0]["roleRef"]["name"])
            granted = {(g, r, v) for rule in (role or {}).get("rules", [])
                       for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
            for g, r, verbs in (("", "persistentvolumes", "get list watch create delete"),
                                ("", "persistentvolumeclaims", "get list watch update"),
                                ("storage.k8s.io", "storageclasses", "get list watch"),
                                ("", "events", "create patch"),
                                ("storage.k8s.io", "csinodes", "get list watch"),
                                ("", "nodes", "get list watch"),
                                ("storage.k8s.io", "volumeattachments", "get list watch")):
                for v in verbs.split():
                    check((g, r, v) in granted, f"provisioner ClusterRole lacks {v} {r}")
        leases = [d for d in docs if d["kind"] == "Role" and any(
            "leases" in rule["resources"] and "create" in rule["verbs"] for rule in d["rules"])]
        names = sorted(d["metadata"]["name"].rsplit("-", 3)[-3] for d in leases)
        # csi-provisioner's and spoke-warmup-controller's (each elects its own leader).
        check(len(leases) == 2 and all(n in ("provisioner", "warmup") for n in names),
              f"Roles for leader-election leases: {names}")

    # Node plugin.
    node = one(docs, "DaemonSet", "-node")
    node_sock_dir = None
    if node:
        ps = node["spec"]["template"]["spec"]
        c = container(ps, "spoke-csi-node")
        check(c.get("securityContext", {}).get("privileged") is True, "node plugin privileged")
        for a in ("--endpoint=unix:///csi/csi.sock", "--node-id=$(NODE_NAME)",
                  "--agent-socket=/run/spoke/agent.sock", "--config=/etc/spoke/node.yaml"):
            check(a in c["args"], f"node plugin arg {a}")
        check(any(e["name"] == "NODE_NAME" and e["valueFrom"]["fieldRef"]["fieldPath"] ==
                  "spec.nodeName" for e in c.get("env", [])), "NODE_NAME from spec.nodeName")
        m = mount(c, "kubelet-dir")
        check(m.get("mountPath") == kubelet_dir and m.get("mountPropagation") == "Bidirectional",
              f"node plugin mounts kubelet dir at {kubelet_dir} Bidirectional: {m}")
        check(volume(ps, "kubelet-dir").get("hostPath", {}).get("path") == kubelet_host,
              f"node kubelet-dir hostPath must be {kubelet_host}")
        check(mount(c, "agent-socket-dir").get("mountPath") == "/run/spoke", "node /run/spoke")
        node_sock_dir = volume(ps, "agent-socket-dir").get("hostPath", {}).get("path")
        check(volume(ps, "socket-dir").get("hostPath", {}).get("path") ==
              f"{kubelet_host}/plugins/{DRIVER}", "node socket-dir hostPath")
        check(volume(ps, "registration-dir").get("hostPath", {}).get("path") ==
              f"{kubelet_host}/plugins_registry", "registration-dir hostPath")
        r = container(ps, "node-driver-registrar")
        check(f"--kubelet-registration-path={kubelet_dir}/plugins/{DRIVER}/csi.sock" in r["args"],
              "registrar --kubelet-registration-path")
        check(mount(r, "registration-dir").get("mountPath") == "/registration", "registrar dir")
        container(ps, "liveness-probe")

    # Cache agent.
    agent = one(docs, "DaemonSet", "-agent")
    if agent:
        ps = agent["spec"]["template"]["spec"]
        check(ps.get("priorityClassName") == "system-node-critical", "agent priorityClassName")
        c = container(ps, "spoke-cache-agent")
        check(c.get("args") == ["--config=/etc/spoke/agent.yaml"], "agent args")
        # The memory budget is 75% of the container's limit (the rest: the agent's baseline).
        limit = c.get("resources", {}).get("limits", {}).get("memory")
        check(limit is not None, "agent container has a memory limit")
        if limit is not None:
            want_budget = quantity_bytes(limit) * 3 // 4
            check(agent_cfg.get("memoryBudgetBytes") == want_budget,
                  f"agent.yaml memoryBudgetBytes {agent_cfg.get('memoryBudgetBytes')!r} != 75% "
                  f"of the agent's memory limit {limit} ({want_budget})")
        check(c.get("securityContext", {}).get("privileged") is True, "agent privileged")
        check(c.get("securityContext", {}).get("readOnlyRootFilesystem") is True,
              "agent readOnlyRootFilesystem")
        check({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
              in c.get("env", []), "agent POD_IP from the downward API")
        check(volume(ps, "fuse-device").get("hostPath") == {"path": "/dev/fuse",
                                                            "type": "CharDevice"}, "/dev/fuse")
        check(mount(c, "fuse-device").get("mountPath") == "/dev/fuse", "agent mounts /dev/fuse")
        m = mount(c, "kubelet-dir")
        check(m.get("mountPath") == kubelet_dir and m.get("mountPropagation") == "Bidirectional",
              f"agent mounts kubelet dir at {kubelet_dir} Bidirectional: {m}")
        check(volume(ps, "kubelet-dir").get("hostPath", {}).get("path") == kubelet_host,
              f"agent kubelet-dir hostPath must be {kubelet_host}")
        cache_host = "/opt/dlami/nvme/spoke-cache" if variant == "hyperpod" else "/var/cache/spoke"
        check(volume(ps, "cache-dir").get("hostPath", {}).get("path") == cache_host,
              f"cache hostPath must be {cache_host}")
        check(mount(c, "cache-dir").get("mountPath") == agent_cfg.get("cacheDir"),
              "agent.yaml cacheDir is where the cache hostPath is mounted")
        check(mount(c, "state-dir").get("mountPath") == agent_cfg.get("stateDir"),
              "agent.yaml stateDir is where the state hostPath is mounted")
        check(mount(c, "agent-socket-dir").get("mountPath") == "/run/spoke", "agent /run/spoke")
        check(volume(ps, "agent-socket-dir").get("hostPath", {}).get("path") == node_sock_dir,
              "agent and node plugin share the agent socket host directory")
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        check(ports.get("metrics") == 9810, "agent containerPort metrics 9810")
        for probe in ("livenessProbe", "readinessProbe"):
            g = c.get(probe, {}).get("httpGet", {})
            check(g.get("path") == "/healthz" and g.get("port") == "metrics", f"agent {probe}")
        for cont in ps["containers"]:
            for mnt in cont.get("volumeMounts", []):
                if mnt["name"] == "config":
                    check(mnt["mountPath"] == "/etc/spoke", "config at /etc/spoke")

    if variant == "hyperpod":
        for ds in (node, agent):
            if not ds:
                continue
            ps = ds["spec"]["template"]["spec"]
            name = ds["metadata"]["name"]
            check(ps.get("nodeSelector", {}).get("sagemaker.amazonaws.com/compute-type") ==
                  "hyperpod", f"{name} selects HyperPod nodes")
            check({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                  in ps.get("tolerations", []), f"{name} tolerates nvidia.com/gpu")

    scs = [d for d in docs if d["kind"] == "StorageClass"]
    if variant == "full":
        check(len(scs) == 2, f"full rendering has 2 StorageClasses, got {len(scs)}")
        for sc in scs:
            where = f"StorageClass {sc['metadata']['name']}"
            check(sc["provisioner"] == DRIVER, f"{where} provisioner")
            check_storage_class_params(where, sc.get("parameters", {}))
            if sc["parameters"].get("mode") == "dataset":
                check(sc.get("reclaimPolicy") == "Retain", f"{where}: dataset must Retain")
                check(sc["parameters"].get("nfsPort") == "2049", f"{where}: nfsPort as string")
                check(not sc.get("mountOptions"), f"{where}: dataset has no mount options")
        sm = one(docs, "ServiceMonitor")
        svc = one(docs, "Service", "-agent-metrics")
        if sm and svc and agent:
            sel = sm["spec"]["selector"]["matchLabels"]
            check(all(svc["metadata"]["labels"].get(k) == v for k, v in sel.items()),
                  "ServiceMonitor selects the agent metrics Service")
            check(sm["spec"]["endpoints"][0]["port"] == "metrics", "ServiceMonitor port")
            pod_labels = agent["spec"]["template"]["metadata"]["labels"]
            check(all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items()),
                  "metrics Service selects the agent pods")
    else:
        check(not scs, f"{variant}: no StorageClass by default")
        check(not [d for d in docs if d["kind"] == "ServiceMonitor"], "no ServiceMonitor")


def check_examples(directory):
    import glob
    import os
    docs = {}
    for p in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        docs[os.path.basename(p)] = load(p)
    for f in ("storageclass-dataset.yaml", "storageclass-scratch.yaml", "pvc.yaml",
              "training-job.yaml", "inline-ephemeral-pod.yaml"):
        check(f in docs, f"manifests/examples/{f} missing")
    if errors:
        return
    ds, = docs["storageclass-dataset.yaml"]
    check_storage_class_params("storageclass-dataset.yaml", ds["parameters"])
    check(ds["parameters"]["mode"] == "dataset" and ds["reclaimPolicy"] == "Retain",
          "dataset example: mode dataset, reclaimPolicy Retain")
    check(not ds.get("mountOptions"), "dataset example: no mount options")
    sc, = docs["storageclass-scratch.yaml"]
    check_storage_class_params("storageclass-scratch.yaml", sc["parameters"])
    check(sc["parameters"]["mode"] == "scratch", "scratch example: mode scratch")
    pvc, = docs["pvc.yaml"]
    check(pvc["spec"]["accessModes"] == ["ReadOnlyMany"], "pvc example is ReadOnlyMany")
    check(pvc["spec"]["storageClassName"] == ds["metadata"]["name"], "pvc uses the dataset class")
    job, = docs["training-job.yaml"]
    ps = job["spec"]["template"]["spec"]
    c = ps["containers"][0]
    check(c["image"].startswith("pytorch/pytorch:") and not c["image"].endswith(":latest"),
          "training job uses a pinned pytorch/pytorch image")
    vol = volume(ps, "dataset")
    check(vol.get("persistentVolumeClaim", {}).get("claimName") == pvc["metadata"]["name"],
          "training job mounts the example PVC")
    check(vol.get("persistentVolumeClaim", {}).get("readOnly") is True, "PVC volume readOnly")
    m = mount(c, "dataset")
    check(m.get("mountPath") == "/data" and m.get("readOnly") is True, "/data read-only")
    pod, = docs["inline-ephemeral-pod.yaml"]
    csi = volume(pod["spec"], "dataset").get("csi", {})
    check(csi.get("driver") == DRIVER and csi.get("readOnly") is True, "inline csi volume")
    check_storage_class_params("inline-ephemeral-pod.yaml", csi.get("volumeAttributes", {}))
    check(csi.get("volumeAttributes", {}).get("mode") == "dataset", "inline mode dataset")


def check_testdriver(path):
    import os
    d, = load(path)
    check(d.get("DriverInfo", {}).get("Name") == DRIVER, "testdriver DriverInfo.Name")
    sc_file = d.get("StorageClass", {}).get("FromFile", "")
    check(bool(sc_file), "testdriver StorageClass.FromFile")
    caps = d.get("DriverInfo", {}).get("Capabilities", {})
    for cap in ("persistence", "exec", "RWX"):
        check(caps.get(cap) is True, f"testdriver capability {cap}")
    check("" in d.get("DriverInfo", {}).get("SupportedFsType", {}), "SupportedFsType has ''")
    full = os.path.join(os.path.dirname(path), os.path.basename(sc_file))
    if check(os.path.exists(full), f"testdriver StorageClass file {full} exists"):
        sc, = load(full)
        check(sc["provisioner"] == DRIVER, "testdriver StorageClass provisioner")
        check_storage_class_params(full, sc["parameters"])


def main():
    cmd = sys.argv[1]
    if cmd == "render":
        check_render(sys.argv[2], sys.argv[3])
    elif cmd == "examples":
        check_examples(sys.argv[2])
    elif cmd == "testdriver":
        check_testdriver(sys.argv[2])
    else:
        sys.exit(f"unknown command {cmd}")
    for e in errors:
        print(f"  {e}", file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
