"""Continuations on real vLLM (CPU, bundled model, greedy decoding, the deterministic mode).

A generative call that stops at its bound is continued: the next request is the prompt
followed by the tokens generated so far, asking only for the rest. Under greedy decoding
the joined output must be the output of one uninterrupted call.

The tolerance, stated: the continuation prefills the tokens generated so far in one batch
(or reads them from the prefix cache), where the uninterrupted call computed them one
decode step at a time. Even in float32 these are not bit-equal, so a greedy choice
between two almost equally likely tokens can flip. The outputs must therefore be equal
token for token, except from a position where the uninterrupted call's top two tokens
were within ``NEAR_TIE_NATS`` of each other; such a position is reported.
"""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

import kalypso
from kalypso.datasets.reviews import load_bundled
from kalypso.engine.protocol import GenerateRequest, GenerateResult
from kalypso.engine.vllm_local import LocalVLLMEngine

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

NEAR_TIE_NATS = 0.1
ANSWER_TOKENS = 48
CUTS_TOKENS = (1, 8, 20, 47)  # where the first request stops


@pytest.fixture(scope="module")
def engine(roomy_vllm: LocalVLLMEngine) -> LocalVLLMEngine:
    """The suite's shared engine: every review's prompt and running calls fit its cache."""
    return roomy_vllm


@pytest.fixture(scope="module")
def reviews() -> pd.DataFrame:
    return load_bundled().reviews.head(4)[["review_id", "text"]]


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    return None if len(a) == len(b) else min(len(a), len(b))


def margin_nats(result: GenerateResult, position: int) -> float:
    """Top-1 minus top-2 log-probability of the uninterrupted call at ``position``."""
    top = sorted((lp for _, lp in result.logprobs[position]), reverse=True)
    return top[0] - top[1] if len(top) > 1 else float("inf")


def assert_equal_but_near_ties(
    whole: GenerateResult, joined: tuple[int, ...], what: str, near_ties: list[str]
) -> None:
    position = first_difference(whole.output_token_ids, joined)
    if position is None:
        return
    margin = margin_nats(whole, position)
    assert margin < NEAR_TIE_NATS, (
        f"{what}: differs at token {position} where the uninterrupted call's margin was"
        f" {margin:.3f} nats (not a near-tie)"
    )
    near_ties.append(f"{what}: token {position}, margin {margin:.3f} nats")


async def _continued_against_whole(
    engine: LocalVLLMEngine, prompt: tuple[int, ...], name: str, near_ties: list[str]
) -> int:
    """One uninterrupted call, then the same call cut at each of ``CUTS_TOKENS`` and
    continued: each joined output against the uninterrupted one. The calls compared."""
    whole = await engine.generate(
        GenerateRequest(f"whole-{name}", prompt, ANSWER_TOKENS, ignore_eos=True, logprobs=2)
    )
    assert len(whole.output_token_ids) == ANSWER_TOKENS
    for cut in CUTS_TOKENS:
        first = await engine.generate(
            GenerateRequest(f"first-{name}-{cut}", prompt, cut, ignore_eos=True)
        )
        rest = await engine.generate(
            GenerateRequest(
                f"rest-{name}-{cut}",
                prompt + first.output_token_ids,
                ANSWER_TOKENS - cut,
                ignore_eos=True,
            )
        )
        assert rest.cached_tokens > 0, "the continuation should find its prompt cached"
        joined = first.output_token_ids + rest.output_token_ids
        assert len(joined) == ANSWER_TOKENS
        assert_equal_but_near_ties(whole, joined, f"review {name} cut {cut}", near_ties)
    return len(CUTS_TOKENS)


async def test_a_continued_call_equals_one_uninterrupted_call(
    engine: LocalVLLMEngine, reviews: pd.DataFrame
) -> None:
    """The reviews run side by side (a batch as wide as the engine's ``max_num_seqs``),
    each its uninterrupted call and then its cuts, one after the other."""
    tokenizer = engine.tokenizer
    near_ties: list[str] = []
    prompts = {
        str(row.review_id): tuple(
            tokenizer.encode(
                tokenizer.render_chat(
                    [("user", f"Summarise this review in two sentences.\n\n{row.text}")],
                    add_generation_prompt=True,
                )
            )
        )
        for row in reviews.itertuples()
    }
    # the cache holds every review's prompt and running calls at once: no continuation
    # finds its prompt evicted
    assert sum(len(p) + ANSWER_TOKENS for p in prompts.values()) * 2 < (
        engine.capacity.total_tokens
    )
    await engine.reset_prefix_cache()
    compared = await asyncio.gather(
        *(
            _continued_against_whole(engine, prompt, name, near_ties)
            for name, prompt in prompts.items()
        )
    )
    assert sum(compared) == len(reviews) * len(CUTS_TOKENS)
    print(f"{sum(compared)} continued calls compared; near-ties: {near_ties or 'none'}")


async def test_a_query_that_continues_answers_like_one_that_runs_at_the_cap(
    engine: LocalVLLMEngine, reviews: pd.DataFrame
) -> None:
    """adaptive, sizing calls at their estimate (``reserve_cap_when_it_fits=False``),
    starts the map at 8 tokens and continues it; operator-at-a-time runs every call at
    its cap. The answers are equal but for near-ties (checked here as in
    test_vllm_query: a differing answer shares its first five words)."""
    plan = kalypso.table(reviews, name="reviews").sem_map(
        "Summarise the {text} in two sentences.", "summary", max_tokens=48, first_bound_tokens=8
    )
    await engine.reset_prefix_cache()
    at_cap = await plan.arun(engine, policy="operator-at-a-time")
    await engine.reset_prefix_cache()
    continued = await plan.arun(engine, policy="adaptive", reserve_cap_when_it_fits=False)
    assert at_cap.continuations == 0
    assert continued.continuations > 0 and continued.continued_tokens > 0
    assert continued.llm_calls == at_cap.llm_calls == len(reviews)
    pairs = list(zip(at_cap.frame["summary"], continued.frame["summary"], strict=True))
    different = [(a, b) for a, b in pairs if a != b]
    assert len(different) <= len(pairs) // 2, different
    for a, b in different:
        assert a.split()[:5] == b.split()[:5], (a, b)
