"""Spoke fault soak: readers and writers on real FUSE mounts while faults are injected.

  soak.py [--build-dir DIR] [--duration 120] [--seed N] [--strict-agent-restart]
          [--faults KIND,...] [--exclude-faults KIND,...] [--caller-uid 1000] [--keep-workdir]

Starts its own nfs-ganesha hub, spoke-wan-proxy (30 ms each way) with a fault-control socket
and spoke-cache-agent, mounts a read-only dataset volume and a scratch volume with spokectl,
then runs readers (every byte checked against a manifest of allowed file versions) and
writers (checksummed records, each acknowledged once its fsync returned) as a non-root uid,
and a fault driver as root. At the end it checks the invariants (see README.md) and exits 1
on any violation, 77 when it cannot run here (not root, no /dev/fuse, binaries not built), 0
otherwise.
"""
import argparse
import collections
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from .checks import final_pass, lost_records, report, start_watchdog, tail_log
from .cluster import Cluster
from .faults import drive_faults
from .ledger import FAULT_KINDS, Ledger, log
from .workload import Writer, credential_syscalls, make_dataset, reader


def parse_args():
    source = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                           "../../.."))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default=os.path.join(source, "build/dev"))
    p.add_argument("--source-dir", default=source)
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
    p.add_argument("--caller-uid", type=int, default=1000,
                   help="uid (and gid) the readers and writers run as, as a pod's runAsUser; "
                        "0: root (default 1000)")
    p.add_argument("--nfs-version", default="3", choices=("3", "4.1"),
                   help="the protocol the agent speaks to the hub (default 3; 4.1 as to EFS)")
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


def skip_reason(args):
    """Why this machine cannot run the soak, or None."""
    if os.geteuid() != 0 or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "needs root and /dev/fuse"
    if args.caller_uid and credential_syscalls() is None:
        return ("no per-thread uid switch known on %s (--caller-uid 0 runs the workload as "
                "root)" % platform.machine())
    return None


def start_cluster(cluster, ledger, rng, args):
    """Hub, dataset, WAN proxy, keeper, agent and mounts; returns the dataset's names."""
    cluster.start_hub()
    names = make_dataset(cluster, ledger, rng, args.files, args.max_file_kb)
    cluster.start_proxy()
    cluster.start_keeper()
    cluster.write_agent_config()
    cluster.start_agent()
    cluster.mount()
    log("hub ports %s, proxy %d/%d, agent pid %d; dataset %d files"
        % (cluster.hub_ports, cluster.wan_nfs, cluster.wan_mnt, cluster.agent.pid, len(names)))
    return names


def run_workload(cluster, ledger, names, writers, counts, rng, args):
    """Readers and writers for the whole duration, faults between a warm-up (readers fill the
    cache) and a quiet tail (recovery); then every request must have ended."""
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
    warmup = min(15.0, args.duration * 0.15)
    tail = max(15.0, args.request_bound)
    time.sleep(warmup)
    driver = threading.Thread(target=drive_faults, daemon=True, args=(
        cluster, ledger, names, args.kinds, end_at - tail, random.Random(rng.random()), counts))
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


def check_outcome(cluster, ledger, names, writers, args):
    """The final reads, the writers' records on the hub and the memory budget; returns the
    number of acknowledged records lost."""
    final_pass(cluster, ledger, names)
    # Unmount the scratch volume so that its bare mountpoint can be looked at.
    r = cluster.spokectl("unmount", cluster.sc_mnt, timeout=60)
    if r.returncode != 0:
        ledger.add_violation("spokectl unmount %s failed: %s%s"
                             % (cluster.sc_mnt, r.stdout, r.stderr))
        cluster.launcher.run(["umount", "-l", cluster.sc_mnt], timeout=30)
    lost = sum(lost_records(w, os.path.join(cluster.export, "scratch"), cluster.sc_mnt, ledger)
               for w in writers)
    if cluster.rss_max_kb / 1024 > args.rss_budget_mb:
        ledger.add_violation("agent RSS peaked at %.0f MiB, budget %.0f MiB"
                             % (cluster.rss_max_kb / 1024, args.rss_budget_mb))
    # Since the last agent start: the flips it detected (the rest were never re-read).
    ledger.checksum_failures = cluster.metric("spoke_checksum_failures_total")
    return lost


def main():
    args = parse_args()
    reason = skip_reason(args)
    if reason:
        print("soak: SKIP: " + reason, file=sys.stderr)
        return 77
    # Files the hub serves are world-readable, whatever umask the soak was started with.
    os.umask(0o022)
    work = tempfile.mkdtemp(prefix="spoke-soak-")
    # The non-root workload must reach the mounts under it (mkdtemp made it 0700).
    os.chmod(work, 0o755)
    cluster = Cluster(args, work)
    cluster.hub_ports = []
    if cluster.missing():
        print("soak: SKIP: not built: " + ", ".join(cluster.missing()), file=sys.stderr)
        os.rmdir(work)
        return 77
    ledger = Ledger(args)
    rng = random.Random(args.seed)
    log("seed %d, duration %.0f s, faults %s, request bound %.0f s, workload as uid %d, "
        "work dir %s" % (args.seed, args.duration, ",".join(args.kinds), args.request_bound,
                         args.caller_uid, work))
    counts = collections.Counter()
    writers = [Writer(i) for i in range(args.writers)]
    ok = False
    try:
        names = start_cluster(cluster, ledger, rng, args)
        start_watchdog(args, cluster, ledger, work)
        run_workload(cluster, ledger, names, writers, counts, rng, args)
        lost = check_outcome(cluster, ledger, names, writers, args)
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
