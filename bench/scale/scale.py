#!/usr/bin/env python3
"""Spoke scale harness: metadata-heavy trees behind the WAN proxy.

  scale.py [--build-dir DIR] [--files 1000000] [--big-dir 200000] [--cycles 10]
           [--cycle-files 100000] [--delay-ms 30] [--threads 16] [--keep-workdir]

Creates, directly in a fresh nfs-ganesha hub's export, a tree of --files empty files (1000 per
directory) and a separate directory of --big-dir entries, puts spoke-wan-proxy (30 ms each way =
60 ms RTT) in front of it, starts spoke-cache-agent and mounts the tree read-only and a
scratch volume with spokectl. Then measures:
  walk       a full walk of the mount (scandir + lstat of every entry), timed by the walker
             (the agent has no walk metric), and the agent's RSS before/after it: bytes of
             RSS per cached inode
  big dir    (a volume of its own) lstat of one entry right after mounting (cold), `ls`
             (listdir) of the directory, and lstat of an entry inside it afterwards
  cycles     agent RSS after each of --cycles create/unlink rounds of --cycle-files files on
             the scratch volume (memory should stay flat)
and prints a table. Needs root and /dev/fuse. Not a ctest test: it takes long at full size.
"""
import argparse
import concurrent.futures
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg):
    print("[%7.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


T0 = time.monotonic()


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def make_tree(root, files, big):
    t = time.monotonic()
    per_dir = 1000
    os.makedirs(os.path.join(root, "tree"))
    for i in range(files):
        if i % per_dir == 0:
            d = os.path.join(root, "tree", "d%05d" % (i // per_dir))
            os.mkdir(d)
        os.close(os.open(os.path.join(d, "f%07d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
    bigdir = os.path.join(root, "big")  # its own volume: the tree's walk does not list it
    os.makedirs(bigdir)
    for i in range(big):
        os.close(os.open(os.path.join(bigdir, "e%07d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
    log("tree: %d files + %d-entry directory created on the hub in %.1f s"
        % (files, big, time.monotonic() - t))


def walk(top):
    """scandir + lstat of every entry; returns (entries, directories)."""
    entries, dirs = 0, 0
    stack = [top]
    while stack:
        d = stack.pop()
        dirs += 1
        with os.scandir(d) as it:
            for e in it:
                os.lstat(e.path)
                entries += 1
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return entries, dirs


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default=os.path.join(here, "../../build/dev"))
    p.add_argument("--source-dir", default=os.path.normpath(os.path.join(here, "../..")))
    p.add_argument("--files", type=int, default=1_000_000)
    p.add_argument("--big-dir", type=int, default=200_000)
    p.add_argument("--cycles", type=int, default=10)
    p.add_argument("--cycle-files", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=16, help="parallel creates/unlinks")
    p.add_argument("--delay-ms", type=int, default=30)
    p.add_argument("--hub-timeout", type=int, default=30)
    p.add_argument("--keep-workdir", action="store_true")
    a = p.parse_args()
    for name in ("files", "big_dir", "cycles", "cycle_files", "threads"):
        if getattr(a, name) < (1 if name == "threads" else 0):
            p.error("--%s must not be negative" % name.replace("_", "-"))
    if os.geteuid() != 0 or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        print("scale: needs root and /dev/fuse", file=sys.stderr)
        return 77
    b = os.path.abspath(a.build_dir)
    agent_bin = os.path.join(b, "cache-agent/agent/spoke-cache-agent")
    ctl_bin = os.path.join(b, "cache-agent/cli/spokectl")
    proxy_bin = os.path.join(b, "e2e/wan-proxy/spoke-wan-proxy")
    hub = os.path.join(a.source_dir, "scripts/spoke-hub")
    for x in (agent_bin, ctl_bin, proxy_bin, hub):
        if not os.access(x, os.X_OK):
            print("scale: not built: " + x, file=sys.stderr)
            return 77

    work = tempfile.mkdtemp(prefix="spoke-scale-")
    hub_dir = os.path.join(work, "hub")
    procs = []
    mounts = []
    sock = os.path.join(work, "agent.sock")

    def ctl(*args, timeout=600):
        r = subprocess.run([ctl_bin, "--socket", sock] + list(args), capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("spokectl %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
        return r.stdout

    rows = []

    def row(k, v):
        rows.append((k, v))
        log("%s: %s" % (k, v))

    try:
        out = subprocess.run([hub, "start", hub_dir], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        kv = dict(w.split("=", 1) for w in out.split())
        export = kv["EXPORT"]
        make_tree(export, a.files, a.big_dir)
        os.makedirs(os.path.join(export, "scratch"))
        # The cycles create as root, which reaches the hub as the squashed identity.
        os.chmod(os.path.join(export, "scratch"), 0o1777)
        wan_nfs, wan_mnt = free_port(), free_port()
        procs.append(subprocess.Popen(
            [proxy_bin, "--delay-ms", str(a.delay_ms),
             "--route", "127.0.0.1:%d=127.0.0.1:%s" % (wan_nfs, kv["NFS_PORT"]),
             "--route", "127.0.0.1:%d=127.0.0.1:%s" % (wan_mnt, kv["MOUNT_PORT"])]))
        metrics = free_port()
        with open(os.path.join(work, "agent.yaml"), "w") as f:
            f.write("socket: %s\ncacheDir: %s/cache\ncacheSizeBytes: 1Gi\nstateDir: %s/state\n"
                    "mountRoots: [%s]\n"
                    "metricsAddress: 127.0.0.1:%d\nlogLevel: info\n"
                    "hub: {connections: 4, inflightPerConnection: 16, requestTimeoutSeconds: %d}\n"
                    % (sock, work, work, work, metrics, a.hub_timeout))
        agent = subprocess.Popen([agent_bin, "--config", os.path.join(work, "agent.yaml")],
                                 stdout=open(os.path.join(work, "agent.log"), "w"),
                                 stderr=subprocess.STDOUT)
        procs.insert(0, agent)
        for _ in range(300):
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % metrics, timeout=2):
                    if os.path.exists(sock):
                        break
            except OSError:
                pass
            time.sleep(0.1)
        url = "nfs://127.0.0.1%s/%%s?nfsport=%d&mountport=%d" % (export, wan_nfs, wan_mnt)
        tree_mnt, big_mnt, sc_mnt = (os.path.join(work, d) for d in ("tree", "big", "scratch"))
        for d in (tree_mnt, big_mnt, sc_mnt):
            os.makedirs(d)
        rss0 = rss_kb(agent.pid)
        ro = ("--mode", "dataset", "--consistency", "immutable", "--read-only", "--hub-timeout",
              str(a.hub_timeout))
        # The walk: from the mount until every entry was listed and stat'ed through FUSE. The
        # agent walks the tree in the background after mounting (and exposes no figure for
        # it), so this includes waiting for its walk.
        t = time.monotonic()
        ctl("mount", url % "tree", tree_mnt, *ro)
        mounts.append(tree_mnt)
        entries, dirs = walk(tree_mnt)
        walk_s = time.monotonic() - t
        rss1 = rss_kb(agent.pid)
        row("walk from mount (%d entries, %d dirs)" % (entries, dirs), "%.1f s" % walk_s)
        t = time.monotonic()
        walk(tree_mnt)
        row("walk again (warm)", "%.2f s" % (time.monotonic() - t))
        row("agent RSS before mount / after walk", "%d / %d MiB" % (rss0 // 1024, rss1 // 1024))
        row("RSS per cached inode (goal <= 300 B)",
            "%.0f B" % ((rss1 - rss0) * 1024 / max(1, entries)))

        # The big directory, in a volume of its own: a stat inside it right after mounting
        # (cold), `ls`, and a stat after the listing.
        ctl("mount", url % "big", big_mnt, *ro)
        mounts.append(big_mnt)
        def measure(what, fn, fmt="%.2f s"):
            """Times fn; a failure is a result too (e.g. a listing beyond the hub timeout)."""
            t = time.monotonic()
            try:
                fn()
                row(what, fmt % (time.monotonic() - t))
            except OSError as e:
                row(what, "FAILED after %.1f s: %s" % (time.monotonic() - t, e.strerror))

        measure("stat in big dir (cold, %d entries)" % a.big_dir,
                lambda: os.lstat(os.path.join(big_mnt, "e%07d" % (a.big_dir // 2))))
        measure("ls big dir (%d entries)" % a.big_dir, lambda: os.listdir(big_mnt))
        measure("stat in big dir (after ls)",
                lambda: os.lstat(os.path.join(big_mnt, "e%07d" % (a.big_dir // 3))), "%.3f s")
        row("agent RSS after the big dir", "%d MiB" % (rss_kb(agent.pid) // 1024))

        ctl("mount", url % "scratch", sc_mnt, "--mode", "scratch", "--hub-timeout",
            str(a.hub_timeout))
        mounts.append(sc_mnt)

        pool = concurrent.futures.ThreadPoolExecutor(a.threads)

        def create(i):
            os.close(os.open(os.path.join(sc_mnt, "c%07d" % i), os.O_CREAT | os.O_WRONLY, 0o644))

        def unlink(i):
            os.unlink(os.path.join(sc_mnt, "c%07d" % i))

        def timed(fn):
            def run(i):
                t = time.monotonic()
                fn(i)
                return time.monotonic() - t
            return run

        cycle_rss = []
        for c in range(a.cycles):
            t = time.monotonic()
            creates = sorted(pool.map(timed(create), range(a.cycle_files)))
            unlinks = sorted(pool.map(timed(unlink), range(a.cycle_files)))
            if c == 0 and creates:
                row("create / unlink latency, cycle 1 (median, max)",
                    "%.2f s, %.2f s / %.2f s, %.2f s (%d threads)"
                    % (creates[len(creates) // 2], creates[-1], unlinks[len(unlinks) // 2],
                       unlinks[-1], a.threads))
            cycle_rss.append(rss_kb(agent.pid))
            log("cycle %d: %d files created + unlinked in %.1f s, agent RSS %d KiB"
                % (c + 1, a.cycle_files, time.monotonic() - t, cycle_rss[-1]))
        if cycle_rss:
            row("RSS after create/unlink cycles (MiB)",
                " ".join("%d" % (k // 1024) for k in cycle_rss))
            row("RSS growth first -> last cycle",
                "%+d KiB (%+.0f B per file-cycle)"
                % (cycle_rss[-1] - cycle_rss[0],
                   (cycle_rss[-1] - cycle_rss[0]) * 1024 /
                   max(1, a.cycle_files * (len(cycle_rss) - 1))))
        pool.shutdown()
        print("\n%-44s %s" % ("measure (files %d, %d ms RTT)" % (a.files, 2 * a.delay_ms),
                              "value"))
        print("-" * 70)
        for k, v in rows:
            print("%-44s %s" % (k, v))
        return 0
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError) as e:
        print("scale: FAIL: %s" % e, file=sys.stderr)
        for k, v in rows:
            print("%-44s %s" % (k, v))
        return 1
    finally:
        for m in mounts:
            subprocess.run([ctl_bin, "--socket", sock, "unmount", m], capture_output=True,
                           timeout=120)
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for m in mounts:
            subprocess.run(["umount", "-l", m], capture_output=True)
        subprocess.run([hub, "stop", hub_dir], capture_output=True, timeout=60)
        if a.keep_workdir:
            print("work dir kept: " + work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
