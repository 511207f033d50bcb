"""Setting a run up: the network namespaces, the hub, the dataset, the WAN proxy, run.txt."""

import os
import socket
import subprocess
import time

import nodes
import spokebench
from spokebench import free_port

from . import ROOT
from .config import (CKPT_SCENARIOS, HALF_CACHE, HALF_FRACTION, HALF_POLICY, MIB, MIN_CACHE, SEED,
                     WAN_PORTS)
from .util import Failure, log, machine_line, tail


class SetUp:
    """Experiment's set-up methods."""

    def setup(self):
        """Everything the scenarios share, in order; the hub's ports go to the WAN proxy."""
        os.makedirs(self.out, exist_ok=True)
        self.created_work = not os.path.exists(self.work)
        os.makedirs(self.work, exist_ok=True)
        log(f"work {self.work}, results {self.out}")
        log(f"machine: {machine_line()}")
        hub_prefix = self.start_cluster() if self.a.nodes > 1 else []
        hub_nfs, hub_mnt = self.start_hub(hub_prefix)
        self.generate()
        self.direct_url = self.hub_url("127.0.0.1", hub_nfs, hub_mnt)
        self.start_wan(hub_prefix, hub_nfs, hub_mnt)
        self.write_run_txt()

    def hub_url(self, host, nfs_port, mount_port):
        """The export's nfs:// URL: NFSv3 with both ports, or NFSv4.1 with the NFS port only."""
        if self.a.nfs_version == "4.1":
            return f"nfs://{host}{self.export}?version=4.1&nfsport={nfs_port}"
        return f"nfs://{host}{self.export}?nfsport={nfs_port}&mountport={mount_port}"

    def start_cluster(self):
        """The --nodes namespaces and rpcbind; returns the prefix that runs in the hub's."""
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
        return nodes.nsenter(self.cluster.hub)

    def start_hub(self, hub_prefix):
        """nfs-ganesha through scripts/spoke-hub; returns its NFS and MOUNT ports."""
        self.hub_started = True
        try:
            r = spokebench.start_hub(f"{ROOT}/scripts/spoke-hub", self.hub_dir, hub_prefix)
        except subprocess.TimeoutExpired:
            raise Failure("spoke-hub start did not finish within 60 s") from None
        if r.returncode != 0:
            raise Failure(f"spoke-hub start failed: {r.stderr.strip()[-500:]}")
        kv = spokebench.hub_vars(r.stdout)
        try:
            hub_nfs, hub_mnt = int(kv["NFS_PORT"]), int(kv["MOUNT_PORT"])
        except (KeyError, ValueError):
            raise Failure(f"spoke-hub start printed no ports: {r.stdout.strip()!r}") from None
        log(f"hub: ganesha on 127.0.0.1:{hub_nfs} (mount {hub_mnt}), export {self.export}"
            + (f", in namespace {self.cluster.hub}" if self.cluster else ""))
        return hub_nfs, hub_mnt

    def generate(self):
        """The dataset at the export's root (so hint paths, relative to the dataset, are
        relative to the volume root too), generated on the hub side: no WAN. Then sizes."""
        t = time.monotonic()
        with open(f"{self.out}/gen.log", "wb") as lf:
            rc = subprocess.run([self.loader_bin, "gen", "--dir", self.export, "--workload",
                                 self.a.workload, "--samples", str(self.a.samples), "--seed",
                                 str(SEED)], stdout=lf, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            raise Failure(f"gen failed: {tail(f'{self.out}/gen.log', 3)}")
        self.size_caches(self.manifest_sizes())
        log(f"dataset: {self.a.workload}, {self.a.samples} samples, {self.dataset_files} files, "
            f"{self.dataset_bytes} bytes (gen {time.monotonic() - t:.2f} s); cache footprint "
            f"{self.footprint_bytes} bytes; Spoke cache {self.cache_bytes} bytes "
            f"(x{self.a.cache_fraction:g} of the {self.a.cache_basis})")

    def manifest_sizes(self):
        """The file sizes the dataset's MANIFEST lists."""
        sizes = []
        with open(f"{self.export}/MANIFEST") as f:
            for line in f:
                w = line.split()
                if line.startswith("#") or not w:
                    continue
                if len(w) >= 2:
                    sizes.append(int(w[1]))
        return sizes

    def size_caches(self, sizes):
        """The dataset's size and footprint, and the cache sizes derived from them."""
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

    def start_wan(self, hub_prefix, hub_nfs, hub_mnt):
        """spoke-wan-proxy in front of the hub; waits until it listens; sets wan_url."""
        if self.cluster:
            # The proxy in the hub namespace, on the bridge: the nodes' only way to the hub.
            wan_host = nodes.HUB_ADDR
            ports = [p for p in WAN_PORTS if p not in (hub_nfs, hub_mnt)]
            wan_nfs, wan_mnt = ports[0], ports[1]
        else:
            wan_host = "127.0.0.1"
            wan_nfs, wan_mnt = free_port(), free_port()
        routes = [(f"{wan_host}:{wan_nfs}", f"127.0.0.1:{hub_nfs}"),
                  (f"{wan_host}:{wan_mnt}", f"127.0.0.1:{hub_mnt}")]
        self.spawn([*hub_prefix, *spokebench.wan_proxy_argv(
            self.proxy_bin, self.a.delay_ms, routes, "--link-mbytes", f"{self.a.wan_mbytes:g}",
            "--stats-file", f"{self.work}/wan.stats")], f"{self.work}/wan-proxy.log")
        self.wait_wan(wan_host, wan_nfs)
        self.wan_url = self.hub_url(wan_host, wan_nfs, wan_mnt)
        cap = (f", link {self.a.wan_mbytes:g} MB/s each way" if self.a.wan_mbytes
               else ", no bandwidth cap")
        log(f"WAN: spoke-wan-proxy {self.a.delay_ms} ms each way ({2 * self.a.delay_ms} ms "
            f"RTT{cap}) on {wan_host}:{wan_nfs}/{wan_mnt}")

    def wait_wan(self, wan_host, wan_nfs):
        """Until the proxy accepts connections (5 s at most; in the hub namespace if any)."""
        def probe():
            socket.create_connection((wan_host, wan_nfs), timeout=0.5).close()

        deadline = time.monotonic() + 5
        while True:
            try:
                if self.cluster:
                    nodes.in_netns(self.cluster.hub, probe, 3)
                else:
                    probe()
                return
            except (OSError, nodes.NetError):
                if time.monotonic() > deadline:
                    raise Failure(f"spoke-wan-proxy does not listen on {wan_host}:{wan_nfs}: "
                                  f"{tail(f'{self.work}/wan-proxy.log', 5)}") from None
                time.sleep(0.05)

    def write_run_txt(self):
        """run.txt: the command, epochs, commit, machine and dataset (under the tables)."""
        a = self.a
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or "unknown"
        with open(f"{self.out}/run.txt", "w") as f:
            f.write(
                f"{command_line(a)}\n"
                f"epochs: {', '.join(f'{k} {v}' for k, v in a.epochs_of.items())}\n"
                f"commit: {commit}\n"
                f"machine: {machine_line()}, "
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
                f"dataset: {a.workload}, {a.samples} samples, {self.dataset_files} files, "
                f"{self.dataset_bytes} bytes (cache footprint in 1 MiB blocks: "
                f"{self.footprint_bytes}); Spoke cache {self.cache_bytes} bytes = "
                f"{a.cache_fraction:g} x {a.cache_basis}; {HALF_CACHE} cache {self.half_cache_bytes} "
                f"bytes ({HALF_POLICY}); remote-no-spoke/stage-in cache {MIN_CACHE} bytes\n")


def command_line(a):
    """run.txt's "command:" line: the options that shaped the run."""
    return (f"command: bench/two-region/two_region.py --preset {a.preset} "
            f"--workload {a.workload} --samples {a.samples} "
            f"--nospoke-batches {a.nospoke_batches} "
            f"--compute-ms {'preset' if a.compute_ms is None else f'{a.compute_ms:g}'} "
            f"--cache-fraction {a.cache_fraction:g} --cache-basis {a.cache_basis} "
            f"--eviction-policy {a.eviction_policy} --delay-ms {a.delay_ms} "
            f"--wan-mbytes {a.wan_mbytes:g} --stage-streams {a.stage_streams}"
            + (f" --scenarios {','.join(a.scenarios)}" if a.nodes == 1 else "")
            + (f" --ckpt-mib {a.ckpt_mib} --ckpt-every {a.ckpt_every}"
               if a.nodes == 1 and set(a.scenarios) & set(CKPT_SCENARIOS) else "")
            + (f" --nodes {a.nodes} --node-link-mbit {a.node_link_mbit:g} "
               f"--scenarios {','.join(a.scenarios)}"
               + (f" --peer-timeout-ms {a.peer_timeout_ms}" if a.peer_timeout_ms else "")
               if a.nodes > 1 else ""))
