"""The --nodes N > 1 scenarios: N nodes in network namespaces at once behind one WAN."""

import json
import os
import secrets
import subprocess
import threading
import time

import annotate
import nodes

from .config import PEER_PORT
from .util import Failure, drop_caches, log


class Nodes:
    """Experiment's --nodes methods."""

    def node_labels(self, scenario):
        """<scenario>-n1 .. -nN."""
        return [f"{scenario}-n{k}" for k in range(1, self.a.nodes + 1)]

    def start_node_sampler(self, agents, labels, cluster_trace):
        """Every 0.5 s: per node a trace in annotate.py's format (the WAN proxy's counters,
        i.e. the whole cluster's, and that node's agent's hub bytes; agent None: "-"), and
        the cluster trace (WAN counters, sum of every agent's hub bytes). Also keeps each
        agent's smallest hub window (spoke_fetch_background_window_bytes) once it has read the
        hub, in self.window_min[agent]: the pacer's narrowest point during the fill."""
        stop = threading.Event()

        def sample_agent(name):
            try:
                body = self.agent_get(name, "/metrics")
            except (OSError, Failure):
                return None
            hub = self.metric_sum(None, "spoke_hub_read_bytes_total", body)
            window = self.metric_sum(None, "spoke_fetch_background_window_bytes", body)
            if hub and window is not None:
                self.window_min[name] = min(self.window_min.get(name, window), window)
            return hub

        def sample(files, cf):
            t = time.time()
            up, down = self.wan_stats()
            hubs = [sample_agent(n) if n else None for n in agents]
            for f, h in zip(files, hubs):
                f.write(f"{t:.6f} {up} {down} {'-' if h is None else f'{h:.0f}'}\n")
                f.flush()
            total = "-" if any(h is None for h in hubs) else f"{sum(hubs):.0f}"
            cf.write(f"{t:.6f} {up} {down} {total}\n")
            cf.flush()

        def loop():
            files = [open(f"{self.out}/{label}.trace", "a") for label in labels]
            try:
                with open(cluster_trace, "a") as cf:
                    while not stop.is_set():
                        sample(files, cf)
                        stop.wait(0.5)
                    time.sleep(0.5)  # the proxy rewrites its stats file every 200 ms
                    sample(files, cf)
            finally:
                for f in files:
                    f.close()

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        entry = (stop, t)
        self.threads.append(entry)
        return entry

    def run_node_loaders(self, labels, dirs, epochs, namespaces):
        """Drops the page cache, starts one loader per node at once (each in its node's
        network namespace when given), waits for all (bounded); returns their start times."""
        drop_caches()
        started = []
        for label, d, ns in zip(labels, dirs, namespaces):
            prefix = nodes.nsenter(ns) if ns else []
            t0 = time.time()
            p = self.spawn([*prefix, *self.loader_argv(label, d, epochs)],
                           f"{self.out}/{label}.log")
            started.append((label, p, t0))
        # A bound far above any sane run: 10x the never-stalled time, plus 10 minutes.
        batch_s = max(self.a.compute_ms or 0, 250) / 1000.0
        limit = 600 + 10 * epochs * (self.dataset_files / 32.0) * batch_s
        deadline = time.monotonic() + limit
        for label, p, _ in started:
            try:
                rc = p.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                running = [lb for lb, q, _ in started if q.poll() is None]
                raise Failure(f"loaders {', '.join(running)} did not finish within "
                              f"{limit:.0f} s (see {self.out}/<label>.log)") from None
            self.loader_done(label, p, rc, 6)
        return [t0 for _, _, t0 in started]

    def cluster_summary(self, scenario, labels, t0s, trace, bodies, **fields):
        """<scenario>.cluster.json: WAN and summed hub bytes per epoch (epoch e ends when the
        last node finishes it), peer counters summed over the agents (from their /metrics
        at the end, `bodies`), and `fields`."""
        summaries = [nodes.load(f"{self.out}/{label}.json") for label in labels]
        cl = {"scenario": scenario, "labels": labels, "nodes": self.a.nodes,
              "link_mbit": self.a.node_link_mbit, "dataset_bytes": self.dataset_bytes,
              "dataset_files": self.dataset_files, **fields}
        cl.update(epoch_bytes(annotate.load_trace(trace), t0s, summaries))
        if bodies and all(b is not None for b in bodies):
            cl.update(self.peer_counters(bodies))
        with open(f"{self.out}/{scenario}.cluster.json", "w") as f:
            json.dump(cl, f, indent=2)
            f.write("\n")
        return cl

    def peer_counters(self, bodies):
        """The agents' hub and peer counters, per node and summed."""
        cl = {}
        for key, metric in (("hub_read_bytes_end", "spoke_hub_read_bytes_total"),
                            ("peer_hit_bytes", "spoke_peer_hit_bytes_total"),
                            ("peer_served_bytes", "spoke_peer_served_bytes_total"),
                            ("peer_fallbacks", "spoke_peer_fallbacks_total"),
                            ("peer_checksum_rejects", "spoke_peer_checksum_rejects_total"),
                            ("peer_members", "spoke_peer_members")):
            per = [self.metric_sum(None, metric, b) for b in bodies]
            cl[f"{key}_per_node"] = per
            if any(v is not None for v in per):
                cl[key] = sum(v or 0 for v in per)
        return cl

    def local_parallel(self):
        """N loaders at once on the local disk: what the shared machine costs N loaders."""
        n = self.epochs("local-parallel")
        labels = self.node_labels("local-parallel")
        log(f"scenario local-parallel: {self.a.nodes} loaders at once on {self.export} "
            f"directly, {n} epoch(s)")
        trace = f"{self.out}/local-parallel.cluster.trace"
        s = self.start_node_sampler([None] * len(labels), labels, trace)
        try:
            t0s = self.run_node_loaders(labels, [self.export] * len(labels), n,
                                        [None] * len(labels))
        finally:
            self.stop_thread(s)
        for label, t0 in zip(labels, t0s):
            self.annotate(label, t0, wan_path="none")
        self.cluster_summary("local-parallel", labels, t0s, trace, None)
        self.done.append("local-parallel")

    def nodes_spoke(self, scenario, peers):
        """One agent per node namespace, all over the WAN, one loader per node at once;
        peers: the agents list each other as static peers."""
        n = self.epochs(scenario)
        labels = self.node_labels(scenario)
        spaces = self.cluster.nodes
        self.window_min = {}
        self.start_node_agents(scenario, labels, peers, n)
        mnts = [f"{self.work}/mnt-{label}" for label in labels]
        mount_s = self.mount_nodes(scenario, labels, mnts)
        trace = f"{self.out}/{scenario}.cluster.trace"
        link0 = self.cluster.link_bytes()
        s = self.start_node_sampler(labels, labels, trace)
        try:
            t0s = self.run_node_loaders(labels, mnts, n, spaces)
        finally:
            self.stop_thread(s)
        link = [(i1 - i0, o1 - o0) for (i0, o0), (i1, o1)
                in zip(link0, self.cluster.link_bytes())]
        bodies = [self.save_stats(label, mnt, label, metrics=True)
                  for label, mnt in zip(labels, mnts)]
        with open(f"{self.out}/{scenario}.tc.txt", "w") as f:
            f.write(self.cluster.qdisc_stats())
        for label, mnt in zip(labels, mnts):
            self.unmount(label, mnt)
            self.stop_agent(label)
        for k, (label, t0, m) in enumerate(zip(labels, t0s, mount_s), 1):
            self.annotate(label, t0, mount_s=m, cache_size_bytes=self.cache_bytes, node=k,
                          nodes=self.a.nodes, link_mbit=self.a.node_link_mbit,
                          peers=int(peers))
        cl = self.cluster_summary(scenario, labels, t0s, trace, bodies, peers=int(peers),
                                  link_bytes_per_node=link,
                                  hub_window_min_per_node=[self.window_min.get(lb)
                                                           for lb in labels],
                                  peer_timeout_ms=self.a.peer_timeout_ms or 2000)
        wan = cl.get("wan_bytes_per_epoch")
        if wan:
            log(f"{scenario}: WAN bytes per epoch " + " / ".join(
                f"{v / self.dataset_bytes:.2f}x" for v in wan) + " the dataset")
        self.done.append(scenario)

    def start_node_agents(self, scenario, labels, peers, n):
        """An agent in each node's namespace, listing the others as peers when asked."""
        spaces = self.cluster.nodes
        members = ", ".join(f'"{nodes.node_addr(k)}:{PEER_PORT}"'
                            for k in range(1, len(spaces) + 1))
        log(f"scenario {scenario}: {len(spaces)} nodes, each its agent (cache "
            f"{self.cache_bytes} bytes, prefetch auto) and loader, over the WAN"
            + (f", peers [{members}], peerTimeoutMs "
               f"{self.a.peer_timeout_ms or 'default (2000)'}" if peers else ", no peers")
            + f", {n} epochs")
        for k, (label, ns) in enumerate(zip(labels, spaces), 1):
            extra = ""
            if peers:
                extra = (f"peerListenAddress: {nodes.node_addr(k)}:{PEER_PORT}\n"
                         f"peerTokenFile: {self.token_file}\n"
                         # Namespaces of one machine: the peer channel's TLS is not what
                         # this run measures.
                         "peerPlaintext: true\n"
                         f"peers: [{members}]\n")
                if self.a.peer_timeout_ms is not None:
                    extra += f"peerTimeoutMs: {self.a.peer_timeout_ms}\n"
            self.start_agent(label, self.cache_bytes, ns=ns, extra_cfg=extra)

    def mount_nodes(self, scenario, labels, mnts):
        """Mounts every node's volume at once; returns the seconds each mount took.
        A peer that has not mounted the volume yet refuses to serve it (the asker then reads
        the hub), so staggered mounts would cost hub reads."""
        mount_s = [None] * len(labels)
        errors = []

        def mount_one(i):
            try:
                mount_s[i] = self.mount(labels[i], self.wan_url, mnts[i], "--prefetch", "auto")
            except Failure as e:
                errors.append(str(e))

        workers = [threading.Thread(target=mount_one, args=(i,), daemon=True)
                   for i in range(len(labels))]
        for w in workers:
            w.start()
        for w in workers:
            w.join(150)  # spokectl itself is bounded at 120 s
        if errors or any(w.is_alive() for w in workers):
            raise Failure(f"{scenario}: mounts failed: "
                          f"{'; '.join(errors) or 'a mount did not return within 150 s'}")
        return mount_s

    def run_nodes(self):
        """The node scenarios asked for, then their report; the exit code."""
        self.token_file = f"{self.work}/peer-token"
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"spoke-2r-{secrets.token_hex(16)}\n")
        want = set(self.a.scenarios)
        if "local-direct" in want:
            self.local_direct()
        if "local-parallel" in want:
            self.local_parallel()
        if "peers-off" in want:
            self.nodes_spoke("peers-off", peers=False)
        if "peers-on" in want:
            self.nodes_spoke("peers-on", peers=True)
        self.report_nodes()
        return 1 if self.loader_failed else 0


def epoch_bytes(rows, t0s, summaries):
    """WAN and hub bytes per epoch from the cluster trace's rows (epoch e ends when the last
    node finishes it), and their totals; {} without a trace or epochs."""
    cl = {}
    n_epochs = min(len(s.get("epoch_end_s") or []) for s in summaries)
    if not (rows and n_epochs):
        return cl
    ends = [max(t0 + s["epoch_end_s"][e] for t0, s in zip(t0s, summaries))
            for e in range(n_epochs - 1)]
    bounds = [rows[0][0], *ends, rows[-1][0]]

    def deltas(col):
        vals = [annotate.value_at(rows, col, t) for t in bounds]
        if any(v is None for v in vals):
            return None
        return [max(0.0, b - a) for a, b in zip(vals, vals[1:])]

    up, down, hub = deltas(1), deltas(2), deltas(3)
    if up is not None and down is not None:
        cl["wan_bytes_per_epoch"] = [u + d for u, d in zip(up, down)]
        cl["wan_bytes"] = sum(up) + sum(down)
    if hub is not None:
        cl["hub_bytes_per_epoch"] = hub
        cl["hub_bytes"] = sum(hub)
    return cl
