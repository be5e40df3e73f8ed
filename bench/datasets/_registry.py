"""The registry behind :func:`bench.datasets.load`: names, descriptions and the
generator arguments of each scale.

Scales:

- ``"quick"``: small enough for a few minutes on 2 CPU cores with the bundled 135M model.
- ``"paper"``: the sizes of Table 2 of the Kalypso paper (section 7.2), with document
  lengths converted from its "avg. tokens per tuple" at 1.33 Llama-3 tokens per word and
  selectivities derived from its LLM-call counts where the paper gives no rate:

  - fever: Table 2 has 1,000 claims (11.8 tokens) and a 5,416,568-passage Wikipedia
    (126.0 tokens per passage). Here: 1,000 claims of about 9 words and 50,000 passages
    of about 95 words (the corpus is scaled down); 50% SUPPORTS.
  - medec: 1,000 patient notes of 397.1 tokens. Here: 1,000 notes of about 300 words,
    57% with an error (Kalypso's 2,143 LLM calls = 1,000 filter calls + 2 maps for each
    of about 571 flagged notes).
  - biodex: 500 articles of 2,680.1 tokens and 11,271 reactions of 6.3 tokens. Here:
    500 articles of about 2,000 words and 11,271 terms of about 3 words.
  - contractnli: 607 contracts of 2,145.3 tokens and 17 hypotheses of 36.8 tokens.
    Here: 607 NDAs of about 1,600 words (ContractNLI's documents are all NDAs) and the
    17 hypotheses; about 62% of pairs entailed (Kalypso's 17,342 LLM calls = 607 filter
    calls + 10,319 join calls + 6,416 explanation calls for the pairs that matched).
  - reviews: not a workload of the paper; "paper" gives 1,000 reviews.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import pandas as pd

from bench.datasets._sizes import FEVER_PAPER_PASSAGES, REVIEWS_DEFAULT_N
from bench.datasets._text import words_for_tokens

Scale = Literal["quick", "paper"]
SCALES: Final = ("quick", "paper")
Tables = dict[str, pd.DataFrame]


@dataclass(frozen=True)
class DatasetInfo:
    """What :func:`load` knows about one dataset.

    Attributes:
        name: registry name.
        description: one line.
        tables: names of the tables :func:`load` returns, in order.
        quick: generator keyword arguments of the "quick" scale.
        paper: generator keyword arguments of the "paper" scale.
        make: ``make(seed, **kwargs)`` returns the tables by name.
    """

    name: str
    description: str
    tables: tuple[str, ...]
    quick: Mapping[str, Any]
    paper: Mapping[str, Any]
    make: Callable[..., Tables]


# Generator modules are imported when a dataset is made, so that importing the package
# stays cheap and ``python -m bench.datasets.reviews`` does not import itself twice.


def _reviews(seed: int, **params: Any) -> Tables:
    from bench.datasets import reviews

    # The default dataset is read from the bundled files (a test keeps them identical).
    if seed == 0 and params == {"n": REVIEWS_DEFAULT_N}:
        data = reviews.load_bundled()
    else:
        data = reviews.generate(seed=seed, **params)
    return {"reviews": data.reviews, "aspects": data.aspects}


def _fever(seed: int, **params: Any) -> Tables:
    from bench.datasets import fever

    data = fever.generate(seed=seed, **params)
    return {"claims": data.claims, "corpus": data.corpus}


def _medec(seed: int, **params: Any) -> Tables:
    from bench.datasets import clinical_notes

    return {"notes": clinical_notes.generate(seed=seed, **params)}


def _biodex(seed: int, **params: Any) -> Tables:
    from bench.datasets import biodex

    data = biodex.generate(seed=seed, **params)
    return {"articles": data.articles, "reaction_terms": data.reaction_terms}


def _contractnli(seed: int, **params: Any) -> Tables:
    from bench.datasets import contracts

    data = contracts.generate(seed=seed, **params)
    return {"contracts": data.contracts, "hypotheses": data.hypotheses}


REGISTRY: Final[dict[str, DatasetInfo]] = {
    info.name: info
    for info in (
        DatasetInfo(
            "reviews",
            "Product reviews (~320 words) with battery/sentiment labels and 8 aspect "
            "statements to join (the README demo; bundled file).",
            ("reviews", "aspects"),
            quick={"n": REVIEWS_DEFAULT_N},
            paper={"n": 1_000},
            make=_reviews,
        ),
        DatasetInfo(
            "fever",
            "FEVER-style claims (SUPPORTS/REFUTES) and an encyclopedic passage corpus for "
            "sem_map -> index_search -> sem_filter.",
            ("claims", "corpus"),
            quick={"n": 30, "n_passages": 600},
            paper={
                "n": 1_000,
                "n_passages": FEVER_PAPER_PASSAGES,
                "passage_words": words_for_tokens(126.0),
            },
            make=_fever,
        ),
        DatasetInfo(
            "medec",
            "MEDEC-style clinical notes (~300 words, numbered sentences) with injected "
            "medical errors for error detection and correction.",
            ("notes",),
            quick={"n": 40, "error_fraction": 0.45},
            paper={"n": 1_000, "target_words": words_for_tokens(397.1), "error_fraction": 0.57},
            make=_medec,
        ),
        DatasetInfo(
            "biodex",
            "BioDEX-style case-report articles with gold adverse reactions and a large "
            "MedDRA-like table of reaction terms.",
            ("articles", "reaction_terms"),
            quick={"n": 12, "target_words": 700, "n_terms": 2_000},
            paper={"n": 500, "target_words": words_for_tokens(2_680.1), "n_terms": 11_271},
            make=_biodex,
        ),
        DatasetInfo(
            "contractnli",
            "ContractNLI-style NDAs (plus non-NDA documents) with gold labels for the 17 "
            "hypotheses they are joined with.",
            ("contracts", "hypotheses"),
            quick={"n": 14, "target_words": 800, "nda_fraction": 0.75},
            paper={
                "n": 607,
                "target_words": words_for_tokens(2_145.3),
                "nda_fraction": 1.0,
                "label_weights": (0.62, 0.08, 0.30),
            },
            make=_contractnli,
        ),
    )
}

ALIASES: Final = {
    "contracts": "contractnli",
    "clinical_notes": "medec",
    "notes": "medec",
    "articles": "biodex",
    "claims": "fever",
}


def resolve(name: str) -> DatasetInfo:
    """The registry entry for ``name`` (or one of :data:`ALIASES`).

    Raises:
        KeyError: unknown name; the message lists the known ones.
    """
    key = ALIASES.get(name, name)
    if key not in REGISTRY:
        raise KeyError(f"unknown dataset {name!r}; known: {', '.join(REGISTRY)}")
    return REGISTRY[key]
