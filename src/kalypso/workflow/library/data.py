"""Deterministic bundled inputs for the workflow library (seeded; the same in every run).

* ``filings(n)``: short financial filings in the style of TAT-QA (a table of figures in
  prose, a few sentences of context) with questions whose answers follow from the
  figures (MapRed, Debate, Reflect);
* ``review_chunks(n, chunks)``: the bundled product reviews (``kalypso.datasets``) in
  chunks, per product category (Iterative, Parallel);
* ``market_days(n, day)``: per stock and day, a fundamentals document (the same both
  days), a price summary, news items and a social-media digest (Trading).

Sizes in words are chosen so the CPU runs take 1-3 minutes on the bundled model.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

COMPANIES = (
    "Arden Logistics",
    "Brightwater Foods",
    "Cobalt Mining",
    "Delta Fibre",
    "Elmwood Health",
    "Falcon Aerospace",
    "Granite Insurance",
    "Harbor Energy",
    "Ivory Textiles",
    "Juniper Software",
    "Kestrel Motors",
    "Lumen Retail",
)
METRICS = ("revenue", "operating income", "net income", "cash from operations", "capital spending")
SECTORS = ("logistics", "food", "mining", "telecom", "health care", "aerospace")
FILLER = (
    "Management attributes the change to pricing, volume and the product mix.",
    "The company completed a restructuring of its regional operations during the year.",
    "Foreign exchange movements reduced reported figures by a small amount.",
    "The board approved a dividend in line with the prior year.",
    "Capital projects were delayed in the first half and resumed in the second.",
    "Input costs rose early in the year and eased in the fourth quarter.",
    "The segment results exclude corporate costs, which are reported separately.",
    "Working capital improved as receivables were collected more quickly.",
)


@dataclass(frozen=True)
class Filing:
    context: str
    questions: tuple[str, ...]
    answers: tuple[str, ...]


def filings(n: int, questions_per: int = 3, seed: int = 7, sentences: int = 10) -> list[Filing]:
    """``n`` filings, each with ``questions_per`` questions and their exact answers."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        company = COMPANIES[i % len(COMPANIES)]
        figures = {m: (rng.randint(80, 900), rng.randint(80, 900)) for m in METRICS}
        lines = [f"{company} ({SECTORS[i % len(SECTORS)]}) annual report, figures in millions."]
        for metric, (old, new) in figures.items():
            lines.append(f"The {metric} was {new} in 2023, compared with {old} in 2022.")
        lines.extend(rng.choice(FILLER) for _ in range(sentences))
        asked = rng.sample(METRICS, questions_per)
        questions = tuple(
            f"By how much did the {m} of {company} change from 2022 to 2023?" for m in asked
        )
        answers = tuple(str(figures[m][1] - figures[m][0]) for m in asked)
        out.append(Filing(" ".join(lines), questions, answers))
    return out


def review_chunks(n: int, chunks: int, reviews_per_chunk: int = 1) -> list[tuple[str, list[str]]]:
    """``n`` products (a category name each) with ``chunks`` chunks of review texts."""
    from kalypso.datasets.reviews import load_bundled

    reviews = load_bundled().reviews
    out = []
    categories = sorted(reviews["category"].unique())
    for i in range(n):
        category = categories[i % len(categories)]
        texts = list(reviews[reviews["category"] == category]["text"])
        rotated = texts[i:] + texts[:i]
        parts = [
            "\n\n".join(
                rotated[(c * reviews_per_chunk + j) % len(rotated)]
                for j in range(reviews_per_chunk)
            )
            for c in range(chunks)
        ]
        out.append((f"{category} #{i}", parts))
    return out


@dataclass(frozen=True)
class MarketDay:
    stock: str
    fundamentals: str
    prices: str
    news: tuple[str, ...]
    social: str


def market_days(n: int, day: int, news_items: int = 2, seed: int = 11) -> list[MarketDay]:
    """Per stock, the inputs of one trading day (fundamentals identical across days)."""
    out = []
    for i in range(n):
        stock = COMPANIES[i % len(COMPANIES)]
        base = random.Random(seed * 1000 + i)
        fundamentals = " ".join(
            [
                f"{stock} balance sheet: total assets {base.randint(2000, 9000)}, debt"
                f" {base.randint(300, 2000)}, equity {base.randint(800, 5000)} (millions).",
                f"Income statement: revenue {base.randint(900, 4000)}, margin"
                f" {base.randint(5, 30)} percent.",
            ]
            + [base.choice(FILLER) for _ in range(6)]
        )
        rng = random.Random(seed * 1000 + i * 10 + day)
        close = rng.randint(20, 200)
        prices = (
            f"{stock} closed at {close} on day {day}; the ten-day average is"
            f" {close + rng.randint(-9, 9)}; volume was {rng.randint(1, 9)} million shares."
        )
        news = tuple(
            f"News {k + 1} for {stock}, day {day}: "
            + " ".join(rng.choice(FILLER) for _ in range(3))
            for k in range(news_items)
        )
        social = f"Social media on {stock}, day {day}: " + " ".join(
            rng.choice(FILLER) for _ in range(3)
        )
        out.append(MarketDay(stock, fundamentals, prices, news, social))
    return out
