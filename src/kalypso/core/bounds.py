"""Output bounds: how many tokens a call's KV reservation assumes it will generate.

* Decisions (one constrained token) and calls without ``first_bound_tokens`` reserve
  their cap.
* Generative calls start at a bound below their cap - the fixed one of the run, else the
  estimator's (paper section 6), else the node's own ``first_bound_tokens`` - and are
  *continued* when they reach it: the next request is the same prompt plus the tokens
  generated so far, with a larger bound (:func:`next_bound`), so only the new tokens
  cost anything and answers never depend on the bounds tried.
* Policies that are not memory-aware (operator-at-a-time) run every call at its cap.
"""

from __future__ import annotations

from dataclasses import dataclass

from kalypso.core.estimator import TokenBoundEstimator
from kalypso.core.graph import LLMNode


def next_bound(
    bound_tokens: int, cap_tokens: int, *, continued: int, max_continuations: int
) -> int:
    """The bound after a call stopped at ``bound_tokens``: doubled, or the cap once
    ``continued`` (continuations so far, this one included) reaches ``max_continuations``."""
    if continued >= max_continuations:
        return cap_tokens
    return min(2 * bound_tokens, cap_tokens)


@dataclass
class BoundPolicy:
    """First bounds for one run.

    Attributes:
        bounded: start generative calls below their cap (memory-aware policies).
        estimator: online bounds for generative operators (None: their own).
        fixed_bound_tokens: one first bound for every generative call (the fixed-budget
            ablation of the paper's Figure 12).
    """

    bounded: bool
    estimator: TokenBoundEstimator | None = None
    fixed_bound_tokens: int | None = None

    def first_bound(self, node: LLMNode, prompt_tokens: int) -> int:
        cap = node.max_tokens
        first = node.first_bound_tokens
        if not self.bounded or first is None:
            return cap
        if self.fixed_bound_tokens is not None:
            return min(self.fixed_bound_tokens, cap)
        if self.estimator is not None:
            return self.estimator.bound(
                node.op_id, prompt_tokens, default_tokens=first, cap_tokens=cap
            )
        return min(first, cap)

    def observe(self, node: LLMNode, prompt_tokens: int, output_tokens: int) -> None:
        """Learn from a finished generative call."""
        if self.estimator is not None and node.first_bound_tokens is not None:
            self.estimator.observe(node.op_id, prompt_tokens, output_tokens)
