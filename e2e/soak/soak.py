#!/usr/bin/env python3
"""Spoke fault soak: readers and writers on real FUSE mounts while faults are injected.

  soak.py [--build-dir DIR] [--duration 120] [--seed N] [--strict-agent-restart]
          [--faults KIND,...] [--exclude-faults KIND,...] [--keep-workdir] ...

Starts its own nfs-ganesha hub, spoke-wan-proxy (30 ms each way) with a fault-control socket
and spoke-cache-agent, mounts a read-only dataset volume and a scratch volume with spokectl,
then runs readers (every byte checked against a manifest of allowed file versions), writers
(checksummed records, fsync after each, acknowledged ones remembered) and a fault driver.
At the end it checks the invariants (see README.md) and exits 1 on any violation, 77 when it
cannot run here (not root, no /dev/fuse, binaries not built), 0 otherwise.
"""
import argparse
import collections
import dataclasses
import errno
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zlib

FAULT_KINDS = ["latency", "bandwidth", "reset", "blackhole", "hub-restart", "hub-replace",
               "hub-truncate", "hub-rename", "cache-flip", "agent-kill"]
# Faults during which the hub may legitimately be unreachable (or too slow to answer in time).
HUB_FAULTS = {"latency", "bandwidth", "reset", "blackhole", "hub-restart"}
RECORD_MAGIC = b"SPKR"
RECORD_HEADER = struct.Struct("<4sIQ")  # magic, payload length, sequence number
RECORD_TRAILER = struct.Struct("<I")    # crc32 of header + payload


def log(msg):
    print("[%7.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


T0 = time.monotonic()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------
# What happened: faults (intervals), errors, calls' durations, violations.

@dataclasses.dataclass
class Fault:
    kind: str
    start: float
    end: float = float("inf")
    detail: str = ""


class Ledger:
    """Thread-safe record of faults, per-path versions and outcomes."""

    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.faults = []
        self.versions = {}        # dataset path -> list of allowed contents (bytes)
        self.version_sha = {}     # dataset path -> set of sha256 hex
        self.changed_at = {}      # dataset path -> time of the last hub change
        self.verified_at = {}     # dataset path -> time of the last full verified read
        self.last_flip = -1.0
        self.errors = []          # (cause, op, path, errno, start, end)
        self.violations = []
        self.bytes_verified = 0
        self.reads_ok = 0
        self.records_acked = 0
        self.hidden_records = 0
        self.checksum_failures = None
        self.longest = (0.0, "")
        self.inflight = {}        # thread id -> (op, path, start)

    def add_violation(self, msg):
        with self.lock:
            self.violations.append(msg)
        log("VIOLATION: " + msg)

    def begin_fault(self, kind, detail=""):
        f = Fault(kind, time.monotonic(), detail=detail)
        with self.lock:
            self.faults.append(f)
        log("fault %-12s %s" % (kind, detail))
        return f

    def end_fault(self, f):
        with self.lock:
            f.end = time.monotonic()

    def add_version(self, path, data):
        with self.lock:
            self.versions.setdefault(path, []).append(data)
            self.version_sha.setdefault(path, set()).add(hashlib.sha256(data).hexdigest())
            self.changed_at[path] = time.monotonic()

    def allowed(self, path):
        with self.lock:
            return list(self.versions[path]), set(self.version_sha[path])

    def timed(self, op, path, fn, *a):
        """Runs one read/write call, recording its duration."""
        tid = threading.get_ident()
        start = time.monotonic()
        with self.lock:
            self.inflight[tid] = (op, path, start)
        try:
            return fn(*a)
        finally:
            d = time.monotonic() - start
            with self.lock:
                del self.inflight[tid]
                if d > self.longest[0]:
                    self.longest = (d, "%s %s" % (op, path))
            if d > self.args.request_bound:
                self.add_violation("%s %s took %.1f s (bound %.1f s)"
                                   % (op, path, d, self.args.request_bound))

    def classify(self, op, path, err, start, end, cached_since=None):
        """Names the cause of an error from the faults active around [start, end]."""
        grace = self.args.request_bound
        with self.lock:
            active = [f for f in self.faults if f.start <= end and f.end + grace >= start]
            changed = self.changed_at.get(path, float("inf")) <= end
        kinds = {f.kind for f in active}
        # A file replaced under an immutable volume breaks the volume's contract: an error on
        # it is a fair answer (never a mix of versions), whatever else happened around it.
        # A hub fault explains an error that needs the hub whether or not the agent was also
        # restarted around it (a restart that mounts survive causes none by itself).
        if changed:
            cause = "hub-changed"
        elif kinds & HUB_FAULTS:
            hub = sorted(kinds & HUB_FAULTS)[0]
            cached = (cached_since is not None and
                      all(f.start > cached_since for f in active if f.kind in HUB_FAULTS))
            cause = ("cached-read-failed:" if cached else "hub-unreachable:") + hub
        elif "agent-kill" in kinds:
            cause = "agent-restart"
        elif "cache-flip" in kinds:
            cause = "cache-flip"
        else:
            cause = "no-fault"
        with self.lock:
            self.errors.append((cause, op, path, err, start, end))
        expected = cause.startswith("hub-unreachable") or cause == "hub-changed" or (
            cause == "agent-restart" and not self.args.strict_agent_restart)
        if cause.startswith("cached-read-failed") and self.args.allow_cached_read_errors:
            expected = True
        if not expected:
            self.add_violation("%s %s failed (%s) with cause %s (faults around it: %s)"
                               % (op, path, os.strerror(err) if err else "?", cause,
                                  ",".join(sorted(kinds)) or "none"))
        return cause


# ------------------------------------------------------------------------------------------
# Processes: hub, proxy, agent.

class Cluster:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        b = args.build_dir
        self.agent_bin = os.path.join(b, "cache-agent/agent/spoke-cache-agent")
        self.ctl_bin = os.path.join(b, "cache-agent/cli/spokectl")
        self.proxy_bin = os.path.join(b, "e2e/wan-proxy/spoke-wan-proxy")
        self.keeper_bin = os.path.join(b, "cache-agent/keeper/spoke-fuse-keeper")
        self.hub_script = os.path.join(args.source_dir, "scripts/spoke-hub")
        self.hub_dir = os.path.join(work, "hub")
        self.export = os.path.join(self.hub_dir, "export")
        self.agent_dir = os.path.join(work, "agent")
        self.cache_dir = os.path.join(self.agent_dir, "cache")
        self.socket = os.path.join(self.agent_dir, "agent.sock")
        self.keeper_socket = os.path.join(work, "keeper.sock") if not args.no_keeper else ""
        self.keeper = None
        self.control = os.path.join(work, "proxy-control.sock")
        self.ds_mnt = os.path.join(work, "mnt/dataset")
        self.sc_mnt = os.path.join(work, "mnt/scratch")
        self.agent = None
        self.proxy = None
        self.agent_lock = threading.Lock()
        self.agent_restarts = 0
        self.rss_max_kb = 0

    def missing(self):
        return [p for p in (self.agent_bin, self.ctl_bin, self.proxy_bin, self.hub_script,
                            self.keeper_bin) if not os.access(p, os.X_OK)]

    def start_keeper(self):
        """The keeper holds each mount's /dev/fuse fd, as the chart's does: a killed agent's
        successor takes the connections over and the mounts never go away."""
        if not self.keeper_socket:
            return
        self.keeper = subprocess.Popen(
            [self.keeper_bin, "--socket", self.keeper_socket],
            stdout=open(os.path.join(self.work, "keeper.log"), "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.keeper_socket):
            if time.monotonic() > deadline or self.keeper.poll() is not None:
                raise RuntimeError("spoke-fuse-keeper did not start")
            time.sleep(0.05)

    def start_hub(self):
        out = subprocess.run([self.hub_script, "start", self.hub_dir] + self.hub_ports,
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError("spoke-hub start failed: " + out.stderr.strip())
        kv = dict(w.split("=", 1) for w in out.stdout.split())
        self.hub_ports = [kv["NFS_PORT"], kv["MOUNT_PORT"]]

    def stop_hub(self):
        subprocess.run([self.hub_script, "stop", self.hub_dir], capture_output=True, timeout=60)

    def start_proxy(self):
        self.wan_nfs, self.wan_mnt = free_port(), free_port()
        self.proxy = subprocess.Popen(
            [self.proxy_bin, "--delay-ms", str(self.args.delay_ms),
             "--route", "127.0.0.1:%d=127.0.0.1:%s" % (self.wan_nfs, self.hub_ports[0]),
             "--route", "127.0.0.1:%d=127.0.0.1:%s" % (self.wan_mnt, self.hub_ports[1]),
             "--control-socket", self.control],
            stdout=open(os.path.join(self.work, "proxy.log"), "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.control):
            if time.monotonic() > deadline or self.proxy.poll() is not None:
                raise RuntimeError("spoke-wan-proxy did not start")
            time.sleep(0.05)

    def proxy_ctl(self, line):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(self.control)
            s.sendall(line.encode() + b"\n")
            reply = s.recv(4096).decode().strip()
        if not reply.startswith("ok"):
            raise RuntimeError("proxy control '%s': %s" % (line, reply))
        return reply

    def write_agent_config(self):
        os.makedirs(self.agent_dir, exist_ok=True)
        self.metrics_port = free_port()
        with open(os.path.join(self.agent_dir, "agent.yaml"), "w") as f:
            f.write("socket: %s\ncacheDir: %s\ncacheSizeBytes: 1Gi\nstateDir: %s/state\n"
                    "mountRoots: [%s]\n"
                    "metricsAddress: 127.0.0.1:%d\nlogLevel: info\n"
                    "hub: {connections: 4, inflightPerConnection: 16, "
                    "requestTimeoutSeconds: %d}\n"
                    "fuseKeeperSocket: \"%s\"\n"
                    % (self.socket, self.cache_dir, self.agent_dir, self.work, self.metrics_port,
                       self.args.hub_timeout, self.keeper_socket))

    def start_agent(self, timeout=30):
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        logf = open(os.path.join(self.agent_dir, "agent.log"), "a")
        self.agent = subprocess.Popen(
            [self.agent_bin, "--config", os.path.join(self.agent_dir, "agent.yaml")],
            stdout=logf, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.agent.poll() is not None:
                raise RuntimeError("spoke-cache-agent exited with %s" % self.agent.returncode)
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % self.metrics_port,
                                            timeout=2) as r:
                    if r.status == 200 and os.path.exists(self.socket):
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("spoke-cache-agent did not become healthy in %d s" % timeout)

    def spokectl(self, *a, timeout=60):
        return subprocess.run([self.ctl_bin, "--socket", self.socket] + list(a),
                              capture_output=True, text=True, timeout=timeout)

    def url(self, sub):
        return "nfs://127.0.0.1%s/%s?nfsport=%d&mountport=%d" % (
            self.export, sub, self.wan_nfs, self.wan_mnt)

    def mount(self):
        for sub, mnt, extra in (
                ("dataset", self.ds_mnt, ["--mode", "dataset", "--consistency", "immutable",
                                          "--read-only"]),
                ("scratch", self.sc_mnt, ["--mode", "scratch"])):
            os.makedirs(mnt, exist_ok=True)
            r = self.spokectl("mount", self.url(sub), mnt, "--hub-timeout",
                              str(self.args.hub_timeout), *extra)
            if r.returncode != 0:
                raise RuntimeError("spokectl mount %s: %s%s" % (sub, r.stdout, r.stderr))

    def wait_mounts_restored(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.spokectl("status", timeout=10)
            if r.returncode == 0 and self.ds_mnt in r.stdout and self.sc_mnt in r.stdout:
                try:
                    os.stat(self.ds_mnt)
                    os.stat(self.sc_mnt)
                    return True
                except OSError:
                    pass
            time.sleep(0.2)
        return False

    def metric(self, name):
        """Sum of a metric's series in the agent's /metrics; None when unavailable."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                        timeout=5) as r:
                body = r.read().decode()
        except OSError:
            return None
        vals = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
                if line.startswith(name + " ") or line.startswith(name + "{")]
        return sum(vals) if vals else None

    def kill_agent(self, timeout=30):
        """SIGKILL; returns None once the process is gone, or a description of why it is not
        after `timeout` (threads stuck in the kernel: the successor is started anyway, its
        takeover may release them). Never waits forever."""
        with self.agent_lock:
            self.agent.send_signal(signal.SIGKILL)
            try:
                self.agent.wait(timeout=timeout)
                return None
            except subprocess.TimeoutExpired:
                stuck = []
                for t in sorted(os.listdir("/proc/%d/task" % self.agent.pid)):
                    try:
                        with open("/proc/%d/task/%s/wchan" % (self.agent.pid, t)) as f:
                            stuck.append(f.read().strip() or "?")
                    except OSError:
                        pass
                return "pid %d still alive %d s after SIGKILL (threads waiting in: %s)" % (
                    self.agent.pid, timeout, ", ".join(sorted(set(stuck))))

    def restart_agent(self):
        with self.agent_lock:
            self.start_agent()
            self.agent_restarts += 1

    def sample_rss(self):
        try:
            with open("/proc/%d/status" % self.agent.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        kb = int(line.split()[1])
                        self.rss_max_kb = max(self.rss_max_kb, kb)
                        return kb
        except OSError:
            return None

    def stop_all(self):
        for mnt in (self.ds_mnt, self.sc_mnt):
            if self.agent and self.agent.poll() is None:
                try:
                    self.spokectl("unmount", mnt, timeout=30)
                except subprocess.TimeoutExpired:
                    pass
        for p in (self.agent, self.proxy, self.keeper):
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for mnt in (self.ds_mnt, self.sc_mnt):
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        self.stop_hub()


# ------------------------------------------------------------------------------------------
# Dataset, readers, writers.

def make_dataset(cluster, ledger, rng, files, max_kb):
    root = os.path.join(cluster.export, "dataset")
    os.makedirs(root)
    os.makedirs(os.path.join(cluster.export, "scratch"))
    # Without allowRoot the hub sees the writers (root here) as hubUid 65534: like a real
    # scratch share, the directory is writable by everyone, sticky.
    os.chmod(os.path.join(cluster.export, "scratch"), 0o1777)
    names = []
    for i in range(files):
        # A few small files, many around a block, some several blocks long.
        size = rng.choice([rng.randint(0, 4096), rng.randint(4096, 1 << 20),
                           rng.randint(1 << 20, max_kb << 10)])
        name = "d%d/f%04d.bin" % (i % 4, i)
        if i % 4 == 3:  # partly cached: only ever read by pread, several blocks long
            name = "d3/p%04d.bin" % i
            size = rng.randint(2 << 20, max(2 << 20, max_kb << 10))
        data = rng.randbytes(size)
        os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        ledger.add_version(name, data)
        names.append(name)
    with ledger.lock:
        ledger.changed_at.clear()
    return names


def reader(cluster, ledger, names, stop, rng):
    chunk = 128 << 10
    while not stop.is_set():
        name = rng.choice(names)
        path = os.path.join(cluster.ds_mnt, name)
        start = time.monotonic()
        with ledger.lock:
            cached_since = ledger.verified_at.get(name)
            if cached_since is not None and (ledger.changed_at.get(name, -1) > cached_since or
                                             ledger.last_flip > cached_since):
                cached_since = None
        op = "open"
        try:
            fd = ledger.timed("open", name, os.open, path, os.O_RDONLY)
            try:
                if rng.random() < 0.5 and not is_partial(name):
                    op = "read"
                    parts = []
                    while True:
                        b = ledger.timed("read", name, os.read, fd, chunk)
                        if not b:
                            break
                        parts.append(b)
                    data = b"".join(parts)
                    _, shas = ledger.allowed(name)
                    if hashlib.sha256(data).hexdigest() not in shas:
                        versions, _ = ledger.allowed(name)
                        ledger.add_violation(
                            "wrong bytes: %s read whole: %d bytes match none of its %d versions "
                            "(sizes %s; first difference from the latest at offset %s; by "
                            "block: %s)"
                            % (name, len(data), len(versions), [len(v) for v in versions],
                               first_diff(data, versions[-1]), describe_mix(data, 0, versions)))
                    else:
                        with ledger.lock:
                            ledger.bytes_verified += len(data)
                            ledger.reads_ok += 1
                            ledger.verified_at[name] = start
                else:
                    op = "pread"
                    versions, _ = ledger.allowed(name)
                    top = max(len(v) for v in versions) or 1
                    for _ in range(4):
                        off = rng.randrange(0, top + 1)
                        n = rng.randint(1, 256 << 10)
                        b = ledger.timed("pread", name, os.pread, fd, n, off)
                        versions, _ = ledger.allowed(name)
                        match = any(v[off:off + n] == b for v in versions)
                        err = None if match else error_after_short_read(
                            ledger, fd, name, b, off, versions)
                        if err is not None:
                            # Right bytes, then an error: the kernel returns what it copied
                            # before the error (page cache) as a short read; the error itself
                            # is classified (below).
                            raise err
                        if not match:
                            ledger.add_violation(
                                "wrong bytes: %s pread(%d bytes at %d) returned %d bytes that "
                                "match none of its %d versions (sizes %s; by block: %s)"
                                % (name, n, off, len(b), len(versions),
                                   [len(v) for v in versions], describe_mix(b, off, versions)))
                        else:
                            with ledger.lock:
                                ledger.bytes_verified += len(b)
                                ledger.reads_ok += 1
            finally:
                os.close(fd)
        except OSError as e:
            ledger.classify(op, name, e.errno, start, time.monotonic(), cached_since)
        # Leave CPU to the agent (checksumming warm reads would otherwise take both cores).
        time.sleep(rng.uniform(0.01, 0.05))


def error_after_short_read(ledger, fd, name, b, off, versions):
    """The error that ended a short read of right bytes: `b`, read at `off`, matches a version
    that has more there, and reading on from its end fails. None otherwise; a short read at a
    false end of file (the next read returns nothing) stays wrong bytes."""
    if not b or not any(v[off:off + len(b)] == b and len(v) > off + len(b) for v in versions):
        return None
    try:
        ledger.timed("pread", name, os.pread, fd, 1, off + len(b))
    except OSError as e:
        return e
    return None


def is_partial(name):
    """Files only read at random offsets: some of their blocks are cached, others not, so a
    change on the hub can show up as a mix of old and new blocks."""
    return name.startswith("d3/p")


def describe_mix(data, off, versions, block=1 << 20):
    """Which version each 1 MiB-aligned piece of data (read at off) matches: e.g. 'v0 v1' is
    old bytes in the first block and new ones in the second (a mix); '-' matches none."""
    out = []
    pos = off
    while pos < off + len(data):
        end = min(off + len(data), (pos // block + 1) * block)
        piece = data[pos - off:end - off]
        hits = [str(i) for i, v in enumerate(versions) if v[pos:end] == piece]
        out.append("@%d:%s" % (pos, ("v" + "/v".join(hits)) if hits else "-"))
        pos = end
    return " ".join(out)


def first_diff(a, b):
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else None


class Writer:
    """Appends records to scratch files; after any error it starts a new file, so that each
    file is a run of whole records, possibly followed by one torn (unacknowledged) one."""

    def __init__(self, wid):
        self.wid = wid
        self.gen = 0
        self.acked = collections.defaultdict(list)  # file name -> [(seq, crc)]
        self.seq = 0

    def run(self, cluster, ledger, stop, rng):
        fd = None
        name = None
        while not stop.is_set():
            if fd is None:
                self.gen += 1
                name = "w%d-%04d.log" % (self.wid, self.gen)
                start = time.monotonic()
                try:
                    fd = ledger.timed("create", name, os.open, os.path.join(cluster.sc_mnt, name),
                                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                except OSError as e:
                    ledger.classify("create", name, e.errno, start, time.monotonic())
                    fd = None
                    time.sleep(0.2)
                    continue
            self.seq += 1
            payload = rng.randbytes(rng.randint(16, 64 << 10))
            header = RECORD_HEADER.pack(RECORD_MAGIC, len(payload), self.seq)
            crc = zlib.crc32(header + payload)
            record = header + payload + RECORD_TRAILER.pack(crc)
            start = time.monotonic()
            op = "write"
            try:
                n = ledger.timed("write", name, os.write, fd, record)
                if n != len(record):
                    raise OSError(errno.EIO, "short write %d of %d" % (n, len(record)))
                op = "fsync"
                ledger.timed("fsync", name, os.fsync, fd)
                self.acked[name].append((self.seq, crc))
                with ledger.lock:
                    ledger.records_acked += 1
                if len(self.acked[name]) >= 200:  # keep files small; start the next one
                    os.close(fd)
                    fd = None
            except OSError as e:
                ledger.classify(op, name, e.errno, start, time.monotonic())
                try:
                    os.close(fd)
                except OSError:
                    pass
                fd = None
            time.sleep(rng.uniform(0, 0.05))
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def verify(self, scratch_dir, bare_dir, ledger):
        """Reads this writer's files from the hub's export directly: no acked record lost.
        bare_dir is the scratch mountpoint with nothing mounted on it: a file found there was
        written while no FUSE mount covered the path (the agent's restart window)."""
        lost = 0
        for name, acked in self.acked.items():
            try:
                with open(os.path.join(scratch_dir, name), "rb") as f:
                    data = f.read()
            except OSError as e:
                lost += len(acked)
                if os.path.exists(os.path.join(bare_dir, name)):
                    ledger.hidden_records += len(acked)
                    msg = ("lost acknowledged writes: %s (%d records acknowledged) is not on the "
                           "hub but in the bare mountpoint %s: written between the stale FUSE "
                           "mount's removal and the agent's remount, then hidden by the new "
                           "mount" % (name, len(acked), bare_dir))
                    if ledger.args.allow_hidden_writes:
                        log("reported (--allow-hidden-writes): " + msg)
                        continue
                    ledger.add_violation(msg)
                    continue
                ledger.add_violation("lost acknowledged writes: %s unreadable on the hub (%s), "
                                     "%d records acknowledged" % (name, e, len(acked)))
                continue
            found = {}
            off = 0
            while off + RECORD_HEADER.size <= len(data):
                magic, n, seq = RECORD_HEADER.unpack_from(data, off)
                end = off + RECORD_HEADER.size + n + RECORD_TRAILER.size
                if magic != RECORD_MAGIC or end > len(data):
                    break
                (crc,) = RECORD_TRAILER.unpack_from(data, end - RECORD_TRAILER.size)
                if zlib.crc32(data[off:end - RECORD_TRAILER.size]) != crc:
                    break
                found[seq] = crc
                off = end
            missing = [s for s, c in acked if found.get(s) != c]
            if missing:
                lost += len(missing)
                ledger.add_violation(
                    "lost acknowledged writes: %s has %d of %d acknowledged records intact on "
                    "the hub (first missing seq %d; file %d bytes, valid prefix %d bytes)"
                    % (name, len(acked) - len(missing), len(acked), missing[0], len(data), off))
        return lost


# ------------------------------------------------------------------------------------------
# The fault driver.

def drive_faults(cluster, ledger, names, kinds, stop_at, rng, counts):
    rename_seq = 0
    while time.monotonic() < stop_at:
        kind = rng.choice(kinds)
        hold = rng.uniform(1.0, ledger.args.max_fault_seconds)
        if time.monotonic() + hold > stop_at:
            break
        counts[kind] += 1
        if kind == "latency":
            ms = rng.choice([200, 500, 1500, 3000])
            f = ledger.begin_fault(kind, "+%d ms one way for %.1f s" % (ms, hold))
            cluster.proxy_ctl("latency %d %.2f" % (ms, hold))
            time.sleep(hold)
        elif kind == "bandwidth":
            kbps = rng.choice([64, 256, 1024])
            f = ledger.begin_fault(kind, "%d KiB/s for %.1f s" % (kbps, hold))
            cluster.proxy_ctl("bandwidth %d %.2f" % (kbps, hold))
            time.sleep(hold)
        elif kind == "reset":
            f = ledger.begin_fault(kind, "abort connections, refuse new for %.1f s" % hold)
            cluster.proxy_ctl("reset %.2f" % hold)
            time.sleep(hold)
        elif kind == "blackhole":
            f = ledger.begin_fault(kind, "%.1f s" % hold)
            cluster.proxy_ctl("blackhole %.2f" % hold)
            time.sleep(hold)
        elif kind == "hub-restart":
            f = ledger.begin_fault(kind, "ganesha down %.1f s" % hold)
            cluster.stop_hub()
            time.sleep(hold)
            cluster.start_hub()
        elif kind in ("hub-replace", "hub-truncate", "hub-rename"):
            partial = [n for n in names if is_partial(n)]
            name = rng.choice(partial if partial and rng.random() < 0.7 else names)
            path = os.path.join(cluster.export, "dataset", name)
            versions, _ = ledger.allowed(name)
            if kind == "hub-truncate":
                new = versions[-1][:len(versions[-1]) // 2]
            else:
                new = rng.randbytes(rng.randint(0, 3 << 20))
            f = ledger.begin_fault(kind, "%s: %d -> %d bytes" % (name, len(versions[-1]),
                                                                len(new)))
            ledger.add_version(name, new)  # allowed before it can be seen
            if kind == "hub-truncate":
                os.truncate(path, len(new))
            elif kind == "hub-replace":  # written elsewhere on the hub, renamed over it
                tmp = os.path.join(cluster.export, "replace.tmp")
                with open(tmp, "wb") as out:
                    out.write(new)
                os.rename(tmp, path)
            else:  # the checkpoint pattern: write NAME.new next to it, mv NAME.new NAME
                rename_seq += 1
                tmp = path + ".new"
                with open(tmp, "wb") as out:
                    out.write(new)
                os.rename(tmp, path)
            time.sleep(hold)
        elif kind == "cache-flip":
            flipped = flip_cache_bytes(cluster.cache_dir, rng, 8)
            f = ledger.begin_fault(kind, "%d bytes flipped in %s" % (len(flipped),
                                                                     ", ".join(flipped[:3])))
            with ledger.lock:
                ledger.last_flip = f.start
            time.sleep(hold)
        elif kind == "agent-kill":
            f = ledger.begin_fault(kind, "SIGKILL, restart with the same state dir")
            stuck = cluster.kill_agent()
            if stuck:
                ledger.add_violation("killed agent did not exit: " + stuck)
            time.sleep(min(hold, 2.0))
            try:
                cluster.restart_agent()
            except RuntimeError as e:
                ledger.add_violation("agent restart after SIGKILL failed: %s" % e)
                ledger.end_fault(f)
                return
            if not cluster.wait_mounts_restored(60):
                ledger.add_violation("mounts not restored within 60 s after the agent restart")
        ledger.end_fault(f)
        time.sleep(rng.uniform(1.0, 4.0))  # quiet gap


def flip_cache_bytes(cache_dir, rng, n):
    """Flips n bytes at random offsets inside the allocated (non-hole) extents of the agent's
    cache files: the blocks it has stored, not the empty space of a sparse cache file."""
    extents = []  # (path, start, end)
    for root, _, fs in os.walk(cache_dir):
        for fn in fs:
            p = os.path.join(root, fn)
            try:
                fd = os.open(p, os.O_RDONLY)
            except OSError:
                continue
            try:
                size, off = os.fstat(fd).st_size, 0
                while off < size:
                    try:
                        start = os.lseek(fd, off, os.SEEK_DATA)
                    except OSError:  # ENXIO: no data after off
                        break
                    end = os.lseek(fd, start, os.SEEK_HOLE)
                    extents.append((p, start, end))
                    off = end
            finally:
                os.close(fd)
    done = []
    total = sum(e - s for _, s, e in extents)
    for _ in range(n if total else 0):
        pick = rng.randrange(total)
        for p, s, e in extents:
            if pick < e - s:
                off = s + pick
                break
            pick -= e - s
        try:
            with open(p, "r+b") as f:
                f.seek(off)
                b = f.read(1)
                f.seek(off)
                f.write(bytes([b[0] ^ 0xFF]))
            done.append("%s@%d" % (os.path.relpath(p, cache_dir), off))
        except (OSError, IndexError):
            pass
    return done


# ------------------------------------------------------------------------------------------

def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default=os.path.join(here, "../../build/dev"))
    p.add_argument("--source-dir", default=os.path.normpath(os.path.join(here, "../..")))
    p.add_argument("--duration", type=float, default=120, help="seconds of load (default 120)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--delay-ms", type=int, default=30, help="one-way WAN delay (30 = 60 ms RTT)")
    p.add_argument("--hub-timeout", type=int, default=5, help="volumes' hubTimeoutSeconds")
    p.add_argument("--retries", type=int, default=3, help="hub retries, for the request bound")
    p.add_argument("--slack", type=float, default=10, help="seconds added to the request bound")
    p.add_argument("--files", type=int, default=48, help="dataset files")
    p.add_argument("--max-file-kb", type=int, default=3072)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--writers", type=int, default=2)
    p.add_argument("--max-fault-seconds", type=float, default=8)
    p.add_argument("--faults", default=",".join(FAULT_KINDS),
                   help="fault kinds to inject (default: all): " + ",".join(FAULT_KINDS))
    p.add_argument("--exclude-faults", default="", help="fault kinds not to inject")
    p.add_argument("--no-keeper", action="store_true",
                   help="no spoke-fuse-keeper: an agent restart re-creates the mounts")
    p.add_argument("--strict-agent-restart", action="store_true",
                   help="errors while the agent restarts are violations (mounts must survive)")
    p.add_argument("--allow-cached-read-errors", action="store_true",
                   help="errors reading cached data while the hub is unreachable are reported, "
                        "not violations")
    p.add_argument("--allow-hidden-writes", action="store_true",
                   help="acknowledged records that went into the bare mountpoint while the agent "
                        "restarted are reported, not violations")
    p.add_argument("--rss-budget-mb", type=float, default=0,
                   help="agent RSS budget (default 512, x3 in a sanitizer build)")
    p.add_argument("--keep-workdir", action="store_true")
    a = p.parse_args()
    kinds = [k for k in a.faults.split(",") if k]
    excluded = [k for k in a.exclude_faults.split(",") if k]
    for k in kinds + excluded:
        if k not in FAULT_KINDS:
            p.error("unknown fault kind '%s' (known: %s)" % (k, ", ".join(FAULT_KINDS)))
    a.kinds = [k for k in kinds if k not in excluded]
    if a.duration < 30:
        p.error("--duration must be at least 30 seconds")
    a.request_bound = a.hub_timeout * a.retries + a.slack
    a.build_dir = os.path.abspath(a.build_dir)
    if a.rss_budget_mb <= 0:
        a.rss_budget_mb = 512 * (3 if sanitizer_build(a.build_dir) else 1)
    if a.seed is None:
        a.seed = random.randrange(1 << 30)
    return a


def sanitizer_build(build_dir):
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            return any(line.startswith("SPOKE_SANITIZE:BOOL=ON") for line in f)
    except OSError:
        return False


def main():
    args = parse_args()
    if os.geteuid() != 0 or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        print("soak: SKIP: needs root and /dev/fuse", file=sys.stderr)
        return 77
    work = tempfile.mkdtemp(prefix="spoke-soak-")
    cluster = Cluster(args, work)
    cluster.hub_ports = []
    if cluster.missing():
        print("soak: SKIP: not built: " + ", ".join(cluster.missing()), file=sys.stderr)
        os.rmdir(work)
        return 77
    ledger = Ledger(args)
    rng = random.Random(args.seed)
    log("seed %d, duration %.0f s, faults %s, request bound %.0f s, work dir %s"
        % (args.seed, args.duration, ",".join(args.kinds), args.request_bound, work))
    counts = collections.Counter()
    writers = [Writer(i) for i in range(args.writers)]
    ok = False
    try:
        cluster.start_hub()
        names = make_dataset(cluster, ledger, rng, args.files, args.max_file_kb)
        cluster.start_proxy()
        cluster.start_keeper()
        cluster.write_agent_config()
        cluster.start_agent()
        cluster.mount()
        log("hub ports %s, proxy %d/%d, agent pid %d; dataset %d files"
            % (cluster.hub_ports, cluster.wan_nfs, cluster.wan_mnt, cluster.agent.pid,
               len(names)))
        start_watchdog(args, cluster, ledger, work)
        stop = threading.Event()
        threads = []
        for i in range(args.readers):
            threads.append(threading.Thread(
                target=reader, args=(cluster, ledger, names, stop, random.Random(rng.random())),
                daemon=True, name="reader-%d" % i))
        for w in writers:
            threads.append(threading.Thread(
                target=w.run, args=(cluster, ledger, stop, random.Random(rng.random())),
                daemon=True, name="writer-%d" % w.wid))
        for t in threads:
            t.start()
        end_at = time.monotonic() + args.duration
        # Faults between a warm-up (readers fill the cache) and a quiet tail (recovery).
        warmup = min(15.0, args.duration * 0.15)
        tail = max(15.0, args.request_bound)
        time.sleep(warmup)
        driver = threading.Thread(target=drive_faults, daemon=True, args=(
            cluster, ledger, names, args.kinds, end_at - tail, random.Random(rng.random()),
            counts))
        driver.start()
        while time.monotonic() < end_at:
            with cluster.agent_lock:
                cluster.sample_rss()
            time.sleep(1)
        driver.join(timeout=120)
        stop.set()
        for t in threads:
            t.join(timeout=args.request_bound + 5)
        with ledger.lock:
            stuck = list(ledger.inflight.values())
        for op, path, start in stuck:
            ledger.add_violation("%s %s still blocked after %.0f s at the end"
                                 % (op, path, time.monotonic() - start))
        # Final pass with every fault over: each dataset file must read back as a version.
        if cluster.agent.poll() is not None:
            ledger.add_violation("the agent is not alive at the end (exit %s)"
                                 % cluster.agent.returncode)
        else:
            for name in names:
                start = time.monotonic()
                try:
                    with open(os.path.join(cluster.ds_mnt, name), "rb") as f:
                        data = ledger.timed("read", name, f.read)
                    versions, shas = ledger.allowed(name)
                    if hashlib.sha256(data).hexdigest() not in shas:
                        ledger.add_violation("wrong bytes: %s in the final pass (%d bytes; by "
                                             "block: %s)" % (name, len(data),
                                                             describe_mix(data, 0, versions)))
                    else:
                        ledger.bytes_verified += len(data)
                except OSError as e:
                    ledger.classify("final-read", name, e.errno, start, time.monotonic())
            cluster.sample_rss()
        # Unmount the scratch volume so that its bare mountpoint can be looked at.
        r = cluster.spokectl("unmount", cluster.sc_mnt, timeout=60)
        if r.returncode != 0:
            ledger.add_violation("spokectl unmount %s failed: %s%s"
                                 % (cluster.sc_mnt, r.stdout, r.stderr))
            subprocess.run(["umount", "-l", cluster.sc_mnt], capture_output=True)
        lost = sum(w.verify(os.path.join(cluster.export, "scratch"), cluster.sc_mnt, ledger)
                   for w in writers)
        if cluster.rss_max_kb / 1024 > args.rss_budget_mb:
            ledger.add_violation("agent RSS peaked at %.0f MiB, budget %.0f MiB"
                                 % (cluster.rss_max_kb / 1024, args.rss_budget_mb))
        # Since the last agent start: the flips it detected (the rest were never re-read).
        ledger.checksum_failures = cluster.metric("spoke_checksum_failures_total")
        report(args, ledger, counts, cluster, lost)
        ok = not ledger.violations
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        print("soak: FAIL: setup or driver error: %s" % e, file=sys.stderr)
        ok = False
    finally:
        if not ok:
            tail_log(os.path.join(cluster.agent_dir, "agent.log"))
        cluster.stop_all()
        if args.keep_workdir or not ok:
            print("soak: work dir kept: %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def fuse_connections_of(mountpoints):
    """The FUSE connection ids (/sys/fs/fuse/connections/N) of `mountpoints`, read from
    mountinfo: a stat() of a hung mount would hang too."""
    ids = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if fields[4] in mountpoints and " - fuse" in line:
                    ids.append(int(fields[2].split(":")[1]))
    except (OSError, IndexError, ValueError):
        pass
    return ids


def start_watchdog(args, cluster, ledger, work):
    """The soak itself never hangs: past its whole budget (load, recovery, final pass), it
    prints what is blocked and where the agent's threads wait, aborts its own FUSE connections
    (so blocked threads return) and exits with a failure."""
    budget = args.duration + 4 * args.request_bound + 180

    def watch():
        time.sleep(budget)
        print("soak: FAIL: still running %.0f s after the start (budget for --duration %.0f)"
              % (budget, args.duration), file=sys.stderr)
        with ledger.lock:
            for op, path, start in ledger.inflight.values():
                print("  blocked: %s %s for %.0f s" % (op, path, time.monotonic() - start),
                      file=sys.stderr)
        pid = cluster.agent.pid if cluster.agent else None
        if pid and cluster.agent.poll() is None:
            waits = collections.Counter()
            for t in os.listdir("/proc/%d/task" % pid):
                try:
                    with open("/proc/%d/task/%s/wchan" % (pid, t)) as f:
                        waits[f.read().strip() or "running"] += 1
                except OSError:
                    pass
            print("  agent pid %d threads by kernel wait: %s"
                  % (pid, ", ".join("%s=%d" % kv for kv in waits.most_common())),
                  file=sys.stderr)
        else:
            print("  agent not running", file=sys.stderr)
        tail_log(os.path.join(cluster.agent_dir, "agent.log"), 60)
        for conn in fuse_connections_of((cluster.ds_mnt, cluster.sc_mnt)):
            try:
                with open("/sys/fs/fuse/connections/%d/abort" % conn, "w") as f:
                    f.write("1")
            except OSError:
                pass
        for p in (cluster.agent, cluster.proxy, cluster.keeper):
            if p and p.poll() is None:
                p.kill()
        for mnt in (cluster.ds_mnt, cluster.sc_mnt):
            subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=30)
        cluster.stop_hub()
        print("soak: work dir kept: %s" % work, file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="watchdog").start()


def tail_log(path, n=30):
    try:
        with open(path, errors="replace") as f:
            lines = f.readlines()[-n:]
        print("--- %s (tail) ---\n%s" % (path, "".join(lines)), file=sys.stderr)
    except OSError:
        pass


def report(args, ledger, counts, cluster, lost):
    by_cause = collections.Counter(e[0] for e in ledger.errors)
    by_op = collections.Counter("%s/%s/%s" % (e[0], e[1], errno.errorcode.get(e[3], e[3]))
                                for e in ledger.errors)
    print("\n==== soak summary (seed %d, %.0f s) ====" % (args.seed, args.duration))
    print("faults injected:   %s" % (", ".join("%s=%d" % kv for kv in sorted(counts.items()))
                                     or "none"))
    print("bytes verified:    %d (%d verified reads)" % (ledger.bytes_verified, ledger.reads_ok))
    print("records acked:     %d, lost: %d (of which %d hidden under the mountpoint)"
          % (ledger.records_acked, lost, ledger.hidden_records))
    print("errors by cause:   %s" % (", ".join("%s=%d" % kv for kv in sorted(by_cause.items()))
                                     or "none"))
    print("errors by op/errno: %s" % (", ".join("%s=%d" % kv for kv in sorted(by_op.items()))
                                     or "none"))
    print("longest request:   %.2f s (%s), bound %.0f s"
          % (ledger.longest[0], ledger.longest[1], args.request_bound))
    print("agent:             %d restart(s), peak RSS %.0f MiB (budget %.0f MiB)"
          % (cluster.agent_restarts, cluster.rss_max_kb / 1024, args.rss_budget_mb))
    print("cache checksums:   %s failures detected by the agent since its last start"
          % ("?" if ledger.checksum_failures is None else "%d" % ledger.checksum_failures))
    if ledger.violations:
        print("VIOLATIONS (%d):" % len(ledger.violations))
        seen = collections.Counter()
        for v in ledger.violations:
            key = ("error with cause " + v.split(" with cause ")[1].split(" ")[0]
                   if " with cause " in v else v.split(":")[0])
            seen[key] += 1
            if seen[key] <= 10:
                print("  - " + v)
        for key, n in seen.items():
            if n > 10:
                print("  (%d more '%s')" % (n - 10, key))
        print("soak: FAIL")
    else:
        print("soak: PASS")
    print(json.dumps({"faults": counts, "bytes_verified": ledger.bytes_verified,
                      "errors": by_cause, "longest_s": round(ledger.longest[0], 2),
                      "violations": len(ledger.violations)}))


if __name__ == "__main__":
    sys.exit(main())
