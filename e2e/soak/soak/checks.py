"""The checks: the final pass over the dataset, acknowledged records against the hub's export,
the watchdog that ends a hung soak, and the summary."""
import collections
import errno
import hashlib
import json
import os
import sys
import threading
import time
import zlib

from .ledger import log
from .workload import RECORD_HEADER, RECORD_MAGIC, RECORD_TRAILER, describe_mix


def final_pass(cluster, ledger, names):
    """With every fault over, each dataset file must read back whole as one of its versions."""
    if cluster.agent.poll() is not None:
        ledger.add_violation("the agent is not alive at the end (exit %s)"
                             % cluster.agent.returncode)
        return
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


def lost_records(writer, scratch_dir, bare_dir, ledger):
    """Reads `writer`'s files from the hub's export directly: no acked record lost.
    bare_dir is the scratch mountpoint with nothing mounted on it: a file found there was
    written while no FUSE mount covered the path (the agent's restart window). A non-root
    writer's files must belong to it on the hub: its requests went as the caller."""
    lost = 0
    uid = ledger.args.caller_uid
    for name, acked in writer.acked.items():
        try:
            with open(os.path.join(scratch_dir, name), "rb") as f:
                data = f.read()
                owner = os.fstat(f.fileno()).st_uid
            if uid and owner != uid:
                ledger.add_violation("%s belongs to uid %d on the hub, not to its writer's uid %d"
                                     % (name, owner, uid))
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
            cluster.launcher.run(["umount", "-l", mnt], timeout=30)
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
    print("workload uid:      %d" % args.caller_uid)
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
                      "caller_uid": args.caller_uid, "records_acked": ledger.records_acked,
                      "lost": lost, "violations": len(ledger.violations)}))

