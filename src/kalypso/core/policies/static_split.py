"""``static:R``: the first stage gets fraction ``R`` of the memory, the last the rest,
stages between their minimums (``static:0.3`` is a 3:7 split); never rebalanced."""

from __future__ import annotations

from collections.abc import Sequence

from kalypso.core.policies.base import Policy, PolicyError, register_policy


class StaticSplit(Policy):
    """A fixed split: the first stage gets a fraction of the memory, the last the rest;
    never rebalanced."""

    def __init__(self, first_stage_fraction: float) -> None:
        self.first_stage_fraction = first_stage_fraction
        self.name = f"static:{first_stage_fraction:g}"

    def initial_budgets(self, capacity_blocks: int, min_blocks: Sequence[int]) -> list[int]:
        if len(min_blocks) == 1:
            return [max(capacity_blocks, min_blocks[0])]
        first = max(int(capacity_blocks * self.first_stage_fraction + 1e-9), min_blocks[0])
        middle = list(min_blocks[1:-1])
        last = max(capacity_blocks - first - sum(middle), min_blocks[-1])
        return [first, *middle, last]


def _factory(argument: str | None) -> Policy:
    try:
        fraction = float(argument) if argument is not None else -1.0
    except ValueError:
        fraction = -1.0
    if not 0.0 < fraction < 1.0:
        raise PolicyError(
            f"policy 'static:{argument or ''}': the static fraction must be in (0, 1),"
            " e.g. static:0.3"
        )
    return StaticSplit(fraction)


register_policy("static", _factory)
