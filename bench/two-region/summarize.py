#!/usr/bin/env python3
"""Turns spoke-loader --json summaries into the two-region results table (markdown).

    summarize.py co-located.json remote-no-spoke.json spoke-cold.json ... > results.md
    summarize.py --wan spoke-cold=1.2e9 --stage-in stage-in=41.5 *.json
    summarize.py --targets *.json          # also: the issue's targets, met or missed

First table (when a `local-direct` row is given): per scenario, epoch 1 (cold) time and its
speed ratio to local-direct's epoch 1 (local time / scenario time: 1.00 = as fast as reading
a local copy directly) and to co-located's, the steady epochs' ratio (epochs 2.., or every
epoch where all are warm: local-direct, spoke-warm, stage-in's training), the warm-up (batches
of epoch 1 before the first full 10-batch window at 95 % of local-direct's steady rate) and
the bytes read from the hub per epoch (the agent's counter; the WAN proxy's where there is
no agent: stage-in's first epoch then includes the copy). A scenario run on a sample of each
epoch (`sample_batches`, remote-no-spoke) has its epoch time extrapolated to the whole epoch.
With --targets, issue 16's targets follow it.

Second table, one row per JSON file, in the order given. Columns: steady samples/s (% of the never-stalled
rate, and as a ratio of the `co-located` row when there is one), AU over the whole run and
after the warm-up, warm-up batches, stalls after the warm-up, time to first batch, total
time, bytes over the WAN (whole scenario, and per epoch after the first).

Fields a scenario script may add to a JSON summary (two_region.py does, with annotate.py), or give
on the command line by the summary's label:
  wan_bytes            bytes that crossed the WAN during the scenario; "n/a" when unknown
  wan_bytes_per_epoch  list, one per epoch (the first one includes any copy before training)
  hub_bytes            bytes the agent read from the hub (shown when there is no WAN figure)
  stage_in_s           seconds spent copying the dataset before training (stage-in): added
                       to the time to first batch and to the total time, and shown apart
  au_after_warmup      AU from the end of the warm-up to the end of the run
  dataset_bytes, cache_size_bytes, cache_basis, cache_basis_bytes, dataset_footprint_bytes
                       for the footer and the "fits the cache" target
Definitions of the loader's figures: bench/loader/README.md. Standard library only.
"""

import argparse
import csv
import json
import math
import os
import sys

COLOCATED = "co-located"
LOCAL = "local-direct"
HALF_CACHE = "spoke-cache-0.5x"
# Scenarios whose every epoch is a steady one (no cold cache to fill).
ALL_EPOCHS_STEADY = (LOCAL, "spoke-warm", "stage-in")


def human_bytes(n):
    if n is None:
        return "n/a"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000.0
    return f"{n:.2f} TB"


def parse_pairs(pairs, flag):
    out = {}
    for p in pairs or []:
        if "=" not in p:
            sys.exit(f"summarize.py: {flag} wants label=value, got {p!r}")
        label, value = p.split("=", 1)
        try:
            out[label] = float(value)
        except ValueError:
            sys.exit(f"summarize.py: {flag} {p!r}: not a number")
    return out


class Scenario:
    def __init__(self, summary, wan, stage, json_dir=None):
        self.s = summary
        self.label = summary.get("label") or summary.get("workload", "?")
        self.wan = wan.get(self.label, summary.get("wan_bytes"))
        self.stage_in = stage.get(self.label, summary.get("stage_in_s")) or 0.0
        self.train_total = float(summary["total_time_s"])
        self.total = self.train_total + self.stage_in
        self.first = float(summary["time_to_first_batch_s"]) + self.stage_in
        self.steady = float(summary["steady_samples_per_s"])
        self.ideal = summary.get("config", {}).get("ideal_samples_per_s")
        self.au = float(summary["au"])
        self.au_after = summary.get("au_after_warmup")
        self.warmup = int(summary["warmup_batches"])
        self.sustained = summary.get("warmup_sustained_batches")
        self.stalls = summary.get("stalled_batches_after_warmup")
        self.per_epoch = summary.get("wan_bytes_per_epoch")
        self.hub = summary.get("hub_bytes")
        self.epochs = summary.get("config", {}).get("epochs")
        self.window = int(summary.get("config", {}).get("window", 10) or 10)
        # The CSV next to the JSON when the results folder moved since the run.
        path = summary.get("csv")
        if path and not os.path.isfile(path) and json_dir is not None:
            path = os.path.join(json_dir, os.path.basename(path))
        self.rows = read_batches(path)
        ends = summary.get("epoch_end_s")
        if not ends and self.rows:
            by = {}
            for r in self.rows:
                by[r["epoch"]] = max(by.get(r["epoch"], 0.0), r["completion_s"])
            ends = [by[e] for e in sorted(by)]
        ends = ends or []
        self.epoch_times = [ends[0]] + [b - a for a, b in zip(ends, ends[1:])] if ends else []
        # A sample of each epoch: scale its time to the whole epoch.
        self.sample = int(summary.get("sample_batches") or
                          summary.get("config", {}).get("max_batches") or 0)
        batch = summary.get("config", {}).get("batch")
        files = summary.get("dataset_files")
        self.full_batches = math.ceil(files / batch) if files and batch else None
        self.scale = 1.0
        if self.sample and self.full_batches and self.sample < self.full_batches:
            self.scale = self.full_batches / self.sample
        else:
            self.sample = 0

    def cold_time(self):
        """Epoch 1 as the user sees it (stage-in: its copy included), whole-epoch scaled."""
        if not self.epoch_times:
            return None
        return self.epoch_times[0] * self.scale + self.stage_in

    def steady_time(self):
        """Mean time of the steady epochs, or None when there is none."""
        if self.label in ALL_EPOCHS_STEADY:
            times = self.epoch_times
        else:
            times = self.epoch_times[1:]
        return sum(times) / len(times) * self.scale if times else None

    def warmup_vs(self, rate):
        """Batches of epoch 1 before the first full window at >= 95 % of `rate`, or None."""
        first = [r for r in self.rows if r["epoch"] == 0]
        for i in range(self.window - 1, len(first)):
            if first[i]["rate"] >= 0.95 * rate:
                return i - (self.window - 1)
        return None

    def hub_per_epoch(self):
        """(bytes per epoch, source) from the agent's counter, else the WAN proxy's."""
        if self.s.get("hub_bytes_per_epoch") is not None:
            return self.s["hub_bytes_per_epoch"], "hub"
        if self.s.get("wan_bytes_per_epoch") is not None:
            return self.s["wan_bytes_per_epoch"], "wan"
        return None, None

    def after_first(self):
        """WAN bytes per epoch after the first: mean, or None."""
        if not self.per_epoch or len(self.per_epoch) < 2:
            return None
        rest = self.per_epoch[1:]
        return sum(rest) / len(rest)


def read_batches(path):
    """The loader's per-batch CSV (epoch, completion_s, window rate), [] when unreadable."""
    if not path or not os.path.isfile(path):
        return []
    rows = []
    with open(path) as f:
        for rec in csv.DictReader(f):
            rows.append({"seq": int(rec["seq"]), "epoch": int(rec["epoch"]),
                         "completion_s": float(rec["completion_s"]),
                         "rate": float(rec["window_samples_per_s"])})
    rows.sort(key=lambda r: r["seq"])
    return rows


def ratio(ref, t):
    return None if ref is None or t is None or t <= 0 else ref / t


def fmt_ratio(r):
    return "n/a" if r is None else f"{r:.2f}x"


def local_table(scenarios):
    """The issue-16 table: every scenario against local-direct (and co-located)."""
    by = {x.label: x for x in scenarios}
    local, colo = by.get(LOCAL), by.get(COLOCATED)
    if local is None:
        return []
    ds = local.s.get("dataset_bytes")
    header = ["scenario", "epoch 1 (cold) s", "epoch 1 vs local-direct",
              "epoch 1 vs co-located", "steady epochs vs local-direct",
              "warm-up batches (95 % of local)", "dataset over the WAN after (s)",
              "hub bytes per epoch (x dataset)"]
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    notes = []
    for x in scenarios:
        cold = x.cold_time()
        cell = "n/a" if cold is None else f"{cold:.1f}"
        if x.stage_in:
            cell += f" ({x.stage_in:.1f} copy)"
        if x.sample:
            cell = "~" + cell
            notes.append(f"{x.label}: {x.sample} of {x.full_batches} batches per epoch run; "
                         "its times are extrapolated to the whole epoch (x"
                         f"{x.scale:.1f}), its bytes are the sample's.")
        steady = ratio(local.steady_time(), x.steady_time())
        w = x.warmup_vs(local.steady)
        first_n = sum(1 for r in x.rows if r["epoch"] == 0)
        warm = str(w) if w is not None else f"never (in {first_n})"
        per, src = x.hub_per_epoch()
        if x.label == LOCAL:
            hub = "0 (no hub)"
        elif per is None:
            hub = "n/a"
        else:
            parts = [human_bytes(b) + (f" ({b / ds:.2f}x)" if ds else "") for b in per]
            hub = ", ".join(parts)
            if src == "wan":
                hub += " (WAN" + (", copy in epoch 1)" if x.stage_in else ")")
        out.append("| " + " | ".join([
            x.label, cell, fmt_ratio(ratio(local.cold_time(), cold)),
            fmt_ratio(ratio(colo.cold_time(), cold)) if colo else "n/a",
            fmt_ratio(steady) if steady is not None else "n/a (1 epoch)", warm,
            "n/a" if x.s.get("fill_s") is None else f"{x.s['fill_s']:.1f}", hub]) + " |")
    out.append("")
    out.append("Ratios are speeds: local-direct's time / the scenario's (1.00x = as fast as "
               "reading a local copy directly). local-direct: steady "
               f"{local.steady:.1f} samples/s, epoch 1 {local.cold_time():.1f} s. "
               "Dataset over the WAN after: loader time by which the agent had read 99 % of the "
               "dataset's bytes from the hub (the cold cache filled).")
    out += [""] + notes if notes else []
    return out


def local_targets(scenarios):
    """Issue 16's targets against local-direct, met or missed, with the margin."""
    by = {x.label: x for x in scenarios}
    local = by.get(LOCAL)
    if local is None:
        return []
    lines = ["| target (issue 16) | figure | met? |", "|---|---:|---|"]

    def add(name, figure, ok):
        verdict = "n/a" if ok is None else ("**met**" if ok else "**missed**")
        lines.append(f"| {name} | {figure} | {verdict} |")

    cold, hints, half = by.get("spoke-cold"), by.get("spoke-hints"), by.get(HALF_CACHE)
    if cold:
        r = ratio(local.cold_time(), cold.cold_time())
        add("cold epoch (spoke-cold) >= 0.9x local-direct", fmt_ratio(r),
            None if r is None else r >= 0.9)
        r = ratio(local.steady_time(), cold.steady_time())
        add("steady epochs (spoke-cold) >= 0.99x local-direct", fmt_ratio(r),
            None if r is None else r >= 0.99)
        w = cold.warmup_vs(local.steady)
        add("warm-up unaided (spoke-cold) <= 20 batches", "never" if w is None else str(w),
            w is not None and w <= 20)
    if hints:
        w = hints.warmup_vs(local.steady)
        add("warm-up with hints (spoke-hints) <= 5 batches", "never" if w is None else str(w),
            w is not None and w <= 5)
    if half:
        r = ratio(local.steady_time(), half.steady_time())
        add("dataset 2x cache: steady epochs >= 0.95x local-direct", fmt_ratio(r),
            None if r is None else r >= 0.95)
        per, _ = half.hub_per_epoch()
        ds, cache = half.s.get("dataset_bytes"), half.s.get("cache_size_bytes")
        if per and len(per) > 1 and ds and cache and ds > cache:
            later = sum(per[1:]) / len(per[1:])
            misfit = ds - cache
            add("dataset 2x cache: hub bytes per later epoch <= 1.05x the part that does not "
                "fit", f"{human_bytes(later)} = {later / misfit:.2f}x of {human_bytes(misfit)}",
                later <= 1.05 * misfit)
        else:
            add("dataset 2x cache: hub bytes per later epoch <= 1.05x the part that does not "
                "fit", "n/a (one epoch, or the dataset fits)", None)
    return lines


def table(scenarios):
    base = next((x for x in scenarios if x.label == COLOCATED), None)
    header = ["scenario", "steady samples/s (% of ideal)", "vs co-located", "AU",
              "AU after warm-up", "warm-up batches (loader / sustained)", "stalls after warm-up", "first batch (s)",
              "total time (s)", "bytes over the WAN", "WAN bytes / epoch after the 1st"]
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    for x in scenarios:
        steady = f"{x.steady:.1f}"
        if x.ideal:
            steady += f" ({100.0 * x.steady / x.ideal:.0f} %)"
        ratio = f"{x.steady / base.steady:.3f}" if base and base.steady > 0 else "n/a"
        first = f"{x.first:.2f}"
        total = f"{x.total:.1f}"
        if x.stage_in:
            first += f" ({x.stage_in:.1f} copy)"
            total += f" ({x.stage_in:.1f} copy + {x.train_total:.1f} train)"
        wan = human_bytes(x.wan)
        if x.wan is None and x.hub is not None:
            wan = f"n/a ({human_bytes(x.hub)} read from the hub)"
        elif x.label == COLOCATED and x.hub is not None:
            wan += f" (no WAN; {human_bytes(x.hub)} from the hub)"
        ae = x.after_first()
        per = "n/a"
        if ae is not None:
            per = human_bytes(ae)
            if len(x.per_epoch) > 2:
                per += " (" + ", ".join(human_bytes(b) for b in x.per_epoch[1:]) + ")"
        out.append("| " + " | ".join([
            x.label, steady, ratio, f"{100.0 * x.au:.1f} %",
            "n/a" if x.au_after is None else f"{100.0 * float(x.au_after):.1f} %",
            f"{x.warmup} / {'n/a' if x.sustained is None else x.sustained}",
            "n/a" if x.stalls is None else str(x.stalls), first, total, wan,
            per]) + " |")
    return out


def targets(scenarios):
    by = {x.label: x for x in scenarios}
    base = by.get(COLOCATED)
    cold = by.get("spoke-cold")
    hints = by.get("spoke-hints")
    stage = by.get("stage-in")
    lines = ["| target | figure | met? |", "|---|---:|---|"]

    def add(name, figure, ok):
        verdict = "n/a" if ok is None else ("**met**" if ok else "**missed**")
        lines.append(f"| {name} | {figure} | {verdict} |")

    for lab in ("spoke-cold", "spoke-warm", "spoke-hints"):
        x = by.get(lab)
        if x and base and base.steady > 0:
            r = x.steady / base.steady
            add(f"steady samples/s {lab} / co-located >= 0.98", f"{r:.3f}", r >= 0.98)
    for lab in ("spoke-cold", "spoke-hints"):
        x = by.get(lab)
        if x and x.au_after is not None:
            add(f"AU after warm-up ({lab}) >= 0.95", f"{float(x.au_after):.3f}",
                float(x.au_after) >= 0.95)
    for x, limit, what in ((cold, 100, "without hints (spoke-cold)"),
                           (hints, 10, "with hints (spoke-hints)")):
        if not x:
            continue
        add(f"warm-up {what} <= {limit} batches (loader's definition)", str(x.warmup),
            x.warmup <= limit)
        if x.sustained is not None:
            add(f"warm-up {what} <= {limit} batches (sustained: rate >= 95 % for good)",
                str(x.sustained), int(x.sustained) <= limit)
    if cold:
        ds = cold.s.get("dataset_bytes")
        cache = cold.s.get("cache_size_bytes")
        need = cold.s.get("cache_basis_bytes", cold.s.get("dataset_footprint_bytes", ds))
        ae = cold.after_first()
        fits = need is not None and cache is not None and float(need) <= float(cache)
        if ae is None:
            add("WAN bytes per epoch after the first ~ 0 (spoke-cold)", "n/a (one epoch)", None)
        elif not fits:
            add("WAN bytes per epoch after the first ~ 0 (only when the dataset fits the cache)",
                f"{human_bytes(ae)} (dataset larger than the cache)", None)
        else:
            # "~ 0": under 1 % of the dataset per epoch.
            add("WAN bytes per epoch after the first ~ 0 (spoke-cold; < 1 % of the dataset)",
                f"{human_bytes(ae)} ({100.0 * ae / float(ds):.2f} % of the dataset)",
                ae < 0.01 * float(ds))
    if cold and stage:
        add("time to first batch: spoke-cold < stage-in", f"{cold.first:.2f} s vs {stage.first:.2f} s",
            cold.first < stage.first)
        same = cold.epochs == stage.epochs
        add(f"total time for {cold.epochs} epochs: spoke-cold < stage-in",
            f"{cold.total:.1f} s vs {stage.total:.1f} s"
            + ("" if same else f" (stage-in ran {stage.epochs} epoch(s))"),
            cold.total < stage.total if same else None)
    return lines


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="spoke-loader --json outputs")
    ap.add_argument("--wan", action="append", metavar="LABEL=BYTES",
                    help="bytes over the WAN for the scenario with this label")
    ap.add_argument("--stage-in", action="append", metavar="LABEL=SECONDS",
                    help="copy time before training for the scenario with this label")
    ap.add_argument("--targets", action="store_true",
                    help="also print the issue's targets, met or missed")
    args = ap.parse_args(argv)
    wan = parse_pairs(args.wan, "--wan")
    stage = parse_pairs(args.stage_in, "--stage-in")

    scenarios = []
    configs = set()
    for path in args.json:
        try:
            with open(path) as f:
                summary = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            sys.exit(f"summarize.py: {path}: {e}")
        missing = [k for k in ("total_time_s", "steady_samples_per_s", "au", "warmup_batches",
                               "time_to_first_batch_s") if k not in summary]
        if missing:
            sys.exit(f"summarize.py: {path}: not a spoke-loader summary (missing {missing})")
        scenarios.append(Scenario(summary, wan, stage, os.path.dirname(path)))
        c = summary.get("config", {})
        configs.add((summary.get("workload"), c.get("batch"), c.get("workers"),
                     c.get("accelerators"), c.get("compute_ms")))

    out = []
    lt = local_table(scenarios)
    if lt:
        out += lt
        if args.targets:
            out += [""] + local_targets(scenarios)
        out += ["", "Details (steady rates and warm-up against each scenario's own steady "
                "rate; ratios against co-located):", ""]
    out += table(scenarios)
    if len(configs) == 1:
        w, b, wk, a, c = next(iter(configs))
        epochs = ", ".join(f"{x.label} {x.epochs}" for x in scenarios)
        out.append("")
        out.append(f"Workload {w}: batch {b}, {wk} workers, {a} accelerator(s), "
                   f"{c} ms compute per batch; epochs: {epochs}.")
    elif len(configs) > 1:
        out.append("")
        out.append("Warning: the summaries come from different loader configurations.")
    # The footer's cache figures: the first scenario that had a Spoke cache (local-direct has
    # none; remote-no-spoke's and stage-in's are the agent's smallest, not the experiment's).
    first = next((x.s for x in scenarios if x.s.get("cache_size_bytes") is not None
                  and x.label not in ("remote-no-spoke", "stage-in")), scenarios[0].s)
    if first.get("dataset_bytes") is not None:
        ds, cache = first.get("dataset_bytes"), first.get("cache_size_bytes")
        line = f"Dataset {human_bytes(ds)}"
        if first.get("dataset_files") is not None:
            line += f" in {int(first['dataset_files'])} files"
        fp = first.get("dataset_footprint_bytes")
        basis = first.get("cache_basis", "footprint" if fp is not None else "bytes")
        if fp is not None:
            line += f" ({human_bytes(fp)} in whole 1 MiB blocks)"
        need = first.get("cache_basis_bytes", fp if basis == "footprint" else ds)
        if cache is not None:
            line += f"; cache sized on the dataset's {basis}"
        if cache is not None:
            rel = "fits in" if float(need) <= float(cache) else "is larger than"
            line += f"; Spoke cache {human_bytes(cache)} (the dataset {rel} the cache)"
        out.append(line + ".")
    if args.targets:
        out.append("")
        out += targets(scenarios)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
