"""A Hugging Face tokenizer behind :class:`kalypso.engine.protocol.Tokenizer`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kalypso.engine.protocol import Tokenizer


class HFTokenizer:
    """Adapts a Hugging Face tokenizer to :class:`kalypso.engine.protocol.Tokenizer`."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self._hf = hf_tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self._hf.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._hf.decode(list(token_ids), skip_special_tokens=True))

    @property
    def eos_token_id(self) -> int | None:
        eos = self._hf.eos_token_id
        return int(eos) if eos is not None else None


def load_hf_tokenizer(model_path: str) -> Tokenizer:
    """The model's own tokenizer, loaded with ``transformers`` (no engine needed)."""
    from transformers import AutoTokenizer

    return HFTokenizer(AutoTokenizer.from_pretrained(model_path))
