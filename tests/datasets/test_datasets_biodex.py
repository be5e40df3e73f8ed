"""BioDEX-shaped articles: gold reactions are terms of the table and named in the text."""

from __future__ import annotations

import pytest

from bench.datasets import _reaction_terms, biodex


def test_columns_and_sizes() -> None:
    data = biodex.generate()
    assert tuple(data.articles.columns) == biodex.ARTICLE_COLUMNS
    assert tuple(data.reaction_terms.columns) == biodex.TERM_COLUMNS
    assert len(data.articles) == 12
    assert len(data.reaction_terms) == 2_000
    assert data.reaction_terms["term_id"].tolist() == list(range(2_000))


def test_terms_are_unique_short_and_many() -> None:
    terms = biodex.generate(1, n_terms=11_271).reaction_terms["term"]
    assert terms.is_unique and len(terms) == 11_271
    assert 2.0 <= terms.str.split().str.len().mean() <= 4.0
    assert len(_reaction_terms.all_terms()) >= 11_271


def test_every_gold_reaction_is_a_term_and_is_mentioned() -> None:
    data = biodex.generate(100, seed=2, n_terms=3_000)
    terms = set(data.reaction_terms["term"])
    for row in data.articles.itertuples():
        assert 1 <= len(row.reactions) <= 4
        assert len(set(row.reactions)) == len(row.reactions)
        for reaction in row.reactions:
            assert reaction in terms
            assert _reaction_terms.mention(reaction) in row.text


def test_small_vocabularies_still_hold_the_gold_reactions() -> None:
    data = biodex.generate(20, seed=3, n_terms=50)
    terms = set(data.reaction_terms["term"])
    assert all(set(r) <= terms for r in data.articles["reactions"])


def test_length_target_is_met_on_average() -> None:
    for target in (700, 2_015):
        words = biodex.generate(60, seed=4, target_words=target).articles["text"].str.split()
        assert abs(words.str.len().mean() - target) <= 0.25 * target


def test_articles_have_the_sections_of_a_case_report() -> None:
    text = biodex.generate(1).articles["text"][0]
    for heading in ("Abstract", "Introduction", "Case presentation", "Discussion", "Conclusion"):
        assert f"\n{heading}\n" in text


def test_invalid_arguments_are_rejected() -> None:
    with pytest.raises(ValueError):
        biodex.generate(1, n_terms=10**6)
    with pytest.raises(ValueError):
        biodex.generate(1, reactions_per_article=(0, 2))
