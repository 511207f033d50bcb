#!/usr/bin/env python3
"""Large files against the link: sequential readers of record shards (WebDataset/TFRecord
style) on a cold Spoke mount, next to what the same link carries, in one run on one hub and
proxy.

  shards_fill.py [--build-dir build/dev] [--shards 60] [--shard-mib 14] [--workers 4]
                 [--delay-ms 30] [--link-mbytes 0] [--connections 4] [--inflight 128] [--reps 2]
                 [--prefetch auto|readahead|off]
                 [--out DIR] [--keep-workdir] [--cache-dir DIR]

One nfs-ganesha hub (scripts/spoke-hub) holds a shards dataset made by `spoke-loader gen
--workload shards` (--shards shards of --shard-mib MiB of ~110 KB records); spoke-wan-proxy
puts --delay-ms each way in front of it, carrying at most --link-mbytes MB/s each way when set
(0: no cap, so the machine's CPU bounds what the link carries). For each repetition (the order
alternates):
  link    spoke-remote-link-bench over the proxy reads every shard through the agent's remote
          layer with connections x inflight reads in flight: no FUSE, no cache
  spoke   a fresh copy of the dataset (new file ids: nothing cached), mounted with
          `--prefetch auto`; `spoke-loader run --workers W --compute-ms 0` streams every
          shard once (each worker its shards in turn, 1 MiB preads), timed to its end
Reports MB/s, the ratio spoke/link, the agent's hub bytes over the dataset (bytes read
twice) and the CPU seconds each phase cost the agent, the hub, the proxy and the client (the
link bench or the loader, whose --verify hashes every record). Writes results.md, results.json and the agent's /metrics after each Spoke phase
(spoke-REP.metrics.txt) to --out (default bench/cold-fill/results/shards-<UTC time>).
Needs root and /dev/fuse.
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "../.."))
sys.path.insert(0, os.path.join(ROOT, "bench", "common"))
import spokebench  # noqa: E402

RECORD_BYTES = 110 * 1000  # the shards preset's mean record


def log(msg):
    print("[shards %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class ShardsFill(spokebench.AgentRig):
    def __init__(self, a):
        super().__init__(a.build_dir, "spoke-shards-bench-", a.delay_ms, a.keep_workdir,
                         cache_parent=a.cache_dir, link_mbytes=a.link_mbytes)
        self.a = a
        self.loader_bin = os.path.join(os.path.abspath(a.build_dir), "bench/loader/spoke-loader")
        self.metrics_port = spokebench.free_port()
        self.rows = []

    def setup(self):
        if not os.access(self.loader_bin, os.X_OK):
            raise RuntimeError("not built: %s" % self.loader_bin)
        self.start("socket: %s\ncacheDir: %s\ncacheSizeBytes: %d\nstateDir: %s/state\n"
                   "mountRoots: [%s]\nmetricsAddress: \"127.0.0.1:%d\"\nlogLevel: info\n"
                   "hub: {connections: %d, inflightPerConnection: %d}\nfuseKeeperSocket: \"\"\n"
                   % (self.sock, self.cache_dir, self.cache_bytes(), self.work, self.work,
                      self.metrics_port, self.a.connections, self.a.inflight))
        src = os.path.join(self.export, "shards")
        records = self.a.shards * (self.a.shard_mib << 20) // RECORD_BYTES
        subprocess.run([self.loader_bin, "gen", "--dir", src, "--workload", "shards",
                        "--samples", str(records), "--shard-mib", str(self.a.shard_mib)],
                       check=True, capture_output=True)
        self.dataset_bytes = sum(os.path.getsize(os.path.join(dp, f))
                                 for dp, _, fs in os.walk(src) for f in fs)
        log("dataset: %d shards, %.1f MB" % (len(os.listdir(os.path.join(src, "train"))),
                                              self.dataset_bytes / 1e6))

    def cache_bytes(self):
        """Room for every copy the repetitions make."""
        return max(4 << 30, 2 * self.a.reps * self.a.shards * (self.a.shard_mib << 20))

    def copy(self, rep):
        """A fresh copy of the dataset: new file ids, nothing of it cached."""
        name = "shards-%d" % rep
        shutil.copytree(os.path.join(self.export, "shards"), os.path.join(self.export, name))
        os.sync()
        return name

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=5) as r:
            return r.read().decode()

    def hub_bytes(self):
        body = self.metrics()
        return sum(float(l.split()[-1]) for l in body.splitlines()
                   if l.startswith(("spoke_hub_read_bytes_total ",
                                    "spoke_hub_read_bytes_total{")))

    def cpu(self):
        """CPU seconds so far of the agent, the hub and the proxy, and of finished children
        (the link bench, the loader)."""
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {"agent": spokebench.cpu_s(self.agent.pid),
                "ganesha": spokebench.cpu_s(self.ganesha_pid),
                "proxy": spokebench.cpu_s(self.proxy.pid),
                "client": kids.ru_utime + kids.ru_stime}

    def link(self, rep):
        before = self.cpu()
        out = subprocess.run([self.link_bin, self.url % "shards", "--connections",
                              str(self.a.connections), "--inflight-per-connection",
                              str(self.a.inflight)], capture_output=True, text=True,
                             timeout=900, check=True).stdout
        kv = dict(w.split("=", 1) for w in re.search(r"^RESULT (.*)$", out, re.M).group(1)
                  .split())
        self.row(rep, "link", int(kv["bytes"]), float(kv["read_s"]), None, before)

    def spoke(self, rep):
        name = self.copy(rep)
        mnt = os.path.join(self.work, "mnt-" + name)
        os.makedirs(mnt)
        self.ctl("mount", self.url % name, mnt, "--mode", "dataset", "--prefetch",
                 self.a.prefetch)
        self.mounts.append(mnt)
        before = self.hub_bytes()
        cpu_before = self.cpu()
        t = time.monotonic()
        subprocess.run([self.loader_bin, "run", "--dir", mnt, "--epochs", "1", "--workers",
                        str(self.a.workers), "--compute-ms", "0", "--drop-cache", "--verify",
                        "--log-level", "warn"], check=True, capture_output=True, timeout=1800)
        seconds = time.monotonic() - t
        self.row(rep, "spoke", self.dataset_bytes, seconds, self.hub_bytes() - before, cpu_before)
        with open(os.path.join(self.out, "spoke-%d.metrics.txt" % rep), "w") as f:
            f.write(self.metrics())

    def row(self, rep, kind, nbytes, seconds, hub, cpu_before):
        after = self.cpu()
        cpu = {k: after[k] - cpu_before[k] for k in after
               if after[k] is not None and cpu_before[k] is not None}
        r = dict(rep=rep, kind=kind, bytes=nbytes, seconds=seconds, mbps=nbytes / seconds / 1e6,
                 hub_x=None if hub is None else hub / self.dataset_bytes, cpu_s=cpu)
        self.rows.append(r)
        log("rep %d %-5s %8.1f MB/s %7.2f s%s  cpu %s" % (
            rep, kind, r["mbps"], seconds,
            "" if hub is None else "  hub bytes %.3fx the dataset" % r["hub_x"],
            " ".join("%s=%.1f" % kv for kv in cpu.items())))

    def table(self):
        lines = ["| rep | link MB/s | Spoke MB/s | Spoke / link | hub bytes / dataset | CPU s, link "
                 "(hub, proxy, client) | CPU s, Spoke (agent, hub, proxy, loader) |",
                 "|---:|---:|---:|---:|---:|---|---|"]
        for rep in range(self.a.reps):
            link = next(r for r in self.rows if r["rep"] == rep and r["kind"] == "link")
            sp = next(r for r in self.rows if r["rep"] == rep and r["kind"] == "spoke")
            lc, sc = link["cpu_s"], sp["cpu_s"]
            lines.append("| %d | %.1f | %.1f | **%.2fx** | %.3fx | %.1f, %.1f, %.1f | "
                         "%.1f, %.1f, %.1f, %.1f |" % (
                             rep, link["mbps"], sp["mbps"], sp["mbps"] / link["mbps"], sp["hub_x"],
                             lc.get("ganesha", 0), lc.get("proxy", 0), lc.get("client", 0),
                             sc.get("agent", 0), sc.get("ganesha", 0), sc.get("proxy", 0),
                             sc.get("client", 0)))
        return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build/dev")
    ap.add_argument("--shards", type=int, default=60)
    ap.add_argument("--shard-mib", type=int, default=14)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--delay-ms", type=int, default=30)
    ap.add_argument("--link-mbytes", type=float, default=0,
                    help="the WAN link's bandwidth, MB/s each way (default 0: no cap)")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--inflight", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--prefetch", default="auto", choices=("auto", "readahead", "off"),
                    help="the Spoke mount's --prefetch (default auto)")
    ap.add_argument("--out")
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--cache-dir", help="where the agent's cacheDir goes (default: the work "
                    "directory under /var/tmp); /dev/shm leaves the cache disk's write rate out")
    a = ap.parse_args()
    for flag in ("shards", "shard_mib", "workers", "reps", "connections", "inflight"):
        if getattr(a, flag) <= 0:
            ap.error("--%s must be positive" % flag.replace("_", "-"))
    if a.link_mbytes < 0:
        ap.error("--link-mbytes must be 0 (no cap) or positive")
    if os.geteuid() != 0:
        sys.exit("shards_fill.py: needs root (FUSE mounts, the hub)")
    out = os.path.abspath(a.out or os.path.join(
        HERE, "results", "shards-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())))
    os.makedirs(out, exist_ok=True)
    b = ShardsFill(a)
    b.out = out
    try:
        b.setup()
        for rep in range(a.reps):
            order = (b.link, b.spoke) if rep % 2 == 0 else (b.spoke, b.link)
            for phase in order:
                phase(rep)
    finally:
        b.cleanup()
    md = b.table()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    md += "\n\ncommand: %s\ncommit: %s\n" % (" ".join(sys.argv), commit)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(b.rows, f, indent=1)
    print(md)


if __name__ == "__main__":
    main()
