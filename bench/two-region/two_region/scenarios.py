"""The single-node scenarios (--nodes 1), one agent at a time."""

import contextlib
import os
import shutil
import subprocess
import threading
import time

from .config import HALF_CACHE, HALF_FRACTION, HALF_POLICY, MIB, MIN_CACHE
from .util import Failure, is_mountpoint, log


class Scenarios:
    """Experiment's scenario methods."""

    def local_direct(self):
        """The loader on the dataset's directory on the local disk (the hub's export, read
        by the loader itself): no FUSE, no NFS, no WAN."""
        n = self.epochs("local-direct")
        log(f"scenario local-direct: the loader on {self.export} directly, {n} epoch(s)")
        t0 = self.measure("none", "local-direct", self.export, n)
        self.annotate("local-direct", t0, wan_path="none")
        self.done.append("local-direct")

    def co_located(self):
        """Spoke on the hub directly (no WAN)."""
        n = self.epochs("co-located")
        log(f"scenario co-located: agent on the hub directly, cache + prefetch auto, "
            f"{n} epochs")
        mnt = f"{self.work}/mnt-co-located"
        self.start_agent("co-located", self.cache_bytes)
        m = self.mount("co-located", self.direct_url, mnt, "--prefetch", "auto")
        t0 = self.measure("co-located", "co-located", mnt, n)
        self.save_stats("co-located", mnt, "co-located")
        self.unmount("co-located", mnt)
        self.stop_agent("co-located")
        self.annotate("co-located", t0, mount_s=m, cache_size_bytes=self.cache_bytes,
                      wan_path="direct")
        self.done.append("co-located")

    def remote_no_spoke(self):
        """Same mount path, prefetch off, strict consistency, minimal cache."""
        n = self.epochs("remote-no-spoke")
        sample = self.a.nospoke_batches
        log(f"scenario remote-no-spoke: WAN, prefetch off, strict, cache {MIN_CACHE} bytes "
            f"(agent minimum), {n} epoch(s)" + (f" of {sample} batches" if sample else ""))
        mnt = f"{self.work}/mnt-remote-no-spoke"
        self.start_agent("remote-no-spoke", MIN_CACHE, MIB)
        m = self.mount("remote-no-spoke", self.wan_url, mnt, "--prefetch", "off",
                       "--consistency", "strict")
        extra = ["--max-batches", str(sample)] if sample else []
        t0 = self.measure("remote-no-spoke", "remote-no-spoke", mnt, n, *extra)
        self.save_stats("remote-no-spoke", mnt, "remote-no-spoke")
        self.unmount("remote-no-spoke", mnt)
        self.stop_agent("remote-no-spoke")
        self.annotate("remote-no-spoke", t0, mount_s=m, cache_size_bytes=MIN_CACHE,
                      sample_batches=sample)
        self.done.append("remote-no-spoke")

    def spoke_cold_warm(self, cold, warm):
        """Cold cache, several epochs; then warm after an agent restart."""
        mnt = f"{self.work}/mnt-spoke"
        log(f"scenario spoke-cold: WAN, Spoke (prefetch auto), empty cache, "
            f"{self.epochs('spoke-cold')} epochs")
        self.start_agent("spoke", self.cache_bytes)
        m = self.mount("spoke", self.wan_url, mnt, "--prefetch", "auto")
        t0 = self.measure("spoke", "spoke-cold", mnt, self.epochs("spoke-cold"))
        self.save_stats("spoke", mnt, "spoke-cold", metrics=True)
        self.annotate("spoke-cold", t0, mount_s=m, cache_size_bytes=self.cache_bytes)
        if cold:
            self.done.append("spoke-cold")
        warm_epochs = self.epochs("spoke-warm")
        if warm and warm_epochs > 0:
            log(f"scenario spoke-warm: agent restarted on the same cacheDir/stateDir, "
                f"{warm_epochs} epochs")
            self.stop_agent("spoke")
            t = time.monotonic()
            restored = self.restart_spoke(mnt)
            m = time.monotonic() - t
            t0 = self.measure("spoke", "spoke-warm", mnt, warm_epochs)
            self.save_stats("spoke", mnt, "spoke-warm")
            self.annotate("spoke-warm", t0, mount_s=m, cache_size_bytes=self.cache_bytes,
                          mount_restored=int(restored))
            self.done.append("spoke-warm")
        self.unmount("spoke", mnt)
        self.stop_agent("spoke")

    def restart_spoke(self, mnt):
        """Starts the spoke agent again; whether it restored the mount (else mounts again)."""
        self.start_agent("spoke", self.cache_bytes)
        # The mount comes back from stateDir/mounts.json; mount explicitly if it does not.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.path.isfile(f"{mnt}/MANIFEST") and is_mountpoint(mnt):
                return True
            time.sleep(0.1)
        log("the restarted agent did not restore the mount within 10 s; mounting again")
        self.force_unmount(mnt)
        self.mount("spoke", self.wan_url, mnt, "--prefetch", "auto")
        return False

    def stage_in(self):
        """Copy over the WAN (parallel cp streams through a Spoke mount with prefetch off and
        a cold minimal cache), then train from the local copy."""
        a = self.a
        log(f"scenario stage-in: copy over the WAN with {a.stage_streams} cp streams, then "
            f"{self.epochs('stage-in')} epochs locally")
        mnt = f"{self.work}/mnt-stage"
        local = f"{self.work}/local-copy"
        trace = f"{self.out}/stage-in.trace"
        self.start_agent("stage", MIN_CACHE, MIB)
        m = self.mount("stage", self.wan_url, mnt, "--prefetch", "off")
        shutil.rmtree(local, ignore_errors=True)
        os.makedirs(local)
        open(trace, "w").close()
        s = self.start_sampler("stage", trace)
        t = time.monotonic()
        self.stage_copy(mnt, local)
        stage_s = time.monotonic() - t
        log(f"stage-in copy: {stage_s:.2f} s")
        # The agent's counters stop with it: keep sampling the proxy only while training.
        self.stop_thread(s)
        self.unmount("stage", mnt)
        self.stop_agent("stage")
        os.sync()
        t0 = self.measure("none", "stage-in", local, self.epochs("stage-in"))
        # The trace's hub column ends with "-" after the agent stopped; annotate uses the proxy's.
        self.annotate("stage-in", t0, mount_s=m, stage_in_s=stage_s,
                      stage_streams=a.stage_streams, cache_size_bytes=MIN_CACHE)
        shutil.rmtree(local, ignore_errors=True)
        self.done.append("stage-in")

    def stage_copy(self, mnt, local):
        """Copies the dataset from mnt to local with --stage-streams parallel cp."""
        with open(f"{mnt}/MANIFEST") as f:
            paths = [w[0] for w in (l.split() for l in f if not l.startswith("#"))
                     if len(w) >= 2]
        # Directories first (parallel `cp --parents` races on mkdir), then the files.
        for d in sorted({os.path.dirname(p) for p in paths if "/" in p}):
            os.makedirs(f"{local}/{d}", exist_ok=True)
        # xargs in its own process group, so that cleanup ends it and every cp at once.
        cp = subprocess.Popen(["xargs", "-d", "\n", "-P", str(self.a.stage_streams), "-n", "64",
                               "cp", "--parents", "-t", local], cwd=mnt, stdin=subprocess.PIPE,
                              start_new_session=True)
        self.procs.append(cp)
        cp.communicate("\n".join(["MANIFEST", *paths]).encode() + b"\n")
        self.procs.remove(cp)
        if cp.returncode != 0:
            raise Failure(f"stage-in copy failed (exit {cp.returncode})")

    def spoke_hints(self):
        """Spoke with hints, cold cache."""
        mnt = f"{self.work}/mnt-hints"
        self.start_agent("hints", self.cache_bytes)
        m = self.mount("hints", self.wan_url, mnt, "--prefetch", "auto")
        control = f"{mnt}/.spoke-hints"
        feeder = None
        channel = None
        if os.path.exists(control):
            # The control file must take a write (an empty one) on this read-only mount.
            try:
                open(control, "w").close()
                channel, hints_file = "control-file", control
            except OSError:
                log("the agent's .spoke-hints refuses writes; using spokectl hint")
        if channel is None:
            # The loader writes each epoch's order into a FIFO before starting the epoch's
            # workers; the feeder hands it to `spokectl hint` (an agent API call).
            channel, hints_file = "spokectl", f"{self.work}/hints.fifo"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(hints_file)
            os.mkfifo(hints_file)
            feeder = self.start_hint_feeder(mnt, hints_file)
        log(f"scenario spoke-hints: WAN, Spoke, empty cache, hints via {channel}, "
            f"{self.epochs('spoke-hints')} epochs")
        t0 = self.measure("hints", "spoke-hints", mnt, self.epochs("spoke-hints"), "--hints-file",
                          hints_file)
        if feeder:
            self.stop_hint_feeder(feeder, hints_file)
        self.save_stats("hints", mnt, "spoke-hints", metrics=True)
        self.unmount("hints", mnt)
        self.stop_agent("hints")
        self.annotate("spoke-hints", t0, mount_s=m, cache_size_bytes=self.cache_bytes,
                      hint_channel=channel)
        self.done.append("spoke-hints")

    def half_cache(self):
        """Spoke over the WAN with a cache half the dataset's size and the nothrash policy."""
        n = self.epochs(HALF_CACHE)
        log(f"scenario {HALF_CACHE}: WAN, Spoke, empty cache of {self.half_cache_bytes} bytes "
            f"({HALF_FRACTION:g} x the dataset), evictionPolicy {HALF_POLICY}, {n} epochs")
        mnt = f"{self.work}/mnt-half"
        self.start_agent("half", self.half_cache_bytes, policy=HALF_POLICY)
        m = self.mount("half", self.wan_url, mnt, "--prefetch", "auto")
        t0 = self.measure("half", HALF_CACHE, mnt, n)
        self.save_stats("half", mnt, HALF_CACHE, metrics=True)
        self.unmount("half", mnt)
        self.stop_agent("half")
        self.annotate(HALF_CACHE, t0, mount_s=m, cache_size_bytes=self.half_cache_bytes,
                      eviction_policy=HALF_POLICY)
        self.done.append(HALF_CACHE)

    def start_hint_feeder(self, mnt, fifo):
        """A thread handing each epoch's order the loader writes into fifo to `spokectl
        hint`."""
        stop = threading.Event()
        epoch_file = f"{self.work}/hints.epoch"
        hints_log = f"{self.out}/spoke-hints.hints.log"

        def loop():
            i = 0
            while not stop.is_set():
                with open(fifo, "rb") as f:  # blocks until the loader opens it
                    data = f.read()
                if stop.is_set():
                    break
                if not data.strip():
                    continue
                i += 1
                with open(epoch_file, "wb") as f:
                    f.write(data)
                with open(hints_log, "a") as f:
                    lines = data.count(b"\n")
                    f.write(f"epoch order {i}: {lines} paths at {time.time():.6f}\n")
                self.ctl("hints", "hint", mnt, epoch_file, output=hints_log)

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        entry = (stop, t)
        self.threads.append(entry)
        return entry

    def stop_hint_feeder(self, entry, fifo):
        """Stops the feeder, also while it waits for the loader to open the FIFO."""
        stop, t = entry
        stop.set()
        # Wakes a feeder blocked in open(fifo): a writer that opens and closes at once.
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # ENXIO: nobody is reading, the feeder is not in open()
        t.join(5)
        if entry in self.threads:
            self.threads.remove(entry)
