"""What identifies a measurement: the date, the commit and the host it ran on.

Every record a benchmark writes carries :func:`run_stamp`, taken once per invocation (the
first call), so that a figure is traced to the code and the machine that produced it."""

from __future__ import annotations

import argparse
import functools
import re
import subprocess
import time
from collections.abc import Sequence
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


def host_slug(host: str | None = None) -> str:
    """A short file-name part for ``host`` (this machine's by default): the CPU model's
    last word and the vector ISA, as ``epyc-avx512``."""
    parts = [p.strip() for p in (host or describe_host()).split(",")]
    model = parts[0].split()[-1] if parts and parts[0] and "cores" not in parts[0] else "cpu"
    isa = parts[-1] if len(parts) > 1 and "cores" not in parts[-1] else ""
    slug = "-".join(p for p in (model, isa) if p).lower()
    return re.sub(r"[^a-z0-9]+", "-", slug).strip("-")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print this invocation's stamp.")
    parser.add_argument("--slug", action="store_true", help="print the host's file-name part")
    args = parser.parse_args(argv)
    print(host_slug() if args.slug else run_stamp())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
