"""Untimed requests that take a fresh engine's one-off costs before anything is timed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kalypso.engine.protocol import Engine, GenerateRequest


async def warm_up(engine: Engine, texts: Sequence[str], requests: int = 4) -> None:
    """Send a few requests shaped like a workload's (its first ``texts`` as prompts, several
    at once, some decoding), then reset the prefix cache. A fresh engine's one-off work
    (first kernel runs for these shapes, allocations) is then not charged to whichever
    policy a comparison runs first.

    If a request fails, the others are cancelled in the engine (none is left running into
    what is timed next) and the first failure is raised as itself."""
    capacity = engine.capacity.total_tokens
    prompts = [
        engine.tokenizer.encode(text)[: max(1, capacity // (2 * requests))]
        for text in texts[:requests]
    ]
    try:
        # a task group, not gather: a failed request cancels the others
        async with asyncio.TaskGroup() as group:
            for index, prompt in enumerate(prompts):
                if prompt:
                    request = GenerateRequest(
                        request_id=f"warm-up:{index}",
                        prompt_token_ids=tuple(prompt),
                        max_tokens=16,
                    )
                    group.create_task(engine.generate(request))
    except ExceptionGroup as failure:
        raise failure.exceptions[0] from None
    await engine.reset_prefix_cache()
