"""Untimed requests that take a fresh engine's one-off costs before anything is timed."""

from __future__ import annotations

from collections.abc import Sequence

from kalypso.engine.batch import generate_all
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
    batch = [
        GenerateRequest(f"warm-up:{index}", tuple(prompt), max_tokens=16)
        for index, prompt in enumerate(prompts)
        if prompt
    ]
    await generate_all(engine, batch)
    await engine.reset_prefix_cache()
