"""Lotus's embedding operators that read no LLM: ``sem_search``, ``sem_index`` and
``load_sem_index``, on Kalypso's shared FAISS index (MiniLM embeddings, cosine).

Lotus needs ``sem_index`` (and a retrieval model and vector store in its settings) before
a search; here the index over a column's texts is built on first use and shared by every
later search or index join over the same texts, so ``sem_index`` is optional. Scores are
cosine similarities of the bundled embedding model, not Lotus's retrieval model's.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from kalypso.core.errors import PlanError
from kalypso.pandas.errors import LotusArgumentError, check_positive_int, check_text_argument
from kalypso.query.index import VectorIndex
from kalypso.query.shared_index import index_for
from kalypso.query.templates import value_to_text


def column_index(method: str, frame: pd.DataFrame, col_name: Any) -> VectorIndex:
    """The index over ``frame[col_name]``'s texts (built once per distinct list)."""
    if not isinstance(col_name, str) or col_name not in frame.columns:
        raise LotusArgumentError(method, "col_name", f"column {col_name!r} not found in DataFrame")
    if len(frame) == 0:
        raise LotusArgumentError(method, "col_name", "the DataFrame has no rows to index")
    try:
        texts = [value_to_text(v, col_name, row) for row, v in enumerate(frame[col_name])]
    except PlanError as exc:
        raise LotusArgumentError(method, "col_name", str(exc)) from None
    return index_for(texts)


def sem_search(
    frame: pd.DataFrame, col_name: Any, query: Any, K: Any, *, return_scores: bool, suffix: str
) -> pd.DataFrame:
    """The ``K`` rows whose ``col_name`` is most similar to ``query``, most similar
    first, with their own labels; ``vec_scores<suffix>`` holds the similarity."""
    if K is None:
        raise LotusArgumentError(
            "sem_search", "K", "K or n_rerank must be provided (n_rerank is refused)"
        )
    k = check_positive_int("sem_search", "K", K)
    text = check_text_argument("sem_search", "query", query)
    hits = column_index("sem_search", frame, col_name).search([text], k)[0]
    found = frame.iloc[[hit.row for hit in hits]]
    if return_scores:
        found = found.assign(**{f"vec_scores{suffix}": [1.0 - hit.distance for hit in hits]})
    return found


def sem_index(frame: pd.DataFrame, col_name: Any, index_dir: Any) -> pd.DataFrame:
    """Build the index over ``col_name`` now (in memory; nothing is written to
    ``index_dir``) and record ``index_dir`` in ``frame.attrs["index_dirs"]`` as Lotus
    does; returns ``frame`` itself."""
    column_index("sem_index", frame, col_name)
    return load_sem_index(frame, col_name, index_dir)


def load_sem_index(frame: pd.DataFrame, col_name: Any, index_dir: Any) -> pd.DataFrame:
    """Record ``index_dir`` for ``col_name`` in ``frame.attrs["index_dirs"]``; returns
    ``frame`` itself (searches build their index from the column's texts)."""
    if not isinstance(col_name, str) or col_name not in frame.columns:
        raise LotusArgumentError(
            "load_sem_index", "col_name", f"column {col_name!r} not found in DataFrame"
        )
    frame.attrs.setdefault("index_dirs", {})[col_name] = str(index_dir)
    return frame
