"""What identifies a measurement: the date, the commit and the host it ran on.

Every record a benchmark writes carries :func:`run_stamp`, taken once per invocation (the
first call), so that a figure is traced to the code and the machine that produced it."""

from __future__ import annotations

import functools
import subprocess
import time
from dataclasses import dataclass

from kalypso.engine.host import describe_host


def current_commit() -> str:
    """The short commit of the working tree, with ``+changes`` when the code (``src`` and
    ``bench``, not the records in ``bench/results``) differs from it; ``unknown`` outside a
    git checkout."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        status = ["git", "status", "--porcelain", "--", "src", "bench", ":!bench/results"]
        dirty = subprocess.run(status, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+changes" if dirty else "")


@dataclass(frozen=True)
class Stamp:
    """A measurement's date (``YYYY-MM-DD``), commit and host."""

    date: str
    commit: str
    host: str


@functools.cache
def run_stamp() -> Stamp:
    """This invocation's stamp, fixed at its first call."""
    return Stamp(time.strftime("%Y-%m-%d"), current_commit(), describe_host())
