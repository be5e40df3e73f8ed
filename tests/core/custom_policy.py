"""A policy written outside the core, as a user would: one module, registered by name.

``halves`` splits the capacity evenly between the first and the last stage (stages in
between get their minimums) and, after each batch of completions, moves the free budget
of any stage with nothing waiting to the stage with the most waiting tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

from kalypso.core.policies import Policy, RebalanceView, register_policy
from kalypso.core.policies.base import no_argument


class Halves(Policy):
    name = "halves"

    def initial_budgets(self, capacity_blocks: int, min_blocks: Sequence[int]) -> list[int]:
        if len(min_blocks) == 1:
            return [max(capacity_blocks, min_blocks[0])]
        middle = list(min_blocks[1:-1])
        first = max((capacity_blocks - sum(middle)) // 2, min_blocks[0])
        last = max(capacity_blocks - sum(middle) - first, min_blocks[-1])
        return [first, *middle, last]

    def rebalance(self, view: RebalanceView) -> None:
        busiest = max(range(len(view.waiting)), key=lambda s: view.waiting[s])
        for stage, waiting in enumerate(view.waiting):
            if waiting == 0 and stage != busiest:
                view.move(stage, busiest, "idle")


def _factory(argument: str | None) -> Policy:
    no_argument("halves", argument)
    return Halves()


register_policy("halves", _factory, replace=True)
