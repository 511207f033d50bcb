#!/usr/bin/env python3
"""Writes against the link: a big sequential write and a checkpoint save through a Spoke
scratch mount over the WAN proxy, with writeMode writeback, unstable and sync, next to what
the same link carries for reads, in one run on one hub and proxy.

  write_bench.py [--build-dir build/dev] [--size-mib 2048] [--ckpt-mib 1024] [--delay-ms 30]
                 [--modes writeback,unstable,sync] [--no-wan] [--write-back-bytes SIZE]
                 [--out DIR] [--keep-workdir]

Phases, each on a fresh volume directory:
  link-read   spoke-remote-link-bench reads a --size-mib file through the proxy with the
              agent's connections and depth (no FUSE, no cache): what the link carries
  dd          `dd if=/dev/zero of=MNT/dd.bin bs=1M count=SIZE`, timed to its exit (its close
              included: close returns once the hub has every byte)
  close       the same write from Python: seconds in write() and seconds in close()
  checkpoint  torch.save of a state dict of --ckpt-mib (float32 tensors of 64 MiB at most),
              then close; without torch (python3-torch), the same bytes written as
              pickle-framed raw arrays of the same shape, and the table says so (the
              interpreter running this script is the one used: Debian's python3-torch is
              on /usr/bin/python3)
  hub-disk    the same dd straight into the hub's export directory on this machine, with
              conv=fsync (no NFS, no FUSE): what the hub's disk takes
With --no-wan, each mode's phases run again on a mount that reaches the hub directly (no
proxy): what the hub itself takes on this machine, so that a WAN figure below the link read
can be told apart from a hub that writes no faster (its disk).
Prints a table and writes results.md to --out (default bench/write/results/<UTC time>).
Needs root and /dev/fuse.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "common"))
import spokebench  # noqa: E402

CKPT_SCRIPT = r"""
import os, sys, time
path, mib = sys.argv[1], int(sys.argv[2])
try:
    import torch
    kind = "torch.save"
except ImportError:
    torch = None
    kind = "pickle of raw arrays (no torch)"
tensors, left, i = {}, mib << 20, 0
while left > 0:
    n = min(left, 64 << 20)
    if torch is not None:
        tensors["layer%d.weight" % i] = torch.rand(n // 4)
    else:
        tensors["layer%d.weight" % i] = os.urandom(n)
    left -= n
    i += 1
t0 = time.monotonic()
f = open(path, "wb")
if torch is not None:
    torch.save(tensors, f)
else:
    import pickle
    pickle.dump(tensors, f, protocol=5)
t1 = time.monotonic()
f.close()
t2 = time.monotonic()
print("RESULT kind=%s bytes=%d write_s=%.3f close_s=%.3f" % (
    kind.replace(" ", "_"), os.path.getsize(path), t1 - t0, t2 - t1))
"""

CLOSE_SCRIPT = r"""
import os, sys, time
path, mib = sys.argv[1], int(sys.argv[2])
buf = b"\0" * (1 << 20)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
t0 = time.monotonic()
for _ in range(mib):
    os.write(fd, buf)
t1 = time.monotonic()
os.close(fd)
t2 = time.monotonic()
print("RESULT bytes=%d write_s=%.3f close_s=%.3f" % (mib << 20, t1 - t0, t2 - t1))
"""


def log(msg):
    print(time.strftime("%H:%M:%S ") + msg, flush=True)


def result(out):
    m = re.search(r"^RESULT (.*)$", out, re.M)
    if not m:
        raise RuntimeError("no RESULT line in:\n" + out)
    return dict(w.split("=", 1) for w in m.group(1).split())


class Bench(spokebench.AgentRig):
    def __init__(self, a):
        super().__init__(a.build_dir, "spoke-write-bench-", a.delay_ms, a.keep_workdir)
        self.a = a
        self.rows = []
        self.out = os.path.abspath(a.out or os.path.join(
            HERE, "results", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())))

    def setup(self):
        self.start("socket: %s\ncacheDir: %s/cache\ncacheSizeBytes: 4Gi\n"
                   "stateDir: %s/state\nmountRoots: [%s]\nmetricsAddress: \"\"\n"
                   "logLevel: info\nhub: {connections: 4, inflightPerConnection: 128}\n"
                   "fuseKeeperSocket: \"\"\n%s" % (
                       self.sock, self.work, self.work, self.work,
                       "writeBackBytesPerVolume: %s\n" % self.a.write_back_bytes
                       if self.a.write_back_bytes else ""))

    def row(self, phase, mode, nbytes, seconds, close_s=None, note=""):
        mbps = nbytes / seconds / 1e6
        self.rows.append(dict(phase=phase, mode=mode, bytes=nbytes, seconds=seconds,
                              mbps=mbps, close_s=close_s, note=note))
        log("%-10s %-9s %8.1f MB/s %8.2f s%s %s" % (
            phase, mode, mbps, seconds, "" if close_s is None else "  close %.2f s" % close_s,
            note))

    def link_read(self):
        top = os.path.join(self.export, "link")
        os.makedirs(top)
        with open(os.path.join(top, "big.bin"), "wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(self.a.size_mib):
                f.write(chunk)
        os.sync()
        out = subprocess.run([self.link_bin, self.url % "link", "--connections", "4",
                              "--inflight-per-connection", "128"], capture_output=True,
                             text=True, timeout=1800, check=True).stdout
        kv = result(out)
        self.row("link-read", "-", int(kv["bytes"]), float(kv["read_s"]))
        shutil.rmtree(top)

    def hub_disk(self):
        path = os.path.join(self.export, "disk.bin")
        t0 = time.monotonic()
        subprocess.run(["dd", "if=/dev/zero", "of=" + path, "bs=1M", "count=%d" % self.a.size_mib,
                        "conv=fsync"], check=True, capture_output=True)
        self.row("hub-disk", "-", self.a.size_mib << 20, time.monotonic() - t0)
        os.unlink(path)

    def mount(self, name, mode, url):
        os.makedirs(os.path.join(self.export, name))
        target = os.path.join(self.work, "mnt-" + name)
        os.makedirs(target)
        self.ctl("mount", url % name, target, "--mode", "scratch", "--write-mode", mode,
                 "--allow-root")
        self.mounts.append(target)
        return target

    def writes(self, mode, wan=True):
        mnt = self.mount("w-" + mode + ("" if wan else "-lan"), mode,
                         self.url if wan else self.lan_url)
        mode = mode if wan else mode + " (no WAN)"
        t0 = time.monotonic()
        subprocess.run(["dd", "if=/dev/zero", "of=" + os.path.join(mnt, "dd.bin"), "bs=1M",
                        "count=%d" % self.a.size_mib], check=True, capture_output=True)
        self.row("dd", mode, self.a.size_mib << 20, time.monotonic() - t0)
        os.unlink(os.path.join(mnt, "dd.bin"))
        out = subprocess.run([sys.executable, "-c", CLOSE_SCRIPT, os.path.join(mnt, "c.bin"),
                              str(self.a.size_mib)], capture_output=True, text=True,
                             check=True).stdout
        kv = result(out)
        w, c = float(kv["write_s"]), float(kv["close_s"])
        self.row("close", mode, int(kv["bytes"]), w + c, close_s=c)
        os.unlink(os.path.join(mnt, "c.bin"))
        if self.a.ckpt_mib > 0:
            out = subprocess.run([sys.executable, "-c", CKPT_SCRIPT,
                                  os.path.join(mnt, "ckpt.pt"), str(self.a.ckpt_mib)],
                                 capture_output=True, text=True, check=True).stdout
            kv = result(out)
            w, c = float(kv["write_s"]), float(kv["close_s"])
            self.row("checkpoint", mode, int(kv["bytes"]), w + c, close_s=c,
                     note=kv["kind"].replace("_", " "))

    def report(self):
        os.makedirs(self.out, exist_ok=True)
        link = next((r["mbps"] for r in self.rows if r["phase"] == "link-read"), None)
        lan = {(r["phase"], r["mode"]): r["mbps"] for r in self.rows}
        lines = ["| phase | writeMode | MB | s | MB/s | vs link read | vs no WAN | close() s "
                 "| note |",
                 "|---|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in self.rows:
            base = lan.get((r["phase"], r["mode"] + " (no WAN)"))
            lines.append("| %s | %s | %.0f | %.2f | %.1f | %s | %s | %s | %s |" % (
                r["phase"], r["mode"], r["bytes"] / 1e6, r["seconds"], r["mbps"],
                "%.2fx" % (r["mbps"] / link) if link else "n/a",
                "%.2fx" % (r["mbps"] / base) if base else "",
                "" if r["close_s"] is None else "%.2f" % r["close_s"], r["note"]))
        text = "\n".join(lines) + "\n"
        with open(os.path.join(self.out, "results.md"), "w") as f:
            f.write(text)
        print(text)

    def run(self):
        self.setup()
        self.link_read()
        self.hub_disk()
        for mode in self.a.modes.split(","):
            self.writes(mode)
            if self.a.no_wan:
                self.writes(mode, wan=False)
        self.report()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build/dev"))
    p.add_argument("--size-mib", type=int, default=2048)
    p.add_argument("--ckpt-mib", type=int, default=1024)
    p.add_argument("--delay-ms", type=int, default=30)
    p.add_argument("--modes", default="writeback,unstable,sync")
    p.add_argument("--no-wan", action="store_true",
                   help="also each mode on a mount that reaches the hub without the proxy")
    p.add_argument("--write-back-bytes",
                   help="the agent's writeBackBytesPerVolume (e.g. 64Mi); default: derived")
    p.add_argument("--out")
    p.add_argument("--keep-workdir", action="store_true")
    a = p.parse_args()
    b = Bench(a)
    try:
        b.run()
    finally:
        b.cleanup()


if __name__ == "__main__":
    main()
