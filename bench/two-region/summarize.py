#!/usr/bin/env python3
"""Turns spoke-loader --json summaries into the two-region results table (markdown).

    summarize.py co-located.json remote-no-spoke.json spoke-cold.json ... > results.md
    summarize.py --wan spoke-cold=1.2e9 --stage-in stage-in=41.5 *.json
    summarize.py --targets *.json          # also: the issue's targets, met or missed

One row per JSON file, in the order given. Columns: steady samples/s (% of the never-stalled
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
import json
import sys

COLOCATED = "co-located"


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
    def __init__(self, summary, wan, stage):
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

    def after_first(self):
        """WAN bytes per epoch after the first: mean, or None."""
        if not self.per_epoch or len(self.per_epoch) < 2:
            return None
        rest = self.per_epoch[1:]
        return sum(rest) / len(rest)


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
        note = "" if cold.epochs == 3 and stage.epochs == 3 else f" ({cold.epochs} epochs)"
        add("total time for 3 epochs: spoke-cold < stage-in" + note,
            f"{cold.total:.1f} s vs {stage.total:.1f} s", cold.total < stage.total)
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
        scenarios.append(Scenario(summary, wan, stage))
        c = summary.get("config", {})
        configs.add((summary.get("workload"), c.get("batch"), c.get("workers"),
                     c.get("accelerators"), c.get("compute_ms")))

    out = table(scenarios)
    if len(configs) == 1:
        w, b, wk, a, c = next(iter(configs))
        epochs = ", ".join(f"{x.label} {x.epochs}" for x in scenarios)
        out.append("")
        out.append(f"Workload {w}: batch {b}, {wk} workers, {a} accelerator(s), "
                   f"{c} ms compute per batch; epochs: {epochs}.")
    elif len(configs) > 1:
        out.append("")
        out.append("Warning: the summaries come from different loader configurations.")
    first = scenarios[0].s
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
