"""The least prefill a run's prompts need (an unbounded prefix cache), exactly."""

from __future__ import annotations

import pytest

import kalypso
from kalypso.core.ideal_cache import IdealPrefixCache
from kalypso.datasets import reviews
from kalypso.engine.sim import SimEngine


def test_whole_shared_blocks_are_computed_once() -> None:
    cache = IdealPrefixCache(block_size_tokens=4)
    first = list(range(10))  # blocks [0-3] [4-7], 2 tokens left over
    assert cache.prefill_tokens(first) == 10
    assert cache.prefill_tokens(first) == 10 - 8  # both full blocks hit
    assert cache.prefill_tokens([*range(6), 99, 98, 97]) == 9 - 4  # diverges in block 2
    assert cache.prefill_tokens([0, 1, 2, 3]) == 4  # the last token is always computed
    assert cache.prefill_tokens([0, 1, 2, 3, 4]) == 1
    assert cache.prefill_tokens([]) == 0


def test_a_hit_after_a_miss_does_not_count() -> None:
    """Blocks are chained: a block equal to one seen elsewhere, after a different
    block, is a different prefix."""
    cache = IdealPrefixCache(block_size_tokens=2)
    cache.prefill_tokens([1, 2, 3, 4, 5])
    assert cache.prefill_tokens([9, 9, 3, 4, 5]) == 5


def test_block_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="block size"):
        IdealPrefixCache(0)


@pytest.mark.parametrize(("num_blocks", "equal"), [(4096, True), (64, False)])
async def test_one_task_at_a_time_on_a_large_cache_computes_exactly_the_minimum(
    num_blocks: int, equal: bool
) -> None:
    """With room for everything and no two requests at once, the simulated vLLM computes
    what the unbounded cache does; with a small cache, operator-at-a-time computes more."""
    data = reviews.load_bundled()
    plan = (
        kalypso.table(data.reviews.head(6)[["review_id", "text"]])
        .sem_filter("Is the {text} positive?")
        .sem_map("Summarise the {text}.", "summary", max_tokens=8)
    )
    engine = SimEngine(num_blocks=num_blocks, block_size_tokens=16)
    try:
        sequential = await plan.arun(engine, policy="sequential")
        await engine.reset_prefix_cache()
        blocking = await plan.arun(engine, policy="operator-at-a-time")
    finally:
        await engine.close()
    assert sequential.prefill_tokens == sequential.min_prefill_tokens
    assert 0 < sequential.min_prefill_tokens < sequential.prompt_tokens
    assert blocking.min_prefill_tokens == sequential.min_prefill_tokens
    assert (blocking.prefill_tokens == blocking.min_prefill_tokens) is equal


def test_the_least_attention_counts_the_computed_tokens_after_the_hits() -> None:
    """A prompt that finds two blocks cached computes its last 2 tokens at positions 8
    and 9: each attends to the tokens before it and to itself (9 + 10 pairs)."""
    cache = IdealPrefixCache(block_size_tokens=4)
    first = cache.measure(list(range(10)))
    assert (first.prefill_tokens, first.attention_pairs) == (10, 55)
    again = cache.measure(list(range(10)))
    assert (again.prefill_tokens, again.attention_pairs) == (2, 9 + 10)
