"""The token-steps cost model, the exact MILP optimum (HiGHS), the templated radix tree on
tokens, and the cache-aware operator order."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from kalypso.core.cost import CallCost, token_steps
from kalypso.core.graph import LLMNode, Message, Slot, Text
from kalypso.core.milp import optimal_order
from kalypso.core.policies.cache_aware import operator_order
from kalypso.core.prompt import ChatLayout
from kalypso.core.slots import OutputSlot, ValueSlot
from kalypso.core.trt import TemplatedRadixTree
from kalypso.engine.sim import WordTokenizer

SYS_A = tuple(range(100, 140))
SYS_B = tuple(range(200, 240))
QUESTION = tuple(range(300, 360))


def test_token_steps_by_hand() -> None:
    """Two independent calls on one engine of M = 100 tokens (alpha = 1/100): the second
    shares 40 prompt tokens with the first; a third depends on the first (delay = its
    output, 10 steps)."""
    calls = [
        CallCost("a", SYS_A + QUESTION, 10),
        CallCost("b", SYS_A + tuple(range(500, 560)), 10),
        CallCost("c", SYS_B + QUESTION, 10, preds=(0,)),
    ]
    # a: (10*100 + 55)/100 = 10.55; b: (10*60 + 55)/100 = 6.55 -> 17.1;
    # c: ready at 10.55 + 10 = 20.55, shares nothing: (10*100 + 55)/100 = 10.55 -> 31.1
    assert token_steps(calls, [0, 1, 2], 100) == pytest.approx(31.1)
    with pytest.raises(ValueError, match="before its predecessor"):
        token_steps(calls, [2, 0, 1], 100)
    with pytest.raises(ValueError, match="permutation"):
        token_steps(calls, [0, 1], 100)


def brute_force(calls: list[CallCost], capacity: int) -> float:
    best = math.inf
    for order in itertools.permutations(range(len(calls))):
        seen: set[int] = set()
        valid = True
        for i in order:
            if any(p not in seen for p in calls[i].preds):
                valid = False
                break
            seen.add(i)
        if valid:
            best = min(best, token_steps(calls, order, capacity))
    return best


def test_the_milp_finds_the_optimum_of_small_instances() -> None:
    rng = random.Random(1)
    calls = []
    for j in range(7):
        base = rng.choice([SYS_A, SYS_B])
        tail = tuple(rng.randint(0, 50) for _ in range(rng.randint(10, 60)))
        preds = tuple(p for p in range(j) if rng.random() < 0.25)
        calls.append(CallCost(f"c{j}", base + tail, rng.randint(5, 30), preds))
    best = optimal_order(calls, 500, time_limit_s=60)
    assert best.proven
    assert best.makespan == pytest.approx(brute_force(calls, 500))


def test_figure_4_agent_twos_calls_run_together() -> None:
    """The Helium paper's Figure 4: Agent 1 answers, Agent 2 answers, Agent 2 reviews Agent
    1's answer. The best order runs Agent 2's two calls back to back (they share Agent 2's
    prompt) after Agent 1's: 1 -> 2 -> 3, which the MILP confirms."""
    calls = [
        CallCost("op1", SYS_A + QUESTION, 20),
        CallCost("op2", SYS_B + QUESTION, 20),
        CallCost("op3", SYS_B + QUESTION + tuple(range(400, 440)), 20, preds=(0,)),
    ]
    best = optimal_order(calls, 1000)
    assert best.order == [0, 1, 2] and best.proven


def layout() -> ChatLayout:
    return ChatLayout(WordTokenizer())


def llm(node_id: str, system: str, *parts: Text | Slot, deps: tuple[str, ...] = ()) -> LLMNode:
    messages = (Message("system", (Text(system),)), Message("user", parts))
    return LLMNode(node_id, messages, 8, node_id, deps=deps)


def test_the_radix_tree_is_built_on_tokens() -> None:
    question = Slot(ValueSlot("question"))
    nodes = [
        llm("a1", "You are agent one.", question, Text(" Answer.")),
        llm("a2", "You are agent two.", question, Text(" Answer.")),
        llm("a2_review", "You are agent two.", question, Text(" Review "), Slot(OutputSlot("a1"))),
    ]
    tree = TemplatedRadixTree.of(nodes, layout())
    # agent two's calls share everything up to their question's slot and the static text
    # after it diverges; agent one shares only the chat template's first tokens with them
    shared = tree.shared_items("a2", "a2_review")
    assert ("slot", "value(question)") in shared
    assert ("slot", "value(question)") not in tree.shared_items("a1", "a2")
    assert tree.static_prefix_tokens("a2") == tree.static_prefix_tokens("a2_review") > 0
    # a query-level group: the two calls below agent two's question slot
    assert tree.query_group("a2") is tree.query_group("a2_review")
    assert tree.query_group("a1") is not tree.query_group("a2")
    assert "a2_review" in tree.explain()


def test_cache_aware_order_puts_dependents_after_every_independent_call() -> None:
    question = Slot(ValueSlot("question"))
    nodes = [
        llm("a1", "You are agent one.", question, Text(" Answer.")),
        llm("a2", "You are agent two.", question, Text(" Answer.")),
        llm(
            "a2_review",
            "You are agent two.",
            question,
            Text(" Review "),
            Slot(OutputSlot("a1")),
            deps=("a1",),
        ),
    ]
    tree = TemplatedRadixTree.of(nodes, layout())
    order, groups = operator_order(tree, {"a1": set(), "a2": set(), "a2_review": {"a1"}})
    assert order.index("a2_review") > max(order.index("a1"), order.index("a2"))
    assert set(groups) == {"a1", "a2", "a2_review"}


def test_every_template_ends_at_its_own_leaf_after_edges_split() -> None:
    """Map-reduce's experts share the context's slot and differ in their last words: the
    first one inserted ends on an edge that later insertions split. Each node's path must
    still spell its whole template, so all four fall in one query-level group (a stale
    leaf once put the first expert alone, and ran it operator by operator)."""
    context = Slot(ValueSlot("context"))
    roles = ("a lawyer", "a doctor", "an engineer", "a lawyer too")
    nodes = [
        llm(f"expert{i}", "You are an expert.", context, Text(f" Answer as {role}."))
        for i, role in enumerate(roles)
    ]
    tree = TemplatedRadixTree.of(nodes, layout())
    for node in nodes:
        spelled = tuple(item for edge in tree.path(node.node_id) for item in edge.items)
        assert spelled == tree.templates[node.node_id]
        assert node.node_id in tree.leaf_of[node.node_id].leaves
    groups = {id(tree.query_group(n.node_id)) for n in nodes}
    assert len(groups) == 1
    _, sequence = operator_order(tree, {n.node_id: set() for n in nodes})
    assert len(set(sequence.values())) == 1


def test_a_debates_next_round_joins_its_own_sequence() -> None:
    """A call that continues its producer's query-level prefix (a debate's second round
    extends the first round's conversation) is ranked in its producer's sequence, right
    behind that query's first round, so it runs while the prefix is still cached; a call
    that only reads another call's answer under a prefix of its own stays level-major."""
    question = Slot(ValueSlot("question"))
    nodes = [
        llm("a_r0", "You debate.", question, Text(" Answer as a lawyer.")),
        llm("b_r0", "You debate.", question, Text(" Answer as a doctor.")),
        llm(
            "a_r1",
            "You debate.",
            question,
            Text(" Answer as a lawyer. Others said "),
            Slot(OutputSlot("b_r0")),
            deps=("a_r0", "b_r0"),
        ),
        llm("judge", "You judge.", question, Slot(OutputSlot("a_r0")), deps=("a_r0",)),
    ]
    tree = TemplatedRadixTree.of(nodes, layout())
    deps = {"a_r0": set(), "b_r0": set(), "a_r1": {"a_r0", "b_r0"}, "judge": {"a_r0"}}
    order, sequence = operator_order(tree, deps)
    assert sequence["a_r1"] == sequence["a_r0"] == sequence["b_r0"]
    assert sequence["judge"] > sequence["a_r0"]
    assert order.index("a_r1") > max(order.index("a_r0"), order.index("b_r0"))
