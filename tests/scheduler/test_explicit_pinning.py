"""Explicit pinning on the simulator: pins are released when children are done, and the
deadlock they can cause is detected and broken (paper section 6)."""

from __future__ import annotations

import asyncio
import dataclasses

import pandas as pd
import pytest

import kalypso
from kalypso.core.scheduler import TaskOutcome
from kalypso.engine.protocol import GenerateRequest, GenerateResult
from kalypso.engine.sim import SimEngine, SimOutputModel
from tests.core.fakes import JOIN_AND_NOTE, FakeProgram, Workload, make_core

VOCAB = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
VOCAB += ["eta", "theta", "iota", "kappa", "lambda", "mu"]
HYPOTHESES = pd.DataFrame({"h": [f"hypothesis number {k} holds" for k in range(5)]})


def documents(n: int, words: int) -> pd.DataFrame:
    texts = [
        " ".join(VOCAB[(i * 7 + j * 3) % len(VOCAB)] + str(j % 13) for j in range(words))
        for i in range(n)
    ]
    return pd.DataFrame({"text": texts})


def fan_out_plan(words: int) -> kalypso.Table:
    return (
        kalypso.table(documents(8, words))
        .sem_filter("Is the {text} relevant?")
        .sem_join(kalypso.table(HYPOTHESES), "Does the {text} say {h}?")
        .sem_map("Why does the {text} say {h}?", "why", max_tokens=8)
    )


class PinsWholeRequests(SimEngine):
    """Pins every full block of a pinned request, more than the scheduler asks (its
    ``pin_blocks``, the prefix the ledger reserves): blocks the ledger does not see."""

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        return await super().generate(dataclasses.replace(request, pin_blocks=None))


def engine(num_blocks: int, cls: type[SimEngine] = SimEngine) -> SimEngine:
    return cls(
        "smollm2-cpu",
        num_blocks=num_blocks,
        block_size_tokens=16,
        max_model_len_tokens=num_blocks * 16,
        outputs=SimOutputModel(yes_rate=0.9),
    )


async def run_once(
    plan: kalypso.Table, num_blocks: int, cls: type[SimEngine] = SimEngine, **kwargs: str
) -> kalypso.QueryResult:
    sim = engine(num_blocks, cls)
    try:
        return await asyncio.wait_for(plan.arun(sim, **kwargs), timeout=120)
    finally:
        await sim.close()


async def test_deadlock_under_explicit_pins_is_broken_and_every_tuple_is_processed_once() -> None:
    """Stress: a 12-block cache, parents of ~9 pinned blocks (the engine pins their whole
    requests, beyond the prefixes the ledger reserves), 5 children each. A child cannot
    fit beside its parent's pins, the engine waits with nothing running, and the
    scheduler must unpin everything and finish on virtual pinning."""
    plan = fan_out_plan(words=100)
    baseline = await run_once(plan, 12, policy="operator-at-a-time")
    pinned = await run_once(plan, 12, PinsWholeRequests, policy="adaptive", pinning="explicit")
    assert pinned.pipeline_reports[0].deadlocks >= 1
    pd.testing.assert_frame_equal(baseline.frame, pinned.frame)
    assert len(pinned.frame) == len(baseline.frame) > 0
    keys = list(pinned.frame.index)
    assert len(keys) == len(set(keys))


async def test_pinning_only_the_reserved_prefix_does_not_deadlock() -> None:
    """The stress above with the scheduler's pins as asked: each parent pins the prefix
    the ledger reserves for its children, not its whole request, and the pins never fill
    the cache behind the ledger's back (before, this run deadlocked)."""
    plan = fan_out_plan(words=100)
    baseline = await run_once(plan, 12, policy="operator-at-a-time")
    pinned = await run_once(plan, 12, policy="adaptive", pinning="explicit")
    assert pinned.pipeline_reports[0].deadlocks == 0
    pd.testing.assert_frame_equal(baseline.frame, pinned.frame)


async def test_pins_are_released_when_the_last_child_is_done() -> None:
    plan = fan_out_plan(words=40)
    sim = engine(64)
    try:
        result = await plan.arun(sim, policy="adaptive", pinning="explicit")
        assert result.pipeline_reports[0].deadlocks == 0
        assert sim.block_pool.num_pinned_blocks == 0
        assert sim.block_pool.pin_keys() == []
    finally:
        await sim.close()
    assert result.dependent_hit_rate == 1.0


async def test_explicit_pinning_needs_an_engine_that_supports_it() -> None:
    class NoPins(SimEngine):
        @property
        def supports_pinning(self) -> bool:
            return False

    sim = NoPins(num_blocks=64, block_size_tokens=16)
    try:
        with pytest.raises(kalypso.PlanError, match="explicit pinning"):
            await fan_out_plan(words=20).arun(sim, pinning="explicit")
        assert (await sim.stats()).prefix_cache_queries_tokens == 0
    finally:
        await sim.close()


def test_calls_in_flight_when_pinning_stops_release_their_pins_when_they_return() -> None:
    """Deadlock recovery unpins everything, but the calls already in the engine carry
    their task's pin key, and the engine pins their blocks when they finish. Their keys
    are released as they come back (before the fix they stayed pinned until the parents
    were done, and a run that submits many calls at once pinned the cache full again with
    the deadlock check already off); no call admitted later carries a key."""
    workload = Workload(list(JOIN_AND_NOTE), fanouts=[3])
    core = make_core(workload, "adaptive", explicit_pinning=True)
    core.start([FakeProgram(workload, 0, (i,)) for i in range(12)])
    core.schedule()
    in_flight = list(core.running.values())
    keys = sorted(t.pin_key for t in in_flight if t.pin_key is not None)
    assert in_flight and len(keys) == len(in_flight)  # first-stage tasks all pin
    assert any(core.waiting[0])  # more first-stage tasks wait

    core.stop_pinning()
    assert core.pins_in_flight
    core.update_from_output([TaskOutcome(t) for t in in_flight])
    out = core.schedule()
    assert sorted(out.unpin) == keys
    assert not core.pins_in_flight
    assert out.admitted and all(t.pin_key is None for t in out.admitted)
    while core.has_work:  # to the end: nothing is unpinned twice, nothing pins again
        core.update_from_output([TaskOutcome(t) for t in core.running.values()])
        out = core.schedule()
        assert out.unpin == [] and all(t.pin_key is None for t in out.admitted)
    assert core.report.deadlocks == 1
    assert core.ledger.held_by("q") == 0
