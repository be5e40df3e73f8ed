"""Sending a batch of requests to one engine at once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kalypso.engine.protocol import Engine, GenerateRequest, GenerateResult


async def generate_all(engine: Engine, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
    """Submit every request at once; their results, in the requests' order.

    If one fails, the others are cancelled (and so aborted in the engine: none is left
    running into what comes next), and the first failure is raised as itself, not wrapped
    in an ``ExceptionGroup``."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(engine.generate(request)) for request in requests]
    except ExceptionGroup as failure:
        raise failure.exceptions[0] from None
    return [task.result() for task in tasks]
