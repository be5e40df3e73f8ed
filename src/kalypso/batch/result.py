"""What a batch run did (:class:`BatchResult`), summed over its pieces."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class BatchResult:
    """What a batch run did.

    ``prompt_tokens`` and ``cached_tokens`` are the engine's, over the requests it was
    sent (a greedy body answered once, or by the result cache, counts once); ``prefill``
    is what it computed.
    """

    answered: int = 0
    failed: int = 0
    distinct: int = 0
    """Distinct requests: greedy requests with equal bodies count once (those refused
    before the run included)."""
    result_cache_hits: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    min_prefill_tokens: int = 0
    """The least prefill of the calls sent, each chunk's shapes measured apart (an
    unbounded cache per shape run), summed."""
    shapes: int = 0
    chunks: int = 0
    time_s: float = 0.0
    model: str = ""
    errors: dict[str, int] = field(default_factory=dict)
    """Failed lines by error code."""

    @property
    def requests(self) -> int:
        return self.answered + self.failed

    @property
    def prefill_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def add(self, piece: BatchResult, times: int = 1) -> None:
        """Add ``piece``'s counts (a chunk's) ``times`` times: -1 takes back those of a
        chunk whose answers were discarded."""
        self.answered += times * piece.answered
        self.failed += times * piece.failed
        self.distinct += times * piece.distinct
        self.prompt_tokens += times * piece.prompt_tokens
        self.cached_tokens += times * piece.cached_tokens
        self.output_tokens += times * piece.output_tokens
        self.min_prefill_tokens += times * piece.min_prefill_tokens
        self.shapes += times * piece.shapes
        self.chunks += times * piece.chunks
        for code, count in piece.errors.items():
            left = self.errors.get(code, 0) + times * count
            if left:
                self.errors[code] = left
            else:
                self.errors.pop(code, None)

    def summary(self) -> str:
        return (
            f"{self.requests:,} requests ({self.answered:,} answered, {self.failed:,} failed;"
            f" {self.requests - self.distinct:,} answered by an equal request,"
            f" {self.result_cache_hits:,} from the result cache), {self.prompt_tokens:,} prompt"
            f" tokens, {self.prefill_tokens:,} prefilled, hit rate {self.hit_rate:.1%},"
            f" {self.output_tokens:,} output tokens, {self.shapes} shape(s) in"
            f" {self.chunks} chunk(s), {self.time_s:.1f} s"
        )


Progress = Callable[[BatchResult], None]
