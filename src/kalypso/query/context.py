"""What operators may use while running: the engine call wrapper and their statistics.

Operators never call the engine directly: :meth:`ExecContext.complete` builds the
token-exact prompt ``[system | row context | task]``, checks it fits the context window,
re-issues a call whose answer hit its token bound (doubling the bound, at most
``max_retries`` times), and records every call in the operator's statistics.
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
        retry_on_length: bool,
        priority: int = 0,
    ) -> GenerateResult:
        """One LLM call for operator ``op_id`` on ``row``.

        When ``retry_on_length`` and the answer stops at ``max_tokens``, the call is
        re-issued with twice the bound, at most ``max_retries`` times; the last answer
        is returned either way.
        """
        stats = self.stats_for(op_id)
        prompt = self.prompt_for(row, columns, task)
        bound = max_tokens
        for attempt in range(self.max_retries + 1):
            request = GenerateRequest(
                request_id=f"{self.query_id}:{op_id}:{'.'.join(map(str, row.key))}:{next(self._ids)}",
                prompt_token_ids=prompt,
                max_tokens=bound,
                priority=priority,
            )
            result = await self.engine.generate(request)
            stats.record(result)
            if not (retry_on_length and result.finish_reason == "length"):
                return result
            if attempt < self.max_retries:
                stats.retries += 1
                bound *= 2
        return result
