"""``parallel-dfs``: Algorithm 1's initial split (every stage but the last at its minimum,
the last the rest), never rebalanced (paper section 5.3)."""

from __future__ import annotations

from kalypso.core.policies.base import Policy, no_argument, register_policy


class ParallelDFS(Policy):
    """Algorithm 1's initial split (upstream stages at their minimums, the last the
    rest), never rebalanced."""

    name = "parallel-dfs"


def _factory(argument: str | None) -> Policy:
    no_argument("parallel-dfs", argument)
    return ParallelDFS()


register_policy("parallel-dfs", _factory)
