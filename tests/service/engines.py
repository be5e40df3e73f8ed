"""Simulators that misbehave on cue, for the service's error paths."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from kalypso.engine.protocol import EngineError, GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine


class GatedSim(SimEngine):
    """Answers the first ``free_calls`` calls, then holds every call until :meth:`open`
    (callable from any thread); ``fail_after`` makes call number ``fail_after + 1`` and
    later ones fail with an :class:`EngineError` instead."""

    def __init__(
        self, *, free_calls: int = 0, fail_after: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__("smollm2-cpu", **kwargs)
        self.free_calls = free_calls
        self.fail_after = fail_after
        self.calls = 0
        self.held = 0
        self._opened = threading.Event()
        self._gate: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self) -> None:
        self._opened.set()
        if self._loop is not None and self._gate is not None:
            self._loop.call_soon_threadsafe(self._gate.set)

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise EngineError(f"the engine failed on call {self.calls} (on cue)")
        if self.calls > self.free_calls and not self._opened.is_set():
            if self._gate is None:
                self._loop = asyncio.get_running_loop()
                self._gate = asyncio.Event()
            self.held += 1
            try:
                await self._gate.wait()
            finally:
                self.held -= 1
        return await super().generate(request)
