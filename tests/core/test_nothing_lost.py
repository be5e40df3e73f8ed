"""Nothing outlives a failed or cancelled run: its KV reservations, its pins, its requests.

Every test here ends by checking the shared ledger holds nothing for anyone, and that the
other queries on it finished with the results they give alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pandas as pd
import pytest

import kalypso
from kalypso import KVLedger, QueryError
from kalypso.engine.protocol import (
    EngineError,
    EngineTimeoutError,
    GenerateRequest,
    GenerateResult,
    RequestAbortedError,
)
from kalypso.engine.sim import SimEngine, SimOutputModel

OUTPUTS = SimOutputModel(yes_rate=0.5, min_output_tokens=4, max_output_tokens=20)


def docs(n: int = 4, words: int = 100, tag: str = "w") -> pd.DataFrame:
    return pd.DataFrame(
        {"i": range(n), "text": [" ".join(f"{tag}{i}x{j}" for j in range(words)) for i in range(n)]}
    )


def assert_ledger_empty(ledger: KVLedger) -> None:
    assert ledger.reserved_blocks == 0
    assert ledger.running_tasks == 0
    assert ledger.owners == frozenset()


async def within(awaitable: Any, seconds: float = 30.0) -> Any:
    """Await with a generous limit: a regression here used to hang for ever."""
    return await asyncio.wait_for(awaitable, seconds)


async def test_a_failing_query_releases_its_reservation_and_the_next_query_runs() -> None:
    """The repro of the issue: a Python step raising mid-run left 12 of 16 blocks reserved
    and the next query on the ledger hung for ever."""
    engine = SimEngine(num_blocks=16, block_size_tokens=16, outputs=OUTPUTS)
    ledger = KVLedger(16)
    bad = (
        kalypso.table(docs())
        .sem_map("Sum {text}", "s", max_tokens=32)
        .map(lambda r: 1 / (r["i"] - 1), "x")
    )
    with pytest.raises(QueryError) as failure:
        await within(bad.arun(engine, ledger=ledger, query_id="bad"))
    assert isinstance(failure.value.__cause__, ZeroDivisionError)
    assert failure.value.op_id == "2:map" and failure.value.key == (1,)
    assert_ledger_empty(ledger)
    good = await within(
        kalypso.table(docs()).sem_filter("Is {text} ok?").arun(engine, ledger=ledger)
    )
    assert good.llm_calls == 4
    assert_ledger_empty(ledger)
    await engine.close()


def query(number: int) -> kalypso.Table:
    """Eight different queries over different texts (they share only the system prompt)."""
    tag = "abcdefgh"[number]
    plan = kalypso.table(docs(6, 60, tag), name=f"t{number}").sem_filter("Is the {text} relevant?")
    if number % 2:
        aspects = pd.DataFrame({"aspect": [f"{tag}a{k} {tag}b{k}" for k in range(3)]})
        plan = plan.sem_join(aspects, "Does the {aspect} hold for the {text}?")
    return plan.sem_map("Say why, about the {text}.", "why", max_tokens=24, first_bound_tokens=8)


class FailingSim(SimEngine):
    """The simulator, failing every request whose id contains ``fail_on``."""

    def __init__(self, fail_on: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_on = fail_on

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        if self.fail_on and self.fail_on in request.request_id:
            await asyncio.sleep(0)
            raise EngineError(f"injected failure on {request.request_id}")
        return await super().generate(request)


async def test_eight_queries_on_one_ledger_one_fails_one_is_cancelled_six_finish_as_alone() -> None:
    alone = []
    for number in range(8):
        solo = SimEngine(num_blocks=48, block_size_tokens=16, outputs=OUTPUTS)
        alone.append(await query(number).arun(solo, query_id=f"q{number}"))
        await solo.close()

    engine = FailingSim("q2:2:sem_map:", num_blocks=48, block_size_tokens=16, outputs=OUTPUTS)
    ledger = KVLedger(48)
    runs = [
        asyncio.create_task(query(n).arun(engine, ledger=ledger, query_id=f"q{n}"))
        for n in range(8)
    ]
    while engine.num_steps < 5:  # let every query start and hold blocks
        await asyncio.sleep(0)
    assert ledger.reserved_blocks > 0
    runs[5].cancel()
    results = await within(asyncio.gather(*runs, return_exceptions=True), 60)

    assert isinstance(results[2], QueryError) and "injected failure" in str(results[2])
    assert isinstance(results[5], asyncio.CancelledError)
    for number in (0, 1, 3, 4, 6, 7):
        result = results[number]
        assert isinstance(result, kalypso.QueryResult), result
        pd.testing.assert_frame_equal(result.frame, alone[number].frame)
        assert [(d.op_id, d.key, d.choice) for d in result.decisions] == [
            (d.op_id, d.key, d.choice) for d in alone[number].decisions
        ]
    assert_ledger_empty(ledger)
    assert (await engine.stats()).running_requests == 0
    assert (await engine.stats()).waiting_requests == 0
    await engine.close()


async def test_a_failed_query_keeps_the_rows_it_completed() -> None:
    keep_all = SimOutputModel(yes_rate=1.0, min_output_tokens=4, max_output_tokens=20)
    engine = FailingSim("q:2:sem_map:3", num_blocks=64, block_size_tokens=16, outputs=keep_all)
    plan = kalypso.table(docs(6, 20)).sem_filter("Is {text} ok?").sem_map("Why {text}?", "why")
    with pytest.raises(QueryError) as failure:
        await plan.arun(engine, query_id="q", policy="sequential")
    partial = failure.value.partial
    assert isinstance(partial, kalypso.QueryResult)
    # sequential: the tuples before row 3 completed the whole plan
    full = await plan.arun(SimEngine(num_blocks=64, block_size_tokens=16, outputs=keep_all))
    done = full.frame[full.frame["i"] < 3].reset_index(drop=True)
    pd.testing.assert_frame_equal(partial.frame, done)
    await engine.close()


class AbortingSim(SimEngine):
    async def generate(self, request: GenerateRequest) -> GenerateResult:
        if ":2:sem_map:" in request.request_id:
            raise RequestAbortedError(f"request {request.request_id!r} was aborted")
        return await super().generate(request)


async def test_an_abort_is_an_error_never_an_answer() -> None:
    engine = AbortingSim(num_blocks=64, block_size_tokens=16, outputs=OUTPUTS)
    ledger = KVLedger(64)
    plan = kalypso.table(docs(3, 20)).sem_filter("Is {text} ok?").sem_map("Why {text}?", "why")
    with pytest.raises(QueryError) as failure:
        await plan.arun(engine, ledger=ledger)
    assert isinstance(failure.value.__cause__, RequestAbortedError)
    assert_ledger_empty(ledger)
    await engine.close()


class HangingSim(SimEngine):
    """Never answers the map's calls and ignores their timeout (a broken engine): the
    runner's backstop must still end the call."""

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        if ":2:sem_map:" in request.request_id:
            await asyncio.Event().wait()
        return await super().generate(request)


async def test_a_hung_engine_times_out_and_releases_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kalypso.core import runner

    monkeypatch.setattr(runner, "BACKSTOP_GRACE_S", 0.0)
    engine = HangingSim(num_blocks=64, block_size_tokens=16, outputs=OUTPUTS)
    ledger = KVLedger(64)
    plan = kalypso.table(docs(3, 20)).sem_filter("Is {text} ok?").sem_map("Why {text}?", "why")
    with pytest.raises(QueryError) as failure:
        await within(plan.arun(engine, ledger=ledger, call_timeout_s=0.2))
    assert isinstance(failure.value.__cause__, EngineTimeoutError)
    assert_ledger_empty(ledger)
    await engine.close()


async def test_a_failed_query_unpins_what_it_pinned() -> None:
    engine = FailingSim(
        "q:3:sem_join:1.1",
        num_blocks=64,
        block_size_tokens=16,
        outputs=SimOutputModel(yes_rate=1.0),
    )
    ledger = KVLedger(64)
    plan = (
        kalypso.table(docs(4, 30))
        .sem_filter("Is {text} ok?")
        .sem_join(pd.DataFrame({"aspect": ["p q", "r s"]}), "Does {aspect} hold for {text}?")
    )
    with pytest.raises(QueryError):
        await plan.arun(
            engine, ledger=ledger, pinning="explicit", query_id="q", policy="sequential"
        )
    assert engine.block_pool.pin_keys() == []
    assert_ledger_empty(ledger)
    await engine.close()


async def test_two_runs_with_one_query_id_on_one_ledger_are_refused() -> None:
    engine = SimEngine(num_blocks=64, block_size_tokens=16, outputs=OUTPUTS)
    ledger = KVLedger(64)
    plan = kalypso.table(docs(3, 20)).sem_filter("Is {text} ok?")
    first = asyncio.create_task(plan.arun(engine, ledger=ledger, query_id="same"))
    await asyncio.sleep(0)
    with pytest.raises(kalypso.PlanError, match="already running"):
        await plan.arun(engine, ledger=ledger, query_id="same")
    await first
    assert_ledger_empty(ledger)
    await engine.close()
