"""A simulator that fails one named request, for the tests of batch fan-out."""

from __future__ import annotations

import asyncio
from typing import Any

from kalypso.engine.protocol import EngineError, GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine


class FailingOneSim(SimEngine):
    """The simulator, failing the request ``fail_request_id`` once the others of its batch
    have been submitted (it yields to the event loop first)."""

    def __init__(self, *args: Any, fail_request_id: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail_request_id = fail_request_id

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        if request.request_id == self.fail_request_id:
            await asyncio.sleep(0)
            raise EngineError("injected failure")
        return await super().generate(request)
