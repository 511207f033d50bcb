"""The results: the plot (plot.gp), the tables (summarize.py, nodes.py), results.md."""

import contextlib
import io
import json
import subprocess

import nodes
import summarize

from . import HERE
from .util import Failure, log, tail


def plot(out, labels):
    """samples-per-s.png of the labels' CSVs (gnuplot's errors into plot.log)."""
    with open(f"{out}/{labels[0]}.json") as f:
        ideal = json.load(f)["config"]["ideal_samples_per_s"]
    csvs = " ".join(f"{out}/{lb}.csv" for lb in labels)
    with open(f"{out}/plot.log", "w") as plot_log:
        rc = subprocess.run(["gnuplot", "-e", f"csvs='{csvs}'", "-e",
                             f"titles='{' '.join(labels)}'", "-e",
                             f"out='{out}/samples-per-s.png'; ideal={ideal}",
                             f"{HERE}/plot.gp"], stderr=plot_log).returncode
    if rc != 0:
        log(f"gnuplot failed: {tail(f'{out}/plot.log', 10)}")


def write_results(out, tables):
    """results.md: the tables, then run.txt; printed too."""
    with open(f"{out}/run.txt") as f:
        md = tables + "\n" + f.read()
    with open(f"{out}/results.md", "w") as f:
        f.write(md)
    print()
    print(md)
    log(f"plot: {out}/samples-per-s.png")
    log(f"table: {out}/results.md")


class Report:
    """Experiment's report methods."""

    def report(self):
        """The single-node run's plot and summarize.py's tables with the targets."""
        if not self.done and not self.ckpt_done:
            raise Failure("no scenario ran")
        out = self.out
        plot(out, self.done + self.ckpt_done)
        buf = io.StringIO()
        if self.done:
            with contextlib.redirect_stdout(buf):
                summarize.main(["--targets", *(f"{out}/{s}.json" for s in self.done)])
        if self.ckpt_done:
            buf.write("\n" + self.checkpoint_table())
        write_results(out, buf.getvalue())

    def report_nodes(self):
        """The --nodes run's plot (every node's loader) and the cluster table."""
        out = self.out
        if not self.done:
            raise Failure("no scenario ran")
        local = nodes.load(f"{out}/local-direct.json") if "local-direct" in self.done else None
        scen = []
        labels = []
        for name in self.done:
            if name == "local-direct":
                scen.append((name, {}, [local], True))
                labels.append(name)
                continue
            cl = nodes.load(f"{out}/{name}.cluster.json")
            scen.append((name, cl, [nodes.load(f"{out}/{lb}.json") for lb in cl["labels"]],
                         name == "local-parallel"))
            labels += cl["labels"]
        plot(out, labels)
        write_results(out, nodes.cluster_table(scen, local, self.dataset_bytes, self.a.nodes,
                                               self.a.node_link_mbit) + "\n"
                      + nodes.targets(scen, local, self.a.nodes))
