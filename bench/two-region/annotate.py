#!/usr/bin/env python3
"""Adds what two_region.py measured around a spoke-loader run to the loader's --json summary.

    annotate.py --json S.json --csv S.csv --trace S.trace --t0 WALL [--set key=value ...]

--trace: lines "<wall time s> <WAN bytes to hub> <WAN bytes from hub> <agent hub-read bytes>"
sampled by two_region.py while the scenario ran (the WAN proxy's --stats-file and the agent's
spoke_hub_read_bytes_total; "-" when unknown). The first line is the state before the
scenario (mount, copy, ...), the last one the state after the loader exited.
--t0: wall time (s) at which the loader started; the loader's CSV times are relative to it.

Adds to the JSON:
  wan_bytes                 WAN bytes (both directions) over the whole scenario
  wan_bytes_up/_down        the same per direction (to / from the hub)
  hub_bytes                 bytes the agent read from the hub (its own counter), when known
  wan_bytes_per_epoch       [epoch 1, epoch 2, ...]: WAN bytes while each epoch ran; epoch e
                            runs from the completion of the last batch of epoch e-1 (epoch 1:
                            from the first trace sample, so it includes what happened before
                            the loader started, e.g. a stage-in copy) to the completion of its
                            own last batch (the last epoch: to the end of the trace)
  hub_bytes_per_epoch       the same from the agent's counter
  epoch_end_s               loader time of each epoch's end
  fill_s                    loader time at which the agent had read 99 % of dataset_bytes
                            (a --set) from the hub since the first trace sample (its counter;
                            else the WAN's bytes from the hub): how long the cold cache took
                            to fill (absent if it never did)
  warmup_sustained_batches  batches before the window rate reaches 95 % of steady for good
                            (the first batch from which every window rate is >= 95 %, windows
                            holding a later epoch's first batch excepted: worker restart)
  au_after_warmup           compute time of the batches from the warm-up on / (accelerators x
                            time from the completion of the last warm-up batch to the end)
plus every --set key=value (numbers are stored as numbers).
Standard library only.
"""

import argparse
import bisect
import csv
import json
import sys


def load_trace(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 4:
                continue
            def num(s):
                try:
                    return float(s)
                except ValueError:
                    return None
            t, up, down, hub = (num(p) for p in parts[:4])
            if t is None:
                continue
            rows.append((t, up, down, hub))
    rows.sort(key=lambda r: r[0])
    return rows


def value_at(rows, col, t):
    """Counter `col` at wall time t, linear between samples; None if unknown."""
    pts = [(r[0], r[col]) for r in rows if r[col] is not None]
    if not pts:
        return None
    times = [p[0] for p in pts]
    i = bisect.bisect_left(times, t)
    if i <= 0:
        return pts[0][1]
    if i >= len(pts):
        return pts[-1][1]
    (t0, v0), (t1, v1) = pts[i - 1], pts[i]
    if t1 <= t0:
        return v1
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def fill_time(rows, dataset_bytes, t0, share=0.99):
    """Seconds after t0 at which the agent's hub bytes (else the WAN's bytes from the hub:
    these count reads sent twice too) since the first sample reached share x dataset_bytes
    (linear between samples), or None."""
    col = 3 if any(r[3] is not None for r in rows) else 2
    pts = [(r[0], r[col]) for r in rows if r[col] is not None]
    if not pts:
        return None
    goal = pts[0][1] + share * dataset_bytes
    for (ta, va), (tb, vb) in zip(pts, pts[1:]):
        if vb >= goal:
            t = tb if vb <= va else ta + (tb - ta) * (goal - va) / (vb - va)
            return max(0.0, t - t0)
    return None


def load_batches(path):
    """The loader's per-batch CSV: (seq, compute_ms, completion_s, window rate, epoch, batch)
    rows, and each epoch's last completion."""
    epoch_end = {}
    batches = []
    with open(path) as f:
        for rec in csv.DictReader(f):
            e = int(rec["epoch"])
            c = float(rec["completion_s"])
            epoch_end[e] = max(epoch_end.get(e, 0.0), c)
            batches.append((int(rec["seq"]), float(rec["compute_ms"]), c,
                            float(rec["window_samples_per_s"]), e, int(rec["batch"])))
    return batches, epoch_end


def add_wan_bytes(summary, rows, epoch_end, t0):
    """WAN and hub bytes in all and per epoch, from the trace's counters at epoch bounds."""
    epochs = sorted(epoch_end)
    start, end = rows[0][0], rows[-1][0]
    bounds = [start] + [t0 + epoch_end[e] for e in epochs[:-1]] + [end]

    def deltas(col):
        vals = [value_at(rows, col, t) for t in bounds]
        if any(v is None for v in vals):
            return None
        return [max(0.0, vals[i + 1] - vals[i]) for i in range(len(vals) - 1)]

    up, down, hub = deltas(1), deltas(2), deltas(3)
    if up is not None and down is not None:
        summary["wan_bytes_up"] = sum(up)
        summary["wan_bytes_down"] = sum(down)
        summary["wan_bytes"] = sum(up) + sum(down)
        summary["wan_bytes_per_epoch"] = [u + d for u, d in zip(up, down)]
    if hub is not None:
        summary["hub_bytes"] = sum(hub)
        summary["hub_bytes_per_epoch"] = hub


def add_sustained_warmup(summary, batches):
    """Batches before the window rate reaches 95 % of steady and stays there to the end of
    the run (the loader's warm-up counts the batches before the *start* of the first window
    that reaches 95 %, and one lucky burst is enough)."""
    steady = float(summary.get("steady_samples_per_s", 0))
    ordered = sorted(batches, key=lambda r: r[0])
    # Windows that hold the first batch of a later epoch are skipped: the loader's workers
    # restart there (non-persistent workers), a dip co-located pays too.
    window = int(summary.get("config", {}).get("window", 10) or 10)
    restarts = [i for i, r in enumerate(ordered) if r[5] == 0 and i > 0]

    def spans_restart(i):
        return any(i - window < k <= i for k in restarts)

    bad = [i for i, r in enumerate(ordered) if r[3] < 0.95 * steady and not spans_restart(i)]
    summary["warmup_sustained_batches"] = (bad[-1] + 1) if bad else 0


def add_au_after_warmup(summary, batches):
    """Compute time of the batches from the warm-up on, over the time from when the
    accelerators finished the last warm-up batch to the end of the run."""
    w = int(summary.get("warmup_batches", 0))
    accel = int(summary.get("config", {}).get("accelerators", 1) or 1)
    recs = sorted(batches, key=lambda r: r[0])
    if recs and w < len(recs):
        start = recs[w - 1][2] if w > 0 else 0.0
        end = max(r[2] for r in recs)
        compute = sum(r[1] for r in recs[w:]) / 1000.0
        if end > start:
            summary["au_after_warmup"] = compute / ((end - start) * accel)


def apply_sets(summary, sets):
    """--set KEY=VALUE fields, numbers where they parse as one."""
    for kv in sets:
        if "=" not in kv:
            sys.exit(f"annotate.py: --set wants key=value, got {kv!r}")
        k, v = kv.split("=", 1)
        try:
            summary[k] = float(v) if any(ch in v for ch in ".eE") else int(v)
        except ValueError:
            summary[k] = v


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--t0", type=float, required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)

    with open(args.json) as f:
        summary = json.load(f)
    rows = load_trace(args.trace)
    batches, epoch_end = load_batches(args.csv)
    if rows:
        add_wan_bytes(summary, rows, epoch_end, args.t0)
    summary["epoch_end_s"] = [epoch_end[e] for e in sorted(epoch_end)]
    add_sustained_warmup(summary, batches)
    add_au_after_warmup(summary, batches)
    apply_sets(summary, args.set)
    dataset = summary.get("dataset_bytes")
    fill = fill_time(rows, float(dataset), args.t0) if rows and dataset else None
    if fill is not None:
        summary["fill_s"] = fill

    with open(args.json, "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
