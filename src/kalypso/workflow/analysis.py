"""The cost model on a real workflow batch: each call's prompt in tokens, and call orders
from the scheduling policies, for comparison with the exact optimum (the Helium paper's
Table 5).

Static parts and message boundaries are the model's real token ids; an input slot is the
value's real tokens; another call's answer is ``out_tokens`` placeholder tokens unique to
that call and query (its text is unknown before it runs); a Python step's value, unknown
too, is what its slot knows of it before it runs (``partial_ids``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kalypso.core.cost import CallCost, Token, TokenClock
from kalypso.core.graph import LLMNode, Slot, Text
from kalypso.core.instance import Instance
from kalypso.core.policies import PlanInfo, RunInfo, TaskInfo, get_policy
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
    deps = lowered.graph.llm_ancestors()
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
                        slot_source = part.source  # a Python step's value comes later
                        ready = slot_source.ready(instance)
                        ids = slot_source.ids if ready else slot_source.partial_ids
                        prompt.extend(ids(instance, layout))
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
    capacity_tokens: int,
    seed: int = 0,
) -> list[int]:
    """The call order a policy's ranking gives, as the runtime takes it: on the cost
    model's clock (:class:`~kalypso.core.cost.TokenClock`), repeatedly the call of
    smallest rank whose predecessors' answers exist and that the policy's gate lets
    through; when none is, the clock moves to the next answer. A call whose turn has come
    but is not ready lets the next ones through, as at run time (the order is a soft one).
    ``"random"``: a random such call, no gate.

    The gate sees a call as completed once its answer exists on the model's clock; a
    gated call then starts without waiting for that moment, so gated policies (querywise,
    opwise) are costed a little below what their barriers cost.
    """
    rank: Callable[[int], Any]
    policy = None
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

    def gate(index: int, run: RunInfo) -> bool:
        return policy is None or policy.gate(infos[index], run)

    clock = TokenClock(calls, capacity_tokens)
    order: list[int] = []
    queries = frozenset(k for _, k in keys)
    while len(order) < len(calls):
        answer_at = {i: clock.finish[i] + calls[i].out_tokens for i in order}
        answered = {i for i, t in answer_at.items() if t <= clock.now}
        unfinished = {keys[i][1] for i in range(len(calls)) if i not in answered}
        done: dict[str, set[tuple[int, ...]]] = {}
        for i in answered:
            done.setdefault(keys[i][0], set()).add(keys[i][1])
        run = RunInfo(done, queries - unfinished, ())
        waiting = [
            i
            for i in range(len(calls))
            if i not in clock.finish and all(p in clock.finish for p in calls[i].preds)
        ]
        ready = [i for i in waiting if clock.ready_at(i) <= clock.now and gate(i, run)]
        if not ready:
            later = [
                t for t in (*answer_at.values(), *map(clock.ready_at, waiting)) if t > clock.now
            ]
            if later:
                clock.wait_until(min(later))
                continue
            ready = waiting  # nothing will change: the gate is stuck, take the rank's pick
        pick = min(ready, key=rank)
        clock.run(pick)
        order.append(pick)
    return order
