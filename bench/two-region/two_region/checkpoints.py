"""The checkpoint scenarios: training that saves a checkpoint every N batches (a synchronous
torch.save: the step waits for it) and loads the latest one at its start, with the
checkpoints on the local disk (local-direct-ckpt) or on a Spoke scratch volume over the WAN,
write-back (spoke-ckpt) or every write synchronous (spoke-ckpt-sync, the write mode before
write-back). The dataset is read as in local-direct and spoke-cold."""

import json
import os
import shutil
import subprocess
import sys

from .config import CKPT_LOCAL, CKPT_SCENARIOS, MIB
from .util import Failure, log, tail


class Checkpoints:
    """Experiment's checkpoint scenario methods."""

    def checkpoint_scenarios(self):
        """Every asked-for checkpoint scenario, the local baseline first."""
        for name in CKPT_SCENARIOS:
            if name in self.a.scenarios:
                self.checkpoint_scenario(name)

    def checkpoint_scenario(self, name):
        """One run: the previous run's checkpoint seeded where this run keeps them, then
        training that loads it and saves every --ckpt-every batches."""
        n = self.epochs(name)
        a = self.a
        log(f"scenario {name}: {n} epoch(s), a {a.ckpt_mib} MiB checkpoint loaded at the start "
            f"and saved every {a.ckpt_every} batches")
        sub = f"checkpoints-{name}"
        self.seed_checkpoint(f"{self.work}/{sub}" if name == CKPT_LOCAL else f"{self.export}/{sub}")
        if name == CKPT_LOCAL:
            t0 = self.measure("none", name, self.export, n,
                              *self.ckpt_flags(f"{self.work}/{sub}"))
            self.annotate(name, t0, wan_path="none")
        else:
            self.spoke_checkpoints(name, sub, n, "sync" if name.endswith("-sync") else "writeback")
        self.ckpt_done.append(name)

    def spoke_checkpoints(self, name, sub, epochs, write_mode):
        """The dataset through a cold Spoke mount, the checkpoints on a scratch mount of the
        hub's `sub` through the same agent and WAN."""
        data, ckpt = f"{self.work}/mnt-{name}", f"{self.work}/mnt-{name}-ckpt"
        self.start_agent(name, self.cache_bytes)
        m = self.mount(name, self.wan_url, data, "--prefetch", "auto")
        self.mount_scratch(name, self.wan_url_of(sub), ckpt, write_mode)
        t0 = self.measure(name, name, data, epochs, *self.ckpt_flags(ckpt))
        self.save_stats(name, data, name, metrics=True)
        self.unmount(name, ckpt)
        self.unmount(name, data)
        self.stop_agent(name)
        self.annotate(name, t0, mount_s=m, cache_size_bytes=self.cache_bytes,
                      write_mode=write_mode)

    def seed_checkpoint(self, where):
        """The checkpoint a previous run left (step 0), written to the disk directly."""
        shutil.rmtree(where, ignore_errors=True)
        os.makedirs(where)
        r = subprocess.run([self.loader_bin, "checkpoint", "--dir", where, "--mib",
                            str(self.a.ckpt_mib)], capture_output=True, text=True)
        if r.returncode != 0:
            raise Failure(f"seeding a checkpoint in {where} failed: {r.stderr.strip()}")
        os.sync()

    def ckpt_flags(self, where):
        """The loader's checkpoint flags."""
        return ["--checkpoint-dir", where, "--checkpoint-every", str(self.a.ckpt_every),
                "--checkpoint-mib", str(self.a.ckpt_mib)]

    def wan_url_of(self, sub):
        """The WAN URL of a sub-directory of the export."""
        path, _, query = self.wan_url.partition("?")
        return f"{path}/{sub}?{query}"

    def mount_scratch(self, name, url, target, write_mode):
        """A scratch (read-write) mount for root, the loader's user here."""
        os.makedirs(target, exist_ok=True)
        self.mounts.append(target)
        rc = self.ctl(name, "mount", url, target, "--mode", "scratch", "--write-mode",
                      write_mode, "--allow-root", output=f"{self.agent_dir(name)}/spokectl.log")
        if rc != 0:
            sys.stderr.write(tail(f"{self.agent_dir(name)}/spokectl.log", 20))
            raise Failure(f"scratch mount {name} failed (spokectl exit {rc})")

    def checkpoint_table(self):
        """The checkpoint scenarios' table (markdown), each against local-direct-ckpt."""
        rows = {}
        for name in self.ckpt_done:
            with open(f"{self.out}/{name}.json") as f:
                rows[name] = json.load(f)
        base = rows.get(CKPT_LOCAL)
        lines = [f"Checkpoints: {self.a.ckpt_mib} MiB, saved every {self.a.ckpt_every} batches "
                 "(write, fsync, close, rename, fsync of the directory; the step waits), the "
                 "latest loaded at the start.", "",
                 "| scenario | samples/s | vs local-direct-ckpt | saves | save s (mean / max) "
                 "| save MB/s | load s | share of the run in saves |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, j in rows.items():
            lines.append(checkpoint_row(name, j, base, self.a.ckpt_mib))
        return "\n".join(lines) + "\n"


def checkpoint_row(name, j, base, mib):
    """One scenario's row."""
    c = j.get("checkpoint", {})
    saves = c.get("save_s", [])
    mean = sum(saves) / len(saves) if saves else 0
    ratio = (f"{j['samples_per_s'] / base['samples_per_s']:.2f}x"
             if base and base.get("samples_per_s") else "-")
    load = c.get("load_s")
    save_mbps = f"{mib * MIB / mean / 1e6:.1f}" if mean > 0 else "-"
    share = f"{sum(saves) / j['total_time_s']:.0%}" if j.get("total_time_s") else "-"
    return (f"| {name} | {j['samples_per_s']:.1f} | {ratio} | {len(saves)} | "
            f"{mean:.2f} / {max(saves, default=0):.2f} | {save_mbps} | "
            f"{'-' if load is None else f'{load:.2f}'} | {share} |")
