"""``sequential``: one task at a time, deepest stage first (sequential depth-first): each
tuple's whole tree runs before the next tuple starts."""

from __future__ import annotations

from kalypso.core.policies.base import Policy, no_argument, register_policy


class Sequential(Policy):
    """One task at a time, deepest stage first: each tuple's whole tree before the next."""

    name = "sequential"
    max_running_tasks = 1


def _factory(argument: str | None) -> Policy:
    no_argument("sequential", argument)
    return Sequential()


register_policy("sequential", _factory)
