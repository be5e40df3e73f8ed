"""Replicas on a local Ray cluster (``ray.init(num_cpus=2)``): two actors hosting
simulated engines give the one-engine table; killing one actor mid-run (``ray.kill``)
loses and repeats nothing; a Ray Dataset goes in and comes out. The cluster is started
once for the module and shut down after it, even on failure."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator

import pandas as pd
import psutil
import pytest

ray = pytest.importorskip("ray")

import kalypso  # noqa: E402
import kalypso.ray as kray  # noqa: E402
from kalypso.engine.open import EngineSpec  # noqa: E402
from kalypso.engine.protocol import EngineError  # noqa: E402
from kalypso.engine.sim.engine import SimEngine  # noqa: E402

SPEC = EngineSpec(kind="sim", sim_profile="qwen3-8b-h100")
HALF_A_CPU = {"num_cpus": 0.5}
"""Each actor's share: the other half of each CPU is left for Ray Data's tasks."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def reviews(rows: int) -> pd.DataFrame:
    return pd.DataFrame(
        {"text": [f"review {i}: it {'works' if i % 4 else 'broke'}" for i in range(rows)]}
    )


def plan(frame: pd.DataFrame) -> kalypso.Table:
    return (
        kalypso.table(frame, name="reviews")
        .sem_filter("Is the review {text} positive?")
        .sem_map("Summarize {text} in five words.", "summary", max_tokens=12)
    )


def test_two_actors_give_the_one_engine_table(cluster: None) -> None:
    alone = plan(reviews(40)).run(SimEngine("qwen3-8b-h100"))
    replicas = kray.start_replicas(SPEC, 2, actor_options=HALF_A_CPU)
    try:
        assert [e.name for e in replicas.engines] == ["ray:sim:qwen3-8b-h100"] * 2
        spread = plan(reviews(40)).run(replicas)
        pd.testing.assert_frame_equal(spread.frame, alone.frame)
        assert spread.llm_calls == alone.llm_calls
        assert sum(r.units_done for r in replicas.replicas) == 40
        assert all(r.units_done > 0 for r in replicas.replicas)
    finally:
        kray.stop_replicas(replicas)


def test_killing_an_actor_mid_run_loses_and_repeats_nothing(cluster: None) -> None:
    alone = plan(reviews(400)).run(SimEngine("qwen3-8b-h100"))

    async def main() -> None:
        replicas = await kray.astart_replicas(SPEC, 2, actor_options=HALF_A_CPU)
        try:
            running = asyncio.create_task(plan(reviews(400)).arun(replicas))
            victim = replicas.replicas[1]
            while (await victim.engine.stats()).prefix_cache_queries_tokens == 0:
                await asyncio.sleep(0.005)  # until its engine has started on its share
            ray.kill(victim.engine.actor)  # type: ignore[attr-defined]
            spread = await running
            pd.testing.assert_frame_equal(spread.frame, alone.frame)
            assert not victim.alive and replicas.replicas[0].alive
            assert sum(r.units_done for r in replicas.replicas) == 400
            assert replicas.replicas[0].units_done == 400  # its own share and the victim's
            with pytest.raises(EngineError, match="actor died"):
                await victim.engine.stats()
        finally:
            await kray.astop_replicas(replicas)

    asyncio.run(main())


def test_a_ray_dataset_in_and_out(cluster: None) -> None:
    frame = reviews(30)
    alone = plan(frame).run(SimEngine("qwen3-8b-h100"))
    replicas = kray.start_replicas(SPEC, 2, actor_options=HALF_A_CPU)
    try:
        out, result = kray.map_plan(ray.data.from_pandas(frame), plan(frame.head(0)), replicas)
        pd.testing.assert_frame_equal(out.to_pandas(), alone.frame)
        assert result.llm_calls == alone.llm_calls
    finally:
        kray.stop_replicas(replicas)


def _engine_worker_cores() -> list[list[int]]:
    """The cores each vLLM worker process under a Ray actor may run on."""
    cores = []
    for process in psutil.process_iter(["name"]):
        with contextlib.suppress(psutil.Error):
            if process.info["name"].startswith("VLLM::Worker") and any(
                "EngineHost" in parent.name() for parent in process.parents()
            ):
                cores.append(sorted(process.cpu_affinity()))
    return cores


@pytest.mark.vllm
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_two_real_vllm_replicas_give_the_one_engine_table(cluster: None) -> None:
    """The bundled model in the deterministic mode, one small engine per actor, each on a
    core of its own (``cpu_actor_options``: the engines' compute processes run on the first
    two cores this process may use, one each): the table equals the run on one of them
    alone (in the deterministic mode batching changes no answer, so this is the one-engine
    table)."""
    from tests.conftest import deterministic_vllm_settings

    settings = deterministic_vllm_settings(kv_blocks=16, max_num_seqs=4)
    frame = reviews(8)
    cores = sorted(os.sched_getaffinity(0))[:2]
    options = kray.cpu_actor_options(2, cores=cores)
    replicas = kray.start_replicas(
        EngineSpec(kind="vllm", settings=settings), 2, actor_options=options
    )
    try:
        assert sorted(_engine_worker_cores()) == [[cores[0]], [cores[1]]]
        expected = plan(frame).run(replicas.engines[0]).frame
        spread = plan(frame).run(replicas)
        pd.testing.assert_frame_equal(spread.frame, expected)
        assert all(r.units_done == 4 for r in replicas.replicas)
        assert replicas.engines[0].name.startswith("ray:vllm")
    finally:
        kray.stop_replicas(replicas)
