"""The per-request routers (the replica set's baselines): round-robin spreads requests in
turn; prefix affinity follows a shared prefix unless the loads differ too much; a plan on
a routed engine gives the one-engine table (simulator)."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

import kalypso
from kalypso.core.routing import RoutedEngine
from kalypso.engine.protocol import GenerateRequest
from kalypso.engine.sim.engine import SimEngine
from kalypso.engine.sim.tokenizer import WordTokenizer


def sims(count: int) -> list[SimEngine]:
    tokenizer = WordTokenizer()
    continuations: dict[int, tuple[tuple[int, ...], int]] = {}
    return [
        SimEngine("qwen3-8b-h100", tokenizer=tokenizer, continuations=continuations)
        for _ in range(count)
    ]


def request(name: str, prompt: list[int]) -> GenerateRequest:
    return GenerateRequest(request_id=name, prompt_token_ids=tuple(prompt), max_tokens=2)


def test_round_robin_takes_the_engines_in_turn() -> None:
    routed = RoutedEngine(sims(3), "round-robin")
    assert [routed.choose(request(f"r{i}", [1] * 40)) for i in range(6)] == [0, 1, 2, 0, 1, 2]


@pytest.mark.asyncio
async def test_prefix_affinity_follows_a_shared_prefix() -> None:
    routed = RoutedEngine(sims(3), "prefix-affinity")
    document = list(range(100, 100 + 64))  # four blocks of 16 tokens
    await routed.generate(request("a", [*document, 1, 2]))
    first = routed.routed.index(1)
    assert routed.choose(request("b", [*document, 3, 4])) == first
    # nothing shared: the engine that has seen the fewest prefixes
    assert routed.choose(request("c", list(range(900, 964)))) != first


def test_prefix_affinity_goes_to_the_least_loaded_when_loads_differ() -> None:
    routed = RoutedEngine(sims(2), "prefix-affinity", imbalance_threshold=2)
    document = list(range(100, 164))
    routed._seen[0].update(routed._prefix_hashes(document))
    routed._in_flight[:] = [5, 0]
    assert routed.choose(request("a", document)) == 1
    routed._in_flight[:] = [2, 0]
    assert routed.choose(request("b", document)) == 0


@pytest.mark.asyncio
async def test_a_plan_on_a_routed_engine_gives_the_one_engine_table() -> None:
    frame = pd.DataFrame(
        {"text": [f"note {i}: the dose was {'wrong' if i % 3 else 'right'}" for i in range(30)]}
    )
    plan = (
        kalypso.table(frame)
        .sem_filter("Is the {text} about a wrong dose?")
        .sem_map("Quote the dose in {text}.", "dose", max_tokens=6)
    )
    alone = await plan.arun(SimEngine("qwen3-8b-h100"))
    for rule in ("round-robin", "prefix-affinity"):
        engines = sims(3)
        routed = RoutedEngine(engines, rule)
        spread = await plan.arun(routed)
        pd.testing.assert_frame_equal(spread.frame, alone.frame)
        assert sum(routed.routed) == spread.requests and min(routed.routed) > 0
        assert routed.capacity.num_blocks == 3 * engines[0].capacity.num_blocks
        await asyncio.gather(*(e.close() for e in engines))


def test_bad_routers_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        RoutedEngine([])
    with pytest.raises(ValueError, match="rule"):
        RoutedEngine(sims(1), "random")
