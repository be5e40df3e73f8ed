"""Batch files with the sharing real ones have, for the batch benchmark.

``documents`` documents, each asked ``questions`` questions; a few system prompts and a
few few-shot blocks, each document under one of each. A line is a chat request::

    [system: one of the system prompts]
    [user: one of the few-shot blocks | the document | the question]

and the lines are shuffled (files are written in no useful order). Text is drawn from a
fixed word list, so a word is one or two tokens of a real tokenizer and one of the
simulator's; lengths are given in words.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TEXT = (
    "the report states that revenue grew in each quarter while costs fell as the company"
    " expanded into new markets and hired staff for its research group which filed patents"
    " on battery storage solar panels wind turbines and grid software sold to utilities"
    " across europe asia and america under contracts signed for five years with options to"
    " renew at market prices subject to audit by independent firms appointed by the board"
)
_WORDS = tuple(_TEXT.split(" "))


@dataclass(frozen=True)
class BatchShape:
    """How a generated file shares: its sizes in words, its counts."""

    documents: int
    questions: int
    systems: int = 3
    fewshots: int = 2
    system_words: int = 40
    fewshot_words: int = 60
    document_words: int = 300
    question_words: int = 12
    max_tokens: int = 16

    @property
    def requests(self) -> int:
        return self.documents * self.questions

    def describe(self) -> str:
        return (
            f"{self.documents} documents x {self.questions} questions ({self.requests}"
            f" requests), {self.systems} system prompts, {self.fewshots} few-shot blocks;"
            f" words: system {self.system_words}, few-shot {self.fewshot_words}, document"
            f" {self.document_words}, question {self.question_words}; max_tokens"
            f" {self.max_tokens}"
        )


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def batch_lines(shape: BatchShape, model: str, seed: int = 0) -> list[dict[str, Any]]:
    """The file's lines (greedy chat requests), shuffled with ``seed``."""
    rng = random.Random(seed)
    systems = [f"System {s}. " + _text(rng, shape.system_words) for s in range(shape.systems)]
    fewshots = [f"Examples {f}. " + _text(rng, shape.fewshot_words) for f in range(shape.fewshots)]
    lines = []
    for d in range(shape.documents):
        document = f"Document {d}. " + _text(rng, shape.document_words)
        for q in range(shape.questions):
            question = f"Question {q}: " + _text(rng, shape.question_words) + "?"
            user = f"{fewshots[d % shape.fewshots]}\n\n{document}\n\n{question}"
            lines.append(
                {
                    "custom_id": f"doc{d}-q{q}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {
                        "model": model,
                        "messages": [
                            {"role": "system", "content": systems[d % shape.systems]},
                            {"role": "user", "content": user},
                        ],
                        "max_tokens": shape.max_tokens,
                        "temperature": 0,
                    },
                }
            )
    rng.shuffle(lines)
    return lines


def write_batch(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path
