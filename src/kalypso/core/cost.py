"""The Helium paper's cost model (section 5) in token steps, for one engine.

A call ``j`` with ``out_j`` output tokens, run right after call ``i`` on the same engine,
costs ``u_j = alpha * (out_j * up_j + out_j * (out_j + 1) / 2)`` token steps, where
``up_j`` is the prompt tokens of ``j`` *not shared* with ``i`` (its prefix-cache miss);
a call that depends on ``i`` may start ``d_i = alpha * M * out_i`` steps after ``i`` ends
(its producer's decode). Calls run one after another on the token-step clock::

    b_j = max(c_prev, max(c_i + d_i for i in preds(j)));   c_j = b_j + u_j
    T   = max c_j                                            (the makespan)

with ``alpha = 1 / M`` for an engine of ``M`` KV tokens. Scheduling minimises ``T``; the
problem is NP-hard, so :mod:`kalypso.core.policies.cache_aware` orders calls with the
paper's heuristic and small instances are checked against an exact MILP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kalypso.core.trt import common_length

Token = int | tuple[str, str, tuple[int, ...], int]
"""A static token id, or ``("slot", source, query key, position)`` for slot contents."""


@dataclass(frozen=True)
class CallCost:
    """One call of the model: its prompt as tokens, its output length, its predecessors
    (indices into the call list)."""

    name: str
    prompt: tuple[Token, ...]
    out_tokens: int
    preds: tuple[int, ...] = ()


def shared_tokens(a: Sequence[Token], b: Sequence[Token]) -> int:
    """Leading tokens two prompts have in common."""
    return common_length(a, b)


class TokenClock:
    """The model's clock while calls run one after another: :meth:`run` appends a call,
    :meth:`ready_at` says when a call's predecessors' answers exist."""

    def __init__(self, calls: Sequence[CallCost], capacity_tokens: int) -> None:
        self.calls = calls
        self.alpha = 1.0 / capacity_tokens
        self.finish: dict[int, float] = {}
        self.now = 0.0
        self.previous: tuple[Token, ...] | None = None

    def ready_at(self, index: int) -> float:
        """When ``index`` may start: its predecessors' ends plus their decode delays
        (every predecessor must have run)."""
        calls = self.calls
        return max((self.finish[p] + calls[p].out_tokens for p in calls[index].preds), default=0.0)

    def wait_until(self, time: float) -> None:
        """Idle until ``time`` (no call runs before it)."""
        self.now = max(self.now, time)

    def run(self, index: int) -> float:
        """Run ``index`` next; its end.

        Raises:
            ValueError: a predecessor has not run.
        """
        call = self.calls[index]
        missing = [p for p in call.preds if p not in self.finish]
        if missing:
            raise ValueError(f"{call.name} runs before its predecessor(s) {missing}")
        previous = self.previous
        up = len(call.prompt) - (shared_tokens(previous, call.prompt) if previous else 0)
        u = self.alpha * (call.out_tokens * up + call.out_tokens * (call.out_tokens + 1) / 2)
        self.finish[index] = self.now = max(self.now, self.ready_at(index)) + u
        self.previous = call.prompt
        return self.now


def token_steps(calls: Sequence[CallCost], order: Sequence[int], capacity_tokens: int) -> float:
    """The makespan ``T`` of running ``calls`` in ``order`` (see the module docstring).

    Raises:
        ValueError: ``order`` is not a permutation, or runs a call before a predecessor.
    """
    if sorted(order) != list(range(len(calls))):
        raise ValueError("order must be a permutation of the calls")
    clock = TokenClock(calls, capacity_tokens)
    for index in order:
        clock.run(index)
    return max(clock.finish.values(), default=0.0)
