"""Calls preempted on a fair-sharing ledger are aborted in the engine and sent again: a
query registered beside a larger one of a higher priority number takes the engine, and
both answer exactly as they do alone (simulator)."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

import kalypso
from kalypso.core.ledger import KVLedger
from kalypso.core.options import RunOptions
from kalypso.engine.sim.engine import SimEngine


def reviews_plan(rows: int, offset: int) -> kalypso.Table:
    frame = pd.DataFrame(
        {
            "text": [
                f"review {offset + i}: the product {'works' if i % 3 else 'broke'}"
                for i in range(rows)
            ]
        }
    )
    return kalypso.table(frame, name="reviews").sem_map(
        "Summarize {text} in a few words.", "summary", max_tokens=24
    )


@pytest.mark.asyncio
async def test_a_small_query_preempts_a_large_one_and_both_answer_as_alone() -> None:
    solo_engine = SimEngine("qwen3-8b-h100")
    large_alone = (await reviews_plan(400, 0).arun(solo_engine)).frame
    small_alone = (await reviews_plan(5, 10_000).arun(solo_engine)).frame

    engine = SimEngine("qwen3-8b-h100")
    ledger = KVLedger(
        engine.capacity.num_blocks,
        fair_share=True,
        call_slots=engine.capacity.max_running_requests or 0,
    )
    large = asyncio.create_task(
        reviews_plan(400, 0).arun(
            engine, ledger=ledger, options=RunOptions(query_id="large", request_priority=9)
        )
    )
    while ledger.calls_in_engine < 100:
        await asyncio.sleep(0)
    small = await reviews_plan(5, 10_000).arun(
        engine, ledger=ledger, options=RunOptions(query_id="small", request_priority=3)
    )
    preempted = ledger.preempted_calls
    large_result = await large
    assert preempted >= 100
    pd.testing.assert_frame_equal(small.frame, small_alone)
    pd.testing.assert_frame_equal(large_result.frame, large_alone)
    assert large_result.llm_calls == 400 and small.llm_calls == 5
    assert ledger.calls_in_engine == 0 and ledger.reserved_blocks == 0
    stats = await engine.stats()
    assert stats.running_requests == 0 and stats.waiting_requests == 0
