"""Choosing between schedule options by their predicted time on the engine.

The policies keep their algorithms (Algorithm 1's budgets, the cache-aware order, the
instance window); this is their objective function. Wherever a policy trades
concurrency for prefill (hold calls back so that a prefix stays cached, or let them run
and compute it again), it describes each option as the :class:`~kalypso.engine.cost_model.Work`
it asks of the engine and takes the one the engine's
:class:`~kalypso.engine.cost_model.CostModel` says is fastest.

A prediction is a bound, not a simulation: two options within ``tolerance`` of each other
are a tie, and a tie goes to the wider option (more calls at once), as does every choice
on an engine without a cost model. The narrower option must earn its place, except where
the wider option's cost is one the prediction leaves out (a choice made with
``ties_to="narrowest"``: a ledger beyond the cache beside conversations,
:mod:`kalypso.core.ledger_size`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kalypso.engine.cost_model import CostModel, Work

TOLERANCE = 0.02
"""Predicted times this close (relative to the fastest) are a tie, won by the wider."""


@dataclass(frozen=True)
class Option:
    """One way to run the work: a label, the work it asks of the engine, a note."""

    label: str
    work: Work
    note: str = ""


@dataclass(frozen=True)
class TimedChoice:
    """The options a policy weighed, narrowest first, their predicted seconds (None
    without a cost model) and the one it took."""

    options: tuple[Option, ...]
    predicted_s: tuple[float, ...] | None
    chosen: int
    model: CostModel | None
    ties_to: Literal["widest", "narrowest"] = "widest"

    @property
    def option(self) -> Option:
        return self.options[self.chosen]

    def explain(self) -> list[str]:
        """The model, then a line per option with its prediction, the chosen one marked."""
        if self.model is None:
            head = f"no cost model for this engine: the {self.ties_to} option"
        else:
            head = f"by predicted time on {self.model.explain()}"
            if self.ties_to == "narrowest":
                head += "; a tie goes to the narrowest"
        lines = [head]
        for index, option in enumerate(self.options):
            mark = "->" if index == self.chosen else "  "
            time = "" if self.predicted_s is None else f"{self.predicted_s[index]:.2f} s: "
            work = option.work
            lines.append(
                f"{mark} {option.label}: {time}{work.prefill_tokens:,} prefill and"
                f" {work.decode_tokens:,} decode tokens, {work.concurrency} calls at once"
                + (f" ({option.note})" if option.note else "")
            )
        return lines


def choose_by_time(
    options: Sequence[Option],
    model: CostModel | None,
    tolerance: float = TOLERANCE,
    ties_to: Literal["widest", "narrowest"] = "widest",
) -> TimedChoice:
    """The fastest of ``options`` (ordered narrowest first) under ``model``; within
    ``tolerance`` of the fastest, the widest (or the narrowest, with ``ties_to``);
    without a model, the same.

    Raises:
        ValueError: no options, or a negative tolerance.
    """
    if not options:
        raise ValueError("a choice needs at least one option")
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    pick = max if ties_to == "widest" else min
    if model is None:
        return TimedChoice(tuple(options), None, pick(range(len(options))), None, ties_to)
    predicted = tuple(model.predict_s(o.work) for o in options)
    fastest = min(predicted)
    chosen = pick(i for i, t in enumerate(predicted) if t <= fastest * (1 + tolerance))
    return TimedChoice(tuple(options), predicted, chosen, model, ties_to)
