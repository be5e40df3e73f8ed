"""Policies by name: the registry, and a new policy added from one module outside the core."""

from __future__ import annotations

import pandas as pd
import pytest

import kalypso
from kalypso.core.policies import PolicyError, get_policy, policy_names
from kalypso.engine.sim import SimEngine, SimOutputModel
from tests.core import custom_policy
from tests.core.fakes import JOIN_AND_NOTE, Workload, make_core, run_steps


def test_every_builtin_policy_is_one_registered_name() -> None:
    assert {
        "adaptive",
        "pipelined",
        "parallel-dfs",
        "parallel-bfs",
        "static",
        "sequential",
        "operator-at-a-time",
    } <= set(policy_names())
    assert get_policy("pipelined").rebalance.__qualname__ == "Adaptive.rebalance"
    assert get_policy("static:0.3").initial_budgets(10, [1, 1]) == [3, 7]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "unknown execution policy 'nope'"),
        ("static:2", "must be in \\(0, 1\\)"),
        ("static:x", "must be in \\(0, 1\\)"),
        ("static", "must be in \\(0, 1\\)"),
        ("adaptive:1", "takes no argument"),
        ("", "a policy is a name"),
    ],
)
def test_bad_policy_names_are_refused(spec: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        get_policy(spec)


def test_a_new_policy_is_one_module_and_runs_by_name() -> None:
    """The core was not touched: ``tests/core/custom_policy.py`` registers ``halves``."""
    assert "halves" in policy_names()
    note, join = JOIN_AND_NOTE
    workload = Workload([note, join], fanouts=[3])
    core = make_core(workload, "halves")
    run_steps(core, workload, 6)
    report = core.report
    assert report.initial_budgets_blocks == [32, 32]
    assert [m.reason for m in report.moves] and {m.reason for m in report.moves} == {"idle"}
    assert len(report.admitted) == 6 + 18
    assert isinstance(custom_policy.Halves(), kalypso.core.policies.Policy)


async def test_a_new_policy_returns_the_same_table_as_the_builtins() -> None:
    frame = pd.DataFrame({"text": [f"w{i} x{i} y{i}" for i in range(6)]})
    aspects = pd.DataFrame({"aspect": ["a b", "c d"]})
    plan = (
        kalypso.table(frame)
        .sem_filter("Is the {text} relevant?")
        .sem_join(aspects, "Does {aspect} hold for {text}?")
        .sem_map("Why {text} {aspect}?", "why", max_tokens=16)
    )
    results = []
    for policy in ("operator-at-a-time", "adaptive", "halves"):
        engine = SimEngine(
            num_blocks=64, block_size_tokens=16, outputs=SimOutputModel(yes_rate=0.6)
        )
        results.append(await plan.arun(engine, policy=policy))
        await engine.close()
    assert results[2].policy == "halves"
    for result in results[1:]:
        pd.testing.assert_frame_equal(result.frame, results[0].frame)
