"""Per-operator statistics of a run (one entry per ``op_id`` of the task graph)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import pandas as pd

from kalypso.engine.attention import attention_pairs
from kalypso.engine.protocol import GenerateResult


@dataclass
class OperatorStats:
    """What one operator did during a run.

    ``calls`` counts logical LLM calls; ``requests`` the engine requests they took (a
    call stopped at its output bound is *continued*: the next request is its prompt plus
    the tokens generated so far, so only new tokens cost anything); ``continuations``
    and ``continued_tokens`` count those extra requests and the tokens they generated.
    ``near_ties`` counts decisions whose margin was below the run's epsilon.
    ``llm_time_s`` sums the latencies of its requests (they overlap, so it can exceed the
    wall time).
    """

    operator: str
    rows_in: int = 0
    rows_out: int = 0
    calls: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    continuations: int = 0
    continued_tokens: int = 0
    decisions: int = 0
    near_ties: int = 0
    failed_calls: int = 0
    """Calls the engine failed, isolated (``RunOptions.isolate_call_errors``)."""
    llm_time_s: float = 0.0
    dependent_calls: int = 0
    """Requests on an instance whose previous request left a prefix they should reuse."""
    expected_prefix_tokens: int = 0
    """Full-block tokens those requests should have found cached."""
    found_prefix_tokens: int = 0
    """Of those, the tokens the engine reported cached."""
    lost_prefixes: int = 0
    """Dependent requests that found less than their expected prefix (evicted)."""
    min_prefill_tokens: int = 0
    """Prefill an unbounded prefix cache would compute for these requests
    (:mod:`kalypso.core.ideal_cache`)."""
    min_attention_pairs: int = 0
    """Query-key pairs the attention of those tokens computes (:mod:`kalypso.engine.attention`)."""
    decode_tokens: int = 0
    """Tokens the engine's decode steps fed back for these requests: every generated
    token but each request's last (its first came from the request's prefill step)."""
    decode_attention_pairs: int = 0
    """Query-key pairs the decode steps of these requests compute: each generated token
    fed back (all but the last) against its prompt and the tokens generated before it.
    Every schedule computes them, whatever it caches."""

    @property
    def prefill_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    def record(
        self,
        result: GenerateResult,
        *,
        continuation: bool,
        expected_cached_tokens: int = 0,
        min_prefill_tokens: int = 0,
        min_attention_pairs: int = 0,
        from_result_cache: bool = False,
    ) -> None:
        """Count one engine request (``from_result_cache``: answered by the result cache,
        so the engine computed nothing for it: no least prefill and no decode step)."""
        self.requests += 1
        if continuation:
            self.continuations += 1
            self.continued_tokens += result.output_tokens
        if not from_result_cache:
            self.min_prefill_tokens += min_prefill_tokens
            self.min_attention_pairs += min_attention_pairs
        fed_back_tokens = 0 if from_result_cache else max(result.output_tokens - 1, 0)
        self.decode_tokens += fed_back_tokens
        self.decode_attention_pairs += attention_pairs(fed_back_tokens, result.prompt_tokens)
        self.prompt_tokens += result.prompt_tokens
        self.cached_tokens += result.cached_tokens
        self.output_tokens += result.output_tokens
        self.llm_time_s += result.timings.total_s
        if expected_cached_tokens > 0:
            self.dependent_calls += 1
            self.expected_prefix_tokens += expected_cached_tokens
            self.found_prefix_tokens += min(result.cached_tokens, expected_cached_tokens)
            if result.cached_tokens < expected_cached_tokens:
                self.lost_prefixes += 1


def merged_stats(parts: Sequence[OperatorStats]) -> OperatorStats:
    """One operator's statistics over several runs (the chunks of a replicated run): every
    count summed. ``min_prefill_tokens`` is then the sum of each run's minimum, which
    counts a prefix shared across runs once per run."""
    if not parts or len({p.operator for p in parts}) != 1:
        raise ValueError("merged_stats needs statistics of one operator")
    totals = {
        f.name: sum(getattr(p, f.name) for p in parts)
        for f in fields(OperatorStats)
        if f.name != "operator"
    }
    return OperatorStats(parts[0].operator, **totals)


class RunTotals:
    """Totals over a run's ``operator_stats`` (a mixin for the front ends' results)."""

    operator_stats: tuple[OperatorStats, ...]

    @property
    def llm_calls(self) -> int:
        return sum(s.calls for s in self.operator_stats)

    @property
    def requests(self) -> int:
        """Engine requests (calls plus their continuations)."""
        return sum(s.requests for s in self.operator_stats)

    @property
    def prompt_tokens(self) -> int:
        return sum(s.prompt_tokens for s in self.operator_stats)

    @property
    def cached_tokens(self) -> int:
        return sum(s.cached_tokens for s in self.operator_stats)

    @property
    def prefill_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def output_tokens(self) -> int:
        """Tokens the engine generated, continuations included."""
        return sum(s.output_tokens for s in self.operator_stats)

    @property
    def min_prefill_tokens(self) -> int:
        """Prefill the run's prompts need at the least: every distinct full-block prefix
        computed once (an unbounded prefix cache, :mod:`kalypso.core.ideal_cache`)."""
        return sum(s.min_prefill_tokens for s in self.operator_stats)

    @property
    def min_attention_pairs(self) -> int:
        """Query-key pairs the attention of ``min_prefill_tokens`` computes: the least
        attention work of the run's prompts."""
        return sum(s.min_attention_pairs for s in self.operator_stats)

    @property
    def decode_tokens(self) -> int:
        """Tokens the engine's decode steps fed back: every generated token but each
        request's last (its first came from the request's prefill step)."""
        return sum(s.decode_tokens for s in self.operator_stats)

    @property
    def decode_attention_pairs(self) -> int:
        """Query-key pairs those decode tokens' attention computes (the same under any
        schedule)."""
        return sum(s.decode_attention_pairs for s in self.operator_stats)

    @property
    def continuations(self) -> int:
        """Requests that continued a call stopped at its output bound."""
        return sum(s.continuations for s in self.operator_stats)

    @property
    def continued_tokens(self) -> int:
        """Tokens those continuations generated."""
        return sum(s.continued_tokens for s in self.operator_stats)

    @property
    def hit_rate(self) -> float:
        """Prompt tokens served from the prefix cache (or the result cache)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def stats_frame(stats: list[OperatorStats]) -> pd.DataFrame:
    """One row per operator, plus the derived prefill tokens."""
    rows = [{**asdict(s), "prefill_tokens": s.prefill_tokens} for s in stats]
    return pd.DataFrame(rows)
