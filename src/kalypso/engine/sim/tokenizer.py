"""A deterministic word-level tokenizer, the simulated engine's default (no model needed).

Text is split into pieces: a word with the whitespace before it, a punctuation mark with
the whitespace before it, or trailing whitespace. Each piece's id is a stable 31-bit hash
of the piece, so the same text gets the same ids in every process and every instance, and
``decode(encode(text)) == text`` exactly.

Two different pieces may in principle share an id (a 31-bit hash: about one collision
expected per 65,000 distinct pieces); decoding then returns the piece seen first.

The tokenizer has no control tokens besides end-of-sequence (id 2, never produced by
:meth:`WordTokenizer.encode`): :meth:`WordTokenizer.encode_control` is the same as
``encode``, and the chat markers :meth:`WordTokenizer.render_chat` writes are ordinary
pieces. Data can therefore spell the markers, which matters nowhere since no model reads
them; on a real model :class:`kalypso.engine.hf_tokenizer.HFTokenizer` keeps them apart.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence

_PIECE_RE = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")
_FIRST_PIECE_ID = 16
"""Ids below this are reserved for special tokens."""
_PIECE_ID_SPAN = 2**31 - _FIRST_PIECE_ID

EOS_TOKEN_ID = 2
UNKNOWN_TEXT = "<unk>"


def piece_token_id(piece: str) -> int:
    """The id of one piece: a stable hash in ``[16, 2**31)``."""
    digest = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
    return _FIRST_PIECE_ID + int.from_bytes(digest, "big") % _PIECE_ID_SPAN


class WordTokenizer:
    """Word-level tokenizer satisfying :class:`kalypso.engine.protocol.Tokenizer`.

    ``decode`` skips the end-of-sequence token and renders ids this instance never
    encoded as ``"<unk>"`` (prompts built from arbitrary ids still decode).
    """

    def __init__(self) -> None:
        self._pieces_by_id: dict[int, str] = {}

    @property
    def eos_token_id(self) -> int:
        return EOS_TOKEN_ID

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        ids: list[int] = []
        for piece in _PIECE_RE.findall(text):
            token_id = piece_token_id(piece)
            self._pieces_by_id.setdefault(token_id, piece)
            ids.append(token_id)
        return ids

    def encode_control(self, text: str) -> list[int]:
        """The same as :meth:`encode` (this tokenizer has no control tokens to recognise)."""
        return self.encode(text)

    def render_chat(
        self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool
    ) -> str:
        """A ChatML-like rendering: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per
        message, then ``<|im_start|>assistant\\n`` when ``add_generation_prompt``. Every
        role is kept as given (the system role included)."""
        text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def pieces_for(self, token_ids: Iterable[int]) -> dict[int, str]:
        """The pieces of those of ``token_ids`` this instance has encoded: what another
        instance (in another process) needs to :meth:`learn` to decode them."""
        return {i: self._pieces_by_id[i] for i in token_ids if i in self._pieces_by_id}

    def learn(self, pieces: Mapping[int, str]) -> None:
        """Decode these ids as these pieces from now on (another instance's
        :meth:`pieces_for`); an id already known keeps its piece."""
        for token_id, piece in pieces.items():
            self._pieces_by_id.setdefault(token_id, piece)

    def decode(self, token_ids: Sequence[int]) -> str:
        return "".join(
            self._pieces_by_id.get(token_id, UNKNOWN_TEXT)
            for token_id in token_ids
            if token_id != EOS_TOKEN_ID
        )
