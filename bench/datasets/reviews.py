"""Product reviews: the generator of the demo's bundled tables (bench.datasets.reviews).

Each review (laptops, phones, headsets, tablets, smartwatches, speakers, e-readers)
discusses a few aspects (battery life, screen, sound, price, customer support, build
quality, ...) with a positive or negative polarity and ends with a verdict that matches
its overall sentiment. A small table of aspect statements ("The reviewer complains about
battery life.") is the right side of a ``sem_join``; each review lists the ids of the
statements that hold for it (``aspect_ids``), so join results can be scored exactly.

The default-seed dataset is bundled in the package as
``src/kalypso/datasets/data/reviews.jsonl`` and ``reviews_aspects.jsonl``; regenerate them with
``python -m bench.datasets.reviews --write`` (a test checks they match :func:`generate`).
This dataset is not a workload of the paper.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pandas as pd

from bench.datasets import _review_phrases as P
from bench.datasets._jsonl import to_jsonl, write_jsonl
from bench.datasets._sizes import REVIEWS_DEFAULT_N
from bench.datasets._text import (
    Section,
    bernoulli_count,
    grow_to,
    jittered,
    join_sections,
    render,
    template_filler,
    word_count,
)
from kalypso.datasets.reviews import (
    ASPECT_COLUMNS,
    ASPECTS,
    ASPECTS_FILE,
    DATA_DIR,
    REVIEW_COLUMNS,
    REVIEWS_FILE,
    SENTIMENTS,
    ReviewsData,
    load_bundled,
)

DEFAULT_N: Final = REVIEWS_DEFAULT_N

__all__ = [
    "ASPECTS",
    "ASPECT_COLUMNS",
    "DEFAULT_N",
    "REVIEW_COLUMNS",
    "SENTIMENTS",
    "ReviewsData",
    "aspects_table",
    "bundled_is_current",
    "generate",
    "load_bundled",
    "main",
    "write_bundled",
]


def aspects_table() -> pd.DataFrame:
    """The fixed aspect statements (same for every seed)."""
    return pd.DataFrame([(a[0], a[3]) for a in ASPECTS], columns=list(ASPECT_COLUMNS))


def _product_name(rng: random.Random, category: str) -> str:
    line = rng.choice(P.PRODUCT_LINES[category])
    return f"{rng.choice(P.BRANDS)} {line} {rng.choice(P.MODEL_NUMBERS)}"


def _polarities(rng: random.Random, sentiment: str, k: int) -> list[str]:
    """Aspect polarities for a review of ``k`` aspects with overall ``sentiment``."""
    if sentiment == "mixed":
        pos = rng.randint(1, k - 1)
        labels = ["pos"] * pos + ["neg"] * (k - pos)
        rng.shuffle(labels)
        return labels
    main, other = ("pos", "neg") if sentiment == "positive" else ("neg", "pos")
    labels = [main] * k
    if k >= 3 and rng.random() < 0.3:
        labels[rng.randrange(k)] = other
    return labels


def _article(category: str) -> str:
    if category == "headset":
        return "a headset"
    return ("an " if category[0] in "aeiou" else "a ") + category


def _review(
    rng: random.Random,
    *,
    battery: bool,
    target_words: int,
    length_spread: float,
    sentiment_weights: Sequence[float],
    aspects_per_review: tuple[int, int],
) -> dict[str, object]:
    category = rng.choice(sorted(P.CATEGORIES))
    product = _product_name(rng, category)
    sentiment = rng.choices(SENTIMENTS, sentiment_weights)[0]
    low, high = aspects_per_review
    others = [t for t in P.CATEGORIES[category] if t != "battery"]
    k = rng.randint(max(low, 2), high)
    topics = rng.sample(others, k - 1 if battery else k)
    if battery:
        topics.insert(rng.randrange(len(topics) + 1), "battery")
    polarities = _polarities(rng, sentiment, len(topics))

    pools = {
        **P.SLOTS,
        "good_span": P.BATTERY_GOOD[category],
        "bad_span": P.BATTERY_BAD[category],
        "usage": P.USAGE[category],
    }
    fixed = {"product": product, "device": category, "a_device": _article(category)}
    neutral = template_filler(rng, P.NEUTRAL, pools, fixed)
    intro = Section(None, [render(rng.choice(P.INTRO), rng, pools, **fixed)], neutral, 0.5)
    body = []
    for topic, polarity in zip(topics, polarities, strict=True):
        templates = P.ASPECT_TEMPLATES[(topic, polarity)]
        first = rng.choice(templates)
        filler = template_filler(rng, templates, pools, fixed, exclude=(first,))
        body.append(Section(None, [render(first, rng, pools, **fixed)], filler, 2.0))
    # A paragraph of everyday-use remarks somewhere among the aspect paragraphs.
    body.insert(rng.randint(1, len(body)), Section(None, [], neutral, 0.8))
    verdict = render(rng.choice(P.CONCLUSION[sentiment]), rng, pools, **fixed)
    sections = [intro, *body, Section(None, [verdict])]
    grow_to(sections, jittered(rng, target_words, length_spread), rng)

    gold = {(t, p) for t, p in zip(topics, polarities, strict=True)}
    if sentiment == "positive":
        gold.add(("verdict", "pos"))
    rating = {"positive": rng.choice((4, 5)), "negative": rng.choice((1, 2)), "mixed": 3}
    return {
        "product": product,
        "category": category,
        "text": join_sections(sections),
        "mentions_battery": battery,
        "sentiment": sentiment,
        "rating": rating[sentiment],
        "aspect_ids": [a[0] for a in ASPECTS if (a[1], a[2]) in gold],
    }


def generate(
    n: int = DEFAULT_N,
    seed: int = 0,
    *,
    target_words: int = 320,
    length_spread: float = 0.2,
    battery_fraction: float = 0.5,
    sentiment_weights: tuple[float, float, float] = (0.45, 0.35, 0.2),
    aspects_per_review: tuple[int, int] = (2, 4),
) -> ReviewsData:
    """Generate ``n`` product reviews and the aspect table; deterministic in ``seed``.

    Args:
        n: number of reviews.
        seed: seed of the private :class:`random.Random`; same seed, same tables.
        target_words: mean review length in words (about 1.33 tokens per word).
        length_spread: each review's target is drawn uniformly from
            ``target_words * (1 ± length_spread)``.
        battery_fraction: fraction of reviews that discuss the battery
            (``mentions_battery``); exactly ``round(n * battery_fraction)`` of them do.
        sentiment_weights: relative weights of positive, negative and mixed reviews.
        aspects_per_review: inclusive ``(min, max)`` number of aspects a review discusses
            (the battery counts as one); the minimum is raised to 2.

    Returns:
        :class:`ReviewsData` with ``review_id`` running from 0 to ``n - 1``.
    """
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    rng = random.Random(seed)
    flags = bernoulli_count(rng, n, battery_fraction)
    rows = []
    for review_id, battery in enumerate(flags):
        row = _review(
            rng,
            battery=battery,
            target_words=target_words,
            length_spread=length_spread,
            sentiment_weights=sentiment_weights,
            aspects_per_review=aspects_per_review,
        )
        rows.append({"review_id": review_id, **row})
    reviews = pd.DataFrame(rows, columns=list(REVIEW_COLUMNS))
    return ReviewsData(reviews=reviews, aspects=aspects_table())


def write_bundled(data_dir: Path = DATA_DIR) -> list[Path]:
    """(Re)write the bundled files from ``generate()``; returns the paths written."""
    data = generate()
    paths = [data_dir / REVIEWS_FILE, data_dir / ASPECTS_FILE]
    write_jsonl(data.reviews, paths[0])
    write_jsonl(data.aspects, paths[1])
    return paths


def bundled_is_current(data_dir: Path = DATA_DIR) -> bool:
    """True when the bundled files equal, byte for byte, what ``generate()`` writes."""
    data = generate()
    expected = {REVIEWS_FILE: to_jsonl(data.reviews), ASPECTS_FILE: to_jsonl(data.aspects)}
    for name, text in expected.items():
        path = data_dir / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.datasets.reviews [--write | --check]``.

    ``--write`` regenerates the bundled files; ``--check`` exits 1 if they are stale;
    without a flag, prints a summary of the default dataset.
    """
    parser = argparse.ArgumentParser(prog="python -m bench.datasets.reviews")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="regenerate the bundled files")
    group.add_argument("--check", action="store_true", help="fail if bundled files are stale")
    args = parser.parse_args(argv)
    if args.write:
        for path in write_bundled():
            print(f"wrote {path}")
        return 0
    if args.check:
        current = bundled_is_current()
        print("bundled reviews are up to date" if current else "bundled reviews are stale")
        return 0 if current else 1
    reviews = generate().reviews
    words = [word_count(text) for text in reviews["text"]]
    print(
        f"{len(reviews)} reviews, {sum(words) / max(1, len(words)):.0f} words on average "
        f"({min(words, default=0)}-{max(words, default=0)}), "
        f"{reviews['mentions_battery'].mean():.0%} mention the battery"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
