"""Where a run's engine time goes, from the step trace of
:mod:`kalypso.engine.vllm_step_trace`: steps by kind, their seconds and tokens, and a
least-squares cost per step.

A step is *prefill* when it scheduled only prompt tokens, *decode* when it scheduled only
generated ones, and *mixed* otherwise. A step's seconds run from the later of its
scheduling and the previous step's end to its own end (see the trace module), so the
steps' seconds and the engine's idle seconds add up to the window exactly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

KINDS = ("prefill", "mixed", "decode")


def load_steps(path: Path) -> list[dict[str, float]]:
    """The steps of a trace file, one JSON object per line, in file order."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def step_kind(step: dict[str, float]) -> str:
    """``prefill``, ``mixed`` or ``decode`` (see the module's docstring)."""
    if step["decode_tokens"] == 0:
        return "prefill"
    return "decode" if step["prefill_tokens"] == 0 else "mixed"


@dataclass
class KindTotals:
    """One kind of step's count, seconds, tokens and summed batch size."""

    steps: int = 0
    seconds: float = 0.0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    requests: int = 0


@dataclass
class StepSummary:
    """The steps that ended inside one window, by kind, and the window's idle time."""

    window_s: float
    idle_s: float
    kinds: dict[str, KindTotals] = field(default_factory=dict)
    fit_s: tuple[float, float, float, float] | None = None
    """Seconds per step, per prefill token, per decode token and per 1,000 context
    tokens, by least squares over the steps (None under five steps)."""

    def explain(self) -> str:
        """A few lines a reader can put beside the run's wall time."""
        lines = [f"engine: window {self.window_s:.1f} s, idle {self.idle_s:.1f} s"]
        for kind in KINDS:
            t = self.kinds[kind]
            if not t.steps:
                continue
            rate = ""
            if t.prefill_tokens and t.seconds:
                rate = f", {t.prefill_tokens / t.seconds:,.0f} prefill tokens/s"
            lines.append(
                f"  {kind}: {t.steps} steps, {t.seconds:.1f} s, prefill {t.prefill_tokens:,},"
                f" decode {t.decode_tokens:,} tokens, mean batch"
                f" {t.requests / t.steps:.1f} requests{rate}"
            )
        if self.fit_s is not None:
            base, per_prefill, per_decode, per_context = self.fit_s
            lines.append(
                f"  fit: {base * 1e3:.0f} ms a step + {per_prefill * 1e3:.2f} ms a prefill"
                f" token + {per_decode * 1e3:.2f} ms a decode token +"
                f" {per_context * 1e3:.2f} ms per 1,000 context tokens"
            )
        return "\n".join(lines)


def step_seconds(steps: Sequence[dict[str, float]]) -> list[float]:
    """Each step's engine seconds: its ``done_s`` minus the later of its ``scheduled_s``
    and the previous step's ``done_s``."""
    seconds, previous_done_s = [], float("-inf")
    for step in steps:
        seconds.append(step["done_s"] - max(step["scheduled_s"], previous_done_s))
        previous_done_s = step["done_s"]
    return seconds


def summarise(steps: Sequence[dict[str, float]], start_s: float, end_s: float) -> StepSummary:
    """The steps that ended within ``[start_s, end_s]`` (``time.monotonic()`` seconds),
    by kind (a step that began before the window counts from its start); idle is the
    window minus their seconds.

    Raises:
        ValueError: the window ends before it starts.
    """
    if end_s < start_s:
        raise ValueError(f"the window ends ({end_s}) before it starts ({start_s})")
    durations = step_seconds(steps)
    inside = [
        (step, min(seconds, step["done_s"] - start_s))
        for step, seconds in zip(steps, durations, strict=True)
        if start_s <= step["done_s"] <= end_s
    ]
    kinds = {kind: KindTotals() for kind in KINDS}
    for step, seconds in inside:
        totals = kinds[step_kind(step)]
        totals.steps += 1
        totals.seconds += seconds
        totals.prefill_tokens += int(step["prefill_tokens"])
        totals.decode_tokens += int(step["decode_tokens"])
        totals.requests += int(step["requests"])
    busy_s = sum(seconds for _, seconds in inside)
    fit = None
    if len(inside) >= 5:
        x = np.array(
            [
                [1.0, s["prefill_tokens"], s["decode_tokens"], s["context_tokens"] / 1000]
                for s, _ in inside
            ]
        )
        y = np.array([seconds for _, seconds in inside])
        coefficients = np.linalg.lstsq(x, y, rcond=None)[0]
        fit = (
            float(coefficients[0]),
            float(coefficients[1]),
            float(coefficients[2]),
            float(coefficients[3]),
        )
    return StepSummary(
        window_s=end_s - start_s, idle_s=end_s - start_s - busy_s, kinds=kinds, fit_s=fit
    )
