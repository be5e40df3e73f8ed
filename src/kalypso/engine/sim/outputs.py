"""The simulated model's outputs: a deterministic function of the prompt token ids.

A prompt whose decoded tail (its last :data:`TAIL_TOKENS` tokens) contains the yes/no
marker is answered "Yes" with probability ``yes_rate`` (decided by a stable hash of the
whole prompt, so the same prompt always gets the same answer) or else "No", then the
end-of-sequence token. Any other prompt gets between ``min_output_tokens`` and
``max_output_tokens`` words from a small vocabulary, then end-of-sequence.

On top of that, as vLLM does: the output is cut at ``max_tokens`` (finish "length");
with ``ignore_eos`` exactly ``max_tokens`` tokens are generated (finish "length"); a stop
string ends the output at the token that completes it (finish "stop"), and the text is
cut just before the stop string. The end-of-sequence token, when generated, is the last
output token (vLLM returns it too) and is not part of the text.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from kalypso.engine.protocol import FinishReason, Tokenizer

TAIL_TOKENS = 64
"""How many trailing prompt tokens are searched for the yes/no marker."""

# fmt: off
_FILLER_WORDS = (
    "the", "result", "shows", "that", "a", "record", "is", "relevant", "to", "this",
    "query", "because", "it", "mentions", "key", "terms", "and", "matches", "criteria",
    "in", "several", "ways", "overall", "evidence", "suggests", "strong", "support",
    "for", "answer", "given", "context", "data",
)
# fmt: on


@dataclass(frozen=True)
class SimCompletion:
    """What the simulated model generates for one request."""

    token_ids: tuple[int, ...]
    text: str
    finish_reason: FinishReason


@dataclass(frozen=True)
class SimOutputModel:
    """Deterministic output generator; see the module docstring for the rules.

    Attributes:
        yes_rate: probability of "Yes" for a yes/no prompt, over distinct prompts.
        min_output_tokens: fewest words of a free-form answer.
        max_output_tokens: most words of a free-form answer.
        yes_no_marker: text whose presence (case-insensitive) in the prompt tail makes
            the prompt a yes/no question.
    """

    yes_rate: float = 0.5
    min_output_tokens: int = 8
    max_output_tokens: int = 48
    yes_no_marker: str = "yes or no"

    def __post_init__(self) -> None:
        if not 0.0 <= self.yes_rate <= 1.0:
            raise ValueError(f"yes_rate must be in [0, 1], got {self.yes_rate}")
        if not 1 <= self.min_output_tokens <= self.max_output_tokens:
            raise ValueError(
                "need 1 <= min_output_tokens <= max_output_tokens, got"
                f" {self.min_output_tokens} and {self.max_output_tokens}"
            )
        if not self.yes_no_marker:
            raise ValueError("yes_no_marker must be non-empty")

    def complete(
        self,
        prompt_token_ids: Sequence[int],
        *,
        max_tokens: int,
        tokenizer: Tokenizer,
        ignore_eos: bool = False,
        stop: Sequence[str] = (),
    ) -> SimCompletion:
        """The output for a prompt, after ``max_tokens``, ``ignore_eos`` and ``stop``."""
        digest = hashlib.blake2b(repr(tuple(prompt_token_ids)).encode(), digest_size=16).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        eos = tokenizer.eos_token_id
        tail = tokenizer.decode(prompt_token_ids[-TAIL_TOKENS:]).lower()
        if self.yes_no_marker.lower() in tail:
            uniform = int.from_bytes(digest[8:], "big") / 2**64
            tokens = tokenizer.encode("Yes" if uniform < self.yes_rate else "No")
        else:
            num_words = rng.randint(self.min_output_tokens, self.max_output_tokens)
            tokens = tokenizer.encode(" ".join(rng.choices(_FILLER_WORDS, k=num_words)))
        if ignore_eos:
            while len(tokens) < max_tokens:
                more = rng.choices(_FILLER_WORDS, k=max_tokens - len(tokens))
                tokens += tokenizer.encode(" " + " ".join(more))
        elif eos is not None:
            tokens.append(eos)
        finish: FinishReason = "stop" if len(tokens) <= max_tokens and not ignore_eos else "length"
        tokens = tokens[:max_tokens]
        text = _decode_text(tokenizer, tokens, eos)
        stop = [s for s in stop if s]
        if any(s in text for s in stop):
            return _apply_stop(tokenizer, tokens, eos, stop)
        return SimCompletion(tuple(tokens), text, finish)


def _decode_text(tokenizer: Tokenizer, tokens: Sequence[int], eos: int | None) -> str:
    return tokenizer.decode([t for t in tokens if t != eos])


def _apply_stop(
    tokenizer: Tokenizer, tokens: list[int], eos: int | None, stop: Sequence[str]
) -> SimCompletion:
    """Cut at the first token whose text completes a stop string (vLLM's check)."""
    for end in range(1, len(tokens) + 1):
        text = _decode_text(tokenizer, tokens[:end], eos)
        positions = [text.find(s) for s in stop if s in text]
        if positions:
            return SimCompletion(tuple(tokens[:end]), text[: min(positions)], "stop")
    raise AssertionError("unreachable: a stop string was found in the full text")
