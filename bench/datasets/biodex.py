"""BioDEX-shaped case-report articles and a large table of reaction terms.

Each article reads like a pharmacovigilance case report (title, abstract, introduction,
literature search, case presentation, review of the literature, discussion, conclusion)
about one suspect drug and the adverse reactions a patient developed. ``reactions`` lists
the gold labels: terms of ``reaction_terms`` that the article states the patient had (each
is named in the case presentation). Articles also name a few *other* reactions as known
class effects or excluded diagnoses, which a careful extractor must not report.

``reaction_terms`` is a MedDRA-like vocabulary (see :mod:`._reaction_terms`): all common
and laboratory terms plus a seeded sample of combinatorial site terms.

Paper workload (Table 2 and section 7.2 of the Kalypso paper): 500 articles of 2,680.1
tokens on average (about 2,000 words) and 11,271 reactions of 6.3 tokens on average (the
terms here average about 3 words), queried by ``sem_map`` (extract reaction labels) ->
``sem_join`` as an index Cartesian product over the reactions (vector search) ->
``sem_filter`` (does the article describe this reaction?).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import pandas as pd

from bench.datasets import _article_phrases as A
from bench.datasets import _reaction_terms as T
from bench.datasets._text import (
    Filler,
    Section,
    capitalize,
    grow_to,
    indefinite_article,
    jittered,
    join_sections,
    render,
    template_filler,
)

ARTICLE_COLUMNS: Final = ("article_id", "title", "text", "drug", "reactions")
TERM_COLUMNS: Final = ("term_id", "term")


@dataclass(frozen=True)
class BioDEXData:
    """The two tables of the workload.

    Attributes:
        articles: columns :data:`ARTICLE_COLUMNS`; ``reactions`` is a list of gold terms,
            each present in ``reaction_terms["term"]``; ``drug`` is the suspect drug.
        reaction_terms: columns :data:`TERM_COLUMNS`; ``term_id`` runs from 0.
    """

    articles: pd.DataFrame
    reaction_terms: pd.DataFrame


def reaction_vocabulary(n_terms: int, rng: random.Random) -> list[str]:
    """``n_terms`` distinct terms in random order: every common and laboratory term (or a
    sample of them when ``n_terms`` is smaller), then a sample of site terms.

    Raises:
        ValueError: ``n_terms`` exceeds the vocabulary (see :func:`_reaction_terms.all_terms`).
    """
    everything = T.all_terms()
    if not 0 < n_terms <= len(everything):
        raise ValueError(f"n_terms must be in 1..{len(everything)}, got {n_terms}")
    featured = [t for t in everything if T.is_featured(t)]
    others = [t for t in everything if not T.is_featured(t)]
    if n_terms <= len(featured):
        chosen = rng.sample(featured, n_terms)
    else:
        chosen = featured + rng.sample(others, n_terms - len(featured))
    rng.shuffle(chosen)
    return chosen


def _join(items: Sequence[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + f", and {items[-1]}"


def _in_order(
    templates: Sequence[str], pools: dict[str, tuple[str, ...]], ctx: dict[str, str]
) -> Filler:
    """A filler that yields ``templates`` in their given order (a narrative sequence)."""
    queue = list(templates)

    def more(r: random.Random) -> str | None:
        return render(queue.pop(0), r, pools, **ctx) if queue else None

    return more


def _literature(drug_ctx: dict[str, str], pools: dict[str, tuple[str, ...]]) -> Filler:
    """An endless source of literature-review sentences (fresh slot values each call)."""
    merged = {**pools, **A.LITERATURE_SLOTS}

    def more(r: random.Random) -> str:
        return render(r.choice(A.LITERATURE), r, merged, **drug_ctx)

    return more


def _article(
    rng: random.Random,
    gold: list[str],
    others: list[str],
    *,
    target_words: int,
    length_spread: float,
) -> dict[str, object]:
    drug, drug_class, indication, dose = rng.choice(A.DRUGS)
    sex = "woman" if indication in A.FEMALE_ONLY else rng.choice(("man", "woman"))
    he, his, him = ("he", "his", "him") if sex == "man" else ("she", "her", "her")
    age = str(rng.randint(18, 88))
    a_age = f"{indefinite_article(age)} {age}"
    mentions = [T.mention(t) for t in gold]
    ctx = {
        "drug": drug,
        "Drug": capitalize(drug),
        "drug_class": drug_class,
        "a_drug_class": f"{indefinite_article(drug_class)} {drug_class}",
        "indication": indication,
        "dose": dose,
        "sex": sex,
        "a_age": a_age,
        "A_age": capitalize(a_age),
        "onset": str(rng.randint(3, 60)),
        "He": capitalize(he),
        "he": he,
        "His": capitalize(his),
        "his": his,
        "him": him,
        "reactions": _join(mentions),
        "Reactions": capitalize(_join(mentions)),
        "Reaction": capitalize(mentions[0]),
    }
    pools: dict[str, tuple[str, ...]] = {
        **A.SLOTS,
        "reaction": tuple(mentions),
        "other": tuple(T.mention(t) for t in others),
        "co_drug2": A.SLOTS["co_drug"],
    }

    def usable(templates: Sequence[str]) -> list[str]:
        return [t for t in templates if others or "{other}" not in t]

    def say(template: str, **extra: str) -> str:
        return render(template, rng, pools, **ctx, **extra)

    def section(heading: str, templates: Sequence[str], keep: int, weight: float) -> Section:
        options = usable(templates)
        lead = options[:keep]
        body = [say(t) for t in lead]
        return Section(heading, body, template_filler(rng, options, pools, ctx, lead), weight)

    abstract = Section("Abstract", [say(t) for t in A.ABSTRACT])
    background = section("Introduction", A.BACKGROUND, 1, 1.0)
    methods = section("Methods", A.METHODS, 1, 0.3)
    presentation = Section(
        "Case presentation",
        [say(A.CASE_REQUIRED[0]), say(A.CASE_REQUIRED[1])],
        template_filler(rng, A.CASE_HISTORY, pools, ctx),
        0.8,
    )
    findings = Section(
        None,
        [say(rng.choice(A.CASE_REACTION), reaction=m) for m in mentions],
        template_filler(rng, A.CASE_FINDINGS, pools, ctx),
        0.8,
    )
    rng.shuffle(findings.sentences)
    course = Section(
        None, [say(A.CASE_REQUIRED[2])], _in_order(A.CASE_COURSE, pools, ctx), 0.8, append_only=True
    )
    literature = Section("Review of the literature", [], _literature(ctx, pools), 0.6)
    discussion = section("Discussion", A.DISCUSSION, 2, 1.2)
    conclusion = section("Conclusion", A.CONCLUSION, 1, 0.1)
    sections = [
        abstract,
        background,
        methods,
        presentation,
        findings,
        course,
        literature,
        discussion,
        conclusion,
    ]
    grow_to(sections, jittered(rng, target_words, length_spread), rng)
    title = say(rng.choice(A.TITLES))
    return {
        "title": title,
        "text": f"{title}\n\n{join_sections(sections)}",
        "drug": drug,
        "reactions": list(gold),
    }


def generate(
    n: int = 12,
    seed: int = 0,
    *,
    target_words: int = 700,
    length_spread: float = 0.15,
    n_terms: int = 2_000,
    reactions_per_article: tuple[int, int] = (1, 4),
    featured_share: float = 0.7,
    distractors_per_article: int = 2,
) -> BioDEXData:
    """Generate ``n`` articles and ``n_terms`` reaction terms; deterministic in ``seed``.

    Args:
        n: number of articles.
        seed: seed of the private :class:`random.Random`; same seed, same tables.
        target_words: mean article length in words, title and headings included (the
            paper's 2,680.1 tokens per article is about 2,000 words). Articles of any
            length can be made: the literature review grows without bound.
        length_spread: each article's target is drawn from ``target_words * (1 ± spread)``.
        n_terms: rows of ``reaction_terms`` (at most the vocabulary size, about 13,700).
        reactions_per_article: inclusive ``(min, max)`` number of gold reactions per
            article (the join fan-out of true matches).
        featured_share: probability that a gold reaction is a common or laboratory term
            rather than a combinatorial site term.
        distractors_per_article: reactions named in an article that the patient did not
            have (as known class effects or excluded diagnoses); 0 for none.

    Returns:
        :class:`BioDEXData`; ``article_id`` runs from 0 to ``n - 1``.
    """
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    low, high = reactions_per_article
    if not 1 <= low <= high:
        raise ValueError(f"reactions_per_article must satisfy 1 <= min <= max, got {low, high}")
    rng = random.Random(seed)
    vocabulary = reaction_vocabulary(n_terms, rng)
    featured = [t for t in vocabulary if T.is_featured(t)]
    site = [t for t in vocabulary if not T.is_featured(t)]
    rows = []
    for article_id in range(n):
        k = rng.randint(low, high)
        gold: list[str] = []
        while len(gold) < min(k, len(vocabulary)):
            use_featured = (rng.random() < featured_share and featured) or not site
            term = rng.choice(featured if use_featured else site)
            if term not in gold:
                gold.append(term)
        candidates = [t for t in (featured or site) if t not in gold]
        others = rng.sample(candidates, min(distractors_per_article, len(candidates)))
        row = _article(rng, gold, others, target_words=target_words, length_spread=length_spread)
        rows.append({"article_id": article_id, **row})
    articles = pd.DataFrame(rows, columns=list(ARTICLE_COLUMNS))
    terms = pd.DataFrame(
        {"term_id": range(len(vocabulary)), "term": vocabulary}, columns=list(TERM_COLUMNS)
    )
    return BioDEXData(articles=articles, reaction_terms=terms)
