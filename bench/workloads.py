"""Plans with the shapes of the paper's workloads (section 7.2), over the bundled generators.

* ``contractnli``: contracts of about 2,200 tokens -> sem_filter (is it about
  confidentiality?) -> sem_join with the 17 hypotheses (full Cartesian product, predicate:
  does the contract address the hypothesis, i.e. entail or contradict it) -> sem_map quoting
  the clause for each match; two stages.
* ``medec``: clinical notes -> sem_filter (does it contain an error?) -> sem_map (which
  sentence) -> sem_map (the corrected sentence); one stage.
* ``biodex``: case-report articles -> sem_map (the adverse reactions) -> indexed join
  against the table of reaction terms (FAISS over MiniLM embeddings, top 5 per article,
  accepted without an LLM call below distance 0.15, rejected above 0.65) with an LLM
  predicate in between; two stages.
* ``fever``: claims -> sem_map (a search query) -> index_search (top 5 passages of the
  corpus) -> sem_filter (is the claim contradicted? kept when not); one stage.

``quick`` sizes fit a few minutes on 2 CPU cores with the bundled model; ``paper`` sizes
are the paper's table sizes (for the simulator). The filters are phrased as negated
questions ("is it unrelated to ...?", kept when the answer is no): the bundled 135M model
answers "No" to nearly every yes/no question about a long document, and the paper's
workloads keep most tuples (all 607 ContractNLI documents are NDAs). The ContractNLI join
is negated for the same reason ("is the contract silent about ...?"): asked "does the
contract state ...?", the 135M model answered no to all 340 pairs and the final sem_map,
whose reuse of the contract prefix is part of the paper's workload, never ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kalypso
from bench.datasets import biodex as biodex_data
from bench.datasets import clinical_notes
from bench.datasets import contracts as contract_data
from bench.datasets import fever as fever_data


@dataclass(frozen=True)
class Workload:
    name: str
    scale: str
    plan: kalypso.Table
    table_text: list[str]
    """The left table's documents (to size the KV cache relative to the table)."""
    tables: dict[str, list[dict[Any, Any]]]
    """The input tables as records, for runs of the same shape by other systems (Lotus)."""
    min_kv_tokens: int = 0
    """A KV floor for plans whose prompts are much longer than the table's text (FEVER's
    prompts carry five retrieved passages)."""
    ablations: tuple[str, ...] = ()
    """Systems the suite runs on this workload besides the common ones: static stage splits
    on the two-stage shapes (paper Figure 10), fixed output budgets on MEDEC (Figure 12)."""

    def suite_systems(self) -> list[str]:
        """What ``python -m bench`` runs by default: the baseline, adaptive with virtual and
        with explicit pinning, then this workload's ablations."""
        return [*COMMON_SYSTEMS, *self.ablations]


COMMON_SYSTEMS = ("operator-at-a-time", "adaptive", "adaptive+explicit")
STATIC_SPLITS = tuple(f"static:{share}" for share in (0.1, 0.3, 0.5, 0.7, 0.9))
FIXED_BUDGETS = tuple(f"adaptive+fixed:{tokens}" for tokens in (1, 8, 48))


def contractnli(scale: str = "quick", seed: int = 0) -> Workload:
    # 1,480 words is about 2,200 tokens, the paper's mean contract (2,145 tokens).
    n, words = (8, 1480) if scale == "quick" else (607, 1480)
    data = contract_data.generate(n=n, seed=seed, target_words=words, nda_fraction=1.0)
    contracts = data.contracts[["contract_id", "text"]]
    hypotheses = data.hypotheses[["hypothesis"]]
    plan = (
        kalypso.table(contracts, name="contracts")
        .sem_filter("Is this {text} unrelated to confidentiality obligations?", negate=True)
        .sem_join(
            kalypso.table(hypotheses, name="hypotheses"),
            "Is the contract {text} silent about whether: {hypothesis}",
            negate=True,
        )
        .sem_map(
            "Quote the clause of the {text} that addresses: {hypothesis}",
            "evidence",
            max_tokens=48,
            first_bound_tokens=16,
        )
    )
    tables = {
        "contracts": contracts.to_dict("records"),
        "hypotheses": hypotheses.to_dict("records"),
    }
    return Workload(
        "contractnli", scale, plan, list(contracts["text"]), tables, ablations=STATIC_SPLITS
    )


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
    tables = {"notes": notes.to_dict("records")}
    return Workload("medec", scale, plan, list(notes["text"]), tables, ablations=FIXED_BUDGETS)


def biodex(scale: str = "quick", seed: int = 0) -> Workload:
    if scale == "quick":
        data = biodex_data.generate(n=12, seed=seed, target_words=500)
    else:
        data = biodex_data.generate(n=500, seed=seed, target_words=2015, n_terms=11271)
    articles = data.articles[["article_id", "text"]]
    terms = data.reaction_terms[["term"]]
    plan = (
        kalypso.table(articles, name="articles")
        .sem_map(
            "List the adverse drug reactions the {text} reports, comma-separated.",
            "reactions",
            max_tokens=48,
            first_bound_tokens=16,
        )
        .sem_join(
            kalypso.table(terms, name="reaction_terms"),
            "Does the {text} report the adverse reaction {term}?",
            index=kalypso.IndexJoin(
                left="{reactions}", right_column="term", k=5, accept_below=0.15, reject_above=0.65
            ),
        )
    )
    tables = {"articles": articles.to_dict("records"), "reaction_terms": terms.to_dict("records")}
    return Workload("biodex", scale, plan, list(articles["text"]), tables, ablations=STATIC_SPLITS)


def fever(scale: str = "quick", seed: int = 0) -> Workload:
    if scale == "quick":
        data = fever_data.generate(n=30, seed=seed)
    else:
        data = fever_data.generate(n=1000, seed=seed, n_passages=50_000)
    claims = data.claims[["claim_id", "claim"]]
    plan = (
        kalypso.table(claims, name="claims")
        .sem_map(
            "Write a short search query to check the {claim}.",
            "query",
            max_tokens=24,
            first_bound_tokens=12,
        )
        .index_search(list(data.corpus["text"]), "{claim} {query}", k=5, output_column="evidence")
        .sem_filter("Is the {claim} contradicted by the {evidence}?", negate=True)
    )
    return Workload(
        "fever",
        scale,
        plan,
        list(claims["claim"]),
        {"claims": claims.to_dict("records")},
        min_kv_tokens=2048,
    )


WORKLOADS: dict[str, Callable[..., Workload]] = {
    "biodex": biodex,
    "contractnli": contractnli,
    "fever": fever,
    "medec": medec,
}
