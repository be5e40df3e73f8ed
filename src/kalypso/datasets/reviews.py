"""Product reviews: the bundled tables of the README's main job and the workflow library.

Each review (laptops, phones, headsets, tablets, smartwatches, speakers, e-readers)
discusses a few aspects (battery life, screen, sound, price, customer support, build
quality, ...) with a positive or negative polarity and ends with a verdict that matches
its overall sentiment. A small table of aspect statements ("The reviewer complains about
battery life.") is the right side of a ``sem_join``; each review lists the ids of the
statements that hold for it (``aspect_ids``), so join results can be scored exactly.

The tables are bundled as ``data/reviews.jsonl`` and ``data/reviews_aspects.jsonl``.
They are written by the generator in the benchmark tree
(``python -m bench.datasets.reviews --write``; a test checks they equal what it
generates). This dataset is not a workload of the paper.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pandas as pd

DATA_DIR: Final = Path(__file__).with_name("data")
"""Folder of the bundled data files (shipped as package data)."""

REVIEW_COLUMNS: Final = (
    "review_id",
    "product",
    "category",
    "text",
    "mentions_battery",
    "sentiment",
    "rating",
    "aspect_ids",
)
ASPECT_COLUMNS: Final = ("aspect_id", "aspect")
SENTIMENTS: Final = ("positive", "negative", "mixed")
REVIEWS_FILE: Final = "reviews.jsonl"
ASPECTS_FILE: Final = "reviews_aspects.jsonl"

# aspect_id, topic, polarity, statement. Topic "verdict" is the review's recommendation.
ASPECTS: Final = (
    ("A1", "battery", "neg", "The reviewer complains about battery life."),
    ("A2", "battery", "pos", "The reviewer praises the battery life."),
    ("A3", "screen", "pos", "The reviewer praises the screen or display."),
    ("A4", "price", "neg", "The reviewer thinks the product is overpriced."),
    ("A5", "support", "neg", "The reviewer had a bad experience with customer support."),
    ("A6", "sound", "pos", "The reviewer praises the sound quality."),
    ("A7", "build", "neg", "The reviewer reports build-quality or durability problems."),
    ("A8", "verdict", "pos", "The reviewer recommends the product to others."),
)


@dataclass(frozen=True)
class ReviewsData:
    """The two tables of the demo.

    Attributes:
        reviews: one row per review; columns :data:`REVIEW_COLUMNS`. ``mentions_battery``
            is true exactly when the text discusses the battery; ``sentiment`` is one of
            :data:`SENTIMENTS`; ``rating`` is 1-5 stars consistent with it; ``aspect_ids``
            lists the ids of ``aspects`` rows that hold for the review.
        aspects: the statements to join against; columns :data:`ASPECT_COLUMNS`.
    """

    reviews: pd.DataFrame
    aspects: pd.DataFrame


def read_jsonl(path: Path) -> pd.DataFrame:
    """Read a JSON-lines table (one object per row, keys in column order).

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    columns = list(records[0]) if records else []
    return pd.DataFrame.from_records(records, columns=columns)


def load_bundled(data_dir: Path = DATA_DIR) -> ReviewsData:
    """Read the bundled tables (60 reviews and 8 aspect statements).

    Raises:
        FileNotFoundError: the bundled files are missing.
    """
    return ReviewsData(
        reviews=read_jsonl(data_dir / REVIEWS_FILE), aspects=read_jsonl(data_dir / ASPECTS_FILE)
    )
