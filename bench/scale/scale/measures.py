"""The tree walk and the big directory, measured through the mounts."""

import os
import time

from .procfs import cpu_s, drop_caches, rss_kb
from .tree import walk


def read_only_flags(a):
    """spokectl mount flags of the tree and big-directory volumes."""
    return ("--mode", "dataset", "--consistency", "immutable", "--read-only", "--hub-timeout",
            str(a.hub_timeout))


def timed_row(rows, what, fn, fmt="%.2f s"):
    """Times fn; a failure is a result too (e.g. a listing beyond the hub timeout)."""
    t = time.monotonic()
    try:
        fn()
        rows.add(what, fmt % (time.monotonic() - t))
    except OSError as e:
        rows.add(what, "FAILED after %.1f s: %s" % (time.monotonic() - t, e.strerror))


def measure_walk(bench, rows, rss0):
    """The walk: from the mount until every entry was listed and stat'ed through FUSE. The
    agent walks the tree in the background after mounting (and exposes no figure for it), so
    this includes waiting for its walk."""
    t = time.monotonic()
    tree_mnt = bench.mount("tree", *read_only_flags(bench.a))
    entries, dirs = walk(tree_mnt)
    walk_s = time.monotonic() - t
    rss1 = rss_kb(bench.agent.pid)
    rows.add("walk from mount (%d entries, %d dirs)" % (entries, dirs), "%.1f s" % walk_s)
    t = time.monotonic()
    walk(tree_mnt)
    rows.add("walk again (warm)", "%.2f s" % (time.monotonic() - t))
    rows.add("agent RSS before mount / after walk",
             "%d / %d MiB" % (rss0 // 1024, rss1 // 1024))
    rows.add("RSS per cached inode (goal <= 300 B)",
             "%.0f B" % ((rss1 - rss0) * 1024 / max(1, entries)))


def measure_big_dir(bench, rows):
    """The big directory, in a volume of its own: a stat inside it right after mounting
    (cold), `ls`, and a stat after the listing."""
    n = bench.a.big_dir
    big_mnt = bench.mount("big", *read_only_flags(bench.a))
    if not n:
        return
    pid = bench.agent.pid
    timed_row(rows, "stat in big dir (cold, %d entries)" % n,
              lambda: os.lstat(os.path.join(big_mnt, "e%07d" % (n // 2))))
    cpu0 = cpu_s(pid)
    timed_row(rows, "ls big dir (%d entries)" % n, lambda: os.listdir(big_mnt))
    rows.add("agent CPU during that ls", "%.2f s" % (cpu_s(pid) - cpu0))
    # Again with the kernel's dentries, inodes and cached listing dropped: the agent answers
    # from its own listing, so this is the FUSE side of the `ls` alone (the rest of the first
    # is the hub's listing through the WAN).
    drop_caches()
    timed_row(rows, "ls big dir again (agent's listing cached, kernel's dropped)",
              lambda: os.listdir(big_mnt))
    timed_row(rows, "stat in big dir (after ls)",
              lambda: os.lstat(os.path.join(big_mnt, "e%07d" % (n // 3))), "%.3f s")
    rows.add("agent RSS after the big dir", "%d MiB" % (rss_kb(pid) // 1024))
