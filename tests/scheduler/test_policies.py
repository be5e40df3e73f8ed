"""Scheduling policies by name (:mod:`kalypso.core.policies`): their initial budgets
(exact), what each name means, and parse errors - raised as ``PolicyError`` by the
registry and as ``PlanError`` by ``arun``, before any LLM call."""

from __future__ import annotations

import pandas as pd
import pytest

import kalypso
from kalypso.core.policies import Policy, PolicyError, get_policy, policy_names
from kalypso.core.policies.adaptive import Adaptive
from kalypso.engine.sim import SimEngine
from kalypso.query import PlanError

MINIMUMS = [5, 3, 4]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # every stage but the last at its minimum, the last gets the rest: 100 - 5 - 3
        ("adaptive", [5, 3, 92]),
        ("pipelined", [5, 3, 92]),
        ("parallel-dfs", [5, 3, 92]),
        ("sequential", [5, 3, 92]),
        # the first stage gets everything but the later stages' minimums: 100 - 3 - 4
        ("parallel-bfs", [93, 3, 4]),
        # the first 30 %, the middle its minimum, the last the rest: 100 - 30 - 3
        ("static:0.3", [30, 3, 67]),
        ("static:0.5", [50, 3, 47]),
    ],
)
def test_initial_budgets_on_a_large_cache(name: str, expected: list[int]) -> None:
    budgets = get_policy(name).initial_budgets(100, MINIMUMS)
    assert budgets == expected
    assert sum(budgets) == 100


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("adaptive", [5, 3, 4]),
        ("parallel-dfs", [5, 3, 4]),
        ("parallel-bfs", [5, 3, 4]),
        ("static:0.3", [5, 3, 4]),  # 30 % of 10 is below the first minimum
    ],
)
def test_initial_budgets_never_go_below_the_minimums(name: str, expected: list[int]) -> None:
    """A cache smaller than the sum of the minimums (12 > 10): each stage keeps its
    minimum; the admission rules then let one task per idle stage through."""
    assert get_policy(name).initial_budgets(10, MINIMUMS) == expected


@pytest.mark.parametrize("name", ["adaptive", "parallel-dfs", "parallel-bfs", "static:0.3"])
def test_a_single_stage_gets_the_whole_cache(name: str) -> None:
    assert get_policy(name).initial_budgets(64, [7]) == [64]
    assert get_policy(name).initial_budgets(4, [7]) == [7]


def test_two_stage_splits() -> None:
    assert get_policy("adaptive").initial_budgets(64, [6, 4]) == [6, 58]
    assert get_policy("parallel-bfs").initial_budgets(64, [6, 4]) == [60, 4]
    assert get_policy("static:0.3").initial_budgets(64, [6, 4]) == [19, 45]  # int(19.2)


def test_what_each_name_means() -> None:
    for name in ("adaptive", "pipelined"):
        assert isinstance(get_policy(name), Adaptive)
    for name in ("parallel-dfs", "parallel-bfs", "sequential", "static:0.3"):
        policy = get_policy(name)
        assert type(policy).rebalance is Policy.rebalance, name  # never rebalanced
        assert policy.memory_aware and policy.bounded_outputs and not policy.operator_at_a_time
    assert get_policy("sequential").max_running_tasks == 1
    assert get_policy("adaptive").max_running_tasks is None
    baseline = get_policy("operator-at-a-time")
    assert baseline.operator_at_a_time
    assert not baseline.memory_aware and not baseline.bounded_outputs
    assert baseline.priority(0, 3) == baseline.priority(2, 3) == 0
    # names are kept as given (reports show them)
    assert get_policy("static:0.3").name == "static:0.3"
    assert get_policy("pipelined").name == "pipelined"


def test_each_call_of_get_policy_is_a_fresh_policy() -> None:
    """A policy may keep state for one run: two runs never share one."""
    assert get_policy("adaptive") is not get_policy("adaptive")
    mine = Adaptive()
    assert get_policy(mine) is mine


def test_static_fraction_is_exact_in_blocks() -> None:
    assert get_policy("static:0.29").initial_budgets(100, [1, 1]) == [29, 71]


@pytest.mark.parametrize("name", ["fifo", "Adaptive", "static-0.3", "breadth first"])
def test_unknown_policy_names_are_rejected_listing_the_known_ones(name: str) -> None:
    with pytest.raises(PolicyError, match="unknown execution policy") as error:
        get_policy(name)
    for known in policy_names():
        assert known in str(error.value)


@pytest.mark.parametrize(
    "name",
    ["static", "static:", "static:abc", "static:0", "static:1", "static:1.5", "static:-0.2"],
)
def test_bad_static_fractions_are_rejected(name: str) -> None:
    with pytest.raises(PolicyError, match=r"the static fraction must be in \(0, 1\)"):
        get_policy(name)


@pytest.mark.parametrize("name", ["static:nan", "static:inf"])
def test_static_fractions_that_are_not_numbers_are_rejected(name: str) -> None:
    with pytest.raises(PolicyError, match=r"the static fraction must be in \(0, 1\)"):
        get_policy(name)


@pytest.mark.parametrize("name", ["sequential:2", "parallel-dfs:x", "operator-at-a-time:1"])
def test_policies_without_an_argument_refuse_one(name: str) -> None:
    with pytest.raises(PolicyError, match="takes no argument"):
        get_policy(name)


async def test_a_bad_policy_fails_before_any_llm_call() -> None:
    engine = SimEngine(num_blocks=64, block_size_tokens=16)
    plan = kalypso.table(pd.DataFrame({"text": ["a"]})).sem_filter("Is the {text} ok?")
    try:
        with pytest.raises(PlanError, match="unknown execution policy 'breadth-first'"):
            await plan.arun(engine, policy="breadth-first")
        with pytest.raises(PlanError, match="static fraction"):
            await plan.arun(engine, policy="static:2")
        with pytest.raises(PlanError, match="need 0 < beta < alpha"):
            await plan.arun(engine, alpha=0.5, beta=0.5)
        assert engine.num_steps == 0
    finally:
        await engine.close()
