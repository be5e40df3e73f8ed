"""One run over several engines (replicas): placement, work stealing, failure.

A :class:`ReplicaSet` holds N engines, each with its own KV ledger (and its own capacity
and cost model). A front end hands it its *units* (:class:`~kalypso.core.placement.Unit`:
a row's pipeline, a workflow query) and a function that runs a *chunk* of them on one
replica as an ordinary run; :meth:`ReplicaSet.map_units` returns every unit's chunk
result, and the front end merges them in unit order, so the output equals a one-engine
run.

* **Placement by prefix affinity** (:func:`~kalypso.core.placement.place`): units sharing
  a prefix key go to one replica, preferring one where the key is warm; loads balanced by
  weight.
* **Chunks, guided.** Each replica runs up to ``chunks_in_flight`` chunks at once. A
  chunk takes ``ceil(remaining / (chunks_in_flight * chunk_divisor))`` of the replica's
  queue (at least ``min_chunk_units``). The default (one chunk in flight, divisor 1) runs
  each replica's whole share as one run: on the simulator's GPU profiles a run's batch is
  widest that way, and chunks run side by side on one engine were measured slower
  (``python -m bench.replicas --chunks-in-flight``). A larger divisor leaves a tail of
  smaller chunks that idle replicas can steal.
* **Work stealing.** A replica whose queue is empty takes the later half of the queue
  with the most work left (whole affinity groups); nothing is ever in two queues, and a
  unit is taken from a queue exactly once. When no queue has any, it takes back from
  the running chunk with the most of them the later half of the units its run has not
  started (:class:`RunningChunk`: the run's scheduler core withdraws instances none of
  whose tasks was admitted, of affinity groups it has not started), so that one run per
  replica still balances. A unit started stays where it is: a relational run admits
  rows as its stage budgets allow, so a slow replica's later rows wait and can move; a
  ``cache-aware`` workflow run admits every query's first call at once, so its queries
  stay unless its window (or a policy such as ``querywise``) holds them back.
* **Failure of one replica.** A chunk that fails with an engine error (not a user error,
  see :func:`replica_failed`) retires its replica: the chunk's units and the rest of its
  queue are placed on the live replicas again. The run fails only when no replica is
  left, or on a user error (a Python step that raised), which any replica would repeat.
* **Several runs at once** (a job server's jobs) share the set: each
  :meth:`ReplicaSet.map_units` call has its own queues, every run's chunks on a replica
  share its ledger, and a replica that fails in one run is retired in all, its queued
  units of each run placed on the live replicas.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kalypso.core.hooks import Withdrawable
from kalypso.core.ledger import KVLedger
from kalypso.core.placement import Unit, place, queue_order
from kalypso.engine.protocol import Engine, EngineError, PromptTooLongError

logger = logging.getLogger(__name__)

T = TypeVar("T")

CHUNK_DIVISOR = 1.0
"""A chunk takes 1 / (chunks in flight x this) of its replica's remaining queue."""


class ReplicaSetError(RuntimeError):
    """Every replica failed; ``__cause__`` is the last replica's error."""


def replica_failed(error: BaseException) -> bool:
    """Whether ``error`` (or an exception it was raised from) is an engine's failure, which
    another replica may not repeat, rather than the run's own (a prompt too long, a Python
    step that raised: every replica would fail the same way)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, EngineError) and not isinstance(current, PromptTooLongError):
            return True
        current = current.__cause__ or current.__context__
    return False


@dataclass(eq=False)
class Replica:
    """One engine of a replica set, with its ledger and what the run did on it.

    Attributes:
        number: its position in the set.
        engine: the engine.
        ledger: the KV ledger of its runs (chunks in flight share it, of every run).
        alive: False once a chunk failed on it with an engine error.
        warm: affinity keys of units it ran (their prefixes may still be cached).
        units_done: units of chunks that completed on it.
        weight_done: their weight.
        stolen_units: units it took from other replicas' queues.
    """

    number: int
    engine: Engine
    ledger: KVLedger
    alive: bool = True
    warm: set[Hashable] = field(default_factory=set)
    units_done: int = 0
    weight_done: float = 0.0
    stolen_units: int = 0


class _Mapping:
    """The state of one :meth:`ReplicaSet.map_units` call: each replica's queue of its
    units, and its chunks running. Several calls may run at once on one set (a job server's
    jobs); each has its own."""

    def __init__(self, replicas: Sequence[Replica]) -> None:
        self.queues: dict[int, deque[Unit]] = {r.number: deque() for r in replicas}
        self.running: list[RunningChunk] = []
        self.changed = asyncio.Event()

    def weight(self, replica: Replica) -> float:
        return sum(unit.weight for unit in self.queues[replica.number])


class RunningChunk:
    """A chunk while it runs: its units (in queue order), and the scheduler core of its
    run's pipeline, attached by the run (:class:`~kalypso.core.hooks.ChunkLink`), from
    which an idle replica takes back units not yet started. Only while the run's first
    pipeline runs: a later pipeline's instances have all passed the first."""

    def __init__(
        self, replica: Replica, units: Sequence[Unit], *, on_attach: Callable[[], None]
    ) -> None:
        self.replica = replica
        self.units = list(units)
        self._core: Withdrawable | None = None
        self._pipelines = 0
        self._on_attach = on_attach

    def attach(self, core: Withdrawable) -> None:
        self._pipelines += 1
        self._core = core if self._pipelines == 1 else None
        self._on_attach()  # idle replicas may now take units back

    def detach(self, core: Withdrawable) -> None:
        self._core = None

    def untouched(self) -> list[Unit]:
        """The units the run has not started, of affinity groups it has not started
        either, in queue order (none when the run cannot say)."""
        if self._core is None:
            return []
        roots = self._core.untouched_roots()
        started = {u.affinity for u in self.units if u.index not in roots}
        return [
            unit
            for unit in self.units
            if unit.index in roots and (unit.affinity is None or unit.affinity not in started)
        ]

    def take_back(self) -> list[Unit]:
        """The later half of :meth:`untouched` (whole affinity groups, at least one unit
        when any is free), withdrawn from the run: it will not run them."""
        free = self.untouched()
        if self._core is None or not free:
            return []
        start = len(free) // 2
        while (  # do not split an affinity group between the two runs
            0 < start < len(free)
            and free[start].affinity is not None
            and free[start].affinity == free[start - 1].affinity
        ):
            start -= 1
        wanted = free[start:]
        taken = self._core.withdraw({unit.index for unit in wanted})
        self.units = [unit for unit in self.units if unit.index not in taken]
        return [unit for unit in wanted if unit.index in taken]


class ChunkUnits(list[Unit]):
    """A chunk's units as :meth:`ReplicaSet.map_units` hands them to its runner, with
    ``link``: pass it to the run (``RunHooks(chunk=units.link)``) so that an idle replica
    may take back units it has not started; they are then not in the chunk's result."""

    def __init__(self, units: Sequence[Unit], link: RunningChunk) -> None:
        super().__init__(units)
        self.link = link


@dataclass(frozen=True)
class ChunkResult(Generic[T]):
    """The result of one chunk: its units (in index order) and what the runner returned."""

    replica: int
    units: tuple[Unit, ...]
    value: T


class ReplicaSet:
    """Several engines that one run shares (see the module docstring).

    Args:
        engines: the replicas' engines, at least one. The set does not close them.
        ledgers: one KV ledger per engine (a host's, with its reserves), shared by every
            run on the set; default a ledger of each engine's capacity.
        chunks_in_flight: chunks each replica runs at once, per :meth:`map_units` call.
        min_chunk_units: the fewest units in a chunk (the last of a queue may be fewer).
        chunk_divisor: see the module docstring.
    """

    def __init__(
        self,
        engines: Sequence[Engine],
        *,
        ledgers: Sequence[KVLedger] | None = None,
        chunks_in_flight: int = 1,
        min_chunk_units: int = 1,
        chunk_divisor: float = CHUNK_DIVISOR,
    ) -> None:
        if not engines:
            raise ValueError("a replica set needs at least one engine")
        if chunks_in_flight < 1 or min_chunk_units < 1 or not chunk_divisor >= 1:
            raise ValueError("chunks_in_flight, min_chunk_units and chunk_divisor must be >= 1")
        if ledgers is not None and len(ledgers) != len(engines):
            raise ValueError(f"{len(ledgers)} ledgers for {len(engines)} engines")
        self.replicas = [
            Replica(
                number,
                engine,
                ledgers[number] if ledgers else KVLedger(engine.capacity.num_blocks),
            )
            for number, engine in enumerate(engines)
        ]
        self.chunks_in_flight = chunks_in_flight
        self.min_chunk_units = min_chunk_units
        self.chunk_divisor = chunk_divisor
        self._mappings: list[_Mapping] = []
        """The :meth:`map_units` calls running (a failed replica's queue in each moves)."""

    @property
    def engines(self) -> list[Engine]:
        return [replica.engine for replica in self.replicas]

    @property
    def live(self) -> list[Replica]:
        return [replica for replica in self.replicas if replica.alive]

    def explain(self) -> str:
        """The replicas and, after a run, what each did."""
        lines = [
            f"replica set: {len(self.replicas)} engines,"
            f" {self.chunks_in_flight} chunks in flight each"
        ]
        for replica in self.replicas:
            state = "live" if replica.alive else "failed"
            lines.append(
                f"  replica {replica.number} ({replica.engine.name}, {state}):"
                f" {replica.units_done} units done, {replica.stolen_units} stolen,"
                f" {len(replica.warm)} affinity keys warm"
            )
        return "\n".join(lines)

    async def map_units(
        self,
        units: Sequence[Unit],
        run_chunk: Callable[[Replica, ChunkUnits], Awaitable[T]],
    ) -> list[ChunkResult[T]]:
        """Run every unit exactly once, in chunks, on the replicas; the chunks' results.

        ``run_chunk(replica, units)`` runs ``units`` (in index order) on
        ``replica.engine`` with ``replica.ledger``; a runner that passes ``units.link``
        to its run (:class:`ChunkUnits`) lets idle replicas take back units it has not
        started, and its result then covers the rest (:attr:`ChunkResult.units`). A
        chunk that raises an error for which :func:`replica_failed` holds is run again
        elsewhere (its result is discarded);
        any other error cancels the other chunks and is raised. Calls may run at once
        (several runs on one set share its replicas' ledgers); a replica that fails in
        one is retired in all.

        Raises:
            ReplicaSetError: every replica failed.
        """
        if len({unit.index for unit in units}) != len(units):
            raise ValueError("units must have distinct indexes")
        live = self.live
        if not live:
            raise ReplicaSetError("no replica of the set is alive")
        mapping = _Mapping(self.replicas)
        for replica, queue in zip(
            live, place(units, len(live), warm=[r.warm for r in live]), strict=True
        ):
            mapping.queues[replica.number].extend(queue)
        results: list[ChunkResult[T]] = []
        failures: list[BaseException] = []
        self._mappings.append(mapping)
        try:
            async with asyncio.TaskGroup() as group:
                for replica in live:
                    for _ in range(self.chunks_in_flight):
                        group.create_task(
                            self._work(mapping, replica, run_chunk, results, failures)
                        )
        except BaseExceptionGroup as errors:  # a user error: the other chunks were cancelled
            raise errors.exceptions[0]  # noqa: B904 - the chunk's own error, as one engine raises it
        finally:
            self._mappings.remove(mapping)
        leftover = sum(len(queue) for queue in mapping.queues.values())
        if leftover or sum(len(r.units) for r in results) != len(units):
            raise ReplicaSetError(
                f"every replica failed ({len(failures)} chunk failures); {leftover} units left"
            ) from (failures[-1] if failures else None)
        return sorted(results, key=lambda r: r.units[0].index)

    async def _work(
        self,
        mapping: _Mapping,
        replica: Replica,
        run_chunk: Callable[[Replica, ChunkUnits], Awaitable[T]],
        results: list[ChunkResult[T]],
        failures: list[BaseException],
    ) -> None:
        """One worker of ``replica``: take chunks until no queue has any and no chunk runs
        anywhere (a failing replica's units come back), or ``replica`` fails."""
        while replica.alive:
            chunk = self._take(mapping, replica) or self._take_back(mapping, replica)
            if not chunk:
                if not mapping.running:
                    mapping.changed.set()  # wake the other idle workers: nothing is left
                    return
                mapping.changed.clear()
                await mapping.changed.wait()
                continue
            running = RunningChunk(replica, chunk, on_attach=mapping.changed.set)
            mapping.running.append(running)
            try:
                value = await run_chunk(replica, ChunkUnits(chunk, running))
            except Exception as error:
                if not replica_failed(error):
                    raise
                failures.append(error)
                self._retire(replica, mapping, running.units, error)
                return
            else:
                done = sorted(running.units, key=lambda u: u.index)  # less what was taken
                replica.units_done += len(done)
                replica.weight_done += sum(unit.weight for unit in done)
                replica.warm.update(u.affinity for u in done if u.affinity is not None)
                if done:
                    results.append(ChunkResult(replica.number, tuple(done), value))
            finally:
                mapping.running.remove(running)
                mapping.changed.set()

    def _take(self, mapping: _Mapping, replica: Replica) -> list[Unit]:
        """The next chunk of ``replica``: from its queue, else stolen (see the module
        docstring); empty when there is no work left anywhere."""
        queue = mapping.queues[replica.number]
        if not queue:
            self._steal(mapping, replica)
        if not queue:
            return []
        size = max(
            self.min_chunk_units,
            math.ceil(len(queue) / (self.chunks_in_flight * self.chunk_divisor)),
        )
        chunk = [queue.popleft() for _ in range(min(size, len(queue)))]
        # a chunk never splits an affinity group
        while queue and chunk[-1].affinity is not None and queue[0].affinity == chunk[-1].affinity:
            chunk.append(queue.popleft())
        return sorted(chunk, key=lambda u: u.index)

    def _take_back(self, mapping: _Mapping, thief: Replica) -> list[Unit]:
        """When no queue has units: the later half of the units not yet started of the
        running chunk (another live replica's) with the most of them by weight, taken
        back from its run (see :class:`RunningChunk`); empty when none has any."""
        victims = [
            (sum(unit.weight for unit in chunk.untouched()), chunk)
            for chunk in mapping.running
            if chunk.replica is not thief and chunk.replica.alive
        ]
        victims = [(weight, chunk) for weight, chunk in victims if weight > 0]
        if not victims:
            return []
        _, victim = max(victims, key=lambda v: (v[0], -v[1].replica.number))
        stolen = victim.take_back()
        thief.stolen_units += len(stolen)
        if stolen:
            logger.debug(
                "replica %d took back %d units not started from replica %d's run",
                thief.number,
                len(stolen),
                victim.replica.number,
            )
        return sorted(stolen, key=lambda u: u.index)

    def _steal(self, mapping: _Mapping, thief: Replica) -> None:
        """Move the later half of the busiest live queue (by weight) to ``thief``."""
        victims = [r for r in self.live if r is not thief and mapping.queues[r.number]]
        if not victims:
            return
        victim = max(victims, key=lambda r: (mapping.weight(r), -r.number))
        queue = mapping.queues[victim.number]
        keep = len(queue) - len(queue) // 2
        # do not split an affinity group between the two
        while (
            0 < keep < len(queue)
            and queue[keep].affinity is not None
            and queue[keep].affinity == queue[keep - 1].affinity
        ):
            keep += 1
        stolen = [queue.pop() for _ in range(len(queue) - keep)]
        if not stolen:  # one group left: take it whole
            stolen = list(queue)
            queue.clear()
        stolen.reverse()
        mapping.queues[thief.number].extend(stolen)
        thief.stolen_units += len(stolen)
        logger.debug(
            "replica %d stole %d units from replica %d", thief.number, len(stolen), victim.number
        )

    def _retire(
        self, replica: Replica, mapping: _Mapping, chunk: Sequence[Unit], error: BaseException
    ) -> None:
        """Mark ``replica`` failed; place its chunk (of ``mapping``) and its queue in every
        running mapping on the live replicas."""
        replica.alive = False
        live = self.live
        logger.warning(
            "replica %d (%s) failed: %s; its units move to %d live replicas",
            replica.number,
            replica.engine.name,
            error,
            len(live),
        )
        for each in self._mappings:
            queue = each.queues[replica.number]
            orphans = sorted([*(chunk if each is mapping else ()), *queue], key=lambda u: u.index)
            queue.clear()
            if not live:
                queue.extend(orphans)  # left over: the run fails
            elif orphans:
                placed = place(orphans, len(live), warm=[r.warm for r in live])
                for target, units in zip(live, placed, strict=True):
                    queues = each.queues
                    queues[target.number] = deque(queue_order([*queues[target.number], *units]))
            each.changed.set()  # idle workers of the live replicas take the moved units
