"""What happened during the soak: faults (intervals), errors and their causes, calls' durations,
violations."""
import dataclasses
import hashlib
import os
import threading
import time

FAULT_KINDS = ["latency", "bandwidth", "reset", "blackhole", "hub-restart", "hub-replace",
               "hub-truncate", "hub-rename", "cache-flip", "agent-kill"]
# Faults during which the hub may legitimately be unreachable (or too slow to answer in time).
HUB_FAULTS = {"latency", "bandwidth", "reset", "blackhole", "hub-restart"}


def log(msg):
    print("[%7.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


T0 = time.monotonic()


@dataclasses.dataclass
class Fault:
    kind: str
    start: float
    end: float = float("inf")
    detail: str = ""


class Ledger:
    """Thread-safe record of faults, per-path versions and outcomes."""

    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.faults = []
        self.versions = {}        # dataset path -> list of allowed contents (bytes)
        self.version_sha = {}     # dataset path -> set of sha256 hex
        self.changed_at = {}      # dataset path -> time of the last hub change
        self.verified_at = {}     # dataset path -> time of the last full verified read
        self.last_flip = -1.0
        self.errors = []          # (cause, op, path, errno, start, end)
        self.violations = []
        self.bytes_verified = 0
        self.reads_ok = 0
        self.records_acked = 0
        self.hidden_records = 0
        self.checksum_failures = None
        self.longest = (0.0, "")
        self.inflight = {}        # thread id -> (op, path, start)

    def add_violation(self, msg):
        with self.lock:
            self.violations.append(msg)
        log("VIOLATION: " + msg)

    def begin_fault(self, kind, detail=""):
        f = Fault(kind, time.monotonic(), detail=detail)
        with self.lock:
            self.faults.append(f)
        log("fault %-12s %s" % (kind, detail))
        return f

    def end_fault(self, f):
        with self.lock:
            f.end = time.monotonic()

    def add_version(self, path, data):
        with self.lock:
            self.versions.setdefault(path, []).append(data)
            self.version_sha.setdefault(path, set()).add(hashlib.sha256(data).hexdigest())
            self.changed_at[path] = time.monotonic()

    def allowed(self, path):
        with self.lock:
            return list(self.versions[path]), set(self.version_sha[path])

    def timed(self, op, path, fn, *a):
        """Runs one read/write call, recording its duration."""
        tid = threading.get_ident()
        start = time.monotonic()
        with self.lock:
            self.inflight[tid] = (op, path, start)
        try:
            return fn(*a)
        finally:
            d = time.monotonic() - start
            with self.lock:
                del self.inflight[tid]
                if d > self.longest[0]:
                    self.longest = (d, "%s %s" % (op, path))
            if d > self.args.request_bound:
                self.add_violation("%s %s took %.1f s (bound %.1f s)"
                                   % (op, path, d, self.args.request_bound))

    def classify(self, op, path, err, start, end, cached_since=None):
        """Names the cause of an error from the faults active around [start, end]."""
        grace = self.args.request_bound
        with self.lock:
            active = [f for f in self.faults if f.start <= end and f.end + grace >= start]
            changed = self.changed_at.get(path, float("inf")) <= end
        kinds = {f.kind for f in active}
        # A file replaced under an immutable volume breaks the volume's contract: an error on
        # it is a fair answer (never a mix of versions), whatever else happened around it.
        # A hub fault explains an error that needs the hub whether or not the agent was also
        # restarted around it (a restart that mounts survive causes none by itself).
        if changed:
            cause = "hub-changed"
        elif kinds & HUB_FAULTS:
            hub = sorted(kinds & HUB_FAULTS)[0]
            cached = (cached_since is not None and
                      all(f.start > cached_since for f in active if f.kind in HUB_FAULTS))
            cause = ("cached-read-failed:" if cached else "hub-unreachable:") + hub
        elif "agent-kill" in kinds:
            cause = "agent-restart"
        elif "cache-flip" in kinds:
            cause = "cache-flip"
        else:
            cause = "no-fault"
        with self.lock:
            self.errors.append((cause, op, path, err, start, end))
        expected = cause.startswith("hub-unreachable") or cause == "hub-changed" or (
            cause == "agent-restart" and not self.args.strict_agent_restart)
        if cause.startswith("cached-read-failed") and self.args.allow_cached_read_errors:
            expected = True
        if not expected:
            self.add_violation("%s %s failed (%s) with cause %s (faults around it: %s)"
                               % (op, path, os.strerror(err) if err else "?", cause,
                                  ",".join(sorted(kinds)) or "none"))
        return cause

