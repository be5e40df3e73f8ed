"""MEDEC-shaped notes: numbered sentences, exact error share, gold sentences in the text."""

from __future__ import annotations

import pandas as pd

from bench.datasets import clinical_notes


def _numbered(text: str) -> dict[int, str]:
    lines = (line.split(" ", 1) for line in text.splitlines())
    return {int(number): sentence for number, sentence in lines}


def test_columns_and_ids() -> None:
    notes = clinical_notes.generate()
    assert tuple(notes.columns) == clinical_notes.NOTE_COLUMNS
    assert notes["note_id"].tolist() == list(range(40))


def test_error_fraction_is_exact() -> None:
    notes = clinical_notes.generate(500, seed=3, error_fraction=0.4)
    assert notes["has_error"].sum() == 200


def test_error_sentence_is_the_numbered_sentence_and_differs_from_the_correction() -> None:
    notes = clinical_notes.generate(300, seed=4)
    for row in notes.itertuples():
        sentences = _numbered(row.text)
        assert list(sentences) == list(range(len(sentences)))
        if row.has_error:
            assert row.error_type in clinical_notes.ERROR_TYPES
            assert sentences[row.error_sentence_id] == row.error_sentence
            assert row.corrected_sentence and row.corrected_sentence != row.error_sentence
            assert row.corrected_sentence not in sentences.values()
        else:
            assert row.error_sentence_id == -1
            assert pd.isna(row.error_sentence) and pd.isna(row.corrected_sentence)
            assert pd.isna(row.error_type)


def test_every_error_type_occurs() -> None:
    notes = clinical_notes.generate(500, seed=5)
    assert set(notes["error_type"].dropna()) == set(clinical_notes.ERROR_TYPES)


def test_length_target_is_met_on_average() -> None:
    for target in (250, 300):
        words = clinical_notes.generate(200, seed=6, target_words=target)["text"].str.split()
        assert abs(words.str.len().mean() - target) <= 0.25 * target


def test_notes_read_like_clinical_notes() -> None:
    text = " ".join(clinical_notes.generate(50, seed=7)["text"])
    for marker in ("presents", "year-old", "was started on", "blood pressure"):
        assert marker in text.lower()
    assert clinical_notes.generate(50, seed=7)["condition"].nunique() >= 10
