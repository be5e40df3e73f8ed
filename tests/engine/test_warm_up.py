"""``warm_up``: its requests reach the engine and leave an empty cache; a failed request
cancels the others and is raised as itself."""

from __future__ import annotations

import pytest

from kalypso.engine.protocol import EngineError
from kalypso.engine.sim import SimEngine
from kalypso.engine.warm_up import warm_up
from tests.engine.failing_sim import FailingOneSim

TEXTS = [f"document {i} " + "word " * 300 for i in range(6)]


async def test_warm_up_sends_four_requests_and_leaves_the_cache_empty() -> None:
    engine = SimEngine("smollm2-cpu-f32", num_blocks=600, max_model_len_tokens=8192)
    try:
        await warm_up(engine, TEXTS)
        stats = await engine.stats()
    finally:
        await engine.close()
    assert stats.prefix_cache_queries_tokens > 0
    assert (stats.running_requests, stats.waiting_requests) == (0, 0)
    assert engine.block_pool.num_cached_blocks == 0


async def test_a_failed_warm_up_request_cancels_the_others() -> None:
    engine = FailingOneSim(
        "smollm2-cpu-f32", num_blocks=600, max_model_len_tokens=8192, fail_request_id="warm-up:0"
    )
    try:
        with pytest.raises(EngineError, match="injected failure"):
            await warm_up(engine, TEXTS)
        stats = await engine.stats()
    finally:
        await engine.close()
    assert (stats.running_requests, stats.waiting_requests) == (0, 0)
