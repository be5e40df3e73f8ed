"""A Hugging Face tokenizer behind :class:`kalypso.engine.protocol.Tokenizer`.

* :meth:`HFTokenizer.encode` (data) calls ``tokenizer(text, add_special_tokens=False,
  split_special_tokens=True)``: a special-token string inside data (``"<|im_end|>"``) is
  split into ordinary tokens, never mapped to its control id (without
  ``split_special_tokens`` it would be: id 2 for SmolLM2).
* :meth:`HFTokenizer.encode_control` (template text) recognises special tokens.
* :meth:`HFTokenizer.render_chat` is the model's own chat template
  (``apply_chat_template(tokenize=False)``). A template that rejects the system role (it
  raises, as Gemma's does) is retried with the system message folded into the first user
  turn: ``system + "\\n\\n" + user``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from kalypso.engine.protocol import EngineError

logger = logging.getLogger(__name__)


class HFTokenizer:
    """Adapts a Hugging Face tokenizer to :class:`kalypso.engine.protocol.Tokenizer`."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self._hf = hf_tokenizer

    @property
    def hf(self) -> Any:
        """The wrapped Hugging Face tokenizer."""
        return self._hf

    def encode(self, text: str) -> list[int]:
        """Token ids of data ``text``: no special tokens added, none recognised."""
        encoded = self._hf(text, add_special_tokens=False, split_special_tokens=True)
        return [int(t) for t in encoded["input_ids"]]

    def encode_control(self, text: str) -> list[int]:
        """Token ids of template ``text``: special-token strings become control ids."""
        encoded = self._hf(text, add_special_tokens=False, split_special_tokens=False)
        return [int(t) for t in encoded["input_ids"]]

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._hf.decode(list(token_ids), skip_special_tokens=True))

    @property
    def eos_token_id(self) -> int | None:
        eos = self._hf.eos_token_id
        return int(eos) if eos is not None else None

    def render_chat(
        self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool
    ) -> str:
        """The model's chat template applied to ``(role, content)`` messages.

        Raises:
            EngineError: the tokenizer has no chat template, or the template rejects the
                messages even with the system message folded into the first user turn.
        """
        if not getattr(self._hf, "chat_template", None):
            raise EngineError("the tokenizer has no chat template; set tokenizer.chat_template")
        conversation = [{"role": role, "content": content} for role, content in messages]
        try:
            return self._apply(conversation, add_generation_prompt)
        except Exception as exc:
            if not any(m["role"] == "system" for m in conversation):
                raise EngineError(f"the chat template rejected the messages: {exc}") from exc
            logger.debug("chat template rejected the system role (%s): folding it", exc)
            first_error = exc
        folded = fold_system_message(messages)
        try:
            return self._apply(
                [{"role": r, "content": c} for r, c in folded], add_generation_prompt
            )
        except Exception as exc:
            raise EngineError(
                f"the chat template rejected the messages ({first_error}), also with the"
                f" system message folded into the first user turn ({exc})"
            ) from exc

    def _apply(self, conversation: list[dict[str, str]], add_generation_prompt: bool) -> str:
        rendered = self._hf.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        return str(rendered)


def fold_system_message(messages: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Messages without a system role: the system contents (joined by blank lines) go in
    front of the first user turn, separated from it by a blank line (or become the first
    user turn when there is none)."""
    system = [content for role, content in messages if role == "system"]
    rest = [(role, content) for role, content in messages if role != "system"]
    if not system:
        return rest
    preamble = "\n\n".join(system)
    for index, (role, content) in enumerate(rest):
        if role == "user":
            rest[index] = (role, f"{preamble}\n\n{content}")
            return rest
    return [("user", preamble), *rest]


def load_hf_tokenizer(model_path: str) -> HFTokenizer:
    """The model's own tokenizer, loaded with ``transformers`` (no engine needed)."""
    from transformers import AutoTokenizer

    return HFTokenizer(AutoTokenizer.from_pretrained(model_path))
