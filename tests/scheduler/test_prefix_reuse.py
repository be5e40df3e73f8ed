"""Virtual pinning on the simulator: with a KV cache far smaller than the table, the
scheduler keeps each tuple's prefix reserved until its dependent calls have run, so they
find it cached; operator-at-a-time sends every note through one operator before the next
and the cache has long evicted the prefixes by then.

The query: 16 notes of 150 unique words (about 3,100 prompt tokens of context, 195
blocks) on a cache of 48 blocks; sem_filter, sem_classify (same stage), then sem_join with
two aspects. Every call after a tuple's first is *dependent*: it expects the full blocks
of ``[system | text]`` (41 + 154 = 195 tokens with the chat boundaries: 12 full blocks,
192 tokens) to be cached: 16 classifier calls and 32 join calls.
"""

from __future__ import annotations

import pytest

import kalypso
from kalypso.engine.sim import SimOutputModel
from kalypso.query import QueryResult, Table
from tests.scheduler.conftest import EngineFactory
from tests.scheduler.factories import notes, right_table

DEPENDENT_CALLS = 16 + 32
EXPECTED_PREFIX_TOKENS = 192
SYSTEM_BLOCK_TOKENS = 32  # the system message and the user turn's start, 41 tokens: 2 blocks


def medec_like() -> Table:
    return (
        kalypso.table(notes(16, 150), name="notes")
        .sem_filter("Does the {text} contain a medical error?")
        .sem_classify("Which kind of note is the {text}?", ["triage", "discharge"], "kind")
        .sem_join(right_table("aspect", 2), "Does the {aspect} hold for the {text}?")
    )


async def run(make_engine: EngineFactory, policy: str) -> QueryResult:
    engine = make_engine(num_blocks=48, outputs=SimOutputModel(yes_rate=1.0))
    return await medec_like().arun(engine, policy=policy)


def dependent(result: QueryResult) -> dict[str, tuple[int, int]]:
    """(dependent calls, lost prefixes) per operator that made dependent calls."""
    return {
        s.operator: (s.dependent_calls, s.lost_prefixes)
        for s in result.operator_stats
        if s.dependent_calls
    }


async def test_operator_at_a_time_loses_prefixes_a_small_cache_cannot_keep(
    make_engine: EngineFactory,
) -> None:
    result = await run(make_engine, "operator-at-a-time")
    # every classifier call lost its note's prefix (the filter ran on all 16 notes
    # first); of the two join calls of a note, sent together, the first recomputes the
    # prefix and the second finds it
    assert dependent(result) == {"2:sem_classify": (16, 16), "4:sem_join": (32, 16)}
    assert result.lost_prefixes == 32
    # lost calls still find the system prompt's full blocks
    found = 32 * SYSTEM_BLOCK_TOKENS + 16 * EXPECTED_PREFIX_TOKENS
    assert result.dependent_hit_rate == found / (DEPENDENT_CALLS * EXPECTED_PREFIX_TOKENS)
    assert result.dependent_hit_rate == pytest.approx(4 / 9)


@pytest.mark.parametrize("policy", ["adaptive", "sequential", "parallel-dfs", "static:0.5"])
async def test_the_scheduler_keeps_every_prefix_a_dependent_call_needs(
    make_engine: EngineFactory, policy: str
) -> None:
    result = await run(make_engine, policy)
    assert dependent(result) == {"2:sem_classify": (16, 0), "4:sem_join": (32, 0)}
    assert result.lost_prefixes == 0
    assert result.dependent_hit_rate == 1.0
    assert result.peak_reserved_blocks <= 48


async def test_adaptive_reuses_more_than_operator_at_a_time_for_the_same_answers(
    make_engine: EngineFactory,
) -> None:
    adaptive = await run(make_engine, "adaptive")
    baseline = await run(make_engine, "operator-at-a-time")
    assert adaptive.frame.equals(baseline.frame)
    assert adaptive.llm_calls == baseline.llm_calls == 16 + 16 + 32
    assert adaptive.prompt_tokens == baseline.prompt_tokens
    # 32 lost prefixes of 192 tokens, of which the system prompt's 32 were found anyway
    assert adaptive.cached_tokens - baseline.cached_tokens == 32 * (192 - 32)
    assert adaptive.dependent_hit_rate >= 0.9 > baseline.dependent_hit_rate
