"""FEVER-shaped claims: gold passages exist and decide the claim; lengths follow Table 2."""

from __future__ import annotations

import pytest

from bench.datasets import fever


@pytest.fixture(scope="module")
def data() -> fever.FEVERData:
    return fever.generate(300, seed=1)


def test_columns_and_sizes(data: fever.FEVERData) -> None:
    assert tuple(data.claims.columns) == fever.CLAIM_COLUMNS
    assert tuple(data.corpus.columns) == fever.PASSAGE_COLUMNS
    assert len(data.claims) == 300
    assert len(data.corpus) == 6_000
    assert data.corpus["passage_id"].tolist() == list(range(6_000))
    assert data.corpus["title"].is_unique


def test_every_gold_passage_exists_and_names_the_claims_subject(data: fever.FEVERData) -> None:
    ids = set(data.corpus["passage_id"])
    titles = data.corpus.set_index("passage_id")["title"]
    for row in data.claims.itertuples():
        assert 1 <= len(row.gold_passage_ids) <= 2
        assert set(row.gold_passage_ids) <= ids
        assert titles[row.gold_passage_ids[0]] in row.claim


def test_supported_relational_claims_have_both_passages(data: fever.FEVERData) -> None:
    passages = data.corpus.set_index("passage_id")
    pairs = [r for r in data.claims.itertuples() if len(r.gold_passage_ids) == 2]
    assert pairs
    for row in pairs:
        assert row.label == "SUPPORTS"
        first, second = (passages.loc[i] for i in row.gold_passage_ids)
        assert second["title"] in first["text"]
        assert first["title"] in second["text"]


def test_label_fraction_is_exact() -> None:
    claims = fever.generate(200, seed=2, supports_fraction=0.3).claims
    assert (claims["label"] == "SUPPORTS").sum() == 60
    assert set(claims["label"]) == set(fever.LABELS)


def test_lengths_follow_table_2(data: fever.FEVERData) -> None:
    claim_words = data.claims["claim"].str.split().str.len().mean()
    assert abs(claim_words - 11.8 / 1.33) <= 0.25 * 11.8 / 1.33
    passage_words = data.corpus["text"].str.split().str.len().mean()
    assert abs(passage_words - 95) <= 0.25 * 95


def test_corpus_size_is_a_parameter() -> None:
    assert len(fever.generate(10, n_passages=1_000).corpus) == 1_000
    with pytest.raises(ValueError):
        fever.generate(100, n_passages=50)
