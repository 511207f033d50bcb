"""two_region.py's command line: the options and what they resolve to with the preset."""

import argparse

from . import __doc__ as USAGE
from .config import (ALL_SCENARIOS, CKPT_MIB, NODE_EPOCHS, NODE_LINK_MBIT, NODE_SCENARIOS, PRESETS,
                     REPORT_COMPUTE_MS, SAMPLES_OTHER, WORKLOADS)


def add_run_options(ap):
    """What runs: preset, workload, dataset, epochs, loader compute, link cap."""
    ap.add_argument("--preset", choices=tuple(PRESETS), default="demo",
                    help="dataset size and epochs per scenario (default demo)")
    ap.add_argument("--short", action="store_const", const="short", dest="preset",
                    help="= --preset short: a quick run (960 samples)")
    ap.add_argument("--full", action="store_const", const="full", dest="preset",
                    help="= --preset full: 20000 samples (~2.2 GB), for bench/RESULTS.md")
    ap.add_argument("--workload", default="report", choices=WORKLOADS,
                    help="bench/loader preset (default report)")
    ap.add_argument("--samples", type=int, help="dataset size in samples "
                    "(default: per workload, smaller with --short)")
    ap.add_argument("--epochs", type=int,
                    help="epochs of every scenario but spoke-warm and remote-no-spoke "
                    "(default: the preset's)")
    ap.add_argument("--warm-epochs", type=int,
                    help="epochs of spoke-warm (default: the preset's; 0 skips it)")
    ap.add_argument("--nospoke-epochs", type=int,
                    help="epochs of remote-no-spoke (default 1)")
    ap.add_argument("--nospoke-batches", type=int,
                    help="batches per epoch of remote-no-spoke, a sample (default: the "
                    "preset's; 0 = whole epochs)")
    ap.add_argument("--compute-ms", type=float,
                    help=f"compute per batch (default: the preset's, else {REPORT_COMPUTE_MS} "
                    "for report, else the loader's preset)")
    ap.add_argument("--wan-mbytes", type=float,
                    help="the WAN link's bandwidth in MB/s each way, shared by every "
                    "connection (spoke-wan-proxy --link-mbytes; default: the preset's, 0 = "
                    "no cap)")


def add_cache_options(ap):
    """The agents' cache: size, what the size is a multiple of, eviction policy."""
    ap.add_argument("--cache-fraction", type=float, default=2.0,
                    help="Spoke cache size = F x dataset size (default 2: the dataset fits; "
                    "e.g. 0.5 for a dataset twice the cache). Floor: 64 MiB (agent minimum)")
    ap.add_argument("--cache-basis", default="bytes", choices=("bytes", "footprint"),
                    help="bytes (default): 'dataset size' = the files' total size; footprint: "
                    "every file rounded up to whole 1 MiB blocks (agents before 5b2f311)")
    ap.add_argument("--eviction-policy", default="lru",
                    help="the agents' evictionPolicy (default lru; nothrash for datasets "
                    "larger than the cache)")


def add_scenario_options(ap):
    """Which scenarios, one node or several, the WAN delay, stage-in's streams."""
    ap.add_argument("--scenarios",
                    help="comma-separated subset (default: all, in the order above; with "
                    f"--nodes N > 1: {','.join(NODE_SCENARIOS)})")
    ap.add_argument("--nodes", type=int, default=1,
                    help="1 (default): the scenarios above, one agent at a time. N > 1: N "
                    "nodes in network namespaces (one agent and one loader each, all at "
                    "once) behind one WAN, scenarios " + ",".join(NODE_SCENARIOS) +
                    f", {NODE_EPOCHS} epochs each unless --epochs")
    ap.add_argument("--node-link-mbit", type=float,
                    help=f"with --nodes N > 1: each node's in-region link (to the hub "
                    f"namespace's bridge, so hub and peer traffic), capped with tbf in both "
                    f"directions, Mbit/s (default {NODE_LINK_MBIT:g})")
    ap.add_argument("--peer-timeout-ms", type=int,
                    help="with --nodes N > 1: the agents' peerTimeoutMs in peers-on "
                    "(default: the agent's, 2000)")
    ap.add_argument("--delay-ms", type=int, default=30,
                    help="one-way WAN delay (default 30 = 60 ms RTT)")
    ap.add_argument("--nfs-version", default="3", choices=("3", "4.1"),
                    help="the protocol the agents speak to the hub (default 3; 4.1 as to "
                    "Amazon EFS: the NFS port only)")
    ap.add_argument("--ckpt-mib", type=int, default=CKPT_MIB,
                    help=f"checkpoint scenarios: the checkpoint's size (default {CKPT_MIB})")
    ap.add_argument("--ckpt-every", type=int,
                    help="checkpoint scenarios: batches between two saves (default: the "
                    "preset's; short 10, demo and tour 40, full 100)")
    ap.add_argument("--stage-streams", type=int, default=32,
                    help="parallel cp streams of stage-in (default 32)")


def add_path_options(ap):
    """Where results, binaries and scratch go."""
    ap.add_argument("--out", help="results (default bench/two-region/results/<workload>-<UTC "
                    "time>)")
    ap.add_argument("--build-dir", default="build",
                    help="where the binaries are (default build, relative to the repository)")
    ap.add_argument("--work", help="scratch: hub export, caches, mounts "
                    "(default /var/tmp/spoke-2r.PID)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir")


def check_nodes(ap, a):
    """--nodes and the options that need N > 1."""
    if a.nodes < 1:
        ap.error(f"--nodes must be >= 1 (1 = one agent at a time; N > 1 = N nodes at once), "
                 f"got {a.nodes}")
    if a.node_link_mbit is not None:
        if a.nodes == 1:
            ap.error("--node-link-mbit needs --nodes N > 1 (it caps each node's link)")
        if a.node_link_mbit <= 0:
            ap.error(f"--node-link-mbit must be positive, got {a.node_link_mbit:g}")
    if a.peer_timeout_ms is not None:
        if a.nodes == 1:
            ap.error("--peer-timeout-ms needs --nodes N > 1 (peers-on only)")
        if not 10 <= a.peer_timeout_ms <= 60000:
            ap.error(f"--peer-timeout-ms must be 10..60000 (the agent's range), got "
                     f"{a.peer_timeout_ms}")
    if a.nodes > 1 and a.node_link_mbit is None:
        a.node_link_mbit = NODE_LINK_MBIT


def resolve_scenarios(ap, a):
    """a.scenarios as a list: the given subset, else the preset's or every valid one."""
    valid = NODE_SCENARIOS if a.nodes > 1 else ALL_SCENARIOS
    if a.scenarios is None:
        a.scenarios = ",".join(PRESETS[a.preset].get("scenarios", valid) if a.nodes == 1
                               else valid)
    scenarios = [s for s in a.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in valid]
    if unknown or not scenarios:
        ap.error(f"--scenarios: unknown {unknown or 'empty list'}"
                 + (f" with --nodes {a.nodes}" if a.nodes > 1 else "")
                 + f"; choose from {','.join(valid)}")
    a.scenarios = scenarios


def resolve_workload(ap, a, preset):
    """Samples, compute per batch and the link's cap from the preset where not given."""
    if a.samples is None:
        a.samples = (preset["samples"] if a.workload == "report"
                     else SAMPLES_OTHER[(a.workload, a.preset)])
    # The preset's loader and link are the single-node scenarios'; --nodes runs keep the
    # report's 250 ms and an uncapped WAN (their links are the nodes' own, --node-link-mbit).
    single = a.nodes == 1
    if a.compute_ms is None and a.workload == "report":
        a.compute_ms = preset.get("compute_ms", REPORT_COMPUTE_MS) if single else REPORT_COMPUTE_MS
    if a.wan_mbytes is None:
        a.wan_mbytes = preset.get("wan_mbytes", 0) if single else 0
    if a.wan_mbytes < 0:
        ap.error(f"--wan-mbytes must be >= 0 (0 = no cap), got {a.wan_mbytes:g}")


def resolve_epochs(ap, a, preset):
    """a.epochs_of: every scenario's epochs (the preset's, overridden by the flags)."""
    for flag, v in (("--epochs", a.epochs), ("--nospoke-epochs", a.nospoke_epochs)):
        if v is not None and v <= 0:
            ap.error(f"{flag} must be positive")
    for flag, v in (("--warm-epochs", a.warm_epochs), ("--nospoke-batches", a.nospoke_batches)):
        if v is not None and v < 0:
            ap.error(f"{flag} must be >= 0")
    a.epochs_of = dict(preset["epochs"])
    if a.epochs is not None:
        for s in a.epochs_of:
            if s not in ("spoke-warm", "remote-no-spoke"):
                a.epochs_of[s] = a.epochs
    if a.warm_epochs is not None:
        a.epochs_of["spoke-warm"] = a.warm_epochs
    a.epochs_of["remote-no-spoke"] = a.nospoke_epochs or 1
    if a.nospoke_batches is None:
        a.nospoke_batches = preset["nospoke_batches"]
    if a.nodes > 1:
        # Every node scenario runs the same epochs (local-direct too: one baseline run).
        a.epochs_of = {s: a.epochs or NODE_EPOCHS for s in NODE_SCENARIOS}


def check_sizes(ap, a):
    """The counts and sizes that must be positive."""
    for flag, v in (("--samples", a.samples), ("--delay-ms", a.delay_ms + 1),
                    ("--stage-streams", a.stage_streams), ("--ckpt-mib", a.ckpt_mib),
                    ("--ckpt-every", a.ckpt_every)):
        if v <= 0:
            ap.error(f"{flag} must be positive")
    if a.compute_ms is not None and a.compute_ms < 0:
        ap.error("--compute-ms must be >= 0")
    if a.cache_fraction <= 0:
        ap.error("--cache-fraction must be positive")


def parse_args(argv):
    """The options, checked, with the preset's values filled in."""
    ap = argparse.ArgumentParser(
        prog="bench/two-region/two_region.py", description=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(ap)
    add_cache_options(ap)
    add_scenario_options(ap)
    add_path_options(ap)
    a = ap.parse_args(argv)
    check_nodes(ap, a)
    resolve_scenarios(ap, a)
    a.short = a.preset == "short"
    preset = PRESETS[a.preset]
    resolve_workload(ap, a, preset)
    resolve_epochs(ap, a, preset)
    if a.ckpt_every is None:
        a.ckpt_every = preset["ckpt_every"]
    check_sizes(ap, a)
    return a
