#!/usr/bin/env python3
"""Turns spoke-loader --json summaries into the two-region results table (markdown).

    summarize.py colocated.json remote-nospoke.json spoke-cold.json ... > results.md
    summarize.py --wan spoke-cold=1.2e9 --stage-in stage-in=41.5 *.json

One row per JSON file, in the order given. Columns: steady samples/s, accelerator utilisation
(AU), warm-up batches, time to first batch, total time, bytes over the WAN.

Extra fields a scenario script may add to a JSON summary (or give on the command line, by the
summary's label):
  wan_bytes   bytes that crossed the WAN during the scenario (from the agent's metrics or the
              WAN proxy's counters); "n/a" when unknown.
  stage_in_s  seconds spent copying the dataset before training (the stage-in scenario); it
              is added to the total time, and shown apart.
Standard library only.
"""

import argparse
import json
import sys


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


def row(summary, wan, stage):
    label = summary.get("label") or summary.get("workload", "?")
    wan_bytes = wan.get(label, summary.get("wan_bytes"))
    stage_in = stage.get(label, summary.get("stage_in_s"))
    total = float(summary["total_time_s"])
    total_text = f"{total:.1f}"
    if stage_in:
        total_text = f"{total + stage_in:.1f} ({stage_in:.1f} copy + {total:.1f} train)"
    ideal = summary.get("config", {}).get("ideal_samples_per_s")
    steady = float(summary["steady_samples_per_s"])
    steady_text = f"{steady:.1f}"
    if ideal:
        steady_text += f" ({100.0 * steady / ideal:.0f} %)"
    return [
        label,
        steady_text,
        f"{100.0 * float(summary['au']):.1f} %",
        str(summary["warmup_batches"]),
        f"{float(summary['time_to_first_batch_s']):.2f}",
        total_text,
        human_bytes(wan_bytes),
    ]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="spoke-loader --json outputs")
    ap.add_argument("--wan", action="append", metavar="LABEL=BYTES",
                    help="bytes over the WAN for the scenario with this label")
    ap.add_argument("--stage-in", action="append", metavar="LABEL=SECONDS",
                    help="copy time before training for the scenario with this label")
    args = ap.parse_args(argv)
    wan = parse_pairs(args.wan, "--wan")
    stage = parse_pairs(args.stage_in, "--stage-in")

    header = ["scenario", "steady samples/s (% of ideal)", "AU", "warm-up batches",
              "first batch (s)", "total time (s)", "bytes over the WAN"]
    rows = []
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
        rows.append(row(summary, wan, stage))
        c = summary.get("config", {})
        configs.add((summary.get("workload"), c.get("batch"), c.get("workers"),
                     c.get("accelerators"), c.get("compute_ms"), c.get("epochs")))

    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    if len(configs) == 1:
        w, b, wk, a, c, e = next(iter(configs))
        out.append("")
        out.append(f"Workload {w}: batch {b}, {wk} workers, {a} accelerator(s), "
                   f"{c} ms compute per batch, {e} epoch(s).")
    elif len(configs) > 1:
        out.append("")
        out.append("Warning: the summaries come from different loader configurations.")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
