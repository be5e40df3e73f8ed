"""A cache-aware workflow whose calls continue no conversation sizes its own ledger by
predicted time (:mod:`kalypso.core.ledger_size`), on the simulator at exact counts:
MapRed over the Helium paper's shape P3 (prompt parts of 1,024 tokens, answers of 512),
12 queries on a cache of 687 blocks of 16 tokens, the ``qwen3-8b-h100`` profile
admits against the calls' mean occupancy, and the CPU profile against the cache; Debate,
whose rounds continue conversations, weighs it alike beside its instance window. A run
on the larger ledger that fails or is cancelled while the engine preempts holds nothing
after. A ledger shared between runs (a replica's) admits against the least of their
choices."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bench.shapes import SHAPES, shaped
from kalypso import workflow as wf
from kalypso.core.errors import QueryError
from kalypso.core.ledger import KVLedger
from kalypso.core.replicas import ReplicaSet
from kalypso.core.runner import RunState
from kalypso.engine.protocol import EngineError, GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine, SimOutputModel
from kalypso.engine.sim.clock import SharedClock
from kalypso.workflow.library import Workload
from kalypso.workflow.plan import WorkflowPlan, plan
from kalypso.workflow.run import arun
from tests.workflow.test_overcommit import _assert_nothing_held, _record_ledgers

NUM_BLOCKS = 687
OCCUPANCY = 1.2376
"""A call holds 83.35 blocks (1,333.6 tokens, the prefixes calls share divided among
them), 512 tokens of them its answer: 1,333.6 / (1,333.6 - 256)."""


def _engine(profile: str, clock: SharedClock | None = None) -> SimEngine:
    output = SHAPES["P3"].output_tokens
    return SimEngine(
        profile,
        clock=clock,
        num_blocks=NUM_BLOCKS,
        block_size_tokens=16,
        max_model_len_tokens=NUM_BLOCKS * 16,
        max_num_seqs=256,
        outputs=SimOutputModel(min_output_tokens=output, max_output_tokens=output),
    )


def _job(workflow: str = "mapred") -> Workload:
    return shaped(workflow, SHAPES["P3"], queries=12)


def _plan(engine: SimEngine, workflow: str = "mapred", **options: Any) -> WorkflowPlan:
    job = _job(workflow)
    (flow,), (inputs,) = job.workflows, job.inputs
    return plan(flow, engine, inputs, system_prompt="", **options)


def test_a_gpu_admits_against_the_calls_mean_occupancy_and_explains_it() -> None:
    planned = _plan(_engine("qwen3-8b-h100"))
    assert planned.policy.ledger_factor == pytest.approx(OCCUPANCY, abs=1e-4)
    text = planned.explain()
    assert "-> the calls' mean occupancy: 850 blocks (1.24x the cache)" in text
    assert "the cache's ledger: 687 blocks (1.00x the cache)" in text


def test_a_cpu_admits_against_the_cache() -> None:
    planned = _plan(_engine("smollm2-cpu-f32"))
    assert planned.policy.ledger_factor == 1.0
    assert "-> the cache's ledger: 687 blocks" in planned.explain()


def test_a_workflow_that_continues_conversations_weighs_its_ledger_too() -> None:
    """Debate's rounds continue their conversations under an instance window; the
    ledger beside the window is weighed alike (a call holds 98.7 blocks, 1,578.9 tokens,
    its answer 512 of them: 1,578.9 / (1,578.9 - 256))."""
    planned = _plan(_engine("qwen3-8b-h100"), "debate")
    assert planned.policy.ledger_factor == pytest.approx(1.1935, abs=1e-4)
    text = planned.explain()
    assert "instance window: 4 conversation groups in flight" in text
    assert "-> the calls' mean occupancy: 819 blocks (1.19x the cache)" in text


@pytest.mark.parametrize(
    ("options", "blocks"),
    [
        ({}, int(NUM_BLOCKS * 1.2375732266109853)),
        ({"kv_overcommit": 1.0}, NUM_BLOCKS),  # a number is the user's, kept as given
        ({"kv_overcommit": 1.5}, int(NUM_BLOCKS * 1.5)),
        ({"pinning": "explicit"}, NUM_BLOCKS),  # hard pins beyond the cache would fill it
    ],
)
def test_the_run_own_ledger_takes_the_policy_choice_unless_told(
    options: dict[str, Any], blocks: int
) -> None:
    engine = _engine("qwen3-8b-h100")
    planned = _plan(engine, **options)
    state = RunState.create(engine, planned.options, "q", None, planned.policy)
    assert state.ledger.capacity_blocks == NUM_BLOCKS
    state.register_owner()
    assert state.ledger.admit_blocks == blocks


async def _chosen_and_cache_runs(workflow: str) -> list[tuple[wf.WorkflowResult, int]]:
    """``workflow`` on its chosen ledger, then on the cache's: each result with the
    engine's preemptions."""
    job = _job(workflow)
    (flow,), (inputs,) = job.workflows, job.inputs
    runs = []
    for kv_overcommit in (None, 1.0):
        engine = _engine("qwen3-8b-h100")
        try:
            result = await arun(flow, engine, inputs, system_prompt="", kv_overcommit=kv_overcommit)
            runs.append((result, (await engine.stats()).preemptions))
        finally:
            await engine.close()
    return runs


async def test_the_larger_ledger_runs_beyond_the_cache_with_the_same_answers() -> None:
    """The engine preempts 24 calls to make room; each finds its prompt's blocks cached
    again, so both runs compute the same prefill, and the same answers."""
    (chosen, chosen_preempted), (cache, cache_preempted) = await _chosen_and_cache_runs("mapred")
    assert (chosen.report.peak_reserved_blocks, chosen_preempted) == (831, 24)
    assert (cache.report.peak_reserved_blocks, cache_preempted) == (665, 0)
    assert chosen.prefill_tokens == cache.prefill_tokens == 75868
    assert chosen.outputs.equals(cache.outputs)


async def test_a_conversation_preempted_on_the_larger_ledger_gives_the_same_answers() -> None:
    """On the larger ledger the engine preempts 27 calls; a preempted round's
    continuation computes part of its conversation again (5,712 prefill tokens more),
    and every answer is the one of the run on the cache's ledger."""
    (chosen, chosen_preempted), (cache, cache_preempted) = await _chosen_and_cache_runs("debate")
    assert (chosen.report.peak_reserved_blocks, chosen_preempted) == (795, 27)
    assert (cache.report.peak_reserved_blocks, cache_preempted) == (660, 0)
    assert (chosen.prefill_tokens, cache.prefill_tokens) == (85228, 79516)
    assert chosen.outputs.equals(cache.outputs)


@pytest.mark.parametrize(
    ("beside", "peak_blocks", "preempted"),
    [(None, 831, 24), (1.0, 665, 0), (1.5, 831, 24)],
)
async def test_a_shared_ledger_admits_against_the_least_choice_of_its_runs(
    beside: float | None, peak_blocks: int, preempted: int
) -> None:
    """A run on a ledger shared with other runs (a replica's, a batch file's) admits
    against its policy's choice while it is alone there or beside wider runs, and
    against the cache beside a run that asks for it: the same peaks and preemptions as
    the run on its own ledger of either size."""
    job = _job()
    (flow,), (inputs,) = job.workflows, job.inputs
    engine = _engine("qwen3-8b-h100")
    ledger = KVLedger(NUM_BLOCKS)
    if beside is not None:
        ledger.register("beside", ledger_factor=beside)
    try:
        result = await arun(flow, engine, inputs, system_prompt="", ledger=ledger)
        assert (result.report.peak_reserved_blocks, (await engine.stats()).preemptions) == (
            peak_blocks,
            preempted,
        )
        assert result.prefill_tokens == 75868
        assert ledger.owners == (frozenset() if beside is None else frozenset({"beside"}))
        assert ledger.reserved_blocks == 0
    finally:
        await engine.close()


class _FailingAfterPreemption(SimEngine):
    """Fails the first call sent after the engine preempted one (so the failure lands
    while the larger ledger has the engine short of blocks)."""

    failed = False

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        if self.num_preemptions > 0 and not self.failed:
            self.failed = True
            raise EngineError("injected failure")
        return await super().generate(request)


def _failing_engine(clock: SharedClock | None = None) -> _FailingAfterPreemption:
    output = SHAPES["P3"].output_tokens
    return _FailingAfterPreemption(
        "qwen3-8b-h100",
        clock=clock,
        num_blocks=NUM_BLOCKS,
        block_size_tokens=16,
        max_model_len_tokens=NUM_BLOCKS * 16,
        max_num_seqs=256,
        outputs=SimOutputModel(min_output_tokens=output, max_output_tokens=output),
    )


@pytest.mark.parametrize("workflow", ["mapred", "debate"])
@pytest.mark.parametrize("end", ["engine failure", "cancel"])
async def test_a_run_on_the_larger_ledger_that_fails_or_is_cancelled_releases_everything(
    monkeypatch: pytest.MonkeyPatch, end: str, workflow: str
) -> None:
    """Debate's runs end with conversations in flight under the window, preempted ones
    among them."""
    ledgers = _record_ledgers(monkeypatch)
    engine = _failing_engine() if end == "engine failure" else _engine("qwen3-8b-h100")
    job = _job(workflow)
    (flow,), (inputs,) = job.workflows, job.inputs
    try:
        run = asyncio.ensure_future(arun(flow, engine, inputs, system_prompt=""))
        if end == "engine failure":
            with pytest.raises(QueryError, match="injected failure"):
                await asyncio.wait_for(run, timeout=120)
        else:
            for _ in range(1_000_000):  # bounded: the simulator needs no wall time
                if engine.num_preemptions > 0 or run.done():
                    break
                await asyncio.sleep(0)
            assert not run.done(), "cancel while the engine is short of blocks"
            assert ledgers[0].reserved_blocks > NUM_BLOCKS, "the larger ledger is in use"
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
        assert ledgers[0].peak_reserved_blocks > NUM_BLOCKS
        await _assert_nothing_held(engine, ledgers[0])
        assert ledgers[0].admit_blocks == NUM_BLOCKS  # the run's factor left with it
    finally:
        await engine.close()


async def _replicated_run_equals_one_engine_run(engines: list[SimEngine]) -> ReplicaSet:
    """MapRed on a replica set of ``engines`` (closed after), checked against the
    one-engine run's outputs; the set, to read its replicas' ledgers."""
    job = _job()
    (flow,), (inputs,) = job.workflows, job.inputs
    alone = _engine("qwen3-8b-h100")
    try:
        expected = await arun(flow, alone, inputs, system_prompt="")
    finally:
        await alone.close()
    replicas = ReplicaSet(engines)
    try:
        spread = await arun(flow, replicas, inputs, system_prompt="")
    finally:
        for engine in engines:
            await engine.close()
    assert spread.outputs.equals(expected.outputs)
    return replicas


async def test_each_replica_admits_against_its_runs_choice() -> None:
    """On a replica set, each replica's ledger is shared by the chunks run there: the
    chunk of MapRed's 12 queries each replica runs alone admits beyond the cache, as the
    one-engine run does, with the one-engine outputs."""
    clock = SharedClock()
    engines = [_engine("qwen3-8b-h100", clock) for _ in range(2)]
    replicas = await _replicated_run_equals_one_engine_run(engines)
    assert [r.ledger.peak_reserved_blocks for r in replicas.replicas] == [831, 831]
    assert [e.num_preemptions for e in engines] == [11, 11]
    assert all(r.ledger.reserved_blocks == 0 and not r.ledger.owners for r in replicas.replicas)


async def test_a_replica_failing_while_its_larger_ledger_preempts_holds_nothing_after() -> None:
    """A replica whose engine fails while its chunk admits beyond the cache is retired:
    its ledger holds nothing and admits against the cache again, and the live replica
    runs the chunk again to the one-engine outputs."""
    clock = SharedClock()
    failing = _failing_engine(clock)
    replicas = await _replicated_run_equals_one_engine_run(
        [failing, _engine("qwen3-8b-h100", clock)]
    )
    assert failing.failed
    dead = replicas.replicas[0].ledger
    assert dead.peak_reserved_blocks > NUM_BLOCKS
    assert (dead.reserved_blocks, dead.owners, dead.admit_blocks) == (0, frozenset(), NUM_BLOCKS)
