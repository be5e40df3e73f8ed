"""Where a run's engine time goes, from the step trace of
:mod:`kalypso.engine.vllm_step_trace`: steps by kind, their seconds and tokens, and a
least-squares cost per step.

A step is *prefill* when it scheduled only prompt tokens, *decode* when it scheduled only
generated ones, and *mixed* otherwise. A step's seconds run from the later of its
scheduling and the previous step's end to its own end (see the trace module), so the
steps' seconds and the engine's idle seconds add up to the window exactly.

``python -m bench.engine_steps TRACE [TRACE ...]`` fits one cost per step over the steps of
all the files together (runs of different policies make the fit's terms separable) and
prints, for each run, its steps' seconds split into the fit's parts: a fixed cost per
step, a cost per prefill token, per decode token and per attention pair. A file's runs are
the windows its :func:`runs_path` file lists (``bench.step_probe`` writes it; the steps
outside them, such as a warm-up's, are left out), or the whole file without one.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kalypso.engine.cost_fit import fit_nonnegative
from kalypso.engine.cost_model import CostModel

KINDS = ("prefill", "mixed", "decode")


def load_steps(path: Path) -> list[dict[str, float]]:
    """The steps of a trace file, one JSON object per line, in file order (gzipped when
    its name ends in ``.gz``)."""
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def runs_path(trace: Path) -> Path:
    """The file beside ``trace`` that lists its runs' windows: a JSON list of
    ``{"run": n, "start_s": ..., "end_s": ...}`` on the trace's clock."""
    return trace.with_name(trace.name + ".runs.json")


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
    attention_pairs: int = 0
    waiting_steps: int = 0
    """Steps after which vLLM still held requests waiting (no sequence slot or no blocks
    for them): work that could have joined the step but did not."""
    waiting_s: float = 0.0


@dataclass(frozen=True)
class StepCost:
    """A step's seconds as a linear cost: a fixed part, and parts per prefill token, per
    decode token and per attention pair (the query-key pairs of the trace module; their
    count grows with each token's distance from its prompt's start)."""

    step_s: float
    prefill_token_s: float
    decode_token_s: float
    attention_pair_s: float

    @classmethod
    def fit(cls, steps: Sequence[dict[str, float]], seconds: Sequence[float]) -> StepCost:
        """The least-squares cost of ``steps`` taking ``seconds`` each.

        Raises:
            ValueError: fewer than five steps, or the two lengths differ.
        """
        x, y = _design(steps, seconds)
        c = np.linalg.lstsq(x, y, rcond=None)[0]
        return cls(float(c[0]), float(c[1]), float(c[2]), float(c[3]))

    @classmethod
    def fit_nonnegative(
        cls, steps: Sequence[dict[str, float]], seconds: Sequence[float]
    ) -> StepCost:
        """The least-squares cost with no negative part: a cost is never negative, and an
        unconstrained fit gives one when its terms move together (say decode tokens with
        steps, on workloads that decode one call at a time). With four parts every set of
        them held at zero is tried, which is the exact non-negative least squares.

        Raises:
            ValueError: as :meth:`fit`.
        """
        best = fit_nonnegative(*_design(steps, seconds))
        return cls(float(best[0]), float(best[1]), float(best[2]), float(best[3]))

    @classmethod
    def of_model(cls, model: CostModel) -> StepCost:
        """An engine's own cost model as a step cost: its step, prefill token and decoding
        sequence (a decode token) parts, no attention part (the simulator prices none)."""
        return cls(model.step_s, model.prefill_token_s, model.decode_seq_s, 0.0)

    def parts_s(self, steps: Sequence[dict[str, float]]) -> dict[str, float]:
        """The seconds this cost gives ``steps``, by part: ``steps``, ``prefill tokens``,
        ``decode tokens`` and ``attention``."""
        return {
            "steps": self.step_s * len(steps),
            "prefill tokens": self.prefill_token_s * sum(s["prefill_tokens"] for s in steps),
            "decode tokens": self.decode_token_s * sum(s["decode_tokens"] for s in steps),
            "attention": self.attention_pair_s * sum(s["attention_pairs"] for s in steps),
        }

    def explain(self) -> str:
        """One line: the cost's four terms."""
        return (
            f"{self.step_s * 1e3:.0f} ms a step + {self.prefill_token_s * 1e3:.2f} ms a"
            f" prefill token + {self.decode_token_s * 1e3:.2f} ms a decode token +"
            f" {self.attention_pair_s * 1e6:.2f} s per million attention pairs"
        )


def _design(
    steps: Sequence[dict[str, float]], seconds: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """The fit's matrix (a column per part of :class:`StepCost`) and its seconds.

    Raises:
        ValueError: fewer than five steps, or the two lengths differ.
    """
    if len(steps) != len(seconds):
        raise ValueError(f"{len(steps)} steps but {len(seconds)} durations")
    if len(steps) < 5:
        raise ValueError(f"a fit needs at least five steps, got {len(steps)}")
    x = np.array(
        [[1.0, s["prefill_tokens"], s["decode_tokens"], s["attention_pairs"]] for s in steps]
    )
    return x, np.array(seconds, dtype=float)


@dataclass
class StepSummary:
    """The steps that ended inside one window, by kind, and the window's idle time."""

    window_s: float
    idle_s: float
    kinds: dict[str, KindTotals] = field(default_factory=dict)
    fit: StepCost | None = None
    """The window's steps' cost, by least squares (None under five steps)."""
    parts_s: dict[str, float] = field(default_factory=dict)
    """The window's steps' seconds by the fit's parts (empty without a fit)."""

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
                f" {t.requests / t.steps:.1f} requests,"
                f" {t.attention_pairs / 1e6:,.1f}M attention pairs{rate};"
                f" {t.waiting_steps} steps ({t.waiting_s:.1f} s) with requests waiting"
            )
        if self.fit is not None:
            lines.append(f"  fit: {self.fit.explain()}")
            lines.append(f"  by part: {_parts_line(self.parts_s)}")
        return "\n".join(lines)


def step_seconds(steps: Sequence[dict[str, float]]) -> list[float]:
    """Each step's engine seconds: its ``done_s`` minus the later of its ``scheduled_s``
    and the previous step's ``done_s``."""
    seconds, previous_done_s = [], float("-inf")
    for step in steps:
        seconds.append(step["done_s"] - max(step["scheduled_s"], previous_done_s))
        previous_done_s = step["done_s"]
    return seconds


def steps_in_window(
    steps: Sequence[dict[str, float]], start_s: float, end_s: float
) -> list[tuple[dict[str, float], float]]:
    """``(step, seconds)`` for the steps that ended within ``[start_s, end_s]``; a step that
    began before the window counts from its start.

    Raises:
        ValueError: the window ends before it starts.
    """
    if end_s < start_s:
        raise ValueError(f"the window ends ({end_s}) before it starts ({start_s})")
    return [
        (step, min(seconds, step["done_s"] - start_s))
        for step, seconds in zip(steps, step_seconds(steps), strict=True)
        if start_s <= step["done_s"] <= end_s
    ]


def summarise(steps: Sequence[dict[str, float]], start_s: float, end_s: float) -> StepSummary:
    """The steps that ended within ``[start_s, end_s]`` (``time.monotonic()`` seconds),
    by kind (a step that began before the window counts from its start); idle is the
    window minus their seconds.

    Raises:
        ValueError: the window ends before it starts.
    """
    inside = steps_in_window(steps, start_s, end_s)
    kinds = {kind: KindTotals() for kind in KINDS}
    for step, seconds in inside:
        totals = kinds[step_kind(step)]
        totals.steps += 1
        totals.seconds += seconds
        totals.prefill_tokens += int(step["prefill_tokens"])
        totals.decode_tokens += int(step["decode_tokens"])
        totals.requests += int(step["requests"])
        totals.attention_pairs += int(step["attention_pairs"])
        if step["waiting"]:
            totals.waiting_steps += 1
            totals.waiting_s += seconds
    busy_s = sum(seconds for _, seconds in inside)
    fit, parts = None, {}
    if len(inside) >= 5:
        fit = StepCost.fit([s for s, _ in inside], [seconds for _, seconds in inside])
        parts = fit.parts_s([s for s, _ in inside])
    return StepSummary(
        window_s=end_s - start_s,
        idle_s=end_s - start_s - busy_s,
        kinds=kinds,
        fit=fit,
        parts_s=parts,
    )


def _parts_line(parts_s: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in parts_s.items())


def load_runs(path: Path) -> dict[str, list[tuple[dict[str, float], float]]]:
    """``(step, seconds)`` of each run of the trace ``path``, by the run's name in its
    :func:`runs_path` file (the whole trace, named by its path, without one)."""
    steps = load_steps(path)
    windows = runs_path(path)
    if not windows.exists():
        return {str(path): list(zip(steps, step_seconds(steps), strict=True))}
    return {
        str(w["run"]): steps_in_window(steps, w["start_s"], w["end_s"])
        for w in json.loads(windows.read_text())
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", type=Path, help="step-trace files (JSON lines)")
    args = parser.parse_args(argv)
    runs = {}
    for path in args.traces:
        for name, run in load_runs(path).items():
            runs[name if name == str(path) else f"{path} run {name}"] = run
    pooled = [pair for run in runs.values() for pair in run]
    try:
        cost = StepCost.fit([step for step, _ in pooled], [seconds for _, seconds in pooled])
    except ValueError as error:
        raise SystemExit(f"cannot fit: {error}") from error
    residual_s = [seconds - sum(cost.parts_s([step]).values()) for step, seconds in pooled]
    print(f"fit over {len(pooled)} steps: {cost.explain()}")
    print(f"  residual per step: mean |e| {np.abs(residual_s).mean():.3f} s")
    for name, run in runs.items():
        parts = cost.parts_s([step for step, _ in run])
        print(
            f"{name}: {len(run)} steps, {sum(seconds for _, seconds in run):.1f} s measured,"
            f" {sum(parts.values()):.1f} s fitted: {_parts_line(parts)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
