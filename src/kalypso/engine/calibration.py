"""Measuring an engine's :class:`~kalypso.engine.cost_model.CostModel`, and keeping what
was measured on disk.

Two series of requests, on an empty prefix cache, pin the three costs down:

* **prefill**: single prompts of several lengths with ``max_tokens=1``: one step each,
  ``step_s + n * prefill_token_s`` (the prompt fits the step's token budget);
* **decode**: ``B`` short prompts sent together, each generating ``m`` tokens
  (``ignore_eos``). Two lengths ``m`` cancel the prefill: their difference is
  ``dm`` steps of ``step_s + B * decode_seq_s``. Two batches ``B`` separate the step's
  fixed part from the per-sequence part, which single requests cannot: that split says
  whether batching pays.

Every measurement becomes a :class:`~kalypso.engine.cost_fit.StepSample` and the three
costs are their non-negative least squares. :data:`QUICK` runs when an engine starts
(a few seconds on a GPU; about ten in float32 on 2 CPU cores); :data:`FULL` measures a
simulator profile (``kalypso engine calibrate --full``).

The engine is left as it was found: every prompt is new (ids no text produces), nothing
is pinned, every request has finished, and the prefix cache is reset afterwards (a server
without admin endpoints cannot reset it: the calibration's blocks then stay cached, free
for eviction, and its new prompts measure the same).

:class:`CalibrationCache` keeps a model per engine *key* (model, dtype, block size,
batch limits, host, vLLM version) under the user's cache folder, so an engine is measured
once per host, not at every start.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kalypso.engine.batch import generate_all
from kalypso.engine.cost_fit import StepSample, fit_cost_model
from kalypso.engine.cost_model import CostModel
from kalypso.engine.protocol import Engine, GenerateRequest, UnsupportedFeatureError
from kalypso.models import cache_dir

logger = logging.getLogger(__name__)

VOCAB_OFFSET = 1000
"""Calibration prompts use token ids from here on, in an order no text produces."""


@dataclass(frozen=True)
class CalibrationPlan:
    """The requests a calibration sends (see the module docstring)."""

    prefill_lengths_tokens: tuple[int, ...]
    decode_lengths_tokens: tuple[int, int]
    decode_batches: tuple[int, ...]
    decode_prompt_tokens: int
    repeats: int

    def __post_init__(self) -> None:
        short, long = self.decode_lengths_tokens
        if len(set(self.prefill_lengths_tokens)) < 2 or len(set(self.decode_batches)) < 2:
            raise ValueError("a calibration needs two prefill lengths and two decode batches")
        if not 1 <= short < long or self.repeats < 1 or self.decode_prompt_tokens < 1:
            raise ValueError(f"bad calibration plan: {self}")


QUICK = CalibrationPlan(
    prefill_lengths_tokens=(128, 512),
    decode_lengths_tokens=(4, 20),
    decode_batches=(1, 8),
    decode_prompt_tokens=16,
    repeats=1,
)
"""At an engine's start: 2 prefills and 4 decode batches."""
FULL = CalibrationPlan(
    prefill_lengths_tokens=(128, 384, 768, 1152, 1536),
    decode_lengths_tokens=(16, 64),
    decode_batches=(1, 2, 4, 8),
    decode_prompt_tokens=64,
    repeats=3,
)
"""For a simulator profile: 15 prefills and 24 decode batches."""


@dataclass(frozen=True)
class Calibration:
    """A measured model and the measurements behind it."""

    model: CostModel
    samples: tuple[StepSample, ...]
    seconds: float
    """Wall seconds the calibration took."""


def _prompt(start: int, length: int) -> tuple[int, ...]:
    return tuple(start + (i * 31) % 20000 for i in range(length))


def check_fits(plan: CalibrationPlan, engine: Engine) -> None:
    """Raise ValueError if ``engine`` cannot run ``plan`` (its longest prompt, its largest
    batch at once)."""
    capacity = engine.capacity
    longest = max(plan.prefill_lengths_tokens) + 1
    if longest > capacity.max_model_len_tokens or (
        capacity.blocks_for(longest) > capacity.num_blocks
    ):
        raise ValueError(f"the engine cannot hold a {longest}-token calibration prompt")
    batch = max(plan.decode_batches)
    sequence_tokens = plan.decode_prompt_tokens + plan.decode_lengths_tokens[1]
    if batch * capacity.blocks_for(sequence_tokens) > capacity.num_blocks:
        raise ValueError(
            f"the engine cannot hold a calibration batch of {batch} sequences of"
            f" {sequence_tokens} tokens"
        )
    seqs = capacity.max_running_requests
    if seqs is not None and seqs < batch:
        raise ValueError(f"the engine runs {seqs} sequences, the calibration batches up to {batch}")


async def calibrate(
    engine: Engine, plan: CalibrationPlan = QUICK, *, source: str = ""
) -> Calibration:
    """Measure ``engine`` by ``plan`` (see the module docstring); the model keeps the
    engine's batch limits where it knows them (``max_step_tokens`` stays unknown).

    Raises:
        ValueError: the engine cannot run the plan.
        EngineError: a request failed (the prefix cache is reset all the same).
    """
    check_fits(plan, engine)
    started = time.monotonic()
    ids = itertools.count()
    samples: list[StepSample] = []
    try:
        for length, repeat in itertools.product(plan.prefill_lengths_tokens, range(plan.repeats)):
            await _reset(engine)
            prompt = _prompt(VOCAB_OFFSET + 7 * next(ids), length)
            request = GenerateRequest(f"calibrate-prefill-{length}-{repeat}", prompt, 1)
            result = await engine.generate(request)
            samples.append(StepSample(1, length, 0, result.timings.total_s))
        short, long = plan.decode_lengths_tokens
        for batch, repeat in itertools.product(plan.decode_batches, range(plan.repeats)):
            took_s = {}
            for m in (short, long):
                await _reset(engine)
                requests = [
                    GenerateRequest(
                        f"calibrate-decode-{batch}-{m}-{repeat}-{i}",
                        _prompt(VOCAB_OFFSET + 7 * next(ids), plan.decode_prompt_tokens),
                        m,
                        ignore_eos=True,
                    )
                    for i in range(batch)
                ]
                results = await generate_all(engine, requests)
                took_s[m] = max(r.timings.total_s for r in results)
            steps = long - short
            seconds = max(0.0, took_s[long] - took_s[short])
            samples.append(StepSample(steps, 0, batch * steps, seconds))
    finally:
        await _reset(engine)
    capacity = engine.capacity
    prior = CostModel(1.0, 0.0, 0.0, max_seqs=capacity.max_running_requests)
    label = source or f"calibrated on {engine.name}, {time.strftime('%Y-%m-%d')}"
    model = fit_cost_model(samples, prior, label)
    took = time.monotonic() - started
    logger.info("calibrated %s in %.1f s: %s", engine.name, took, model.explain())
    return Calibration(model, tuple(samples), took)


async def _reset(engine: Engine) -> None:
    try:
        await engine.reset_prefix_cache()
    except UnsupportedFeatureError:
        logger.debug("%s cannot reset its prefix cache; calibrating on new prompts", engine.name)


class CalibrationCache:
    """Cost models measured before, one JSON file per engine key.

    Args:
        directory: where the files live (default ``<cache>/cost-models``, the cache of
            :func:`kalypso.models.cache_dir`).
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else cache_dir() / "cost-models"

    def path(self, key: Mapping[str, object]) -> Path:
        digest = hashlib.sha256(json.dumps(dict(key), sort_keys=True).encode()).hexdigest()
        return self.directory / f"{digest[:24]}.json"

    def load(self, key: Mapping[str, object]) -> CostModel | None:
        """The model stored for ``key``; None when there is none or it cannot be read."""
        path = self.path(key)
        try:
            record = json.loads(path.read_text())
            if record.get("key") != dict(key):
                return None
            return CostModel.from_json(json.dumps(record["model"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("ignoring the unreadable calibration %s: %s", path, exc)
            return None

    def store(self, key: Mapping[str, object], model: CostModel) -> Path:
        """Keep ``model`` for ``key`` (written whole to a file of this writer's own, then
        renamed: a reader never sees half a file, and engines calibrating the same key at
        once, replicas started side by side, each store whole; the last one stays)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"key": dict(key), "model": json.loads(model.to_json())}
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, prefix=path.stem, suffix=".tmp", delete=False
        ) as partial:
            written = Path(partial.name)
            try:
                partial.write(json.dumps(record, indent=1, sort_keys=True) + "\n")
            except BaseException:
                written.unlink(missing_ok=True)
                raise
        written.replace(path)
        return path


async def measured_cost_model(
    engine: Engine,
    key: Mapping[str, object],
    *,
    cache: CalibrationCache | None = None,
    plan: CalibrationPlan = QUICK,
) -> CostModel | None:
    """``engine``'s model from the cache under ``key``, else measured now and kept there;
    None (logged) when the engine cannot run the calibration.

    Raises:
        EngineError: a calibration request failed.
    """
    cache = cache if cache is not None else CalibrationCache()
    model = cache.load(key)
    if model is not None:
        logger.info("cost model of %s from %s: %s", engine.name, cache.path(key), model.explain())
        return model
    try:
        calibration = await calibrate(engine, plan)
    except ValueError as exc:
        logger.warning("%s has no cost model: %s", engine.name, exc)
        return None
    path = cache.store(key, calibration.model)
    logger.info("cost model of %s kept in %s", engine.name, path)
    return calibration.model
