#!/usr/bin/env python3
"""Cold fill against the link: how fast Spoke fills an empty cache over the WAN, next to what
the same link carries at the agent's in-flight depth, measured in one run on the same hub,
proxy and files.

  cold_fill.py [--build-dir build/dev] [--files 4000] [--file-kb 110] [--per-dir 500]
               [--large-mib 1024] [--delay-ms 30] [--link-mbytes 0] [--connections 4]
               [--inflight 128] [--reps 2] [--readers 64] [--perf] [--out DIR] [--keep-workdir]
               [--cache-dir DIR]

One nfs-ganesha hub (scripts/spoke-hub) holds `small/` (--files files of --file-kb KB in
directories of --per-dir) and, with --large-mib > 0, `large/big.bin`; spoke-wan-proxy puts
--delay-ms each way in front of it (60 ms RTT), carrying at most --link-mbytes MB/s each way
when set (0: no cap, so the machine's CPU bounds what the link carries). For each dataset and
repetition:
  link     spoke-remote-link-bench over the proxy: lists the dataset (READDIRPLUS, 16
           directories at once) and reads every file's bytes through the agent's own remote
           layer (LibnfsRemote, a listed small file by handle, one READ) with connections x
           inflight reads in flight: no FUSE, no cache
  warmup   spoke-cache-agent (same hub config) mounts the dataset, its cache emptied
           (spokectl evict), then `spokectl warmup TARGET` until done: the documented way to
           fill a cache. Timed from the warmup call to its end (the walk it waits for
           included; the mount before it not)
  readers  (--readers N > 0, small files only) a fresh mount, cache emptied, N threads
           reading every file through the mount (bench/cache/reader.cc)
The order of link and Spoke alternates between repetitions. For each phase the CPU seconds
of the agent, ganesha and the proxy are recorded (/proc/PID/stat), and for Spoke phases the
agent's metric deltas; --perf records the agent with `perf record -g` during the first
small-file warm-up and keeps the top of `perf report`.

Prints a table (MB/s, files/s, the ratio fill/link) and writes results.json and results.md
to --out (default bench/cold-fill/results/<UTC time>). Needs root and /dev/fuse.
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "../.."))
sys.path.insert(0, os.path.join(ROOT, "bench", "common"))
import spokebench  # noqa: E402
T0 = time.monotonic()


def log(msg):
    print("[%7.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


def metric_sum(metrics, name):
    """A metric summed over its labels (every volume's, every hub's)."""
    return sum(v for k, v in metrics.items() if k.startswith(name))


def timeline(samples, want, secs):
    """When a warm-up's hub bytes first reached 0+, 50 % and 100 % of the dataset, from the
    samples (seconds, bytes, ...): the start, the middle and the end of the transfer; the
    rest of `secs` after the last is the store and collection tail."""
    out = {}
    for name, frac in (("first_byte_s", 1e-9), ("half_s", 0.5), ("all_s", 1.0)):
        hit = next((s[0] for s in samples if s[1] >= frac * want), None)
        out[name] = None if hit is None else round(hit, 3)
    out["tail_s"] = None if out["all_s"] is None else round(secs - out["all_s"], 3)
    # Hub requests in flight while the transfer ran (between the first byte and the last).
    during = [s[2] for s in samples if out["first_byte_s"] is not None and
              out["first_byte_s"] <= s[0] <= (out["all_s"] or secs)]
    out["hub_inflight_mean"] = round(sum(during) / len(during), 1) if during else None
    out["samples"] = [[round(a, 3), b, c, d] for a, b, c, d in samples]
    return out


def make_small(top, files, kb, per_dir):
    blob = os.urandom(kb * 1000 + 4096)
    for i in range(files):
        d = os.path.join(top, "d%03d" % (i // per_dir))
        if i % per_dir == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%06d.jpg" % i), "wb") as f:
            f.write(blob[i % 4096:i % 4096 + kb * 1000])


def make_large(top, mib):
    os.makedirs(top)
    with open(os.path.join(top, "big.bin"), "wb") as f:
        chunk = os.urandom(1 << 20)
        for i in range(mib):
            f.write(chunk[i % 4096:] + chunk[:i % 4096])


def parse_metrics(body):
    """{name{labels}: value} of a Prometheus text body (counters and gauges)."""
    out = {}
    for line in body.splitlines():
        if not line or line[0] == "#":
            continue
        key, _, val = line.rpartition(" ")
        try:
            out[key] = float(val)
        except ValueError:
            pass
    return out


def metric_deltas(before, after, names):
    """Sums over series of each metric name (prefix match of the series key), after - before."""
    d = {}
    for n in names:
        s = lambda m: sum(v for k, v in m.items() if k == n or k.startswith(n + "{"))
        d[n] = s(after) - s(before)
    return d


class Bench(spokebench.AgentRig):
    def __init__(self, a):
        super().__init__(a.build_dir, "spoke-cold-fill-", a.delay_ms, a.keep_workdir,
                         cache_parent=a.cache_dir, link_mbytes=a.link_mbytes)
        self.a = a
        self.rows = []
        self.out = os.path.abspath(a.out or os.path.join(
            HERE, "results", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())))

    # ---------------------------------------------------------------- processes
    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=5) as r:
            return parse_metrics(r.read().decode())

    def cpu(self):
        return {name: spokebench.cpu_s(pid) for name, pid in
                (("agent", self.agent.pid), ("ganesha", self.ganesha_pid),
                 ("proxy", self.proxy.pid))}

    def setup(self):
        self.metrics_port = spokebench.free_port()
        # Every small file takes one 1 MiB slot of the block cache.
        # Each phase's volume is evicted and unmounted after it.
        cache_mib = 2 * (self.a.files + self.a.large_mib) + 1024
        self.start("socket: %s\ncacheDir: %s\ncacheSizeBytes: %dMi\nblockSizeBytes: 1Mi\n"
                   "stateDir: %s/state\nmountRoots: [%s]\nmetricsAddress: 127.0.0.1:%d\n"
                   "logLevel: info\nhub: {connections: %d, inflightPerConnection: %d}\n"
                   "fuseKeeperSocket: \"\"\n"  # no keeper (the default is a shared one)
                   % (self.sock, self.cache_dir, cache_mib, self.work, self.work, self.metrics_port,
                      self.a.connections, self.a.inflight),
                   ready=lambda: bool(self.metrics()))
        self.reader_bin = os.path.join(self.work, "reader")
        subprocess.run(["g++", "-O2", "-std=c++17", "-pthread", "-o", self.reader_bin,
                        os.path.join(ROOT, "bench/cache/reader.cc")], check=True)

    def cleanup(self):
        super().cleanup(unmount_timeout=120, stop_timeout=20)

    # ---------------------------------------------------------------- phases
    def dataset_bytes(self, ds):
        n = 0
        for d, _, fs in os.walk(os.path.join(self.export, ds)):
            n += sum(os.path.getsize(os.path.join(d, f)) for f in fs)
        return n

    def phase(self, ds, rep, kind, fn):
        cpu0, m0, t0 = self.cpu(), self.metrics(), time.monotonic()
        ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = fn()
        wall = time.monotonic() - t0
        cpu1, m1 = self.cpu(), self.metrics()
        ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        res.update(dataset=ds, rep=rep, kind=kind, wall_s=wall)
        res["cpu_s"] = {k: round(cpu1[k] - cpu0[k], 2) for k in cpu0
                        if cpu0[k] is not None and cpu1[k] is not None}
        # Processes this run waited for during the phase: the link bench, the readers,
        # spokectl (the agent, ganesha and the proxy are still running: not in it).
        res["cpu_s"]["client"] = round(ch1.ru_utime + ch1.ru_stime - ch0.ru_utime
                                       - ch0.ru_stime, 2)
        res["metrics"] = metric_deltas(m0, m1, (
            "spoke_hub_read_bytes_total", "spoke_cache_misses_total", "spoke_cache_hits_total"))
        res["mbps"] = res["bytes"] / res["seconds"] / 1e6
        res["files_per_s"] = res["files"] / res["seconds"]
        self.rows.append(res)
        log("%-6s rep %d %-8s %8.1f MB/s %7.0f files/s  %6.2f s  cpu %s" % (
            ds, rep, kind, res["mbps"], res["files_per_s"], res["seconds"],
            " ".join("%s=%.1f" % kv for kv in res["cpu_s"].items())))
        return res

    def link(self, ds):
        argv = [self.link_bin, self.url % ds, "--connections", str(self.a.connections),
                "--inflight-per-connection", str(self.a.inflight)]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = p.communicate(timeout=900)[0]
        if p.returncode != 0:
            raise RuntimeError("link bench: " + out)
        kv = dict(w.split("=", 1) for w in re.search(r"^RESULT (.*)$", out, re.M).group(1)
                  .split())
        return {"bytes": int(kv["bytes"]), "files": int(kv["files"]),
                "seconds": float(kv["total_s"]), "list_s": float(kv["list_s"]),
                "read_s": float(kv["read_s"]), "reads_by_handle": int(kv["reads_by_handle"]),
                "output": out}

    def make(self, name):
        """A fresh copy of dataset `name` ("small-..." or "large-..."): new file ids and a
        new volume, so nothing of it is cached or known to the agent."""
        t = time.monotonic()
        top = os.path.join(self.export, name)
        if name.startswith("small"):
            make_small(top, self.a.files, self.a.file_kb, self.a.per_dir)
        else:
            make_large(top, self.a.large_mib)
        os.sync()
        log("%s written in %.1f s" % (name, time.monotonic() - t))

    def drop(self, name):
        """Evicts and unmounts the phase's volume, removes its files from the hub."""
        target = os.path.join(self.work, "mnt-" + name)
        if target in self.mounts:
            self.ctl("evict", target)
            self.ctl("unmount", target)
            self.mounts.remove(target)
        shutil.rmtree(os.path.join(self.export, name), ignore_errors=True)

    def mount(self, ds, prefetch="auto"):
        target = os.path.join(self.work, "mnt-" + ds)
        os.makedirs(target, exist_ok=True)
        t = time.monotonic()
        self.ctl("mount", self.url % ds, target, "--mode", "dataset", "--read-only",
                 "--prefetch", prefetch)
        self.mounts.append(target)
        return target, time.monotonic() - t

    def hub_bytes(self):
        return metric_sum(self.metrics(), "spoke_hub_read_bytes_total")

    dataset_bytes_of = {}

    def auto_fill(self, ds):
        """Mount only: the agent's walk and prefetcher fill the cache by themselves (what
        the two-region demo's cold epoch rides on). Timed from the mount's return until the
        hub bytes reach the dataset's, or until they stop growing for --stall-s."""
        want = self.dataset_bytes(ds)
        self.dataset_bytes_of["small"] = want
        b0 = self.hub_bytes()
        target, mount_s = self.mount(ds)
        t = last_t = time.monotonic()
        got = last = 0
        while got < want and time.monotonic() - last_t < self.a.stall_s:
            time.sleep(0.02)
            got = self.hub_bytes() - b0
            if got > last:
                last, last_t = got, time.monotonic()
        secs = last_t - t
        stats = self.ctl("stats", target)
        return {"bytes": got, "files": self.count(ds) * got / want, "seconds": secs,
                "mount_s": mount_s, "complete": got >= want, "stats": stats}

    def warmup(self, ds, prefetch, perf=False):
        """`spokectl warmup` right after the mount, timed from the warmup call."""
        target, mount_s = self.mount(ds, prefetch)
        perf_p = None
        if perf and shutil.which("perf"):
            perf_p = subprocess.Popen(
                ["perf", "record", "-g", "-F", "999", "-p", str(self.agent.pid), "-o",
                 os.path.join(self.work, "perf.data")],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.work, "perf.log"), "w"))
            time.sleep(0.3)
        want, b0 = self.dataset_bytes(ds), self.hub_bytes()
        samples = []  # (s since the warmup call, hub bytes of this phase, requests out, window)
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                m = self.metrics()
                samples.append((time.monotonic() - t,
                                metric_sum(m, "spoke_hub_read_bytes_total") - b0,
                                metric_sum(m, "spoke_hub_requests_in_flight"),
                                metric_sum(m, "spoke_fetch_background_window_bytes")))
                stop.wait(0.02)

        t = time.monotonic()
        sampler = threading.Thread(target=sample)
        sampler.start()
        self.ctl("warmup", target)
        secs = time.monotonic() - t
        stop.set()
        sampler.join()
        if perf_p is not None:
            perf_p.send_signal(signal.SIGINT)
            perf_p.wait(timeout=60)
        stats = self.ctl("stats", target)
        return {"bytes": self.dataset_bytes(ds), "files": self.count(ds), "seconds": secs,
                "mount_s": mount_s, "stats": stats, "timeline": timeline(samples, want, secs)}

    def readers(self, ds):
        """--readers threads read every file through the mount, right after the mount."""
        lst = os.path.join(self.work, "list-" + ds)
        target = os.path.join(self.work, "mnt-" + ds)
        with open(lst, "w") as f:
            for d, _, fs in sorted(os.walk(os.path.join(self.export, ds))):
                rel = os.path.relpath(d, os.path.join(self.export, ds))
                for name in sorted(fs):
                    f.write(os.path.join(target, rel, name) + "\n")
        target, mount_s = self.mount(ds)
        t = time.monotonic()
        out = subprocess.run([self.reader_bin, str(self.a.readers), str(1 << 20), lst],
                             capture_output=True, text=True, timeout=900)
        secs = time.monotonic() - t
        if out.returncode != 0:
            raise RuntimeError("reader: " + out.stdout + out.stderr)
        kv = dict(w.split("=", 1) for w in out.stdout.split())
        stats = self.ctl("stats", target)
        return {"bytes": int(kv["bytes"]), "files": int(kv["files"]), "seconds": secs,
                "mount_s": mount_s, "stats": stats}

    def count(self, ds):
        return sum(len(fs) for _, _, fs in os.walk(os.path.join(self.export, ds)))

    # ---------------------------------------------------------------- run
    def run(self):
        perf_pending = self.a.perf
        for rep in range(1, self.a.reps + 1):
            for kind in ("small", "large") if self.a.large_mib > 0 else ("small",):
                # The link and the warm-up read the same copy; the order alternates.
                ds = "%s-r%d" % (kind, rep)
                self.make(ds)
                order = ["link", "warmup"] if rep % 2 else ["warmup", "link"]
                for ph in order:
                    if ph == "link":
                        self.phase(kind, rep, "link", lambda: self.link(ds))
                    else:
                        perf = perf_pending and kind == "small"
                        perf_pending = perf_pending and not perf
                        self.phase(kind, rep, "warmup", lambda: self.warmup(ds, "auto", perf))
                self.drop(ds)
                if kind != "small":
                    continue
                for ph in self.a.spoke_phases:
                    name = "%s-r%d-%s" % (kind, rep, ph)
                    self.make(name)
                    if ph == "auto":
                        self.phase(kind, rep, "auto-fill", lambda: self.auto_fill(name))
                    elif ph == "warmup-noprefetch":
                        self.phase(kind, rep, "warmup (prefetch off)",
                                   lambda: self.warmup(name, "off"))
                    elif ph == "readers" and self.a.readers > 0:
                        self.phase(kind, rep, "%d readers" % self.a.readers,
                                   lambda: self.readers(name))
                    self.drop(name)
        if self.a.perf and os.path.exists(os.path.join(self.work, "perf.data")):
            r = subprocess.run(["perf", "report", "-i", os.path.join(self.work, "perf.data"),
                                "--no-children", "--stdio", "--sort", "comm,dso,sym",
                                "--percent-limit", "1", "-g", "none"],
                               capture_output=True, text=True, timeout=300)
            self.perf_report = r.stdout
        else:
            self.perf_report = ""

    def report(self):
        os.makedirs(self.out, exist_ok=True)
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        loadavg = open("/proc/loadavg").read().split()[:3]
        lines = ["# Cold fill against the link (%s, commit %s)" % (
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit), "",
            "`%s`" % " ".join(["bench/cold-fill/cold_fill.py"] + sys.argv[1:]), "",
            "%d x %d KB files in directories of %d%s; %d ms RTT%s; %d connections x %d in "
            "flight; %d cores, load average at the end %s." % (
                self.a.files, self.a.file_kb, self.a.per_dir,
                ", one %d MiB file" % self.a.large_mib if self.a.large_mib else "",
                2 * self.a.delay_ms,
                ", link capped at %g MB/s" % self.a.link_mbytes if self.a.link_mbytes else "",
                self.a.connections, self.a.inflight, os.cpu_count(),
                " ".join(loadavg)), "",
            "| dataset | rep | phase | MB/s | files/s | s | vs link (same rep) | CPU s agent / ganesha / proxy / client |",
            "|---|---:|---|---:|---:|---:|---:|---|"]
        link = {(r["dataset"], r["rep"]): r for r in self.rows if r["kind"] == "link"}
        for r in self.rows:
            l = link.get((r["dataset"], r["rep"]))
            ratio = "" if r["kind"] == "link" or not l else "%.2fx" % (r["mbps"] / l["mbps"])
            c = r["cpu_s"]
            extra = ""
            if r["kind"] == "link":
                extra = " (list %.2f s + read %.2f s)" % (r["list_s"], r["read_s"])
            elif r.get("timeline", {}).get("all_s") is not None:
                tl = r["timeline"]
                extra = (" (hub: first byte %.2f s, half %.2f s, all %.2f s, %s in flight; "
                         "tail %.2f s)" % (tl["first_byte_s"], tl["half_s"], tl["all_s"],
                                           tl["hub_inflight_mean"], tl["tail_s"]))
            elif r.get("complete") is False:
                extra = " (stopped at %.0f %% of the dataset)" % (
                    100 * r["bytes"] / self.dataset_bytes_of[r["dataset"]])
            lines.append("| %s | %d | %s%s | %.1f | %.0f | %.2f | %s | %s / %s / %s / %s |" % (
                r["dataset"], r["rep"], r["kind"], extra, r["mbps"], r["files_per_s"],
                r["seconds"], ratio, c.get("agent", "-"), c.get("ganesha", "-"),
                c.get("proxy", "-"), c.get("client", "-")))
        if self.perf_report:
            lines += ["", "perf (agent, first small-file warm-up):", "", "```",
                      *[l for l in self.perf_report.splitlines()
                        if l.strip() and not l.startswith("#")][:40], "```"]
        text = "\n".join(lines) + "\n"
        with open(os.path.join(self.out, "results.md"), "w") as f:
            f.write(text)
        with open(os.path.join(self.out, "results.json"), "w") as f:
            json.dump({"args": vars(self.a), "commit": commit, "rows": self.rows}, f, indent=1)
        print("\n" + text)
        log("results in " + self.out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build/dev"))
    p.add_argument("--files", type=int, default=4000)
    p.add_argument("--file-kb", type=int, default=110)
    p.add_argument("--per-dir", type=int, default=500)
    p.add_argument("--large-mib", type=int, default=1024, help="0: no large-file row")
    p.add_argument("--delay-ms", type=int, default=30, help="one way")
    p.add_argument("--link-mbytes", type=float, default=0,
                   help="the WAN link's bandwidth, MB/s each way (default 0: no cap)")
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--inflight", type=int, default=128, help="per connection")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--readers", type=int, default=64, help="0: no readers phase")
    p.add_argument("--perf", action="store_true")
    p.add_argument("--phases", default="auto,warmup-noprefetch,readers",
                   help="Spoke phases on small files besides the warm-up, each on a fresh "
                        "copy: auto (mount only, the prefetcher fills), warmup-noprefetch, "
                        "readers")
    p.add_argument("--stall-s", type=float, default=5.0,
                   help="auto fill: ends when the hub bytes stop growing this long")
    p.add_argument("--out")
    p.add_argument("--keep-workdir", action="store_true")
    p.add_argument("--cache-dir", help="where the agent's cacheDir goes (default: the work "
                    "directory under /var/tmp); /dev/shm leaves the cache disk's write rate out")
    a = p.parse_args()
    a.spoke_phases = [x for x in a.phases.split(",") if x]
    if a.files < 1 or a.file_kb < 1 or a.per_dir < 1 or a.reps < 1 or a.large_mib < 0:
        p.error("--files, --file-kb, --per-dir, --reps must be positive")
    if a.link_mbytes < 0:
        p.error("--link-mbytes must be 0 (no cap) or positive")
    if os.geteuid() != 0 or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        print("cold_fill: needs root and /dev/fuse", file=sys.stderr)
        return 77
    b = Bench(a)
    try:
        b.setup()
        b.run()
        b.report()
        return 0
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError) as e:
        print("cold_fill: FAIL: %s" % e, file=sys.stderr)
        return 1
    finally:
        b.cleanup()


if __name__ == "__main__":
    sys.exit(main())
