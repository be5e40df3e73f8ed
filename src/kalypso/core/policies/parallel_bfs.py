"""``parallel-bfs``: the first stage gets everything but the later stages' minimums; never
rebalanced (paper section 5.3)."""

from __future__ import annotations

from collections.abc import Sequence

from kalypso.core.policies.base import Policy, no_argument, register_policy


class ParallelBFS(Policy):
    """The first stage gets all the memory but the later stages' minimums; never
    rebalanced."""

    name = "parallel-bfs"

    def initial_budgets(self, capacity_blocks: int, min_blocks: Sequence[int]) -> list[int]:
        if len(min_blocks) == 1:
            return [max(capacity_blocks, min_blocks[0])]
        rest = sum(min_blocks[1:])
        return [max(capacity_blocks - rest, min_blocks[0]), *min_blocks[1:]]


def _factory(argument: str | None) -> Policy:
    no_argument("parallel-bfs", argument)
    return ParallelBFS()


register_policy("parallel-bfs", _factory)
