"""The size of a run's own ledger, weighed by predicted time (:mod:`kalypso.core.ledger_size`):
the cache's, or the calls' mean occupancy where that runs more calls at once and the
engine's steps are worth more than the prefill preempted calls compute again."""

from __future__ import annotations

import pytest

from kalypso.core.instance_window import InstanceWork
from kalypso.core.ledger_size import ledger_options, occupancy_factor
from kalypso.core.time_model import choose_by_time
from kalypso.engine.cost_model import CostModel, Work

# a call holds 10 blocks of 16 tokens (160 tokens), 50 of them its output: on average it
# holds 160 - 25 = 135 tokens, so a ledger of 160 / 135 times the cache fills it on average
WORK = InstanceWork(prefill_tokens=1000, decode_tokens=200, continued_tokens=0,
                    call_blocks=10, chain_tokens=50, calls=4)  # fmt: skip
GPU = CostModel(0.007, 33e-6, 5e-5, source="a GPU's ratios")
CPU = CostModel(0.068, 0.0058, 0.0034, source="2 CPU cores' ratios")


def test_the_occupancy_factor_is_a_call_over_its_mean_holding() -> None:
    assert occupancy_factor(WORK, 16) == pytest.approx(160 / 135)
    silent = InstanceWork(1000, 0, 0, 10, 0, calls=4)  # nothing generated: nothing grows
    assert occupancy_factor(silent, 16) == 1.0


def test_the_larger_ledger_runs_more_calls_and_recomputes_the_worst_case_share() -> None:
    """A cache of 100 blocks runs 10 calls of 10 blocks; 118 blocks run 11. At worst a
    share 1 - 135/160 of the 40 calls is preempted and computes its 135 tokens again."""
    (cache, exact), (factor, larger) = ledger_options(100, WORK, 10, 256, 16)
    assert cache == 1.0 and factor == pytest.approx(160 / 135)
    assert exact.work == Work(10000, 2000, 10, 50)
    assert larger.work == Work(10000 + 844, 2000, 11, 50)  # 40 x 0.15625 x 135 = 843.75
    assert larger.label == "the calls' mean occupancy: 118 blocks (1.19x the cache)"
    assert larger.note == "16% of the calls preempted and computed again at worst"


def test_a_gpu_takes_the_larger_ledger_and_a_cpu_the_cache() -> None:
    """On a GPU's ratios, 18 fewer steps (200 to 182, 7 ms each) outweigh 844 prefill
    tokens (33 us each); on 2 CPU cores' they do not (68 ms a step, 5.8 ms a token)."""
    options = [option for _, option in ledger_options(100, WORK, 10, 256, 16)]
    gpu = choose_by_time(options, GPU)
    assert gpu.predicted_s == pytest.approx((1.4 + 0.33 + 0.1, 1.274 + 10844 * 33e-6 + 0.1))
    assert gpu.chosen == 1
    cpu = choose_by_time(options, CPU)
    assert cpu.predicted_s == pytest.approx((13.6 + 58.0 + 6.8, 12.376 + 10844 * 0.0058 + 6.8))
    assert cpu.chosen == 0


def test_no_larger_ledger_is_weighed_where_the_engine_sequences_bind() -> None:
    """8 sequences: the cache already holds more calls than the engine runs."""
    options = ledger_options(100, WORK, 10, 8, 16)
    assert [(factor, option.work.concurrency) for factor, option in options] == [(1.0, 8)]


@pytest.mark.parametrize(
    ("capacity", "instances", "block"), [(0, 10, 16), (100, 0, 16), (100, 10, 0)]
)
def test_bad_sizes_are_refused(capacity: int, instances: int, block: int) -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        ledger_options(capacity, WORK, instances, 256, block)
