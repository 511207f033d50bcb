"""Spoke scale harness: metadata-heavy trees behind the WAN proxy.

  scale.py [--build-dir DIR] [--files 1000000] [--big-dir 200000] [--cycles 10]
           [--cycle-files 100000] [--mount-files 2000] [--mount-dirs 16] [--threads 32]
           [--churn-ttl 5] [--delay-ms 30] [--hub-attr-expiration 0] [--keep-workdir]

Creates, directly in a fresh nfs-ganesha hub's export, a tree of --files empty files (1000 per
directory) and a separate directory of --big-dir entries, puts spoke-wan-proxy (30 ms each way =
60 ms RTT) in front of it, starts spoke-cache-agent and mounts the tree read-only, a churn
volume (consistency ttl) and a scratch volume with spokectl. Then measures:
  walk       a full walk of the mount (scandir + lstat of every entry), timed by the walker
             (the agent has no walk metric), and the agent's RSS before/after it: bytes of
             RSS per cached inode
  big dir    (a volume of its own) lstat of one entry right after mounting (cold), `ls`
             (listdir) of the directory, `ls` again with the kernel's caches dropped (the FUSE
             side alone: the agent still has the listing), and lstat of an entry inside it
  cycles     --cycles rounds, each of which
               - creates --cycle-files empty files on the hub directly (another client), 1000
                 per directory, and walks them through the churn volume once its listings are
                 older than --churn-ttl (every directory relisted, every file stat'ed);
               - removes them on the hub and walks again (the agent sees them gone);
               - creates and unlinks --mount-files files through the scratch volume, spread
                 over --mount-dirs directories by --threads workers (the kernel serialises
                 creates and unlinks within one directory: it holds the directory's lock
                 across LOOKUP + CREATE/UNLINK);
             and the agent's RSS after each round, which should stay flat: the same names
             come back each round, and what the hub removed must leave the agent's memory
and prints a table. The churn files are made behind ganesha's back, so its hub runs with
Attr_Expiration_Time = 0 (ganesha's MDCACHE would list the directories from its cache for up to
60 s otherwise); a churn walk that still disagrees prints the hub's own listing (nfs-ls) beside
it. Needs root and /dev/fuse. Not a ctest test: it takes long at full size.
"""

import os
import sys

# The drivers' shared helpers (bench/common/spokebench.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "common"))
