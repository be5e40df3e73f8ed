"""The workflow optimizer (the Helium paper's section 4) before lowering.

* **Pruning** happens by construction: a :class:`~kalypso.workflow.dsl.Workflow` holds only
  what its outputs need (it is built by walking back from them), so a branch nothing
  reads is never lowered, let alone run.
* **Common-subgraph elimination** merges values that compute the same thing, across the
  whole workflow (and across workflows submitted together: :func:`kalypso.workflow.run.arun`
  takes a list of them): equal texts, and LLM calls with the same
  conversation, cap and decision - **only when greedy**. A greedy call is a
  deterministic function of its prompt, so one call can answer for all its copies; a
  sampled call is not (two samples of one prompt are meant to differ, as in
  self-consistency), so sampled calls are never merged. Python steps are never merged
  (they may be impure), as in the paper's reference code.
* The **prompt/result cache** (:mod:`kalypso.core.result_cache`) then skips greedy calls
  whose exact prompt was answered before, at run time.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from kalypso.workflow.dsl import LLM, Conversation, Guard, Input, Text, Value


@dataclass
class Rewrites:
    """What the optimizer did, for ``explain()`` and reports."""

    merged: list[tuple[str, str]] = field(default_factory=list)
    """``(merged call, the call that answers for it)``."""

    def describe(self) -> list[str]:
        if not self.merged:
            return ["no common subgraphs"]
        return [f"merged {dup} into {rep} (same greedy call)" for dup, rep in self.merged]


class Canonicalizer:
    """Maps every value to the representative of its equivalence class."""

    def __init__(self, *, merge: bool = True) -> None:
        self.merge = merge
        self.rewrites = Rewrites()
        self._keys: dict[int, Hashable] = {}
        self._by_key: dict[Hashable, Value] = {}
        self._rep: dict[int, Value] = {}

    def representative(self, value: Value) -> Value:
        """The value that computes ``value`` (itself unless merged)."""
        self.key(value)
        return self._rep[id(value)]

    def key(self, value: Value) -> Hashable:
        found = self._keys.get(id(value))
        if found is not None:
            return found
        key: Hashable
        if isinstance(value, Input):
            key = ("input", value.name)
        elif isinstance(value, Text):
            key = ("text", tuple(self._part(p) for p in value.parts()))
        elif isinstance(value, LLM) and value.greedy and self.merge:
            key = (
                "llm",
                self._conversation(value.conversation),
                value.max_tokens,
                value.choices,
                self._guard(value.guard),
            )
        else:  # sampled calls, Python steps: each is its own
            key = ("unique", id(value))
        self._keys[id(value)] = key
        rep = self._by_key.setdefault(key, value)
        self._rep[id(value)] = rep
        if rep is not value and isinstance(value, LLM):
            assert isinstance(rep, LLM)
            self.rewrites.merged.append((value.name, rep.name))
        return key

    def _part(self, part: str | Value) -> Hashable:
        return part if isinstance(part, str) else self.key(part)

    def _conversation(self, conversation: Conversation) -> Hashable:
        return tuple((m.role, tuple(self._part(p) for p in m.parts)) for m in conversation.messages)

    def _guard(self, guard: Guard | None) -> Hashable:
        return None if guard is None else (self.key(guard.decider), guard.expected)


def distinct_llm_calls(values: list[Value], canon: Canonicalizer) -> list[LLM]:
    """The LLM calls left after merging, in order."""
    seen: set[int] = set()
    out: list[LLM] = []
    for value in values:
        rep = canon.representative(value)
        if isinstance(rep, LLM) and id(rep) not in seen:
            seen.add(id(rep))
            out.append(rep)
    return out
