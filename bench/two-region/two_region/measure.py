"""Measuring a scenario: the trace samplers, loader runs, summaries and agent stats."""

import os
import sys
import threading
import time

import annotate

from .config import SEED
from .util import Failure, drop_caches, log, tail


class Measure:
    """Experiment's sampling and loader methods."""

    def start_sampler(self, name, trace):
        """"<wall> <wan up> <wan down> <agent hub bytes>" every 0.5 s into trace."""
        stop = threading.Event()

        def sample(f):
            hub = self.hub_bytes(name)
            up, down = self.wan_stats()
            f.write(f"{time.time():.6f} {up} {down} {'-' if hub is None else f'{hub:.0f}'}\n")
            f.flush()

        def loop():
            with open(trace, "a") as f:
                while not stop.is_set():
                    sample(f)
                    stop.wait(0.5)
                time.sleep(0.5)  # the proxy rewrites its stats file every 200 ms
                sample(f)

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        entry = (stop, t)
        self.threads.append(entry)
        return entry

    def stop_thread(self, entry):
        """Stops a sampler or feeder thread and forgets it."""
        stop, t = entry
        stop.set()
        t.join(5)
        if entry in self.threads:
            self.threads.remove(entry)

    def run_loader(self, label, data_dir, epochs, *extra):
        """Drops the page cache, runs the loader, returns its start time (wall clock)."""
        drop_caches()
        t0 = time.time()
        p = self.spawn([*self.loader_argv(label, data_dir, epochs), *extra],
                       f"{self.out}/{label}.log")
        self.loader_done(label, p, p.wait(), 12)
        return t0

    def loader_argv(self, label, data_dir, epochs):
        """spoke-loader run over data_dir, its summary and CSV into the results."""
        return [self.loader_bin, "run", "--dir", data_dir, "--epochs", str(epochs),
                "--seed", str(SEED), "--drop-cache", "--label", label,
                "--json", f"{self.out}/{label}.json", "--csv", f"{self.out}/{label}.csv",
                *self.compute_flags()]

    def loader_done(self, label, p, rc, log_lines):
        """Checks a finished loader's exit and summary, echoes the end of its log."""
        self.procs.remove(p)
        if rc != 0:
            log(f"loader {label} exited {rc} (read errors?) -- see {self.out}/{label}.log")
            self.loader_failed = True
        if not os.path.isfile(f"{self.out}/{label}.json"):
            raise Failure(f"loader {label} wrote no summary; log: "
                          f"{tail(f'{self.out}/{label}.log', 5)}")
        for line in tail(f"{self.out}/{label}.log", log_lines).splitlines():
            print(f"    [{label}] {line}", file=sys.stderr)

    def compute_flags(self):
        """--compute-ms for the loader when one is set."""
        return [] if self.a.compute_ms is None else ["--compute-ms", f"{self.a.compute_ms:g}"]

    def epochs(self, scenario):
        """The scenario's epochs (options and preset)."""
        return self.a.epochs_of[scenario]

    def annotate(self, label, t0, **fields):
        """Adds the trace's figures and `fields` to the loader's JSON summary (annotate.py)."""
        base = {"dataset_bytes": self.dataset_bytes, "dataset_files": self.dataset_files,
                "dataset_footprint_bytes": self.footprint_bytes,
                "cache_basis": self.a.cache_basis, "cache_basis_bytes": self.basis_bytes}
        sets = []
        for k, v in {**base, **fields}.items():
            sets += ["--set", f"{k}={v}"]
        o = f"{self.out}/{label}"
        rc = annotate.main(["--json", f"{o}.json", "--csv", f"{o}.csv",
                            "--trace", f"{o}.trace", "--t0", repr(t0), *sets])
        if rc:
            raise Failure(f"annotate {label} failed")

    def measure(self, name, label, data_dir, epochs, *extra):
        """Loader run with the trace sampler around it; returns the loader's start time."""
        s = self.start_sampler(name, f"{self.out}/{label}.trace")
        try:
            return self.run_loader(label, data_dir, epochs, *extra)
        finally:
            self.stop_thread(s)

    def save_stats(self, name, target, label, metrics=False):
        """<label>.stats.txt (spokectl stats); with metrics, <label>.metrics.txt too,
        and returns that body."""
        self.ctl(name, "stats", target, output=f"{self.out}/{label}.stats.txt")
        if metrics:
            body = self.agent_get(name, "/metrics")
            if body is not None:
                with open(f"{self.out}/{label}.metrics.txt", "w") as f:
                    f.write(body)
            return body
        return None
