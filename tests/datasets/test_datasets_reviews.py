"""The review demo: bundled files, labels consistent with the text, length and battery share."""

from __future__ import annotations

import re

import pandas as pd

from bench.datasets import _jsonl, reviews

BATTERY_WORDS = re.compile(r"batter|charg|power bank", re.IGNORECASE)


def test_bundled_files_equal_what_generate_writes() -> None:
    data = reviews.generate()
    for frame, name in ((data.reviews, reviews.REVIEWS_FILE), (data.aspects, reviews.ASPECTS_FILE)):
        path = _jsonl.DATA_DIR / name
        assert path.read_text(encoding="utf-8") == _jsonl.to_jsonl(frame), (
            f"{name} is stale: run `python -m bench.datasets.reviews --write`"
        )
    assert reviews.bundled_is_current()


def test_bundled_files_read_back_as_the_generated_frames() -> None:
    bundled, generated = reviews.load_bundled(), reviews.generate()
    pd.testing.assert_frame_equal(bundled.reviews, generated.reviews)
    pd.testing.assert_frame_equal(bundled.aspects, generated.aspects)


def test_columns_and_size() -> None:
    data = reviews.generate()
    assert tuple(data.reviews.columns) == reviews.REVIEW_COLUMNS
    assert tuple(data.aspects.columns) == reviews.ASPECT_COLUMNS
    assert len(data.reviews) == reviews.DEFAULT_N
    assert 6 <= len(data.aspects) <= 8
    assert data.reviews["review_id"].tolist() == list(range(reviews.DEFAULT_N))


def test_default_reviews_are_a_few_hundred_words() -> None:
    words = reviews.generate().reviews["text"].str.split().str.len()
    assert words.min() >= 200 and words.max() <= 450
    assert abs(words.mean() - 320) <= 0.25 * 320


def test_length_target_is_met_on_average() -> None:
    words = reviews.generate(200, seed=5, target_words=500).reviews["text"].str.split().str.len()
    assert abs(words.mean() - 500) <= 0.25 * 500


def test_battery_fraction_is_exact_and_matches_the_text() -> None:
    frame = reviews.generate(400, seed=1, battery_fraction=0.3).reviews
    assert frame["mentions_battery"].sum() == 120
    for text, mentions in zip(frame["text"], frame["mentions_battery"], strict=True):
        assert bool(BATTERY_WORDS.search(text)) == mentions


def test_aspect_ids_are_consistent_with_labels() -> None:
    data = reviews.generate(300, seed=2)
    known = set(data.aspects["aspect_id"])
    for row in data.reviews.itertuples():
        assert set(row.aspect_ids) <= known
        assert ("A8" in row.aspect_ids) == (row.sentiment == "positive")
        battery_ids = {"A1", "A2"} & set(row.aspect_ids)
        assert bool(battery_ids) == row.mentions_battery
        assert row.rating in {"positive": (4, 5), "negative": (1, 2), "mixed": (3,)}[row.sentiment]


def test_products_and_sentiments_vary() -> None:
    frame = reviews.generate().reviews
    assert frame["category"].nunique() >= 5
    assert set(frame["sentiment"]) == set(reviews.SENTIMENTS)


def test_main_check_reports_up_to_date() -> None:
    assert reviews.main(["--check"]) == 0
