"""`python3 -m two_region` from bench/two-region: the same as bench/two-region/two_region.py."""

import sys

from .main import main

sys.exit(main(sys.argv[1:]))
