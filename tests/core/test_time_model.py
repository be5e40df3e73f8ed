"""Choosing by predicted time, worked by hand: the tie rule, the engine without a model,
an instance's work as the time model sees it, and the windows weighed."""

from __future__ import annotations

import pytest

from kalypso.core.cost import CallCost
from kalypso.core.instance_window import (
    InstancePeak,
    InstanceWork,
    instance_work,
    window_options,
)
from kalypso.core.time_model import Option, choose_by_time
from kalypso.engine.cost_model import CostModel, Work

MODEL = CostModel(0.01, 0.001, 0.001, max_step_tokens=1000, max_seqs=8, source="test")


def _options() -> list[Option]:
    # narrow: 100 prefill, 80 decode tokens 2 at once -> 40 steps: 0.4 + 0.1 + 0.08
    # wide:   250 prefill, 80 decode tokens 8 at once -> 10 steps: 0.1 + 0.25 + 0.08
    return [Option("narrow", Work(100, 80, 2)), Option("wide", Work(250, 80, 8))]


def test_the_fastest_option_wins() -> None:
    choice = choose_by_time(_options(), MODEL)
    assert choice.predicted_s == pytest.approx((0.58, 0.43))
    assert choice.option.label == "wide"
    cheap_steps = CostModel(0.0001, 0.001, 0.001, max_seqs=8)  # prefill is what costs here
    assert choose_by_time(_options(), cheap_steps).option.label == "narrow"


def test_a_tie_goes_to_the_wider_option_and_no_model_to_the_widest() -> None:
    tie = [Option("narrow", Work(100, 80, 8)), Option("wide", Work(101, 80, 8))]
    assert choose_by_time(tie, MODEL).option.label == "wide"  # 1 token apart: within 2%
    assert choose_by_time(tie, MODEL, tolerance=0).option.label == "narrow"
    blind = choose_by_time(_options(), None)
    assert (blind.option.label, blind.predicted_s) == ("wide", None)
    assert blind.explain()[0] == "no cost model for this engine: the widest option"


def test_explain_prints_the_model_each_option_and_the_choice() -> None:
    assert choose_by_time(_options(), MODEL).explain() == [
        f"by predicted time on {MODEL.explain()}",
        "   narrow: 0.58 s: 100 prefill and 80 decode tokens, 2 calls at once",
        "-> wide: 0.43 s: 250 prefill and 80 decode tokens, 8 calls at once",
    ]


def test_bad_choices_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one option"):
        choose_by_time([], MODEL)
    with pytest.raises(ValueError, match="tolerance"):
        choose_by_time(_options(), MODEL, tolerance=-0.1)


def test_an_instances_work_counts_shared_prefixes_once() -> None:
    """Two instances (blocks of 4 tokens): ``a`` answers 3 tokens, ``b`` continues a's
    conversation and answers 2. The two instances' ``a`` prompts share their first 4
    tokens (a system prompt), their ``b`` prompts their first 4 too."""

    def answer(key: int) -> list[tuple[str, str, tuple[int, ...], int]]:
        return [("slot", "a", (key,), k) for k in range(3)]

    a0 = CallCost("a", (1, 2, 3, 4, 10, 11), 3)
    b0 = CallCost("b", (1, 2, 3, 4, 10, 11, *answer(0), 7), 2, (0,))
    a1 = CallCost("a", (1, 2, 3, 4, 20, 21), 3)
    b1 = CallCost("b", (1, 2, 3, 4, 20, 21, *answer(1), 7), 2, (2,))
    sites = [("a", (0,)), ("b", (0,)), ("a", (1,)), ("b", (1,))]
    work = instance_work([a0, b0, a1, b1], sites, {"b": "a"}, 4)
    # distinct prefixes: the shared 4, then per instance 2 (a's tail) + 4 (b's tail) = 16
    assert work.prefill_tokens == 16 / 2
    assert work.decode_tokens == 5
    # b reads back a's prompt beyond the shared 4 tokens (2) and a's answer (3)
    assert work.continued_tokens == 5
    assert work.call_blocks == (16 + 10) / 4 / 4
    assert work.chain_tokens == 5


def test_the_windows_weighed_run_from_the_memory_window_to_none() -> None:
    """A cache of 100 blocks; a group peaks at 30 blocks with 3 calls and holds 20 on
    average over its levels; a call holds 5 blocks, so 20 calls fit beside each other.
    The memory window is 4 groups; its multiples below the batch's 10 groups are 4 and 8,
    then none: 10 groups in flight."""
    work = InstanceWork(prefill_tokens=500, decode_tokens=96, continued_tokens=200,
                        call_blocks=5, chain_tokens=64)  # fmt: skip
    options = window_options(100, InstancePeak(30, 3, 20.0), work, 10, 256)
    assert [w for w, _ in options] == [4, 8, None]
    four, eight, none = (o.work for _, o in options)
    assert four == Work(5000, 960, 12, 64)  # 4 x 20 blocks fit: nothing computed again
    # 8 groups hold 160 blocks of the cache's 100: 37.5% of 10 x 200 continued tokens again
    assert eight == Work(5000 + 750, 960, 20, 64)
    assert none == Work(5000 + 1000, 960, 20, 64)  # 200 blocks: half of them again
    # two instances of 3 groups each are 6 groups: the windows stop below 6
    assert [w for w, _ in window_options(100, InstancePeak(30, 3, 20.0), work, 2, 256, 3)] == [
        4,
        None,
    ]


def test_a_choice_may_give_ties_to_the_narrowest_instead() -> None:
    tie = [Option("narrow", Work(100, 80, 8)), Option("wide", Work(101, 80, 8))]
    choice = choose_by_time(tie, MODEL, ties_to="narrowest")
    assert choice.option.label == "narrow"
    assert choice.explain()[0].endswith("; a tie goes to the narrowest")
    assert choose_by_time(_options(), MODEL, ties_to="narrowest").option.label == "wide"  # faster
    blind = choose_by_time(_options(), None, ties_to="narrowest")
    assert blind.option.label == "narrow"
    assert blind.explain()[0] == "no cost model for this engine: the narrowest option"
