"""Scheduling policies by name: their initial budgets (exact) and parse errors."""

from __future__ import annotations

import pandas as pd
import pytest

import kalypso
from kalypso.engine.sim import SimEngine
from kalypso.query.templates import PlanError
from kalypso.scheduler.policies import POLICY_NAMES, SchedulingPolicy, parse_policy


def policy(name: str) -> SchedulingPolicy:
    parsed = parse_policy(name)
    assert parsed is not None
    return parsed


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
    budgets = policy(name).initial_budgets(100, MINIMUMS)
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
    assert policy(name).initial_budgets(10, MINIMUMS) == expected


@pytest.mark.parametrize("name", ["adaptive", "parallel-dfs", "parallel-bfs", "static:0.3"])
def test_a_single_stage_gets_the_whole_cache(name: str) -> None:
    assert policy(name).initial_budgets(64, [7]) == [64]
    assert policy(name).initial_budgets(4, [7]) == [7]


def test_two_stage_splits() -> None:
    assert policy("adaptive").initial_budgets(64, [6, 4]) == [6, 58]
    assert policy("parallel-bfs").initial_budgets(64, [6, 4]) == [60, 4]
    assert policy("static:0.3").initial_budgets(64, [6, 4]) == [19, 45]  # int(19.2)


def test_what_each_name_means() -> None:
    assert policy("adaptive") == SchedulingPolicy("adaptive", "adaptive", rebalance=True)
    assert policy("pipelined") == SchedulingPolicy("pipelined", "adaptive", rebalance=True)
    assert policy("parallel-dfs") == SchedulingPolicy("parallel-dfs", "dfs")
    assert policy("parallel-bfs") == SchedulingPolicy("parallel-bfs", "bfs")
    assert policy("sequential") == SchedulingPolicy("sequential", "dfs", max_running_tasks=1)
    assert policy("static:0.3") == SchedulingPolicy(
        "static:0.3", "static", first_stage_fraction=0.3
    )
    assert parse_policy("operator-at-a-time") is None


def test_static_fraction_is_exact_in_blocks() -> None:
    assert policy("static:0.29").initial_budgets(100, [1, 1]) == [29, 71]


@pytest.mark.parametrize("name", ["fifo", "Adaptive", "static", "static-0.3", ""])
def test_unknown_policy_names_are_rejected(name: str) -> None:
    with pytest.raises(PlanError, match="unknown execution policy") as error:
        parse_policy(name)
    for known in POLICY_NAMES:
        assert known in str(error.value)


@pytest.mark.parametrize(
    "name",
    ["static:", "static:abc", "static:0", "static:1", "static:1.5", "static:-0.2", "static:nan"],
)
def test_bad_static_fractions_are_rejected(name: str) -> None:
    with pytest.raises(PlanError, match=r"the static fraction must be in \(0, 1\)"):
        parse_policy(name)


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
