"""Fitting a :class:`~kalypso.engine.cost_model.CostModel` to observed engine steps, once
(a calibration) or as a run goes (:class:`OnlineCostFit`).

An observation is a window of steps: how many, the prompt tokens and decoding sequences
they computed, and their seconds (one step, from vLLM's iteration details; or several
steps between two scrapes of a server's metrics). The fit is the non-negative least
squares of::

    seconds = steps * step_s + prefill_tokens * prefill_token_s + decode_seqs * decode_seq_s

A cost is never negative, and an unconstrained fit gives one when the terms move together
(decode sequences with steps, when every step decodes the same batch); with three parts,
every set of them held at zero is tried, which is the exact non-negative solution.

Online, the prior model (a calibration, a profile or the user's) counts as
``prior_weight_steps`` steps spread over the regimes the engine runs, so a few unusual
steps move it little and a run's thousands of steps take over: a wrong calibration
corrects itself within a run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from kalypso.engine.cost_model import CostModel

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepSample:
    """``steps`` engine steps that computed ``prefill_tokens`` prompt tokens and
    ``decode_seqs`` sequence-steps of decoding in ``seconds``."""

    steps: int
    prefill_tokens: int
    decode_seqs: int
    seconds: float

    def __post_init__(self) -> None:
        if self.steps < 1 or min(self.prefill_tokens, self.decode_seqs) < 0:
            raise ValueError(f"a sample needs >= 1 step and no negative count: {self}")
        if not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise ValueError(f"a sample's seconds must be finite and >= 0: {self}")


def fit_nonnegative(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """The non-negative least-squares solution of ``x @ c = y`` (rows weighted by
    ``weights``), by trying every subset of free columns.

    Raises:
        ValueError: ``x`` and ``y`` disagree in rows, or there are none.
    """
    if x.ndim != 2 or y.shape != (x.shape[0],) or x.shape[0] == 0:
        raise ValueError(f"a fit needs rows: x {x.shape}, y {y.shape}")
    if weights is not None:
        root = np.sqrt(weights)
        x, y = x * root[:, None], y * root
    columns = x.shape[1]
    best, best_error = np.zeros(columns), float(np.sum(y**2))
    for mask in range(1, 2**columns):
        free = [i for i in range(columns) if mask >> i & 1]
        c = np.zeros(columns)
        c[free] = np.linalg.lstsq(x[:, free], y, rcond=None)[0]
        error = float(np.sum((x @ c - y) ** 2))
        if (c >= 0).all() and error < best_error:
            best, best_error = c, error
    return best


def _rows(samples: Sequence[StepSample]) -> tuple[np.ndarray, np.ndarray]:
    x = np.array([[s.steps, s.prefill_tokens, s.decode_seqs] for s in samples], dtype=float)
    return x, np.array([s.seconds for s in samples], dtype=float)


def _fit_windows(
    x: np.ndarray, y: np.ndarray, counts: np.ndarray | None = None, scale: CostModel | None = None
) -> np.ndarray:
    """The fit of rows that each sum ``x[:, 0]`` steps: a window of ``n`` steps counts as
    ``n`` steps (its mean step at weight ``n``; ``counts`` overrides the weight), not as
    one row ``n`` times as large, which least squares would weigh ``n**2``. With
    ``scale``, errors are relative to what that model predicts for the row's mean step:
    timings err in proportion, and in seconds the long prefill steps would decide every
    cost (the same scale for every source of rows, so the prior and the observations
    are compared alike)."""
    counts = x[:, 0] if counts is None else counts
    weights = counts / x[:, 0] ** 2
    if scale is not None:
        mean = x / x[:, [0]]
        predicted = (
            scale.step_s + mean[:, 1] * scale.prefill_token_s + mean[:, 2] * scale.decode_seq_s
        )
        weights = weights / np.maximum(predicted, 1e-12) ** 2
    return fit_nonnegative(x, y, weights=weights)


def fit_cost_model(samples: Sequence[StepSample], prior: CostModel, source: str) -> CostModel:
    """``prior`` with its three costs fitted to ``samples`` (its limits kept); ``prior``
    itself when the fit prices nothing.

    Raises:
        ValueError: no samples.
    """
    if not samples:
        raise ValueError("a fit needs at least one sample")
    return _with_costs(prior, _fit_windows(*_rows(samples)), source)


def _with_costs(model: CostModel, costs: np.ndarray, source: str) -> CostModel:
    """``model`` with the fitted ``(step, prefill token, decode sequence)`` costs; itself
    when they price nothing."""
    if not costs.any():
        return model
    step_s, prefill_token_s, decode_seq_s = (float(v) for v in costs)
    return replace(
        model,
        step_s=step_s,
        prefill_token_s=prefill_token_s,
        decode_seq_s=decode_seq_s,
        source=source,
    )


class OnlineCostFit:
    """A cost model refitted from the steps an engine reports (see the module docstring).

    Args:
        prior: the model before any step is seen.
        prior_weight_steps: how many observed steps the prior is worth.
        refit_every: samples between refits (a refit solves a 3x3 problem 7 times).
    """

    def __init__(
        self, prior: CostModel, *, prior_weight_steps: int = 256, refit_every: int = 64
    ) -> None:
        if prior_weight_steps < 1 or refit_every < 1:
            raise ValueError("prior_weight_steps and refit_every must be >= 1")
        self.prior = prior
        self._model = prior
        self._prior_rows = _prior_samples(prior, prior_weight_steps)
        self._prior_weight_steps = prior_weight_steps
        self._x_rows: list[np.ndarray] = []
        self._y: list[float] = []
        self._pending = 0
        self._refit_every = refit_every
        self.samples = 0
        self.steps = 0

    @property
    def model(self) -> CostModel:
        """The model as of the last refit."""
        return self._model

    def observe(self, sample: StepSample) -> None:
        """Add a sample; refit every ``refit_every`` samples."""
        self._x_rows.append(np.array([sample.steps, sample.prefill_tokens, sample.decode_seqs]))
        self._y.append(sample.seconds)
        self.samples += 1
        self.steps += sample.steps
        self._pending += 1
        if self._pending >= self._refit_every:
            self.refit()

    def refit(self) -> CostModel:
        """Refit now from the prior and every sample so far."""
        self._pending = 0
        if not self._y:
            return self._model
        observed = np.array(self._x_rows, dtype=float)
        x = np.vstack([self._prior_rows[0], observed])
        y = np.concatenate([self._prior_rows[1], np.array(self._y, dtype=float)])
        # the prior fades as steps are observed: worth prior_weight_steps at first, a
        # tenth of that once ten times as many steps have run
        fade = self._prior_weight_steps / (self._prior_weight_steps + self.steps)
        counts = np.concatenate([self._prior_rows[0][:, 0] * fade, observed[:, 0]])
        source = f"{self.prior.source}, refitted over {self.steps:,} observed steps"
        costs = _fit_windows(x, y, counts, scale=self.prior)
        self._model = _with_costs(self.prior, costs, source)
        logger.debug("cost model refitted: %s", self._model.explain())
        return self._model


def _prior_samples(prior: CostModel, weight_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The prior as ``weight_steps`` steps in three regimes (a full prefill step, a full
    decode step, a lone decode step), so that each of its costs is pinned down."""
    budget = prior.max_step_tokens or 2048
    seqs = prior.max_seqs or 64
    shapes = ((budget, 0), (0, seqs), (0, 1))
    share = max(1, weight_steps // len(shapes))
    x = np.array([[share, share * p, share * d] for p, d in shapes], dtype=float)
    y = np.array([share * prior.step_time_s(p, d) for p, d in shapes])
    return x, y
