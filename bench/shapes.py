"""The Helium paper's prompt shapes (its Figure 10): MapRed and Debate over synthetic
questions on shared contexts, at given token lengths, for the simulator.

A shape is four lengths in tokens: the agents' system prompt, a context, a question and
an output. A batch is ``queries`` questions, ``questions_per_context`` of them on each
context (the paper: 100 queries, built to mirror TAT-QA, where several questions share a
document). Every word of the generated text is one token of the simulator's word-level
tokenizer, so the lengths are exact there (the chat template adds a few marker tokens).
No two contexts or questions share a word, so the only shared prefixes are the ones the
shape intends: the system prompt across every call, a context across its questions, a
conversation across a debate's rounds.

=====  ======  =======  ========  ======
shape  system  context  question  output
=====  ======  =======  ========  ======
P1     1,024     128       128       64
P2     1,024     512       512      256
P3     1,024   1,024     1,024      512
P4     2,048     256       256      128
P5     2,048   1,024     1,024      512
P6     2,048   2,048     2,048    1,024
=====  ======  =======  ========  ======
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kalypso.workflow.library import QAData, Sizes, Workload
from kalypso.workflow.library.workflows import debate, mapred


@dataclass(frozen=True)
class Shape:
    """Token lengths of one prompt shape."""

    name: str
    system_tokens: int
    context_tokens: int
    question_tokens: int
    output_tokens: int

    def describe(self) -> str:
        return (
            f"{self.name}: {self.system_tokens}/{self.context_tokens}/"
            f"{self.question_tokens}/{self.output_tokens}"
        )


SHAPES = {
    s.name: s
    for s in (
        Shape("P1", 1024, 128, 128, 64),
        Shape("P2", 1024, 512, 512, 256),
        Shape("P3", 1024, 1024, 1024, 512),
        Shape("P4", 2048, 256, 256, 128),
        Shape("P5", 2048, 1024, 1024, 512),
        Shape("P6", 2048, 2048, 2048, 1024),
    )
}
"""The paper's six shapes: system prompt / context / question / output tokens."""

QUERIES = 100
QUESTIONS_PER_CONTEXT = 6
MAPRED_EXPERTS = 7
"""The paper's MapRed on TAT-QA has 7 experts; its Debate 3 agents and 2 rounds."""
DEBATE_AGENTS = 3


def _words(prefix: str, count: int) -> str:
    return " ".join(f"{prefix}w{i}" for i in range(count))


def qa_data(
    shape: Shape, queries: int = QUERIES, per_context: int = QUESTIONS_PER_CONTEXT
) -> QAData:
    """``queries`` questions of ``shape``, ``per_context`` on each context.

    Raises:
        ValueError: fewer than one query or question per context.
    """
    if queries < 1 or per_context < 1:
        raise ValueError(f"queries ({queries}) and per_context ({per_context}) must be >= 1")
    contexts = [
        _words(f"c{c}", shape.context_tokens) for c in range(math.ceil(queries / per_context))
    ]
    return QAData(
        system=_words("s", shape.system_tokens),
        context=tuple(contexts[q // per_context] for q in range(queries)),
        question=tuple(_words(f"q{q}", shape.question_tokens) for q in range(queries)),
    )


WORKFLOWS = ("mapred", "debate")


def shaped(workflow: str, shape: Shape, queries: int = QUERIES) -> Workload:
    """MapRed (7 experts) or Debate (3 agents, 2 rounds) over ``shape``'s data, every
    call capped at the shape's output length.

    Raises:
        KeyError: another workflow.
    """
    data = qa_data(shape, queries)
    if workflow == "mapred":
        return mapred(Sizes(queries, MAPRED_EXPERTS, max_tokens=shape.output_tokens), data)
    if workflow == "debate":
        return debate(Sizes(queries, DEBATE_AGENTS, max_tokens=shape.output_tokens), data)
    raise KeyError(f"shaped workflows are {WORKFLOWS}, not {workflow!r}")
