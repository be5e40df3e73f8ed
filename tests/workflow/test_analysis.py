"""Policy orders on the cost model, as the runtime takes them (a soft order on the model's
clock), over a real library workflow's calls."""

from __future__ import annotations

import pytest

from kalypso.core.cost import CallCost, token_steps
from kalypso.core.prompt import ChatLayout
from kalypso.engine.sim import WordTokenizer
from kalypso.workflow.analysis import call_costs, policy_order
from kalypso.workflow.library.workflows import BUILDERS, Sizes
from kalypso.workflow.lower import Lowered, lower
from kalypso.workflow.plan import batch_instances

CAPACITY_TOKENS = 8192


Keys = list[tuple[str, tuple[int, ...]]]


def debate_calls() -> tuple[Lowered, Keys, list[CallCost], ChatLayout]:
    layout = ChatLayout(WordTokenizer())
    job = BUILDERS["debate"](Sizes(queries=3, agents=2, max_tokens=24, context_sentences=3))
    lowered = lower(list(job.workflows[:1]))
    instances = batch_instances(lowered, job.inputs[0])
    calls, keys = call_costs(lowered, instances, layout, lambda n: n.max_tokens)
    return lowered, keys, calls, layout


@pytest.mark.parametrize("policy", ["cache-aware", "querywise", "opwise", "random"])
def test_every_order_is_a_schedule_of_all_calls(policy: str) -> None:
    lowered, keys, calls, layout = debate_calls()
    order = policy_order(policy, lowered, keys, calls, layout, CAPACITY_TOKENS)
    assert sorted(order) == list(range(len(calls)))
    token_steps(calls, order, CAPACITY_TOKENS)  # raises if a call runs before its predecessors


def test_a_call_that_is_not_ready_lets_the_next_ones_through() -> None:
    """Cache-aware ranks a debate's second round right behind its own query's first round,
    but the round's answers take 24 token steps to decode while a first-round call costs
    about one: every first-round call runs before any second-round call, as at run time."""
    lowered, keys, calls, layout = debate_calls()
    order = policy_order("cache-aware", lowered, keys, calls, layout, CAPACITY_TOKENS)
    rounds = [keys[i][0].endswith("_r1") for i in order]
    assert rounds == sorted(rounds)


def test_querywise_runs_one_query_at_a_time() -> None:
    lowered, keys, calls, layout = debate_calls()
    order = policy_order("querywise", lowered, keys, calls, layout, CAPACITY_TOKENS)
    queries = [keys[i][1] for i in order]
    assert queries == sorted(queries)
