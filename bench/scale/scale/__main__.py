"""`python3 -m scale` from bench/scale: the same as bench/scale/scale.py."""

import sys

from .main import main

sys.exit(main())
