"""What operators may use while running: the engine call wrapper and their statistics.

Operators never call the engine directly: :meth:`ExecContext.complete` builds the
token-exact prompt ``[system | row context | task]``, checks it fits the context window,
re-issues a call whose answer hit a token bound below the operator's cap (doubling the
bound, at most ``max_retries`` times), and records every call in the operator's statistics.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from kalypso.engine.protocol import Engine, GenerateRequest, GenerateResult
from kalypso.prompts import PromptLayout
from kalypso.query.rows import Row
from kalypso.query.stats import OperatorStats


@dataclass
class ExecContext:
    """Per-query execution state (no globals: two queries on one engine do not clash)."""

    engine: Engine
    layout: PromptLayout
    stats: dict[str, OperatorStats] = field(default_factory=dict)
    max_retries: int = 2
    query_id: str = "q"
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def stats_for(self, op_id: str) -> OperatorStats:
        return self.stats.setdefault(op_id, OperatorStats(op_id))

    def prompt_for(self, row: Row, columns: tuple[str, ...], task: str) -> tuple[int, ...]:
        context = row.context_ids(columns, self.engine.tokenizer)
        return self.layout.prompt_ids(self.layout.prefix_ids(context), task)

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

        The call is first issued with ``first_bound_tokens`` (default: ``max_tokens``).
        When the answer stops at that bound and the bound is below the operator's hard
        cap ``max_tokens``, the call is re-issued with twice the bound (capped), at most
        ``max_retries`` times; each re-issue counts in ``retries``. The last answer is
        returned either way: an answer cut at ``max_tokens`` is what the user asked for.
        """
        stats = self.stats_for(op_id)
        prompt = self.prompt_for(row, columns, task)
        bound = min(first_bound_tokens or max_tokens, max_tokens)
        for attempt in range(self.max_retries + 1):
            row_key = ".".join(map(str, row.key))
            request = GenerateRequest(
                request_id=f"{self.query_id}:{op_id}:{row_key}:{next(self._ids)}",
                prompt_token_ids=prompt,
                max_tokens=bound,
                priority=priority,
            )
            result = await self.engine.generate(request)
            stats.record(result)
            if result.finish_reason != "length" or bound >= max_tokens:
                return result
            if attempt < self.max_retries:
                stats.retries += 1
                bound = min(2 * bound, max_tokens)
        return result
