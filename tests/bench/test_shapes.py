"""The Helium paper's prompt shapes (bench.shapes): exact token lengths on the simulator's
tokenizer, shared contexts, and the two workflows built over them."""

from __future__ import annotations

import pytest

from bench.shapes import SHAPES, Shape, qa_data, shaped
from kalypso.core.graph import LLMNode
from kalypso.engine.sim import WordTokenizer
from kalypso.workflow.library import QAData
from kalypso.workflow.lower import lower


def test_lengths_are_exact_in_simulator_tokens() -> None:
    tokenizer = WordTokenizer()
    for shape in SHAPES.values():
        data = qa_data(shape, queries=7, per_context=3)
        assert len(tokenizer.encode(data.system)) == shape.system_tokens
        assert {len(tokenizer.encode(c)) for c in data.context} == {shape.context_tokens}
        assert {len(tokenizer.encode(q)) for q in data.question} == {shape.question_tokens}


def test_questions_share_contexts_and_nothing_else() -> None:
    data = qa_data(Shape("tiny", 4, 5, 3, 2), queries=7, per_context=3)
    assert len(set(data.context)) == 3  # 3 + 3 + 1 questions
    assert data.context[0] == data.context[2] != data.context[3]
    assert len(set(data.question)) == 7
    words = [set(text.split()) for text in (data.system, *set(data.context), *data.question)]
    assert sum(len(w) for w in words) == len(set().union(*words))  # no word in two texts


def test_workflows_have_the_papers_agents_and_caps() -> None:
    shape = SHAPES["P1"]
    for name, calls in (("mapred", 8), ("debate", 6)):
        job = shaped(name, shape, queries=12)
        assert job.queries == 12 and not job.expected
        nodes = [n for n in lower(job.workflows).graph.nodes if isinstance(n, LLMNode)]
        assert len(nodes) == calls
        assert {n.max_tokens for n in nodes} == {shape.output_tokens}


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="queries"):
        qa_data(SHAPES["P1"], queries=0)
    with pytest.raises(KeyError, match="shaped workflows"):
        shaped("reflect", SHAPES["P1"])
    with pytest.raises(ValueError, match="one each"):
        QAData("system", ("a",), ("q1", "q2"))
