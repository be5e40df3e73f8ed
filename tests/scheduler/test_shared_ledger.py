"""One engine, several queries: a shared :class:`KVLedger` keeps the sum of every query's
reservations within the engine's capacity, and each query returns what it returns alone.
"""

from __future__ import annotations

import asyncio

import pytest

import kalypso
from kalypso.engine.sim import SimOutputModel
from kalypso.query import QueryResult, Table
from kalypso.scheduler.memory import KVLedger, MemoryManager, StageBudgets, TaskMemory
from tests.scheduler.conftest import EngineFactory
from tests.scheduler.factories import CheckingScheduler, notes, right_table

pytestmark = pytest.mark.usefixtures("schedulers")

OUTPUTS = SimOutputModel(yes_rate=0.6, min_output_tokens=4, max_output_tokens=20)
CAPACITY = 40


def join_query() -> Table:
    return (
        kalypso.table(notes(8, 30), name="notes")
        .sem_filter("Is the {text} relevant?")
        .sem_join(right_table("aspect", 3), "Does the {aspect} hold for the {text}?")
    )


def map_query() -> Table:
    # other notes than join_query's: the two queries share no prefix but the system's
    frame = notes(6, 20)
    frame["text"] = frame["text"].str.replace("w", "v")
    return (
        kalypso.table(frame, name="other")
        .sem_classify("Which kind is the {text}?", ["a", "b"], "kind")
        .sem_map("Describe the {text}.", "d", max_tokens=24, first_bound_tokens=24)
    )


async def alone(make_engine: EngineFactory, plan: Table, policy: str) -> QueryResult:
    return await plan.arun(make_engine(num_blocks=CAPACITY, outputs=OUTPUTS), policy=policy)


@pytest.mark.parametrize(
    ("first_policy", "second_policy"),
    [("adaptive", "adaptive"), ("adaptive", "parallel-bfs"), ("sequential", "static:0.5")],
)
async def test_two_queries_share_one_ledger(
    make_engine: EngineFactory,
    schedulers: list[CheckingScheduler],
    first_policy: str,
    second_policy: str,
) -> None:
    join_alone = await alone(make_engine, join_query(), first_policy)
    map_alone = await alone(make_engine, map_query(), second_policy)
    schedulers.clear()

    engine = make_engine(num_blocks=CAPACITY, outputs=OUTPUTS)
    ledger = KVLedger(engine.capacity.num_blocks)
    joined, mapped = await asyncio.gather(
        join_query().arun(engine, policy=first_policy, ledger=ledger, query_id="join"),
        map_query().arun(engine, policy=second_policy, ledger=ledger, query_id="map"),
    )

    assert joined.frame.equals(join_alone.frame)
    assert mapped.frame.equals(map_alone.frame)
    assert len(joined.frame) > 0 and len(mapped.frame) == 6
    assert ledger.capacity_blocks == CAPACITY
    assert 0 < ledger.peak_reserved_blocks <= CAPACITY
    assert ledger.reserved_blocks == 0
    # both reports see the shared ledger's peak
    assert joined.peak_reserved_blocks == mapped.peak_reserved_blocks == ledger.peak_reserved_blocks
    # both really ran at once on the engine
    assert len(schedulers) == 2
    assert {r.request_id.split(":")[0] for r in engine.requests} == {"join", "map"}


async def test_a_query_waits_while_another_query_runs_on_the_whole_cache(
    make_engine: EngineFactory,
) -> None:
    """Another query (its memory manager on the same ledger) runs a task reserving every
    block: this query admits nothing - not even by the last-resort rule, since a task is
    running - until that task completes; then it runs to the same result."""
    engine = make_engine(num_blocks=CAPACITY, outputs=OUTPUTS)
    ledger = KVLedger(CAPACITY)
    other = MemoryManager(ledger, StageBudgets([CAPACITY], [1]))
    hog = TaskMemory(0, CAPACITY, 0)
    other.allocate(hog)
    query = asyncio.ensure_future(join_query().arun(engine, ledger=ledger, query_id="late"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert engine.requests == []
    assert not query.done()
    assert other.complete(hog, children=0) == [hog]
    result = await query
    assert result.frame.equals((await alone(make_engine, join_query(), "adaptive")).frame)
    assert ledger.reserved_blocks == 0
    assert ledger.peak_reserved_blocks == CAPACITY
