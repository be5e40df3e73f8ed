"""What operators may use while running: the engine call wrapper and their statistics.

Operators never call the engine directly: :meth:`ExecContext.complete` builds the
token-exact prompt ``[system | row context | task]``, checks it fits the context window,
signals a call whose answer hit a token bound below the operator's cap (the scheduler
re-enqueues it), and records every call in the operator's statistics.
"""

from __future__ import annotations

import itertools
from contextvars import ContextVar
from dataclasses import dataclass, field

from kalypso.engine.protocol import Engine, GenerateRequest, GenerateResult
from kalypso.prompts import PromptLayout
from kalypso.query.ideal_cache import IdealPrefixCache
from kalypso.query.rows import Row
from kalypso.query.stats import OperatorStats
from kalypso.scheduler.estimator import TokenBoundEstimator


class BoundExceeded(Exception):
    """A call stopped at a token bound below its operator's cap; the scheduler re-reserves
    memory for a larger bound and re-enqueues the task."""

    def __init__(self, op_id: str, bound_tokens: int, cap_tokens: int) -> None:
        super().__init__(f"{op_id}: answer reached its bound of {bound_tokens} tokens")
        self.op_id = op_id
        self.bound_tokens = bound_tokens
        self.cap_tokens = cap_tokens


def retry_bound(bound_tokens: int, cap_tokens: int, *, retries_done: int, max_retries: int) -> int:
    """The bound after a call stopped at ``bound_tokens``: doubled, or the cap once
    ``retries_done`` reaches ``max_retries``."""
    if retries_done >= max_retries:
        return cap_tokens
    return min(2 * bound_tokens, cap_tokens)


_BOUND_OVERRIDES: ContextVar[dict[str, int] | None] = ContextVar("kalypso_bounds", default=None)


def set_bound_overrides(bounds: dict[str, int] | None) -> None:
    """Per-task output bounds (operator id -> tokens) for calls made in this asyncio task."""
    _BOUND_OVERRIDES.set(bounds)


_PIN_KEY: ContextVar[str | None] = ContextVar("kalypso_pin_key", default=None)


def set_pin_key(pin_key: str | None) -> None:
    """Explicit pinning: calls made in this asyncio task keep their blocks under the key."""
    _PIN_KEY.set(pin_key)


@dataclass
class ExecContext:
    """Per-query execution state (no globals: two queries on one engine do not clash).

    Attributes:
        estimator: online output bounds for generative operators (None: their own).
        bounded_outputs: start generative calls below their cap and raise
            :class:`BoundExceeded` when a bound is reached (set by the scheduler, which
            reserves memory per bound); otherwise every call runs with its cap.
        max_retries: re-enqueues of a task at doubled bounds before going to the cap.
        fixed_bound_tokens: one first bound for every generative operator instead of the
            estimator's or the operator's own (the fixed-budget ablation, paper Figure 12).
    """

    engine: Engine
    layout: PromptLayout
    stats: dict[str, OperatorStats] = field(default_factory=dict)
    max_retries: int = 2
    query_id: str = "q"
    estimator: TokenBoundEstimator | None = None
    bounded_outputs: bool = False
    fixed_bound_tokens: int | None = None
    ideal_cache: IdealPrefixCache = field(init=False)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.ideal_cache = IdealPrefixCache(self.engine.capacity.block_size_tokens)

    def stats_for(self, op_id: str) -> OperatorStats:
        return self.stats.setdefault(op_id, OperatorStats(op_id))

    def prompt_for(self, row: Row, columns: tuple[str, ...], task: str) -> tuple[int, ...]:
        context = row.context_ids(columns, self.engine.tokenizer)
        return self.layout.prompt_ids(self.layout.prefix_ids(context), task)

    def first_bound(
        self, op_id: str, prompt_tokens: int, max_tokens: int, first_bound_tokens: int | None
    ) -> int:
        """The bound the next call of ``op_id`` starts with: a per-task override (after a
        retry), else the fixed one or the estimator's (generative operators), else the
        operator's own."""
        overrides = _BOUND_OVERRIDES.get()
        if overrides and op_id in overrides:
            return min(overrides[op_id], max_tokens)
        if first_bound_tokens is None:
            return max_tokens
        if self.fixed_bound_tokens is not None:
            return min(self.fixed_bound_tokens, max_tokens)
        if self.estimator is not None:
            return self.estimator.bound(
                op_id, prompt_tokens, default_tokens=first_bound_tokens, cap_tokens=max_tokens
            )
        return min(first_bound_tokens, max_tokens)

    def expected_cached_tokens(self, row: Row, prompt: tuple[int, ...]) -> int:
        """Tokens of ``prompt`` the engine should find cached: the full blocks it shares
        with the tuple's previous prompt (capped as vLLM caps hits: the last prompt token
        is always computed)."""
        previous = row.last_prompt
        if not previous:
            return 0
        shared = 0
        for a, b in zip(previous, prompt, strict=False):
            if a != b:
                break
            shared += 1
        block = self.engine.capacity.block_size_tokens
        return min(shared // block, (len(prompt) - 1) // block) * block

    async def complete(
        self,
        op_id: str,
        row: Row,
        columns: tuple[str, ...],
        task: str,
        *,
        max_tokens: int,
        first_bound_tokens: int | None = None,
        priority: int = 0,
    ) -> GenerateResult:
        """One LLM call for operator ``op_id`` on ``row``.

        ``max_tokens`` is the operator's hard cap. Under a scheduler
        (``bounded_outputs``), operators that give ``first_bound_tokens`` (generative
        ones) start below the cap (:meth:`first_bound`) so the scheduler reserves less KV
        memory; an answer that stops at such a bound raises :class:`BoundExceeded`, and
        the scheduler re-enqueues the task with a larger bound (the cap on the last
        allowed retry, so answers never depend on the bounds tried). Without a scheduler
        (operator-at-a-time) every call runs with the cap. An answer cut at the cap is
        what the user asked for and is returned.

        Every call updates the operator's statistics, including whether the prefix the
        tuple's previous call left in the cache was still there (``lost_prefixes``).
        """
        stats = self.stats_for(op_id)
        prompt = self.prompt_for(row, columns, task)
        bound = max_tokens
        if self.bounded_outputs:
            bound = self.first_bound(op_id, len(prompt), max_tokens, first_bound_tokens)
        row_key = ".".join(map(str, row.key))
        request = GenerateRequest(
            request_id=f"{self.query_id}:{op_id}:{row_key}:{next(self._ids)}",
            prompt_token_ids=prompt,
            max_tokens=bound,
            priority=priority,
            pin_key=_PIN_KEY.get(),
        )
        expected = self.expected_cached_tokens(row, prompt)
        least = self.ideal_cache.prefill_tokens(prompt)
        result = await self.engine.generate(request)
        row.last_prompt = prompt
        stats.record(result, expected_cached_tokens=expected, min_prefill_tokens=least)
        if self.estimator is not None and first_bound_tokens is not None:
            self.estimator.observe(op_id, result.prompt_tokens, result.output_tokens)
        if result.finish_reason == "length" and bound < max_tokens:
            raise BoundExceeded(op_id, bound, max_tokens)
        return result
