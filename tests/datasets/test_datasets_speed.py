"""Generating 1,000 long documents takes less than 5 seconds per dataset."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from bench.datasets import biodex, clinical_notes, contracts, fever, reviews

LIMIT_SECONDS = 5.0
LONG: dict[str, Callable[[], object]] = {
    "reviews": lambda: reviews.generate(1_000),
    "medec": lambda: clinical_notes.generate(1_000),
    "biodex": lambda: biodex.generate(1_000, target_words=2_015, n_terms=11_271),
    "contracts": lambda: contracts.generate(1_000, target_words=1_613),
    "fever": lambda: fever.generate(1_000, n_passages=20_000),
}


@pytest.mark.parametrize("name", LONG)
def test_thousand_long_documents_in_under_five_seconds(name: str) -> None:
    start = time.perf_counter()
    LONG[name]()
    assert time.perf_counter() - start < LIMIT_SECONDS
