"""Fixtures of the scheduler tests: engines that are closed after the test, and (for the
modules that use ``schedulers``) every pipeline run through
:class:`~tests.scheduler.factories.CheckingScheduler`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from kalypso.query import executor
from tests.scheduler.factories import CheckingScheduler, RecordingSim

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


@pytest.fixture
def schedulers(monkeypatch: pytest.MonkeyPatch) -> list[CheckingScheduler]:
    """The schedulers the executor creates during the test, in order."""
    made: list[CheckingScheduler] = []

    def create(*args: Any, **kwargs: Any) -> CheckingScheduler:
        scheduler = CheckingScheduler(*args, **kwargs)
        made.append(scheduler)
        return scheduler

    monkeypatch.setattr(executor, "PipelineScheduler", create)
    return made
