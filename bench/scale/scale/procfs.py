"""The log line and what /proc says of a process."""

import os
import time

T0 = time.monotonic()


def log(msg):
    """A line on stdout with the seconds since the start."""
    print("[%7.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


def rss_kb(pid):
    """The process's resident set size (KiB)."""
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


def drop_caches():
    """Drops the kernel's page cache, dentries and inodes."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
