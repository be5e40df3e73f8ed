"""``kv_overcommit``: a run's own ledger of more blocks than the engine's cache, on the
simulator at the real runs' size (44 blocks of 32 tokens, 16 sequences). More calls run
at once, the engine preempts to make room, and the outputs do not change."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pandas as pd
import pytest

from kalypso.core.errors import QueryError
from kalypso.core.ledger import KVLedger
from kalypso.core.runner import RunState
from kalypso.engine.open import open_engine
from kalypso.engine.protocol import Engine, EngineError, GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine
from kalypso.workflow.library import workload
from kalypso.workflow.run import WorkflowResult, arun
from tests.workflow.real_size import real_size_sim

NUM_BLOCKS = 44
SIM = real_size_sim(NUM_BLOCKS)


def _run_iterative(engine: Engine, kv_overcommit: float) -> Coroutine[Any, Any, WorkflowResult]:
    """Iterative (small) on ``engine``, not yet awaited."""
    job = workload("iterative", "small")
    (flow,), (inputs,) = job.workflows, job.inputs
    return arun(flow, engine, inputs, system_prompt="", kv_overcommit=kv_overcommit)


async def _iterative(kv_overcommit: float) -> tuple[pd.DataFrame, int, int, int]:
    """Iterative (small) on a fresh simulator: outputs, the ledger's peak, the engine's
    preemptions, the prefill tokens computed."""
    engine = await open_engine(SIM)
    try:
        result = await asyncio.wait_for(_run_iterative(engine, kv_overcommit), timeout=120)
        stats = await engine.stats()
        return (
            result.outputs,
            result.report.peak_reserved_blocks,
            stats.preemptions,
            result.prefill_tokens,
        )
    finally:
        await engine.close()


async def test_an_overcommitted_ledger_admits_beyond_the_cache_with_the_same_outputs() -> None:
    exact, exact_peak, exact_preempted, exact_prefill = await _iterative(1.0)
    over, over_peak, over_preempted, over_prefill = await _iterative(1.25)
    assert exact_peak <= NUM_BLOCKS and exact_preempted == 0
    assert NUM_BLOCKS < over_peak <= int(1.25 * NUM_BLOCKS)
    assert (exact_peak, over_peak) == (44, 52)
    # the engine preempts to make room; a preempted call finds its prompt's blocks still
    # cached, so both compute the minimum prefill
    assert (exact_preempted, over_preempted) == (0, 6)
    assert (exact_prefill, over_prefill) == (16116, 16116)
    assert over.equals(exact)


@pytest.mark.parametrize("kv_overcommit", [0.99, 4.01])
async def test_overcommit_out_of_range_is_refused_before_any_call(kv_overcommit: float) -> None:
    from kalypso.core.errors import PlanError

    with pytest.raises(PlanError, match="kv_overcommit must be in"):
        await _iterative(kv_overcommit)


class FailingSim(SimEngine):
    """Fails query 5's fourth summary once the engine has preempted something (so the
    failure lands while the overcommitted ledger has the engine short of blocks)."""

    failed = False

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        if "summary3:5" in request.request_id and not self.failed:
            assert self.num_preemptions > 0, "the failure should come after a preemption"
            self.failed = True
            raise EngineError("injected failure")
        return await super().generate(request)


def _record_ledgers(monkeypatch: pytest.MonkeyPatch) -> list[KVLedger]:
    """The ledger of every run created from now on (an overcommitted run's is its own)."""
    ledgers: list[KVLedger] = []
    create = RunState.create

    def recording(*args: Any, **kwargs: Any) -> RunState:
        state = create(*args, **kwargs)
        ledgers.append(state.ledger)
        return state

    monkeypatch.setattr(RunState, "create", recording)
    return ledgers


async def _assert_nothing_held(engine: Engine, ledger: KVLedger) -> None:
    assert ledger.reserved_blocks == 0 and ledger.running_tasks == 0
    assert ledger.owners == frozenset()
    stats = await engine.stats()
    assert (stats.running_requests, stats.waiting_requests) == (0, 0)
    assert stats.kv_usage_fraction == 0.0


async def test_a_failed_overcommitted_run_releases_everything_and_the_next_run_is_equal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exact, *_ = await _iterative(1.0)
    ledgers = _record_ledgers(monkeypatch)
    engine = FailingSim(
        num_blocks=NUM_BLOCKS, block_size_tokens=32, max_num_seqs=16, profile="smollm2-cpu-f32"
    )
    try:
        with pytest.raises(QueryError) as failure:
            await asyncio.wait_for(_run_iterative(engine, 1.25), timeout=120)
        assert failure.value.op_id == "summary3" and failure.value.key == (5,)
        assert ledgers[0].capacity_blocks == NUM_BLOCKS  # the run admitted beyond it:
        assert ledgers[0].peak_reserved_blocks > NUM_BLOCKS
        await _assert_nothing_held(engine, ledgers[0])
        again = await asyncio.wait_for(_run_iterative(engine, 1.25), 120)
        assert again.outputs.equals(exact)
        await _assert_nothing_held(engine, ledgers[1])
    finally:
        await engine.close()


async def test_a_cancelled_overcommitted_run_releases_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledgers = _record_ledgers(monkeypatch)
    engine = await open_engine(SIM)
    assert isinstance(engine, SimEngine)
    try:
        run = asyncio.ensure_future(_run_iterative(engine, 1.25))
        for _ in range(1_000_000):  # bounded: the simulator needs no wall time
            if engine.num_preemptions > 0 or run.done():
                break
            await asyncio.sleep(0)
        assert not run.done(), "cancel while the engine is short of blocks"
        assert ledgers[0].reserved_blocks > NUM_BLOCKS, "the ledger is overcommitted"
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        await _assert_nothing_held(engine, ledgers[0])
    finally:
        await engine.close()
