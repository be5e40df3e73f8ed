"""Token-bound estimation (paper section 6).

Each LLM call reserves KV memory for its prompt plus a bound on its output. Predicates
and classifiers have a static bound (8 tokens by default: ``max_output_tokens()`` of the
operator). Generative operators (``sem_map``, ``sem_extract``) get an online bound: the
calibrated 99th percentile of the ratio output tokens / prompt tokens observed on the
operator's completed calls, times the call's prompt tokens (at least one token, at most
the operator's hard cap). Until ``min_samples`` calls have completed, the operator's own
first bound is used.

A call that stops at its bound is *interrupted*: the scheduler re-enqueues its task with
:func:`kalypso.query.context.retry_bound` (twice the bound; the cap on the last allowed
retry) and counts a retry. Ratios of interrupted
calls are lower bounds on the true ratio; they are recorded as such (the observed ratio
at the bound), so a run of interruptions pushes the percentile up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class TokenBoundEstimator:
    """Per-operator online output/input ratio percentiles.

    Attributes:
        percentile: which percentile of the observed ratios to use (0.99).
        min_samples: observations needed before the percentile replaces the default.
        margin: multiplicative safety margin on the percentile bound.
    """

    percentile: float = 0.99
    min_samples: int = 8
    margin: float = 1.0
    _ratios: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.percentile <= 1:
            raise ValueError("percentile must be in (0, 1]")
        if self.min_samples < 1:
            raise ValueError("min_samples must be at least 1")

    def observe(self, op_id: str, prompt_tokens: int, output_tokens: int) -> None:
        """Record one completed call of ``op_id``."""
        if prompt_tokens > 0:
            self._ratios.setdefault(op_id, []).append(output_tokens / prompt_tokens)

    def samples(self, op_id: str) -> int:
        return len(self._ratios.get(op_id, ()))

    def ratio(self, op_id: str) -> float | None:
        """The calibrated percentile of output/input for ``op_id`` (None: too few samples)."""
        ratios = self._ratios.get(op_id)
        if not ratios or len(ratios) < self.min_samples:
            return None
        ordered = sorted(ratios)
        rank = max(0, math.ceil(self.percentile * len(ordered)) - 1)
        return ordered[rank] * self.margin

    def bound(self, op_id: str, prompt_tokens: int, *, default_tokens: int, cap_tokens: int) -> int:
        """The output bound for the next call of ``op_id`` with ``prompt_tokens``."""
        ratio = self.ratio(op_id)
        if ratio is None:
            return max(1, min(default_tokens, cap_tokens))
        return max(1, min(math.ceil(ratio * prompt_tokens), cap_tokens))
