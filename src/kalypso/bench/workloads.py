"""Plans with the shapes of the paper's workloads (section 7.2), over the bundled generators.

* ``contractnli``: contracts -> sem_filter (is it an NDA?) -> sem_join with the 17
  hypotheses (full Cartesian product, predicate) -> sem_map explaining each match;
  two stages.
* ``medec``: clinical notes -> sem_filter (does it contain an error?) -> sem_map (which
  sentence) -> sem_map (the corrected sentence); one stage.

``quick`` sizes fit a few minutes on 2 CPU cores with the bundled model; ``paper`` sizes
are the paper's table sizes (for the simulator). The filters are phrased as negated
questions ("is it unrelated to ...?", kept when the answer is no): the bundled 135M model
answers "No" to nearly every yes/no question about a long document, and the paper's
workloads keep most tuples (all 607 ContractNLI documents are NDAs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import kalypso
from kalypso.datasets import clinical_notes
from kalypso.datasets import contracts as contract_data


@dataclass(frozen=True)
class Workload:
    name: str
    scale: str
    plan: kalypso.Table
    table_text: list[str]
    """The left table's documents (to size the KV cache relative to the table)."""


def contractnli(scale: str = "quick", seed: int = 0) -> Workload:
    if scale == "quick":
        data = contract_data.generate(n=20, seed=seed, target_words=640)
    else:
        data = contract_data.generate(n=607, seed=seed, target_words=1613, nda_fraction=1.0)
    contracts = data.contracts[["contract_id", "text"]]
    hypotheses = data.hypotheses[["hypothesis"]]
    plan = (
        kalypso.table(contracts, name="contracts")
        .sem_filter("Is this {text} unrelated to confidentiality obligations?", negate=True)
        .sem_join(
            kalypso.table(hypotheses, name="hypotheses"),
            "Does the contract {text} state that: {hypothesis}",
        )
        .sem_map(
            "Quote the clause of the {text} that supports: {hypothesis}",
            "evidence",
            max_tokens=48,
            first_bound_tokens=16,
        )
    )
    return Workload("contractnli", scale, plan, list(contracts["text"]))


def medec(scale: str = "quick", seed: int = 0) -> Workload:
    n = 40 if scale == "quick" else 1000
    notes = clinical_notes.generate(n=n, seed=seed)[["note_id", "text"]]
    plan = (
        kalypso.table(notes, name="notes")
        .sem_filter("Is this clinical {text} free of medical errors?", negate=True)
        .sem_map(
            "Which sentence of the {text} contains the error? Give its number.",
            "error_sentence",
            max_tokens=16,
            first_bound_tokens=8,
        )
        .sem_map(
            "Rewrite the wrong sentence of the {text} correctly.",
            "correction",
            max_tokens=48,
            first_bound_tokens=16,
        )
    )
    return Workload("medec", scale, plan, list(notes["text"]))


WORKLOADS: dict[str, Callable[..., Workload]] = {"contractnli": contractnli, "medec": medec}
