"""Logging, files, HTTP and /proc helpers."""

import os
import sys
import time
import urllib.request


class Failure(Exception):
    """A step failed; the message says which and why."""


def log(msg):
    """A timestamped line on stderr."""
    print(f"[two-region {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def tail(path, n):
    """The last n lines of a file ("" when unreadable)."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""



def http_get(url, timeout=2.0):
    """Body of a GET, or None when the server does not answer 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode(errors="replace") if r.status == 200 else None
    except OSError:
        return None


def drop_caches():
    """Syncs, then drops the page cache, dentries and inodes."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def is_mountpoint(path):
    """From /proc/mounts: a FUSE mount whose agent died fails stat() but is still there."""
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f if len(line.split()) > 1)


def machine_line():
    """Cores, RAM and kernel, for the logs and run.txt."""
    with open("/proc/meminfo") as f:
        kb = next(int(l.split()[1]) for l in f if l.startswith("MemTotal"))
    return f"{os.cpu_count()} cores, {kb / 1048576:.1f} GiB RAM, kernel {os.uname().release}"

