#!/usr/bin/env python3
"""The two-region experiment in one command.

One generated dataset on an NFS hub (nfs-ganesha on loopback), a 60 ms WAN (spoke-wan-proxy,
30 ms each way), and these scenarios, each with a fresh agent (own cacheDir, stateDir,
socket, metrics port):

  local-direct     the loader reading the dataset's directory on the local disk directly (no
                   FUSE, no hub): what a user compares against; every ratio is against it
  co-located       Spoke mounting the hub directly (no WAN delay), cache + prefetch on
  remote-no-spoke  through the WAN, prefetch off, strict consistency (close-to-open, no page
                   cache), and the smallest cache the agent accepts (64 blocks = 64 MiB: the
                   agent has no per-mount "cache off")
  spoke-cold       through the WAN, Spoke on, empty cache, several epochs
  spoke-warm       the agent restarted on spoke-cold's cache (mount restored from its
                   stateDir): the cache survives restarts
  stage-in         copy the dataset over the WAN to local disk first (parallel cp streams
                   through a Spoke mount with prefetch off), then train from the copy
  spoke-hints      through the WAN, empty cache, the loader disclosing each epoch's order
                   (<mount>/.spoke-hints when the agent serves it, else `spokectl hint` fed
                   from a FIFO the loader writes each epoch's order to)
  spoke-cache-0.5x through the WAN, empty cache half the dataset's size, evictionPolicy
                   nothrash: a dataset twice the cache

Presets (--preset, default demo): demo = what scripts/demo.sh runs: 4000 samples (438 MB) of
a loader needing 3.5 MB/s (1 s of compute per batch of 32) over a 60 ms link of 7.2 MB/s
(about 2x the loader), so that filling the cold cache takes a minute, and three scenarios
(local-direct, remote-no-spoke, spoke-cold over 3 epochs; ~10 minutes on 2 cores). tour =
every scenario on the same 4000 samples with 250 ms per batch (14 MB/s) and no link cap (~7
minutes); short = a quick run of every scenario (960 samples); full = the RESULTS.md run
(20000 samples, ~2.2 GB, about an hour). Each gives the dataset size, the loader's compute per
batch, the link's cap, the scenarios and every scenario's epochs; flags override each.

Then plot.gp -> samples-per-s.png and summarize.py -> results.md (+ the targets).

--nodes N (N >= 2): N nodes of one cluster at once instead (nodes.py): network namespaces
spk2r-<pid>-hub (bridge, ganesha, the WAN proxy) and -n1..-nN (one agent and one loader
each, joined to the bridge by a veth capped with tbf at --node-link-mbit both ways);
scenarios local-direct, local-parallel (N loaders on the local disk), peers-off and peers-on
(the agents as static peers); the table gives cluster WAN/hub bytes per epoch against the
dataset, cold epoch and steady samples/s per node against local-direct.
Needs root (FUSE mounts, /proc/sys/vm/drop_caches). Stops everything it started (by pid) and
unmounts every mount, also on failure, Ctrl-C or SIGTERM. Standard library only.
"""

import argparse
import contextlib
import io
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import annotate  # noqa: E402  (bench/two-region/annotate.py)
import nodes  # noqa: E402  (bench/two-region/nodes.py: --nodes N)
import summarize  # noqa: E402  (bench/two-region/summarize.py)

MIB = 1 << 20
MIN_CACHE = 64 * MIB  # the agent's minimum cacheSizeBytes
ALL_SCENARIOS = ["local-direct", "co-located", "remote-no-spoke", "spoke-cold", "spoke-warm",
                 "stage-in", "spoke-hints", "spoke-cache-0.5x"]
WORKLOADS = ("report", "resnet50", "unet3d", "shards")
# --nodes N > 1: one loader per node, all nodes at once (bench/two-region/nodes.py).
# local-direct: one loader alone on the local disk (the baseline of every ratio);
# local-parallel: N loaders at once on the local disk (what the machine itself costs);
# peers-off / peers-on: one agent per node namespace over the WAN, without / with peers.
NODE_SCENARIOS = ["local-direct", "local-parallel", "peers-off", "peers-on"]
NODE_EPOCHS = 2
NODE_LINK_MBIT = 1000.0
PEER_PORT = 7311
# The proxy's ports on the bridge address in the hub namespace: the first two that are not
# ganesha's.
WAN_PORTS = (30491, 30492, 30493, 30494)
HALF_CACHE = "spoke-cache-0.5x"
HALF_FRACTION = 0.5
HALF_POLICY = "nothrash"
# Per preset: report samples (other workloads: SAMPLES_OTHER), epochs per scenario, the
# batches remote-no-spoke runs of its epoch (a sample: ~12 samples/s would take 5 minutes per
# 4000 files; 0 = the whole epoch), and optionally the compute per batch (ms; default
# REPORT_COMPUTE_MS), the WAN link's cap (MB/s both ways, all connections; default none) and
# the scenarios run by default (default all).
# demo: the link carries 2x what the loader reads, so a cold cache fills in about half an
# epoch: 438 MB at 7.2 MB/s = 61 s of a 125 s epoch (125 batches of 1 s). Filling for a minute
# at 2x the loader's rate takes a 2-minute epoch whatever the sample size, so the demo keeps
# the scenarios that show it: five epochs and the remote sample are ~10 minutes.
PRESETS = {
    "short": {"samples": 960, "nospoke_batches": 10, "epochs": {
        "local-direct": 2, "co-located": 3, "remote-no-spoke": 1, "spoke-cold": 3,
        "spoke-warm": 2, "stage-in": 3, "spoke-hints": 3, HALF_CACHE: 3}},
    "demo": {"samples": 4000, "nospoke_batches": 4, "compute_ms": 1000, "wan_mbytes": 7.2,
             "scenarios": ["local-direct", "remote-no-spoke", "spoke-cold"], "epochs": {
        "local-direct": 1, "co-located": 1, "remote-no-spoke": 1, "spoke-cold": 3,
        "spoke-warm": 1, "stage-in": 1, "spoke-hints": 1, HALF_CACHE: 2}},
    "tour": {"samples": 4000, "nospoke_batches": 8, "epochs": {
        "local-direct": 1, "co-located": 1, "remote-no-spoke": 1, "spoke-cold": 3,
        "spoke-warm": 1, "stage-in": 1, "spoke-hints": 1, HALF_CACHE: 2}},
    "full": {"samples": 20000, "nospoke_batches": 20, "epochs": {
        "local-direct": 2, "co-located": 2, "remote-no-spoke": 1, "spoke-cold": 3,
        "spoke-warm": 2, "stage-in": 2, "spoke-hints": 3, HALF_CACHE: 3}},
}
SAMPLES_OTHER = {("resnet50", "short"): 2400, ("unet3d", "short"): 168,
                 ("shards", "short"): 3200, ("resnet50", "demo"): 4000,
                 ("unet3d", "demo"): 168, ("shards", "demo"): 6400,
                 ("resnet50", "full"): 20000, ("unet3d", "full"): 1008,
                 ("shards", "full"): 20000, ("resnet50", "tour"): 4000, ("unet3d", "tour"): 168,
                 ("shards", "tour"): 6400}
# The issue's loader: 250 ms of compute per batch of 32 (~14 MB/s of ~110 KB samples).
REPORT_COMPUTE_MS = 250
SEED = 1


class Failure(Exception):
    """A step failed; the message says which and why."""


def log(msg):
    print(f"[two-region {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def tail(path, n):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2.0):
    """Body of a GET, or None when the server does not answer 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode(errors="replace") if r.status == 200 else None
    except OSError:
        return None


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def is_mountpoint(path):
    """From /proc/mounts: a FUSE mount whose agent died fails stat() but is still there."""
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f if len(line.split()) > 1)


def machine_line():
    with open("/proc/meminfo") as f:
        kb = next(int(l.split()[1]) for l in f if l.startswith("MemTotal"))
    return f"{os.cpu_count()} cores, {kb / 1048576:.1f} GiB RAM, kernel {os.uname().release}"


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench/two-region/two_region.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=tuple(PRESETS), default="demo",
                    help="dataset size and epochs per scenario (default demo)")
    ap.add_argument("--short", action="store_const", const="short", dest="preset",
                    help="= --preset short: a quick run (960 samples)")
    ap.add_argument("--full", action="store_const", const="full", dest="preset",
                    help="= --preset full: 20000 samples (~2.2 GB), for bench/RESULTS.md")
    ap.add_argument("--workload", default="report", choices=WORKLOADS,
                    help="bench/loader preset (default report)")
    ap.add_argument("--samples", type=int, help="dataset size in samples "
                    "(default: per workload, smaller with --short)")
    ap.add_argument("--epochs", type=int,
                    help="epochs of every scenario but spoke-warm and remote-no-spoke "
                    "(default: the preset's)")
    ap.add_argument("--warm-epochs", type=int,
                    help="epochs of spoke-warm (default: the preset's; 0 skips it)")
    ap.add_argument("--nospoke-epochs", type=int,
                    help="epochs of remote-no-spoke (default 1)")
    ap.add_argument("--nospoke-batches", type=int,
                    help="batches per epoch of remote-no-spoke, a sample (default: the "
                    "preset's; 0 = whole epochs)")
    ap.add_argument("--compute-ms", type=float,
                    help=f"compute per batch (default: the preset's, else {REPORT_COMPUTE_MS} "
                    "for report, else the loader's preset)")
    ap.add_argument("--wan-mbytes", type=float,
                    help="the WAN link's bandwidth in MB/s each way, shared by every "
                    "connection (spoke-wan-proxy --link-mbytes; default: the preset's, 0 = "
                    "no cap)")
    ap.add_argument("--cache-fraction", type=float, default=2.0,
                    help="Spoke cache size = F x dataset size (default 2: the dataset fits; "
                    "e.g. 0.5 for a dataset twice the cache). Floor: 64 MiB (agent minimum)")
    ap.add_argument("--cache-basis", default="bytes", choices=("bytes", "footprint"),
                    help="bytes (default): 'dataset size' = the files' total size; footprint: "
                    "every file rounded up to whole 1 MiB blocks (agents before 5b2f311)")
    ap.add_argument("--eviction-policy", default="lru",
                    help="the agents' evictionPolicy (default lru; nothrash for datasets "
                    "larger than the cache)")
    ap.add_argument("--scenarios",
                    help="comma-separated subset (default: all, in the order above; with "
                    f"--nodes N > 1: {','.join(NODE_SCENARIOS)})")
    ap.add_argument("--nodes", type=int, default=1,
                    help="1 (default): the scenarios above, one agent at a time. N > 1: N "
                    "nodes in network namespaces (one agent and one loader each, all at "
                    "once) behind one WAN, scenarios " + ",".join(NODE_SCENARIOS) +
                    f", {NODE_EPOCHS} epochs each unless --epochs")
    ap.add_argument("--node-link-mbit", type=float,
                    help=f"with --nodes N > 1: each node's in-region link (to the hub "
                    f"namespace's bridge, so hub and peer traffic), capped with tbf in both "
                    f"directions, Mbit/s (default {NODE_LINK_MBIT:g})")
    ap.add_argument("--peer-timeout-ms", type=int,
                    help="with --nodes N > 1: the agents' peerTimeoutMs in peers-on "
                    "(default: the agent's, 2000)")
    ap.add_argument("--delay-ms", type=int, default=30,
                    help="one-way WAN delay (default 30 = 60 ms RTT)")
    ap.add_argument("--stage-streams", type=int, default=32,
                    help="parallel cp streams of stage-in (default 32)")
    ap.add_argument("--out", help="results (default bench/two-region/results/<workload>-<UTC "
                    "time>)")
    ap.add_argument("--build-dir", default="build",
                    help="where the binaries are (default build, relative to the repository)")
    ap.add_argument("--work", help="scratch: hub export, caches, mounts "
                    "(default /var/tmp/spoke-2r.PID)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    a = ap.parse_args(argv)
    if a.nodes < 1:
        ap.error(f"--nodes must be >= 1 (1 = one agent at a time; N > 1 = N nodes at once), "
                 f"got {a.nodes}")
    if a.node_link_mbit is not None:
        if a.nodes == 1:
            ap.error("--node-link-mbit needs --nodes N > 1 (it caps each node's link)")
        if a.node_link_mbit <= 0:
            ap.error(f"--node-link-mbit must be positive, got {a.node_link_mbit:g}")
    if a.peer_timeout_ms is not None:
        if a.nodes == 1:
            ap.error("--peer-timeout-ms needs --nodes N > 1 (peers-on only)")
        if not 10 <= a.peer_timeout_ms <= 60000:
            ap.error(f"--peer-timeout-ms must be 10..60000 (the agent's range), got "
                     f"{a.peer_timeout_ms}")
    if a.nodes > 1 and a.node_link_mbit is None:
        a.node_link_mbit = NODE_LINK_MBIT
    valid = NODE_SCENARIOS if a.nodes > 1 else ALL_SCENARIOS
    if a.scenarios is None:
        a.scenarios = ",".join(PRESETS[a.preset].get("scenarios", valid) if a.nodes == 1
                               else valid)
    scenarios = [s for s in a.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in valid]
    if unknown or not scenarios:
        ap.error(f"--scenarios: unknown {unknown or 'empty list'}"
                 + (f" with --nodes {a.nodes}" if a.nodes > 1 else "")
                 + f"; choose from {','.join(valid)}")
    a.scenarios = scenarios
    a.short = a.preset == "short"
    preset = PRESETS[a.preset]
    if a.samples is None:
        a.samples = (preset["samples"] if a.workload == "report"
                     else SAMPLES_OTHER[(a.workload, a.preset)])
    # The preset's loader and link are the single-node scenarios'; --nodes runs keep the
    # report's 250 ms and an uncapped WAN (their links are the nodes' own, --node-link-mbit).
    single = a.nodes == 1
    if a.compute_ms is None and a.workload == "report":
        a.compute_ms = preset.get("compute_ms", REPORT_COMPUTE_MS) if single else REPORT_COMPUTE_MS
    if a.wan_mbytes is None:
        a.wan_mbytes = preset.get("wan_mbytes", 0) if single else 0
    if a.wan_mbytes < 0:
        ap.error(f"--wan-mbytes must be >= 0 (0 = no cap), got {a.wan_mbytes:g}")
    for flag, v in (("--epochs", a.epochs), ("--nospoke-epochs", a.nospoke_epochs)):
        if v is not None and v <= 0:
            ap.error(f"{flag} must be positive")
    for flag, v in (("--warm-epochs", a.warm_epochs), ("--nospoke-batches", a.nospoke_batches)):
        if v is not None and v < 0:
            ap.error(f"{flag} must be >= 0")
    a.epochs_of = dict(preset["epochs"])
    if a.epochs is not None:
        for s in a.epochs_of:
            if s not in ("spoke-warm", "remote-no-spoke"):
                a.epochs_of[s] = a.epochs
    if a.warm_epochs is not None:
        a.epochs_of["spoke-warm"] = a.warm_epochs
    a.epochs_of["remote-no-spoke"] = a.nospoke_epochs or 1
    if a.nospoke_batches is None:
        a.nospoke_batches = preset["nospoke_batches"]
    if a.nodes > 1:
        # Every node scenario runs the same epochs (local-direct too: one baseline run).
        a.epochs_of = {s: a.epochs or NODE_EPOCHS for s in NODE_SCENARIOS}
    for flag, v in (("--samples", a.samples), ("--delay-ms", a.delay_ms + 1),
                    ("--stage-streams", a.stage_streams)):
        if v <= 0:
            ap.error(f"{flag} must be positive")
    if a.compute_ms is not None and a.compute_ms < 0:
        ap.error("--compute-ms must be >= 0")
    if a.cache_fraction <= 0:
        ap.error("--cache-fraction must be positive")
    return a


class Experiment:
    def __init__(self, args):
        self.a = args
        build = args.build_dir if os.path.isabs(args.build_dir) else os.path.join(
            ROOT, args.build_dir)
        self.agent_bin = f"{build}/cache-agent/agent/spoke-cache-agent"
        self.ctl_bin = f"{build}/cache-agent/cli/spokectl"
        self.loader_bin = f"{build}/bench/loader/spoke-loader"
        self.proxy_bin = f"{build}/e2e/wan-proxy/spoke-wan-proxy"
        self.build = build
        self.out = os.path.abspath(args.out or os.path.join(
            HERE, "results", f"{args.workload}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"))
        self.work = os.path.abspath(args.work or f"/var/tmp/spoke-2r.{os.getpid()}")
        self.hub_dir = f"{self.work}/hub"
        self.export = f"{self.hub_dir}/export"
        # Everything cleanup() must undo.
        self.agents = {}      # name -> Popen
        self.agent_ns = {}    # name -> network namespace (--nodes N > 1)
        self.cluster = None   # nodes.Cluster: namespaces, bridge, veths (--nodes N > 1)
        self.mounts = []      # every FUSE target we asked for
        self.procs = []       # proxy, loader, stage-in copy (own process group)
        self.threads = []     # (stop event, thread): samplers, hint feeder
        self.hub_started = False
        self.created_work = False  # a --work dir that existed before is never removed
        self.loader_failed = False
        self.done = []

    # ------------------------------------------------------------ checks
    def check(self):
        if os.geteuid() != 0:
            raise Failure("must run as root (FUSE mounts and /proc/sys/vm/drop_caches)")
        if not os.path.exists("/dev/fuse") or not stat.S_ISCHR(os.stat("/dev/fuse").st_mode):
            raise Failure("/dev/fuse is missing (modprobe fuse)")
        for tool in ("gnuplot", "fusermount3"):
            if shutil.which(tool) is None:
                raise Failure(f"{tool} is not installed (scripts/install-deps.sh)")
        for b in (self.agent_bin, self.ctl_bin, self.loader_bin, self.proxy_bin):
            if not os.access(b, os.X_OK):
                raise Failure(f"{b} not built (ninja -C {self.build} spoke-cache-agent "
                              "spokectl spoke-loader spoke-wan-proxy)")
        if self.a.nodes > 1:
            for tool in ("ip", "tc", "nsenter"):
                if shutil.which(tool) is None:
                    raise Failure(f"--nodes {self.a.nodes} needs {tool} (iproute2, util-linux)")

    # ------------------------------------------------------------ processes
    def spawn(self, argv, log_path, **kw):
        with open(log_path, "ab") as lf:
            p = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, **kw)
        self.procs.append(p)
        return p

    def end_process(self, p, grace_s=10.0):
        """SIGTERM (to its group when it leads one), SIGKILL after grace_s; reaps it."""
        if p.poll() is None:
            try:
                group = p.pid if os.getpgid(p.pid) == p.pid else None
            except ProcessLookupError:
                group = None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM) if group else p.terminate()
            try:
                p.wait(grace_s)
            except subprocess.TimeoutExpired:
                log(f"pid {p.pid} ({os.path.basename(p.args[0])}) ignored SIGTERM; SIGKILL")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL) if group else p.kill()
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    # ------------------------------------------------------------ agents
    def agent_dir(self, name):
        return f"{self.work}/{name}"

    def metrics_port(self, name):
        with open(f"{self.agent_dir(name)}/agent.yaml") as f:
            for line in f:
                if line.startswith("metricsAddress: 127.0.0.1:"):
                    return int(line.rsplit(":", 1)[1])
        raise Failure(f"agent {name}: no metricsAddress in agent.yaml")

    def agent_get(self, name, path, timeout=2.0):
        """GET on the agent's metrics server (in its network namespace), or None."""
        url = f"http://127.0.0.1:{self.metrics_port(name)}{path}"
        ns = self.agent_ns.get(name)
        if ns is None:
            return http_get(url, timeout)
        try:
            return nodes.in_netns(ns, lambda: http_get(url, timeout), timeout + 3)
        except (nodes.NetError, OSError) as e:
            log(f"agent {name}: GET {path} in namespace {ns}: {e}")
            return None

    def start_agent(self, name, cache_bytes, read_ahead=64 * MIB, policy=None, ns=None,
                    extra_cfg=""):
        """Fresh dirs unless they exist (then it is a restart on the same cache and state).
        (readAheadMaxBytes is at least one block; prefetch-off agents get one: unused.)
        ns: run it in that network namespace (its metricsAddress is that namespace's
        loopback); extra_cfg: more agent.yaml lines (peers)."""
        d = self.agent_dir(name)
        os.makedirs(f"{d}/cache", exist_ok=True)
        os.makedirs(f"{d}/state", exist_ok=True)
        cfg = f"{d}/agent.yaml"
        if not os.path.exists(cfg):
            read_ahead = min(read_ahead, cache_bytes // 2)  # the agent requires <= cache / 2
            with open(cfg, "w") as f:
                f.write(f"socket: {d}/agent.sock\ncacheDir: {d}/cache\n"
                        f"cacheSizeBytes: {cache_bytes}\nblockSizeBytes: 1048576\n"
                        f"stateDir: {d}/state\nmountRoots: [{self.work}]\nmetricsAddress: 127.0.0.1:{free_port()}\n"
                        "logLevel: info\nhub: {connections: 4, inflightPerConnection: 128, "
                        "requestTimeoutSeconds: 10}\n"
                        f"readAheadMaxBytes: {read_ahead}\n"
                        f"evictionPolicy: {policy or self.a.eviction_policy}\n"
                        "fuseKeeperSocket: \"\"\n"  # no keeper (the default is a shared one)
                        + extra_cfg)
        prefix = nodes.nsenter(ns) if ns else []
        p = self.spawn([*prefix, self.agent_bin, "--config", cfg], f"{d}/agent.log")
        self.agents[name] = p
        if ns:
            self.agent_ns[name] = ns
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.path.exists(f"{d}/agent.sock") and self.agent_get(
                    name, "/healthz", 0.5) is not None:
                return
            if p.poll() is not None:
                sys.stderr.write(tail(f"{d}/agent.log", 20))
                raise Failure(f"agent {name} exited at start (exit {p.returncode})")
            time.sleep(0.05)
        sys.stderr.write(tail(f"{d}/agent.log", 20))
        raise Failure(f"agent {name} did not come up within 10 s"
                      + (f" (in namespace {ns})" if ns else ""))

    def stop_agent(self, name):
        p = self.agents.pop(name, None)
        if p is not None:
            self.end_process(p)

    def ctl(self, name, *args, output=None):
        """spokectl against agent `name`; returns its exit code (output appended to a file)."""
        argv = [self.ctl_bin, "--socket", f"{self.agent_dir(name)}/agent.sock", *args]
        dest = open(output, "ab") if output else subprocess.DEVNULL
        try:
            return subprocess.run(argv, stdout=dest, stderr=subprocess.STDOUT, timeout=120,
                                  stdin=subprocess.DEVNULL).returncode
        except subprocess.TimeoutExpired:
            log(f"spokectl {args[0]} on agent {name} did not answer within 120 s")
            return 124
        finally:
            if output:
                dest.close()

    def hub_bytes(self, name):
        """Sum of every series of the agent's spoke_hub_read_bytes_total, or None."""
        if name not in self.agents:
            return None
        return self.metric_sum(name, "spoke_hub_read_bytes_total")

    def metric_sum(self, name, metric, body=None):
        """Sum of every series of `metric` in the agent's /metrics (or `body`), or None."""
        if body is None:
            try:
                body = self.agent_get(name, "/metrics")
            except (OSError, Failure):
                return None
        if body is None:
            return None
        vals = [float(l.split()[-1]) for l in body.splitlines()
                if l.startswith((f"{metric} ", f"{metric}{{"))]
        return sum(vals) if vals else None

    def wan_stats(self):
        try:
            with open(f"{self.work}/wan.stats") as f:
                s = f.read().split()
            return s if len(s) == 2 else ["-", "-"]
        except OSError:
            return ["-", "-"]

    # ------------------------------------------------------------ mounts
    def mount(self, name, url, target, *flags):
        """Mounts and returns the seconds it took."""
        os.makedirs(target, exist_ok=True)
        self.mounts.append(target)
        t0 = time.monotonic()
        rc = self.ctl(name, "mount", url, target, "--mode", "dataset", *flags,
                      output=f"{self.agent_dir(name)}/spokectl.log")
        if rc != 0:
            sys.stderr.write(tail(f"{self.agent_dir(name)}/spokectl.log", 20))
            sys.stderr.write(tail(f"{self.agent_dir(name)}/agent.log", 20))
            raise Failure(f"mount {name} failed (spokectl exit {rc})")
        if not os.path.isfile(f"{target}/MANIFEST"):
            raise Failure(f"mount {name}: no MANIFEST under {target}")
        return time.monotonic() - t0

    def force_unmount(self, target):
        for argv in (["fusermount3", "-uz", target], ["umount", "-l", target]):
            if subprocess.run(argv, stderr=subprocess.DEVNULL).returncode == 0:
                return

    def unmount(self, name, target):
        if self.ctl(name, "unmount", target) != 0 and is_mountpoint(target):
            self.force_unmount(target)

    # ------------------------------------------------------------ sampling
    def start_sampler(self, name, trace):
        """"<wall> <wan up> <wan down> <agent hub bytes>" every 0.5 s into trace."""
        stop = threading.Event()

        def sample(f):
            hub = self.hub_bytes(name)
            up, down = self.wan_stats()
            f.write(f"{time.time():.6f} {up} {down} {'-' if hub is None else f'{hub:.0f}'}\n")
            f.flush()

        def loop():
            with open(trace, "a") as f:
                while not stop.is_set():
                    sample(f)
                    stop.wait(0.5)
                time.sleep(0.5)  # the proxy rewrites its stats file every 200 ms
                sample(f)

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        entry = (stop, t)
        self.threads.append(entry)
        return entry

    def stop_thread(self, entry):
        stop, t = entry
        stop.set()
        t.join(5)
        if entry in self.threads:
            self.threads.remove(entry)

    # ------------------------------------------------------------ loader
    def run_loader(self, label, data_dir, epochs, *extra):
        """Drops the page cache, runs the loader, returns its start time (wall clock)."""
        drop_caches()
        t0 = time.time()
        p = self.spawn([*self.loader_argv(label, data_dir, epochs), *extra],
                       f"{self.out}/{label}.log")
        self.loader_done(label, p, p.wait(), 12)
        return t0

    def loader_argv(self, label, data_dir, epochs):
        return [self.loader_bin, "run", "--dir", data_dir, "--epochs", str(epochs),
                "--seed", str(SEED), "--drop-cache", "--label", label,
                "--json", f"{self.out}/{label}.json", "--csv", f"{self.out}/{label}.csv",
                *self.compute_flags()]

    def loader_done(self, label, p, rc, log_lines):
        """Checks a finished loader's exit and summary, echoes the end of its log."""
        self.procs.remove(p)
        if rc != 0:
            log(f"loader {label} exited {rc} (read errors?) -- see {self.out}/{label}.log")
            self.loader_failed = True
        if not os.path.isfile(f"{self.out}/{label}.json"):
            raise Failure(f"loader {label} wrote no summary; log: "
                          f"{tail(f'{self.out}/{label}.log', 5)}")
        for line in tail(f"{self.out}/{label}.log", log_lines).splitlines():
            print(f"    [{label}] {line}", file=sys.stderr)

    def compute_flags(self):
        return [] if self.a.compute_ms is None else ["--compute-ms", f"{self.a.compute_ms:g}"]

    def epochs(self, scenario):
        return self.a.epochs_of[scenario]

    def annotate(self, label, t0, **fields):
        base = {"dataset_bytes": self.dataset_bytes, "dataset_files": self.dataset_files,
                "dataset_footprint_bytes": self.footprint_bytes,
                "cache_basis": self.a.cache_basis, "cache_basis_bytes": self.basis_bytes}
        sets = []
        for k, v in {**base, **fields}.items():
            sets += ["--set", f"{k}={v}"]
        o = f"{self.out}/{label}"
        rc = annotate.main(["--json", f"{o}.json", "--csv", f"{o}.csv",
                            "--trace", f"{o}.trace", "--t0", repr(t0), *sets])
        if rc:
            raise Failure(f"annotate {label} failed")

    def measure(self, name, label, data_dir, epochs, *extra):
        """Loader run with the trace sampler around it; returns the loader's start time."""
        s = self.start_sampler(name, f"{self.out}/{label}.trace")
        try:
            return self.run_loader(label, data_dir, epochs, *extra)
        finally:
            self.stop_thread(s)

    def save_stats(self, name, target, label, metrics=False):
        self.ctl(name, "stats", target, output=f"{self.out}/{label}.stats.txt")
        if metrics:
            body = self.agent_get(name, "/metrics")
            if body is not None:
                with open(f"{self.out}/{label}.metrics.txt", "w") as f:
                    f.write(body)
            return body
        return None

    # ------------------------------------------------------------ set-up
    def setup(self):
        os.makedirs(self.out, exist_ok=True)
        self.created_work = not os.path.exists(self.work)
        os.makedirs(self.work, exist_ok=True)
        log(f"work {self.work}, results {self.out}")
        log(f"machine: {machine_line()}")
        hub_prefix = []
        if self.a.nodes > 1:
            self.cluster = nodes.Cluster(f"spk2r-{os.getpid()}", self.a.nodes,
                                         self.a.node_link_mbit, log)
            try:
                self.cluster.create()
            except nodes.NetError as e:
                raise Failure(f"network set-up: {e}") from None
            # ganesha (NFSv3) registers with the machine's rpcbind through /run/rpcbind.sock.
            # spoke-hub would start a missing one inside the hub namespace, where it would
            # outlive the run: start it here instead, on the host, as spoke-hub does.
            if subprocess.run(["pgrep", "-x", "rpcbind"],
                              stdout=subprocess.DEVNULL).returncode != 0:
                log("no rpcbind runs: starting one on the host (left running, as spoke-hub "
                    "does)")
                if subprocess.run(["rpcbind", "-w"]).returncode != 0:
                    subprocess.run(["rpcbind"])
            hub_prefix = nodes.nsenter(self.cluster.hub)
        self.hub_started = True
        try:
            r = subprocess.run([*hub_prefix, f"{ROOT}/scripts/spoke-hub", "start",
                                self.hub_dir], capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=60)
        except subprocess.TimeoutExpired:
            raise Failure("spoke-hub start did not finish within 60 s") from None
        if r.returncode != 0:
            raise Failure(f"spoke-hub start failed: {r.stderr.strip()[-500:]}")
        kv = dict(w.split("=", 1) for w in r.stdout.split() if "=" in w)
        try:
            hub_nfs, hub_mnt = int(kv["NFS_PORT"]), int(kv["MOUNT_PORT"])
        except (KeyError, ValueError):
            raise Failure(f"spoke-hub start printed no ports: {r.stdout.strip()!r}") from None
        log(f"hub: ganesha on 127.0.0.1:{hub_nfs} (mount {hub_mnt}), export {self.export}"
            + (f", in namespace {self.cluster.hub}" if self.cluster else ""))

        # The dataset is the export's root (so hint paths, relative to the dataset, are
        # relative to the volume root too). Generated on the hub side: no WAN.
        t = time.monotonic()
        with open(f"{self.out}/gen.log", "wb") as lf:
            rc = subprocess.run([self.loader_bin, "gen", "--dir", self.export, "--workload",
                                 self.a.workload, "--samples", str(self.a.samples), "--seed",
                                 str(SEED)], stdout=lf, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            raise Failure(f"gen failed: {tail(f'{self.out}/gen.log', 3)}")
        sizes = []
        with open(f"{self.export}/MANIFEST") as f:
            for line in f:
                w = line.split()
                if line.startswith("#") or not w:
                    continue
                if len(w) >= 2:
                    sizes.append(int(w[1]))
        self.files = sizes
        self.dataset_files = len(sizes)
        self.dataset_bytes = sum(sizes)
        # What the agent's cache needs to hold the whole dataset: whole 1 MiB blocks per file.
        self.footprint_bytes = sum((s + MIB - 1) // MIB * MIB for s in sizes)
        self.basis_bytes = (self.footprint_bytes if self.a.cache_basis == "footprint"
                            else self.dataset_bytes)
        self.cache_bytes = max(MIN_CACHE, int(self.basis_bytes * self.a.cache_fraction)
                               // MIB * MIB)
        self.half_cache_bytes = max(MIN_CACHE, int(self.basis_bytes * HALF_FRACTION) // MIB * MIB)
        log(f"dataset: {self.a.workload}, {self.a.samples} samples, {self.dataset_files} files, "
            f"{self.dataset_bytes} bytes (gen {time.monotonic() - t:.2f} s); cache footprint "
            f"{self.footprint_bytes} bytes; Spoke cache {self.cache_bytes} bytes "
            f"(x{self.a.cache_fraction:g} of the {self.a.cache_basis})")

        self.direct_url = f"nfs://127.0.0.1{self.export}?nfsport={hub_nfs}&mountport={hub_mnt}"
        if self.cluster:
            # The proxy in the hub namespace, on the bridge: the nodes' only way to the hub.
            wan_host = nodes.HUB_ADDR
            ports = [p for p in WAN_PORTS if p not in (hub_nfs, hub_mnt)]
            wan_nfs, wan_mnt = ports[0], ports[1]
        else:
            wan_host = "127.0.0.1"
            wan_nfs, wan_mnt = free_port(), free_port()
        self.spawn([*hub_prefix, self.proxy_bin, "--delay-ms", str(self.a.delay_ms),
                    "--route", f"{wan_host}:{wan_nfs}=127.0.0.1:{hub_nfs}",
                    "--route", f"{wan_host}:{wan_mnt}=127.0.0.1:{hub_mnt}",
                    "--link-mbytes", f"{self.a.wan_mbytes:g}",
                    "--stats-file", f"{self.work}/wan.stats"], f"{self.work}/wan-proxy.log")

        def probe():
            socket.create_connection((wan_host, wan_nfs), timeout=0.5).close()

        deadline = time.monotonic() + 5
        while True:
            try:
                if self.cluster:
                    nodes.in_netns(self.cluster.hub, probe, 3)
                else:
                    probe()
                break
            except (OSError, nodes.NetError):
                if time.monotonic() > deadline:
                    raise Failure(f"spoke-wan-proxy does not listen on {wan_host}:{wan_nfs}: "
                                  f"{tail(f'{self.work}/wan-proxy.log', 5)}") from None
                time.sleep(0.05)
        self.wan_url = f"nfs://{wan_host}{self.export}?nfsport={wan_nfs}&mountport={wan_mnt}"
        cap = (f", link {self.a.wan_mbytes:g} MB/s each way" if self.a.wan_mbytes
               else ", no bandwidth cap")
        log(f"WAN: spoke-wan-proxy {self.a.delay_ms} ms each way ({2 * self.a.delay_ms} ms "
            f"RTT{cap}) on {wan_host}:{wan_nfs}/{wan_mnt}")

        a = self.a
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or "unknown"
        with open(f"{self.out}/run.txt", "w") as f:
            f.write(
                f"command: bench/two-region/two_region.py --preset {a.preset} "
                f"--workload {a.workload} --samples {a.samples} "
                f"--nospoke-batches {a.nospoke_batches} "
                f"--compute-ms {'preset' if a.compute_ms is None else f'{a.compute_ms:g}'} "
                f"--cache-fraction {a.cache_fraction:g} --cache-basis {a.cache_basis} "
                f"--eviction-policy {a.eviction_policy} --delay-ms {a.delay_ms} "
                f"--wan-mbytes {a.wan_mbytes:g} --stage-streams {a.stage_streams}"
                + (f" --scenarios {','.join(a.scenarios)}" if a.nodes == 1 else "")
                + (f" --nodes {a.nodes} --node-link-mbit {a.node_link_mbit:g} "
                   f"--scenarios {','.join(a.scenarios)}"
                   + (f" --peer-timeout-ms {a.peer_timeout_ms}" if a.peer_timeout_ms else "")
                   if a.nodes > 1 else "") + "\n"
                f"epochs: {', '.join(f'{k} {v}' for k, v in a.epochs_of.items())}\n"
                f"commit: {commit}\n"
                f"machine: {machine_line()}, "
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
                f"dataset: {a.workload}, {a.samples} samples, {self.dataset_files} files, "
                f"{self.dataset_bytes} bytes (cache footprint in 1 MiB blocks: "
                f"{self.footprint_bytes}); Spoke cache {self.cache_bytes} bytes = "
                f"{a.cache_fraction:g} x {a.cache_basis}; {HALF_CACHE} cache {self.half_cache_bytes} "
                f"bytes ({HALF_POLICY}); remote-no-spoke/stage-in cache {MIN_CACHE} bytes\n")

    # ------------------------------------------------------------ scenarios
    def local_direct(self):
        """The loader on the dataset's directory on the local disk (the hub's export, read
        by the loader itself): no FUSE, no NFS, no WAN."""
        n = self.epochs("local-direct")
        log(f"scenario local-direct: the loader on {self.export} directly, {n} epoch(s)")
        t0 = self.measure("none", "local-direct", self.export, n)
        self.annotate("local-direct", t0, wan_path="none")
        self.done.append("local-direct")

    def co_located(self):
        """Spoke on the hub directly (no WAN)."""
        n = self.epochs("co-located")
        log(f"scenario co-located: agent on the hub directly, cache + prefetch auto, "
            f"{n} epochs")
        mnt = f"{self.work}/mnt-co-located"
        self.start_agent("co-located", self.cache_bytes)
        m = self.mount("co-located", self.direct_url, mnt, "--prefetch", "auto")
        t0 = self.measure("co-located", "co-located", mnt, n)
        self.save_stats("co-located", mnt, "co-located")
        self.unmount("co-located", mnt)
        self.stop_agent("co-located")
        self.annotate("co-located", t0, mount_s=m, cache_size_bytes=self.cache_bytes,
                      wan_path="direct")
        self.done.append("co-located")

    def remote_no_spoke(self):
        """Same mount path, prefetch off, strict consistency, minimal cache."""
        n = self.epochs("remote-no-spoke")
        sample = self.a.nospoke_batches
        log(f"scenario remote-no-spoke: WAN, prefetch off, strict, cache {MIN_CACHE} bytes "
            f"(agent minimum), {n} epoch(s)" + (f" of {sample} batches" if sample else ""))
        mnt = f"{self.work}/mnt-remote-no-spoke"
        self.start_agent("remote-no-spoke", MIN_CACHE, MIB)
        m = self.mount("remote-no-spoke", self.wan_url, mnt, "--prefetch", "off",
                       "--consistency", "strict")
        extra = ["--max-batches", str(sample)] if sample else []
        t0 = self.measure("remote-no-spoke", "remote-no-spoke", mnt, n, *extra)
        self.save_stats("remote-no-spoke", mnt, "remote-no-spoke")
        self.unmount("remote-no-spoke", mnt)
        self.stop_agent("remote-no-spoke")
        self.annotate("remote-no-spoke", t0, mount_s=m, cache_size_bytes=MIN_CACHE,
                      sample_batches=sample)
        self.done.append("remote-no-spoke")

    def spoke_cold_warm(self, cold, warm):
        """Cold cache, several epochs; then warm after an agent restart."""
        a = self.a
        mnt = f"{self.work}/mnt-spoke"
        log(f"scenario spoke-cold: WAN, Spoke (prefetch auto), empty cache, "
            f"{self.epochs('spoke-cold')} epochs")
        self.start_agent("spoke", self.cache_bytes)
        m = self.mount("spoke", self.wan_url, mnt, "--prefetch", "auto")
        t0 = self.measure("spoke", "spoke-cold", mnt, self.epochs("spoke-cold"))
        self.save_stats("spoke", mnt, "spoke-cold", metrics=True)
        self.annotate("spoke-cold", t0, mount_s=m, cache_size_bytes=self.cache_bytes)
        if cold:
            self.done.append("spoke-cold")
        warm_epochs = self.epochs("spoke-warm")
        if warm and warm_epochs > 0:
            log(f"scenario spoke-warm: agent restarted on the same cacheDir/stateDir, "
                f"{warm_epochs} epochs")
            self.stop_agent("spoke")
            t = time.monotonic()
            self.start_agent("spoke", self.cache_bytes)
            # The mount comes back from stateDir/mounts.json; mount explicitly if it does not.
            restored = False
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if os.path.isfile(f"{mnt}/MANIFEST") and is_mountpoint(mnt):
                    restored = True
                    break
                time.sleep(0.1)
            if not restored:
                log("the restarted agent did not restore the mount within 10 s; mounting again")
                self.force_unmount(mnt)
                self.mount("spoke", self.wan_url, mnt, "--prefetch", "auto")
            m = time.monotonic() - t
            t0 = self.measure("spoke", "spoke-warm", mnt, warm_epochs)
            self.save_stats("spoke", mnt, "spoke-warm")
            self.annotate("spoke-warm", t0, mount_s=m, cache_size_bytes=self.cache_bytes,
                          mount_restored=int(restored))
            self.done.append("spoke-warm")
        self.unmount("spoke", mnt)
        self.stop_agent("spoke")

    def stage_in(self):
        """Copy over the WAN (parallel cp streams through a Spoke mount with prefetch off and
        a cold minimal cache), then train from the local copy."""
        a = self.a
        log(f"scenario stage-in: copy over the WAN with {a.stage_streams} cp streams, then "
            f"{self.epochs('stage-in')} epochs locally")
        mnt = f"{self.work}/mnt-stage"
        local = f"{self.work}/local-copy"
        trace = f"{self.out}/stage-in.trace"
        self.start_agent("stage", MIN_CACHE, MIB)
        m = self.mount("stage", self.wan_url, mnt, "--prefetch", "off")
        shutil.rmtree(local, ignore_errors=True)
        os.makedirs(local)
        open(trace, "w").close()
        s = self.start_sampler("stage", trace)
        t = time.monotonic()
        with open(f"{mnt}/MANIFEST") as f:
            paths = [w[0] for w in (l.split() for l in f if not l.startswith("#"))
                     if len(w) >= 2]
        # Directories first (parallel `cp --parents` races on mkdir), then the files.
        for d in sorted({os.path.dirname(p) for p in paths if "/" in p}):
            os.makedirs(f"{local}/{d}", exist_ok=True)
        # xargs in its own process group, so that cleanup ends it and every cp at once.
        cp = subprocess.Popen(["xargs", "-d", "\n", "-P", str(a.stage_streams), "-n", "64",
                               "cp", "--parents", "-t", local], cwd=mnt, stdin=subprocess.PIPE,
                              start_new_session=True)
        self.procs.append(cp)
        cp.communicate("\n".join(["MANIFEST", *paths]).encode() + b"\n")
        self.procs.remove(cp)
        if cp.returncode != 0:
            raise Failure(f"stage-in copy failed (exit {cp.returncode})")
        stage_s = time.monotonic() - t
        log(f"stage-in copy: {stage_s:.2f} s")
        # The agent's counters stop with it: keep sampling the proxy only while training.
        self.stop_thread(s)
        self.unmount("stage", mnt)
        self.stop_agent("stage")
        os.sync()
        t0 = self.measure("none", "stage-in", local, self.epochs("stage-in"))
        # The trace's hub column ends with "-" after the agent stopped; annotate uses the proxy's.
        self.annotate("stage-in", t0, mount_s=m, stage_in_s=stage_s,
                      stage_streams=a.stage_streams, cache_size_bytes=MIN_CACHE)
        shutil.rmtree(local, ignore_errors=True)
        self.done.append("stage-in")

    def spoke_hints(self):
        """Spoke with hints, cold cache."""
        mnt = f"{self.work}/mnt-hints"
        self.start_agent("hints", self.cache_bytes)
        m = self.mount("hints", self.wan_url, mnt, "--prefetch", "auto")
        control = f"{mnt}/.spoke-hints"
        feeder = None
        channel = None
        if os.path.exists(control):
            # The control file must take a write (an empty one) on this read-only mount.
            try:
                open(control, "w").close()
                channel, hints_file = "control-file", control
            except OSError:
                log("the agent's .spoke-hints refuses writes; using spokectl hint")
        if channel is None:
            # The loader writes each epoch's order into a FIFO before starting the epoch's
            # workers; the feeder hands it to `spokectl hint` (an agent API call).
            channel, hints_file = "spokectl", f"{self.work}/hints.fifo"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(hints_file)
            os.mkfifo(hints_file)
            feeder = self.start_hint_feeder(mnt, hints_file)
        log(f"scenario spoke-hints: WAN, Spoke, empty cache, hints via {channel}, "
            f"{self.epochs('spoke-hints')} epochs")
        t0 = self.measure("hints", "spoke-hints", mnt, self.epochs("spoke-hints"), "--hints-file",
                          hints_file)
        if feeder:
            self.stop_hint_feeder(feeder, hints_file)
        self.save_stats("hints", mnt, "spoke-hints", metrics=True)
        self.unmount("hints", mnt)
        self.stop_agent("hints")
        self.annotate("spoke-hints", t0, mount_s=m, cache_size_bytes=self.cache_bytes,
                      hint_channel=channel)
        self.done.append("spoke-hints")

    def half_cache(self):
        """Spoke over the WAN with a cache half the dataset's size and the nothrash policy."""
        n = self.epochs(HALF_CACHE)
        log(f"scenario {HALF_CACHE}: WAN, Spoke, empty cache of {self.half_cache_bytes} bytes "
            f"({HALF_FRACTION:g} x the dataset), evictionPolicy {HALF_POLICY}, {n} epochs")
        mnt = f"{self.work}/mnt-half"
        self.start_agent("half", self.half_cache_bytes, policy=HALF_POLICY)
        m = self.mount("half", self.wan_url, mnt, "--prefetch", "auto")
        t0 = self.measure("half", HALF_CACHE, mnt, n)
        self.save_stats("half", mnt, HALF_CACHE, metrics=True)
        self.unmount("half", mnt)
        self.stop_agent("half")
        self.annotate(HALF_CACHE, t0, mount_s=m, cache_size_bytes=self.half_cache_bytes,
                      eviction_policy=HALF_POLICY)
        self.done.append(HALF_CACHE)

    def start_hint_feeder(self, mnt, fifo):
        stop = threading.Event()
        epoch_file = f"{self.work}/hints.epoch"
        hints_log = f"{self.out}/spoke-hints.hints.log"

        def loop():
            i = 0
            while not stop.is_set():
                with open(fifo, "rb") as f:  # blocks until the loader opens it
                    data = f.read()
                if stop.is_set():
                    break
                if not data.strip():
                    continue
                i += 1
                with open(epoch_file, "wb") as f:
                    f.write(data)
                with open(hints_log, "a") as f:
                    lines = data.count(b"\n")
                    f.write(f"epoch order {i}: {lines} paths at {time.time():.6f}\n")
                self.ctl("hints", "hint", mnt, epoch_file, output=hints_log)

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        entry = (stop, t)
        self.threads.append(entry)
        return entry

    def stop_hint_feeder(self, entry, fifo):
        stop, t = entry
        stop.set()
        # Wakes a feeder blocked in open(fifo): a writer that opens and closes at once.
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # ENXIO: nobody is reading, the feeder is not in open()
        t.join(5)
        if entry in self.threads:
            self.threads.remove(entry)

    # ------------------------------------------------------------ --nodes N > 1
    def node_labels(self, scenario):
        return [f"{scenario}-n{k}" for k in range(1, self.a.nodes + 1)]

    def start_node_sampler(self, agents, labels, cluster_trace):
        """Every 0.5 s: per node a trace in annotate.py's format (the WAN proxy's counters,
        i.e. the whole cluster's, and that node's agent's hub bytes; agent None: "-"), and
        the cluster trace (WAN counters, sum of every agent's hub bytes)."""
        stop = threading.Event()

        def sample(files, cf):
            t = time.time()
            up, down = self.wan_stats()
            hubs = [self.hub_bytes(n) if n else None for n in agents]
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
        rows = annotate.load_trace(trace)
        n_epochs = min(len(s.get("epoch_end_s") or []) for s in summaries)
        if rows and n_epochs:
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
        if bodies and all(b is not None for b in bodies):
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
        with open(f"{self.out}/{scenario}.cluster.json", "w") as f:
            json.dump(cl, f, indent=2)
            f.write("\n")
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
                         f"peers: [{members}]\n")
                if self.a.peer_timeout_ms is not None:
                    extra += f"peerTimeoutMs: {self.a.peer_timeout_ms}\n"
            self.start_agent(label, self.cache_bytes, ns=ns, extra_cfg=extra)
        mnts = [f"{self.work}/mnt-{label}" for label in labels]
        # All nodes mount at once: a peer that has not mounted the volume yet refuses to
        # serve it (the asker then reads the hub), so staggered mounts cost hub reads.
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
                                  peer_timeout_ms=self.a.peer_timeout_ms or 2000)
        wan = cl.get("wan_bytes_per_epoch")
        if wan:
            log(f"{scenario}: WAN bytes per epoch " + " / ".join(
                f"{v / self.dataset_bytes:.2f}x" for v in wan) + " the dataset")
        self.done.append(scenario)

    def report_nodes(self):
        out = self.out
        if not self.done:
            raise Failure("no scenario ran")
        local = nodes.load(f"{out}/local-direct.json") if "local-direct" in self.done else None
        scen = []
        labels = []
        for name in self.done:
            if name == "local-direct":
                scen.append((name, {}, [local], True))
                labels.append(name)
                continue
            cl = nodes.load(f"{out}/{name}.cluster.json")
            scen.append((name, cl, [nodes.load(f"{out}/{lb}.json") for lb in cl["labels"]],
                         name == "local-parallel"))
            labels += cl["labels"]
        with open(f"{out}/{labels[0]}.json") as f:
            ideal = json.load(f)["config"]["ideal_samples_per_s"]
        with open(f"{out}/plot.log", "w") as plot_log:
            rc = subprocess.run(["gnuplot", "-e", f"csvs='{' '.join(f'{out}/{lb}.csv' for lb in labels)}'",
                                 "-e", f"titles='{' '.join(labels)}'", "-e",
                                 f"out='{out}/samples-per-s.png'; ideal={ideal}",
                                 f"{HERE}/plot.gp"], stderr=plot_log).returncode
        if rc != 0:
            log(f"gnuplot failed: {tail(f'{out}/plot.log', 10)}")
        md = (nodes.cluster_table(scen, local, self.dataset_bytes, self.a.nodes,
                                  self.a.node_link_mbit) + "\n"
              + nodes.targets(scen, local, self.a.nodes))
        with open(f"{out}/run.txt") as f:
            md += "\n" + f.read()
        with open(f"{out}/results.md", "w") as f:
            f.write(md)
        print()
        print(md)
        log(f"plot: {out}/samples-per-s.png")
        log(f"table: {out}/results.md")

    def run_nodes(self):
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

    # ------------------------------------------------------------ results
    def report(self):
        if not self.done:
            raise Failure("no scenario ran")
        out = self.out
        with open(f"{out}/{self.done[0]}.json") as f:
            ideal = json.load(f)["config"]["ideal_samples_per_s"]
        csvs = " ".join(f"{out}/{s}.csv" for s in self.done)
        with open(f"{out}/plot.log", "w") as plot_log:
            rc = subprocess.run(["gnuplot", "-e", f"csvs='{csvs}'", "-e",
                                 f"titles='{' '.join(self.done)}'", "-e",
                                 f"out='{out}/samples-per-s.png'; ideal={ideal}",
                                 f"{HERE}/plot.gp"], stderr=plot_log).returncode
        if rc != 0:
            log(f"gnuplot failed: {tail(f'{out}/plot.log', 10)}")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            summarize.main(["--targets", *(f"{out}/{s}.json" for s in self.done)])
        with open(f"{out}/run.txt") as f:
            md = buf.getvalue() + "\n" + f.read()
        with open(f"{out}/results.md", "w") as f:
            f.write(md)
        print()
        print(md)
        log(f"plot: {out}/samples-per-s.png")
        log(f"table: {out}/results.md")

    def run(self):
        self.check()
        self.setup()
        if self.a.nodes > 1:
            return self.run_nodes()
        want = set(self.a.scenarios)
        if "local-direct" in want:
            self.local_direct()
        if "co-located" in want:
            self.co_located()
        if "remote-no-spoke" in want:
            self.remote_no_spoke()
        if want & {"spoke-cold", "spoke-warm"}:
            self.spoke_cold_warm("spoke-cold" in want, "spoke-warm" in want)
        if "stage-in" in want:
            self.stage_in()
        if "spoke-hints" in want:
            self.spoke_hints()
        if HALF_CACHE in want:
            self.half_cache()
        self.report()
        return 1 if self.loader_failed else 0

    # ------------------------------------------------------------ cleanup (always)
    def cleanup(self):
        # Processes first that use the mounts (loader, copy), then the mounts, then agents.
        for p in [p for p in self.procs if p not in self.agents.values()]:
            if self.proxy_bin not in p.args:
                self.end_process(p, 5)
        for target in self.mounts:
            if is_mountpoint(target):
                for name in list(self.agents):
                    self.ctl(name, "unmount", target)
                if is_mountpoint(target):
                    self.force_unmount(target)
        for name in list(self.agents):
            self.stop_agent(name)
        fifo = f"{self.work}/hints.fifo"
        for entry in list(self.threads):
            if os.path.exists(fifo):
                self.stop_hint_feeder(entry, fifo)
            else:
                self.stop_thread(entry)
        for p in list(self.procs):
            self.end_process(p, 5)
        if self.hub_started:
            subprocess.run([f"{ROOT}/scripts/spoke-hub", "stop", self.hub_dir],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self.cluster:
            # Last: nothing of ours runs in them any more (veths and bridge go with them).
            left = self.cluster.delete()
            if left:
                log(f"network namespaces NOT deleted: {', '.join(left)}")
        if self.a.keep or not self.created_work:
            if os.path.isdir(self.work):
                log(f"work dir kept: {self.work}")
        else:
            with open("/proc/mounts") as f:
                busy = any(f" {self.work}/" in line for line in f)
            if busy:  # never rm -rf through a live mount
                log(f"mounts left under {self.work}; not removed")
            else:
                shutil.rmtree(self.work, ignore_errors=True)


def on_signal(signum, _frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv):
    args = parse_args(argv)
    exp = Experiment(args)
    rc = 1
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        rc = exp.run()
    except Failure as e:
        log(f"ERROR: {e}")
    except KeyboardInterrupt as e:
        log(f"interrupted ({e or 'SIGINT'})")
        rc = 130
    finally:
        # A second signal must not cut the cleanup short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        exp.cleanup()
        if rc != 0:
            log(f"failed (exit {rc}); partial results in {exp.out}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
