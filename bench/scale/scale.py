#!/usr/bin/env python3
"""Spoke scale harness (the scale/ package beside this file; --help for the options)."""

import sys

from scale.main import main  # bench/scale/scale/ (this directory is sys.path[0])

if __name__ == "__main__":
    sys.exit(main())
