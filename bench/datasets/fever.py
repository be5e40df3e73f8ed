"""FEVER-shaped fact checking: short claims and a corpus of encyclopedic passages.

The corpus describes a fictional world (people, cities, rivers, films, books, bands,
companies; see :mod:`bench.datasets._fever_world`), one Wikipedia-style paragraph per
entity, so a model cannot answer from memory and must use retrieval. Each claim states a
single fact about one entity; ``SUPPORTS`` claims state it correctly, ``REFUTES`` claims
swap in a wrong value of the same type (another city, another director, a different
year). ``gold_passage_ids`` lists the passages that decide the claim: the subject's
passage, plus the linked entity's passage for a supported relational claim (a film and its
director both state "directed by").

Paper workload (Table 2 and section 7.2 of the Kalypso paper): 1,000 claims of 11.8 tokens
on average, a 5,416,568-passage Wikipedia of 126.0 tokens per passage (about 95 words),
queried by ``sem_map`` (two search queries per claim) -> ``index_search`` (top 5) ->
``sem_filter`` (is the claim supported?). The bundled "paper" scale keeps the claim count,
claim and passage lengths, but uses a 50,000-passage corpus (see
:data:`PAPER_PASSAGES`): the full 5.4M would take hours and gigabytes to generate.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import pandas as pd

from bench.datasets import _fever_world as W
from bench.datasets._sizes import FEVER_PAPER_PASSAGES
from bench.datasets._text import bernoulli_count

CLAIM_COLUMNS: Final = ("claim_id", "claim", "label", "gold_passage_ids")
PASSAGE_COLUMNS: Final = ("passage_id", "title", "text")
LABELS: Final = ("SUPPORTS", "REFUTES")
PAPER_PASSAGES: Final = FEVER_PAPER_PASSAGES
"""Corpus size used for the "paper" scale instead of the paper's 5,416,568 passages."""


@dataclass(frozen=True)
class FEVERData:
    """The two tables of the workload.

    Attributes:
        claims: columns :data:`CLAIM_COLUMNS`; ``label`` is one of :data:`LABELS`;
            ``gold_passage_ids`` is a list of one or two ``passage_id`` values.
        corpus: columns :data:`PASSAGE_COLUMNS`; ``title`` is the entity name;
            ``passage_id`` runs from 0 in (shuffled) row order.
    """

    claims: pd.DataFrame
    corpus: pd.DataFrame


@dataclass(frozen=True)
class _Claim:
    text: str
    gold: list[int]


# A claim maker gets the subject, the world, the rng and whether to state the truth; it
# returns None when it cannot make that claim (no alternative value, ...).
_Maker = Callable[[W.Entity, list[W.Entity], random.Random, bool], "_Claim | None"]


def _other(
    world: list[W.Entity], rng: random.Random, kind: str, exclude: str, job: str | None = None
) -> W.Entity | None:
    """A random entity of ``kind`` (and occupation ``job``) not named ``exclude``."""
    for _ in range(50):
        cand = rng.choice(world)
        if (
            cand.kind == kind
            and cand.name != exclude
            and (job is None or cand.facts.get("occupation") == job)
        ):
            return cand
    return None


def _year(rng: random.Random, true: str) -> str:
    return str(int(true) + rng.choice((-1, 1)) * rng.randint(2, 15))


def _attr(templates: tuple[str, ...], key: str, alt: Callable[..., str | None]) -> _Maker:
    """A claim about attribute ``key`` stated in the subject's own passage."""

    def make(e: W.Entity, world: list[W.Entity], rng: random.Random, truth: bool) -> _Claim | None:
        value = e.facts[key] if truth else alt(e, world, rng)
        if value is None or value == e.facts[key]:
            return None
        return _Claim(rng.choice(templates).format(name=e.name, value=value), [e.eid])

    return make


def _link(
    templates: tuple[str, ...], relation: str, job: str | None, *, both: bool = True
) -> _Maker:
    """A claim about a functional link (director, author, founder, river, headquarters).

    A supported claim's gold passages are the subject's and, when ``both`` (the linked
    entity's passage also states the link), the linked entity's.
    """

    def make(e: W.Entity, world: list[W.Entity], rng: random.Random, truth: bool) -> _Claim | None:
        linked = world[e.links[relation]]
        if truth:
            text = rng.choice(templates).format(name=e.name, value=linked.name)
            return _Claim(text, [e.eid, linked.eid] if both else [e.eid])
        wrong = _other(world, rng, linked.kind, linked.name, job)
        if wrong is None:
            return None
        return _Claim(rng.choice(templates).format(name=e.name, value=wrong.name), [e.eid])

    return make


def _alt_year(key: str) -> Callable[[W.Entity, list[W.Entity], random.Random], str]:
    return lambda e, world, rng: _year(rng, e.facts[key])


def _alt_choice(key: str, values: tuple[str, ...]) -> Callable[..., str]:
    return lambda e, world, rng: rng.choice([v for v in values if v != e.facts[key]])


def _alt_city(e: W.Entity, world: list[W.Entity], rng: random.Random) -> str | None:
    other = _other(world, rng, "city", e.facts["birthplace"])
    return other.name if other else None


_ADJECTIVES: Final = tuple(adj for _, adj in W.COUNTRIES)
_COUNTRY_NAMES: Final = tuple(name for name, _ in W.COUNTRIES)

MAKERS: Final[dict[str, tuple[_Maker, ...]]] = {
    "person": (
        _attr(
            (
                "{name} was born in the town of {value}.",
                "{name} is a native of the town of {value}.",
                "{name} was born and raised in {value}.",
            ),
            "birthplace",
            _alt_city,
        ),
        _attr(
            ("{name} was born in the year {value}.", "{name} was born in {value}."),
            "born",
            _alt_year("born"),
        ),
        _attr(
            ("{name} is a person of {value} nationality.", "{name} holds {value} citizenship."),
            "nationality",
            _alt_choice("nationality", _ADJECTIVES),
        ),
    ),
    "film": (
        _link(
            ("{name} is a film directed by {value}.", "{value} directed the film {name}."),
            "director",
            "film director",
        ),
        _attr(
            ("The film {name} was released in {value}.", "{name} came out in cinemas in {value}."),
            "year",
            _alt_year("year"),
        ),
        _attr(
            ("{name} is a {value} film.", "The film {name} belongs to the {value} genre."),
            "genre",
            _alt_choice("genre", W.FILM_GENRES),
        ),
    ),
    "book": (
        _link(
            ("{name} was written by {value}.", "{value} is the author of {name}."),
            "author",
            "writer",
        ),
        _attr(("{name} was first published in {value}.",), "year", _alt_year("year")),
    ),
    "city": (
        _attr(
            (
                "{name} is located in the country of {value}.",
                "{name} is a town situated in {value}.",
            ),
            "country",
            _alt_choice("country", _COUNTRY_NAMES),
        ),
        _link(("{name} lies on the banks of the {value}.",), "river", None),
        _attr(("The town of {name} was founded in {value}.",), "founded", _alt_year("founded")),
    ),
    "river": (
        _attr(
            ("The {name} eventually flows into the {value}.",), "sea", _alt_choice("sea", W.SEAS)
        ),
        _attr(
            ("The {name} is a river in {value}.",),
            "country",
            _alt_choice("country", _COUNTRY_NAMES),
        ),
    ),
    "band": (
        _link(("The band {name} was founded by {value}.",), "founder", "musician"),
        _attr(("The band {name} was formed in {value}.",), "year", _alt_year("year")),
    ),
    "company": (
        _link(
            ("The company {name} was founded by {value}.", "{value} founded the company {name}."),
            "founder",
            "entrepreneur",
        ),
        _link(("The company {name} is headquartered in {value}.",), "city", None, both=False),
        _attr(("The company {name} was founded in {value}.",), "year", _alt_year("year")),
    ),
}


def generate(
    n: int = 30,
    seed: int = 0,
    *,
    n_passages: int | None = None,
    passage_words: int = 95,
    length_spread: float = 0.2,
    supports_fraction: float = 0.5,
) -> FEVERData:
    """Generate ``n`` claims and a corpus of passages; deterministic in ``seed``.

    Args:
        n: number of claims.
        seed: seed of the private :class:`random.Random`; same seed, same tables.
        n_passages: corpus size (one passage per entity); defaults to
            ``max(200, 20 * n)``. Must be at least ``n`` and at least 40.
        passage_words: mean passage length in words (the paper's 126.0 tokens per
            Wikipedia passage is about 95 words).
        length_spread: each passage's target is drawn from
            ``passage_words * (1 ± spread)``; people with many works run longer.
        supports_fraction: fraction of ``SUPPORTS`` claims; exactly
            ``round(n * supports_fraction)`` are.

    Returns:
        :class:`FEVERData`. Claims have distinct subjects.

    Raises:
        ValueError: ``n_passages`` is smaller than ``max(n, 40)``.
    """
    size = max(200, 20 * n) if n_passages is None else n_passages
    if size < max(n, 40):
        raise ValueError(f"n_passages must be at least max(n, 40) = {max(n, 40)}, got {size}")
    rng = random.Random(seed)
    world = W.build_world(size, rng)
    by_kind = W.names_by_kind(world)
    texts = [W.passage(e, world, by_kind, rng, passage_words, length_spread) for e in world]
    order = list(range(len(world)))
    rng.shuffle(order)
    pid = {eid: i for i, eid in enumerate(order)}
    corpus = pd.DataFrame(
        {
            "passage_id": range(len(order)),
            "title": [world[e].name for e in order],
            "text": [texts[e] for e in order],
        },
        columns=list(PASSAGE_COLUMNS),
    )

    truths = bernoulli_count(rng, n, supports_fraction)
    subjects = rng.sample(world, len(world))
    rows: list[dict[str, object]] = []
    for truth in truths:
        claim = None
        while claim is None:
            subject = subjects.pop()
            maker = rng.choice(MAKERS[subject.kind])
            claim = maker(subject, world, rng, truth)
        rows.append(
            {
                "claim_id": len(rows),
                "claim": claim.text,
                "label": LABELS[0] if truth else LABELS[1],
                "gold_passage_ids": [pid[eid] for eid in claim.gold],
            }
        )
    claims = pd.DataFrame(rows, columns=list(CLAIM_COLUMNS))
    return FEVERData(claims=claims, corpus=corpus)
