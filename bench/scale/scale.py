#!/usr/bin/env python3
"""Spoke scale harness: metadata-heavy trees behind the WAN proxy.

  scale.py [--build-dir DIR] [--files 1000000] [--big-dir 200000] [--cycles 10]
           [--cycle-files 100000] [--mount-files 2000] [--mount-dirs 16] [--threads 32]
           [--churn-ttl 5] [--delay-ms 30] [--hub-attr-expiration 0] [--keep-workdir]

Creates, directly in a fresh nfs-ganesha hub's export, a tree of --files empty files (1000 per
directory) and a separate directory of --big-dir entries, puts spoke-wan-proxy (30 ms each way =
60 ms RTT) in front of it, starts spoke-cache-agent and mounts the tree read-only, a churn
volume (consistency ttl) and a scratch volume with spokectl. Then measures:
  walk       a full walk of the mount (scandir + lstat of every entry), timed by the walker
             (the agent has no walk metric), and the agent's RSS before/after it: bytes of
             RSS per cached inode
  big dir    (a volume of its own) lstat of one entry right after mounting (cold), `ls`
             (listdir) of the directory, `ls` again with the kernel's caches dropped (the FUSE
             side alone: the agent still has the listing), and lstat of an entry inside it
  cycles     --cycles rounds, each of which
               - creates --cycle-files empty files on the hub directly (another client), 1000
                 per directory, and walks them through the churn volume once its listings are
                 older than --churn-ttl (every directory relisted, every file stat'ed);
               - removes them on the hub and walks again (the agent sees them gone);
               - creates and unlinks --mount-files files through the scratch volume, spread
                 over --mount-dirs directories by --threads workers (the kernel serialises
                 creates and unlinks within one directory: it holds the directory's lock
                 across LOOKUP + CREATE/UNLINK);
             and the agent's RSS after each round, which should stay flat: the same names
             come back each round, and what the hub removed must leave the agent's memory
and prints a table. The churn files are made behind ganesha's back, so its hub runs with
Attr_Expiration_Time = 0 (ganesha's MDCACHE would list the directories from its cache for up to
60 s otherwise); a churn walk that still disagrees prints the hub's own listing (nfs-ls) beside
it. Needs root and /dev/fuse. Not a ctest test: it takes long at full size.
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


def cpu_s(pid):
    """User + system CPU seconds the process has used."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def walk(top, vanished=None):
    """scandir + lstat of every entry; returns (entries, directories). With a list as
    vanished, an entry listed but gone by its lstat (ENOENT) is appended to it, not raised."""
    entries, dirs = 0, 0
    stack = [top]
    while stack:
        d = stack.pop()
        dirs += 1
        with os.scandir(d) as it:
            for e in it:
                try:
                    os.lstat(e.path)
                except FileNotFoundError:
                    if vanished is None:
                        raise
                    vanished.append(e.path)
                    continue
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
    p.add_argument("--mount-files", type=int, default=2000,
                   help="files created + unlinked through the scratch mount per cycle")
    p.add_argument("--mount-dirs", type=int, default=16,
                   help="directories the --mount-files are spread over")
    p.add_argument("--threads", type=int, default=32, help="parallel creates/unlinks/walkers")
    p.add_argument("--churn-ttl", type=int, default=5,
                   help="ttl (s) of the churn volume; each walk waits for it to pass")
    p.add_argument("--churn-prefetch", choices=("off", "readahead", "auto"),
                   help="--prefetch of the churn volume (default: the agent's)")
    p.add_argument("--delay-ms", type=int, default=30)
    p.add_argument("--hub-timeout", type=int, default=30)
    p.add_argument("--hub-attr-expiration", type=int, default=0,
                   help="the hub's Attr_Expiration_Time (s; -1: ganesha's default, 60). The "
                        "churn files are made in the export directly, behind ganesha's back: "
                        "ganesha lists a directory from its cache until its attributes expire")
    p.add_argument("--keep-workdir", action="store_true")
    a = p.parse_args()
    for name in ("files", "big_dir", "cycles", "cycle_files", "mount_files", "mount_dirs",
                 "threads", "churn_ttl"):
        if getattr(a, name) < (1 if name in ("threads", "mount_dirs", "churn_ttl") else 0):
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
        env = dict(os.environ)
        if a.hub_attr_expiration >= 0:
            env["SPOKE_HUB_ATTR_EXPIRATION"] = str(a.hub_attr_expiration)
        out = subprocess.run([hub, "start", hub_dir], capture_output=True, text=True,
                             timeout=60, check=True, env=env).stdout
        kv = dict(w.split("=", 1) for w in out.split())
        export = kv["EXPORT"]
        make_tree(export, a.files, a.big_dir)
        os.makedirs(os.path.join(export, "scratch"))
        churn_dirs = ["d%03d" % i for i in range((a.cycle_files + 999) // 1000)]
        for d in churn_dirs:
            os.makedirs(os.path.join(export, "churn", d))
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
                    "fuseKeeperSocket: \"\"\n"  # no keeper (the default is a shared one)
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
        tree_mnt, big_mnt, sc_mnt, churn_mnt = (os.path.join(work, d)
                                                for d in ("tree", "big", "scratch", "churn"))
        for d in (tree_mnt, big_mnt, sc_mnt, churn_mnt):
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

        if a.big_dir:
            measure("stat in big dir (cold, %d entries)" % a.big_dir,
                    lambda: os.lstat(os.path.join(big_mnt, "e%07d" % (a.big_dir // 2))))
            cpu0 = cpu_s(agent.pid)
            measure("ls big dir (%d entries)" % a.big_dir, lambda: os.listdir(big_mnt))
            row("agent CPU during that ls", "%.2f s" % (cpu_s(agent.pid) - cpu0))
            # Again with the kernel's dentries, inodes and cached listing dropped: the agent
            # answers from its own listing, so this is the FUSE side of the `ls` alone (the
            # rest of the first is the hub's listing through the WAN).
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            measure("ls big dir again (agent's listing cached, kernel's dropped)",
                    lambda: os.listdir(big_mnt))
            measure("stat in big dir (after ls)",
                    lambda: os.lstat(os.path.join(big_mnt, "e%07d" % (a.big_dir // 3))),
                    "%.3f s")
            row("agent RSS after the big dir", "%d MiB" % (rss_kb(agent.pid) // 1024))

        ctl("mount", url % "scratch", sc_mnt, "--mode", "scratch", "--hub-timeout",
            str(a.hub_timeout))
        mounts.append(sc_mnt)

        ctl("mount", url % "churn", churn_mnt, "--mode", "dataset", "--consistency", "ttl",
            "--ttl", str(a.churn_ttl), "--read-only", "--hub-timeout", str(a.hub_timeout),
            *(("--prefetch", a.churn_prefetch) if a.churn_prefetch else ()))
        mounts.append(churn_mnt)

        pool = concurrent.futures.ThreadPoolExecutor(a.threads)
        mount_names = ["m%03d/c%07d" % (i % a.mount_dirs, i) for i in range(a.mount_files)]
        if a.mount_files:
            for d in range(a.mount_dirs):
                os.mkdir(os.path.join(sc_mnt, "m%03d" % d))

        def on_hub(fn):
            """fn(path) for each churn file, in the hub's export (another client)."""
            def per_dir(k):
                d = os.path.join(export, "churn", churn_dirs[k])
                for i in range(k * 1000, min(a.cycle_files, (k + 1) * 1000)):
                    fn(os.path.join(d, "f%07d" % i))
            list(pool.map(per_dir, range(len(churn_dirs))))

        vanished = []  # ENOENT in a churn walk: a listed entry's lstat, or a churn directory

        def walk_churn():
            """Every churn directory listed and every entry stat'ed through the mount."""
            time.sleep(a.churn_ttl + 0.5)  # every listing the agent holds is stale now
            def one(d):
                try:
                    return walk(os.path.join(churn_mnt, d), vanished)[0]
                except FileNotFoundError:  # the directory itself (the hub never removes it)
                    vanished.append(os.path.join(churn_mnt, d))
                    return 0
            return sum(pool.map(one, churn_dirs))

        def hub_counts():
            """Entries of each churn directory as the hub lists them to another NFS client
            (nfs-ls, straight to the hub), or None without libnfs-utils."""
            if not shutil.which("nfs-ls"):
                return None
            counts = []
            for d in churn_dirs:
                r = subprocess.run(["nfs-ls", "nfs://127.0.0.1%s/churn/%s?nfsport=%s&mountport=%s"
                                    % (export, d, kv["NFS_PORT"], kv["MOUNT_PORT"])],
                                   capture_output=True, text=True, timeout=120)
                counts.append(len(r.stdout.splitlines()) if r.returncode == 0 else -1)
            return counts

        def create(name):
            os.close(os.open(os.path.join(sc_mnt, name), os.O_CREAT | os.O_WRONLY, 0o644))

        def unlink(name):
            os.unlink(os.path.join(sc_mnt, name))

        def timed(fn):
            def run(x):
                t = time.monotonic()
                fn(x)
                return time.monotonic() - t
            return run

        def spread(sorted_s):
            return "%.2f / %.2f s" % (sorted_s[len(sorted_s) // 2], sorted_s[-1])

        cycle_rss = []
        for c in range(a.cycles):
            t = time.monotonic()
            on_hub(lambda f: os.close(os.open(f, os.O_CREAT | os.O_WRONLY, 0o644)))
            t_hub = time.monotonic() - t
            t = time.monotonic()
            seen = walk_churn()
            t_walk = time.monotonic() - t
            # On a mismatch, who is wrong: the hub's own listing to another NFS client, now.
            hub_seen = hub_counts() if seen != a.cycle_files else None
            rss_full = rss_kb(agent.pid)
            on_hub(os.unlink)
            t = time.monotonic()
            left = walk_churn()
            t_walk2 = time.monotonic() - t
            hub_left = hub_counts() if left != 0 else None
            t = time.monotonic()
            creates = sorted(pool.map(timed(create), mount_names))
            unlinks = sorted(pool.map(timed(unlink), mount_names))
            t_mount = time.monotonic() - t
            cycle_rss.append(rss_kb(agent.pid))
            if vanished:
                row("cycle %d churn walk: ENOENT (entry or directory)" % (c + 1),
                    "%d, e.g. %s" % (len(vanished), vanished[0]))
                del vanished[:]
            if seen != a.cycle_files or left != 0:
                # The mount must show what the hub holds once the ttl has passed.
                def n(counts):
                    if counts is None:
                        return "-"
                    missing = sum(1 for k in counts if k < 0)
                    return "%d%s" % (sum(k for k in counts if k >= 0),
                                     " (%d directories not found)" % missing if missing else "")
                row("cycle %d churn walk MISMATCH" % (c + 1),
                    "saw %d of %d files (hub lists %s), %d left after removal (hub lists %s)"
                    % (seen, a.cycle_files, n(hub_seen), left, n(hub_left)))
            log("cycle %d: hub +%d files %.1f s; walk %d entries %.1f s (RSS %d MiB); hub "
                "removal, walk %d entries %.1f s; mount %d creates + unlinks %.1f s (median / "
                "max: create %s, unlink %s); agent RSS %d KiB"
                % (c + 1, a.cycle_files, t_hub, seen, t_walk, rss_full // 1024, left, t_walk2,
                   a.mount_files, t_mount, spread(creates) if creates else "-",
                   spread(unlinks) if unlinks else "-", cycle_rss[-1]))
            if c == 0 and creates:
                row("mount create / unlink latency, cycle 1 (median / max)",
                    "%s, %s (%d threads, %d dirs)"
                    % (spread(creates), spread(unlinks), a.threads, a.mount_dirs))
                row("mount creates + unlinks per second, cycle 1",
                    "%.0f" % (2 * a.mount_files / max(t_mount, 1e-9)))
            if c == 0:
                row("churn walk of %d hub-created files, cycle 1" % a.cycle_files,
                    "%.1f s (%d seen)" % (t_walk, seen))
        if cycle_rss:
            row("RSS after each cycle (MiB)", " ".join("%d" % (k // 1024) for k in cycle_rss))
            # The first cycle fills the allocator's pools; flat means no growth after it.
            base = cycle_rss[1] if len(cycle_rss) > 2 else cycle_rss[0]
            grow = cycle_rss[-1] - base
            per = grow * 1024 / max(1, (a.cycle_files + a.mount_files) *
                                       max(1, len(cycle_rss) - (2 if len(cycle_rss) > 2 else 1)))
            flat = grow <= max(8 * 1024, base // 20)  # within 8 MiB or 5 %
            row("RSS growth cycle %d -> last" % (2 if len(cycle_rss) > 2 else 1),
                "%+d KiB (%+.1f B per file-cycle): %s"
                % (grow, per, "flat" if flat else "GROWING"))
            if len(cycle_rss) >= 6:
                # Whether it levels off: the allocator's pools may take a few rounds to fill.
                half = len(cycle_rss) // 2
                late = cycle_rss[-1] - cycle_rss[half - 1]
                row("RSS growth cycle %d -> last" % half,
                    "%+d KiB: %s" % (late, "flat" if late <= max(8 * 1024, cycle_rss[half - 1] // 20)
                                     else "GROWING"))
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
