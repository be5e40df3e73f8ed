"""``python -m bench``: the benchmark command (:mod:`bench.cli`)."""

import sys

from bench.cli import main

sys.exit(main())
