"""The clock benchmark runs are timed on."""

from __future__ import annotations

import time

from kalypso.engine.protocol import Engine


def engine_clock_s(engine: Engine) -> float:
    """Virtual seconds for the simulator (its ``now_s``), wall seconds otherwise."""
    now = getattr(engine, "now_s", None)
    return float(now) if isinstance(now, int | float) else time.monotonic()
