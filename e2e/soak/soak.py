#!/usr/bin/env python3
"""Spoke fault soak: the entry point of the `soak` package next to this file (soak/main.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak.main import main  # noqa: E402  (the package, which takes precedence over this file)

if __name__ == "__main__":
    sys.exit(main())
