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


def token_steps(calls: Sequence[CallCost], order: Sequence[int], capacity_tokens: int) -> float:
    """The makespan ``T`` of running ``calls`` in ``order`` (see the module docstring).

    Raises:
        ValueError: ``order`` is not a permutation, or runs a call before a predecessor.
    """
    if sorted(order) != list(range(len(calls))):
        raise ValueError("order must be a permutation of the calls")
    alpha = 1.0 / capacity_tokens
    finish: dict[int, float] = {}
    clock = 0.0
    previous: tuple[Token, ...] | None = None
    for index in order:
        call = calls[index]
        missing = [p for p in call.preds if p not in finish]
        if missing:
            raise ValueError(f"{call.name} runs before its predecessor(s) {missing}")
        up = len(call.prompt) - (shared_tokens(previous, call.prompt) if previous else 0)
        u = alpha * (call.out_tokens * up + call.out_tokens * (call.out_tokens + 1) / 2)
        ready = max(
            (finish[p] + calls[p].out_tokens for p in call.preds), default=0.0
        )  # alpha * M * out = out
        start = max(clock, ready)
        finish[index] = clock = start + u
        previous = call.prompt
    return max(finish.values(), default=0.0)
