"""ContractNLI-shaped contracts: 17 hypotheses, labels that match the clauses, selectivity."""

from __future__ import annotations

import re

import pytest

from bench.datasets import _contract_clauses, contracts


def _fragment(template: str) -> str:
    """The longest slot-free piece of ``template`` (what must appear in rendered text)."""
    return max(re.split(r"\{\w+\}", template), key=len).strip()


@pytest.fixture(scope="module")
def data() -> contracts.ContractNLIData:
    return contracts.generate(200, seed=1)


def test_exactly_17_hypotheses() -> None:
    hypotheses = contracts.hypotheses_table()
    assert len(hypotheses) == 17
    assert hypotheses["hypothesis_id"].is_unique
    assert tuple(hypotheses.columns) == contracts.HYPOTHESIS_COLUMNS
    assert (
        "Receiving Party shall not disclose the fact that Agreement was agreed or negotiated."
        in set(hypotheses["hypothesis"])
    )


def test_columns_and_labels(data: contracts.ContractNLIData) -> None:
    assert tuple(data.contracts.columns) == contracts.CONTRACT_COLUMNS
    ids = set(data.hypotheses["hypothesis_id"])
    for row in data.contracts.itertuples():
        assert set(row.labels) == ids
        assert set(row.labels.values()) <= set(_contract_clauses.LABELS)
        assert row.is_nda == (row.doc_type == "nda")
        if not row.is_nda:
            assert set(row.labels.values()) == {"not_mentioned"}


def test_nda_fraction_is_exact() -> None:
    frame = contracts.generate(100, seed=2, nda_fraction=0.6).contracts
    assert frame["is_nda"].sum() == 60
    assert {"lease", "minutes"} <= set(frame["doc_type"])


def test_clause_text_matches_every_label(data: contracts.ContractNLIData) -> None:
    for row in data.contracts.itertuples():
        for hyp in _contract_clauses.HYPOTHESES:
            label = row.labels[hyp.hypothesis_id]
            entail = any(_fragment(t) in row.text for t in hyp.entail)
            contradict = any(_fragment(t) in row.text for t in hyp.contradict)
            assert (entail, contradict) == (label == "entailment", label == "contradiction")


def test_labels_follow_the_weights(data: contracts.ContractNLIData) -> None:
    pairs = contracts.gold_pairs(data.contracts[data.contracts["is_nda"]])
    shares = pairs["label"].value_counts(normalize=True)
    assert abs(shares["entailment"] - 0.5) < 0.05
    assert abs(shares["contradiction"] - 0.15) < 0.05
    assert len(contracts.gold_pairs(data.contracts)) == 17 * len(data.contracts)


def test_length_target_is_met_on_average() -> None:
    for target in (800, 1_613):
        frame = contracts.generate(80, seed=3, target_words=target).contracts
        words = frame["text"].str.split().str.len()
        assert abs(words.mean() - target) <= 0.25 * target
        for kind in contracts.DOC_TYPES:
            mean = words[frame["doc_type"] == kind].mean()
            assert abs(mean - target) <= 0.25 * target


def test_ndas_have_numbered_clauses_and_parties(data: contracts.ContractNLIData) -> None:
    nda = data.contracts[data.contracts["is_nda"]]["text"].iloc[0]
    assert re.search(r"^1\. Definitions$", nda, re.MULTILINE)
    assert re.search(r"^2\.1 ", nda, re.MULTILINE)
    assert "Receiving Party" in nda and "Disclosing Party" in nda
