#!/usr/bin/env python3
"""Opens of cached files through a Spoke dataset mount: root (whom the hub takes for the agent
itself: no open record) against a uid-1000 caller (each read-only open keeps its opener in the
mount's state directory so that a restarted agent reads as it), in one run on one agent.

  open_bench.py [--build-dir build/dev] [--files 2000] [--rounds 5] [--delay-ms 30]

The files are read once first (cached); then each caller opens, reads 1 byte and closes every
file, --rounds times, alternating callers. Prints opens/s per caller (median of the rounds)
and the ratio. Needs root and /dev/fuse.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "common"))
import spokebench  # noqa: E402


def open_all(paths):
    start = time.monotonic()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.read(fd, 1)
        os.close(fd)
    return len(paths) / (time.monotonic() - start)


def open_all_as(uid, paths):
    """open_all in a child that runs as `uid`; its rate through a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        os.write(w, repr(open_all(paths)).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        rate = float(f.read())
    os.waitpid(pid, 0)
    return rate


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build/dev"))
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--delay-ms", type=int, default=30)
    a = p.parse_args()
    rig = spokebench.AgentRig(a.build_dir, "spoke-open-bench-", a.delay_ms)
    try:
        os.chmod(rig.work, 0o755)  # uid 1000 walks to the mount
        rig.start("socket: %s\ncacheDir: %s/cache\ncacheSizeBytes: 1Gi\nstateDir: %s/state\n"
                  "mountRoots: [%s]\nmetricsAddress: \"\"\nlogLevel: warn\n"
                  "fuseKeeperSocket: %s/keeper.sock\n"
                  % (rig.sock, rig.work, rig.work, rig.work, rig.work))
        data = os.path.join(rig.export, "data")
        os.makedirs(data)
        for i in range(a.files):
            with open(os.path.join(data, "f%05d" % i), "wb") as f:
                f.write(os.urandom(4096))
        target = os.path.join(rig.work, "mnt")
        os.makedirs(target)
        rig.ctl("mount", rig.url % "data", target, "--mode", "dataset")
        rig.mounts.append(target)
        paths = [os.path.join(target, "f%05d" % i) for i in range(a.files)]
        open_all(paths)  # cache every file and its metadata
        rates = {"root": [], "uid 1000": []}
        for _ in range(a.rounds):
            rates["root"].append(open_all_as(0, paths))
            rates["uid 1000"].append(open_all_as(1000, paths))
        records = len(os.listdir(os.path.join(rig.work, "state")))
        med = {k: statistics.median(v) for k, v in rates.items()}
        print("| caller | opens/s (median of %d rounds of %d files) | vs root |" % (a.rounds,
                                                                                    a.files))
        print("|---|---:|---:|")
        for k, v in med.items():
            print("| %s | %.0f | %.2fx |" % (k, v, v / med["root"]))
        print("state directory entries after the runs: %d" % records)
    finally:
        rig.cleanup()
        # The agent started a detached keeper on the run's socket: it would outlive the run.
        subprocess.run(["pkill", "-f", "--", "--socket %s/keeper.sock" % rig.work],
                       capture_output=True)


if __name__ == "__main__":
    main()
