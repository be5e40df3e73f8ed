"""What an external-library runner reports, parsed and checked on Kalypso's side.

The runners in ``bench/external/`` (Lotus, Palimpzest, LangGraph) run in their own venvs
and write one JSON object (``server_counters.run_record``): the vLLM server's counter
deltas over the run, its wall time, its output rows and what each runner adds. The
relational and the workflow benchmarks both read it through :class:`ExternalRun`, so a
runner that writes a malformed record fails here, by name, not as a zero in a table.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, NonNegativeInt


class ExternalRun(BaseModel):
    """One external run: counter deltas (tokens and requests as vLLM counts them, phase
    seconds summed over requests), wall time, and the outputs.

    Counters arrive as floats (Prometheus values); whole numbers are accepted as ints.

    Raises:
        pydantic.ValidationError: from :meth:`model_validate`, for a missing or negative
            counter, or a fractional token count.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    time_s: NonNegativeFloat
    llm_calls: NonNegativeInt
    prompt_tokens: NonNegativeInt
    cached_tokens: NonNegativeInt
    output_tokens: NonNegativeInt
    prefill_time_s: NonNegativeFloat
    decode_time_s: NonNegativeFloat
    preemptions: NonNegativeInt
    output_rows: NonNegativeInt
    rows: list[dict[str, Any]] | None = None
    """The relational runners' output rows (key columns, for scoring)."""
    stages: tuple[dict[str, Any], ...] = ()
    """The relational runners' rows in and out per operator."""
    outputs: list[dict[str, Any]] = []
    """The workflow runner's outputs, one per query."""

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens the server computed (not read from its prefix cache)."""
        return self.prompt_tokens - self.cached_tokens

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / max(1, self.prompt_tokens)
