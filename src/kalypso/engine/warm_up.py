"""Untimed requests that take a fresh engine's one-off costs before anything is timed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kalypso.engine.protocol import Engine, GenerateRequest


async def warm_up(engine: Engine, texts: Sequence[str], requests: int = 4) -> None:
    """Send a few requests shaped like a workload's (its first ``texts`` as prompts, several
    at once, some decoding), then reset the prefix cache. A fresh engine's one-off work
    (first kernel runs for these shapes, allocations) is then not charged to whichever
    policy a comparison runs first."""
    capacity = engine.capacity.total_tokens
    prompts = [
        engine.tokenizer.encode(text)[: max(1, capacity // (2 * requests))]
        for text in texts[:requests]
    ]
    await asyncio.gather(
        *(
            engine.generate(
                GenerateRequest(
                    request_id=f"warm-up:{index}", prompt_token_ids=tuple(prompt), max_tokens=16
                )
            )
            for index, prompt in enumerate(prompts)
            if prompt
        )
    )
    await engine.reset_prefix_cache()
