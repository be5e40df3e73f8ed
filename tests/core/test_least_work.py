"""What any schedule must compute for a run: the longest chain of dependent calls'
tokens (the least engine steps) and the decode tokens and their attention pairs, counted
exactly on hand-made graphs and results."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kalypso.core.graph import FnNode, InputNode, LLMNode, Message, TaskGraph, Text
from kalypso.core.instance import CallOutcome
from kalypso.core.memory_bound import block_steps, held_blocks, least_decode_steps
from kalypso.core.stats import OperatorStats
from kalypso.engine.attention import attention_pairs
from kalypso.engine.blocks import chain_keys
from kalypso.engine.protocol import GenerateResult, RequestTimings


def _llm(node_id: str, *deps: str) -> LLMNode:
    messages = (Message("user", (Text(node_id),)),)
    return LLMNode(node_id, messages, 64, node_id, deps=deps)


def _outcome(tokens: int, *, from_result_cache: bool = False) -> CallOutcome:
    return CallOutcome("x", tuple(range(tokens)), "stop", from_result_cache=from_result_cache)


def _graph() -> TaskGraph:
    # in -> a -> b -> join; in -> c -> join (fan-in); d depends on a through a Python step
    return TaskGraph(
        (
            InputNode("in", ("q",)),
            _llm("a", "in"),
            _llm("b", "a"),
            _llm("c", "in"),
            FnNode("parse", lambda i: i, "parse", deps=("a",)),
            _llm("d", "parse"),
            _llm("join", "b", "c"),
        )
    )


def test_the_longest_chain_follows_dependencies_through_fan_in_and_python_steps() -> None:
    outputs = {
        "a": _outcome(10),
        "b": _outcome(5),
        "c": _outcome(30),
        "d": _outcome(40),
        "join": _outcome(7),
    }
    # chains: a-b-join 22, c-join 37, a-parse-d 50
    assert _graph().longest_chain_tokens(outputs) == 50
    outputs["c"] = _outcome(60)  # now c-join is the longest: 67
    assert _graph().longest_chain_tokens(outputs) == 67


def test_calls_not_run_or_answered_by_the_result_cache_take_no_steps() -> None:
    outputs = {"a": _outcome(10), "b": _outcome(5), "c": _outcome(30, from_result_cache=True)}
    # d and join did not run (a branch not taken); c cost the engine nothing
    assert _graph().longest_chain_tokens(outputs) == 15
    assert _graph().longest_chain_tokens({}) == 0


def _result(prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> GenerateResult:
    return GenerateResult(
        "r",
        tuple(range(output_tokens)),
        "x",
        "stop",
        prompt_tokens,
        cached_tokens,
        RequestTimings(0.0, 0.0, 0.0),
    )


def test_decode_tokens_and_pairs_are_counted_per_request() -> None:
    stats = OperatorStats("op")
    stats.record(_result(100, 5), continuation=False)
    # four tokens fed back, at positions 100..103: pairs 101 + 102 + 103 + 104
    assert stats.decode_tokens == 4
    assert stats.decode_attention_pairs == 101 + 102 + 103 + 104 == attention_pairs(4, 100)
    stats.record(_result(10, 1), continuation=False)  # the prefill step made its one token
    stats.record(_result(10, 0), continuation=False)  # nothing generated
    assert stats.decode_tokens == 4 and stats.decode_attention_pairs == 410
    # a result-cache answer computed nothing, not even its least prefill
    least_tokens = stats.min_prefill_tokens
    stats.record(
        _result(50, 9, cached_tokens=50),
        continuation=False,
        min_prefill_tokens=50,
        min_attention_pairs=1275,
        from_result_cache=True,
    )
    assert stats.decode_tokens == 4 and stats.decode_attention_pairs == 410
    assert (stats.min_prefill_tokens, stats.min_attention_pairs) == (least_tokens, 0)
    assert stats.output_tokens == 15


def test_a_shared_block_weighs_its_share_in_each_call_that_contains_it() -> None:
    # blocks of 4 tokens; a and b share their first two blocks (8 tokens)
    shared = list(range(8))
    a = ([*shared, 100, 101, 102], [1, 2, 3])  # 11-token prompt, 3 outputs
    b = ([*shared, 200], [5, 6])  # 9-token prompt, 2 outputs
    c = (list(range(300, 305)), [7])  # one output: its prefill step only
    # a's decode steps hold 12 tokens (two shared blocks at 1/2, one of its own) and 13
    # (one more, partial); b's one decode step holds 10 (two shared at 1/2, one partial)
    assert held_blocks([a, b, c], 4) == {2: 2, 3: 1}
    assert block_steps(held_blocks([a, b, c], 4)) == 2 + 3 + 2
    # alone, nothing is shared: a holds 3 then 4 blocks
    assert held_blocks([a], 4) == {3: 1, 4: 1}
    # the same call twice (merged) counts once, and does not share with itself
    assert held_blocks([a, a], 4) == {3: 1, 4: 1}
    # three calls below one shared block: in one step they hold it and three partials
    calls = [([0, 1, 2, 3, 10 + i], [1, 2]) for i in range(3)]
    assert held_blocks(calls, 4) == {Fraction(4, 3): 3}
    assert block_steps(held_blocks(calls, 4)) == 4
    with pytest.raises(ValueError, match="block size must be positive"):
        held_blocks([a], 0)


def test_a_block_is_divided_only_among_calls_that_can_run_together() -> None:
    # blocks of 4: "final" continues "analyst"'s conversation, so both contain its blocks
    analyst = (list(range(8)), [8, 9])  # its decode step holds 9 tokens: 2 full blocks
    final = ([*range(10), 20, 21], [30, 31])  # 13 tokens: those 2 blocks and 1 more
    calls = [analyst, final]
    # without knowing their order, each pays half of the two shared blocks
    assert held_blocks(calls, 4) == {2: 1, 3: 1}
    # final depends on analyst: never in the same step, so each pays them in full
    sites = [((0,), "analyst"), ((0,), "final")]
    ancestors = {"analyst": set(), "final": {"analyst"}}
    assert held_blocks(calls, 4, sites, ancestors) == {3: 1, 4: 1}
    # calls of two instances may run together whatever their nodes
    apart = [((0,), "analyst"), ((1,), "final")]
    assert held_blocks(calls, 4, apart, ancestors) == {2: 1, 3: 1}
    # a call merged from two sites runs beside any other
    merged = [analyst, analyst, final]
    sites3 = [((0,), "analyst"), ((1,), "analyst"), ((0,), "final")]
    assert held_blocks(merged, 4, sites3, ancestors) == {2: 1, 3: 1}
    # three sequences in one instance (a -> b, c, d): at most 3 of the 4 hold a block at once
    shared = list(range(4))
    four = [([*shared, 10 + i], [1, 2]) for i in range(4)]
    nodes = [((0,), n) for n in "abcd"]
    chain = {"a": set(), "b": {"a"}, "c": set(), "d": set()}
    assert held_blocks(four, 4, nodes, chain) == {Fraction(4, 3): 4}
    with pytest.raises(ValueError, match="1 sites for 2 calls"):
        held_blocks(calls, 4, sites[:1], ancestors)


def test_no_step_decodes_more_calls_than_fit_in_the_cache() -> None:
    # 310 decode steps of 15 blocks in a 44-block cache: two a step, whatever the schedule
    big = {Fraction(15): 310}
    assert least_decode_steps(big, 44) == 155
    assert block_steps(big) / 44 < 106  # the block-steps bound allows fewer
    # smaller steps beside them widen only their own threshold: 630 / (44 // 2 = 22)
    assert least_decode_steps({**big, Fraction(2): 320}, 44) == 155
    assert least_decode_steps({Fraction(2): 320}, 44) == 15
    assert least_decode_steps({Fraction(2): 320}, 44, max_running=16) == 20
    # steps that grow past half the cache run one at a time: 10 of them, 6 more of 20
    assert least_decode_steps({Fraction(23): 10, Fraction(20): 6}, 44) == 10
    assert least_decode_steps({Fraction(23): 10, Fraction(20): 16}, 44) == 13  # 2 a step
    # weights need not be whole: three of 4/3 fit in 4 blocks
    assert least_decode_steps({Fraction(4, 3): 30}, 4) == 10
    assert least_decode_steps({}, 44) == 0
    with pytest.raises(ValueError, match="more than the cache's 44"):
        least_decode_steps({Fraction(45): 1}, 44)
    with pytest.raises(ValueError, match="at least one block"):
        least_decode_steps({Fraction(0): 1}, 44)
    with pytest.raises(ValueError, match="must have blocks"):
        least_decode_steps(big, 0)
    with pytest.raises(ValueError, match="max_running must be >= 1"):
        least_decode_steps(big, 44, max_running=0)


def _held_token_by_token(calls: list[tuple[list[int], list[int]]], block: int) -> Counter[Fraction]:
    """The module's definition, step by step, for calls that all run beside each other."""
    distinct = list(dict.fromkeys((tuple(p), tuple(o)) for p, o in calls))
    keys = [chain_keys([*p, *o], block) for p, o in distinct]
    holders = Counter(key for call_keys in keys for key in call_keys)
    held: Counter[Fraction] = Counter()
    for (prompt, output), call_keys in zip(distinct, keys, strict=True):
        for step in range(2, len(output) + 1):
            tokens = len(prompt) + step - 1
            full = sum(Fraction(1, holders[key]) for key in call_keys[: tokens // block])
            held[full + (1 if tokens % block else 0)] += 1
    return held


_tokens = st.lists(st.integers(0, 2), max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(_tokens, st.lists(st.integers(0, 2), max_size=8)), max_size=6),
    st.integers(1, 5),
)
def test_held_blocks_counts_block_by_block_what_the_definition_counts_step_by_step(
    calls: list[tuple[list[int], list[int]]], block: int
) -> None:
    # tokens from {0, 1, 2} make calls share blocks often
    assert held_blocks(calls, block) == _held_token_by_token(calls, block)
