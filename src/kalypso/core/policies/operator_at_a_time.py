"""``operator-at-a-time``: the baseline of today's systems (Lotus, Palimpzest, DocETL).

Each operator is its own stage and runs over the whole table, in input-row order, and
its output is materialized before the next operator starts. It keeps as many calls in
flight as the engine runs at once (``capacity.max_running_requests``, when the engine
knows it; otherwise every call is submitted together and the engine queues what it
cannot run), as a client batching at the engine's width does (Lotus sends sub-batches of
64): calls sent all at once over concurrent HTTP connections reach vLLM's first-come
queue in an order that mixes rows and changes from run to run, and so does the prefill
the cache saves. Nothing is reserved (the engine's own admission is the only memory
control) and every call runs at its cap, so no call is ever continued. The prompts are
the same as under every other policy, and vLLM's prefix cache is on: what this baseline
loses is only the order.
"""

from __future__ import annotations

from kalypso.core.policies.base import Policy, no_argument, register_policy


class OperatorAtATime(Policy):
    """Each operator over the whole table before the next (a barrier between stages),
    every ready call sent at once: the engine alone bounds memory."""

    name = "operator-at-a-time"
    memory_aware = False
    bounded_outputs = False
    operator_at_a_time = True
    paced_by_engine = True

    def priority(self, stage: int, num_stages: int) -> int:
        return 0


def _factory(argument: str | None) -> Policy:
    no_argument("operator-at-a-time", argument)
    return OperatorAtATime()


register_policy("operator-at-a-time", _factory)
