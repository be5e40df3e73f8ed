"""The query layer on real vLLM (CPU, bundled model, greedy decoding)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pandas as pd
import pytest

import kalypso
from kalypso.datasets.reviews import load_bundled
from kalypso.engine.vllm_local import LocalVLLMEngine
from kalypso.engine.vllm_settings import VLLMSettings, kv_bytes_per_token
from kalypso.models import resolve_model

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

KV_BLOCKS = 12  # 1,536 tokens: about three reviews, far less than the table


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[LocalVLLMEngine]:
    per_token = kv_bytes_per_token(resolve_model())
    assert per_token is not None
    settings = VLLMSettings(kv_cache_bytes=KV_BLOCKS * 128 * per_token, max_num_seqs=8)
    eng = await LocalVLLMEngine.start(settings)
    try:
        yield eng
    finally:
        await eng.close()


@pytest.fixture(scope="module")
def reviews() -> pd.DataFrame:
    return load_bundled().reviews.head(10)[["review_id", "product", "text"]]


ASPECTS = pd.DataFrame(
    {
        "aspect": [
            "The reviewer complains about battery life.",
            "The reviewer praises the screen.",
            "The reviewer recommends the product.",
        ]
    }
)


def three_operator_plan(reviews: pd.DataFrame) -> kalypso.Table:
    return (
        kalypso.table(reviews, name="reviews")
        .sem_filter("Does this {text} talk about the battery?")
        .sem_join(kalypso.table(ASPECTS, name="aspects"), "Is this true of the {text}: {aspect}")
        .sem_map("In a few words, why is this true of the {text}: {aspect}", "why", max_tokens=16)
    )


async def test_same_answers_pipelined_and_operator_at_a_time(
    engine: LocalVLLMEngine, reviews: pd.DataFrame
) -> None:
    """Scheduling must never change results (greedy decoding on real vLLM)."""
    plan = three_operator_plan(reviews)
    await engine.reset_prefix_cache()
    baseline = await plan.arun(engine, policy="operator-at-a-time")
    await engine.reset_prefix_cache()
    pipelined = await plan.arun(engine, policy="pipelined", max_tasks_in_flight=4)
    assert len(baseline.frame) > 0, "the plan should keep some rows for the comparison to bite"
    pd.testing.assert_frame_equal(baseline.frame, pipelined.frame)
    assert baseline.llm_calls == pipelined.llm_calls
    assert baseline.prompt_tokens == pipelined.prompt_tokens
    # with a KV cache far smaller than the table, only pipelining reuses tuple prefixes
    assert pipelined.prefill_tokens < baseline.prefill_tokens
    assert pipelined.cached_tokens > baseline.cached_tokens


async def test_every_operator_runs_on_vllm(engine: LocalVLLMEngine, reviews: pd.DataFrame) -> None:
    small = reviews.head(4)
    corpus = [
        "Lithium-ion batteries lose capacity as they age and with heat.",
        "OLED screens show deep blacks and vivid colours.",
        "Noise cancelling headphones use microphones to cancel ambient sound.",
        "A warranty covers manufacturing defects for a fixed period.",
    ]
    plan = (
        kalypso.table(small, name="reviews")
        .map(lambda r: len(r["text"].split()), "words")
        .filter(lambda r: r["words"] > 0)
        .sem_classify(
            "What is the sentiment of the {text}?", ["positive", "negative", "mixed"], "sentiment"
        )
        .sem_extract(
            "From the {text}, give the product type and the price if any.",
            ["product_type", "price"],
            max_tokens=32,
        )
        .sem_map("Name the main topic of the {text} in three words.", "topic", max_tokens=12)
        .index_search(corpus, "{topic}", k=2, output_column="evidence")
        .sem_join(
            kalypso.table(ASPECTS, name="aspects"),
            "Is this true of the {text}: {aspect}",
            index=kalypso.IndexJoin(
                left="{text}", right_column="aspect", k=2, accept_below=0.05, reject_above=0.95
            ),
        )
        .sem_filter("Is the {text} written in English?")
        .sem_topk("Which {text} is the most enthusiastic?", k=2)
        .sem_agg(
            "Summarize what these {text} have in common in one sentence.", "summary", max_tokens=32
        )
    )
    await engine.reset_prefix_cache()
    result = await plan.arun(engine, policy="pipelined")
    assert list(result.frame.columns) == ["summary"]
    assert len(result.frame) == 1 and result.frame["summary"][0].strip() != ""
    stats = result.stats.set_index("operator")
    llm_ops = [
        "3:sem_classify",
        "4:sem_extract",
        "5:sem_map",
        "8:sem_join",
        "9:sem_filter",
        "10:sem_topk",
        "11:sem_agg",
    ]
    for op in llm_ops:
        assert stats.loc[op, "calls"] >= 1, op
    assert (
        stats.loc["7:cartesian_product", "rows_out"]
        <= 2 * stats.loc["7:cartesian_product", "rows_in"]
    )
    assert stats.loc["10:sem_topk", "rows_out"] == min(2, stats.loc["10:sem_topk", "rows_in"])


async def test_adaptive_keeps_dependent_prefixes_cached_with_a_tiny_cache(
    engine: LocalVLLMEngine,
) -> None:
    """Virtual pinning on real vLLM: with a KV cache under a tenth of the table, the
    adaptive scheduler's dependent calls find their prefix; operator-at-a-time's do not."""
    reviews = load_bundled().reviews.head(40)[["review_id", "text"]]
    plan = (
        kalypso.table(reviews, name="reviews")
        .sem_map("Name the product category of the {text} in one word.", "category", max_tokens=6)
        .sem_map("Is the {text} mostly positive? One word.", "tone", max_tokens=6)
    )
    table_tokens = sum(len(engine.tokenizer.encode(t)) for t in reviews["text"])
    assert engine.capacity.total_tokens * 10 < table_tokens
    await engine.reset_prefix_cache()
    baseline = await plan.arun(engine, policy="operator-at-a-time")
    await engine.reset_prefix_cache()
    adaptive = await plan.arun(engine, policy="adaptive")
    pd.testing.assert_frame_equal(baseline.frame, adaptive.frame)
    assert adaptive.dependent_hit_rate >= 0.9, adaptive.report()
    assert baseline.dependent_hit_rate <= 0.1, baseline.report()
    assert adaptive.peak_reserved_blocks <= engine.capacity.num_blocks
