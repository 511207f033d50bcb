"""The fault driver: one fault at a time on the WAN, the hub, the cache or the agent."""
import os
import time

from .workload import is_partial

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

