"""Replicas on Ray: one actor per engine, a replica set over them, Ray Data in and out.

Here (a local cluster)::

    import ray, kalypso, kalypso.ray
    from kalypso.engine.open import EngineSpec

    ray.init(num_cpus=2)
    replicas = kalypso.ray.start_replicas(EngineSpec(kind="sim", sim_profile="qwen3-8b-h100"), 2)
    result = plan.run(replicas)            # each row's pipeline on one replica
    kalypso.ray.stop_replicas(replicas)

On a cluster the same code runs after ``ray.init(address="ray://head:10001")`` (or
``"auto"`` on a node of it), with one actor per GPU group: ``actor_options={"num_gpus":
tp}`` and ``EngineSpec(kind="vllm", settings=VLLMSettings(extra_engine_args={
"tensor_parallel_size": tp, "distributed_executor_backend": "ray"}))``; vLLM's own
parallelism then runs inside each replica (see the user guide's Ray section). Several vLLM
CPU replicas on one host need ``actor_options=cpu_actor_options(count)``: a slice of the
host's cores each (vLLM binds every CPU engine to the same cores otherwise).

:func:`map_plan` runs a plan's operators over a Ray Dataset and returns one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import ray

from kalypso.core.replicas import ReplicaSet
from kalypso.engine.open import EngineSpec
from kalypso.query.plan import QueryResult, Table
from kalypso.ray.cpu import cpu_actor_options
from kalypso.ray.engine import RayEngine

if TYPE_CHECKING:
    from ray.data import Dataset

logger = logging.getLogger(__name__)

__all__ = [
    "RayEngine",
    "astart_replicas",
    "astop_replicas",
    "cpu_actor_options",
    "map_plan",
    "start_replicas",
    "stop_replicas",
]


async def astart_replicas(
    spec: EngineSpec,
    count: int,
    *,
    actor_options: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
    **replica_set_options: Any,
) -> ReplicaSet:
    """Start ``count`` actors, each hosting an engine opened from ``spec``, on the Ray
    cluster (``ray.init()`` locally when this process is not connected to one); a replica
    set over them. Actors that started are stopped if another fails to.

    Args:
        actor_options: Ray actor options for every actor, or one dict per actor (a
            placement group bundle each, for example).
        replica_set_options: for :class:`~kalypso.core.replicas.ReplicaSet`
            (``chunks_in_flight``, ``chunk_divisor``, ``min_chunk_units``).
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if not ray.is_initialized():
        ray.init()
    per_actor = (
        [actor_options or {}] * count
        if not isinstance(actor_options, Sequence)
        else list(actor_options)
    )
    if len(per_actor) != count:
        raise ValueError(f"{len(per_actor)} actor_options for {count} replicas")
    started = await asyncio.gather(
        *(RayEngine.start(spec, n, actor_options=per_actor[n]) for n in range(count)),
        return_exceptions=True,
    )
    engines = [e for e in started if isinstance(e, RayEngine)]
    failed = [e for e in started if not isinstance(e, RayEngine)]
    if failed:
        await asyncio.gather(*(engine.close() for engine in engines))
        raise failed[0]
    return ReplicaSet(engines, **replica_set_options)


def start_replicas(
    spec: EngineSpec,
    count: int,
    *,
    actor_options: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
    **replica_set_options: Any,
) -> ReplicaSet:
    """:func:`astart_replicas`, for code outside an event loop."""
    return asyncio.run(
        astart_replicas(spec, count, actor_options=actor_options, **replica_set_options)
    )


async def astop_replicas(replicas: ReplicaSet) -> None:
    """Close every replica's engine and end its actor."""
    await asyncio.gather(*(engine.close() for engine in replicas.engines))


def stop_replicas(replicas: ReplicaSet) -> None:
    """:func:`astop_replicas`, for code outside an event loop."""
    asyncio.run(astop_replicas(replicas))


def map_plan(
    dataset: Dataset, plan: Table, replicas: ReplicaSet, **options: Any
) -> tuple[Dataset, QueryResult]:
    """Run ``plan``'s operators over the rows of ``dataset`` (in place of the plan's own
    source table) on ``replicas``; the output rows as a Ray Dataset, and the run's result
    (statistics, the frame). The rows are read block by block into the driver, placed on
    the replicas like any table's, and the output keeps the dataset's row order."""
    import ray.data

    frame = dataset.to_pandas()
    over = Table(frame, plan.name, plan.operators)
    result = over.run(replicas, **options)
    return ray.data.from_pandas(result.frame), result
