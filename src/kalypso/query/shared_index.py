"""The process-wide index cache the built-in operators use.

Vector indexes are read-only once built and keyed by their exact texts, so sharing them
between queries is safe (unlike query state, which is per query). An index over a right
table or corpus is built on first use and reused by every later plan over the same texts.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from kalypso.query.index import IndexCache, MiniLMEmbedder, VectorIndex


@functools.cache
def shared_index_cache() -> IndexCache:
    return IndexCache(max_entries=16)


@functools.cache
def default_embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def index_for(texts: Sequence[str]) -> VectorIndex:
    """The index over ``texts`` with the default embedder, built once per distinct list."""
    return shared_index_cache().get_or_build(list(texts), default_embedder())
