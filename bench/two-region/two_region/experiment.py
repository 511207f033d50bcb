"""The experiment: its state, the checks before it, the order of its scenarios, cleanup."""

import os
import shutil
import stat
import subprocess
import time

from . import HERE, ROOT
from .checkpoints import Checkpoints
from .config import HALF_CACHE
from .hub import SetUp
from .measure import Measure
from .multinode import Nodes
from .processes import Processes
from .report import Report
from .scenarios import Scenarios
from .util import Failure, is_mountpoint, log


class Experiment(Processes, Measure, SetUp, Scenarios, Checkpoints, Nodes, Report):
    """One run: what it started (for cleanup) and what it measured."""

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
        self.done = []        # scenarios of summarize.py's table
        self.ckpt_done = []   # checkpoint scenarios (their own table)

    def check(self):
        """Root, /dev/fuse, the tools and the binaries the run needs."""
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

    def run(self):
        """Every asked-for scenario in order, then the report; the exit code."""
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
        self.checkpoint_scenarios()
        self.report()
        return 1 if self.loader_failed else 0

    def cleanup(self):
        """Undoes everything the run started, also after a failure."""
        self.cleanup_processes()
        if self.hub_started:
            subprocess.run([f"{ROOT}/scripts/spoke-hub", "stop", self.hub_dir],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self.cluster:
            # Last: nothing of ours runs in them any more (veths and bridge go with them).
            left = self.cluster.delete()
            if left:
                log(f"network namespaces NOT deleted: {', '.join(left)}")
        self.remove_work()

    def cleanup_processes(self):
        """Processes first that use the mounts (loader, copy), then the mounts, then agents,
        then the threads and what is left (the proxy)."""
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

    def remove_work(self):
        """Removes the work dir the run made, unless kept or something is still mounted."""
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
