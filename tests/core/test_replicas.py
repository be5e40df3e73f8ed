"""The replica set: every unit runs exactly once, whatever the replicas' speeds and
failures; chunks keep affinity groups whole; a user error is raised as one engine raises
it (fake engines: only placement, stealing and failure are under test here)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalypso.core.placement import Unit, place, queue_order
from kalypso.core.replicas import (
    ChunkUnits,
    Replica,
    ReplicaSet,
    ReplicaSetError,
    replica_failed,
)
from kalypso.engine.protocol import EngineCapacity, EngineError, PromptTooLongError


@dataclass
class FakeEngine:
    """What a replica set reads of an engine: a name and a capacity."""

    name: str
    capacity: EngineCapacity = field(default_factory=lambda: EngineCapacity(100, 16, 1024))


def engines(count: int) -> list[FakeEngine]:
    return [FakeEngine(f"fake{i}") for i in range(count)]


@settings(max_examples=60, deadline=None)
@given(
    speeds=st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=6),
    units=st.integers(min_value=0, max_value=80),
    keys=st.integers(min_value=0, max_value=7),
    failing=st.sets(st.integers(min_value=0, max_value=5)),
    fail_after=st.integers(min_value=0, max_value=3),
)
def test_every_unit_runs_exactly_once_under_random_speeds_and_failures(
    speeds: list[int], units: int, keys: int, failing: set[int], fail_after: int
) -> None:
    failing = {f for f in failing if f < len(speeds)}
    work = [Unit(i, affinity=(i % keys) if keys else None, weight=1 + i % 3) for i in range(units)]
    replicas = ReplicaSet(engines(len(speeds)), chunks_in_flight=2, chunk_divisor=2)
    ran: Counter[int] = Counter()
    chunks_by: Counter[int] = Counter()

    async def run_chunk(replica: Replica, chunk: Sequence[Unit]) -> list[int]:
        chunks_by[replica.number] += 1
        await asyncio.sleep(0.0001 * speeds[replica.number] * len(chunk))
        if replica.number in failing and chunks_by[replica.number] > fail_after:
            raise EngineError(f"replica {replica.number} died")
        for unit in chunk:
            ran[unit.index] += 1
        return [unit.index for unit in chunk]

    async def main() -> None:
        try:
            results = await replicas.map_units(work, run_chunk)
        except ReplicaSetError:
            assert failing == set(range(len(speeds)))  # only when every replica died
            assert all(count == 1 for count in ran.values())  # still nothing twice
            return
        assert ran == Counter(range(units))  # each exactly once (failed chunks discarded)
        merged = [index for result in results for index in result.value]
        assert sorted(merged) == list(range(units))
        assert sum(r.units_done for r in replicas.replicas) == units

    asyncio.run(main())


@settings(max_examples=40, deadline=None)
@given(
    speeds=st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=5),
    runs=st.lists(st.integers(min_value=0, max_value=40), min_size=2, max_size=4),
    failing=st.sets(st.integers(min_value=0, max_value=4)),
    fail_after=st.integers(min_value=0, max_value=3),
)
def test_runs_at_once_on_one_set_each_run_every_unit_once(
    speeds: list[int], runs: list[int], failing: set[int], fail_after: int
) -> None:
    """Several runs share the set (a job server's jobs): a replica that fails in one is
    retired in all, and its queued units of every run move to the live replicas."""
    failing = {f for f in failing if f < len(speeds)}
    replicas = ReplicaSet(engines(len(speeds)), chunk_divisor=3)
    ran: list[Counter[int]] = [Counter() for _ in runs]
    chunks_by: Counter[int] = Counter()

    def runner(run: int) -> Callable[[Replica, Sequence[Unit]], Awaitable[None]]:
        async def run_chunk(replica: Replica, chunk: Sequence[Unit]) -> None:
            chunks_by[replica.number] += 1
            await asyncio.sleep(0.0001 * speeds[replica.number] * len(chunk))
            if replica.number in failing and chunks_by[replica.number] > fail_after:
                raise EngineError(f"replica {replica.number} died")
            ran[run].update(unit.index for unit in chunk)

        return run_chunk

    async def one(run: int, units: int) -> bool:
        work = [Unit(i, affinity=i % 4, weight=1 + i % 2) for i in range(units)]
        try:
            await replicas.map_units(work, runner(run))
        except ReplicaSetError:
            return False
        assert ran[run] == Counter(range(units))
        return True

    async def main() -> None:
        finished = await asyncio.gather(*(one(r, units) for r, units in enumerate(runs)))
        assert all(count == 1 for counts in ran for count in counts.values())
        if not all(finished):
            assert not replicas.live  # a run fails only when no replica is left

    asyncio.run(main())


class FakeRun:
    """A chunk's run as the core runs it: it starts its units one at a time, and the ones
    not started yet can be withdrawn (:class:`~kalypso.core.hooks.Withdrawable`)."""

    def __init__(self, roots: Sequence[int]) -> None:
        self.waiting = list(roots)
        self.started: list[int] = []

    def untouched_roots(self) -> set[int]:
        return set(self.waiting)

    def withdraw(self, roots: AbstractSet[int]) -> set[int]:
        taken = set(roots) & set(self.waiting)
        self.waiting = [root for root in self.waiting if root not in taken]
        return taken


@settings(max_examples=60, deadline=None)
@given(
    speeds=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=5),
    units=st.integers(min_value=0, max_value=60),
    keys=st.integers(min_value=0, max_value=6),
    failing=st.sets(st.integers(min_value=0, max_value=4)),
    fail_after=st.integers(min_value=1, max_value=40),
)
def test_units_taken_back_from_running_chunks_run_exactly_once(
    speeds: list[int], units: int, keys: int, failing: set[int], fail_after: int
) -> None:
    """Idle replicas take back units a running chunk has not started (one run per
    replica, so every balance past the placement is done so), under random speeds and
    failures: each unit runs once, in the chunk whose result lists it."""
    failing = {f for f in failing if f < len(speeds)}
    work = [Unit(i, affinity=(i % keys) if keys else None, weight=1 + i % 3) for i in range(units)]
    replicas = ReplicaSet(engines(len(speeds)))
    ran: Counter[int] = Counter()
    started_by: Counter[int] = Counter()

    async def run_chunk(replica: Replica, chunk: ChunkUnits) -> list[int]:
        run = FakeRun([unit.index for unit in chunk])
        chunk.link.attach(run)
        try:
            while run.waiting:
                root = run.waiting.pop(0)
                run.started.append(root)
                started_by[replica.number] += 1
                await asyncio.sleep(0.0001 * speeds[replica.number])
                if replica.number in failing and started_by[replica.number] > fail_after:
                    raise EngineError(f"replica {replica.number} died")
        finally:
            chunk.link.detach(run)
        ran.update(run.started)
        return run.started

    async def main() -> None:
        try:
            results = await replicas.map_units(work, run_chunk)
        except ReplicaSetError:
            assert failing == set(range(len(speeds)))
            assert all(count == 1 for count in ran.values())
            return
        assert ran == Counter(range(units))
        for result in results:  # a chunk's result lists exactly the units its run ran
            assert sorted(result.value) == [unit.index for unit in result.units]
        assert sum(r.units_done for r in replicas.replicas) == units

    asyncio.run(main())


def test_affinity_groups_stay_on_one_replica_when_nothing_fails() -> None:
    work = [Unit(i, affinity=f"doc{i % 5}") for i in range(50)]
    replicas = ReplicaSet(engines(3), chunks_in_flight=1)
    where: dict[str, set[int]] = {}

    async def run_chunk(replica: Replica, chunk: Sequence[Unit]) -> None:
        await asyncio.sleep(0.001 * len(chunk))
        for unit in chunk:
            where.setdefault(str(unit.affinity), set()).add(replica.number)

    asyncio.run(replicas.map_units(work, run_chunk))
    assert all(len(numbers) == 1 for numbers in where.values()), where


def test_placement_balances_weight_and_prefers_a_warm_replica() -> None:
    work = [Unit(i, affinity="a" if i < 4 else None) for i in range(8)]
    placed = place(work, 2, warm=[set(), {"a"}])
    assert [u.index for u in placed[1]][:4] == [0, 1, 2, 3]  # group "a" where it is warm
    assert sorted(len(q) for q in placed) == [4, 4]
    assert [u.index for u in queue_order([Unit(3, "x"), Unit(1), Unit(0, "x")])] == [0, 3, 1]


def test_a_user_error_is_raised_as_is_and_stops_the_run() -> None:
    replicas = ReplicaSet(engines(2))

    class StepFailed(Exception):
        pass

    async def run_chunk(replica: Replica, chunk: Sequence[Unit]) -> None:
        if any(unit.index == 7 for unit in chunk):
            raise StepFailed("a Python step raised")
        await asyncio.sleep(0.01)

    with pytest.raises(StepFailed):
        asyncio.run(replicas.map_units([Unit(i) for i in range(20)], run_chunk))
    assert all(replica.alive for replica in replicas.replicas)


def test_what_counts_as_a_replica_failure() -> None:
    assert replica_failed(EngineError("dead"))
    assert not replica_failed(PromptTooLongError("too long"))
    assert not replica_failed(ValueError("user"))
    try:
        try:
            raise EngineError("dead")
        except EngineError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert replica_failed(outer)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one engine"):
        ReplicaSet([])
    with pytest.raises(ValueError, match="distinct"):

        async def nothing(replica: Replica, chunk: Sequence[Unit]) -> None:
            return None

        asyncio.run(ReplicaSet(engines(1)).map_units([Unit(1), Unit(1)], nothing))


def test_an_idle_replica_steals_from_a_slow_one() -> None:
    replicas = ReplicaSet(engines(2), chunks_in_flight=1, chunk_divisor=4)

    async def run_chunk(replica: Replica, chunk: Sequence[Unit]) -> None:
        await asyncio.sleep((0.01 if replica.number == 1 else 0.0001) * len(chunk))

    asyncio.run(replicas.map_units([Unit(i) for i in range(64)], run_chunk))
    fast, slow = replicas.replicas
    assert fast.stolen_units > 0 and fast.units_done > slow.units_done
    assert fast.units_done + slow.units_done == 64


def test_an_idle_replica_takes_back_half_the_units_a_slow_run_has_not_started() -> None:
    replicas = ReplicaSet(engines(2))
    ran_on: dict[int, list[int]] = {0: [], 1: []}

    async def run_chunk(replica: Replica, chunk: ChunkUnits) -> None:
        run = FakeRun([unit.index for unit in chunk])
        chunk.link.attach(run)
        while run.waiting:
            ran_on[replica.number].append(run.waiting.pop(0))
            await asyncio.sleep(0.001 if replica.number == 0 else 0.02)
        chunk.link.detach(run)

    asyncio.run(replicas.map_units([Unit(i, affinity=i // 2) for i in range(40)], run_chunk))
    fast, slow = replicas.replicas
    assert fast.stolen_units > 0 and slow.stolen_units == 0
    assert sorted(ran_on[0] + ran_on[1]) == list(range(40))
    assert fast.units_done == len(ran_on[0]) > slow.units_done == len(ran_on[1])
    # only groups not started are taken back, whole: each key's units ran on one replica
    assert not {i // 2 for i in ran_on[0]} & {i // 2 for i in ran_on[1]}
