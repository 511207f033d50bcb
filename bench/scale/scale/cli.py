"""scale.py's command line."""

import argparse
import os

from . import __doc__ as USAGE

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/scale
# Options that must be at least 1 (the other counts may be 0).
AT_LEAST_ONE = ("threads", "mount_dirs", "churn_ttl")
COUNTS = ("files", "big_dir", "cycles", "cycle_files", "mount_files", "mount_dirs", "threads",
          "churn_ttl")


def parser():
    """The argument parser (every option with its default)."""
    p = argparse.ArgumentParser(description=USAGE.split("\n")[0])
    p.add_argument("--build-dir", default=os.path.join(HERE, "../../build/dev"))
    p.add_argument("--source-dir", default=os.path.normpath(os.path.join(HERE, "../..")))
    p.add_argument("--files", type=int, default=1_000_000)
    p.add_argument("--big-dir", type=int, default=200_000)
    p.add_argument("--cycles", type=int, default=10)
    p.add_argument("--cycle-files", type=int, default=100_000)
    p.add_argument("--mount-files", type=int, default=2000,
                   help="files created + unlinked through the scratch mount per cycle")
    p.add_argument("--mount-dirs", type=int, default=16,
                   help="directories the --mount-files are spread over")
    p.add_argument("--threads", type=int, default=32, help="parallel creates/unlinks/walkers")
    p.add_argument("--churn-ttl", type=int, default=5,
                   help="ttl (s) of the churn volume; each walk waits for it to pass")
    p.add_argument("--churn-prefetch", choices=("off", "readahead", "auto"),
                   help="--prefetch of the churn volume (default: the agent's)")
    p.add_argument("--delay-ms", type=int, default=30)
    p.add_argument("--hub-timeout", type=int, default=30)
    p.add_argument("--hub-attr-expiration", type=int, default=0,
                   help="the hub's Attr_Expiration_Time (s; -1: ganesha's default, 60). The "
                        "churn files are made in the export directly, behind ganesha's back: "
                        "ganesha lists a directory from its cache until its attributes expire")
    p.add_argument("--keep-workdir", action="store_true")
    return p


def parse_args(argv=None):
    """Parsed options; exits with a usage error on a negative count."""
    p = parser()
    a = p.parse_args(argv)
    for name in COUNTS:
        if getattr(a, name) < (1 if name in AT_LEAST_ONE else 0):
            p.error("--%s must not be negative" % name.replace("_", "-"))
    return a
