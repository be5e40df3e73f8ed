"""The registry: names, scales, table names and the sizes of each scale."""

from __future__ import annotations

import pandas as pd
import pytest

from bench import datasets

NAMES = ("reviews", "fever", "medec", "biodex", "contractnli")


def test_list_datasets_names_every_dataset_with_a_one_line_description() -> None:
    listed = datasets.list_datasets()
    assert tuple(listed) == NAMES
    for description in listed.values():
        assert description and "\n" not in description


@pytest.mark.parametrize("name", NAMES)
def test_quick_load_returns_the_declared_tables(name: str) -> None:
    tables = datasets.load(name)
    assert tuple(tables) == datasets.info(name).tables
    for frame in tables.values():
        assert isinstance(frame, pd.DataFrame)
        assert len(frame) > 0


@pytest.mark.parametrize(
    ("name", "table", "rows"),
    [
        ("reviews", "reviews", 60),
        ("reviews", "aspects", 8),
        ("fever", "claims", 30),
        ("medec", "notes", 40),
        ("biodex", "articles", 12),
        ("contractnli", "contracts", 14),
        ("contractnli", "hypotheses", 17),
    ],
)
def test_quick_sizes(name: str, table: str, rows: int) -> None:
    assert len(datasets.load(name)[table]) == rows


def test_paper_sizes_follow_table_2() -> None:
    assert datasets.info("fever").paper["n"] == 1_000
    assert datasets.info("medec").paper["n"] == 1_000
    assert datasets.info("biodex").paper["n"] == 500
    assert datasets.info("biodex").paper["n_terms"] == 11_271
    assert datasets.info("contractnli").paper["n"] == 607
    # 397.1, 2,680.1 and 2,145.3 tokens at 1.33 tokens per word
    assert datasets.info("medec").paper["target_words"] == 299
    assert datasets.info("biodex").paper["target_words"] == 2_015
    assert datasets.info("contractnli").paper["target_words"] == 1_613


def test_paper_scale_loads_at_full_size() -> None:
    tables = datasets.load("contractnli", "paper")
    assert len(tables["contracts"]) == 607
    assert tables["contracts"]["is_nda"].all()


def test_aliases_resolve_to_the_same_dataset() -> None:
    assert datasets.info("contracts").name == "contractnli"
    assert datasets.info("clinical_notes").name == "medec"


def test_unknown_name_and_scale_are_rejected() -> None:
    with pytest.raises(KeyError, match="known"):
        datasets.load("imdb")
    with pytest.raises(ValueError, match="scale"):
        datasets.load("reviews", scale="huge")  # type: ignore[arg-type]


def test_load_is_deterministic_and_seeded() -> None:
    first = datasets.load("medec", seed=3)["notes"]
    pd.testing.assert_frame_equal(first, datasets.load("medec", seed=3)["notes"])
    assert not first.equals(datasets.load("medec", seed=4)["notes"])
