"""Fixtures of the scheduler tests: recording simulators that are closed after the test.

What the scheduler did is read from the run itself (``result.pipeline_reports``: the
admission order, every launch with its reservation and whether it went beyond the
ledger, budget moves, minimum/initial/final budgets and the peak); a run that could never
make progress again raises the core's own
:class:`~kalypso.core.scheduler.SchedulerStuck` at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.scheduler.factories import RecordingSim

EngineFactory = Callable[..., RecordingSim]


@pytest.fixture
async def make_engine() -> AsyncIterator[EngineFactory]:
    engines: list[RecordingSim] = []

    def make(**kwargs: Any) -> RecordingSim:
        kwargs.setdefault("num_blocks", 64)
        engine = RecordingSim(**kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.close()
