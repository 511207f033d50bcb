"""two_region.py's main: parse, run, always clean up."""

import signal

from .cli import parse_args
from .experiment import Experiment
from .util import Failure, log


def on_signal(signum, _frame):
    """SIGTERM and SIGINT end the run the way Ctrl-C does."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv):
    """Runs the experiment; the exit code (130 when interrupted)."""
    args = parse_args(argv)
    exp = Experiment(args)
    rc = 1
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        rc = exp.run()
    except Failure as e:
        log(f"ERROR: {e}")
    except KeyboardInterrupt as e:
        log(f"interrupted ({e or 'SIGINT'})")
        rc = 130
    finally:
        # A second signal must not cut the cleanup short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        exp.cleanup()
        if rc != 0:
            log(f"failed (exit {rc}); partial results in {exp.out}")
    return rc
