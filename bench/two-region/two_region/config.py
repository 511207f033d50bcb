"""The presets, the scenarios and the fixed sizes of the experiment."""

MIB = 1 << 20
MIN_CACHE = 64 * MIB  # the agent's minimum cacheSizeBytes
# Checkpoints saved during training and loaded at its start (checkpoints.py): on the local
# disk (the baseline), on a Spoke scratch volume with write-back, and with every write
# synchronous.
CKPT_LOCAL = "local-direct-ckpt"
CKPT_SCENARIOS = [CKPT_LOCAL, "spoke-ckpt", "spoke-ckpt-sync"]
ALL_SCENARIOS = ["local-direct", "co-located", "remote-no-spoke", "spoke-cold", "spoke-warm",
                 "stage-in", "spoke-hints", "spoke-cache-0.5x", *CKPT_SCENARIOS]
CKPT_MIB = 256
WORKLOADS = ("report", "resnet50", "unet3d", "shards")
# --nodes N > 1: one loader per node, all nodes at once (bench/two-region/nodes.py).
# local-direct: one loader alone on the local disk (the baseline of every ratio);
# local-parallel: N loaders at once on the local disk (what the machine itself costs);
# peers-off / peers-on: one agent per node namespace over the WAN, without / with peers.
NODE_SCENARIOS = ["local-direct", "local-parallel", "peers-off", "peers-on"]
NODE_EPOCHS = 2
NODE_LINK_MBIT = 1000.0
PEER_PORT = 7311
# The proxy's ports on the bridge address in the hub namespace: the first two that are not
# ganesha's.
WAN_PORTS = (30491, 30492, 30493, 30494)
HALF_CACHE = "spoke-cache-0.5x"
HALF_FRACTION = 0.5
HALF_POLICY = "nothrash"
# Per preset: report samples (other workloads: SAMPLES_OTHER), epochs per scenario, the
# batches remote-no-spoke runs of its epoch (a sample: ~12 samples/s would take 5 minutes per
# 4000 files; 0 = the whole epoch), and optionally the compute per batch (ms; default
# REPORT_COMPUTE_MS), the WAN link's cap (MB/s both ways, all connections; default none) and
# the scenarios run by default (default all), and the batches between two checkpoints.
# demo: the link carries 2x what the loader reads, so a cold cache fills in about half an
# epoch: 438 MB at 7.2 MB/s = 61 s of a 125 s epoch (125 batches of 1 s). Filling for a minute
# at 2x the loader's rate takes a 2-minute epoch whatever the sample size, so the demo keeps
# the scenarios that show it: five epochs and the remote sample are ~10 minutes.
PRESETS = {
    "short": {"ckpt_every": 10, "samples": 960, "nospoke_batches": 10, "epochs": {
        "local-direct": 2, "co-located": 3, "remote-no-spoke": 1, "spoke-cold": 3,
        "spoke-warm": 2, "stage-in": 3, "spoke-hints": 3, HALF_CACHE: 3,
        **dict.fromkeys(CKPT_SCENARIOS, 2)}},
    "demo": {"ckpt_every": 40, "samples": 4000, "nospoke_batches": 4, "compute_ms": 1000,
             "wan_mbytes": 7.2,
             "scenarios": ["local-direct", "remote-no-spoke", "spoke-cold"], "epochs": {
        "local-direct": 1, "co-located": 1, "remote-no-spoke": 1, "spoke-cold": 3,
        "spoke-warm": 1, "stage-in": 1, "spoke-hints": 1, HALF_CACHE: 2,
        **dict.fromkeys(CKPT_SCENARIOS, 1)}},
    "tour": {"ckpt_every": 40, "samples": 4000, "nospoke_batches": 8, "epochs": {
        "local-direct": 1, "co-located": 1, "remote-no-spoke": 1, "spoke-cold": 3,
        "spoke-warm": 1, "stage-in": 1, "spoke-hints": 1, HALF_CACHE: 2,
        **dict.fromkeys(CKPT_SCENARIOS, 1)}},
    "full": {"ckpt_every": 100, "samples": 20000, "nospoke_batches": 20, "epochs": {
        "local-direct": 2, "co-located": 2, "remote-no-spoke": 1, "spoke-cold": 3,
        "spoke-warm": 2, "stage-in": 2, "spoke-hints": 3, HALF_CACHE: 3,
        **dict.fromkeys(CKPT_SCENARIOS, 2)}},
}
SAMPLES_OTHER = {("resnet50", "short"): 2400, ("unet3d", "short"): 168,
                 ("shards", "short"): 3200, ("resnet50", "demo"): 4000,
                 ("unet3d", "demo"): 168, ("shards", "demo"): 6400,
                 ("resnet50", "full"): 20000, ("unet3d", "full"): 1008,
                 ("shards", "full"): 20000, ("resnet50", "tour"): 4000, ("unet3d", "tour"): 168,
                 ("shards", "tour"): 6400}
# The loader: 250 ms of compute per batch of 32 (~14 MB/s of ~110 KB samples).
REPORT_COMPUTE_MS = 250
SEED = 1
