"""What an external-library runner reports, parsed and checked on Kalypso's side.

The runners in ``bench/external/`` (Lotus, Palimpzest, LangGraph) run in their own venvs
and write one JSON object (``server_counters.run_record``): the vLLM server's counter
deltas over the run, its wall time, its output rows and what each runner adds. The
relational and the workflow benchmarks both read it through :class:`ExternalRun`; a
malformed record is reported by the field at fault and that baseline is skipped (the
suite goes on), never shown as zeros in a table.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, NonNegativeInt

RUNNER_HASH_SEED = "4"
"""``PYTHONHASHSEED`` of every external runner's process, so its runs repeat. Lotus 1.2.4
orders an instruction's columns by a ``set`` (``lotus.nl_expression.parse_cols``), so by
the process's string-hash seed: ContractNLI's map ("Quote the clause of the {text} that
addresses: {hypothesis}") renders the contract first under some seeds and the hypothesis
first under others. Hypothesis first, no two of its 85 calls share a prefix and the map
computes 12x the prefill (docs/benchmarks.md, the baselines' findings). Seed 4 renders
the contract first in both of Lotus's ContractNLI instructions: its cache-friendly order,
the conservative baseline."""


def runner_env() -> dict[str, str]:
    """The environment an external runner is started with: this one, seed fixed."""
    return {**os.environ, "PYTHONHASHSEED": RUNNER_HASH_SEED}


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
