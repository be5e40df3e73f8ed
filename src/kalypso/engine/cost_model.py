"""What an engine step costs, and how long a piece of work takes on it.

An engine runs in steps (continuous batching with chunked prefill, as vLLM does): each
step computes some prompt tokens and one token for every sequence that is decoding, up
to a budget of tokens and of sequences per step. One step costs::

    step_s + prefill_tokens * prefill_token_s + decode_seqs * decode_seq_s

The regime is in the ratios. On a GPU the fixed part dominates (Qwen3-8B on one H100:
7 ms a step, 0.05 ms a decoding sequence, 33 us a prefill token), so a step decoding
200 sequences costs about twice one decoding 1, and a schedule that keeps the batch
narrow to save prefill loses time. On 2 CPU cores the prefill token dominates (SmolLM2
in float32: 68 ms a step, 3.4 ms a sequence, 5.8 ms a prefill token), and saving prefill
is what pays.

:meth:`CostModel.predict_s` prices a :class:`Work` (prefill and decode tokens, how many
sequences may decode together, the longest chain of dependent decoding) by the least
steps it needs, the bound no schedule of that work beats::

    steps >= (prefill + decode tokens) / token budget      the step's token budget
    steps >= decode tokens / sequences decoding together    each step decodes one token each
    steps >= chain tokens                                   one token a step along a chain

Policies compare the predicted times of their options (``kalypso.core.time_model``); the
scheduler never sees a model it cannot print (:meth:`CostModel.explain`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Work:
    """What an option asks of the engine.

    Attributes:
        prefill_tokens: prompt tokens it computes (not found in the prefix cache).
        decode_tokens: tokens it generates.
        concurrency: the most sequences it lets decode together (memory, a window, the
            engine's sequences: the smallest).
        chain_tokens: tokens generated one after another along its longest chain of
            dependent calls (each waits for the previous one's answer).
    """

    prefill_tokens: int
    decode_tokens: int
    concurrency: int
    chain_tokens: int = 0

    def __post_init__(self) -> None:
        if min(self.prefill_tokens, self.decode_tokens, self.chain_tokens) < 0:
            raise ValueError(f"token counts cannot be negative: {self}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")


@dataclass(frozen=True)
class CostModel:
    """One engine's step cost (see the module docstring).

    Attributes:
        step_s: the fixed cost of a step that computes anything.
        prefill_token_s: each prompt token computed.
        decode_seq_s: each sequence generating one token in the step.
        max_step_tokens: tokens one step may compute (vLLM's ``max_num_batched_tokens``;
            None: not known, no bound).
        max_seqs: sequences one step may run (vLLM's ``max_num_seqs``; None: not known).
        source: where the numbers come from (a profile, a calibration, a user, a refit).
    """

    step_s: float
    prefill_token_s: float
    decode_seq_s: float
    max_step_tokens: int | None = None
    max_seqs: int | None = None
    source: str = ""

    def __post_init__(self) -> None:
        costs = (self.step_s, self.prefill_token_s, self.decode_seq_s)
        if not all(math.isfinite(c) and c >= 0 for c in costs):
            raise ValueError(f"step costs must be finite and >= 0, got {costs}")
        if sum(costs) <= 0:
            raise ValueError("a cost model must price something: every cost is 0")
        for name in ("max_step_tokens", "max_seqs"):
            limit = getattr(self, name)
            if limit is not None and limit < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {limit}")

    def step_time_s(self, prefill_tokens: int, decode_seqs: int) -> float:
        """One step computing ``prefill_tokens`` prompt tokens and a token for each of
        ``decode_seqs`` sequences."""
        return self.step_s + prefill_tokens * self.prefill_token_s + decode_seqs * self.decode_seq_s

    def least_steps(self, work: Work) -> int:
        """The fewest steps ``work`` can take (see the module docstring)."""
        width = work.concurrency if self.max_seqs is None else min(work.concurrency, self.max_seqs)
        steps = max(math.ceil(work.decode_tokens / width), work.chain_tokens)
        if self.max_step_tokens is not None:
            tokens = work.prefill_tokens + work.decode_tokens
            steps = max(steps, math.ceil(tokens / self.max_step_tokens))
        return max(steps, 1 if work.prefill_tokens or work.decode_tokens else 0)

    def predict_s(self, work: Work) -> float:
        """Seconds ``work`` takes at its least steps."""
        return (
            self.least_steps(work) * self.step_s
            + work.prefill_tokens * self.prefill_token_s
            + work.decode_tokens * self.decode_seq_s
        )

    def batching_gain(self, seqs: int) -> float:
        """How much faster ``seqs`` sequences decode in one step than one at a time: 1
        when a step costs only per sequence, ``seqs`` when it costs only per step."""
        return seqs * self.step_time_s(0, 1) / self.step_time_s(0, seqs)

    def prefill_tokens_per_step(self) -> float:
        """Prompt tokens that cost as much as a step's fixed part (inf: steps are free)."""
        return self.step_s / self.prefill_token_s if self.prefill_token_s else math.inf

    def with_limits(self, max_step_tokens: int | None, max_seqs: int | None) -> CostModel:
        """The same costs with an engine's batch limits."""
        return replace(self, max_step_tokens=max_step_tokens, max_seqs=max_seqs)

    def explain(self) -> str:
        """One line: the costs, the limits, what batching gives and where they come from."""
        limits = []
        if self.max_step_tokens is not None:
            limits.append(f"{self.max_step_tokens:,} tokens")
        if self.max_seqs is not None:
            limits.append(f"{self.max_seqs} sequences")
        rate = f"{1 / self.prefill_token_s:,.0f} tokens/s" if self.prefill_token_s else "free"
        text = (
            f"{self.step_s * 1e3:.2f} ms a step + {self.decode_seq_s * 1e3:.3f} ms a decoding"
            f" sequence + {self.prefill_token_s * 1e6:.1f} us a prefill token ({rate})"
        )
        if limits:
            text += f"; at most {' and '.join(limits)} a step"
        if self.max_seqs is not None and self.max_seqs > 1:
            text += (
                f"; {self.max_seqs} sequences decode {self.batching_gain(self.max_seqs):.1f}x"
                " faster together than one by one"
            )
        return f"{text} ({self.source})" if self.source else text

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CostModel:
        """A model written by :meth:`to_json`.

        Raises:
            ValueError: not such a model.
        """
        try:
            fields: Any = json.loads(text)
            return cls(**fields)
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a cost model: {exc}") from exc
