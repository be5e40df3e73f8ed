"""Workflows on real vLLM (CPU, the bundled model) in the deterministic mode (float32,
greedy): the same outputs under every policy, a ``cacheable`` call's warmed document
found in vLLM's prefix cache, a run that fails on a call's timeout leaving nothing
behind - in the engine or in the ledger - after which the same engine answers as before,
and a relational plan beside a workflow on one ledger, each answering as it does alone.
A batch file (``kalypso.batch``) runs on the same engine: each line's answer is the one
its request gets alone, in input order."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest

import kalypso
from kalypso import KVLedger, QueryError
from kalypso import workflow as wf
from kalypso.batch import arun_batch
from kalypso.engine.vllm_local import LocalVLLMEngine
from tests.conftest import poll_stats_until
from tests.workflow.flows import debate, read_then_answer

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

QUESTIONS = [f"What is {i} plus {i}?" for i in range(3)]
DOCS = [
    f"Filing {i}. "
    + " ".join(f"In quarter {q} unit {i} sold {7 * q + i} widgets." for q in range(30))
    for i in range(3)
]


@pytest.fixture(scope="module")
def engine(roomy_vllm: LocalVLLMEngine) -> LocalVLLMEngine:
    """The suite's shared engine: every prompt here fits its cache at once."""
    return roomy_vllm


async def _debate(engine: LocalVLLMEngine, **options: object) -> wf.WorkflowResult:
    await engine.reset_prefix_cache()
    return await wf.arun(debate(), engine, {"question": QUESTIONS}, system_prompt="", **options)


async def test_every_policy_gives_the_same_outputs(engine: LocalVLLMEngine) -> None:
    reference = await _debate(engine, policy="cache-aware")
    assert reference.outputs.notna().all().all()
    for policy in ("querywise", "opwise", "all-ready"):
        other = await _debate(engine, policy=policy)
        pd.testing.assert_frame_equal(reference.outputs, other.outputs)
    stats = await engine.stats()
    assert (stats.running_requests, stats.waiting_requests) == (0, 0)


async def test_a_cacheable_calls_document_is_found_in_the_prefix_cache(
    engine: LocalVLLMEngine,
) -> None:
    """Each query's document (several 128-token blocks) is warmed before ``brief``'s
    answer exists; ``answer`` then finds at least those tokens in vLLM's prefix cache.
    Without ``cacheable`` it finds only the static system prompt's blocks, if any."""
    inputs = {"doc": DOCS, "question": QUESTIONS}
    results = {}
    for cacheable in (False, True):
        await engine.reset_prefix_cache()
        results[cacheable] = await wf.arun(
            read_then_answer(cacheable=cacheable), engine, inputs, system_prompt=""
        )
    plain, warm = results[False], results[True]
    pd.testing.assert_frame_equal(plain.outputs, warm.outputs)
    assert warm.warm is not None and warm.warm.prefixes == 3 and warm.warm.failed == 0
    assert warm.warm.tokens >= 3 * 2 * 128  # each document is at least two whole blocks
    plain_answer = next(s for s in plain.operator_stats if s.operator == "answer")
    warm_answer = next(s for s in warm.operator_stats if s.operator == "answer")
    assert warm_answer.cached_tokens >= warm.warm.tokens
    assert plain_answer.cached_tokens < 128  # no call shares a whole block with another
    assert warm.prefill_tokens == plain.prefill_tokens  # warming moves the prefill earlier


async def test_a_timed_out_call_fails_the_run_and_holds_nothing(engine: LocalVLLMEngine) -> None:
    reference = await _debate(engine, policy="cache-aware")
    ledger = KVLedger(engine.capacity.num_blocks)
    with pytest.raises(QueryError) as failed:
        await _debate(engine, policy="cache-aware", ledger=ledger, call_timeout_s=0.001)
    assert "timed out" in str(failed.value) or "timeout" in str(failed.value).lower()
    assert ledger.reserved_blocks == 0 and ledger.running_tasks == 0 and not ledger.owners
    await poll_stats_until(
        lambda s: s.running_requests == 0 and s.waiting_requests == 0, engine, lambda: False
    )
    again = await _debate(engine, policy="cache-aware", ledger=ledger)
    pd.testing.assert_frame_equal(reference.outputs, again.outputs)


async def test_a_query_and_a_workflow_share_the_engine_and_the_ledger(
    engine: LocalVLLMEngine,
) -> None:
    """A relational plan and a workflow at once, on one engine and one ledger, each
    return exactly what it returns alone (float32, greedy)."""
    frame = pd.DataFrame(
        {"text": [f"Order {i}: the parcel arrived late and damaged." for i in range(4)]}
    )
    plan = kalypso.table(frame, name="orders").sem_map(
        "Summarize {text} in three words.", "summary", max_tokens=8
    )
    await engine.reset_prefix_cache()
    query_alone = await plan.arun(engine)
    flow_alone = await _debate(engine, policy="cache-aware")
    await engine.reset_prefix_cache()
    ledger = KVLedger(engine.capacity.num_blocks)
    query, flow = await asyncio.gather(
        plan.arun(engine, ledger=ledger),
        wf.arun(debate(), engine, {"question": QUESTIONS}, system_prompt="", ledger=ledger),
    )
    pd.testing.assert_frame_equal(query.frame, query_alone.frame)
    pd.testing.assert_frame_equal(flow.outputs, flow_alone.outputs)
    assert ledger.reserved_blocks == 0 and not ledger.owners


async def test_a_batch_file_answers_each_line_as_its_request_alone(
    engine: LocalVLLMEngine, tmp_path: Path
) -> None:
    lines = [
        {
            "custom_id": f"d{d}q{q}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "bundled",
                "messages": [
                    {"role": "system", "content": "Answer with one number."},
                    {"role": "user", "content": f"{DOCS[d]}\n{QUESTIONS[q]}"},
                ],
                "max_tokens": 8,
                "temperature": 0,
            },
        }
        for q in range(2)
        for d in range(3)
    ]
    lines.append(
        {
            "custom_id": "completion",
            "method": "POST",
            "url": "/v1/completions",
            "body": {
                "model": "bundled",
                "prompt": "1, 2, 3,",
                "max_tokens": 4,
                "temperature": 0,
                "logprobs": 1,
            },
        }
    )
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    await engine.reset_prefix_cache()
    result = await arun_batch(source, tmp_path / "out.jsonl", engine)
    assert (result.answered, result.failed) == (7, 0)
    assert result.cached_tokens > 0  # the documents' second questions found them cached
    together = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [o["custom_id"] for o in together] == [line["custom_id"] for line in lines]
    for line, answer in zip(lines, together, strict=True):
        single = tmp_path / "one.jsonl"
        single.write_text(json.dumps(line) + "\n")
        await engine.reset_prefix_cache()
        await arun_batch(single, tmp_path / "one.out.jsonl", engine)
        alone = json.loads((tmp_path / "one.out.jsonl").read_text())
        got, want = (
            answer["response"]["body"]["choices"][0],
            alone["response"]["body"]["choices"][0],
        )
        assert got.get("message", got.get("text")) == want.get("message", want.get("text"))
        assert got["finish_reason"] == want["finish_reason"]
        if got["logprobs"] is not None:  # float32 in another batch: equal to 1e-4 nats
            assert got["logprobs"]["tokens"] == want["logprobs"]["tokens"]
            assert got["logprobs"]["token_logprobs"] == pytest.approx(
                want["logprobs"]["token_logprobs"], abs=1e-4
            )
    logprobs = together[-1]["response"]["body"]["choices"][0]["logprobs"]
    assert (
        len(logprobs["token_logprobs"])
        == together[-1]["response"]["body"]["usage"]["completion_tokens"]
    )
    stats = await engine.stats()
    assert (stats.running_requests, stats.waiting_requests) == (0, 0)
