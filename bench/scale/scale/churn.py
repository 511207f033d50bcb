"""The churn cycles: files made and removed on the hub and through the scratch volume."""

import os
import shutil
import subprocess
import time

from .procfs import log, rss_kb
from .report import rss_growth, spread
from .tree import PER_DIR, walk

VOLUMES = ("scratch", "churn")


def prepare_export(export, cycle_files):
    """The scratch root and the churn directories in the hub's export; returns the latter."""
    os.makedirs(os.path.join(export, "scratch"))
    churn_dirs = ["d%03d" % i for i in range((cycle_files + PER_DIR - 1) // PER_DIR)]
    for d in churn_dirs:
        os.makedirs(os.path.join(export, "churn", d))
    # The cycles create as root, which reaches the hub as the squashed identity.
    os.chmod(os.path.join(export, "scratch"), 0o1777)
    return churn_dirs


def timed(fn):
    """fn(x) that returns the seconds it took."""
    def run(x):
        t = time.monotonic()
        fn(x)
        return time.monotonic() - t
    return run


def counted(counts):
    """The hub's entries summed over the churn directories, "-" without nfs-ls."""
    if counts is None:
        return "-"
    missing = sum(1 for k in counts if k < 0)
    return "%d%s" % (sum(k for k in counts if k >= 0),
                     " (%d directories not found)" % missing if missing else "")


class Churn:
    """The scratch and churn volumes and the cycles that go through them."""

    def __init__(self, bench, churn_dirs, pool):
        self.bench = bench
        self.a = bench.a
        self.dirs = churn_dirs
        self.pool = pool
        self.vanished = []  # ENOENT in a churn walk: a listed entry's lstat, or a directory
        self.names = ["m%03d/c%07d" % (i % self.a.mount_dirs, i)
                      for i in range(self.a.mount_files)]

    def mount(self):
        """Mounts the scratch volume and the ttl churn volume; makes the scratch dirs."""
        a = self.a
        self.scratch = self.bench.mount("scratch", "--mode", "scratch", "--hub-timeout",
                                        str(a.hub_timeout))
        self.churn = self.bench.mount(
            "churn", "--mode", "dataset", "--consistency", "ttl", "--ttl", str(a.churn_ttl),
            "--read-only", "--hub-timeout", str(a.hub_timeout),
            *(("--prefetch", a.churn_prefetch) if a.churn_prefetch else ()))
        if a.mount_files:
            for d in range(a.mount_dirs):
                os.mkdir(os.path.join(self.scratch, "m%03d" % d))

    def on_hub(self, fn):
        """fn(path) for each churn file, in the hub's export (another client)."""
        def per_dir(k):
            d = os.path.join(self.bench.export, "churn", self.dirs[k])
            for i in range(k * PER_DIR, min(self.a.cycle_files, (k + 1) * PER_DIR)):
                fn(os.path.join(d, "f%07d" % i))
        list(self.pool.map(per_dir, range(len(self.dirs))))

    def walk_churn(self):
        """Every churn directory listed and every entry stat'ed through the mount."""
        time.sleep(self.a.churn_ttl + 0.5)  # every listing the agent holds is stale now

        def one(d):
            try:
                return walk(os.path.join(self.churn, d), self.vanished)[0]
            except FileNotFoundError:  # the directory itself (the hub never removes it)
                self.vanished.append(os.path.join(self.churn, d))
                return 0
        return sum(self.pool.map(one, self.dirs))

    def hub_counts(self):
        """Entries of each churn directory as the hub lists them to another NFS client
        (nfs-ls, straight to the hub), or None without libnfs-utils."""
        if not shutil.which("nfs-ls"):
            return None
        hub = self.bench.hub
        counts = []
        for d in self.dirs:
            r = subprocess.run(["nfs-ls", "nfs://127.0.0.1%s/churn/%s?nfsport=%s&mountport=%s"
                                % (self.bench.export, d, hub["NFS_PORT"], hub["MOUNT_PORT"])],
                               capture_output=True, text=True, timeout=120)
            counts.append(len(r.stdout.splitlines()) if r.returncode == 0 else -1)
        return counts

    def create(self, name):
        """Creates one empty file through the scratch volume."""
        os.close(os.open(os.path.join(self.scratch, name), os.O_CREAT | os.O_WRONLY, 0o644))

    def unlink(self, name):
        """Unlinks it through the scratch volume."""
        os.unlink(os.path.join(self.scratch, name))

    def hub_round(self):
        """Churn files made on the hub, walked, removed, walked: the figures of one round."""
        r = {}
        t = time.monotonic()
        self.on_hub(lambda f: os.close(os.open(f, os.O_CREAT | os.O_WRONLY, 0o644)))
        r["t_hub"] = time.monotonic() - t
        t = time.monotonic()
        r["seen"] = self.walk_churn()
        r["t_walk"] = time.monotonic() - t
        # On a mismatch, who is wrong: the hub's own listing to another NFS client, now.
        r["hub_seen"] = self.hub_counts() if r["seen"] != self.a.cycle_files else None
        r["rss_full"] = rss_kb(self.bench.agent.pid)
        self.on_hub(os.unlink)
        t = time.monotonic()
        r["left"] = self.walk_churn()
        r["t_walk2"] = time.monotonic() - t
        r["hub_left"] = self.hub_counts() if r["left"] != 0 else None
        return r

    def mount_round(self, r):
        """Creates then unlinks the scratch files through the mount, timing each."""
        t = time.monotonic()
        r["creates"] = sorted(self.pool.map(timed(self.create), self.names))
        r["unlinks"] = sorted(self.pool.map(timed(self.unlink), self.names))
        r["t_mount"] = time.monotonic() - t

    def check_round(self, rows, c, r):
        """Rows for what a round saw wrong: ENOENT in a walk, or counts unlike the hub's."""
        if self.vanished:
            rows.add("cycle %d churn walk: ENOENT (entry or directory)" % (c + 1),
                     "%d, e.g. %s" % (len(self.vanished), self.vanished[0]))
            del self.vanished[:]
        if r["seen"] != self.a.cycle_files or r["left"] != 0:
            # The mount must show what the hub holds once the ttl has passed.
            rows.add("cycle %d churn walk MISMATCH" % (c + 1),
                     "saw %d of %d files (hub lists %s), %d left after removal (hub lists %s)"
                     % (r["seen"], self.a.cycle_files, counted(r["hub_seen"]), r["left"],
                        counted(r["hub_left"])))

    def log_round(self, c, r, rss):
        """The log line of one round."""
        a = self.a
        creates, unlinks = r["creates"], r["unlinks"]
        log("cycle %d: hub +%d files %.1f s; walk %d entries %.1f s (RSS %d MiB); hub "
            "removal, walk %d entries %.1f s; mount %d creates + unlinks %.1f s (median / "
            "max: create %s, unlink %s); agent RSS %d KiB"
            % (c + 1, a.cycle_files, r["t_hub"], r["seen"], r["t_walk"], r["rss_full"] // 1024,
               r["left"], r["t_walk2"], a.mount_files, r["t_mount"],
               spread(creates) if creates else "-", spread(unlinks) if unlinks else "-", rss))

    def first_round_rows(self, rows, r):
        """Cycle 1's latencies and rates."""
        a = self.a
        if r["creates"]:
            rows.add("mount create / unlink latency, cycle 1 (median / max)",
                     "%s, %s (%d threads, %d dirs)"
                     % (spread(r["creates"]), spread(r["unlinks"]), a.threads, a.mount_dirs))
            rows.add("mount creates + unlinks per second, cycle 1",
                     "%.0f" % (2 * a.mount_files / max(r["t_mount"], 1e-9)))
        rows.add("churn walk of %d hub-created files, cycle 1" % a.cycle_files,
                 "%.1f s (%d seen)" % (r["t_walk"], r["seen"]))

    def run(self, rows):
        """--cycles rounds, then the RSS rows."""
        cycle_rss = []
        for c in range(self.a.cycles):
            r = self.hub_round()
            self.mount_round(r)
            cycle_rss.append(rss_kb(self.bench.agent.pid))
            self.check_round(rows, c, r)
            self.log_round(c, r, cycle_rss[-1])
            if c == 0:
                self.first_round_rows(rows, r)
        if cycle_rss:
            rss_growth(rows, cycle_rss, self.a)
