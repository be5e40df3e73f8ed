"""ContractNLI-shaped contracts and the 17 hypotheses to join them with.

Most documents are non-disclosure agreements with numbered clauses (definitions,
confidentiality obligations, exceptions, compelled disclosure, ownership, return of
materials, non-solicitation, term, then general provisions such as remedies and governing
law). For every contract and hypothesis a gold label is drawn (``entailment``,
``contradiction`` or ``not_mentioned``) and the contract contains a sentence that entails
or contradicts the hypothesis, or none, accordingly. A few labels are adjusted so that
the contract never contradicts itself (see :func:`_make_consistent`).

The other documents (``is_nda`` false) are equipment leases (contracts without any
confidentiality clause) and board minutes (not contracts), for the plan's first
``sem_filter``; all their labels are ``not_mentioned``.

Paper workload (Table 2 and section 7.2 of the Kalypso paper): 607 contracts of 2,145.3
tokens on average (about 1,600 words) joined with 17 hypotheses (36.8 tokens on average in
the paper's prompts; the statements here are 10-30 words), queried by ``sem_filter`` (is
this a contract with enough clauses to evaluate confidentiality obligations?) ->
``sem_join`` (does the contract entail the hypothesis?) -> ``sem_map`` (explain).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import pandas as pd

from bench.datasets import _contract_boilerplate as B
from bench.datasets import _contract_clauses as H
from bench.datasets._text import (
    Section,
    bernoulli_count,
    grow_to,
    jittered,
    render,
    template_filler,
    word_count,
)

CONTRACT_COLUMNS: Final = ("contract_id", "title", "doc_type", "text", "is_nda", "labels")
HYPOTHESIS_COLUMNS: Final = ("hypothesis_id", "title", "hypothesis")
PAIR_COLUMNS: Final = ("contract_id", "hypothesis_id", "label")
DOC_TYPES: Final = ("nda", "lease", "minutes")


@dataclass(frozen=True)
class ContractNLIData:
    """The two tables of the workload.

    Attributes:
        contracts: columns :data:`CONTRACT_COLUMNS`. ``doc_type`` is one of
            :data:`DOC_TYPES`; ``is_nda`` is true exactly for ``"nda"``; ``labels`` maps
            every ``hypothesis_id`` to its gold label (one of ``_contract_clauses.LABELS``).
        hypotheses: the 17 hypotheses; columns :data:`HYPOTHESIS_COLUMNS`.
    """

    contracts: pd.DataFrame
    hypotheses: pd.DataFrame


def hypotheses_table() -> pd.DataFrame:
    """The 17 hypotheses (the same for every seed)."""
    rows = [(h.hypothesis_id, h.title, h.text) for h in H.HYPOTHESES]
    return pd.DataFrame(rows, columns=list(HYPOTHESIS_COLUMNS))


def gold_pairs(contracts: pd.DataFrame) -> pd.DataFrame:
    """The long form of ``contracts["labels"]``: one row per (contract, hypothesis).

    Returns:
        A frame with columns :data:`PAIR_COLUMNS`, contracts in input order and
        hypotheses in :data:`_contract_clauses.HYPOTHESES` order.
    """
    rows = [
        (cid, h.hypothesis_id, labels[h.hypothesis_id])
        for cid, labels in zip(contracts["contract_id"], contracts["labels"], strict=True)
        for h in H.HYPOTHESES
    ]
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS))


def _make_consistent(labels: dict[str, str]) -> None:
    """Adjust ``labels`` in place so that the clauses chosen for them agree.

    - Obligations that all cease at termination (nda-19 contradiction) leave no room for
      a duty to return materials at termination (nda-16 entailment) nor for a rule about
      what may be kept after return (nda-20 contradiction): those become not_mentioned.
    - Forbidding retention after return (nda-20 contradiction) presupposes a duty to
      return or destroy (nda-16 entailment).
    - A ban on any copy (nda-17 contradiction) excludes keeping an archival copy
      (nda-20 entailment), which becomes not_mentioned.
    """
    if labels["nda-19"] == "contradiction":
        if labels["nda-16"] == "entailment":
            labels["nda-16"] = "not_mentioned"
        if labels["nda-20"] == "contradiction":
            labels["nda-20"] = "not_mentioned"
    if labels["nda-20"] == "contradiction":
        labels["nda-16"] = "entailment"
    if labels["nda-17"] == "contradiction" and labels["nda-20"] == "entailment":
        labels["nda-20"] = "not_mentioned"


def _company(rng: random.Random, suffixes: tuple[str, ...]) -> str:
    return f"{rng.choice(B.NAME_FIRST)} {rng.choice(B.NAME_SECOND)} {rng.choice(suffixes)}"


def _context(rng: random.Random) -> dict[str, str]:
    """Values shared by all sentences of one document (parties, dates, venue, ...)."""
    (_, _, d_form, d_suffixes), (law, venue, r_form, r_suffixes) = rng.sample(B.JURISDICTIONS, 2)
    discloser = _company(rng, d_suffixes)
    recipient = _company(rng, r_suffixes)
    while recipient == discloser:
        recipient = _company(rng, r_suffixes)
    product = rng.choice(B.PRODUCTS)
    people = rng.sample(B.PEOPLE, 5)
    return {
        "discloser": discloser,
        "recipient": recipient,
        "discloser_form": d_form,
        "recipient_form": r_form,
        "discloser_address": f"{rng.randint(10, 990)} {rng.choice(B.STREETS)}",
        "recipient_address": f"{rng.randint(10, 990)} {rng.choice(B.STREETS)}",
        "date": f"{rng.choice(B.MONTHS)} {rng.randint(1, 28)}, {rng.randint(2012, 2025)}",
        "law": law,
        "venue": venue,
        "product": product,
        "purpose": rng.choice(B.PURPOSES).format(product=product),
        "equipment": rng.choice(B.EQUIPMENT),
        "chair": people[0],
        "person": people[1],
        "person2": people[2],
        "person3": people[3],
        "person4": people[4],
        "hour": rng.choice(B.HOURS),
        "hour2": rng.choice(B.END_HOURS),
        "month": rng.choice(B.MONTHS),
    }


_POOLS: Final[dict[str, tuple[str, ...]]] = {
    **H.CLAUSE_SLOTS,
    "amount": B.AMOUNTS,
    "pct": B.PERCENTS,
}


def _section(
    rng: random.Random,
    title: str,
    required: Sequence[str],
    optional: Sequence[str],
    ctx: dict[str, str],
    weight: float = 1.0,
) -> Section:
    """A numbered clause: ``required`` sentences, growable with ``optional`` ones taken in
    their given order (clause text reads in sequence)."""
    body = [render(t, rng, _POOLS, **ctx) for t in required]
    queue = list(optional)

    def more(r: random.Random) -> str | None:
        return render(queue.pop(0), r, _POOLS, **ctx) if queue else None

    return Section(title, body, more if queue else None, weight)


def _catalogue_sections(
    rng: random.Random,
    ctx: dict[str, str],
    catalogue: Sequence[tuple[str, Sequence[str]]],
    keep: int = 2,
) -> list[Section]:
    """One clause per catalogue entry, in random order of preference (callers take a
    prefix and sort it back with :func:`_in_catalogue_order`); each keeps its first
    ``keep`` sentences and can grow with the rest."""
    sections = [_section(rng, title, s[:keep], s[keep:], ctx) for title, s in catalogue]
    rng.shuffle(sections)
    return sections


def _in_catalogue_order(
    sections: Sequence[Section], catalogue: Sequence[tuple[str, Sequence[str]]]
) -> list[Section]:
    order = {title: i for i, (title, _) in enumerate(catalogue)}
    return sorted(sections, key=lambda s: order[s.heading or ""])


def _size(sections: Sequence[Section]) -> int:
    """Rendered words of numbered clauses (heading number and sentence numbers included)."""
    return sum(s.words() + len(s.sentences) + 1 for s in sections)


def _fill(
    head: list[Section],
    candidates: list[Section],
    tail: list[Section],
    target: int,
    rng: random.Random,
) -> list[Section]:
    """Take ``candidates`` (from the end) while ``head + chosen + tail`` is short of
    ``target`` words, then grow sentences; returns the chosen candidates."""
    chosen: list[Section] = []
    while candidates and _size([*head, *chosen, *tail]) < target:
        chosen.append(candidates.pop())
    sections = [*head, *chosen, *tail]
    grow_to(sections, target - len(sections), rng, tail=True, overhead=1)
    return chosen


def _render(title: str, preamble: Sequence[str], sections: Sequence[Section], closing: str) -> str:
    parts = [title, "\n\n".join(preamble)]
    for number, section in enumerate(sections, start=1):
        lines = [f"{number}. {section.heading}"]
        lines += [f"{number}.{i} {s}" for i, s in enumerate(section.sentences, start=1)]
        parts.append("\n".join(lines))
    if closing:
        parts.append(closing)
    return "\n\n".join(parts)


def _nda_sections(rng: random.Random, labels: dict[str, str], ctx: dict[str, str]) -> list[Section]:
    """The core clauses of an NDA, holding one sentence per mentioned hypothesis.

    A clause that would hold only optional neutral text (compelled disclosure, return of
    materials, non-solicitation) is left out when none of its hypotheses is mentioned,
    since its neutral text presupposes the obligation.
    """
    by_section: dict[str, list[str]] = {key: [] for key in B.CORE_ORDER}
    for hyp in H.HYPOTHESES:
        label = labels[hyp.hypothesis_id]
        if label != "not_mentioned":
            options = hyp.entail if label == "entailment" else hyp.contradict
            by_section[H.SECTION_OF[hyp.hypothesis_id]].append(rng.choice(options))
    sections = []
    for key in B.CORE_ORDER:
        hyp_sentences = by_section[key]
        rng.shuffle(hyp_sentences)
        if key not in B.CORE_ALWAYS and not hyp_sentences:
            continue
        neutral = B.CORE_NEUTRAL[key]
        # The first neutral sentence (for definitions: "Purpose" and "Confidential
        # Information") always opens the clause; the others are growth material.
        lead = [neutral[0], neutral[2]] if key == "definitions" else list(neutral[:1])
        optional = [t for t in neutral if t not in lead]
        section = _section(rng, B.CORE_TITLES[key], [*lead, *hyp_sentences], optional, ctx)
        section.weight = 0.7
        sections.append(section)
    return sections


def _general_catalogue(nda: bool) -> list[tuple[str, tuple[str, ...]]]:
    return [
        (title, sentences) for title, sentences, nda_only in B.BOILERPLATE if nda or not nda_only
    ]


def _nda(rng: random.Random, labels: dict[str, str], target: int) -> tuple[str, str]:
    ctx = _context(rng)
    title = rng.choice(B.NDA_TITLES)
    ctx["title"] = title
    preamble = [render(t, rng, _POOLS, **ctx) for t in B.PREAMBLE]
    signature = f"{B.SIGNATURE}\n{ctx['discloser']}\n{ctx['recipient']}"
    head = _nda_sections(rng, labels, ctx)
    catalogue = _general_catalogue(nda=True)
    general = _catalogue_sections(rng, ctx, catalogue)
    fixed_words = sum(word_count(p) for p in [title, *preamble, signature])
    chosen = _fill(head, general, [], target - fixed_words, rng)
    sections = [*head, *_in_catalogue_order(chosen, catalogue)]
    return title, _render(title.upper(), preamble, sections, signature)


def _lease(rng: random.Random, target: int) -> tuple[str, str]:
    ctx = _context(rng)
    title = rng.choice(B.LEASE_TITLE)
    ctx["title"] = title
    preamble = [render(t, rng, _POOLS, **ctx) for t in B.LEASE_PREAMBLE]
    head = [_section(rng, name, s[:2], s[2:], ctx) for name, s in B.LEASE_SECTIONS]
    catalogue = _general_catalogue(nda=False)
    general = _catalogue_sections(rng, ctx, catalogue)
    fixed_words = sum(word_count(p) for p in [title, *preamble, B.SIGNATURE])
    chosen = _fill(head, general, [], target - fixed_words, rng)
    sections = [*head, *_in_catalogue_order(chosen, catalogue)]
    return title, _render(title.upper(), preamble, sections, B.SIGNATURE)


_MIN_MEETING_WORDS: Final = 250


def _meeting(rng: random.Random, ctx: dict[str, str], target: int) -> str:
    """The minutes of one meeting, about ``target`` words long."""
    people = rng.sample(B.PEOPLE, 5)
    mctx = {
        **ctx,
        "chair": people[0],
        "person": people[1],
        "person2": people[2],
        "person3": people[3],
        "person4": people[4],
        "hour": rng.choice(B.HOURS),
        "hour2": rng.choice(B.END_HOURS),
        "month": rng.choice(B.MONTHS),
        "date": f"{rng.choice(B.MONTHS)} {rng.randint(1, 28)}, {rng.randint(2012, 2025)}",
    }
    preamble = [render(t, rng, _POOLS, **mctx) for t in B.MINUTES_PREAMBLE]
    first, *middle, last = B.MINUTES_SECTIONS
    shared = template_filler(rng, B.MINUTES_FILLER, _POOLS, mctx)
    candidates = _catalogue_sections(rng, mctx, middle)
    head = [_section(rng, first[0], first[1][:2], first[1][2:], mctx)]
    tail = [_section(rng, last[0], last[1], (), mctx)]
    for section in [*head, *candidates]:
        own = section.filler
        section.filler = lambda r, own=own: (own(r) if own else None) or shared(r)
    heading = f"Meeting of {mctx['date']}"
    fixed_words = sum(word_count(p) for p in [heading, *preamble])
    chosen = _fill(head, candidates, tail, target - fixed_words, rng)
    sections = [*head, *_in_catalogue_order(chosen, middle), *tail]
    return _render(heading, preamble, sections, "")


def _minutes(rng: random.Random, target: int) -> tuple[str, str]:
    """Board minutes: one meeting, or several when one cannot reach ``target`` words."""
    ctx = _context(rng)
    title = f"{rng.choice(B.MINUTES_TITLE)} of {ctx['discloser']}"
    meetings: list[str] = []
    words = word_count(title)
    while target - words >= _MIN_MEETING_WORDS or not meetings:
        meetings.append(_meeting(rng, ctx, target - words))
        words += word_count(meetings[-1])
    return title, "\n\n".join([title.upper(), *meetings])


def generate(
    n: int = 14,
    seed: int = 0,
    *,
    target_words: int = 800,
    length_spread: float = 0.15,
    nda_fraction: float = 0.75,
    label_weights: tuple[float, float, float] = (0.5, 0.15, 0.35),
    lease_share: float = 0.5,
) -> ContractNLIData:
    """Generate ``n`` documents and the 17 hypotheses; deterministic in ``seed``.

    Args:
        n: number of documents.
        seed: seed of the private :class:`random.Random`; same seed, same tables.
        target_words: mean document length in words, clause numbers included (the
            paper's 2,145.3 tokens per contract is about 1,600 words). Documents grow by
            whole general-provision clauses, then by extra sentences; past about 2,000
            words the clause pools run out and documents stop short of the target.
        length_spread: each document's target is drawn from ``target_words * (1 ± spread)``.
        nda_fraction: fraction of documents that are NDAs (``is_nda``); exactly
            ``round(n * nda_fraction)`` are. This is the selectivity of the first filter.
        label_weights: relative weights of entailment, contradiction and not_mentioned
            when drawing an NDA's label for each hypothesis (before the consistency
            adjustments of :func:`_make_consistent`, which move a few labels to
            not_mentioned or entailment).
        lease_share: fraction of the non-NDA documents that are equipment leases; the
            rest are board minutes.

    Returns:
        :class:`ContractNLIData`; ``contract_id`` runs from 0 to ``n - 1``.
    """
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    rng = random.Random(seed)
    nda_flags = bernoulli_count(rng, n, nda_fraction)
    lease_flags = iter(bernoulli_count(rng, n - sum(nda_flags), lease_share))
    rows = []
    for contract_id, is_nda in enumerate(nda_flags):
        target = jittered(rng, target_words, length_spread)
        labels = {h.hypothesis_id: "not_mentioned" for h in H.HYPOTHESES}
        if is_nda:
            for hyp_id in labels:
                labels[hyp_id] = rng.choices(H.LABELS, label_weights)[0]
            _make_consistent(labels)
            doc_type = "nda"
            title, text = _nda(rng, labels, target)
        elif next(lease_flags):
            doc_type = "lease"
            title, text = _lease(rng, target)
        else:
            doc_type = "minutes"
            title, text = _minutes(rng, target)
        rows.append(
            {
                "contract_id": contract_id,
                "title": title,
                "doc_type": doc_type,
                "text": text,
                "is_nda": is_nda,
                "labels": labels,
            }
        )
    contracts = pd.DataFrame(rows, columns=list(CONTRACT_COLUMNS))
    return ContractNLIData(contracts=contracts, hypotheses=hypotheses_table())


__all__ = ["ContractNLIData", "generate", "gold_pairs", "hypotheses_table"]
