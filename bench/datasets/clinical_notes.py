"""MEDEC-shaped clinical notes with injected medical errors.

Each note tells one consistent clinical story (history, vital signs, examination,
results, assessment, plan) about one of the conditions in
:mod:`bench.datasets._clinical_scenarios`. Like MEDEC, the text is a list of numbered
sentences (``"0 A 54-year-old woman presents ..."``, one per line), so a ``sem_map`` can
answer with a sentence number. In a note with an error, exactly one sentence was altered
to contradict the rest: a wrong diagnosis, a wrong drug, a dangerous dose, a wrong next
step, or a wrong causative organism (MEDEC's diagnosis, pharmacotherapy, treatment,
management and causal-organism error types).

Paper workload (Table 2 and section 7.2 of the Kalypso paper): 1,000 patient notes of
397.1 tokens on average (about 300 words), queried by
``sem_filter`` (is any sentence medically inconsistent?) -> ``sem_map`` (which sentence?)
-> ``sem_map`` (corrected sentence).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

import pandas as pd

from bench.datasets import _clinical_scenarios as C
from bench.datasets._text import (
    Section,
    bernoulli_count,
    grow_to,
    indefinite_article,
    jittered,
    render,
    template_filler,
)

NOTE_COLUMNS: Final = (
    "note_id",
    "condition",
    "text",
    "has_error",
    "error_type",
    "error_sentence_id",
    "error_sentence",
    "corrected_sentence",
)
ERROR_TYPES: Final = ("diagnosis", "pharmacotherapy", "dose", "management", "causal_organism")
DEFAULT_TARGET_WORDS: Final = 300


@dataclass(frozen=True)
class _Pronouns:
    He: str
    he: str
    His: str
    his: str
    him: str

    def as_dict(self) -> dict[str, str]:
        return dict(vars(self))


_PRONOUNS: Final = {
    "female": _Pronouns("She", "she", "Her", "her", "her"),
    "male": _Pronouns("He", "he", "His", "his", "him"),
}
_NOUNS: Final = {"female": ("woman", "girl"), "male": ("man", "boy")}


def _alternatives(scenario: C.Scenario, kind: str) -> tuple[str, ...]:
    """Replacement phrases for an error of ``kind`` (empty when not applicable)."""
    return {
        "diagnosis": scenario.wrong_diagnosis,
        "pharmacotherapy": scenario.wrong_drug,
        "dose": scenario.wrong_dose,
        "management": scenario.wrong_management,
        "causal_organism": scenario.wrong_organism if scenario.organism else (),
    }[kind]


def _note(
    rng: random.Random, *, with_error: bool, target_words: int, length_spread: float
) -> dict[str, object]:
    scenario = rng.choice(C.SCENARIOS)
    sex = scenario.sex if scenario.sex != "any" else rng.choice(("female", "male"))
    age = rng.randint(*scenario.ages)
    pron = _PRONOUNS[sex].as_dict()
    minor = age < 18
    slots = C.MINOR_SLOTS if minor else C.ADULT_SLOTS
    pools: dict[str, tuple[str, ...]] = {
        k: tuple(v.format(**pron) for v in vals) for k, vals in slots.items()
    }
    if age >= 67:
        pools["occupation"] = C.RETIRED_OCCUPATION
    avoid = scenario.avoid | (C.MINOR_AVOID if minor else frozenset())

    def say(template: str, **extra: str) -> str:
        return render(template, rng, pools, **pron, **extra)

    def fill(topics: tuple[str, ...]) -> list[str]:
        """One template per topic that does not contradict the scenario."""
        return [rng.choice(C.FILLER[topic]) for topic in topics if topic not in avoid]

    opening = say(
        rng.choice(C.OPENING),
        a_age=f"{indefinite_article(str(age))} {age}",
        sex=_NOUNS[sex][minor],
        setting=rng.choice(C.SETTINGS),
        duration=rng.choice(scenario.duration),
        complaint=rng.choice(scenario.complaint),
    )
    history = [say(t) for t in rng.sample(scenario.history, len(scenario.history))]
    exam = [say(t) for t in rng.sample(scenario.exam, min(2, len(scenario.exam)))]
    results = [say(t) for t in rng.sample(scenario.results, min(2, len(scenario.results)))]

    # The sentences an error can alter, with the phrase each is built from.
    kinds = [k for k in ERROR_TYPES if _alternatives(scenario, k)]
    error_kind = rng.choice(kinds) if with_error else None

    def variant(kind: str, template: str, key: str, correct: str) -> tuple[str, str]:
        right = say(template, **{key: correct})
        if kind != error_kind:
            return right, right
        return say(template, **{key: rng.choice(_alternatives(scenario, kind))}), right

    rx = rng.choice(scenario.treatment)
    dx_pair = variant("diagnosis", rng.choice(C.DIAGNOSIS), "dx", scenario.diagnosis)
    rx_template = rng.choice(C.TREATMENT)
    rx_pair = variant("pharmacotherapy", rx_template, "rx", rx)
    if error_kind == "dose":
        rx_pair = variant("dose", rx_template, "rx", rx)
    mgmt = rng.choice(scenario.management)
    mgmt_pair = (
        say(rng.choice(scenario.wrong_management)) if error_kind == "management" else say(mgmt),
        say(mgmt),
    )
    assessment = [dx_pair]
    if scenario.organism:
        organism = variant("causal_organism", rng.choice(C.ORGANISM), "organism", scenario.organism)
        assessment.append(organism)

    history_fill = template_filler(rng, fill(C.HISTORY_TOPICS), pools, pron)
    sections = [
        Section(None, [opening, *history], history_fill, 1.6),
        Section(None, [say(rng.choice(scenario.vitals))]),
        Section(None, exam, template_filler(rng, fill(C.EXAM_TOPICS), pools, pron), 1.0),
        Section(None, results),
        Section(None, [shown for shown, _ in assessment]),
        Section(
            None,
            [rx_pair[0], mgmt_pair[0]],
            template_filler(rng, fill(C.PLAN_TOPICS), pools, pron),
            0.6,
        ),
    ]
    grow_to(sections, jittered(rng, target_words, length_spread), rng, tail=True, overhead=1)
    sentences = [s for section in sections for s in section.sentences]
    text = "\n".join(f"{i} {s}" for i, s in enumerate(sentences))

    row: dict[str, object] = {
        "condition": scenario.name,
        "text": text,
        "has_error": False,
        "error_type": None,
        "error_sentence_id": -1,
        "error_sentence": None,
        "corrected_sentence": None,
    }
    for shown, right in [*assessment, rx_pair, mgmt_pair]:
        if shown != right:
            row.update(
                has_error=True,
                error_type=error_kind,
                error_sentence_id=sentences.index(shown),
                error_sentence=shown,
                corrected_sentence=right,
            )
    return row


def generate(
    n: int = 40,
    seed: int = 0,
    *,
    target_words: int = DEFAULT_TARGET_WORDS,
    length_spread: float = 0.15,
    error_fraction: float = 0.45,
) -> pd.DataFrame:
    """Generate ``n`` clinical notes; deterministic in ``seed``.

    Args:
        n: number of notes.
        seed: seed of the private :class:`random.Random`; same seed, same frame.
        target_words: mean note length in words, sentence numbers included (the paper's
            397.1 tokens per note is about 300 words). Notes grow with history, exam and
            follow-up sentences that never contradict the story; beyond roughly 350 words
            a condition's filler runs out and notes stop short of the target.
        length_spread: each note's target is drawn from ``target_words * (1 ± spread)``.
        error_fraction: fraction of notes with an injected error; exactly
            ``round(n * error_fraction)`` notes have one.

    Returns:
        A frame with columns :data:`NOTE_COLUMNS`: ``note_id`` (0..n-1), ``condition``
        (scenario name), ``text`` (numbered sentences, one per line), ``has_error``,
        ``error_type`` (one of :data:`ERROR_TYPES`, or ``None``), ``error_sentence_id``
        (the erroneous sentence's number, ``-1`` when none), ``error_sentence`` (as it
        appears in the text, without its number) and ``corrected_sentence`` (both
        ``None`` when there is no error).
    """
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    rng = random.Random(seed)
    flags = bernoulli_count(rng, n, error_fraction)
    rows = [
        {
            "note_id": i,
            **_note(rng, with_error=flag, target_words=target_words, length_spread=length_spread),
        }
        for i, flag in enumerate(flags)
    ]
    return pd.DataFrame(rows, columns=list(NOTE_COLUMNS))
