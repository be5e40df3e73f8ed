"""One engine, several queries: a shared :class:`KVLedger` keeps the sum of every query's
reservations within the engine's capacity (each block charged to its query), and each
query returns what it returns alone.
"""

from __future__ import annotations

import asyncio

import pytest

import kalypso
from kalypso.core.ledger import KVLedger
from kalypso.core.memory import MemoryManager, StageBudgets, TaskMemory
from kalypso.engine.sim import SimOutputModel
from kalypso.query import QueryResult, Table
from tests.scheduler.conftest import EngineFactory
from tests.scheduler.factories import CheckingLedger, check_run, notes, right_table

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
    make_engine: EngineFactory, first_policy: str, second_policy: str
) -> None:
    join_alone = await alone(make_engine, join_query(), first_policy)
    map_alone = await alone(make_engine, map_query(), second_policy)

    engine = make_engine(num_blocks=CAPACITY, outputs=OUTPUTS)
    ledger = CheckingLedger(engine.capacity.num_blocks)
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
    check_run(joined, ledger, owner="join")
    check_run(mapped, ledger, owner="map")
    assert ledger.over_commits == []
    # both reports see the shared ledger's peak
    assert joined.peak_reserved_blocks == mapped.peak_reserved_blocks == ledger.peak_reserved_blocks
    # both really ran at once on the engine: each sent requests before the other's last
    owners = [r.request_id.split(":")[0] for r in engine.requests]
    assert set(owners) == {"join", "map"}

    def last(owner: str) -> int:
        return len(owners) - 1 - owners[::-1].index(owner)

    assert owners.index("join") < last("map") and owners.index("map") < last("join")


async def test_a_query_waits_while_another_query_runs_on_the_whole_cache(
    make_engine: EngineFactory,
) -> None:
    """Another query (its memory manager on the same ledger) runs a task reserving every
    block: this query admits nothing - not even by the last-resort rule, since a task is
    running - until that task completes; then it runs to the same result."""
    engine = make_engine(num_blocks=CAPACITY, outputs=OUTPUTS)
    ledger = KVLedger(CAPACITY)
    other = MemoryManager(ledger, StageBudgets([CAPACITY], [1]), "other")
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


async def test_queries_on_one_ledger_each_return_what_they_return_alone(
    make_engine: EngineFactory,
) -> None:
    """Four queries (two of each plan, every policy kind) on one small ledger at once."""
    plans = [join_query(), map_query(), join_query(), map_query()]
    policies = ["adaptive", "sequential", "parallel-bfs", "static:0.3"]
    alone_frames = [
        (await alone(make_engine, plan, policy)).frame
        for plan, policy in zip(plans, policies, strict=True)
    ]
    engine = make_engine(num_blocks=CAPACITY, outputs=OUTPUTS)
    ledger = CheckingLedger(CAPACITY)
    results = await asyncio.gather(
        *(
            plan.arun(engine, policy=policy, ledger=ledger, query_id=f"q{i}")
            for i, (plan, policy) in enumerate(zip(plans, policies, strict=True))
        )
    )
    for i, (result, frame) in enumerate(zip(results, alone_frames, strict=True)):
        assert result.frame.equals(frame)
        check_run(result, ledger, owner=f"q{i}")
    assert ledger.reserved_blocks == 0
    assert ledger.owners == frozenset()
    assert ledger.peak_reserved_blocks <= CAPACITY


async def test_two_queries_with_one_id_on_one_ledger_collide_before_any_call(
    make_engine: EngineFactory,
) -> None:
    """One id on one ledger would make the queries release each other's blocks: the
    second is refused before it sends anything, the first runs to its own result."""
    engine = make_engine(num_blocks=CAPACITY, outputs=OUTPUTS)
    ledger = KVLedger(CAPACITY)
    first = asyncio.ensure_future(join_query().arun(engine, ledger=ledger, query_id="same"))
    await asyncio.sleep(0)
    sent = len(engine.requests)
    with pytest.raises(kalypso.PlanError, match="'same' is already running"):
        await map_query().arun(engine, ledger=ledger, query_id="same")
    assert all(r.request_id.startswith("same:") for r in engine.requests)
    assert not any(":2:sem_map:" in r.request_id for r in engine.requests[sent:])
    result = await first
    assert result.frame.equals((await alone(make_engine, join_query(), "adaptive")).frame)
    assert ledger.reserved_blocks == 0


def test_a_ledger_admits_against_the_least_factor_of_its_owners() -> None:
    """Alone, an owner gets the ledger it asked for; an owner asking for the cache brings
    the limit down for both, and the limit is the capacity again once they are gone."""
    ledger = KVLedger(CAPACITY)
    assert ledger.admit_blocks == CAPACITY
    ledger.register("wide", ledger_factor=1.5)
    assert ledger.admit_blocks == 60
    ledger.reserve("wide", 55)
    assert ledger.fits(5) and not ledger.fits(6)
    ledger.register("narrow")
    assert ledger.admit_blocks == CAPACITY
    assert not ledger.fits(1) and ledger.free_blocks == 0  # 55 held stay, nothing more
    ledger.unregister("narrow")
    assert ledger.admit_blocks == 60 and ledger.fits(5)
    ledger.unregister("wide")
    assert (ledger.admit_blocks, ledger.reserved_blocks) == (CAPACITY, 0)


def test_a_fair_sharing_ledger_admits_against_its_capacity_whatever_its_owners_ask() -> None:
    ledger = KVLedger(CAPACITY, fair_share=True)
    ledger.register("wide", ledger_factor=2.0)
    assert ledger.admit_blocks == CAPACITY and not ledger.fits(CAPACITY + 1)


@pytest.mark.parametrize("factor", [0.5, 0.0, float("nan"), float("inf")])
def test_a_ledger_factor_below_one_is_refused(factor: float) -> None:
    ledger = KVLedger(CAPACITY)
    with pytest.raises(ValueError, match=r"a ledger factor must be >= 1\.0 and finite"):
        ledger.register("q", ledger_factor=factor)
    assert ledger.owners == frozenset() and ledger.admit_blocks == CAPACITY


async def test_a_run_waiting_for_room_goes_on_when_the_narrow_owner_leaves() -> None:
    """A lowered limit rises again at the narrow owner's unregistering, which wakes the
    runs waiting for room."""
    ledger = KVLedger(CAPACITY)
    ledger.register("wide", ledger_factor=1.5)
    ledger.register("narrow")
    ledger.reserve("wide", CAPACITY)
    waiting = asyncio.ensure_future(ledger.wait_for_release())
    await asyncio.sleep(0)
    assert not waiting.done()
    ledger.unregister("narrow")
    await asyncio.wait_for(waiting, timeout=5)
    assert ledger.fits(20) and not ledger.fits(21)
