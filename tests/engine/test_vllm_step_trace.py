"""The step-trace scheduler (:mod:`kalypso.engine.vllm_step_trace`): its token split, and
on real vLLM (in-process, the bundled model, float32) that the trace accounts for every
prompt token computed and every token decoded."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bench.engine_steps import load_steps, step_seconds
from kalypso.engine.attention import attention_pairs
from kalypso.engine.batch import generate_all
from kalypso.engine.protocol import GenerateRequest
from kalypso.engine.vllm_step_trace import (
    STEP_TRACE_ENV_VAR,
    STEP_TRACE_SCHEDULER_CLS,
    split_scheduled_tokens,
)
from tests.conftest import deterministic_vllm_settings


@pytest.mark.parametrize(
    ("scheduled", "computed_after", "prompt", "expected"),
    [
        (100, 100, 300, (100, 0)),  # a first prefill chunk
        (200, 300, 300, (200, 0)),  # the last chunk, after a 100-token cache hit
        (1, 301, 300, (0, 1)),  # a decode step
        (4, 302, 300, (2, 2)),  # a chunk that ends the prompt and goes on (speculation)
    ],
)
def test_split(scheduled: int, computed_after: int, prompt: int, expected: tuple[int, int]) -> None:
    assert split_scheduled_tokens(scheduled, computed_after, prompt) == expected


def test_split_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="negative"):
        split_scheduled_tokens(-1, 5, 5)
    with pytest.raises(ValueError, match="only 3 computed"):
        split_scheduled_tokens(4, 3, 5)


@pytest.mark.parametrize(
    ("scheduled", "before", "expected"),
    [
        (3, 0, 6),  # a 3-token prompt: 1 + 2 + 3 pairs
        (1, 300, 301),  # one decode token after 300
        (2, 10, 23),  # two tokens after 10: 11 + 12
        (0, 50, 0),
    ],
)
def test_attention_pairs(scheduled: int, before: int, expected: int) -> None:
    assert attention_pairs(scheduled, before) == expected


def test_attention_pairs_add_up_over_chunks() -> None:
    # a prompt's pairs do not depend on how it is chunked across steps
    assert attention_pairs(100, 0) + attention_pairs(50, 100) == attention_pairs(150, 0)
    with pytest.raises(ValueError, match="negative"):
        attention_pairs(1, -1)


def test_importing_does_not_import_vllm() -> None:
    code = (
        "import sys, kalypso.engine.vllm_step_trace as m;"
        " assert 'vllm' not in sys.modules, 'vllm imported';"
        " assert m.STEP_TRACE_SCHEDULER_CLS == m.__name__ + '.StepTraceScheduler'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    import kalypso.engine.vllm_step_trace as module

    with pytest.raises(AttributeError):
        module.NoSuchScheduler  # noqa: B018


@pytest.mark.vllm
@pytest.mark.timeout(600)
async def test_trace_accounts_for_every_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kalypso.engine.vllm_local import LocalVLLMEngine

    path = tmp_path / "steps.jsonl"
    monkeypatch.setenv(STEP_TRACE_ENV_VAR, str(path))
    settings = dataclasses.replace(
        deterministic_vllm_settings(16, max_num_seqs=4), scheduler_cls=STEP_TRACE_SCHEDULER_CLS
    )
    engine = await LocalVLLMEngine.start(settings)
    try:
        rng = random.Random(7)
        words = ["harbor", "clause", "forest", "battery", "signal", "meadow"]
        requests = []
        for i, length in enumerate((40, 120, 70)):
            text = f"Request {i}: " + " ".join(rng.choice(words) for _ in range(length))
            requests.append(GenerateRequest(f"r{i}", tuple(engine.tokenizer.encode(text)), 6))
        results = await generate_all(engine, requests)
    finally:
        await engine.close()
    steps = load_steps(path)
    assert steps, "the scheduler wrote no step"
    assert sum(s["prefill_tokens"] for s in steps) == sum(r.prefill_tokens for r in results)
    # each request's first token comes out of its last prefill step; vLLM may schedule one
    # more decode step for a request that has just finished (async scheduling), so the
    # decode count lies between the tokens decoded after the first and all of them
    decoded = sum(r.output_tokens for r in results)
    assert decoded - len(results) <= sum(s["decode_tokens"] for s in steps) <= decoded
    # every computed token attended to itself and every earlier token of its request,
    # whatever the chunking (cached tokens are not computed)
    low = sum(
        attention_pairs(r.prefill_tokens + r.output_tokens - 1, r.cached_tokens) for r in results
    )
    high = sum(
        attention_pairs(r.prefill_tokens + r.output_tokens, r.cached_tokens) for r in results
    )
    assert low <= sum(s["attention_pairs"] for s in steps) <= high
    assert all(seconds >= 0 for seconds in step_seconds(steps))
    assert max(s["requests"] for s in steps) <= 4
