"""Token-exact prompt layout for prefix sharing.

Every prompt Kalypso sends has the layout::

    [ system | tuple context | task instruction ]
    '--------- shared ------'  '--- per op ----'

rendered in the model's chat format (ChatML for the bundled SmolLM2)::

    <|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{context}\\n\\n{task}<|im_end|>\\n<|im_start|>assistant\\n

Each piece is tokenized on its own and the ids are concatenated, so two prompts with the
same system and context share their first ``len(prefix_ids)`` tokens exactly, whatever the
task (tokenizing the joined string could merge tokens across the boundary). The context is
tokenized once per tuple and reused by every operator on that tuple.
"""

from __future__ import annotations

from dataclasses import dataclass

from kalypso.engine.protocol import Tokenizer

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful data analyst. Answer the question about the document that follows,"
    " briefly and exactly as asked."
)


@dataclass(frozen=True)
class ChatFormat:
    """The strings around each piece (defaults: ChatML, as SmolLM2 and Qwen use)."""

    system_start: str = "<|im_start|>system\n"
    system_end_user_start: str = "<|im_end|>\n<|im_start|>user\n"
    context_task_separator: str = "\n\n"
    assistant_start: str = "<|im_end|>\n<|im_start|>assistant\n"


class PromptLayout:
    """Builds prompts as token ids with a token-exact shared prefix per tuple.

    ``prefix_ids(context)`` is ``[system | context]``; ``prompt_ids(prefix, task)`` appends
    the task. Token ids of repeated pieces are memoized per layout.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        chat_format: ChatFormat | None = None,
    ) -> None:
        self._tokenizer = tokenizer
        self._format = chat_format or ChatFormat()
        fmt = self._format
        self._head_ids = tuple(
            tokenizer.encode(fmt.system_start + system_prompt + fmt.system_end_user_start)
        )
        self._task_cache: dict[str, tuple[int, ...]] = {}

    @property
    def head_tokens(self) -> int:
        """Tokens of the system part every prompt starts with."""
        return len(self._head_ids)

    def encode_context(self, context: str) -> tuple[int, ...]:
        """The token ids of one tuple's context (call once per tuple)."""
        return tuple(self._tokenizer.encode(context))

    def prefix_ids(self, context_ids: tuple[int, ...]) -> tuple[int, ...]:
        """``[system | context]``: what every operator's prompt on this tuple starts with."""
        return self._head_ids + context_ids

    def prompt_ids(self, prefix_ids: tuple[int, ...], task: str) -> tuple[int, ...]:
        """``prefix`` followed by the task instruction and the assistant turn."""
        suffix = self._task_cache.get(task)
        if suffix is None:
            fmt = self._format
            suffix = tuple(
                self._tokenizer.encode(fmt.context_task_separator + task + fmt.assistant_start)
            )
            self._task_cache[task] = suffix
        return prefix_ids + suffix
