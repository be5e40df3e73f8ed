"""The engine cost model: its step price, its least steps and predicted time, its fit
(once and online), exactly on made-up numbers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from kalypso.engine.cost_fit import OnlineCostFit, StepSample, fit_cost_model, fit_nonnegative
from kalypso.engine.cost_model import CostModel, Work
from kalypso.engine.sim import SimEngine, get_profile

GPU = CostModel(0.007, 1 / 32_000, 0.00005, max_step_tokens=2048, max_seqs=256, source="gpu")
CPU = CostModel(0.0683, 0.00579, 0.0034, max_step_tokens=2048, max_seqs=16, source="cpu")


def test_a_step_costs_its_fixed_part_plus_its_tokens() -> None:
    assert GPU.step_time_s(0, 1) == pytest.approx(0.00705)
    assert GPU.step_time_s(2048, 200) == pytest.approx(0.007 + 0.064 + 0.01)
    # what batching gives: on the GPU 256 sequences decode 91x faster together than one
    # by one, on 2 CPU cores 16 decode 9.3x faster
    assert GPU.batching_gain(256) == pytest.approx(256 * 0.00705 / (0.007 + 256 * 0.00005))
    assert round(GPU.batching_gain(256)) == 91 and round(CPU.batching_gain(16), 1) == 9.3


def test_least_steps_take_the_tightest_of_the_three_bounds() -> None:
    wide = Work(prefill_tokens=100_000, decode_tokens=51_200, concurrency=512)
    # decode: 51,200 tokens over 256 sequences (the engine's cap, below the work's 512)
    assert GPU.least_steps(wide) == 200 + 0 * 1
    narrow = Work(prefill_tokens=100_000, decode_tokens=51_200, concurrency=32)
    assert GPU.least_steps(narrow) == 1600
    budget = Work(prefill_tokens=1_000_000, decode_tokens=1_000, concurrency=256)
    assert GPU.least_steps(budget) == math.ceil(1_001_000 / 2048)
    chain = Work(prefill_tokens=0, decode_tokens=1_000, concurrency=256, chain_tokens=700)
    assert GPU.least_steps(chain) == 700
    assert GPU.least_steps(Work(0, 0, 1)) == 0


def test_predicted_time_prices_the_least_steps_and_the_tokens() -> None:
    narrow = Work(prefill_tokens=100_000, decode_tokens=51_200, concurrency=32)
    assert GPU.predict_s(narrow) == pytest.approx(1600 * 0.007 + 100_000 / 32_000 + 51_200 * 5e-5)
    # on the GPU a narrow batch costs more than the prefill a wide one recomputes ...
    wide_recomputing = Work(prefill_tokens=200_000, decode_tokens=51_200, concurrency=256)
    assert GPU.predict_s(wide_recomputing) < GPU.predict_s(narrow)
    # ... and on the CPU it does not
    assert CPU.predict_s(Work(100_000, 51_200, 16)) < CPU.predict_s(Work(200_000, 51_200, 16))


def test_bad_models_and_work_are_refused() -> None:
    with pytest.raises(ValueError, match="finite and >= 0"):
        CostModel(-1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        CostModel(math.nan, 0.0, 0.0)
    with pytest.raises(ValueError, match="every cost is 0"):
        CostModel(0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="max_seqs"):
        CostModel(1.0, 0.0, 0.0, max_seqs=0)
    with pytest.raises(ValueError, match="concurrency"):
        Work(1, 1, 0)
    with pytest.raises(ValueError, match="negative"):
        Work(-1, 1, 1)
    with pytest.raises(ValueError, match="not a cost model"):
        CostModel.from_json('{"step_s": 1}')


def test_json_round_trip_and_explain() -> None:
    assert CostModel.from_json(GPU.to_json()) == GPU
    assert GPU.explain() == (
        "7.00 ms a step + 0.050 ms a decoding sequence + 31.2 us a prefill token (32,000"
        " tokens/s); at most 2,048 tokens and 256 sequences a step; 256 sequences decode"
        " 91.2x faster together than one by one (gpu)"
    )


def test_the_simulator_prices_its_steps_by_its_model() -> None:
    engine = SimEngine("qwen3-8b-h100", max_num_seqs=64, max_num_batched_tokens=1024)
    model = engine.cost_model
    profile = get_profile("qwen3-8b-h100")
    assert (model.step_s, model.prefill_token_s, model.decode_seq_s) == (
        profile.per_step_s,
        profile.per_prefill_token_s,
        profile.per_decode_token_s,
    )
    assert (model.max_step_tokens, model.max_seqs, model.source) == (
        1024,
        64,
        "profile qwen3-8b-h100",
    )


def _steps(model: CostModel, count: int) -> list[StepSample]:
    shapes = itertools.cycle([(2048, 0), (0, 200), (512, 40), (0, 1), (1500, 8)])
    return [
        StepSample(1, p, d, model.step_time_s(p, d)) for p, d in itertools.islice(shapes, count)
    ]


def test_a_fit_recovers_the_costs_of_noise_free_steps() -> None:
    fitted = fit_cost_model(_steps(CPU, 10), GPU, "fitted")
    assert fitted.step_s == pytest.approx(CPU.step_s)
    assert fitted.prefill_token_s == pytest.approx(CPU.prefill_token_s)
    assert fitted.decode_seq_s == pytest.approx(CPU.decode_seq_s)
    assert (fitted.max_seqs, fitted.source) == (GPU.max_seqs, "fitted")  # the prior's limits


def test_the_nonnegative_fit_never_prices_a_part_below_zero() -> None:
    # steps that got faster with more sequences (noise): a free fit prices them below 0
    x = np.array([[1, 0, 0], [1, 0, 10], [1, 10, 0], [1, 10, 10]], dtype=float)
    y = np.array([1.0, 0.5, 1.5, 1.0])
    assert np.linalg.lstsq(x, y, rcond=None)[0][2] == pytest.approx(-0.05)
    fitted = fit_nonnegative(x, y)
    assert fitted[2] == 0 and (fitted >= 0).all()
    with pytest.raises(ValueError, match="rows"):
        fit_nonnegative(np.zeros((0, 3)), np.zeros(0))


def test_an_online_fit_corrects_a_wrong_calibration() -> None:
    wrong = CostModel(0.030, 0.0005, 0.01, max_step_tokens=2048, max_seqs=16, source="calibrated")
    online = OnlineCostFit(wrong, prior_weight_steps=256, refit_every=64)
    assert online.model == wrong
    for sample in _steps(CPU, 5000):
        online.observe(sample)
    model = online.model  # the prior was 2.3x to 12x off; the prior now weighs 12 steps
    assert model.step_s == pytest.approx(CPU.step_s, rel=0.05)
    assert model.prefill_token_s == pytest.approx(CPU.prefill_token_s, rel=0.05)
    assert model.decode_seq_s == pytest.approx(CPU.decode_seq_s, rel=0.1)
    assert model.source == "calibrated, refitted over 4,992 observed steps"
    assert (model.max_step_tokens, model.max_seqs) == (2048, 16)
    # a few odd steps move a well-seeded model little
    settled = OnlineCostFit(CPU, refit_every=1)
    settled.observe(StepSample(1, 0, 1, 5.0))
    assert settled.model.step_s < 2 * CPU.step_s


def test_bad_samples_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 1 step"):
        StepSample(0, 0, 0, 0.0)
    with pytest.raises(ValueError, match="finite"):
        StepSample(1, 0, 0, math.inf)
    with pytest.raises(ValueError, match="at least one sample"):
        fit_cost_model([], GPU, "x")
