"""Token-exact prompts: messages of token-id segments, rendered through the model's own
chat template, built once per call.

The chat template is read, not hard-coded: :class:`ChatLayout` renders the template once
per sequence of roles with sentinel contents and splits the text at the sentinels. The
pieces between contents are the *message boundaries* (``"<|im_start|>user\\n"``,
``"<|im_end|>\\n<|im_start|>assistant\\n"`` for ChatML); they are tokenized with
``encode_control`` (their special tokens become control ids), and every content segment
with ``encode`` (data: a special-token string in it stays ordinary text). Each piece is
tokenized on its own and the ids are concatenated, so two prompts that agree on their
first messages share those tokens exactly::

    [ boundary | system text | boundary | context ids | task text | boundary + gen. prompt ]
    '------------------ prefix ----------------------'   '------ per call --------------'

A :class:`Prompt` knows its length without building its ids (sizing uses the length) and
builds its ids at most once (the request uses them); :attr:`ChatLayout.builds` counts the
builds, so a test can check that every call's prompt is built exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kalypso.engine.blocks import chain_keys
from kalypso.engine.protocol import Tokenizer

logger = logging.getLogger(__name__)

_SENTINEL = "KALYPSOSENTINEL{}X"

TokenIds = tuple[int, ...]


class ChatTemplateError(ValueError):
    """The model's chat template cannot be split into boundaries and contents."""


Messages = Sequence[tuple[str, Sequence[TokenIds]]]
"""``(role, content segments)`` per message."""


class ChatLayout:
    """The model's chat format, as token-id boundaries per role sequence (memoized)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._boundaries: dict[tuple[tuple[str, ...], bool], tuple[TokenIds, ...]] = {}
        self._texts: dict[str, TokenIds] = {}
        self.builds = 0
        """Prompts built so far (each :class:`Prompt` builds its ids at most once)."""

    def boundaries(
        self, roles: tuple[str, ...], *, add_generation_prompt: bool = True
    ) -> tuple[TokenIds, ...]:
        """``len(roles) + 1`` boundary pieces: before the first content, between
        contents, and after the last (with the generation prompt when asked).

        Raises:
            ChatTemplateError: the template drops or reorders message contents.
        """
        cache_key = (roles, add_generation_prompt)
        found = self._boundaries.get(cache_key)
        if found is not None:
            return found
        sentinels = [_SENTINEL.format(i) for i in range(len(roles))]
        text = self.tokenizer.render_chat(
            list(zip(roles, sentinels, strict=True)), add_generation_prompt=add_generation_prompt
        )
        pieces: list[str] = []
        rest = text
        for sentinel in sentinels:
            if rest.count(sentinel) != 1:
                raise ChatTemplateError(
                    f"the chat template renders message contents unexpectedly (roles {roles});"
                    f" rendered: {text[:300]!r}"
                )
            before, rest = rest.split(sentinel)
            pieces.append(before)
        pieces.append(rest)
        found = tuple(tuple(self.tokenizer.encode_control(p)) if p else () for p in pieces)
        self._boundaries[cache_key] = found
        logger.debug("chat boundaries for %s: %s", roles, [len(p) for p in found])
        return found

    def text_ids(self, text: str) -> TokenIds:
        """Data ids of a static text (an instruction, a system prompt), memoized."""
        ids = self._texts.get(text)
        if ids is None:
            ids = tuple(self.tokenizer.encode(text))
            self._texts[text] = ids
        return ids


class Prompt:
    """One call's prompt: boundaries and content segments, built into ids once.

    Args:
        layout: the chat layout (boundaries, build counter).
        messages: ``(role, segments)`` per message, contents as data token ids.
        prefix_segments: how many leading content segments (counted over all messages)
            form the prefix dependent calls reuse (see :attr:`prefix_tokens`).
    """

    __slots__ = ("_ids", "_keys", "_layout", "_parts", "_prefix_tokens", "length_tokens")

    def __init__(self, layout: ChatLayout, messages: Messages, *, prefix_segments: int = 0) -> None:
        roles = tuple(role for role, _ in messages)
        bounds = layout.boundaries(roles)
        parts: list[TokenIds] = []
        prefix_tokens = 0
        counted = 0
        for boundary, (_, segments) in zip(bounds, messages, strict=False):
            parts.append(boundary)
            for segment in segments:
                parts.append(segment)
                counted += 1
                if counted == prefix_segments:
                    prefix_tokens = sum(map(len, parts))
        parts.append(bounds[-1])
        self._layout = layout
        self._parts = parts
        self._ids: TokenIds | None = None
        self._keys: tuple[int, tuple[int, ...]] | None = None
        self._prefix_tokens = prefix_tokens
        self.length_tokens = sum(map(len, parts))

    @classmethod
    def from_ids(cls, layout: ChatLayout, ids: TokenIds, prefix_tokens: int = 0) -> Prompt:
        """A prompt given as ids (a continuation: an earlier prompt plus its output); they
        are already built, so this is not counted as a build."""
        prompt = cls.__new__(cls)
        prompt._layout = layout
        prompt._parts = [ids]
        prompt._ids = ids
        prompt._keys = None
        prompt._prefix_tokens = prefix_tokens
        prompt.length_tokens = len(ids)
        return prompt

    @property
    def prefix_tokens(self) -> int:
        """Tokens of the prefix that calls depending on this one start with (its first
        boundaries and its ``prefix_segments`` content segments)."""
        return self._prefix_tokens

    @property
    def ids(self) -> TokenIds:
        """The prompt's token ids (built on first use, then reused)."""
        if self._ids is None:
            self._layout.builds += 1
            out: list[int] = []
            for part in self._parts:
                out.extend(part)
            self._ids = tuple(out)
        return self._ids

    def block_keys(self, block_size_tokens: int) -> tuple[int, ...]:
        """Chained keys of the prompt's full blocks (as the engine's prefix cache chains
        its block hashes; Python's tuple hash, compared within this process only)."""
        if self._keys is None or self._keys[0] != block_size_tokens:
            self._keys = (block_size_tokens, tuple(chain_keys(self.ids, block_size_tokens)))
        return self._keys[1]
