"""The two-region experiment in one command.

One generated dataset on an NFS hub (nfs-ganesha on loopback), a 60 ms WAN (spoke-wan-proxy,
30 ms each way), and these scenarios, each with a fresh agent (own cacheDir, stateDir,
socket, metrics port):

  local-direct     the loader reading the dataset's directory on the local disk directly (no
                   FUSE, no hub): what a user compares against; every ratio is against it
  co-located       Spoke mounting the hub directly (no WAN delay), cache + prefetch on
  remote-no-spoke  through the WAN, prefetch off, strict consistency (close-to-open, no page
                   cache), and the smallest cache the agent accepts (64 blocks = 64 MiB: the
                   agent has no per-mount "cache off")
  spoke-cold       through the WAN, Spoke on, empty cache, several epochs
  spoke-warm       the agent restarted on spoke-cold's cache (mount restored from its
                   stateDir): the cache survives restarts
  stage-in         copy the dataset over the WAN to local disk first (parallel cp streams
                   through a Spoke mount with prefetch off), then train from the copy
  spoke-hints      through the WAN, empty cache, the loader disclosing each epoch's order
                   (<mount>/.spoke-hints when the agent serves it, else `spokectl hint` fed
                   from a FIFO the loader writes each epoch's order to)
  spoke-cache-0.5x through the WAN, empty cache half the dataset's size, evictionPolicy
                   nothrash: a dataset twice the cache

Presets (--preset, default demo): demo = what scripts/demo.sh runs: 4000 samples (438 MB) of
a loader needing 3.5 MB/s (1 s of compute per batch of 32) over a 60 ms link of 7.2 MB/s
(about 2x the loader), so that filling the cold cache takes a minute, and three scenarios
(local-direct, remote-no-spoke, spoke-cold over 3 epochs; ~10 minutes on 2 cores). tour =
every scenario on the same 4000 samples with 250 ms per batch (14 MB/s) and no link cap (~7
minutes); short = a quick run of every scenario (960 samples); full = the RESULTS.md run
(20000 samples, ~2.2 GB, about an hour). Each gives the dataset size, the loader's compute per
batch, the link's cap, the scenarios and every scenario's epochs; flags override each.

Then plot.gp -> samples-per-s.png and summarize.py -> results.md (+ the targets).

--nodes N (N >= 2): N nodes of one cluster at once instead (nodes.py): network namespaces
spk2r-<pid>-hub (bridge, ganesha, the WAN proxy) and -n1..-nN (one agent and one loader
each, joined to the bridge by a veth capped with tbf at --node-link-mbit both ways);
scenarios local-direct, local-parallel (N loaders on the local disk), peers-off and peers-on
(the agents as static peers); the table gives cluster WAN/hub bytes per epoch against the
dataset, cold epoch and steady samples/s per node against local-direct.
Needs root (FUSE mounts, /proc/sys/vm/drop_caches). Stops everything it started (by pid) and
unmounts every mount, also on failure, Ctrl-C or SIGTERM. Standard library only.
"""

import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/two-region
ROOT = os.path.dirname(os.path.dirname(HERE))
# annotate.py, nodes.py, summarize.py beside the package; the drivers' shared helpers.
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench", "common"))
