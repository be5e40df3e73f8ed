"""The simulated model's outputs: a deterministic function of the prompt token ids.

Free-form and yes/no prompts:

* A prompt whose decoded tail (its last :data:`TAIL_TOKENS` tokens) contains the yes/no
  marker is answered "Yes" with probability ``yes_rate`` (decided by a stable hash of the
  whole prompt, so the same prompt always gets the same answer) or else "No", then the
  end-of-sequence token.
* Any other prompt gets between ``min_output_tokens`` and ``max_output_tokens`` words from
  a small vocabulary, then end-of-sequence.

Constrained decoding (``allowed_token_ids``): every output token is one of the allowed ids.

* A yes/no prompt whose allowed ids include ``encode("Yes")[0]`` and ``encode("No")[0]``
  gets the same Yes/No decision as above (so it follows ``yes_rate``) as its first token;
  after it comes end-of-sequence if that id is allowed, else tokens drawn as below.
* Otherwise each token is drawn from the allowed ids by a generator seeded with the
  prompt hash; drawing the end-of-sequence id ends the output (unless ``ignore_eos``).

Logprobs (``logprobs=N``), position by position, a deterministic function of the prompt
hash and the position:

* the candidates are the allowed ids, or without a constraint the generated token plus up
  to 15 alternatives (the first tokens of "Yes", "No" and the filler words);
* the generated token has logit 0 and the runner-up (the other answer of a yes/no
  decision, else a hash-chosen candidate) logit ``-gap``; the others ``-gap - 1``,
  ``-gap - 1.5``, ... in a hash-chosen order;
* ``gap`` is drawn per prompt and position: with probability ``near_tie_rate`` a near tie,
  uniform in ``[0, near_tie_margin_nats)``, else uniform in
  ``[0.5, 1.5) x decision_margin_nats``;
* logprobs are the log-softmax over the candidates (so under a constraint they are
  renormalised over the allowed ids, as vLLM's ``processed_logprobs`` are), and the
  result lists the N most likely, most likely first (ties by token id).

On top of that, as vLLM does: the output is cut at ``max_tokens`` (finish "length");
with ``ignore_eos`` exactly ``max_tokens`` tokens are generated (finish "length"); a stop
string ends the output at the token that completes it (finish "stop"), and the text is
cut just before the stop string. The end-of-sequence token, when generated, is the last
output token (vLLM returns it too) and is not part of the text.
"""

from __future__ import annotations

import hashlib
import math
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


Logprobs = tuple[tuple[tuple[int, float], ...], ...]
"""Per generated position, ``(token id, logprob)`` pairs, most likely first."""

_ALTERNATIVES = 15
"""Alternatives to the generated token in an unconstrained position's candidate set."""


@dataclass(frozen=True)
class SimCompletion:
    """What the simulated model generates for one request."""

    token_ids: tuple[int, ...]
    text: str
    finish_reason: FinishReason
    logprobs: Logprobs = ()
    """Empty unless logprobs were asked for; else one entry per output token."""


@dataclass(frozen=True)
class SimOutputModel:
    """Deterministic output generator; see the module docstring for the rules.

    Attributes:
        yes_rate: probability of "Yes" for a yes/no prompt, over distinct prompts.
        min_output_tokens: fewest words of a free-form answer.
        max_output_tokens: most words of a free-form answer.
        yes_no_marker: text whose presence (case-insensitive) in the prompt tail makes
            the prompt a yes/no question.
        decision_margin_nats: typical logprob gap between the generated token and the
            runner-up (a gap is uniform in ``[0.5, 1.5)`` times this).
        near_tie_rate: fraction of positions (over distinct prompts) whose gap is a near
            tie, for tests of decisions with a small margin.
        near_tie_margin_nats: near-tie gaps are uniform in ``[0, near_tie_margin_nats)``.
    """

    yes_rate: float = 0.5
    min_output_tokens: int = 8
    max_output_tokens: int = 48
    yes_no_marker: str = "yes or no"
    decision_margin_nats: float = 2.0
    near_tie_rate: float = 0.0
    near_tie_margin_nats: float = 0.01

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
        if not 0.0 <= self.near_tie_rate <= 1.0:
            raise ValueError(f"near_tie_rate must be in [0, 1], got {self.near_tie_rate}")
        if self.decision_margin_nats <= 0 or self.near_tie_margin_nats <= 0:
            raise ValueError("decision_margin_nats and near_tie_margin_nats must be > 0")

    def complete(
        self,
        prompt_token_ids: Sequence[int],
        *,
        max_tokens: int,
        tokenizer: Tokenizer,
        ignore_eos: bool = False,
        stop: Sequence[str] = (),
        allowed_token_ids: Sequence[int] | None = None,
        logprobs: int | None = None,
    ) -> SimCompletion:
        """The output for a prompt, after the constraint, ``max_tokens``, ``ignore_eos``
        and ``stop``, with ``logprobs`` per position when asked for."""
        prompt = tuple(prompt_token_ids)
        digest = hashlib.blake2b(repr(prompt).encode(), digest_size=16).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        eos = tokenizer.eos_token_id
        tail = tokenizer.decode(prompt[-TAIL_TOKENS:]).lower()
        yes_id, no_id = tokenizer.encode("Yes")[0], tokenizer.encode("No")[0]
        answer_yes = int.from_bytes(digest[8:], "big") / 2**64 < self.yes_rate
        is_yes_no = self.yes_no_marker.lower() in tail
        if allowed_token_ids is not None:
            allowed = list(dict.fromkeys(allowed_token_ids))
            tokens = self._constrained_tokens(
                allowed, rng, max_tokens, eos, ignore_eos, is_yes_no, answer_yes, yes_id, no_id
            )
            finish: FinishReason = (
                "stop" if tokens[-1] == eos and not ignore_eos and eos is not None else "length"
            )
        else:
            if is_yes_no:
                tokens = tokenizer.encode("Yes" if answer_yes else "No")
            else:
                num_words = rng.randint(self.min_output_tokens, self.max_output_tokens)
                tokens = tokenizer.encode(" ".join(rng.choices(_FILLER_WORDS, k=num_words)))
            if ignore_eos:
                while len(tokens) < max_tokens:
                    more = rng.choices(_FILLER_WORDS, k=max_tokens - len(tokens))
                    tokens += tokenizer.encode(" " + " ".join(more))
            elif eos is not None:
                tokens.append(eos)
            finish = "stop" if len(tokens) <= max_tokens and not ignore_eos else "length"
            tokens = tokens[:max_tokens]
        text = _decode_text(tokenizer, tokens, eos)
        stop = [s for s in stop if s]
        if any(s in text for s in stop):
            completion = _apply_stop(tokenizer, tokens, eos, stop)
        else:
            completion = SimCompletion(tuple(tokens), text, finish)
        if logprobs is None:
            return completion
        runner_up = {yes_id: no_id, no_id: yes_id} if is_yes_no else {}
        if allowed_token_ids is not None:
            candidates = list(dict.fromkeys(allowed_token_ids))
        else:
            candidates = list(
                dict.fromkeys(tokenizer.encode(word)[0] for word in ("Yes", "No", *_FILLER_WORDS))
            )
        table = tuple(
            self._position_logprobs(
                prompt,
                position,
                token,
                candidates,
                runner_up,
                logprobs,
                constrained=allowed_token_ids is not None,
            )
            for position, token in enumerate(completion.token_ids)
        )
        return SimCompletion(completion.token_ids, completion.text, completion.finish_reason, table)

    def _constrained_tokens(
        self,
        allowed: list[int],
        rng: random.Random,
        max_tokens: int,
        eos: int | None,
        ignore_eos: bool,
        is_yes_no: bool,
        answer_yes: bool,
        yes_id: int,
        no_id: int,
    ) -> list[int]:
        tokens: list[int] = []
        if is_yes_no and yes_id in allowed and no_id in allowed:
            tokens.append(yes_id if answer_yes else no_id)
            if eos is not None and eos in allowed and not ignore_eos and max_tokens > 1:
                tokens.append(eos)
        while len(tokens) < max_tokens and not (
            tokens and tokens[-1] == eos and eos is not None and not ignore_eos
        ):
            tokens.append(allowed[rng.randrange(len(allowed))])
        return tokens[:max_tokens]

    def _position_logprobs(
        self,
        prompt: tuple[int, ...],
        position: int,
        token: int,
        candidates: list[int],
        runner_up: dict[int, int],
        top_n: int,
        *,
        constrained: bool,
    ) -> tuple[tuple[int, float], ...]:
        digest = hashlib.blake2b(
            repr((prompt, position)).encode(), digest_size=16, person=b"kalypso-logprob"
        ).digest()
        u_tie = int.from_bytes(digest[:8], "big") / 2**64
        u_gap = int.from_bytes(digest[8:], "big") / 2**64
        if u_tie < self.near_tie_rate:
            gap = self.near_tie_margin_nats * u_gap
        else:
            gap = self.decision_margin_nats * (0.5 + u_gap)
        others = [c for c in candidates if c != token]
        if not constrained:
            others = others[:_ALTERNATIVES]
        random.Random(digest).shuffle(others)
        second = runner_up.get(token)
        if second in others:
            others.remove(second)
            others.insert(0, second)
        logits = {token: 0.0}
        for rank, other in enumerate(others):
            logits[other] = -gap if rank == 0 else -gap - 1.0 - 0.5 * (rank - 1)
        top = max(logits.values())
        norm = top + math.log(sum(math.exp(v - top) for v in logits.values()))
        ranked = sorted(((t, v - norm) for t, v in logits.items()), key=lambda p: (-p[1], p[0]))
        return tuple(ranked[:top_n])


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
