"""What flows through a task graph: one instance (a tuple of a table, one query of a
workflow batch) with its values and the outcomes of its LLM calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

InstanceKey = tuple[int, ...]


@dataclass(frozen=True)
class CallOutcome:
    """What one LLM call (with its continuations) produced.

    Attributes:
        text: the generated text (decoded from all output tokens).
        output_token_ids: every generated token id, continuations included.
        finish_reason: "stop" or "length" (at the call's cap).
        prompt_token_ids: the prompt of the call's first request (a later call that
            continues this one extends it with ``output_token_ids``).
        decision: for a constrained decision, the chosen choice; else None.
        margin: for a decision, log p(chosen) - log p(runner-up) (0 when unknown);
            small margins are near-ties that another batch or machine could flip.
        from_result_cache: the result cache answered the call's last request, so the
            engine computed nothing for it.
        logprobs: when the node asked for them, per generated token its own logprob
            and the most likely ``(token id, logprob)`` pairs at that position.
        error: the engine's error when the call failed and the run isolates call
            errors (``RunOptions.isolate_call_errors``); then the text is empty and
            ``finish_reason`` is ``"error"``.
    """

    text: str
    output_token_ids: tuple[int, ...]
    finish_reason: str
    prompt_token_ids: tuple[int, ...] = ()
    decision: str | None = None
    margin: float = 0.0
    from_result_cache: bool = False
    logprobs: tuple[tuple[float, tuple[tuple[int, float], ...]], ...] = ()
    error: str | None = None


@dataclass
class Instance:
    """One instance: ``key`` identifies it (``(i,)`` for input i, ``(i, j)`` for its j-th
    child after a fan-out); results are ordered by key.

    ``values`` is the front end's (a row's columns, a workflow query's inputs), in order;
    ``outputs`` holds each LLM node's outcome by node id; ``memo`` caches token ids the
    front end derives from values (shared with children, dropped per value on change);
    ``last_prompt`` is the last prompt sent for this instance (or its parent): the prefix
    the next call on it expects to find in the KV cache; ``generated_tokens`` counts the
    tokens the engine generated for its calls and its parent's (result-cache answers
    count none): on a chain of calls, as a query's pipeline is, the least engine steps
    they needed one after another.
    """

    key: InstanceKey
    values: dict[str, Any]
    outputs: dict[str, CallOutcome] = field(default_factory=dict)
    memo: dict[str, tuple[int, ...]] = field(default_factory=dict)
    last_prompt: tuple[int, ...] | None = None
    generated_tokens: int = 0

    def with_value(self, name: str, value: Any) -> Instance:
        """A copy with ``name`` set (appended if new); memoized ids of ``name`` dropped."""
        memo = {k: v for k, v in self.memo.items() if k != name}
        return Instance(
            self.key,
            {**self.values, name: value},
            dict(self.outputs),
            memo,
            self.last_prompt,
            self.generated_tokens,
        )

    def child(self, index: int, values: dict[str, Any]) -> Instance:
        """The child ``index`` of a fan-out, with ``values`` added after this one's."""
        return Instance(
            (*self.key, index),
            {**self.values, **values},
            dict(self.outputs),
            dict(self.memo),
            self.last_prompt,
            self.generated_tokens,
        )
