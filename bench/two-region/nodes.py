#!/usr/bin/env python3
"""The multi-node part of the two-region experiment (two_region.py --nodes N).

Network: one namespace for the hub side and one per node, all created by this run and named
after its pid (spk2r-<pid>-hub, spk2r-<pid>-n1 .. -nN). The hub namespace holds a Linux
bridge (HUB_ADDR/24) with nfs-ganesha on its loopback and the WAN proxy listening on the
bridge address; each node namespace is joined to the bridge by a veth pair (node k: node
side "eth0" = NET.(10+k), hub side "vn<k>" a bridge port). Every veth end carries a tbf
qdisc at the stated rate: a node's in-region link (its hub traffic and its peer traffic)
is capped in both directions. No interface is created in the host's namespace and nothing
is routed off the bridge.

Also: running a function inside a namespace (a thread that setns()s itself; the network
namespace is per thread), and the cluster table of the results (cluster WAN and hub bytes
per epoch against the dataset, cold epoch and steady samples/s per node against
local-direct). Standard library only.
"""

import ctypes
import json
import os
import subprocess
import threading

NET = "10.213.0"
HUB_ADDR = f"{NET}.1"
BRIDGE = "spkbr0"
NODE_IF = "eth0"
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"

_libc = ctypes.CDLL(None, use_errno=True)


class NetError(Exception):
    """A namespace command failed; the message names the command and its error."""


def node_addr(k):
    return f"{NET}.{10 + k}"


def nsenter(ns):
    """Argv prefix running a program in network namespace `ns` only (the mount namespace
    stays the host's, so FUSE mounts are shared; `ip netns exec` would make a private one)."""
    return ["nsenter", f"--net={NETNS_DIR}/{ns}"]


def in_netns(ns, fn, timeout_s):
    """fn() run in a fresh thread that joined network namespace `ns`; its result, or raises
    NetError when setns fails or fn does not return within timeout_s (the thread is left,
    a daemon). Sockets fn creates belong to `ns`."""
    box = {}

    def run():
        try:
            fd = os.open(f"{NETNS_DIR}/{ns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise NetError(f"setns({NETNS_DIR}/{ns}): {os.strerror(err)}")
            finally:
                os.close(fd)
            box["value"] = fn()
        except BaseException as e:  # handed to the caller
            box["error"] = e

    t = threading.Thread(target=run, daemon=True, name=f"netns-{ns}")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise NetError(f"call in namespace {ns} did not return within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def tbf_burst_bytes(mbit):
    """tbf bucket: 5 ms at the rate, at least 128 KiB (a GSO packet on a veth is up to 64 KiB
    and must fit the bucket)."""
    return max(128 * 1024, int(mbit * 1e6 / 8 * 0.005))


class Cluster:
    """Namespaces, bridge, veths and qdiscs of one run; delete() undoes all of it."""

    def __init__(self, prefix, nodes, link_mbit, log):
        self.prefix = prefix
        self.hub = f"{prefix}-hub"
        self.nodes = [f"{prefix}-n{k}" for k in range(1, nodes + 1)]
        self.link_mbit = link_mbit
        self.log = log
        self.created = []  # namespaces that exist because of us

    def sh(self, *argv):
        try:
            r = subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise NetError(f"`{' '.join(argv)}` did not finish within 30 s") from None
        if r.returncode != 0:
            raise NetError(f"`{' '.join(argv)}` failed (exit {r.returncode}): "
                           f"{(r.stderr or r.stdout).strip()[-300:]}")
        return r.stdout

    def create(self):
        for ns in [self.hub, *self.nodes]:
            if os.path.exists(f"{NETNS_DIR}/{ns}"):
                raise NetError(f"network namespace {ns} exists already (another run with "
                               "this pid's name?); not touching it")
            self.sh("ip", "netns", "add", ns)
            self.created.append(ns)
            self.sh("ip", "-n", ns, "link", "set", "lo", "up")
        h = self.hub
        self.sh("ip", "-n", h, "link", "add", BRIDGE, "type", "bridge")
        self.sh("ip", "-n", h, "addr", "add", f"{HUB_ADDR}/24", "dev", BRIDGE)
        self.sh("ip", "-n", h, "link", "set", BRIDGE, "up")
        rate = f"{self.link_mbit:g}mbit"
        burst = str(tbf_burst_bytes(self.link_mbit))
        for k, ns in enumerate(self.nodes, 1):
            port = f"vn{k}"
            self.sh("ip", "-n", h, "link", "add", port, "type", "veth", "peer", "name",
                    NODE_IF, "netns", ns)
            self.sh("ip", "-n", h, "link", "set", port, "master", BRIDGE)
            self.sh("ip", "-n", h, "link", "set", port, "up")
            self.sh("ip", "-n", ns, "addr", "add", f"{node_addr(k)}/24", "dev", NODE_IF)
            self.sh("ip", "-n", ns, "link", "set", NODE_IF, "up")
            for where, dev in ((h, port), (ns, NODE_IF)):
                self.sh("tc", "-n", where, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                        rate, "burst", burst, "latency", "20ms")
        self.log(f"network: namespaces {', '.join(self.created)}; bridge {BRIDGE} "
                 f"{HUB_ADDR}/24 in {h}; nodes {', '.join(node_addr(k) for k in range(1, len(self.nodes) + 1))}; "
                 f"each node link tbf {rate} (burst {burst} bytes) both ways")

    def link_bytes(self):
        """[(bytes sent towards node k, bytes sent by node k)] for k = 1..N: the tbf
        counters of both ends of its veth (cumulative since the namespaces were made)."""
        out = []
        for k, ns in enumerate(self.nodes, 1):
            pair = []
            for where, dev in ((self.hub, f"vn{k}"), (ns, NODE_IF)):
                text = self.sh("tc", "-n", where, "-s", "qdisc", "show", "dev", dev)
                try:
                    pair.append(int(text.split(" Sent ", 1)[1].split()[0]))
                except (IndexError, ValueError):
                    raise NetError(f"no 'Sent N bytes' in tc -s qdisc of {dev} in {where}: "
                                   f"{text.strip()[:200]!r}") from None
            out.append(tuple(pair))
        return out

    def qdisc_stats(self):
        """`tc -s qdisc` of every capped veth end (sent bytes, drops, overlimits), as text;
        the counters are cumulative since the namespaces were made (every scenario)."""
        out = []
        for k, ns in enumerate(self.nodes, 1):
            for where, dev in ((self.hub, f"vn{k}"), (ns, NODE_IF)):
                try:
                    out.append(f"== {where} {dev}\n" + self.sh("tc", "-n", where, "-s", "qdisc",
                                                               "show", "dev", dev))
                except NetError as e:
                    out.append(f"== {where} {dev}: {e}\n")
        return "".join(out)

    def delete(self):
        """Deletes every namespace we created (their veths and the bridge go with them).
        Returns the names that could not be deleted."""
        left = []
        for ns in reversed(self.created):
            r = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True,
                               timeout=30, stdin=subprocess.DEVNULL)
            if r.returncode != 0 and os.path.exists(f"{NETNS_DIR}/{ns}"):
                left.append(f"{ns} ({r.stderr.strip()})")
        self.created = []
        return left


# ------------------------------------------------------------------ cluster figures
def epoch_times(summary):
    ends = summary.get("epoch_end_s") or []
    return [ends[0]] + [b - a for a, b in zip(ends, ends[1:])] if ends else []


def samples_per_epoch(summary):
    epochs = int(summary.get("config", {}).get("epochs") or 1)
    return float(summary["samples"]) / epochs


def steady_rate(summary, all_steady):
    """Samples/s over the steady epochs: every epoch for local reads (no cache to fill),
    epochs 2.. otherwise; None when there is no steady epoch."""
    times = epoch_times(summary)
    times = times if all_steady else times[1:]
    if not times or sum(times) <= 0:
        return None
    return samples_per_epoch(summary) / (sum(times) / len(times))


def fmt(v, spec, none="n/a"):
    return none if v is None else format(v, spec)


def cluster_table(scenarios, local, dataset_bytes, nodes, link_mbit):
    """Markdown. scenarios: [(name, cluster dict, [per-node summaries], all_steady)];
    local: local-direct's summary or None."""
    local_cold = epoch_times(local)[0] if local and epoch_times(local) else None
    local_rate = steady_rate(local, True) if local else None
    ds = float(dataset_bytes)

    def x(v):
        return "n/a" if v is None else f"{v / ds:.2f}x"

    lines = [f"Cluster: {nodes} nodes, one loader per node started together, each node's "
             f"in-region link capped at {link_mbit:g} Mbit/s (tbf, both ways). Dataset "
             f"{ds / 1e6:.1f} MB. Bytes are per epoch (epoch e ends when the last node "
             "finishes it), as a multiple of the dataset.", "",
             "| scenario | WAN bytes per epoch (proxy, both ways) | hub reads per epoch "
             "(sum of agents) | hub reads, whole run incl. mount (sum) | bytes from peers "
             "(sum) | peer fallbacks to the hub | node link bytes in, per node (whole run) | "
             "node link bytes out, per node | cold epoch s per node | steady samples/s per "
             "node | steady vs local-direct | smallest hub window during the run, MiB per node |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = []
    for name, cl, per_node, all_steady in scenarios:
        colds = [epoch_times(s)[0] if epoch_times(s) else None for s in per_node]
        rates = [steady_rate(s, all_steady) for s in per_node]
        wan = cl.get("wan_bytes_per_epoch")
        hub = cl.get("hub_bytes_per_epoch")
        peer = cl.get("peer_hit_bytes")
        fb = cl.get("peer_fallbacks")
        lines.append("| " + " | ".join([
            name,
            " / ".join(x(v) for v in wan) if wan else "n/a",
            " / ".join(x(v) for v in hub) if hub else "n/a",
            x(cl["hub_read_bytes_end"]) if cl.get("hub_read_bytes_end") is not None else "-",
            x(peer) if peer is not None else "-",
            fmt(fb, ".0f", "-"),
            (" / ".join(x(i) for i, _ in cl["link_bytes_per_node"])
             if cl.get("link_bytes_per_node") else "-"),
            (" / ".join(x(o) for _, o in cl["link_bytes_per_node"])
             if cl.get("link_bytes_per_node") else "-"),
            " / ".join(fmt(c, ".1f") for c in colds),
            " / ".join(fmt(r, ".1f") for r in rates),
            " / ".join("n/a" if r is None or not local_rate else f"{r / local_rate:.2f}x"
                       for r in rates),
            (" / ".join(fmt(None if w is None else w / 2**20, ".1f")
                        for w in cl["hub_window_min_per_node"])
             if cl.get("hub_window_min_per_node") else "-")]) + " |")
        rows.append((name, colds, rates, hub))
    lines += ["", "Per node (n1 / n2 / ... above); cold epoch = epoch 1's time; steady "
              "samples/s = samples per epoch / mean time of epochs 2.. (local reads: of every "
              "epoch). Ratios are against `local-direct` (one loader alone, reading the "
              "dataset's directory on the local disk), measured in the same run"
              + (f": epoch 1 {local_cold:.1f} s, {local_rate:.1f} samples/s." if local_cold
                 and local_rate else ".")]
    if local_cold:
        lines.append("Cold epoch vs local-direct's epoch 1 (local time / node time): " + "; ".join(
            f"{name} " + " / ".join("n/a" if c is None else f"{local_cold / c:.2f}x"
                                   for c in colds)
            for name, colds, _, _ in rows) + ".")
    return "\n".join(lines) + "\n"


def targets(scenarios, local, nodes):
    """The checks the multi-node run makes (met / missed), markdown lines."""
    out = []
    local_rate = steady_rate(local, True) if local else None
    local_cold = epoch_times(local)[0] if local and epoch_times(local) else None
    by = {name: (cl, per, st) for name, cl, per, st in scenarios}
    ds = None
    for name, cl, per, _ in scenarios:
        ds = ds or cl.get("dataset_bytes")

    def add(what, figure, ok):
        out.append(f"| {what} | {figure} | {'met' if ok else 'MISSED'} |")

    if "peers-on" in by and ds:
        cl = by["peers-on"][0]
        hub = cl.get("hub_bytes_per_epoch")
        if hub:
            add("peers-on: hub reads of the cold epoch <= 1.05x the dataset (once per cluster)",
                f"{hub[0] / ds:.3f}x", hub[0] <= 1.05 * ds)
    notes = []
    if "peers-off" in by and "peers-on" in by and ds:
        off = by["peers-off"][0].get("wan_bytes_per_epoch")
        on = by["peers-on"][0].get("wan_bytes_per_epoch")
        if off and on and on[0] > 0:
            notes.append(f"WAN bytes of the cold epoch, peers-off / peers-on: "
                         f"{off[0] / on[0]:.2f} (no target; {nodes} if each agent's WAN "
                         "traffic were data only)")
    for name in ("peers-off", "peers-on"):
        if name not in by or not local_rate:
            continue
        rates = [steady_rate(s, False) for s in by[name][1]]
        if all(r is not None for r in rates):
            worst = min(rates) / local_rate
            add(f"{name}: steady samples/s of every node >= 0.99x local-direct (issue 16)",
                f"min {worst:.3f}x", worst >= 0.99)
        colds = [epoch_times(s)[0] for s in by[name][1] if epoch_times(s)]
        if colds and local_cold:
            worst = local_cold / max(colds)
            add(f"{name}: cold epoch of every node >= 0.9x local-direct's (issue 16)",
                f"min {worst:.3f}x", worst >= 0.9)
    if not out:
        return "".join(f"{n}\n" for n in notes)
    return "\n".join(["| target | figure | |", "|---|---:|---|", *out, "", *notes]) + "\n"


def load(path):
    with open(path) as f:
        return json.load(f)
