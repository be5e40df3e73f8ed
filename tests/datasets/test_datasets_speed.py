"""Generating 1,000 long documents is not pathologically slow: under 30 s of this
process's CPU time per dataset (CPU time, so other processes' load does not count; the
generators take a few seconds on the development machine, so the bound is loose on
purpose: speed is measured in benchmarks, not asserted in tests)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from bench.datasets import biodex, clinical_notes, contracts, fever, reviews

LIMIT_CPU_SECONDS = 30.0
LONG: dict[str, Callable[[], object]] = {
    "reviews": lambda: reviews.generate(1_000),
    "medec": lambda: clinical_notes.generate(1_000),
    "biodex": lambda: biodex.generate(1_000, target_words=2_015, n_terms=11_271),
    "contracts": lambda: contracts.generate(1_000, target_words=1_613),
    "fever": lambda: fever.generate(1_000, n_passages=20_000),
}


@pytest.mark.parametrize("name", LONG)
def test_thousand_long_documents_are_not_pathologically_slow(name: str) -> None:
    start = time.process_time()
    LONG[name]()
    assert time.process_time() - start < LIMIT_CPU_SECONDS
