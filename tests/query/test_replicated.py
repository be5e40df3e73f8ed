"""A plan on a replica set of simulated engines (one virtual time, a shared clock): the
same table as on one engine, every row's pipeline once, and the same table again when a
replica dies mid-run."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

import kalypso
from kalypso.core.errors import PlanError
from kalypso.core.replicas import ReplicaSet
from kalypso.engine.sim.clock import SharedClock
from kalypso.engine.sim.engine import SimEngine


def reviews(rows: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "text": [
                f"review {i}: it {'works well' if i % 3 else 'broke at once'}" for i in range(rows)
            ]
        }
    )


def plan(rows: int) -> kalypso.Table:
    return (
        kalypso.table(reviews(rows), name="reviews")
        .sem_filter("Is the review {text} positive?")
        .sem_map("Summarize {text} in five words.", "summary", max_tokens=12)
    )


def replica_engines(count: int) -> tuple[list[SimEngine], SharedClock]:
    clock = SharedClock()
    return [SimEngine("qwen3-8b-h100", clock=clock) for _ in range(count)], clock


@pytest.mark.asyncio
async def test_three_replicas_give_the_one_engine_table() -> None:
    alone = await plan(60).arun(SimEngine("qwen3-8b-h100"))
    engines, clock = replica_engines(3)
    replicas = ReplicaSet(engines)
    spread = await plan(60).arun(replicas)
    pd.testing.assert_frame_equal(spread.frame, alone.frame)
    assert spread.llm_calls == alone.llm_calls
    assert spread.longest_chain_tokens == alone.longest_chain_tokens > 1
    assert [r.units_done for r in replicas.replicas] and all(
        r.units_done > 0 for r in replicas.replicas
    )
    assert sum(r.units_done for r in replicas.replicas) == 60
    assert clock.now_s == max(engine.now_s for engine in engines)
    assert "3 engines" in replicas.explain()


@pytest.mark.asyncio
async def test_a_replica_that_dies_mid_run_loses_and_repeats_nothing() -> None:
    alone = await plan(80).arun(SimEngine("qwen3-8b-h100"))
    engines, _ = replica_engines(2)
    replicas = ReplicaSet(engines)
    running = asyncio.create_task(plan(80).arun(replicas))
    while engines[1].num_steps < 5:
        await asyncio.sleep(0)
    await engines[1].close()  # every request in it fails with EngineError
    spread = await running
    pd.testing.assert_frame_equal(spread.frame, alone.frame)
    assert not replicas.replicas[1].alive and replicas.replicas[0].alive
    assert replicas.replicas[0].units_done + replicas.replicas[1].units_done == 80
    assert replicas.replicas[0].ledger.reserved_blocks == 0


@pytest.mark.asyncio
async def test_a_blocking_operator_is_refused_on_a_replica_set() -> None:
    engines, _ = replica_engines(2)
    topk = kalypso.table(reviews(5)).sem_topk("How positive is {text}?", 2)
    with pytest.raises(PlanError, match="blocking operator"):
        await topk.arun(ReplicaSet(engines))
    with pytest.raises(PlanError, match="no ledger"):
        await plan(5).arun(ReplicaSet(engines), ledger=object())  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_an_idle_replica_takes_back_rows_a_slow_one_has_not_started() -> None:
    """Replica 1's cache holds a few rows at a time, so its share waits in its run; once
    replica 0 is done it takes back rows replica 1 has not started, whole: the same
    table, every row once."""
    alone = await plan(160).arun(SimEngine("qwen3-8b-h100"))
    clock = SharedClock()
    fast = SimEngine("qwen3-8b-h100", clock=clock)
    slow = SimEngine("qwen3-8b-h100", clock=clock, num_blocks=12, block_size_tokens=16)
    replicas = ReplicaSet([fast, slow])
    spread = await plan(160).arun(replicas)
    pd.testing.assert_frame_equal(spread.frame, alone.frame)
    assert spread.llm_calls == alone.llm_calls
    taker, slowed = replicas.replicas
    assert taker.stolen_units > 0 and slowed.stolen_units == 0
    assert taker.units_done == 80 + taker.stolen_units
    assert slowed.units_done == 80 - taker.stolen_units
    assert all(r.ledger.reserved_blocks == 0 and not r.ledger.owners for r in replicas.replicas)
    assert f"{taker.stolen_units} stolen" in replicas.explain()
