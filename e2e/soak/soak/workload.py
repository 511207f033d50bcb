"""The workload: a dataset on the hub, readers that check every byte against the file's
allowed versions, writers that append checksummed records and fsync each one."""
import collections
import errno
import hashlib
import os
import platform
import struct
import time
import zlib

# setgroups, setresgid, setresuid. glibc's wrappers change the credentials of every thread of
# the process; the raw system calls change only the calling thread's.
_CREDENTIAL_SYSCALLS = {"x86_64": (116, 119, 117), "aarch64": (159, 149, 147)}

RECORD_MAGIC = b"SPKR"
RECORD_HEADER = struct.Struct("<4sIQ")  # magic, payload length, sequence number
RECORD_TRAILER = struct.Struct("<I")    # crc32 of header + payload


def make_dataset(cluster, ledger, rng, files, max_kb):
    root = os.path.join(cluster.export, "dataset")
    os.makedirs(root)
    scratch = os.path.join(cluster.export, "scratch")
    os.makedirs(scratch)
    uid = cluster.args.caller_uid
    if uid:
        # The writers' own private directory, as a pod's runAsUser keeps its checkpoints: the
        # agent's own identity (hubUid) may not even list it, so every request the writers
        # need (lookups, creates, writes, fsyncs, reopens after a restart) must go as them.
        os.chown(scratch, uid, uid)
        os.chmod(scratch, 0o700)
    else:
        # Without allowRoot the hub sees root writers as hubUid 65534: like a real scratch
        # share, the directory is writable by everyone, sticky.
        os.chmod(scratch, 0o1777)
    names = []
    for i in range(files):
        # A few small files, many around a block, some several blocks long.
        size = rng.choice([rng.randint(0, 4096), rng.randint(4096, 1 << 20),
                           rng.randint(1 << 20, max_kb << 10)])
        name = "d%d/f%04d.bin" % (i % 4, i)
        if i % 4 == 3:  # partly cached: only ever read by pread, several blocks long
            name = "d3/p%04d.bin" % i
            size = rng.randint(2 << 20, max(2 << 20, max_kb << 10))
        data = rng.randbytes(size)
        os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        ledger.add_version(name, data)
        names.append(name)
    with ledger.lock:
        ledger.changed_at.clear()
    return names


def credential_syscalls():
    """This machine's numbers for _CREDENTIAL_SYSCALLS; None when not known."""
    return _CREDENTIAL_SYSCALLS.get(platform.machine())


def become_caller(uid, ledger):
    """Drops the calling thread (only: the fault driver stays root) to uid:gid `uid` with no
    supplementary groups, as a pod with runAsUser and runAsGroup. True when it now runs as
    `uid`; otherwise the failure is a violation. uid 0 stays root."""
    if uid == 0:
        return True
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    setgroups, setresgid, setresuid = credential_syscalls()
    for nr, a in ((setgroups, (0, None)), (setresgid, (uid, uid, uid)),
                  (setresuid, (uid, uid, uid))):
        if libc.syscall(nr, *a) != 0:
            ledger.add_violation("cannot switch a workload thread to uid %d: %s"
                                 % (uid, os.strerror(ctypes.get_errno())))
            return False
    if os.geteuid() != uid or os.getegid() != uid or os.getgroups():
        ledger.add_violation("workload thread runs as %d:%d %s, not uid %d"
                             % (os.geteuid(), os.getegid(), os.getgroups(), uid))
        return False
    return True


def reader(cluster, ledger, names, stop, rng):
    if not become_caller(cluster.args.caller_uid, ledger):
        return
    chunk = 128 << 10
    while not stop.is_set():
        name = rng.choice(names)
        path = os.path.join(cluster.ds_mnt, name)
        start = time.monotonic()
        with ledger.lock:
            cached_since = ledger.verified_at.get(name)
            if cached_since is not None and (ledger.changed_at.get(name, -1) > cached_since or
                                             ledger.last_flip > cached_since):
                cached_since = None
        op = "open"
        try:
            fd = ledger.timed("open", name, os.open, path, os.O_RDONLY)
            try:
                if rng.random() < 0.5 and not is_partial(name):
                    op = "read"
                    parts = []
                    while True:
                        b = ledger.timed("read", name, os.read, fd, chunk)
                        if not b:
                            break
                        parts.append(b)
                    data = b"".join(parts)
                    _, shas = ledger.allowed(name)
                    if hashlib.sha256(data).hexdigest() not in shas:
                        versions, _ = ledger.allowed(name)
                        ledger.add_violation(
                            "wrong bytes: %s read whole: %d bytes match none of its %d versions "
                            "(sizes %s; first difference from the latest at offset %s; by "
                            "block: %s)"
                            % (name, len(data), len(versions), [len(v) for v in versions],
                               first_diff(data, versions[-1]), describe_mix(data, 0, versions)))
                    else:
                        with ledger.lock:
                            ledger.bytes_verified += len(data)
                            ledger.reads_ok += 1
                            ledger.verified_at[name] = start
                else:
                    op = "pread"
                    versions, _ = ledger.allowed(name)
                    top = max(len(v) for v in versions) or 1
                    for _ in range(4):
                        off = rng.randrange(0, top + 1)
                        n = rng.randint(1, 256 << 10)
                        b = ledger.timed("pread", name, os.pread, fd, n, off)
                        versions, _ = ledger.allowed(name)
                        match = any(v[off:off + n] == b for v in versions)
                        err = None if match else error_after_short_read(
                            ledger, fd, name, b, off, versions)
                        if err is not None:
                            # Right bytes, then an error: the kernel returns what it copied
                            # before the error (page cache) as a short read; the error itself
                            # is classified (below).
                            raise err
                        if not match:
                            ledger.add_violation(
                                "wrong bytes: %s pread(%d bytes at %d) returned %d bytes that "
                                "match none of its %d versions (sizes %s; by block: %s)"
                                % (name, n, off, len(b), len(versions),
                                   [len(v) for v in versions], describe_mix(b, off, versions)))
                        else:
                            with ledger.lock:
                                ledger.bytes_verified += len(b)
                                ledger.reads_ok += 1
            finally:
                os.close(fd)
        except OSError as e:
            ledger.classify(op, name, e.errno, start, time.monotonic(), cached_since)
        # Leave CPU to the agent (checksumming warm reads would otherwise take both cores).
        time.sleep(rng.uniform(0.01, 0.05))


def error_after_short_read(ledger, fd, name, b, off, versions):
    """The error that ended a short read of right bytes: `b`, read at `off`, matches a version
    that has more there, and reading on from its end fails, or, the hub back by then, gives
    that version's next byte (the error was transient: an EIO for the pages after `b`, which
    the kernel turns into a short read). None otherwise; a short read at a false end of file
    (the next read returns nothing, or another byte) stays wrong bytes."""
    end = off + len(b)
    longer = [v for v in versions if v[off:end] == b and len(v) > end] if b else []
    if not longer:
        return None
    try:
        nxt = ledger.timed("pread", name, os.pread, fd, 1, end)
    except OSError as e:
        return e
    if nxt and any(v[end:end + 1] == nxt for v in longer):
        return OSError(errno.EIO, "short read: the pages after %d bytes failed, and the next "
                       "read at %d succeeded" % (len(b), end))
    return None


def is_partial(name):
    """Files only read at random offsets: some of their blocks are cached, others not, so a
    change on the hub can show up as a mix of old and new blocks."""
    return name.startswith("d3/p")


def describe_mix(data, off, versions, block=1 << 20):
    """Which version each 1 MiB-aligned piece of data (read at off) matches: e.g. 'v0 v1' is
    old bytes in the first block and new ones in the second (a mix); '-' matches none."""
    out = []
    pos = off
    while pos < off + len(data):
        end = min(off + len(data), (pos // block + 1) * block)
        piece = data[pos - off:end - off]
        hits = [str(i) for i, v in enumerate(versions) if v[pos:end] == piece]
        out.append("@%d:%s" % (pos, ("v" + "/v".join(hits)) if hits else "-"))
        pos = end
    return " ".join(out)


def first_diff(a, b):
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else None


class Writer:
    """Appends records to scratch files; after any error it starts a new file, so that each
    file is a run of whole records, possibly followed by one torn (unacknowledged) one."""

    def __init__(self, wid):
        self.wid = wid
        self.gen = 0
        self.acked = collections.defaultdict(list)  # file name -> [(seq, crc)]
        self.seq = 0

    def run(self, cluster, ledger, stop, rng):
        if not become_caller(cluster.args.caller_uid, ledger):
            return
        fd = None
        name = None
        while not stop.is_set():
            if fd is None:
                self.gen += 1
                name = "w%d-%04d.log" % (self.wid, self.gen)
                start = time.monotonic()
                try:
                    fd = ledger.timed("create", name, os.open, os.path.join(cluster.sc_mnt, name),
                                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                except OSError as e:
                    ledger.classify("create", name, e.errno, start, time.monotonic())
                    fd = None
                    time.sleep(0.2)
                    continue
            self.seq += 1
            payload = rng.randbytes(rng.randint(16, 64 << 10))
            header = RECORD_HEADER.pack(RECORD_MAGIC, len(payload), self.seq)
            crc = zlib.crc32(header + payload)
            record = header + payload + RECORD_TRAILER.pack(crc)
            start = time.monotonic()
            op = "write"
            try:
                n = ledger.timed("write", name, os.write, fd, record)
                if n != len(record):
                    raise OSError(errno.EIO, "short write %d of %d" % (n, len(record)))
                op = "fsync"
                ledger.timed("fsync", name, os.fsync, fd)
                self.acked[name].append((self.seq, crc))
                with ledger.lock:
                    ledger.records_acked += 1
                if len(self.acked[name]) >= 200:  # keep files small; start the next one
                    os.close(fd)
                    fd = None
            except OSError as e:
                ledger.classify(op, name, e.errno, start, time.monotonic())
                try:
                    os.close(fd)
                except OSError:
                    pass
                fd = None
            time.sleep(rng.uniform(0, 0.05))
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
