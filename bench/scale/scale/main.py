"""scale.py's main: set up, measure, print the table, clean up."""

import concurrent.futures
import os
import subprocess
import sys

from . import churn, cli, measures, processes, tree
from .procfs import rss_kb
from .report import Rows


def set_up(bench):
    """The hub with the trees in its export, the WAN proxy, the agent, the mount points;
    returns the churn directories."""
    a = bench.a
    bench.start_hub()
    tree.make_tree(bench.export, a.files, a.big_dir)
    churn_dirs = churn.prepare_export(bench.export, a.cycle_files)
    bench.start_proxy()
    bench.start_agent()
    bench.make_targets(("tree", "big", *churn.VOLUMES))
    return churn_dirs


def measure(bench, rows):
    """Every measure, in order, into rows."""
    a = bench.a
    churn_dirs = set_up(bench)
    measures.measure_walk(bench, rows, rss_kb(bench.agent.pid))
    measures.measure_big_dir(bench, rows)
    pool = concurrent.futures.ThreadPoolExecutor(a.threads)
    cycles = churn.Churn(bench, churn_dirs, pool)
    cycles.mount()
    cycles.run(rows)
    pool.shutdown()


def main(argv=None):
    """Exit code: 0 measured, 1 failed, 77 cannot run here (not root, not built)."""
    a = cli.parse_args(argv)
    if os.geteuid() != 0 or not os.access("/dev/fuse", os.R_OK | os.W_OK):
        print("scale: needs root and /dev/fuse", file=sys.stderr)
        return 77
    bins = processes.binaries(a)
    missing = processes.not_built(bins)
    if missing:
        print("scale: not built: " + missing, file=sys.stderr)
        return 77
    bench = processes.Bench(a, bins)
    rows = Rows()
    try:
        measure(bench, rows)
        rows.print_table(a.files, 2 * a.delay_ms)
        return 0
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError) as e:
        print("scale: FAIL: %s" % e, file=sys.stderr)
        rows.print_rows()
        return 1
    finally:
        bench.cleanup()
