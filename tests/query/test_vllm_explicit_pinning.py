"""The scheduler's explicit pinning on real vLLM (CPU), through Kalypso's scheduler class."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pandas as pd
import pytest

import kalypso
from kalypso.datasets.reviews import load_bundled
from kalypso.engine.vllm_local import LocalVLLMEngine
from kalypso.engine.vllm_pinning import PINNING_SCHEDULER_CLS
from kalypso.engine.vllm_settings import VLLMSettings, kv_bytes_per_token
from kalypso.models import resolve_model

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
async def pinning_engine() -> AsyncIterator[LocalVLLMEngine]:
    per_token = kv_bytes_per_token(resolve_model(), "float32")  # the deterministic mode
    assert per_token is not None
    settings = VLLMSettings(kv_cache_bytes=16 * 128 * per_token, max_num_seqs=8, deterministic=True)
    settings = dataclasses.replace(settings, scheduler_cls=PINNING_SCHEDULER_CLS)
    engine = await LocalVLLMEngine.start(settings)
    try:
        yield engine
    finally:
        await engine.close()


async def test_explicit_pins_keep_join_prefixes_and_are_all_released(
    pinning_engine: LocalVLLMEngine,
) -> None:
    reviews = load_bundled().reviews.head(8)[["review_id", "text"]]
    aspects = pd.DataFrame({"aspect": ["It mentions a price.", "It mentions a battery."]})
    plan = (
        kalypso.table(reviews, name="reviews")
        .sem_map("Name the product of the {text} in two words.", "product", max_tokens=6)
        .sem_join(
            kalypso.table(aspects, name="aspects"),
            "Is this true of the {text}: {aspect}",
            negate=True,  # the model answers No to every pair (one-token decisions)
        )
    )
    await pinning_engine.reset_prefix_cache()
    virtual = await plan.arun(pinning_engine, policy="operator-at-a-time")
    await pinning_engine.reset_prefix_cache()
    pinned = await plan.arun(pinning_engine, policy="adaptive", pinning="explicit")
    differing, ties = kalypso.compare_decisions(virtual, pinned)
    assert differing == len(ties), ties  # only near-ties may flip
    if not differing:
        pd.testing.assert_frame_equal(
            virtual.frame[["review_id", "text", "aspect"]],
            pinned.frame[["review_id", "text", "aspect"]],
        )
    assert pinned.dependent_hit_rate >= 0.9, pinned.report()
    for _ in range(50):  # stats are published after engine steps
        if (await pinning_engine.stats()).kv_usage_fraction == 0.0:
            break
        await asyncio.sleep(0.05)
    assert (await pinning_engine.stats()).kv_usage_fraction == 0.0  # every pin released
