"""The cost model on a real workflow batch: each call's prompt in tokens, and call orders
from the scheduling policies, for comparison with the exact optimum (the Helium paper's
Table 5).

Static parts and message boundaries are the model's real token ids; an input slot is the
value's real tokens; another call's answer is ``out_tokens`` placeholder tokens unique to
that call and query (its text is unknown before it runs).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kalypso.core.cost import CallCost, Token
from kalypso.core.graph import LLMNode, Slot, Text
from kalypso.core.instance import Instance
from kalypso.core.policies import PlanInfo, TaskInfo, get_policy
from kalypso.core.policies.cache_aware import llm_dependencies
from kalypso.core.prompt import ChatLayout
from kalypso.core.slots import OutputSlot
from kalypso.workflow.lower import Lowered


def call_costs(
    lowered: Lowered,
    instances: Sequence[Instance],
    layout: ChatLayout,
    out_tokens: Mapping[str, int] | Callable[[LLMNode], int],
) -> tuple[list[CallCost], list[tuple[str, tuple[int, ...]]]]:
    """Every (LLM node, query) of the batch as a :class:`CallCost`, and their keys."""
    nodes = [n for n in lowered.graph.nodes if isinstance(n, LLMNode)]
    out_of = out_tokens if callable(out_tokens) else (lambda n: out_tokens[n.node_id])
    deps = llm_dependencies(lowered.graph)
    keys = [(n.node_id, i.key) for i in instances for n in nodes]
    index = {key: position for position, key in enumerate(keys)}
    calls = []
    for instance in instances:
        for node in nodes:
            prompt: list[Token] = []
            roles = tuple(m.role for m in node.messages)
            bounds = layout.boundaries(roles)
            for boundary, message in zip(bounds, node.messages, strict=False):
                prompt.extend(boundary)
                for part in message.parts:
                    if isinstance(part, Text):
                        prompt.extend(layout.text_ids(part.text))
                    elif isinstance(part.source, OutputSlot):
                        source = part.source.node_id
                        length = out_of(lowered.graph.node(source))  # type: ignore[arg-type]
                        prompt.extend(("slot", source, instance.key, k) for k in range(length))
                    else:
                        assert isinstance(part, Slot)
                        prompt.extend(part.source.ids(instance, layout))
            prompt.extend(bounds[-1])
            preds = tuple(index[(d, instance.key)] for d in sorted(deps[node.node_id]))
            calls.append(
                CallCost(f"{node.node_id}@{instance.key}", tuple(prompt), out_of(node), preds)
            )
    return calls, keys


def policy_order(
    policy_name: str,
    lowered: Lowered,
    keys: Sequence[tuple[str, tuple[int, ...]]],
    calls: Sequence[CallCost],
    layout: ChatLayout,
    seed: int = 0,
) -> list[int]:
    """The call order a policy's ranking gives, as a list schedule: repeatedly the ready
    call (its predecessors done) of smallest rank. ``"random"``: a random ready call."""
    rank: Callable[[int], Any]
    if policy_name == "random":
        rng = random.Random(seed)
        noise = [rng.random() for _ in calls]
        rank = noise.__getitem__
    else:
        policy = get_policy(policy_name)
        instance_keys = sorted({k for _, k in keys})
        policy.prepare(PlanInfo(lowered.graph, instance_keys, layout, 16))
        infos = [TaskInfo(i, 0, k, op) for i, (op, k) in enumerate(keys)]
        ranks = [policy.rank(info) for info in infos]
        rank = ranks.__getitem__
    done: set[int] = set()
    order: list[int] = []
    while len(order) < len(calls):
        ready = [i for i in range(len(calls)) if i not in done and set(calls[i].preds) <= done]
        pick = min(ready, key=rank)
        done.add(pick)
        order.append(pick)
    return order
