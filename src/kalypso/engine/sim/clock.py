"""One virtual time for several simulated engines: replicas side by side.

Each :class:`~kalypso.engine.sim.engine.SimEngine` keeps its own virtual clock, which
advances by the cost of the steps it takes. Engines made with one :class:`SharedClock`
take their steps in the order of the steps' start times (ties: the engine made first), so
that N replicas run side by side in one virtual time, as N GPUs do, whatever the host's
speed:

* an engine with work waits for its turn: its clock is the earliest of the engines with
  work, and no caller of any of them is running host work (a Python step off the event
  loop takes no virtual time, as with one engine);
* an idle engine that is given a request starts at :attr:`SharedClock.now_s`, the end of
  the step whose results its caller was answering; it does not go back in time.

The order is deterministic for a deterministic caller. One approximation: a request sent
by a caller answering a step that ends at ``t`` may be admitted by another engine's step
that started a little before ``t`` (by less than one step).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

logger = logging.getLogger(__name__)


class ClockedEngine(Protocol):
    """What the clock reads of an engine (:class:`~kalypso.engine.sim.engine.SimEngine`)."""

    @property
    def now_s(self) -> float: ...

    @property
    def wants_step(self) -> bool:
        """Whether it has work it could schedule now."""
        ...

    @property
    def host_work_held(self) -> int: ...


class SharedClock:
    """The virtual time of several simulated engines (see the module docstring).

    Attributes:
        now_s: the end of the latest step whose results were delivered: when a caller
            answering them acts.
    """

    def __init__(self) -> None:
        self.now_s = 0.0
        self._engines: list[ClockedEngine] = []
        self._changed = asyncio.Event()

    def join(self, engine: ClockedEngine) -> None:
        """Add ``engine``; its turn comes after the engines that joined before it on ties."""
        self._engines.append(engine)

    def leave(self, engine: ClockedEngine) -> None:
        """Remove ``engine`` (closed): it no longer holds the others back."""
        if engine in self._engines:
            self._engines.remove(engine)
        self.changed()

    def changed(self) -> None:
        """An engine's work, host work or clock changed: the turn may have moved."""
        self._changed.set()

    def stepped(self, end_s: float) -> None:
        """An engine finished a step ending at ``end_s`` and delivered its results."""
        self.now_s = max(self.now_s, end_s)
        self.changed()

    async def turn(self, engine: ClockedEngine) -> None:
        """Wait until ``engine`` may take its next step."""
        while not self._is_turn_of(engine):
            self._changed.clear()
            await self._changed.wait()

    def _is_turn_of(self, engine: ClockedEngine) -> bool:
        if any(other.host_work_held for other in self._engines):
            return False
        ready = [other for other in self._engines if other.wants_step]
        if not ready:
            return True
        first = min(ready, key=lambda other: (other.now_s, self._engines.index(other)))
        return first is engine
