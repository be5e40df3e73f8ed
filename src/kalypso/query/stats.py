"""Per-operator statistics of a query run."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from kalypso.engine.protocol import GenerateResult


@dataclass
class OperatorStats:
    """What one operator did during a run.

    ``retries`` counts calls re-issued because the answer hit its token bound;
    ``unparsed`` counts answers the operator could not parse (given the documented
    default); ``llm_time_s`` sums the latencies of its calls (calls overlap, so it can
    exceed the wall time).
    """

    operator: str
    rows_in: int = 0
    rows_out: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    retries: int = 0
    unparsed: int = 0
    llm_time_s: float = 0.0
    dependent_calls: int = 0
    """Calls on a tuple whose previous call left a prefix they should reuse."""
    expected_prefix_tokens: int = 0
    """Full-block tokens those calls should have found cached."""
    found_prefix_tokens: int = 0
    """Of those, the tokens the engine reported cached."""
    lost_prefixes: int = 0
    """Dependent calls that found less than their expected prefix (evicted)."""
    min_prefill_tokens: int = 0
    """Prefill an unbounded prefix cache would compute for these calls
    (:mod:`kalypso.query.ideal_cache`)."""

    @property
    def prefill_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    def record(
        self,
        result: GenerateResult,
        *,
        expected_cached_tokens: int = 0,
        min_prefill_tokens: int = 0,
    ) -> None:
        self.calls += 1
        self.min_prefill_tokens += min_prefill_tokens
        self.prompt_tokens += result.prompt_tokens
        self.cached_tokens += result.cached_tokens
        self.llm_time_s += result.timings.total_s
        if expected_cached_tokens > 0:
            self.dependent_calls += 1
            self.expected_prefix_tokens += expected_cached_tokens
            self.found_prefix_tokens += min(result.cached_tokens, expected_cached_tokens)
            if result.cached_tokens < expected_cached_tokens:
                self.lost_prefixes += 1


def stats_frame(stats: list[OperatorStats]) -> pd.DataFrame:
    """One row per operator, plus the derived prefill tokens."""
    rows = [{**asdict(s), "prefill_tokens": s.prefill_tokens} for s in stats]
    return pd.DataFrame(rows)
