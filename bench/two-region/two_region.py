#!/usr/bin/env python3
"""The two-region experiment in one command (the two_region/ package beside this file;
--help for the scenarios, presets and options)."""

import sys

from two_region.main import main  # bench/two-region/two_region/ (this directory is sys.path[0])

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
